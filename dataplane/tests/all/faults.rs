//! The dataplane under injected NIC faults, in virtual time: a QP driven
//! to ERR mid-stream, a link that goes down briefly and one that stays down
//! past the retry budget, a stalled NIC, lost ACKs, and an overrun of the
//! dataplane's shared send CQ.
//!
//! Every run streams WRITEs from two tenants (tenant "a" on two QPs,
//! tenant "b" on one), each request into its own slot with its own bytes,
//! under `passthrough`, `perf` and forced splitting with rotation, and
//! checks: every accepted request completes exactly once, in per-QP order;
//! errors reach only the QPs the fault hit; every request reported
//! successful has its bytes at the peer; QPs the fault did not hit keep
//! their traffic; a failed QP can be recovered and carries traffic again.

use crate::common;

use common::*;
use perf_dataplane::engine::{Completion, CompletionKind, DataplaneConfig, RequestOp, WorkRequest};
use perf_dataplane::rnic::sim::{ib_timeout_ps, Fault, PS_PER_NS};
use perf_dataplane::rnic::WcStatus;

/// Payload of each request.
const SIZE: u32 = 16 * 1024;
/// Requests per QP.
const PER_QP: usize = 48;
/// Requests each QP keeps outstanding.
const WINDOW: usize = 6;
/// When the fault strikes, in ns of virtual time.
const FAULT_AT_NS: u64 = 60_000;

/// The policies every fault runs under.
fn policies() -> [Pol; 3] {
    [Pol::Passthrough, Pol::Perf, Pol::Force(ForceSplit::HEAVY)]
}

/// The two tenants' QPs: (tenant, QP index).
const QPS: [(usize, u32); 3] = [(0, 0), (0, 1), (1, 0)];

/// The offset of request `k` of QP `qp` in its tenant's regions.
fn slot(qp: u32, k: usize) -> u64 {
    (qp as u64 * PER_QP as u64 + k as u64) * SIZE as u64
}

fn wr_id(t: usize, qp: u32, k: usize) -> u64 {
    ((t as u64) << 32) | ((qp as u64) << 16) | k as u64
}

/// A rig with tenants "a" (2 QPs) and "b" (1 QP), their local slots filled
/// with distinct bytes.
fn rig(seed: u64, pol: Pol) -> Rig {
    let mut rig = Rig::new(seed, pol, DataplaneConfig::default());
    let mem = 2 * PER_QP * SIZE as usize;
    rig.tenant("a", 2, mem);
    rig.tenant("b", 1, mem);
    for &(t, qp) in &QPS {
        for k in 0..PER_QP {
            let data = pattern(SIZE as usize, wr_id(t, qp, k));
            rig.write_local(t, slot(qp, k) as usize, &data);
        }
    }
    rig
}

/// What one run posted and got back.
struct Run {
    ledgers: Vec<Ledger>,
    /// RECV completions (not in the ledgers), in delivery order.
    recvs: Vec<Completion>,
    /// Per tenant: (wr_id, status) in delivery order.
    outcomes: Vec<Vec<(u64, WcStatus)>>,
}

impl Run {
    /// The statuses of tenant `t`'s QP `qp`, in post order.
    fn statuses(&self, t: usize, qp: u32) -> Vec<WcStatus> {
        let ids = self.ledgers[t].per_qp.get(&qp).cloned().unwrap_or_default();
        ids.iter().map(|id| self.outcomes[t].iter().find(|(w, _)| w == id).map(|x| x.1).expect("completed")).collect()
    }

    fn errors(&self, t: usize, qp: u32) -> usize {
        self.statuses(t, qp).iter().filter(|s| !s.is_ok()).count()
    }
}

/// Streams every QP's `PER_QP` requests (`WINDOW` outstanding each),
/// calling `fault` once at `FAULT_AT_NS`; returns when every request has
/// completed, after checking exactly-once, per-QP order and, for every
/// successful request, its bytes at the peer.
fn stream(rig: &mut Rig, deadline_ns: u64, mut fault: impl FnMut(&mut Rig)) -> Run {
    let start = rig.now_ns();
    let mut ledgers: Vec<Ledger> = (0..2).map(|_| Ledger::default()).collect();
    let mut posted = [0usize; 3];
    let mut fired = false;
    let total = QPS.len() * PER_QP;
    rig.drive(start + deadline_ns, |r| {
        if !fired && r.now_ns() >= start + FAULT_AT_NS {
            fault(r);
            fired = true;
        }
        for (i, &(t, qp)) in QPS.iter().enumerate() {
            let done = r.tenants[t].got.iter().filter(|c| c.qp == qp && c.kind == CompletionKind::Send).count();
            while posted[i] < PER_QP && posted[i] - done < WINDOW {
                let k = posted[i];
                let wr = r.wr(t, wr_id(t, qp, k), qp, false, slot(qp, k), SIZE);
                post(&r.tenants[t].h, wr);
                ledgers[t].record(&wr);
                posted[i] += 1;
            }
        }
        let done: usize =
            r.tenants.iter().map(|t| t.got.iter().filter(|c| c.kind == CompletionKind::Send).count()).sum();
        if done == total {
            return None;
        }
        Some(if fired { u64::MAX } else { start + FAULT_AT_NS })
    });
    // Nothing more may arrive.
    rig.idle_for(100_000);
    let mut outcomes = Vec::new();
    let mut recvs = Vec::new();
    for (t, l) in ledgers.iter().enumerate() {
        let (r, got): (Vec<Completion>, Vec<Completion>) =
            std::mem::take(&mut rig.tenants[t].got).into_iter().partition(|c| c.kind == CompletionKind::Recv);
        recvs.extend(r);
        let o = l.check_outcomes(&got, true, true).unwrap_or_else(|e| panic!("tenant {t}: {e}"));
        for &(id, status) in &o {
            if status.is_ok() {
                let (qp, k) = ((id >> 16) as u32 & 0xffff, (id & 0xffff) as usize);
                let want = pattern(SIZE as usize, id);
                assert!(rig.read_peer(t, slot(qp, k) as usize, SIZE as usize) == want, "tenant {t} wr {id:#x}: bytes");
            }
        }
        outcomes.push(o);
    }
    Run { ledgers, recvs, outcomes }
}

/// Per QP, once a request failed every later one fails too (until the QP
/// is recovered): a QP's statuses are successes, then errors.
fn assert_fails_once_and_for_all(run: &Run, pol: Pol) {
    for &(t, qp) in &QPS {
        let s = run.statuses(t, qp);
        if let Some(first) = s.iter().position(|x| !x.is_ok()) {
            assert!(s[first..].iter().all(|x| !x.is_ok()), "{pol:?} tenant {t} QP {qp}: success after an error: {s:?}");
        }
    }
}

/// A fresh rig under `pol` streams with `fault` injected at `FAULT_AT_NS`,
/// and no request of any QP fails; returns the rig for the test's own checks.
fn stream_failing_nothing(seed: u64, pol: Pol, deadline_ns: u64, fault: Fault) -> Rig {
    let mut rig = rig(seed, pol);
    let run = stream(&mut rig, deadline_ns, |r| r.f.inject(fault));
    for &(t, qp) in &QPS {
        assert_eq!(run.errors(t, qp), 0, "{pol:?} tenant {t} QP {qp}: {:?}", run.statuses(t, qp));
    }
    rig
}

/// Posts `n` more WRITEs on tenant `t`'s QP `qp` (ids from `base`) and
/// checks they all succeed with their bytes.
fn fresh_traffic(rig: &mut Rig, t: usize, qp: u32, base: u64, n: usize) {
    let mut ledger = Ledger::default();
    let wrs: Vec<WorkRequest> = (0..n).map(|k| rig.wr(t, base + k as u64, qp, false, slot(qp, k), SIZE)).collect();
    for wr in &wrs {
        let data = pattern(SIZE as usize, wr.wr_id);
        rig.write_local(t, wr.offset as usize, &data);
        post(&rig.tenants[t].h, *wr);
        ledger.record(wr);
    }
    rig.drive(rig.now_ns() + 50_000_000, |r| (r.tenants[t].got.len() < n).then_some(u64::MAX));
    let got = std::mem::take(&mut rig.tenants[t].got);
    ledger.check(&got, true).unwrap_or_else(|e| panic!("tenant {t} QP {qp} after recovery: {e}"));
    for wr in &wrs {
        let want = pattern(SIZE as usize, wr.wr_id);
        assert!(rig.read_peer(t, wr.offset as usize, SIZE as usize) == want, "wr {:#x}: bytes", wr.wr_id);
    }
}

/// Tenant "a"'s QP 0 is driven to ERR mid-stream: its oldest unfinished
/// request gets the NIC's error, the rest flush, once each; its QP 1 and
/// tenant "b" finish every request; the QP is then recovered.
#[test]
fn a_qp_driven_to_err_mid_stream_fails_only_its_own_requests() {
    for pol in policies() {
        let mut rig = rig(31, pol);
        let run = stream(&mut rig, 50_000_000, |r| {
            let qp = r.dp.nic_qp(0, 0).expect("QP");
            r.f.inject(Fault::QpError { host: 0, qp, status: WcStatus::LocQpOpErr });
        });
        assert_fails_once_and_for_all(&run, pol);
        let s = run.statuses(0, 0);
        let first = s.iter().position(|x| !x.is_ok()).unwrap_or_else(|| panic!("{pol:?}: no error on a/0: {s:?}"));
        assert!(first > 0, "{pol:?}: the fault came after some traffic: {s:?}");
        assert_eq!(s[first], WcStatus::LocQpOpErr, "{pol:?}: {s:?}");
        assert!(s[first + 1..].iter().all(|&x| x == WcStatus::WrFlushErr), "{pol:?}: {s:?}");
        assert_eq!((run.errors(0, 1), run.errors(1, 0)), (0, 0), "{pol:?}: errors spread");
        assert_eq!(rig.dp.qp_failed(0, 0), Some(true));
        rig.recover(0, 0);
        fresh_traffic(&mut rig, 0, 0, 0xA000, 8);
        assert_eq!(rig.dp.qp_failed(0, 0), Some(false));
    }
}

/// The link drops for 20 us mid-stream: RC retransmits what was lost and
/// nothing fails, for any tenant.
#[test]
fn a_short_link_flap_loses_nothing() {
    for pol in policies() {
        let rig = stream_failing_nothing(37, pol, 1_000_000_000, Fault::LinkDown { host: 1, for_ns: 20_000 });
        let c = rig.f.fault_counters();
        assert!(c.segments_lost > 0 && c.seq_naks + c.timeouts > 0, "{pol:?}: {c:?}");
    }
}

/// The link stays down past `retry_cnt + 1` transport timeouts: every QP
/// with traffic in flight fails (`RetryExcErr`, then flushes), each
/// request once; a tenant that was idle meanwhile keeps a working QP, and
/// the failed QPs are recovered once the link is back.
#[test]
fn a_long_link_outage_fails_the_busy_qps_and_spares_idle_ones() {
    let budget_ns = ib_timeout_ps(14) / PS_PER_NS * 8;
    let outage_ns = budget_ns + 100_000_000;
    for pol in [Pol::Passthrough, Pol::Force(ForceSplit::HEAVY)] {
        let mut rig = rig(41, pol);
        let idle = rig.tenant("idle", 1, 2 * PER_QP * SIZE as usize);
        let run = stream(&mut rig, 2 * outage_ns, |r| r.f.inject(Fault::LinkDown { host: 1, for_ns: outage_ns }));
        assert_fails_once_and_for_all(&run, pol);
        for &(t, qp) in &QPS {
            let s = run.statuses(t, qp);
            assert!(s.contains(&WcStatus::RetryExcErr), "{pol:?} tenant {t} QP {qp}: {s:?}");
        }
        // Wait for the link, then the idle tenant's QP still works.
        let back = FAULT_AT_NS + outage_ns;
        if rig.now_ns() < back {
            let wait = back - rig.now_ns() + 1_000;
            rig.idle_for(wait);
        }
        fresh_traffic(&mut rig, idle, 0, 0x1D1E, 4);
        for &(t, qp) in &QPS {
            rig.recover(t, qp);
            fresh_traffic(&mut rig, t, qp, 0xB000 + ((t as u64) << 8) + qp as u64 * 64, 4);
        }
        let c = rig.f.fault_counters();
        assert!(c.retry_exceeded >= 3 && c.timeouts >= 7, "{pol:?}: {c:?}");
    }
}

/// The NIC stalls for 300 us: everything completes, nothing fails.
#[test]
fn a_nic_stall_delays_but_fails_nothing() {
    for pol in policies() {
        let rig = stream_failing_nothing(43, pol, 50_000_000, Fault::NicStall { host: 0, for_ns: 300_000 });
        assert!(rig.now_ns() > FAULT_AT_NS + 300_000, "{pol:?}: finished before the stall ended");
    }
}

/// Forty ACKs are lost mid-stream: cumulative ACKs and retransmission
/// after the timer (at least one timeout) cover them, nothing fails and no
/// SEND-like side effect happens twice.
#[test]
fn lost_acks_fail_nothing() {
    for pol in policies() {
        let rig = stream_failing_nothing(47, pol, 1_000_000_000, Fault::DropAcks { host: 0, count: 40 });
        // The lost ACKs led to retransmission timeouts, and the responder
        // answered the retransmitted requests as duplicates, without
        // executing them again.
        let c = rig.f.fault_counters();
        assert_eq!(c.answers_lost, 40, "{pol:?}");
        assert!(c.timeouts > 0 && c.duplicates > 0 && c.retry_exceeded == 0, "{pol:?}: {c:?}");
    }
}

/// The dataplane's shared send CQ overruns (a whole-NIC event): `round`
/// keeps working, every request still completes exactly once (those whose
/// completion the CQ lost with `WrFlushErr`), every data QP is failed, the
/// CQ is replaced, and each QP recovers.
#[test]
fn a_send_cq_overrun_fails_every_qp_cleanly_and_they_recover() {
    for pol in policies() {
        let mut rig = rig(53, pol);
        let [send_cq, _] = rig.dp.completion_queues();
        let run = stream(&mut rig, 50_000_000, |r| r.f.inject(Fault::CqOverrun { host: 0, cq: send_cq }));
        assert_fails_once_and_for_all(&run, pol);
        for &(t, qp) in &QPS {
            assert!(run.errors(t, qp) > 0, "{pol:?} tenant {t} QP {qp}: {:?}", run.statuses(t, qp));
            assert_eq!(rig.dp.qp_failed(t as u32, qp), Some(true));
        }
        let c = rig.dp.counters();
        assert_eq!(c.cq_overruns, 1, "{pol:?}: {c:?}");
        assert_ne!(rig.dp.completion_queues()[0], send_cq, "{pol:?}: the CQ was not replaced");
        for &(t, qp) in &QPS {
            rig.recover(t, qp);
            fresh_traffic(&mut rig, t, qp, 0xC000 + ((t as u64) << 8) + qp as u64 * 64, 4);
        }
    }
}

/// A tenant cannot make the dataplane overrun its own CQs: QPs whose
/// queues together hold more than the shared CQs are accepted and share
/// them under a budget, and a QP whose own queue, beside every QP's
/// control reserve, would not fit is refused with an error.
#[test]
fn create_qp_refuses_only_a_queue_the_cqs_cannot_hold() {
    let cfg = DataplaneConfig { sq_depth: 32 * 1024, ..DataplaneConfig::default() };
    let mut rig = Rig::new(59, Pol::Passthrough, cfg);
    let h = rig.dp.add_tenant("greedy", 1).expect("add_tenant");
    for _ in 0..64 {
        rig.dp.create_qp(h.id, 0).expect("64 QPs of 32 Ki slots share a 1 Mi CQ");
    }
    let cfg = DataplaneConfig { sq_depth: 4096, cq_depth: 4096, ..DataplaneConfig::default() };
    let mut rig = Rig::new(59, Pol::Passthrough, cfg);
    let h = rig.dp.add_tenant("greedy", 1).expect("add_tenant");
    let err = rig.dp.create_qp(h.id, 0).expect_err("a queue as deep as the CQ leaves no control reserve");
    assert!(err.to_string().contains("do not fit"), "{err}");
}

/// QPs whose send queues oversubscribe the shared CQ four times over, all
/// flooded at once: the loop keeps what it posts within the CQ's budget,
/// the CQ never overruns and every request completes once, in order.
#[test]
fn oversubscribed_qps_share_the_cq_budget_without_overrun() {
    let cfg = DataplaneConfig { sq_depth: 512, rq_depth: 256, cq_depth: 2048, ..DataplaneConfig::default() };
    // Under a wide window every chunk is signaled: without the budget
    // their completions alone would overrun the CQ.
    let wide = Pol::Named("fairshare:window_kib=65536,read_window_kib=65536,chunk_bytes=4096,read_chunk_bytes=4096");
    for pol in [Pol::Passthrough, Pol::Force(ForceSplit::HEAVY), wide] {
        let qps = [8u32, 8];
        let ops: Vec<GenOp> = (0..2400)
            .map(|i| GenOp {
                tenant: i % 2,
                qp: (i / 2 % 8) as u32,
                read: i % 7 == 0,
                size: 64 + i as u32 % 3000,
                burst: 0,
            })
            .collect();
        let rig = run_case_with(&qps, &ops, 61, pol, cfg, 2_000_000_000, |_| {}).expect("exactly once, in order");
        let c = rig.dp.counters();
        assert_eq!(c.cq_overruns, 0, "{pol:?}: {c:?}");
        assert!(c.cq_budget_holds > 0, "{pol:?}: the budget never held a QP back: {c:?}");
    }
}

/// The shared receive CQ overruns: every RECV posted completes once with
/// `WrFlushErr` (their CQEs were lost), the sends in flight complete once
/// through the NIC's flush on the healthy send CQ, every data QP is failed,
/// and the receive CQ is replaced.
#[test]
fn a_recv_cq_overrun_fails_the_recvs_once_and_replaces_the_cq() {
    let mut rig = rig(61, Pol::Perf);
    let [_, recv_cq] = rig.dp.completion_queues();
    let recv = |r: &Rig, id: u64| WorkRequest { op: RequestOp::Recv, ..r.wr(1, id, 0, false, 0, 64) };
    for id in 0..3 {
        let wr = recv(&rig, 0xEC00 + id);
        post(&rig.tenants[1].h, wr);
    }
    let run = stream(&mut rig, 50_000_000, |r| r.f.inject(Fault::CqOverrun { host: 0, cq: recv_cq }));
    assert_fails_once_and_for_all(&run, Pol::Perf);
    let recvs: Vec<(u64, WcStatus)> = run.recvs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(recvs, (0..3).map(|i| (0xEC00 + i, WcStatus::WrFlushErr)).collect::<Vec<_>>());
    for &(t, qp) in &QPS {
        assert_eq!(rig.dp.qp_failed(t as u32, qp), Some(true), "tenant {t} QP {qp}");
    }
    assert_eq!(rig.dp.counters().cq_overruns, 1);
    assert_ne!(rig.dp.completion_queues()[1], recv_cq, "the receive CQ was not replaced");
}
