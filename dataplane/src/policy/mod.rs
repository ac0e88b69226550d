//! The policy host: runs a [`Policy`](perf_policy_sdk::Policy), validates
//! every decision it returns, and falls back to a safe default (whole
//! messages, no cap) for anything invalid, counting what it rejected.
//!
//! Built-in native policies: [`passthrough`] (no isolation) and [`perf`]
//! (PeRF's message- and QP-level preemption with fixed parameters).

pub mod passthrough;
pub mod perf;

use perf_policy_sdk::{Policy, RequestInfo, SplitPlan, TenantInfo, TenantPlan, TenantStats};

/// Counters of the policy host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyCounters {
    /// Hook calls made.
    pub calls: u64,
    /// Decisions rejected by validation (replaced by the safe default).
    pub rejections: u64,
}

/// Runs one policy and checks its answers.
pub struct PolicyHost {
    policy: Box<dyn Policy + Send>,
    /// Counters.
    pub counters: PolicyCounters,
}

impl PolicyHost {
    /// Hosts `policy`.
    pub fn new(policy: Box<dyn Policy + Send>) -> Self {
        PolicyHost { policy, counters: PolicyCounters::default() }
    }

    /// The built-in policy called `name`, if there is one.
    pub fn builtin(name: &str) -> Option<Self> {
        let p: Box<dyn Policy + Send> = match name {
            "passthrough" => Box::new(passthrough::Passthrough),
            "perf" => Box::new(perf::Perf::default()),
            _ => return None,
        };
        Some(Self::new(p))
    }

    /// Names and one-line descriptions of the built-in policies.
    pub const BUILTINS: &'static [(&'static str, &'static str)] = &[
        ("passthrough", "no isolation: requests go to the NIC unchanged (the NIC's own round-robin)"),
        ("perf", "PeRF: 16 KB sub-requests, zero-weight WRs while sensitive tenants run, 2 active QPs per tenant"),
    ];

    /// The policy's name.
    pub fn name(&self) -> &str {
        self.policy.name()
    }

    /// How often to tick, in ns (at least 10 us).
    pub fn tick_interval_ns(&self) -> u64 {
        self.policy.tick_interval_ns().max(10_000)
    }

    /// A tenant appeared.
    pub fn on_tenant(&mut self, t: &TenantInfo) {
        self.counters.calls += 1;
        self.policy.on_tenant(t);
    }

    /// The validated split plan for a request.
    pub fn on_request(&mut self, req: &RequestInfo, plan: &TenantPlan) -> SplitPlan {
        self.counters.calls += 1;
        let s = self.policy.on_request(req, plan);
        match s.validate() {
            Ok(()) => s,
            Err(_) => {
                self.counters.rejections += 1;
                SplitPlan::WHOLE
            }
        }
    }

    /// Runs the tick hook; invalid plans are replaced by passthrough.
    pub fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        self.counters.calls += 1;
        self.policy.on_tick(now_ns, stats, plans);
        for p in plans.iter_mut() {
            if p.validate().is_err() {
                self.counters.rejections += 1;
                *p = TenantPlan::PASSTHROUGH;
            }
        }
    }
}
