//! Tenants that leave, in virtual time: a tenant flushed mid-run has every
//! request it had in the NIC, held in software or still in its channel
//! complete exactly once, in per-QP order, with success or a flush error;
//! the tenant beside it loses nothing. Removing it is refused while it has
//! anything left, then destroys its QPs: its name, its id and its QPs'
//! room in the shared completion queues go to the next tenant, whose
//! traffic runs as usual.

use crate::common::*;
use perf_dataplane::engine::{EngineError, OperatorError};

/// Splits everything, one active QP per tenant: at the flush most of the
/// work is held in software, some is in the NIC.
const POL: Pol = Pol::Force(ForceSplit::HEAVY);

/// Drives until tenants `ts` have `want` completions each.
fn drive_until(rig: &mut Rig, ts: &[(usize, usize)]) {
    let deadline = rig.now_ns() + 500_000_000;
    rig.drive(deadline, |r| ts.iter().any(|&(t, want)| r.tenants[t].got.len() < want).then_some(r.now_ns() + 100_000));
}

#[test]
fn a_tenant_flushed_mid_run_completes_everything_once_then_is_removed_and_its_room_reused() {
    // Shared CQs with room for one send queue and the control reserve of
    // 32 QPs: a 33rd QP is refused, and the 32 share the CQ under a budget.
    let base = DataplaneConfig::default();
    let cfg = DataplaneConfig { cq_depth: base.sq_depth.max(base.rq_depth) + 32 * 4, ..base };
    let mut rig = Rig::new(21, POL, cfg);
    let a = rig.tenant("a", 30, 30 << 16);
    let b = rig.tenant("b", 2, 2 << 16);
    let (ta, tb) = (rig.tenants[a].h.id, rig.tenants[b].h.id);
    assert!(rig.dp.create_qp(tb, 0).is_err(), "a 33rd QP would overrun the shared CQ");
    assert_eq!((rig.dp.tenant_count(), rig.dp.qp_count()), (2, 32));

    let (mut la, mut lb) = (Ledger::default(), Ledger::default());
    post_batch(&mut rig, &mut la, a, 30, 0, 300);
    post_batch(&mut rig, &mut lb, b, 2, 10_000, 40);
    rig.pump();
    assert!(matches!(rig.dp.remove_tenant(ta), Err(EngineError::Busy(_))), "a busy tenant is not removed");
    assert!(!rig.dp.tenant_idle(ta));
    // The application leaves: flush, then what it had posted after it.
    rig.dp.flush_tenant(ta).expect("flush");
    post_batch(&mut rig, &mut la, a, 30, 300, 30);
    drive_until(&mut rig, &[(a, la.len()), (b, lb.len())]);
    let outcomes = la.check_outcomes(&rig.tenants[a].got, true, true).expect("exactly once, in per-QP order");
    let flushed = outcomes.iter().filter(|(_, s)| *s == WcStatus::WrFlushErr).count();
    assert!(outcomes.iter().all(|(_, s)| matches!(s, WcStatus::Success | WcStatus::WrFlushErr)), "{outcomes:?}");
    assert!(flushed >= 30, "the flush caught work in flight ({flushed} of {} flushed)", outcomes.len());
    lb.check(&rig.tenants[b].got, true).expect("the other tenant loses nothing");
    assert!(rig.tenants[b].got.iter().all(|c| c.status == WcStatus::Success));

    // Nothing left: removed; a second removal, a pause or a QP of it are errors.
    assert!(rig.dp.tenant_idle(ta));
    rig.dp.remove_tenant(ta).expect("remove");
    assert!(matches!(rig.dp.remove_tenant(ta), Err(EngineError::TenantRemoved(_))));
    assert!(rig.dp.create_qp(ta, 0).is_err());
    assert!(matches!(rig.dp.set_paused("a", true), Err(OperatorError::UnknownTenant { .. })));
    assert_eq!((rig.dp.tenant_count(), rig.dp.qp_count()), (1, 2));
    let names: Vec<String> = rig.dp.snapshot().tenants.into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["b"]);

    // The next tenant takes the name, the id and the 30 QPs' room.
    let c = rig.tenant("a", 30, 30 << 16);
    assert_eq!(rig.tenants[c].h.id, ta, "the removed tenant's id is reused");
    assert_eq!((rig.dp.tenant_count(), rig.dp.qp_count()), (2, 32));
    let bytes = pattern(4096, 7);
    rig.write_local(c, 0, &bytes);
    assert_ne!(rig.read_peer(c, 0, 4096), bytes);
    let mut lc = Ledger::default();
    post_batch(&mut rig, &mut lc, c, 30, 20_000, 120);
    post_batch(&mut rig, &mut lb, b, 2, 10_040, 20);
    drive_until(&mut rig, &[(c, lc.len()), (b, lb.len())]);
    lc.check(&rig.tenants[c].got, true).expect("the new tenant's requests, once, in order");
    assert!(rig.tenants[c].got.iter().all(|c| c.status == WcStatus::Success));
    lb.check(&rig.tenants[b].got, true).expect("the other tenant still loses nothing");
    assert_eq!(rig.read_peer(c, 0, 4096), bytes, "the new tenant's QP 0 moved its bytes");
}

/// A tenant whose messages all completed before it left still has in the
/// NIC the zero-weight WRs after its last chunk: executed, unsignaled, with
/// no CQE of their own. The flush posts a signaled marker behind them
/// (rdma-core's drain), whose flush CQE retires them: the tenant becomes
/// idle and is removed. Without the marker it never became idle (the
/// `serve` daemon kept such a client's tenant for good).
#[test]
fn a_tenant_that_finished_before_it_left_is_drained_by_its_flush_and_removed() {
    let mut rig = Rig::new(22, POL, DataplaneConfig::default());
    let a = rig.tenant("a", 2, 2 << 16);
    let ta = rig.tenants[a].h.id;
    let mut la = Ledger::default();
    post_batch(&mut rig, &mut la, a, 2, 0, 20);
    drive_until(&mut rig, &[(a, la.len())]);
    la.check(&rig.tenants[a].got, true).expect("everything completed, once, in order");
    assert!(rig.tenants[a].got.iter().all(|c| c.status == WcStatus::Success));
    assert!(!rig.dp.tenant_idle(ta), "the zero-weight WRs after its last chunk are still posted");
    rig.dp.flush_tenant(ta).expect("flush");
    let deadline = rig.now_ns() + 10_000_000;
    rig.drive(deadline, |r| (!r.dp.tenant_idle(ta)).then_some(r.now_ns() + 10_000));
    assert!(rig.dp.tenant_idle(ta), "the flush drained the tenant");
    assert_eq!(rig.tenants[a].got.len(), la.len(), "the drain marker is no application completion");
    rig.dp.remove_tenant(ta).expect("removed");
    assert_eq!(rig.dp.tenant_count(), 0);
}
