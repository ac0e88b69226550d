//! Completions only where someone needs one (`engine/split.rs`,
//! `post.rs`): the small whole messages of a post list share one CQE, a
//! message of `GROUP_BYTES` or more has its own, and every message still
//! completes exactly once, in per-QP order, with its bytes, also when an
//! error cuts a list. The whole-message lane (`engine/whole_lane.rs`)
//! posts exactly what the general path posts.

use crate::common::*;
use perf_dataplane::engine::{LoopCost, GROUP_BYTES};

/// Posts `lists` lists of `per_list` WRITEs of `len` bytes on each of the
/// tenant's `qps` QPs at once (each list as one item), drives the rig
/// until all complete, and returns the rig and its ledger. Message `k` of
/// QP `q` writes its own slot, filled with its own pattern.
fn run_lists(pol: Pol, cost: LoopCost, qps: u32, lists: u32, per_list: u32, len: u32) -> (Rig, Ledger) {
    let cfg = DataplaneConfig { loop_cost: cost, ..DataplaneConfig::default() };
    let mut rig = Rig::new(11, pol, cfg);
    let per_qp = (lists * per_list) as usize;
    let slot = len as usize + 8;
    let t = rig.tenant("lists", qps, qps as usize * per_qp * slot);
    let mut ledger = Ledger::default();
    let mut wrs = Vec::new();
    for q in 0..qps as usize {
        for k in 0..per_qp {
            let i = q * per_qp + k;
            rig.write_local(t, i * slot, &pattern(len as usize, i as u64));
            let wr = rig.wr(t, app_wr_id(t, i), q as u32, false, (i * slot) as u64, len);
            ledger.record(&wr);
            wrs.push(wr);
        }
    }
    for list in wrs.chunks(per_list as usize) {
        rig.tenants[t].h.post_list(list).expect("room for the list");
    }
    let total = ledger.len();
    rig.drive(50_000_000, |r| (r.tenants[t].got.len() < total).then_some(u64::MAX));
    rig.idle_for(100_000);
    (rig, ledger)
}

/// Every message completed once, in order, and its bytes are at the peer.
fn check_all(rig: &Rig, ledger: &Ledger, len: u32) {
    ledger.check(&rig.tenants[0].got, true).expect("exactly once, in per-QP order");
    let slot = len as usize + 8;
    for i in 0..ledger.len() {
        assert_eq!(rig.read_peer(0, i * slot, len as usize), pattern(len as usize, i as u64), "message {i}'s bytes");
    }
}

#[test]
fn the_small_messages_of_a_post_list_share_one_cqe_and_each_completes_once() {
    for (pol, cost) in [(Pol::Passthrough, LoopCost::ZERO), (Pol::Passthrough, LoopCost::MEASURED)] {
        let (rig, ledger) = run_lists(pol, cost, 4, 8, 32, 16);
        check_all(&rig, &ledger, 16);
        let c = rig.dp.counters();
        assert_eq!(c.completions, 4 * 8 * 32, "{c:?}");
        // 32 lists: a free loop may join lists it finds queued together;
        // a charged one cuts a list where the tenant's quantum of the loop
        // ends (its last message then signaled), at most once per list.
        let most = if cost.is_zero() { 32 } else { 64 };
        assert!(c.cqes_polled <= most, "{} CQEs for 32 lists of 32 (cost {cost:?})", c.cqes_polled);
        assert!(c.hidden_completions == 0, "whole messages are no hidden WQEs: {c:?}");
    }
}

#[test]
fn a_message_of_group_bytes_or_more_has_a_cqe_of_its_own() {
    let len = GROUP_BYTES as u32;
    let (rig, ledger) = run_lists(Pol::Passthrough, LoopCost::ZERO, 2, 2, 16, len);
    check_all(&rig, &ledger, len);
    let c = rig.dp.counters();
    assert_eq!(c.cqes_polled, 64, "one CQE per message of {len} B: {c:?}");
    // Just under: two messages make the group's bytes.
    let (rig, ledger) = run_lists(Pol::Passthrough, LoopCost::ZERO, 1, 1, 16, len / 2);
    check_all(&rig, &ledger, len / 2);
    assert_eq!(rig.dp.counters().cqes_polled, 8, "one CQE per two messages of {} B", len / 2);
}

#[test]
fn fair_admission_posts_a_tenants_small_messages_as_lists() {
    let (rig, ledger) = run_lists(Pol::Named("fairshare"), LoopCost::MEASURED, 2, 16, 32, 16);
    check_all(&rig, &ledger, 16);
    let c = rig.dp.counters();
    // With the window full, room opens a completion at a time, and a list
    // takes only what is open: lists where the room allows, single
    // messages where it does not.
    assert!(c.doorbells * 10 <= c.data_wqes * 8, "{} doorbells for {} messages", c.doorbells, c.data_wqes);
    assert!(c.cqes_polled * 10 <= c.completions * 8, "{} CQEs for {} messages", c.cqes_polled, c.completions);
}

#[test]
fn an_error_in_the_middle_of_a_list_completes_each_message_once_in_order() {
    for pol in [Pol::Passthrough, Pol::Named("fairshare")] {
        let mut rig = Rig::new(5, pol, DataplaneConfig::default());
        let t = rig.tenant("cut", 1, 64 * 32);
        let mut ledger = Ledger::default();
        let mut wrs = Vec::new();
        for k in 0..32u64 {
            let mut wr = rig.wr(t, app_wr_id(t, k as usize), 0, false, k * 64, 16);
            if k == 10 {
                // A key the peer never gave: the responder refuses it.
                let RequestOp::Write { remote } = wr.op else { unreachable!("a WRITE") };
                wr.op = RequestOp::Write { remote: RemoteAddr { rkey: remote.rkey ^ 0x5a5a_5a5a, ..remote } };
            }
            ledger.record(&wr);
            wrs.push(wr);
        }
        rig.tenants[t].h.post_list(&wrs).expect("room for the list");
        rig.drive(50_000_000, |r| (r.tenants[t].got.len() < 32).then_some(u64::MAX));
        rig.idle_for(100_000);
        let out = ledger.check_outcomes(&rig.tenants[t].got, true, true).expect("once each, in order");
        for (k, (_, status)) in out.iter().enumerate() {
            let want = match k {
                0..10 => WcStatus::Success,
                10 => WcStatus::RemAccessErr,
                _ => WcStatus::WrFlushErr,
            };
            assert_eq!(*status, want, "{pol:?}: message {k}");
        }
    }
}

proptest! {
    #![proptest_config(seeded_config(24, 0x1a4e))]

    /// Messages that go whole by the plan's rule with no policy call take
    /// the whole-message lane; the same decisions made by a call take the
    /// general path. Both post the same WQEs at the same times: every
    /// completion is the same, to its timestamp, and so are the counts of
    /// WQEs, CQEs and doorbells.
    #[test]
    fn the_whole_message_lane_posts_what_the_general_path_posts((qps, ops, seed) in case()) {
        let run = |pol| run_case_with(&qps, &ops, seed, pol, DataplaneConfig::default(), 200_000_000, |_| {});
        let (lane, general) = (run(Pol::Passthrough)?, run(Pol::EveryCall)?);
        for (t, (a, b)) in lane.tenants.iter().zip(&general.tenants).enumerate() {
            prop_assert_eq!(&a.got, &b.got, "tenant {}'s completions", t);
        }
        let (a, b) = (lane.dp.counters(), general.dp.counters());
        prop_assert_eq!(
            (a.wqes_posted, a.cqes_polled, a.doorbells, a.data_wqes),
            (b.wqes_posted, b.cqes_polled, b.doorbells, b.data_wqes)
        );
        prop_assert!(lane.dp.policy().counters.plan_answers > 0 && general.dp.policy().counters.plan_answers == 0);
    }
}
