//! The policy host: runs a policy, native ([`Policy`]) or a sandboxed
//! wasm module ([`wasm::WasmPolicy`]), validates every decision it returns,
//! and falls back to a safe default (whole messages, no cap) for anything
//! invalid, counting what it rejected.
//!
//! A wasm policy that traps, runs past its deadline, or returns an invalid
//! or undecodable decision is replaced by the built-in `passthrough`; the
//! host records why ([`ExitInfo`], like sched_ext's exit info) and traffic
//! keeps flowing. A native policy's invalid decisions are only replaced
//! (it cannot trap or loop within the sandbox's bounds, so it stays).
//!
//! Built-in native policies, one table for all ([`registry`]):
//! [`passthrough`] (no isolation), `perf` ([`perf_policy`]: PeRF's message-
//! and QP-level preemption), `justitia` (the Justitia baseline: paced posts), `weighted`
//! (weighted shares over PeRF), `slo` (PeRF tuned online to a latency
//! target) and `fairshare`, from `policies/*` (`docs/policies.md`); the
//! same code is embedded as wasm modules ([`wasm::embedded`]). Besides plans, a policy may rate-limit tenants
//! ([`PolicyHost::on_pacing`], ABI 1.1).

pub mod cache;
mod delta;
pub mod loader;
pub mod passthrough;
pub mod perf_policy;
pub mod registry;
pub mod wasm;

use perf_policy_sdk::{
    LoopInfo, Pacing, ParamError, Policy, Rejection, RequestCalls, RequestInfo, RequestOp, SplitPlan, TenantInfo,
    TenantPlan, TenantStats, ZeroWeightOp,
};
use wasm::{Fault, FaultKind, LoadError, WasmLimits, WasmPolicy};

/// Counters of the policy host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyCounters {
    /// Hook calls made. An `on_request` the host answered from the plan
    /// ([`PolicyCounters::plan_answers`]) counts as a call too, so that
    /// the figures that charge per call (the loop's cost model) stay as
    /// they were.
    pub calls: u64,
    /// `on_request`s the host answered from the tenant's plan without
    /// calling the policy, as the policy declared it may
    /// ([`Policy::request_calls`], ABI 1.5).
    pub plan_answers: u64,
    /// Decisions rejected by validation (replaced by the safe default).
    pub rejections: u64,
    /// Calls into a wasm policy that trapped or timed out.
    pub traps: u64,
    /// Times the host dropped a wasm policy for the built-in passthrough.
    pub fallbacks: u64,
}

/// Why the host dropped a wasm policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExitInfo {
    /// What happened.
    pub kind: FaultKind,
    /// The trap message or what was invalid.
    pub message: String,
    /// The hook that failed (`on_tick`, `on_request`, ...).
    pub hook: &'static str,
    /// The dataplane time of the last tick before the failure, in ns.
    pub at_ns: u64,
    /// The name of the dropped policy.
    pub policy: String,
}

enum Hosted {
    Native(Box<dyn Policy + Send>),
    Wasm(Box<WasmPolicy>),
}

impl Hosted {
    fn name(&self) -> &str {
        match self {
            Hosted::Native(p) => p.name(),
            Hosted::Wasm(w) => w.name(),
        }
    }
}

/// Most exit records a host keeps (older ones are dropped).
pub const MAX_EXITS: usize = 64;

/// The first of a wasm policy's per-tenant records that `validate`
/// rejects, as the fault that drops the module (`"{what} of tenant i"`),
/// among the records at `new` (`None`: every record; the others are ones
/// the host validated before).
fn first_invalid<T>(
    what: &str,
    records: &[T],
    new: Option<&[u32]>,
    validate: impl Fn(&T) -> Result<(), Rejection>,
) -> Result<(), Fault> {
    let check = |i: usize| records.get(i).and_then(|r| validate(r).err().map(|e| (i, e)));
    let found = match new {
        Some(new) => new.iter().find_map(|&i| check(i as usize)),
        None => (0..records.len()).find_map(check),
    };
    match found {
        None => Ok(()),
        Some((i, e)) => {
            Err(Fault { kind: FaultKind::InvalidDecision, message: format!("{what} of tenant {i}: {e:?}") })
        }
    }
}

/// A run-time parameter of a policy: key and value, as text.
pub type Param<'a> = (&'a str, &'a str);

/// Splits a policy spec into the policy (a built-in name, `wasm:NAME` or a
/// `.wasm` path) and its run-time parameters: `perf:max_active_qps=2,
/// quantum_requests=64` is `perf` with two parameters. The parameters are
/// what follows the last `:` when it holds a `=`; each is `key=value`
/// with a non-empty key, and a key may appear once.
pub fn split_params(spec: &str) -> Result<(&str, Vec<Param<'_>>), LoadError> {
    let Some((base, tail)) = spec.rsplit_once(':').filter(|(_, t)| t.contains('=')) else {
        return Ok((spec, Vec::new()));
    };
    let mut params: Vec<Param<'_>> = Vec::new();
    for item in tail.split(',') {
        let bad = |why: &str| LoadError::Param { policy: base.into(), param: item.into(), why: why.into() };
        let (k, v) = item.split_once('=').ok_or_else(|| bad("expected key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            return Err(bad("expected key=value with a key and a value"));
        }
        if params.iter().any(|(seen, _)| *seen == k) {
            return Err(bad("the key is given twice"));
        }
        params.push((k, v));
    }
    Ok((base, params))
}

/// Runs one policy and checks its answers.
pub struct PolicyHost {
    policy: Hosted,
    /// Counters.
    pub counters: PolicyCounters,
    /// Exits so far, oldest first (at most [`MAX_EXITS`]); carried over
    /// swaps by [`PolicyHost::inherit`].
    exits: Vec<ExitInfo>,
    /// Whether the running policy has exited (the last exit is its own).
    exited: bool,
    last_now_ns: u64,
    reset_plans: bool,
    /// Drop the pacing of a policy the host fell back from.
    reset_pacing: bool,
    wasm_tick_ns: u64,
    /// Which requests the policy wants `on_request` for (read after
    /// creation, parameters and ticks).
    request_calls: RequestCalls,
    /// Which WQE the policy's zero-weight WRs are (read with `request_calls`).
    zero_weight_op: ZeroWeightOp,
    /// Each tenant's zero-weight carry, for a policy that declares
    /// [`RequestCalls::PlanWithCarry`] (ABI 1.8), by tenant index.
    carry: Vec<u64>,
    /// A native policy's last tick, for its changed list (ABI 1.9).
    delta: delta::TickDelta,
    /// The policy the watchdog took control from, kept for
    /// [`PolicyHost::reinstate`].
    reclaimed: Option<Hosted>,
}

impl PolicyHost {
    /// Hosts `policy`.
    pub fn new(policy: Box<dyn Policy + Send>) -> Self {
        Self::hosting(Hosted::Native(policy))
    }

    fn hosting(policy: Hosted) -> Self {
        let mut h = PolicyHost {
            policy,
            counters: PolicyCounters::default(),
            exits: Vec::new(),
            exited: false,
            last_now_ns: 0,
            reset_plans: false,
            reset_pacing: false,
            wasm_tick_ns: passthrough::Passthrough.tick_interval_ns(),
            request_calls: RequestCalls::Every,
            zero_weight_op: ZeroWeightOp::Wait,
            carry: Vec::new(),
            delta: delta::TickDelta::default(),
            reclaimed: None,
        };
        h.refresh_tick();
        h
    }

    /// Hosts a loaded wasm policy.
    pub fn wasm(policy: WasmPolicy) -> Self {
        Self::hosting(Hosted::Wasm(Box::new(policy)))
    }

    /// Loads, validates and hosts a wasm module from its bytes.
    pub fn from_wasm_bytes(bytes: &[u8], limits: WasmLimits) -> Result<Self, LoadError> {
        WasmPolicy::from_bytes(bytes, limits).map(Self::wasm)
    }

    /// The built-in policy called `name`, if there is one.
    pub fn builtin(name: &str) -> Option<Self> {
        registry::by_name(name).map(|r| Self::new(r.native()))
    }

    /// A policy by name or path: a built-in name (`perf`, `passthrough`),
    /// `wasm:NAME` for an embedded wasm module of the repository's own
    /// policies, or the path of a `.wasm` file, with default limits;
    /// optionally followed by run-time parameters, `:key=value,key=value`
    /// ([`split_params`]). Modules come from the module cache
    /// ([`cache::ModuleCache`]).
    pub fn load(name_or_path: &str) -> Result<Self, LoadError> {
        Self::load_with(name_or_path, WasmLimits::default()).map(|(h, _)| h)
    }

    /// [`PolicyHost::load`] with `limits` for a wasm module; also says
    /// whether the module came from the cache.
    pub fn load_with(spec: &str, limits: WasmLimits) -> Result<(Self, bool), LoadError> {
        let (name_or_path, params) = split_params(spec)?;
        let (mut host, cached) = Self::load_plain(name_or_path, limits)?;
        host.set_params(name_or_path, &params)?;
        Ok((host, cached))
    }

    /// Sets run-time parameters in order (before the first tenant); the
    /// first refused is the error, naming `label`, the parameter and why.
    pub fn set_params(&mut self, label: &str, params: &[Param<'_>]) -> Result<(), LoadError> {
        for (key, value) in params {
            let err = |why: String| LoadError::Param { policy: label.into(), param: format!("{key}={value}"), why };
            let refused = match &mut self.policy {
                Hosted::Native(p) => p.set_param(key, value).err(),
                Hosted::Wasm(w) => w.set_param(key, value).map_err(|f| err(format!("the module failed: {f}")))?,
            };
            match refused {
                None => {}
                Some(ParamError::UnknownKey) => {
                    return Err(err(format!(
                        "`{}` has no parameter `{key}` (docs/policies.md lists them)",
                        self.name()
                    )))
                }
                Some(ParamError::BadValue) => return Err(err(format!("{value:?} is not a valid value of `{key}`"))),
                Some(ParamError::Malformed) => {
                    return Err(err(format!("not UTF-8 or longer than {} bytes", perf_policy_sdk::abi::PARAMS_SIZE)))
                }
            }
        }
        self.refresh_tick();
        match self.exit_info() {
            Some(e) => Err(LoadError::Param {
                policy: label.into(),
                param: String::new(),
                why: format!("the policy failed after its parameters were set: {}", e.message),
            }),
            None => Ok(()),
        }
    }

    fn load_plain(name_or_path: &str, limits: WasmLimits) -> Result<(Self, bool), LoadError> {
        if let Some(h) = Self::builtin(name_or_path) {
            return Ok((h, false));
        }
        let bytes;
        let module: &[u8] = if let Some(name) = name_or_path.strip_prefix("wasm:") {
            wasm::embedded::by_name(name).ok_or_else(|| LoadError::UnknownPolicy(name_or_path.into()))?
        } else {
            let path = std::path::Path::new(name_or_path);
            if !path.exists() {
                return Err(LoadError::UnknownPolicy(name_or_path.into()));
            }
            bytes = wasm::read_module_file(path, limits.max_module_bytes)?;
            &bytes
        };
        WasmPolicy::load_cached(module, limits).map(|(w, hit)| (Self::wasm(w), hit))
    }

    /// The built-in policies: names and one-line descriptions, in the
    /// registry's order.
    pub const BUILTINS: &'static [registry::Registered] = registry::REGISTRY;

    /// The policy's name (`passthrough` after a fallback).
    pub fn name(&self) -> &str {
        self.policy.name()
    }

    /// Whether the running policy is a wasm module.
    pub fn is_wasm(&self) -> bool {
        matches!(self.policy, Hosted::Wasm(_))
    }

    /// The ABI version of the running wasm policy (`None` for a native one).
    pub fn wasm_abi_version(&self) -> Option<(u16, u16)> {
        match &self.policy {
            Hosted::Wasm(w) => Some(w.abi_version()),
            Hosted::Native(_) => None,
        }
    }

    /// Why the host dropped the running policy, if it did (`None` while it
    /// runs, including after a swap to a new one).
    pub fn exit_info(&self) -> Option<&ExitInfo> {
        self.exits.last().filter(|_| self.exited)
    }

    /// Every exit recorded, oldest first, including those of policies
    /// swapped out since (see [`PolicyHost::inherit`]).
    pub fn exits(&self) -> &[ExitInfo] {
        &self.exits
    }

    /// Takes over `old`'s counters and exit records, so that a dataplane's
    /// figures run on across a swap.
    pub fn inherit(&mut self, old: &PolicyHost) {
        let c = &mut self.counters;
        c.calls += old.counters.calls;
        c.rejections += old.counters.rejections;
        c.traps += old.counters.traps;
        c.fallbacks += old.counters.fallbacks;
        c.plan_answers += old.counters.plan_answers;
        let mine = std::mem::take(&mut self.exits);
        self.exits = old.exits.iter().cloned().chain(mine).collect();
        let extra = self.exits.len().saturating_sub(MAX_EXITS);
        self.exits.drain(..extra);
    }

    /// Touches a wasm policy's buffers so that their pages are mapped before
    /// its first call on the dataplane core (the loader does this).
    pub fn prefault(&mut self) {
        if let Hosted::Wasm(w) = &mut self.policy {
            w.prefault();
        }
    }

    /// Whether the running policy is the native passthrough (nothing to
    /// fall back to).
    pub fn is_passthrough(&self) -> bool {
        matches!(&self.policy, Hosted::Native(p) if p.name() == "passthrough")
    }

    /// The watchdog takes control back: drops the running policy for
    /// passthrough with a [`FaultKind::Watchdog`] exit saying why.
    /// The displaced policy is kept: [`PolicyHost::reinstate`] puts it back.
    pub fn reclaim(&mut self, now_ns: u64, why: String) {
        self.last_now_ns = now_ns;
        let old = self.fall_back("watchdog", Fault::new(FaultKind::Watchdog, why));
        self.reclaimed = Some(old);
    }

    /// The name of the policy the watchdog took control from and keeps for
    /// reinstatement, if any.
    pub fn reclaimed_name(&self) -> Option<&str> {
        self.reclaimed.as_ref().map(Hosted::name)
    }

    /// Puts back the policy the watchdog took control from (its starved
    /// QP has drained); `false` if there is none. Every plan is reset, as
    /// after a swap; the caller announces the tenants that changed since.
    pub fn reinstate(&mut self, now_ns: u64) -> bool {
        let Some(p) = self.reclaimed.take() else { return false };
        self.last_now_ns = now_ns;
        self.policy = p;
        self.exited = false;
        self.reset_plans = true;
        self.delta.forget();
        self.refresh_tick();
        true
    }

    /// The wasm policy's log lines (empty for a native policy).
    pub fn wasm_log(&self) -> &[String] {
        match &self.policy {
            Hosted::Wasm(w) => w.log(),
            Hosted::Native(_) => &[],
        }
    }

    /// Drops the running policy for passthrough, recording why; returns the
    /// policy dropped.
    fn fall_back(&mut self, hook: &'static str, fault: Fault) -> Hosted {
        if matches!(fault.kind, FaultKind::Trap | FaultKind::Timeout) {
            self.counters.traps += 1;
        }
        self.counters.fallbacks += 1;
        if self.exits.len() >= MAX_EXITS {
            self.exits.remove(0);
        }
        self.exits.push(ExitInfo {
            kind: fault.kind,
            message: fault.message,
            hook,
            at_ns: self.last_now_ns,
            policy: self.name().to_string(),
        });
        self.exited = true;
        let old = std::mem::replace(&mut self.policy, Hosted::Native(Box::new(passthrough::Passthrough)));
        self.request_calls = passthrough::Passthrough.request_calls();
        self.zero_weight_op = passthrough::Passthrough.zero_weight_op();
        self.reset_plans = true;
        self.reset_pacing = true;
        self.delta.forget();
        old
    }

    /// `record` if `validate` accepts it, else `fallback`, counted as a
    /// rejection (a native policy's decision, or one answered from the plan).
    fn valid_or<T>(
        counters: &mut PolicyCounters,
        record: T,
        validate: impl Fn(&T) -> Result<(), Rejection>,
        fallback: T,
    ) -> T {
        if validate(&record).is_ok() {
            record
        } else {
            counters.rejections += 1;
            fallback
        }
    }

    /// A wasm module's decisions failed with `fault` in `hook`: a nonsense
    /// decision counts as a rejection, every record of `out` becomes
    /// `fallback`, and the module is dropped for passthrough.
    fn drop_decisions<T: Copy>(&mut self, hook: &'static str, fault: Fault, out: &mut [T], fallback: T) {
        if fault.kind == FaultKind::InvalidDecision {
            self.counters.rejections += 1;
        }
        out.fill(fallback);
        self.fall_back(hook, fault);
    }

    /// How often to tick, in ns (at least 10 us). A wasm policy's interval
    /// is read at load and after each tick.
    pub fn tick_interval_ns(&self) -> u64 {
        let v = match &self.policy {
            Hosted::Native(p) => p.tick_interval_ns(),
            Hosted::Wasm(_) => self.wasm_tick_ns,
        };
        v.max(10_000)
    }

    /// Re-reads what the policy says of itself: a wasm policy's tick
    /// interval (from its control block, ABI 1.5, else by a call), which
    /// requests need `on_request` ([`Policy::request_calls`]) and which WQE
    /// its zero-weight WRs are ([`Policy::zero_weight_op`]).
    fn refresh_tick(&mut self) {
        match &mut self.policy {
            Hosted::Native(p) => {
                self.request_calls = p.request_calls();
                self.zero_weight_op = p.zero_weight_op();
            }
            Hosted::Wasm(w) => {
                self.request_calls = w.request_calls();
                self.zero_weight_op = w.zero_weight_op();
                if let Some(v) = w.declared_tick_interval_ns() {
                    self.wasm_tick_ns = v;
                    return;
                }
                match w.tick_interval_ns() {
                    Ok(v) => self.wasm_tick_ns = v,
                    Err(f) => {
                        self.fall_back("tick_interval_ns", f);
                    }
                }
            }
        }
    }

    /// Which requests the running policy wants `on_request` for (the host
    /// answers the others from the plan).
    pub fn request_calls(&self) -> RequestCalls {
        self.request_calls
    }

    /// Which WQE the running policy's zero-weight WRs are (ABI 1.6).
    pub fn zero_weight_op(&self) -> ZeroWeightOp {
        self.zero_weight_op
    }

    /// A tenant appeared.
    pub fn on_tenant(&mut self, t: &TenantInfo) {
        self.counters.calls += 1;
        match &mut self.policy {
            Hosted::Native(p) => p.on_tenant(t),
            Hosted::Wasm(w) => {
                if let Err(f) = w.on_tenant(t) {
                    self.fall_back("on_tenant", f);
                }
            }
        }
    }

    /// Whether a request of `len` bytes and `op` goes whole by the plan's
    /// rule with no call (the policy declared such answers its own, ABI
    /// 1.5, [`RequestCalls::answer`]): what [`PolicyHost::on_request`]
    /// would answer, [`SplitPlan::WHOLE`], counted as it would count it.
    /// `false` leaves the request to `on_request`.
    pub fn answers_whole(&mut self, len: u64, op: RequestOp, plan: &TenantPlan) -> bool {
        let sends = match self.request_calls {
            RequestCalls::Every => return false,
            RequestCalls::Plan { sends }
            | RequestCalls::PlanExceptShort { sends }
            | RequestCalls::PlanWithCarry { sends, .. } => sends,
        };
        let whole = plan.split_threshold == 0 || len < plan.split_threshold || (op == RequestOp::Send && !sends);
        if whole {
            self.counters.calls += 1;
            self.counters.plan_answers += 1;
        }
        whole
    }

    /// The validated split plan for a request.
    pub fn on_request(&mut self, req: &RequestInfo, plan: &TenantPlan) -> SplitPlan {
        self.counters.calls += 1;
        let t = req.tenant as usize;
        if matches!(self.request_calls, RequestCalls::PlanWithCarry { .. }) && self.carry.len() <= t {
            self.carry.resize(t + 1, 0);
        }
        let mut no_carry = 0;
        let carry = self.carry.get_mut(t).unwrap_or(&mut no_carry);
        if let Some(s) = self.request_calls.answer(req, plan, carry) {
            // The policy declared this answer its own (ABI 1.5): no call.
            self.counters.plan_answers += 1;
            return Self::valid_or(&mut self.counters, s, SplitPlan::validate, SplitPlan::WHOLE);
        }
        let s = match &mut self.policy {
            Hosted::Native(p) => p.on_request(req, plan),
            Hosted::Wasm(w) => match w.on_request(req, plan) {
                Ok(s) if s.validate().is_ok() => s,
                Ok(s) => {
                    self.counters.rejections += 1;
                    let why = format!("split plan {s:?}: {:?}", s.validate().err());
                    self.fall_back("on_request", Fault { kind: FaultKind::InvalidDecision, message: why });
                    return SplitPlan::WHOLE;
                }
                Err(f) => {
                    self.fall_back("on_request", f);
                    return SplitPlan::WHOLE;
                }
            },
        };
        // Before ABI 1.4 a split plan on a SEND meant nothing: keep it so.
        if req.op == RequestOp::Send && self.wasm_abi_version().is_some_and(|v| v < (1, 4)) {
            return SplitPlan::WHOLE;
        }
        Self::valid_or(&mut self.counters, s, SplitPlan::validate, SplitPlan::WHOLE)
    }

    /// Tells the policy the loop's load and costs before its next tick
    /// (ABI 1.7, `Policy::on_loop`; a wasm module gets them in its loop
    /// block, which its `perf_on_tick` reads).
    pub fn on_loop(&mut self, info: &LoopInfo) {
        match &mut self.policy {
            Hosted::Native(p) => p.on_loop(info),
            Hosted::Wasm(w) => {
                if let Err(f) = w.write_loop(info) {
                    self.fall_back("on_loop", f);
                }
            }
        }
    }

    /// Runs the tick hook; invalid plans are replaced by passthrough.
    pub fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        self.counters.calls += 1;
        self.last_now_ns = now_ns;
        if self.reset_plans {
            // The first tick after a fallback: drop the old policy's plans.
            self.reset_plans = false;
            plans.fill(TenantPlan::PASSTHROUGH);
        }
        match &mut self.policy {
            Hosted::Native(p) if p.tick_changes() => {
                let changed = self.delta.changed(stats, plans);
                p.on_tick_changed(now_ns, stats, changed, plans);
                self.request_calls = p.request_calls();
                self.zero_weight_op = p.zero_weight_op();
                // Only the plans new to the host need validating.
                for &i in self.delta.left(plans) {
                    if let Some(p) = plans.get_mut(i as usize) {
                        *p = Self::valid_or(&mut self.counters, *p, TenantPlan::validate, TenantPlan::PASSTHROUGH);
                    }
                }
            }
            Hosted::Native(p) => {
                p.on_tick(now_ns, stats, plans);
                self.request_calls = p.request_calls();
                self.zero_weight_op = p.zero_weight_op();
                for p in plans.iter_mut() {
                    *p = Self::valid_or(&mut self.counters, *p, TenantPlan::validate, TenantPlan::PASSTHROUGH);
                }
            }
            Hosted::Wasm(w) => {
                let res = w
                    .on_tick(now_ns, stats, plans)
                    .and_then(|()| first_invalid("plan", plans, w.new_plans(), TenantPlan::validate));
                if let Err(f) = res {
                    self.drop_decisions("on_tick", f, plans, TenantPlan::PASSTHROUGH);
                    self.reset_plans = false;
                    return;
                }
                self.refresh_tick();
            }
        }
    }

    /// Runs the pacing hook right after [`PolicyHost::on_tick`]: `pacing[i]`
    /// holds tenant `i`'s current rate limit and receives the new one. An
    /// invalid record is replaced by [`Pacing::UNLIMITED`] (a native
    /// policy) or drops the wasm policy for passthrough; a wasm module of
    /// ABI 1.0 leaves every tenant unlimited.
    pub fn on_pacing(&mut self, now_ns: u64, pacing: &mut [Pacing]) {
        if self.reset_pacing {
            self.reset_pacing = false;
            pacing.fill(Pacing::UNLIMITED);
        }
        match &mut self.policy {
            Hosted::Native(p) => p.on_pacing(now_ns, pacing),
            Hosted::Wasm(w) => {
                let res = w
                    .read_pacing(pacing)
                    .and_then(|()| first_invalid("pacing", pacing, w.new_pacing(), Pacing::validate));
                if let Err(f) = res {
                    self.drop_decisions("on_pacing", f, pacing, Pacing::UNLIMITED);
                    self.reset_pacing = false;
                }
                return;
            }
        }
        for p in pacing.iter_mut() {
            *p = Self::valid_or(&mut self.counters, *p, Pacing::validate, Pacing::UNLIMITED);
        }
    }
}
