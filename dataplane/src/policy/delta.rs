//! What changed between two policy ticks (ABI 1.9,
//! `Policy::on_tick_changed`): statistics records compared word by word
//! (a wasm module's resident tables, `wasm.rs`, keep theirs as
//! [`StatsKey`]s) and, for a native policy, the records and the plans as it
//! left them.

use perf_policy_sdk::{TenantPlan, TenantStats};

/// A statistics record as eight words, compared without regard to what
/// the fields mean (`-0.0` and `0.0` differ, as their bytes do).
pub(super) type StatsKey = [u64; 8];

/// The record's words.
pub(super) fn stats_key(s: &TenantStats) -> StatsKey {
    let pair = |a: u32, b: u32| a as u64 | (b as u64) << 32;
    [
        pair(s.tenant, s.qps),
        pair(s.backlogged_qps, s.max_depth),
        s.ewma_msg_bytes.to_bits(),
        s.max_msg_bytes,
        s.completed,
        s.bytes,
        s.mean_latency_ns,
        pair(s.weight, s.p99_latency_ns),
    ]
}

/// Whether two stats keys differ (one comparison per word, no early exit).
pub(super) fn keys_differ(a: &StatsKey, b: &StatsKey) -> bool {
    a.iter().zip(b).fold(0u64, |acc, (x, y)| acc | (x ^ y)) != 0
}

/// Whether two plans differ, field by field without an early exit (the
/// derived `PartialEq` branches on every field).
pub(super) fn plans_differ(a: &TenantPlan, b: &TenantPlan) -> bool {
    let d = (a.max_active_qps ^ b.max_active_qps) as u64
        | (a.quantum_requests ^ b.quantum_requests) as u64
        | (a.quantum_bytes ^ b.quantum_bytes)
        | (a.quantum_ns ^ b.quantum_ns)
        | (a.split.chunk_bytes ^ b.split.chunk_bytes) as u64
        | (a.split.zero_weight_per_chunk ^ b.split.zero_weight_per_chunk) as u64
        | (a.split_threshold ^ b.split_threshold)
        | (a.class as u32 ^ b.class as u32) as u64
        | (a.window_kib ^ b.window_kib) as u64
        | (a.read_window_kib ^ b.read_window_kib) as u64;
    d != 0
}

/// A native policy's last tick: the records it was given and the plans it
/// left (before the host validated them), and the changed list of the
/// tick in progress.
#[derive(Default)]
pub(super) struct TickDelta {
    stats: Vec<StatsKey>,
    plans: Vec<TenantPlan>,
    changed: Vec<u32>,
    moved: Vec<u32>,
}

impl TickDelta {
    /// The tenants whose record in `stats` or plan in `plans` differs from
    /// the last tick's, or that it did not have, in increasing order.
    pub(super) fn changed(&mut self, stats: &[TenantStats], plans: &[TenantPlan]) -> &[u32] {
        self.changed.clear();
        let n = stats.len().min(plans.len());
        let known = self.stats.len().min(self.plans.len()).min(n);
        let last = self.stats[..known].iter_mut().zip(&self.plans[..known]);
        for (i, ((s, p), (key, plan))) in stats.iter().zip(plans).zip(last).enumerate() {
            let k = stats_key(s);
            if keys_differ(key, &k) || plans_differ(plan, p) {
                self.changed.push(i as u32);
                *key = k;
            }
        }
        self.stats.truncate(known);
        for (i, s) in stats.iter().enumerate().take(n).skip(known) {
            self.changed.push(i as u32);
            self.stats.push(stats_key(s));
        }
        &self.changed
    }

    /// The plans the policy left at the tick just run; returns the
    /// tenants whose plan is new to the host: it differs from what the
    /// policy left at the last tick, or the tenant was listed changed (the
    /// host may have replaced what it left). The others are plans the host
    /// validated before.
    pub(super) fn left(&mut self, plans: &[TenantPlan]) -> &[u32] {
        let n = plans.len().min(self.stats.len());
        let known = self.plans.len().min(n);
        let mut listed = self.changed.iter().copied().peekable();
        self.moved.clear();
        for (i, (p, last)) in plans.iter().zip(&mut self.plans[..known]).enumerate() {
            let was_listed = listed.next_if_eq(&(i as u32)).is_some();
            if was_listed || plans_differ(p, last) {
                *last = *p;
                self.moved.push(i as u32);
            }
        }
        self.plans.truncate(known);
        for (i, p) in plans.iter().enumerate().take(n).skip(known) {
            self.plans.push(*p);
            self.moved.push(i as u32);
        }
        &self.moved
    }

    /// Forgets the last tick: the next lists every tenant.
    pub(super) fn forget(&mut self) {
        self.stats.clear();
        self.plans.clear();
    }
}
