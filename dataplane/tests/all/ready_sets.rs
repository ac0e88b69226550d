//! Ready sets against the full walk: a round visits only the tenants and
//! QPs with something to do (`engine/ready.rs`); with
//! `Dataplane::set_exhaustive(true)` it visits everyone, as the loop did
//! before. On the simulated NIC in virtual time both must run the same
//! random workload to the same completions at the same instants, with the
//! same counters (but `paced_holds`, which counts visits to a held-back
//! QP), under the policies that cap, rotate, split, pace and window. With
//! the loop's time shared (a charged cost model, `engine/loop_share.rs`)
//! rounds are bounded, and QPs a bound stopped must stay ready: the two
//! walks must still agree.

use crate::common::*;
use perf_dataplane::engine::LoopCost;

/// One case, exhaustive and not; everything tenants see must match.
fn same_run(qps: &[u32], ops: &[GenOp], seed: u64, pol: Pol) -> Result<(), TestCaseError> {
    same_run_with(qps, ops, seed, pol, DataplaneConfig::default())
}

/// [`same_run`] with the loop configured by `cfg`.
fn same_run_with(qps: &[u32], ops: &[GenOp], seed: u64, pol: Pol, cfg: DataplaneConfig) -> Result<(), TestCaseError> {
    let walk = run_case_with(qps, ops, seed, pol, cfg, 200_000_000, |r| r.dp.set_exhaustive(true))?;
    let ready = run_case_with(qps, ops, seed, pol, cfg, 200_000_000, |_| {})?;
    for (t, (a, b)) in walk.tenants.iter().zip(&ready.tenants).enumerate() {
        prop_assert_eq!(&a.got, &b.got, "{:?}: tenant {}'s completions differ", pol, t);
    }
    let (mut a, mut b) = (walk.dp.counters(), ready.dp.counters());
    prop_assert!(b.paced_holds <= a.paced_holds, "{:?}: {:?} vs {:?}", pol, a, b);
    (a.paced_holds, b.paced_holds) = (0, 0);
    prop_assert_eq!(a, b, "{:?}: counters differ", pol);
    prop_assert_eq!(walk.now_ns(), ready.now_ns());
    Ok(())
}

proptest! {
    #![proptest_config(seeded_config(10, 0x5EED_0016))]

    /// The same completions, at the same times, with or without ready sets.
    #[test]
    fn ready_sets_run_what_the_full_walk_runs((qps, ops, seed) in case()) {
        let rotate_by_time = Pol::Named("perf:max_active_qps=1,quantum_ns=20000,chunk_bytes=4096");
        let more = [Pol::Named("justitia"), TIGHT_FAIRSHARE, ROTATE_EVERY_REQUEST, rotate_by_time, TOKEN_BUCKETS];
        for pol in BASE_POLICIES.into_iter().chain(more) {
            same_run(&qps, &ops, seed, pol)?;
        }
    }

    /// Bounded rounds (the loop's time shared by its cost model) run the
    /// same with or without ready sets. The rig drives `round` itself, so
    /// nothing is charged: bounded rounds follow one another at the same
    /// instant, every request completing once, in order, with its bytes.
    #[test]
    fn bounded_rounds_run_what_the_full_walk_runs((qps, ops, seed) in case()) {
        let cfg = DataplaneConfig { loop_cost: LoopCost::MEASURED, ..DataplaneConfig::default() };
        for pol in BASE_POLICIES.into_iter().chain([TIGHT_FAIRSHARE, ROTATE_EVERY_REQUEST, TOKEN_BUCKETS]) {
            same_run_with(&qps, &ops, seed, pol, cfg)?;
        }
    }
}
