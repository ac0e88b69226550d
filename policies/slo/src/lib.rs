//! `slo`: PeRF with its two hand-tuned knobs, the sub-request size and the
//! zero-weight WRs per chunk, adapted online to meet a latency target for
//! delay-sensitive tenants while leaving bulk tenants the most bandwidth
//! (`docs/policies.md#slo` has the control law and a measured trajectory).
//!
//! The knobs move together along a ladder of settings ordered from the
//! strongest isolation (and the highest cost to bulk tenants: more WQEs,
//! more NIC turns without data) to the weakest: `(4 KB, 16)`, `(8 KB,
//! 16)`, PeRF's `(16 KB, 16)`, then fewer zero-weight WRs `(16 KB, 8 ..
//! 1)`, then bigger chunks `(32 KB .. 1 MB, 1)`. The controller starts at
//! PeRF's setting and, every tick (500 us) with a delay-sensitive tenant
//! active, compares their mean post-to-completion latency `L` with the
//! target `T`:
//! - `L > T`: one step toward isolation at once, and the level just left
//!   becomes a ceiling for a back-off time: `backoff_ns` doubled (up to
//!   `max_backoff_ns`) if the violation follows a step up within
//!   `2 x hold_ticks` ticks (a failed probe), reset to `backoff_ns`
//!   otherwise (the load changed);
//! - `L < T (1 - margin)` for `hold_ticks` ticks in a row: one step toward
//!   bulk throughput, unless that would pass an unexpired ceiling;
//! - otherwise: stay.
//!
//! So it climbs to the loosest setting that meets the target, backs off
//! at the first violation, and probes the next level ever more rarely: it
//! settles. While a message-sensitive tenant is active the zero-weight
//! count never drops below PeRF's `chunk / 0_WAIT_UNIT` (message rate
//! needs the turns); without a delay-sensitive tenant the plans are
//! PeRF's.
#![cfg_attr(target_arch = "wasm32", no_std)]

use perf_policy_common::{chunk_granule, Perf, PerfParams};
use perf_policy_sdk::{
    export_policy, parse_param, parse_param_min, ParamError, Policy, TenantClass, TenantPlan, TenantStats,
};

/// The settings the controller moves along, `(chunk bytes, zero-weight
/// WRs per chunk)`, strongest isolation first.
pub const LADDER: [(u32, u32); 13] = [
    (4096, 16),
    (8192, 16),
    (16384, 16),
    (16384, 8),
    (16384, 4),
    (16384, 2),
    (16384, 1),
    (32768, 1),
    (65536, 1),
    (131072, 1),
    (262144, 1),
    (524288, 1),
    (1048576, 1),
];

/// The ladder index of PeRF's own setting (16 KB, 16), where it starts.
pub const PERF_LEVEL: usize = 2;

/// Which latency figure of the tick statistics the controller steers by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// The per-tick 99th percentile (`TenantStats::p99_latency_ns`, ABI
    /// 1.2): the default, for a tail target.
    P99,
    /// The per-tick mean (`TenantStats::mean_latency_ns`).
    Mean,
}

/// The SLO policy's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SloParams {
    /// The PeRF mechanism underneath (its tick is the control period).
    pub perf: PerfParams,
    /// Target of the delay-sensitive tenants' post-to-completion latency
    /// per tick (the figure [`SloParams::signal`] picks), ns.
    pub target_ns: u64,
    /// The figure steered by (the per-tick p99).
    pub signal: Signal,
    /// Relax only below `target x (1 - margin)` (0.1).
    pub margin: f64,
    /// Ticks in a row under that before one step toward throughput (2).
    pub hold_ticks: u32,
    /// First back-off after a violation, ns (4 ms).
    pub backoff_ns: u64,
    /// Longest back-off, ns (64 ms).
    pub max_backoff_ns: u64,
}

impl Default for SloParams {
    fn default() -> Self {
        SloParams {
            perf: PerfParams { tick_interval_ns: 500_000, ..PerfParams::default() },
            target_ns: 4000,
            signal: Signal::P99,
            margin: 0.1,
            hold_ticks: 2,
            backoff_ns: 4_000_000,
            max_backoff_ns: 64_000_000,
        }
    }
}

impl SloParams {
    /// The run-time parameter names of the controller; every name of
    /// [`PerfParams::KEYS`] is taken too (the mechanism underneath).
    pub const KEYS: &'static [&'static str] =
        &["target_ns", "signal", "margin", "hold_ticks", "backoff_ns", "max_backoff_ns"];

    /// Sets the parameter `key` from its text `value`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        match key {
            "target_ns" => self.target_ns = parse_param_min(value, 1)?,
            "signal" => {
                self.signal = match value.trim() {
                    "p99" => Signal::P99,
                    "mean" => Signal::Mean,
                    _ => return Err(ParamError::BadValue),
                }
            }
            "margin" => {
                let m: f64 = parse_param(value)?;
                if !(0.0..1.0).contains(&m) {
                    return Err(ParamError::BadValue);
                }
                self.margin = m;
            }
            "hold_ticks" => self.hold_ticks = parse_param_min(value, 1)?,
            "backoff_ns" => self.backoff_ns = parse_param(value)?,
            "max_backoff_ns" => self.max_backoff_ns = parse_param(value)?,
            _ => return self.perf.set(key, value),
        }
        Ok(())
    }
}

/// The SLO policy.
#[derive(Debug, Clone)]
pub struct Slo {
    /// Parameters.
    pub params: SloParams,
    perf: Perf,
    level: usize,
    ceiling: usize,
    ceiling_until_ns: u64,
    backoff_ns: u64,
    good: u32,
    /// Ticks since the last step up.
    since_up: u32,
}

perf_policy_common::default_from_params!(Slo, SloParams);

impl Slo {
    /// The SLO policy with `params`.
    pub fn new(params: SloParams) -> Self {
        Slo {
            params,
            perf: Perf::new(params.perf),
            level: PERF_LEVEL,
            ceiling: LADDER.len() - 1,
            ceiling_until_ns: 0,
            backoff_ns: params.backoff_ns,
            good: 0,
            since_up: u32::MAX,
        }
    }

    /// The current ladder index.
    pub fn level(&self) -> usize {
        self.level
    }

    /// The latency the controller steers by this tick: over the
    /// delay-sensitive tenants with completions, the largest per-tick p99
    /// ([`Signal::P99`]) or the completion-weighted mean ([`Signal::Mean`]);
    /// `None` without such a tenant.
    pub fn signal(&self, stats: &[TenantStats]) -> Option<u64> {
        let delay = stats
            .iter()
            .enumerate()
            .filter(|(i, s)| self.perf.class_of(*i, s) == TenantClass::DelaySensitive && s.completed > 0)
            .map(|(_, s)| s);
        match self.params.signal {
            Signal::P99 => delay.map(|s| s.p99_latency_ns as u64).max(),
            Signal::Mean => {
                let (sum, n) = delay.fold((0u64, 0u64), |(sum, n), s| {
                    (sum.saturating_add(s.mean_latency_ns.saturating_mul(s.completed)), n + s.completed)
                });
                sum.checked_div(n)
            }
        }
    }

    /// One control step at `now_ns` on the latency sample `latency_ns`.
    pub fn control(&mut self, now_ns: u64, latency_ns: u64) {
        let p = &self.params;
        self.since_up = self.since_up.saturating_add(1);
        if latency_ns > p.target_ns {
            let failed_probe = self.since_up <= 2 * p.hold_ticks;
            if !failed_probe {
                self.backoff_ns = p.backoff_ns;
            }
            self.level = self.level.saturating_sub(1);
            self.ceiling = self.level;
            self.ceiling_until_ns = now_ns.saturating_add(self.backoff_ns);
            if failed_probe {
                self.backoff_ns = self.backoff_ns.saturating_mul(2).min(p.max_backoff_ns);
            }
            self.good = 0;
        } else if (latency_ns as f64) < p.target_ns as f64 * (1.0 - p.margin) {
            self.good += 1;
            if now_ns >= self.ceiling_until_ns {
                self.ceiling = LADDER.len() - 1;
            }
            if self.good >= p.hold_ticks && self.level < self.ceiling {
                self.level += 1;
                self.good = 0;
                self.since_up = 0;
            }
        } else {
            self.good = 0;
        }
    }
}

impl Policy for Slo {
    fn name(&self) -> &str {
        "slo"
    }

    fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        self.perf.on_tick(now_ns, stats, plans);
        self.perf.equalize_bandwidth(stats, plans);
        if !self.perf.delay_active(stats) {
            return;
        }
        if let Some(l) = self.signal(stats) {
            self.control(now_ns, l);
        }
        let (chunk, mut zero_weight) = LADDER[self.level];
        if self.perf.message_active(stats) {
            zero_weight = zero_weight.max(chunk / self.params.perf.zero_weight_unit.max(1));
        }
        let several = self.perf.bandwidth_count(stats) >= 2;
        for (i, s) in stats.iter().enumerate() {
            if self.perf.bandwidth_backlogged(i, s) {
                let active = self.perf.active_qps(i, s);
                plans[i].split.chunk_bytes = if several { chunk_granule((chunk / active) as u64) } else { chunk };
                plans[i].split.zero_weight_per_chunk = zero_weight;
            }
        }
    }

    perf_policy_common::pace_and_tick_as_perf!(perf);

    perf_policy_common::plan_rule_request_calls!();

    perf_policy_common::restart_on_set_param! {
        /// [`SloParams::KEYS`] and PeRF's; the controller restarts from the
        /// new parameters.
        Slo
    }
}

export_policy!(Slo);

#[cfg(test)]
mod tests {
    use super::*;
    use perf_policy_common::fixtures;

    #[test]
    fn relaxes_under_target_and_backs_off_at_a_violation() {
        let mut s = Slo::default();
        let t = s.params.target_ns;
        let mut now = 0;
        let mut step = |s: &mut Slo, l: u64| {
            now += 500_000;
            s.control(now, l);
            s.level()
        };
        assert_eq!(step(&mut s, t / 2), PERF_LEVEL, "one good tick is not enough");
        assert_eq!(step(&mut s, t / 2), PERF_LEVEL + 1);
        step(&mut s, t / 2);
        assert_eq!(step(&mut s, t / 2), PERF_LEVEL + 2);
        assert_eq!(step(&mut s, t + 1), PERF_LEVEL + 1, "a violation tightens at once");
        // The ceiling holds for the back-off (4 ms = 8 ticks).
        for _ in 0..6 {
            assert_eq!(step(&mut s, t / 2), PERF_LEVEL + 1);
        }
        step(&mut s, t / 2);
        step(&mut s, t / 2);
        assert_eq!(step(&mut s, t / 2), PERF_LEVEL + 2, "probes again after the back-off");
        assert_eq!(step(&mut s, t + 1), PERF_LEVEL + 1);
        assert_eq!(s.backoff_ns, 16_000_000, "the back-off doubles at each failed probe");
        for _ in 0..10 {
            assert_eq!(step(&mut s, (t as f64 * 0.95) as u64), PERF_LEVEL + 1, "inside the margin: stay");
        }
        assert_eq!(step(&mut s, t + 1), PERF_LEVEL);
        assert_eq!(s.backoff_ns, 4_000_000, "a violation long after a step up (the load changed) resets it");
    }

    #[test]
    fn the_ladder_runs_from_isolation_to_throughput() {
        for w in LADDER.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(b.0 >= a.0 && b.1 <= a.1 && b != a, "{a:?} -> {b:?}");
        }
        assert_eq!(LADDER[PERF_LEVEL], (16384, 16), "starts at PeRF's setting");
        for (c, z) in LADDER {
            assert!(perf_policy_sdk::SplitPlan { chunk_bytes: c, zero_weight_per_chunk: z }.validate().is_ok());
        }
    }

    #[test]
    fn plans_follow_the_level_only_with_a_delay_sensitive_tenant() {
        let (bulk, ping) = (fixtures::bulk(0, 1, 1), fixtures::ping(1, 1000));
        let mut s = Slo::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        for k in 1..=4 {
            s.on_tick(k * 500_000, &[bulk, ping], &mut plans);
        }
        assert_eq!(s.level(), PERF_LEVEL + 2);
        assert_eq!((plans[0].split.chunk_bytes, plans[0].split.zero_weight_per_chunk), LADDER[PERF_LEVEL + 2]);
        let mut alone = [TenantPlan::PASSTHROUGH; 1];
        let mut s = Slo::default();
        s.on_tick(0, &[bulk], &mut alone);
        assert_eq!(alone[0].split.zero_weight_per_chunk, 0, "no delay-sensitive tenant: PeRF's plan");
    }
}
