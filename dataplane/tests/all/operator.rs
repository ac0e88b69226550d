//! The operator's pause / resume of a tenant, in virtual time: while a
//! tenant is paused nothing new of it reaches the NIC (what was posted
//! finishes), other tenants go on, the watchdog does not take its backlog
//! for a stall, and after the resume every request completes exactly once,
//! in per-QP order, with its bytes; also through an `OperatorHandle` from
//! another thread, and an unknown tenant is an error naming the tenants.

use crate::common;

use std::time::Duration;

use common::*;
use perf_dataplane::engine::OperatorError;

/// Splits everything, one active QP per tenant: pauses land between
/// chunks and during hand-offs.
const POL: Pol = Pol::Force(ForceSplit::HEAVY);

fn cfg() -> DataplaneConfig {
    // A watchdog far shorter than the pause.
    DataplaneConfig { watchdog_ns: 200_000, ..DataplaneConfig::default() }
}

#[test]
fn pause_holds_a_tenant_and_resume_completes_everything_once_in_order() {
    pause_and_resume(POL);
}

/// The same under fair admission (`fairshare`'s windows), whose rounds
/// visit only the tenants its index holds (`engine/fair_index.rs`): the
/// pause takes the tenant out of it, the resume puts it back.
#[test]
fn pause_and_resume_under_fair_admission() {
    pause_and_resume(TIGHT_FAIRSHARE);
}

fn pause_and_resume(pol: Pol) {
    let mut rig = Rig::new(11, pol, cfg());
    let policy = rig.dp.policy().name().to_string();
    let a = rig.tenant("a", 3, 3 << 16);
    let b = rig.tenant("b", 1, 1 << 16);
    let (mut la, mut lb) = (Ledger::default(), Ledger::default());
    post_batch(&mut rig, &mut la, a, 3, 0, 60);
    post_batch(&mut rig, &mut lb, b, 1, 1000, 20);
    // Some of a's work reaches the NIC, then the operator pauses it.
    rig.pump();
    assert_eq!(rig.dp.set_paused("a", true), Ok(true));
    assert_eq!(rig.dp.set_paused("a", true), Ok(false), "pausing twice changes nothing");
    assert!(rig.dp.is_paused(a as u32));
    // What the NIC holds drains; then nothing of a's moves for 3 ms, while
    // b finishes everything.
    rig.idle_for(500_000);
    let drained = rig.tenants[a].got.len();
    post_batch(&mut rig, &mut la, a, 3, 60, 30);
    rig.idle_for(3_000_000);
    assert_eq!(rig.tenants[a].got.len(), drained, "a paused tenant completes nothing new");
    assert!(drained < la.len(), "the pause held work back ({drained} of {} done)", la.len());
    lb.check(&rig.tenants[b].got, true).expect("b runs on while a is paused");
    let snap = rig.dp.snapshot();
    let sa = &snap.tenants[a];
    assert!(sa.paused && sa.held > 0 && sa.delivered == drained as u64, "{sa:?}");
    assert!(rig.dp.policy().exits().is_empty(), "the watchdog took a pause for a stall: {:?}", rig.dp.policy().exits());
    assert_eq!(rig.dp.policy().name(), policy);
    // Resume: everything completes, once, in per-QP order.
    assert_eq!(rig.dp.set_paused("a", false), Ok(true));
    let deadline = rig.now_ns() + 200_000_000;
    let want = la.len();
    rig.drive(deadline, |r| (r.tenants[a].got.len() < want).then_some(r.now_ns() + 100_000));
    la.check(&rig.tenants[a].got, true).expect("exactly once, in order, after the resume");
    assert!(rig.tenants[a].got.iter().all(|c| c.status == WcStatus::Success));
}

#[test]
fn the_operator_handle_pauses_resumes_and_snapshots_from_another_thread() {
    let mut rig = Rig::new(12, POL, cfg());
    let a = rig.tenant("a", 2, 2 << 16);
    let mut la = Ledger::default();
    let handle = rig.dp.operator_handle();
    // Served at a round boundary while this thread runs the loop.
    let ask = |rig: &mut Rig, f: Box<dyn FnOnce() -> Result<bool, OperatorError> + Send>| {
        let j = std::thread::spawn(f);
        while !j.is_finished() {
            rig.dp.round().expect("round");
        }
        j.join().expect("operator thread")
    };
    let h = handle.clone();
    assert_eq!(ask(&mut rig, Box::new(move || h.set_paused("a", true, Duration::from_secs(20)))), Ok(true));
    post_batch(&mut rig, &mut la, a, 2, 0, 10);
    rig.idle_for(2_000_000);
    assert!(rig.tenants[a].got.is_empty(), "paused from the start: nothing completes");
    let h = handle.clone();
    let err = ask(&mut rig, Box::new(move || h.set_paused("nobody", true, Duration::from_secs(20))));
    match err {
        Err(OperatorError::UnknownTenant { name, known }) => {
            assert_eq!((name.as_str(), known.as_str()), ("nobody", "a"))
        }
        other => panic!("{other:?}"),
    }
    // By id as well as by name.
    let h = handle.clone();
    assert_eq!(ask(&mut rig, Box::new(move || h.set_paused("0", false, Duration::from_secs(20)))), Ok(true));
    let want = la.len();
    let deadline = rig.now_ns() + 200_000_000;
    rig.drive(deadline, |r| (r.tenants[a].got.len() < want).then_some(r.now_ns() + 100_000));
    la.check(&rig.tenants[a].got, true).expect("exactly once, in order");
    let h = handle.clone();
    let j = std::thread::spawn(move || h.snapshot(Duration::from_secs(20)));
    while !j.is_finished() {
        rig.dp.round().expect("round");
    }
    let snap = j.join().expect("thread").expect("snapshot");
    assert_eq!((snap.tenants[0].delivered, snap.tenants[0].paused), (want as u64, false));
    assert_eq!(snap.counters.completions, want as u64);
    drop(rig);
    assert_eq!(handle.snapshot(Duration::from_secs(1)), Err(OperatorError::Stopped), "a dropped loop says so");
}
