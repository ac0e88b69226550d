//! Fair admission at scale (`engine/admission.rs`): a round's work follows
//! what it admits. With the budget full and hundreds of tenants waiting
//! for room, a round visits the tenants it admits for and a few more (the
//! one that finds no room, those that may post without room), not every
//! tenant with data, as the walk before the index did.

use crate::common::*;

/// Tenants of the case, each with one QP.
const TENANTS: usize = 200;
/// WRITEs each tenant keeps outstanding, and their size.
const DEPTH: u64 = 4;
const LEN: u32 = 64 * 1024;

#[test]
fn a_round_visits_the_tenants_it_admits_for_not_all_that_wait() {
    let mut rig = Rig::new(11, Pol::Named("fairshare"), DataplaneConfig::default());
    for t in 0..TENANTS {
        rig.tenant(&format!("t{t}"), 1, LEN as usize);
    }
    let mut posted = vec![0u64; TENANTS];
    let until = rig.now_ns() + 3_000_000;
    let before = rig.dp.counters();
    rig.drive(until + 1, |r| {
        for (t, n) in posted.iter_mut().enumerate() {
            while *n < r.tenants[t].got.len() as u64 + DEPTH {
                let wr = r.wr(t, *n, 0, false, 0, LEN);
                post(&r.tenants[t].h, wr);
                *n += 1;
            }
        }
        (r.now_ns() < until).then_some(until)
    });
    let c = rig.dp.counters();
    let rounds = c.rounds - before.rounds;
    let idle = c.admit_idle_visits - before.admit_idle_visits;
    let done: usize = rig.tenants.iter().map(|t| t.got.len()).sum();
    let served = rig.tenants.iter().filter(|t| !t.got.is_empty()).count();
    let holds = c.window_holds - before.window_holds;
    let wqes = c.data_wqes - before.data_wqes;
    assert!(holds > 0, "the budget never filled: the case does not test a full budget");
    assert_eq!(served, TENANTS, "every tenant completes messages ({done} in all)");
    // The walk over every tenant with data held each of them once per
    // round with the budget full, some 200 holds a round; a round now
    // holds the first tenant that finds no room, once per direction.
    assert!(holds <= 2 * rounds, "{holds} holds in {rounds} rounds: rounds visit the tenants waiting for room");
    assert!(idle <= wqes / 10, "{idle} visits admitted nothing, for {wqes} data WQEs admitted");
    for tr in &rig.tenants {
        for c in &tr.got {
            assert!(c.status.is_ok() && c.byte_len == LEN, "{c:?}");
        }
    }
}
