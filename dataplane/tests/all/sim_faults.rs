//! Injected faults in the simulated RNIC, through the [`Rnic`] trait on two
//! hosts in virtual time: a link that goes down (loss recovered by a
//! sequence-error NAK or by the transport timer, `RetryExcErr` once
//! `retry_cnt` retransmissions time out), lost ACKs (cumulative ACKs,
//! duplicates answered without being executed twice), a lost READ
//! response, a stalled NIC, a QP driven to ERR and a CQ overrun; and that a
//! fault plan is as deterministic as the rest of the model.
//!
//! Timing expectations come from the profile: the transport timeout is
//! IB timeout code 14 (4.096 us x 2^14 = 67.1 ms) and QPs are brought up
//! with `retry_cnt` 7.

use perf_dataplane::rnic::connect::{connect_pair, DEFAULT_RETRY_CNT};
use perf_dataplane::rnic::sim::{ib_timeout_ps, Fault, FaultCounters, SimFabric, SimRnic, PS_PER_NS};
use perf_dataplane::rnic::*;

/// Upper bound on fabric steps in any one wait (a hang is a test failure).
const MAX_STEPS: usize = 2_000_000;
/// 64 KiB: one scheduler turn, one run of 16 packets on the wire.
const MSG: u32 = 64 * 1024;

fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// The transport timeout in ns.
fn timeout_ns() -> u64 {
    ib_timeout_ps(14) / PS_PER_NS
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i as u64).wrapping_mul(0x9E37_79B9) >> 7) as u8 ^ seed.wrapping_mul(31)).collect()
}

/// Host 0 (requester, `a`) and host 1 (responder, `b`): one CQ, one region
/// and `nqps` connected QPs each.
struct Pair {
    f: SimFabric,
    a: SimRnic,
    b: SimRnic,
    cq_a: CqHandle,
    cq_b: CqHandle,
    mr_a: Mr,
    mr_b: Mr,
    qa: Vec<Qp>,
    qb: Vec<Qp>,
}

impl Pair {
    fn new(seed: u64, nqps: usize, mem: usize) -> Pair {
        let f = SimFabric::pair(seed);
        let (mut a, mut b) = (f.nic(0), f.nic(1));
        let (pa, pb) = (a.alloc_pd().expect("pd"), b.alloc_pd().expect("pd"));
        let cq_a = a.create_cq(CqAttr { depth: 4096, ignore_overrun: false }).expect("cq");
        let cq_b = b.create_cq(CqAttr { depth: 4096, ignore_overrun: false }).expect("cq");
        let mr_a = a.reg_mr(pa, mem, all_access()).expect("mr");
        let mr_b = b.reg_mr(pb, mem, all_access()).expect("mr");
        let (mut qa, mut qb) = (Vec::new(), Vec::new());
        for _ in 0..nqps {
            let x = a.create_qp(pa, QpInitAttr::new(cq_a, cq_a)).expect("qp");
            let y = b.create_qp(pb, QpInitAttr::new(cq_b, cq_b)).expect("qp");
            connect_pair(&mut a, (x.handle, x.qp_num), &mut b, (y.handle, y.qp_num), all_access()).expect("connect");
            qa.push(x);
            qb.push(y);
        }
        Pair { f, a, b, cq_a, cq_b, mr_a, mr_b, qa, qb }
    }

    /// Posts a signaled WRITE of `len` bytes at `off` (same offset both sides).
    fn write(&mut self, qp: usize, wr_id: u64, off: usize, len: u32) {
        self.post_rdma(qp, wr_id, off, len, |remote| WrOpcode::Write { remote }, "post WRITE");
    }

    /// Posts a signaled READ of `len` bytes at `off` of `b` into `off` of `a`.
    fn read(&mut self, qp: usize, wr_id: u64, off: usize, len: u32) {
        self.post_rdma(qp, wr_id, off, len, |remote| WrOpcode::Read { remote }, "post READ");
    }

    /// Posts one signaled `op` on `a`'s QP `qp` between `len` bytes at `off`
    /// of `a`'s region and the same range of `b`'s.
    fn post_rdma(&mut self, qp: usize, wr_id: u64, off: usize, len: u32, op: fn(RemoteAddr) -> WrOpcode, what: &str) {
        let sge = [self.mr_a.sge(off, len)];
        let wr = SendWr { wr_id, opcode: op(self.mr_b.remote(off)), payload: Payload::Sges(&sge), signaled: true };
        self.a.post_send(self.qa[qp].handle, &[wr]).expect(what);
    }

    /// Moves one `MSG`-byte pattern (`seed`) as wr 1 on QP 0, a WRITE of
    /// `a`'s bytes to `b` or (`read`) a READ of `b`'s bytes into `a`, with
    /// `fault` injected at `at_ns`: the message succeeds and its bytes land.
    /// Returns its completion.
    fn one_message_despite(&mut self, read: bool, seed: u8, at_ns: u64, fault: Fault) -> Wc {
        let data = pattern(MSG as usize, seed);
        let (src, src_mr) = if read { (&mut self.b, self.mr_b) } else { (&mut self.a, self.mr_a) };
        src.write_mr(src_mr.handle, 0, &data).expect("write_mr");
        if read {
            self.read(0, 1, 0, MSG);
        } else {
            self.write(0, 1, 0, MSG);
        }
        self.f.inject_at(at_ns, fault);
        let wcs = self.wait(1);
        assert_eq!(statuses(&wcs), [(1, WcStatus::Success)]);
        let (dst, dst_mr) = if read { (&self.a, &self.mr_a) } else { (&self.b, &self.mr_b) };
        assert_eq!(Pair::read_mr(dst, dst_mr, 0, MSG as usize), data);
        wcs[0]
    }

    /// Steps until host `a`'s CQ yielded `n` completions; returns them.
    fn wait(&mut self, n: usize) -> Vec<Wc> {
        let mut out = Vec::new();
        let mut buf = [Wc::EMPTY; 64];
        for _ in 0..MAX_STEPS {
            let k = self.a.poll_cq(self.cq_a, &mut buf).expect("poll_cq");
            out.extend_from_slice(&buf[..k]);
            if out.len() >= n {
                return out;
            }
            assert!(self.f.step(), "idle with {} of {n} completions: {out:?}", out.len());
        }
        panic!("no {n} completions within {MAX_STEPS} steps: {out:?}");
    }

    /// Everything host `b`'s CQ holds now.
    fn drain_b(&mut self) -> Vec<Wc> {
        let mut buf = [Wc::EMPTY; 64];
        let k = self.b.poll_cq(self.cq_b, &mut buf).expect("poll_cq b");
        buf[..k].to_vec()
    }

    fn read_mr(nic: &SimRnic, mr: &Mr, off: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        nic.read_mr(mr.handle, off, &mut out).expect("read_mr");
        out
    }

    fn faults(&self) -> FaultCounters {
        self.f.fault_counters()
    }
}

fn statuses(wcs: &[Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// A link that drops the tail of a stream (nothing follows the lost
/// message): the requester's transport timer fires one timeout after the
/// send and the retransmission lands the bytes.
#[test]
fn a_lost_tail_is_retransmitted_after_the_transport_timeout() {
    let mut p = Pair::new(1, 1, 1 << 20);
    // The 16 packets leave between about 0.9 and 6.3 us: cut them at 2 us.
    let t = p.one_message_despite(false, 1, 2_000, Fault::LinkDown { host: 1, for_ns: 2_000 }).timestamp_ns;
    assert!(t >= timeout_ns() && t < timeout_ns() + 100_000, "completed at {t} ns, timeout {} ns", timeout_ns());
    let c = p.faults();
    assert!(c.segments_lost >= 1 && c.timeouts == 1 && c.retry_exceeded == 0, "{c:?}");
}

/// A loss in the middle of a stream: the next message to arrive shows the
/// responder a gap, its sequence-error NAK sends the requester back at
/// once, and no timer has to fire. Every message lands, in order.
#[test]
fn a_loss_mid_stream_is_repaired_by_a_sequence_nak_without_a_timeout() {
    let mut p = Pair::new(2, 1, 1 << 20);
    let n = 8usize;
    for k in 0..n {
        p.a.write_mr(p.mr_a.handle, k * MSG as usize, &pattern(MSG as usize, k as u8)).expect("write_mr");
        p.write(0, k as u64, k * MSG as usize, MSG);
    }
    p.f.inject_at(2_000, Fault::LinkDown { host: 0, for_ns: 2_000 });
    let wcs = p.wait(n);
    assert_eq!(statuses(&wcs), (0..n as u64).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>());
    let last = wcs[n - 1].timestamp_ns;
    assert!(last < 1_000_000, "the stream finished only at {last} ns");
    for k in 0..n {
        let got = Pair::read_mr(&p.b, &p.mr_b, k * MSG as usize, MSG as usize);
        assert!(got == pattern(MSG as usize, k as u8), "message {k} differs at the responder");
    }
    let c = p.faults();
    assert!(c.segments_lost >= 1 && c.seq_naks >= 1 && c.timeouts == 0, "{c:?}");
}

/// A link down for longer than `retry_cnt + 1` timeouts: the oldest
/// message fails with `RetryExcErr` after exactly that budget, the QP goes
/// to ERR and the message behind it is flushed.
#[test]
fn a_link_down_past_the_retry_budget_fails_with_retry_exceeded() {
    let mut p = Pair::new(3, 1, 1 << 20);
    p.write(0, 1, 0, MSG);
    p.f.inject_at(2_000, Fault::LinkDown { host: 1, for_ns: 2_000_000_000 });
    p.write(0, 2, MSG as usize, 4096);
    let wcs = p.wait(2);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]);
    let budget = timeout_ns() * (DEFAULT_RETRY_CNT as u64 + 1);
    let t = wcs[0].timestamp_ns;
    assert!(t >= budget && t < budget + 1_000_000, "failed at {t} ns, budget {budget} ns");
    assert_eq!(p.a.qp_state(p.qa[0].handle).expect("state"), QpState::Err);
    let c = p.faults();
    assert_eq!((c.timeouts, c.retry_exceeded), (DEFAULT_RETRY_CNT as u64, 1), "{c:?}");
    assert!(!p.a.port_info().active || !p.b.port_info().active, "the port reports the link down");
}

/// The only ACK of a SEND is lost: the timer retransmits, the responder
/// recognises a duplicate and answers it without consuming a second RECV.
#[test]
fn a_lost_ack_is_retransmitted_and_the_send_lands_once() {
    let mut p = Pair::new(4, 1, 1 << 16);
    let data = pattern(512, 4);
    p.a.write_mr(p.mr_a.handle, 0, &data).expect("write_mr");
    for k in 0..2u64 {
        let sge = [p.mr_b.sge(1024 * k as usize, 1024)];
        p.b.post_recv(p.qb[0].handle, &[RecvWr { wr_id: 100 + k, sgl: &sge }]).expect("post_recv");
    }
    p.f.inject(Fault::DropAcks { host: 0, count: 1 });
    let sge = [p.mr_a.sge(0, 512)];
    let wr = SendWr { wr_id: 9, opcode: WrOpcode::Send, payload: Payload::Sges(&sge), signaled: true };
    p.a.post_send(p.qa[0].handle, &[wr]).expect("post SEND");
    let wcs = p.wait(1);
    assert_eq!(statuses(&wcs), [(9, WcStatus::Success)]);
    assert!(wcs[0].timestamp_ns >= timeout_ns(), "completed before the timeout: {:?}", wcs[0]);
    let recvs = p.drain_b();
    assert_eq!(statuses(&recvs), [(100, WcStatus::Success)], "the SEND consumed exactly one RECV");
    assert_eq!(Pair::read_mr(&p.b, &p.mr_b, 0, 512), data);
    let c = p.faults();
    assert_eq!((c.answers_lost, c.timeouts, c.duplicates), (1, 1, 1), "{c:?}");
}

/// ACKs lost in the middle of a stream cost nothing: the next ACK
/// acknowledges the earlier messages too (RC ACKs are cumulative).
#[test]
fn lost_acks_mid_stream_are_covered_by_later_acks() {
    let mut p = Pair::new(5, 1, 1 << 20);
    let n = 10u64;
    p.f.inject(Fault::DropAcks { host: 0, count: 3 });
    for k in 0..n {
        p.write(0, k, (k * 4096) as usize, 4096);
    }
    let wcs = p.wait(n as usize);
    assert_eq!(statuses(&wcs), (0..n).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>());
    assert!(wcs.iter().all(|w| w.timestamp_ns < 1_000_000), "{wcs:?}");
    let c = p.faults();
    assert_eq!((c.answers_lost, c.timeouts, c.duplicates), (3, 0, 0), "{c:?}");
}

/// A READ whose response is cut on the way back is read again, and the
/// requester's region holds the responder's bytes.
#[test]
fn a_lost_read_response_is_read_again() {
    let mut p = Pair::new(6, 1, 1 << 20);
    // The READ request reaches the responder at about 1.5 us and its
    // response is on the wire from about 2 us for 5.4 us.
    p.one_message_despite(true, 6, 4_000, Fault::LinkDown { host: 0, for_ns: 1_000 });
    let c = p.faults();
    assert!(c.segments_lost >= 1 && c.timeouts == 1, "{c:?}");
}

/// A stalled NIC dispatches nothing while it stalls and then catches up,
/// with no error (the stall is shorter than the transport timeout).
#[test]
fn a_stalled_nic_resumes_without_errors() {
    let mut p = Pair::new(7, 2, 1 << 20);
    let stall_ns = 200_000;
    p.f.inject(Fault::NicStall { host: 0, for_ns: stall_ns });
    for k in 0..8u64 {
        p.write((k % 2) as usize, k, (k * 4096) as usize, 4096);
    }
    let wcs = p.wait(8);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let first = wcs.iter().map(|w| w.timestamp_ns).min().unwrap_or(0);
    assert!(first >= stall_ns, "a WQE ran during the stall: completion at {first} ns");
    assert!(wcs.iter().all(|w| w.timestamp_ns < stall_ns + 50_000), "slow to catch up: {wcs:?}");
    assert_eq!(p.faults().timeouts, 0);
}

/// A QP driven to ERR mid-stream: what completed stays completed, the
/// oldest unfinished message gets the injected status, the rest a flush
/// error, and another QP of the same NIC keeps working.
#[test]
fn a_qp_driven_to_err_mid_stream_flushes_only_itself() {
    let mut p = Pair::new(8, 2, 8 << 20);
    for k in 0..4u64 {
        p.write(0, k, (k as usize) << 20, 1 << 20);
    }
    let first = p.wait(1);
    assert_eq!(statuses(&first), [(0, WcStatus::Success)]);
    let qa0 = p.qa[0].handle;
    p.f.inject(Fault::QpError { host: 0, qp: qa0, status: WcStatus::LocQpOpErr });
    p.write(1, 10, 4 << 20, 4096);
    let rest = p.wait(4);
    let on0: Vec<_> = rest.iter().filter(|w| w.qp_num == p.qa[0].qp_num).map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(on0, [(1, WcStatus::LocQpOpErr), (2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)]);
    let on1: Vec<_> = rest.iter().filter(|w| w.qp_num == p.qa[1].qp_num).map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(on1, [(10, WcStatus::Success)]);
    assert_eq!(p.a.qp_state(qa0).expect("state"), QpState::Err);
    assert_eq!(p.a.qp_state(p.qa[1].handle).expect("state"), QpState::Rts);
}

/// An injected CQ overrun: `poll_cq` fails from then on and every QP on
/// that CQ is in ERR; the peer's QPs and CQ are untouched.
#[test]
fn an_injected_cq_overrun_fails_the_cq_and_its_qps() {
    let mut p = Pair::new(9, 2, 1 << 20);
    p.write(0, 1, 0, 4096);
    let _ = p.wait(1);
    p.f.inject(Fault::CqOverrun { host: 0, cq: p.cq_a });
    let mut buf = [Wc::EMPTY; 4];
    assert_eq!(p.a.poll_cq(p.cq_a, &mut buf), Err(RnicError::CqOverrun { cq: p.cq_a.0 }));
    for q in &p.qa {
        assert_eq!(p.a.qp_state(q.handle).expect("state"), QpState::Err);
    }
    for q in &p.qb {
        assert_eq!(p.b.qp_state(q.handle).expect("state"), QpState::Rts);
    }
    assert_eq!(p.b.poll_cq(p.cq_b, &mut buf), Ok(0));
}

/// The same seed and the same fault plan give the same completions at the
/// same times.
#[test]
fn a_fault_plan_is_deterministic() {
    let run = || {
        let mut p = Pair::new(10, 2, 1 << 20);
        for k in 0..12u64 {
            p.write((k % 2) as usize, k, (k * 16384) as usize, 16384);
        }
        p.f.inject_at(1_500, Fault::LinkDown { host: 1, for_ns: 3_000 });
        p.f.inject_at(5_000, Fault::DropAcks { host: 0, count: 2 });
        p.f.inject_at(9_000, Fault::NicStall { host: 0, for_ns: 10_000 });
        let wcs = p.wait(12);
        (wcs.iter().map(|w| (w.wr_id, w.status, w.timestamp_ns)).collect::<Vec<_>>(), p.faults())
    };
    let (a, ca) = run();
    let (b, cb) = run();
    assert_eq!(a, b);
    assert_eq!(ca, cb);
    assert!(ca.segments_lost > 0, "the plan hit nothing: {ca:?}");
    assert!(a.iter().all(|x| x.1 == WcStatus::Success), "{a:?}");
}
