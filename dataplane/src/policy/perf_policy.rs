//! The `perf` policy (`--policy perf`): PeRF's preemption, every constant a
//! parameter with the paper's default. The code lives in
//! `perf-policy-common` (the mechanism, its `preemption` module) and the
//! `perf-policy-perf` crate (`policies/perf`), which is also compiled to
//! the `perf.wasm` policy module; this module re-exports it and holds its
//! native tests, so the native and the wasm policy are the same code.

pub use perf_policy_perf::{Perf, PerfParams, QpCap, QpDaemon, QpFormula};

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
        // PeRF splits any message of PERF_LARGE_FLOW (1 KB) or more, whoever
        // sends it; the ping-pong's 16 B messages stay whole.
        assert_eq!(plans[1].split_threshold, 1024);
        let mut p = Perf::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 1];
        p.on_tick(0, &[stats(0, 1 << 20, 128, 1)], &mut plans);
        assert_eq!(plans[0].split.zero_weight_per_chunk, 0);
    }

    #[test]
    fn as_in_perf_a_tenants_share_grows_with_its_active_qps() {
        let mut p = Perf::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        p.on_tick(0, &[stats(0, 1 << 20, 128, 1), stats(1, 1 << 20, 128, 5)], &mut plans);
        // Two bandwidth tenants and no sensitive one: 16 KB chunks, no
        // zero-weight WR; 6 active QPs over the 1 MB limit of 1 QP: the
        // multi-QP tenant keeps MAX_ALLOWED_QP_NUM = 2 QPs active.
        assert_eq!(plans[0].split, SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 0 });
        assert_eq!(plans[1].split, SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 0 });
        assert_eq!(plans[1].max_active_qps, 2);
        // The extension the derived policies use evens the shares out.
        p.equalize_bandwidth(&[stats(0, 1 << 20, 128, 1), stats(1, 1 << 20, 128, 5)], &mut plans);
        assert_eq!(plans[0].split, SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 1 });
        assert_eq!(plans[1].split, SplitPlan { chunk_bytes: 8192, zero_weight_per_chunk: 1 });
    }
}
