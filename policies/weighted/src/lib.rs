//! `weighted`: bandwidth in proportion to the tenants' configured weights
//! (the scenario key `weight`), work-conserving, on top of PeRF's
//! mechanism (`docs/policies.md#weighted`).
//!
//! Everything is [`Perf`]'s (classifier, sub-requests, zero-weight WRs,
//! active-QP caps and in-NIC rotation) except the chunk size of bandwidth
//! tenants while two or more of them have work: the NIC gives every active
//! QP one data turn per round-robin round (each chunk is followed by at
//! least one zero-weight WR, which ends the QP's turn), so a tenant moves
//! `active x chunk` bytes per round. Setting each active QP's chunk to
//! `chunk_bytes x weight / min weight / active` makes the bytes per round,
//! and so the shares of the link, proportional to the weights (the
//! lightest backlogged tenant keeps PeRF's 16 KB per round, heavier ones
//! get proportionally larger chunks, so no tenant pays for chunks smaller
//! than PeRF's). Nothing is withheld: a tenant without work takes no
//! turns, so the others' rounds get shorter and they share the whole link
//! (work conservation); a tenant alone gets PeRF's chunks. The shares
//! hold while the heaviest chunk is not larger than the messages (a
//! message is never more than one chunk) and cost a delay-sensitive
//! tenant up to one heavy chunk of wire time per NIC round.
//!
//! One crate, two uses: the dataplane's built-in `weighted` and, through
//! [`export_policy!`], the `weighted.wasm` module (`--policy wasm:weighted`).
#![cfg_attr(target_arch = "wasm32", no_std)]

use perf_policy_common::{chunk_granule, Perf, PerfParams};
use perf_policy_sdk::{export_policy, ParamError, Policy, TenantPlan, TenantStats};

/// The weighted policy.
#[derive(Debug, Clone, Default)]
pub struct Weighted {
    /// The PeRF mechanism underneath (its parameters apply; `chunk_bytes`
    /// is the chunk of the heaviest tenant).
    pub perf: Perf,
}

impl Weighted {
    /// Weighted shares over PeRF with `params`.
    pub fn new(params: PerfParams) -> Self {
        Weighted { perf: Perf::new(params) }
    }

    /// The chunk each active QP of a bandwidth tenant of `weight` with
    /// `active` QPs sends while the lightest backlogged tenant weighs
    /// `min_weight`.
    pub fn chunk(&self, weight: u32, min_weight: u32, active: u32) -> u32 {
        let base = self.perf.params.chunk_bytes as u64;
        chunk_granule(base * weight.max(1) as u64 / (min_weight.max(1) as u64 * active.max(1) as u64))
    }
}

impl Policy for Weighted {
    fn name(&self) -> &str {
        "weighted"
    }

    fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        self.perf.on_tick(now_ns, stats, plans);
        self.perf.equalize_bandwidth(stats, plans);
        if self.perf.bandwidth_count(stats) < 2 {
            return;
        }
        let backlogged = |i: usize, s: &TenantStats| self.perf.bandwidth_backlogged(i, s);
        let min_weight = stats
            .iter()
            .enumerate()
            .filter(|(i, s)| backlogged(*i, s))
            .map(|(_, s)| s.weight.max(1))
            .min()
            .unwrap_or(1);
        for (i, s) in stats.iter().enumerate() {
            if backlogged(i, s) {
                plans[i].split.chunk_bytes = self.chunk(s.weight, min_weight, self.perf.active_qps(i, s));
            }
        }
    }

    perf_policy_common::pace_and_tick_as_perf!(perf);

    perf_policy_common::plan_rule_request_calls!();

    /// PeRF's parameters ([`PerfParams::KEYS`]).
    fn set_param(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        self.perf.set_param(key, value)
    }
}

export_policy!(Weighted);

#[cfg(test)]
mod tests {
    use super::*;
    use perf_policy_common::fixtures::bulk;
    use perf_policy_sdk::TenantClass;

    #[test]
    fn chunks_follow_the_weights_per_active_qp() {
        let mut w = Weighted::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 3];
        w.on_tick(0, &[bulk(0, 1, 3), bulk(1, 1, 1), bulk(2, 5, 3)], &mut plans);
        assert!(plans.iter().all(|p| p.class == TenantClass::Bandwidth));
        assert_eq!(plans[0].split.chunk_bytes, 3 * 16384);
        assert_eq!(plans[1].split.chunk_bytes, 16384, "the lightest keeps PeRF's chunk");
        // Two active QPs (PeRF's cap) share the tenant's 48 KB per round.
        assert_eq!(plans[2].split.chunk_bytes, 3 * 8192);
        assert!(plans.iter().all(|p| p.split.zero_weight_per_chunk >= 1), "every chunk ends its NIC turn");
    }

    #[test]
    fn a_tenant_alone_gets_full_chunks() {
        let mut w = Weighted::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        let idle = TenantStats { backlogged_qps: 0, ..bulk(1, 1, 3) };
        w.on_tick(0, &[bulk(0, 1, 1), idle], &mut plans);
        assert_eq!(plans[0].split.chunk_bytes, 16384, "work-conserving: no weight-scaled chunk alone");
        assert_eq!(plans[0].split.zero_weight_per_chunk, 0);
    }
}
