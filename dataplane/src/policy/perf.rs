//! `perf`: PeRF's preemption, every constant a parameter with the paper's
//! default. The code lives in `perf-policy-common` (the mechanism) and the
//! `perf-policy-perf` crate (`policies/perf`), which is also compiled to
//! the `perf.wasm` policy module; this module re-exports it and holds its
//! native tests, so the native and the wasm policy are the same code.

pub use perf_policy_perf::{Perf, PerfParams, QpCap, QpFormula};

#[cfg(test)]
mod tests {
    use super::*;
    use perf_policy_sdk::{Policy, SplitPlan, TenantClass, TenantPlan, TenantStats};

    fn stats(tenant: u32, max_msg: u64, depth: u32, backlogged: u32) -> TenantStats {
        TenantStats {
            tenant,
            qps: backlogged,
            backlogged_qps: backlogged,
            max_depth: depth,
            ewma_msg_bytes: max_msg as f64,
            max_msg_bytes: max_msg,
            completed: 10,
            ..TenantStats::default()
        }
    }

    #[test]
    fn classifies_the_paper_classes() {
        let p = Perf::default();
        assert_eq!(p.classify(&stats(0, 1 << 20, 128, 1)), Some(TenantClass::Bandwidth));
        assert_eq!(p.classify(&stats(1, 16, 1, 1)), Some(TenantClass::DelaySensitive));
        assert_eq!(p.classify(&stats(2, 16, 128, 1)), Some(TenantClass::MessageSensitive));
    }

    #[test]
    fn zero_weight_wrs_only_with_a_sensitive_tenant() {
        let mut p = Perf::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        p.on_tick(0, &[stats(0, 1 << 20, 128, 1), stats(1, 16, 1, 1)], &mut plans);
        assert_eq!(plans[0].split, SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 16 });
        assert_eq!(plans[1].split_threshold, 0);
        let mut p = Perf::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 1];
        p.on_tick(0, &[stats(0, 1 << 20, 128, 1)], &mut plans);
        assert_eq!(plans[0].split.zero_weight_per_chunk, 0);
    }

    #[test]
    fn tenant_share_does_not_grow_with_active_qps() {
        let mut p = Perf::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        p.on_tick(0, &[stats(0, 1 << 20, 128, 1), stats(1, 1 << 20, 128, 5)], &mut plans);
        // One chunk per QP per NIC round: 16 KB for one QP, 2 x 8 KB for two.
        assert_eq!(plans[0].split, SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 1 });
        assert_eq!(plans[1].split, SplitPlan { chunk_bytes: 8192, zero_weight_per_chunk: 1 });
        assert_eq!(plans[1].max_active_qps, 2);
    }
}
