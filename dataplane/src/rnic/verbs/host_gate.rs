//! Host-side gating: the cross-channel semantics of the [`Rnic`](crate::rnic::Rnic)
//! trait (WAIT, SEND_ENABLE, managed send queues, NOP) for a device whose
//! library does not offer them, which is every device under upstream
//! rdma-core (only MLNX_OFED 4.x had `IBV_EXP_WR_CQE_WAIT`,
//! `IBV_EXP_WR_SEND_ENABLE` and `IBV_EXP_QP_CREATE_MANAGED_SEND`).
//!
//! # What is gated, and where
//! Every send work request first enters a per-QP software queue, in post
//! order. The gate *executes* the head of that queue when it is allowed to:
//! - a **data WQE** (WRITE, SEND, READ, with or without immediate) executes
//!   by being handed to the real send queue (an [`GateAction::Post`] the
//!   backend turns into `ibv_post_send`); from then on the NIC runs it;
//! - a **managed QP** executes nothing beyond the credit that SEND_ENABLEs
//!   have granted it: its WQEs stay in host memory until then;
//! - a **WAIT** executes once the watched CQ's completion count (the
//!   completions the gate has delivered on that CQ since its creation; see
//!   below) reaches the WAIT's absolute count; until then it, and every
//!   WQE posted after it on that QP, stay in host memory;
//! - a **SEND_ENABLE** executes when it reaches the head: it adds `count` to
//!   the target's credit, which may release the target's WQEs at once;
//! - a **NOP** executes when it reaches the head.
//!
//! So WAIT, SEND_ENABLE and NOP never reach the NIC: they *complete in
//! software*, and produce a CQE (in the QP's send CQ, with opcode
//! [`WcOpcode::Wait`] / [`WcOpcode::SendEnable`] / [`WcOpcode::Nop`]) if they
//! were signaled. This is host-gated, not in-NIC: the hand-off between QPs
//! happens when the host CPU next runs the gate (on a `post_send` or
//! `poll_cq` of the backend), not when the NIC's scheduler reaches the WQE,
//! and a zero-weight WAIT takes no turn of the NIC's scheduler. A
//! SEND_ENABLE releases the target when the WQEs before it have been handed
//! to the NIC, not when the NIC has sent them, so the releasing and the
//! released QP can both have WQEs in the NIC for a while.
//!
//! # Completion counts
//! A WAIT's count refers to the CQEs the gate has delivered into the CQ's
//! software queue: the device's CQEs the backend has reaped with
//! `ibv_poll_cq` (it reaps every CQ that a gated QP depends on whenever it
//! runs) plus the gate's own CQEs. CQEs the gate hides (see below) are not
//! counted, so the count is exactly what the application can poll.
//!
//! # Completion order
//! RC completes a send queue in order, and the trait's users rely on it (a
//! CQE implies that every earlier WQE of the QP is done). The gate keeps a
//! per-QP ledger of executed WQEs and delivers a software CQE only when
//! every earlier hardware WQE of that QP is known to be complete. To know
//! that, the gate sets `IBV_SEND_SIGNALED` on the last data WQE of every
//! doorbell of a cross-channel QP (the QPs that post WAIT and SEND_ENABLE),
//! and on the data WQE just before any signaled control WQE posted with it.
//! Failing both (a signaled NOP on a plain QP after unsignaled data of an
//! earlier post, or a send queue full of unsignaled WQEs), it posts a
//! zero-length RDMA WRITE as a completion marker, which needs the peer QP
//! to grant remote write access. The CQEs of added signals and markers are
//! hidden from the application; a marker's error (the peer refused it) is
//! reported on the QP's next flushed completion instead of `WR_FLUSH_ERR`.
//!
//! # ERR
//! When a QP fails (an error CQE, a move to ERR, a refused post of gated
//! work, a CQ overrun), held WQEs complete with flush errors in order,
//! after the device's own. The device says nothing about unsignaled WQEs
//! that completed before the error, so the gate drains the send queue as
//! the kernel's `ib_drain_sq` does: with the device QP in ERR it posts one
//! signaled zero-length WRITE, whose flush CQE retires every earlier WQE.
//! The backend asks for [`crate::rnic::sizing::MARKER_SLOTS`] slots beyond
//! the application's depth, so that the drain marker always has one.
//!
//! # Cost
//! The gate runs on every `post_send` and `poll_cq` of the backend, so its
//! per-call work is bounded by what changed: finding the WQE a device CQE
//! names is O(1) (the ledger's sequence numbers are contiguous), and the
//! set of CQs to reap ([`HostGate::cqs_to_watch`]) is kept incrementally,
//! per QP that changed. `cargo bench -p perf-benches --bench gate` measures
//! the gate's time per WQE.
//!
//! The module is backend-independent (generic over the owned work `W` the
//! backend posts) and is unit-tested without a device.

use std::collections::VecDeque;

use crate::rnic::cq_ring::CqRing;
use crate::rnic::{CqHandle, QpHandle, QpState, RnicError, Wc, WcOpcode, WcStatus};

/// Bits of the device `wr_id` that hold the QP handle.
pub const QP_BITS: u32 = 23;
/// Bits of the device `wr_id` that hold the per-QP sequence number.
pub const SEQ_BITS: u32 = 40;
/// Mask of a sequence number.
pub const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// Number of QP handles the `wr_id` encoding can name.
pub const MAX_QPS: u32 = 1 << QP_BITS;
const RECV_BIT: u64 = 1 << 63;

/// The `wr_id` the backend gives the device: which queue of which QP, and
/// the gate's sequence number there. The application's own `wr_id` stays in
/// the gate's ledger, so error completions (whose opcode field libibverbs
/// leaves undefined) are still reported with the right opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwWrId {
    /// A receive-queue entry (else send queue).
    pub recv: bool,
    /// The QP handle's value (below [`MAX_QPS`]).
    pub qp: u32,
    /// Sequence number in that queue (below 2^[`SEQ_BITS`], wrapping).
    pub seq: u64,
}

impl HwWrId {
    /// Packs into a 64-bit `wr_id`.
    pub fn encode(self) -> u64 {
        let recv = if self.recv { RECV_BIT } else { 0 };
        recv | ((self.qp as u64 & (MAX_QPS as u64 - 1)) << SEQ_BITS) | (self.seq & SEQ_MASK)
    }

    /// Unpacks a `wr_id` made by [`HwWrId::encode`].
    pub fn decode(raw: u64) -> Self {
        HwWrId { recv: raw & RECV_BIT != 0, qp: ((raw >> SEQ_BITS) & (MAX_QPS as u64 - 1)) as u32, seq: raw & SEQ_MASK }
    }
}

/// How the gate should treat one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateQpConfig {
    /// The device's QP number (reported in CQEs).
    pub qp_num: u32,
    /// Send CQ.
    pub send_cq: CqHandle,
    /// Receive CQ.
    pub recv_cq: CqHandle,
    /// WQEs execute only under SEND_ENABLE credit.
    pub managed: bool,
    /// The QP may post WAIT and SEND_ENABLE.
    pub cross_channel: bool,
    /// Every send WQE reports a CQE.
    pub sig_all: bool,
    /// Send queue depth the application sees.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Depth of the device's send queue (at least `max_send_wr`; more
    /// leaves room for completion markers).
    pub hw_send_depth: u32,
}

/// What one send work request asks of the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOp<W> {
    /// A data WQE for the device.
    Hw(W),
    /// WAIT until `cq` has delivered `count` completions since creation.
    Wait {
        /// The watched CQ.
        cq: CqHandle,
        /// Absolute count.
        count: u64,
    },
    /// Give managed QP `qp` credit for `count` more WQEs.
    SendEnable {
        /// The managed QP.
        qp: QpHandle,
        /// Credit.
        count: u32,
    },
    /// Do nothing (complete in order).
    Nop,
}

/// One send work request as the gate holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateWr<W> {
    /// The application's `wr_id`.
    pub wr_id: u64,
    /// The application asked for a CQE.
    pub signaled: bool,
    /// The opcode its CQE reports.
    pub opcode: WcOpcode,
    /// The byte length its CQE reports.
    pub byte_len: u32,
    /// What it does.
    pub op: GateOp<W>,
}

/// What the backend hands to the device for one [`GateAction::Post`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwWork<W> {
    /// An application data WQE.
    User(W),
    /// A zero-length RDMA WRITE whose signaled CQE tells the gate that
    /// every earlier WQE of the QP has completed; hidden from the application.
    Marker,
}

/// One WQE to post to the device's send queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwPost<W> {
    /// The QP.
    pub qp: QpHandle,
    /// The device `wr_id` (an encoded [`HwWrId`]).
    pub wr_id: u64,
    /// Post with `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// The WQE.
    pub work: HwWork<W>,
}

/// Work for the backend, in the order the gate decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateAction<W> {
    /// Post this WQE (consecutive posts to the same QP may share a doorbell).
    Post(HwPost<W>),
    /// Move the device QP to ERR (the gate failed it in software), so that
    /// the device flushes what it still holds.
    MoveToError(QpHandle),
}

/// Counters of the gate's own work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateCounters {
    /// WAIT / SEND_ENABLE / NOP executed in software.
    pub ctrl_executed: u64,
    /// Data WQEs handed to the device.
    pub hw_posted: u64,
    /// Completion markers posted.
    pub markers: u64,
    /// Data WQEs the gate signaled although the application did not.
    pub signals_added: u64,
    /// Device CQEs hidden from the application (markers, added signals).
    pub hidden_cqes: u64,
    /// Times a WAIT found its count not yet reached.
    pub wait_blocks: u64,
}

enum Entry {
    Hw {
        seq: u64,
        wr_id: u64,
        opcode: WcOpcode,
        len: u32,
        report_ok: bool,
        /// Posted with (or later given) `IBV_SEND_SIGNALED`.
        signaled: bool,
        marker: bool,
    },
    Sw {
        wr_id: u64,
        opcode: WcOpcode,
        status: WcStatus,
        report: bool,
    },
}

/// Marks an unsignaled tail entry that cannot be signaled any more (its
/// post is not among this round's actions): a marker must follow it.
const PAST_ROUND: u64 = u64::MAX;

struct GQp<W> {
    cfg: GateQpConfig,
    state: QpState,
    queue: VecDeque<GateWr<W>>,
    ledger: VecDeque<Entry>,
    /// Hardware entries in the ledger (markers included).
    hw_outstanding: u32,
    /// Software entries in the ledger.
    sw_in_ledger: u32,
    user_outstanding: u32,
    next_seq: u64,
    /// The ledger's hardware entries have exactly the sequence numbers
    /// `hw_lo..hw_hi` (mod 2^SEQ_BITS): they are allocated in order and
    /// leave from the front (or, for a refused post, from the back).
    hw_lo: u64,
    hw_hi: u64,
    /// The last hardware entry of the ledger is unsignaled: the round and
    /// action index of its post ([`PAST_ROUND`] once it cannot be flipped).
    tail_unsig: Option<(u64, usize)>,
    /// The drain marker posted when the QP entered ERR, while outstanding.
    drain: Option<u64>,
    /// The error of a failed completion marker, reported on the QP's next
    /// flushed completion instead of `WR_FLUSH_ERR`, so that the
    /// application sees why its work was flushed.
    cause: Option<WcStatus>,
    executed: u64,
    enabled_upto: u64,
    halted: bool,
    fence_wanted: bool,
    touched_round: Option<u64>,
    waiting: Option<CqHandle>,
    dirty: bool,
    /// The CQs this QP asks the backend to reap (its send CQ, the CQ its
    /// WAIT is blocked on), as last counted in the gate's watch set.
    watched: [Option<u32>; 2],
    watch_queued: bool,
    recv: VecDeque<(u64, u64)>,
    next_recv_seq: u64,
}

impl<W> GQp<W> {
    fn new(cfg: GateQpConfig) -> Self {
        GQp {
            cfg,
            state: QpState::Reset,
            queue: VecDeque::new(),
            ledger: VecDeque::new(),
            hw_outstanding: 0,
            sw_in_ledger: 0,
            user_outstanding: 0,
            next_seq: 0,
            hw_lo: 0,
            hw_hi: 0,
            tail_unsig: None,
            drain: None,
            cause: None,
            executed: 0,
            enabled_upto: 0,
            halted: false,
            fence_wanted: false,
            touched_round: None,
            waiting: None,
            dirty: false,
            watched: [None; 2],
            watch_queued: false,
            recv: VecDeque::new(),
            next_recv_seq: 0,
        }
    }

    fn alloc_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq = (s + 1) & SEQ_MASK;
        s
    }

    /// Most WQEs data and completion markers may occupy on the device:
    /// the drain marker's slot stays free, and data leaves one more for a
    /// completion marker (see [`crate::rnic::sizing::MARKER_SLOTS`]).
    fn data_limit(&self) -> u32 {
        self.cfg.hw_send_depth.saturating_sub(2).max(1)
    }

    /// Whether send WQE `seq` is still in the ledger (O(1)).
    fn has_hw_seq(&self, seq: u64) -> bool {
        let span = self.hw_hi.wrapping_sub(self.hw_lo) & SEQ_MASK;
        (seq.wrapping_sub(self.hw_lo) & SEQ_MASK) < span
    }

    fn push_hw(&mut self, seq: u64, entry: Entry, unsignaled_at: Option<(u64, usize)>) {
        self.ledger.push_back(entry);
        self.hw_outstanding += 1;
        self.hw_hi = (seq + 1) & SEQ_MASK;
        self.tail_unsig = unsignaled_at;
    }

    fn push_sw(&mut self, wr_id: u64, opcode: WcOpcode, status: WcStatus, report: bool) {
        self.ledger.push_back(Entry::Sw { wr_id, opcode, status, report });
        self.sw_in_ledger += 1;
    }

    fn pop_front(&mut self) -> Option<Entry> {
        let e = self.ledger.pop_front()?;
        match &e {
            Entry::Hw { seq, .. } => {
                self.hw_outstanding = self.hw_outstanding.saturating_sub(1);
                self.hw_lo = (seq + 1) & SEQ_MASK;
                if self.hw_lo == self.hw_hi {
                    self.tail_unsig = None;
                }
            }
            Entry::Sw { .. } => self.sw_in_ledger = self.sw_in_ledger.saturating_sub(1),
        }
        Some(e)
    }

    /// The CQs this QP needs reaped: its send CQ while held or
    /// software-completed WQEs wait for device completions (and always for
    /// a cross-channel QP with work in the device), and the CQ a WAIT at
    /// its head is blocked on.
    fn watch_now(&self) -> [Option<u32>; 2] {
        let pending = self.hw_outstanding > 0
            && (self.cfg.cross_channel || self.sw_in_ledger > 0 || !self.queue.is_empty() || self.drain.is_some());
        [pending.then_some(self.cfg.send_cq.0), self.waiting.map(|c| c.0)]
    }

    fn reset(&mut self) {
        self.queue.clear();
        self.ledger.clear();
        self.recv.clear();
        self.hw_outstanding = 0;
        self.sw_in_ledger = 0;
        self.user_outstanding = 0;
        self.hw_lo = self.next_seq;
        self.hw_hi = self.next_seq;
        self.tail_unsig = None;
        self.drain = None;
        self.cause = None;
        self.executed = 0;
        self.enabled_upto = 0;
        self.halted = false;
        self.fence_wanted = false;
        self.waiting = None;
        self.state = QpState::Reset;
    }
}

struct GCq {
    /// Its CQEs and completion counter.
    ring: CqRing,
    waiters: Vec<u32>,
    /// QPs that use this CQ as send or receive CQ (for an overrun).
    users: Vec<u32>,
}

/// The host gate of one device context. See the module documentation.
pub struct HostGate<W> {
    qps: Vec<Option<GQp<W>>>,
    cqs: Vec<Option<GCq>>,
    dirty: VecDeque<u32>,
    actions: Vec<GateAction<W>>,
    touched: Vec<u32>,
    /// Per CQ index: how many QPs want it reaped.
    watch_refs: Vec<u32>,
    /// The CQs with a non-zero count, in the order they were first wanted.
    watch_list: Vec<CqHandle>,
    /// QPs whose contribution to the watch set may have changed.
    watch_dirty: Vec<u32>,
    round: u64,
    now: u64,
    counters: GateCounters,
}

impl<W> Default for HostGate<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W> HostGate<W> {
    /// An empty gate.
    pub fn new() -> Self {
        HostGate {
            qps: Vec::new(),
            cqs: Vec::new(),
            dirty: VecDeque::new(),
            actions: Vec::new(),
            touched: Vec::new(),
            watch_refs: Vec::new(),
            watch_list: Vec::new(),
            watch_dirty: Vec::new(),
            round: 0,
            now: 0,
            counters: GateCounters::default(),
        }
    }

    fn q(&self, qi: u32) -> Option<&GQp<W>> {
        self.qps.get(qi as usize).and_then(Option::as_ref)
    }

    fn qm(&mut self, qi: u32) -> Option<&mut GQp<W>> {
        self.qps.get_mut(qi as usize).and_then(Option::as_mut)
    }

    fn q_or_err(&self, qp: QpHandle) -> Result<&GQp<W>, RnicError> {
        self.q(qp.0).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })
    }

    /// Registers a CQ (its software queue holds `depth` CQEs).
    pub fn add_cq(&mut self, cq: CqHandle, depth: u32, ignore_overrun: bool) {
        let i = cq.0 as usize;
        if self.cqs.len() <= i {
            self.cqs.resize_with(i + 1, || None);
        }
        self.cqs[i] = Some(GCq { ring: CqRing::new(depth, ignore_overrun), waiters: Vec::new(), users: Vec::new() });
    }

    /// Forgets a CQ. WAITs on it are then satisfied (as in the simulator).
    pub fn remove_cq(&mut self, cq: CqHandle) {
        let Some(c) = self.cqs.get_mut(cq.0 as usize).and_then(Option::take) else { return };
        for qi in c.waiters {
            self.wake(qi, cq);
        }
    }

    /// Whether the CQ is registered.
    pub fn has_cq(&self, cq: CqHandle) -> bool {
        self.cqs.get(cq.0 as usize).is_some_and(Option::is_some)
    }

    /// Completions delivered on `cq` since it was created.
    pub fn produced(&self, cq: CqHandle) -> Option<u64> {
        self.cqs.get(cq.0 as usize).and_then(Option::as_ref).map(|c| c.ring.produced)
    }

    /// Registers a QP (in RESET).
    pub fn add_qp(&mut self, qp: QpHandle, cfg: GateQpConfig) -> Result<(), RnicError> {
        if qp.0 >= MAX_QPS {
            return Err(RnicError::InvalidArgument(format!("QP handle {} exceeds the gate's {MAX_QPS}", qp.0)));
        }
        let i = qp.0 as usize;
        if self.qps.len() <= i {
            self.qps.resize_with(i + 1, || None);
        }
        self.remove_qp(qp);
        for cq in [cfg.send_cq, cfg.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0 as usize).and_then(Option::as_mut) {
                if !c.users.contains(&qp.0) {
                    c.users.push(qp.0);
                }
            }
        }
        self.qps[i] = Some(GQp::new(cfg));
        Ok(())
    }

    /// Forgets a QP and everything it holds.
    pub fn remove_qp(&mut self, qp: QpHandle) {
        let Some(q) = self.qps.get_mut(qp.0 as usize).and_then(Option::take) else { return };
        for c in q.watched.into_iter().flatten() {
            self.unwatch(c);
        }
        for cq in [q.cfg.send_cq, q.cfg.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0 as usize).and_then(Option::as_mut) {
                c.users.retain(|&u| u != qp.0);
            }
        }
    }

    /// The QP's state as the gate tracks it.
    pub fn state(&self, qp: QpHandle) -> Option<QpState> {
        self.q(qp.0).map(|q| q.state)
    }

    /// WQEs of the QP still held in software (not executed).
    pub fn held(&self, qp: QpHandle) -> Option<usize> {
        self.q(qp.0).map(|q| q.queue.len())
    }

    /// Send WQEs of the QP the application still counts as outstanding.
    pub fn outstanding(&self, qp: QpHandle) -> Option<u32> {
        self.q(qp.0).map(|q| q.user_outstanding)
    }

    /// The gate's counters.
    pub fn counters(&self) -> GateCounters {
        self.counters
    }

    /// Records a QP state change the backend made on the device. ERR flushes
    /// what the gate holds (with `WR_FLUSH_ERR` CQEs, after the device's own
    /// flushes of earlier WQEs, which a drain marker retires: see
    /// [`HostGate::on_send_completion`]); RESET drops everything.
    pub fn set_state(&mut self, qp: QpHandle, state: QpState, now: u64) {
        self.now = now;
        let Some(q) = self.qm(qp.0) else { return };
        match state {
            QpState::Reset => {
                q.reset();
                self.touch_watch(qp.0);
            }
            QpState::Err => self.enter_error(qp.0, false),
            QpState::Rts => {
                q.state = state;
                self.mark_dirty(qp.0);
                self.run(now);
            }
            _ => q.state = state,
        }
    }

    /// Accepts one send work request (as `ibv_post_send` would, or refuses
    /// it with the reason). Call [`HostGate::run`] after a post list.
    pub fn submit(&mut self, qp: QpHandle, wr: GateWr<W>) -> Result<(), RnicError> {
        let q = self.q_or_err(qp)?;
        if !matches!(q.state, QpState::Rts | QpState::Err) {
            return Err(RnicError::InvalidState { op: "post_send", state: q.state });
        }
        if q.user_outstanding >= q.cfg.max_send_wr {
            return Err(RnicError::QueueFull { queue: "send", depth: q.cfg.max_send_wr });
        }
        match &wr.op {
            GateOp::Wait { cq, .. } => {
                if !q.cfg.cross_channel {
                    return Err(RnicError::InvalidArgument("WAIT needs a QP created with cross_channel".into()));
                }
                if !self.has_cq(*cq) {
                    return Err(RnicError::InvalidHandle { kind: "cq", id: cq.0 });
                }
            }
            GateOp::SendEnable { qp: target, .. } => {
                if !q.cfg.cross_channel {
                    return Err(RnicError::InvalidArgument("SEND_ENABLE needs a QP created with cross_channel".into()));
                }
                if !self.q_or_err(*target)?.cfg.managed {
                    return Err(RnicError::InvalidArgument(format!(
                        "SEND_ENABLE target QP {} is not managed",
                        target.0
                    )));
                }
            }
            GateOp::Hw(_) | GateOp::Nop => {}
        }
        let Some(q) = self.qm(qp.0) else { return Err(RnicError::InvalidHandle { kind: "qp", id: qp.0 }) };
        q.user_outstanding += 1;
        if q.state == QpState::Err {
            q.push_sw(wr.wr_id, wr.opcode, WcStatus::WrFlushErr, true);
            self.drain_front(qp.0);
        } else {
            q.queue.push_back(wr);
            self.mark_dirty(qp.0);
        }
        Ok(())
    }

    /// Executes everything that may now execute, on every QP that may have
    /// changed. Produces [`GateAction`]s for [`HostGate::take_actions`].
    pub fn run(&mut self, now: u64) {
        self.now = now;
        while let Some(qi) = self.dirty.pop_front() {
            if let Some(q) = self.qm(qi) {
                q.dirty = false;
            }
            self.advance(qi);
        }
    }

    /// Hands the actions decided so far to the backend, in order. The last
    /// data WQE of each cross-channel QP's doorbell is signaled first.
    pub fn take_actions(&mut self) -> Vec<GateAction<W>> {
        for qi in std::mem::take(&mut self.touched) {
            let Some(q) = self.q(qi) else { continue };
            if !q.cfg.cross_channel {
                continue;
            }
            if let Some((round, action)) = q.tail_unsig {
                if round == self.round {
                    self.flip(qi, action);
                }
            }
        }
        self.round += 1;
        std::mem::take(&mut self.actions)
    }

    /// Whether there are actions waiting for [`HostGate::take_actions`].
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// CQs the backend should reap from the device before it next runs
    /// the gate: the CQs WAITs are blocked on, and the send CQs of QPs whose
    /// held or software-completed WQEs wait for device completions. Kept
    /// incrementally: the cost is the number of QPs that changed since the
    /// last call, not the number of QPs or the depth of their queues.
    pub fn cqs_to_watch(&mut self) -> &[CqHandle] {
        while let Some(qi) = self.watch_dirty.pop() {
            let Some(q) = self.qm(qi) else { continue };
            q.watch_queued = false;
            let new = q.watch_now();
            let old = std::mem::replace(&mut q.watched, new);
            if old != new {
                for c in old.into_iter().flatten() {
                    self.unwatch(c);
                }
                for c in new.into_iter().flatten() {
                    self.watch(c);
                }
            }
        }
        &self.watch_list
    }

    fn watch(&mut self, cq: u32) {
        let i = cq as usize;
        if self.watch_refs.len() <= i {
            self.watch_refs.resize(i + 1, 0);
        }
        self.watch_refs[i] += 1;
        if self.watch_refs[i] == 1 {
            self.watch_list.push(CqHandle(cq));
        }
    }

    fn unwatch(&mut self, cq: u32) {
        let Some(r) = self.watch_refs.get_mut(cq as usize) else { return };
        *r = r.saturating_sub(1);
        if *r == 0 {
            self.watch_list.retain(|c| c.0 != cq);
        }
    }

    /// Queues the QP for a recount of what it wants watched.
    fn touch_watch(&mut self, qi: u32) {
        if let Some(q) = self.qm(qi) {
            if !q.watch_queued {
                q.watch_queued = true;
                self.watch_dirty.push(qi);
            }
        }
    }

    fn mark_dirty(&mut self, qi: u32) {
        self.touch_watch(qi);
        if let Some(q) = self.qm(qi) {
            if !q.dirty {
                q.dirty = true;
                self.dirty.push_back(qi);
            }
        }
    }

    fn wake(&mut self, qi: u32, cq: CqHandle) {
        if let Some(q) = self.qm(qi) {
            if q.waiting == Some(cq) {
                q.waiting = None;
                self.mark_dirty(qi);
            }
        }
    }

    fn advance(&mut self, qi: u32) {
        enum Next {
            Stop,
            Fence(bool),
            Block(CqHandle, bool),
            Exec,
        }
        self.touch_watch(qi);
        loop {
            let Some(q) = self.q(qi) else { return };
            if q.state != QpState::Rts || q.halted {
                return;
            }
            if q.fence_wanted && q.hw_outstanding < q.cfg.hw_send_depth {
                if let Some(q) = self.qm(qi) {
                    q.fence_wanted = false;
                }
                self.fence(qi);
            }
            let Some(q) = self.q(qi) else { return };
            let next = match q.queue.front() {
                None => Next::Stop,
                Some(_) if q.cfg.managed && q.executed >= q.enabled_upto => Next::Stop,
                Some(GateWr { op: GateOp::Wait { cq, count }, .. }) => {
                    let produced =
                        self.cqs.get(cq.0 as usize).and_then(Option::as_ref).map_or(u64::MAX, |c| c.ring.produced);
                    if produced < *count {
                        Next::Block(*cq, q.waiting == Some(*cq))
                    } else {
                        Next::Exec
                    }
                }
                Some(GateWr { op: GateOp::Hw(_), .. }) if q.hw_outstanding >= q.data_limit() => {
                    Next::Fence(q.tail_unsig.is_some())
                }
                Some(_) => Next::Exec,
            };
            match next {
                Next::Stop => return,
                Next::Fence(needed) => {
                    // Blocked on device room: make sure a completion will come.
                    if needed {
                        self.fence(qi);
                    }
                    return;
                }
                Next::Block(cq, already) => {
                    self.counters.wait_blocks += 1;
                    if !already {
                        if let Some(q) = self.qm(qi) {
                            q.waiting = Some(cq);
                        }
                        if let Some(c) = self.cqs.get_mut(cq.0 as usize).and_then(Option::as_mut) {
                            c.waiters.push(qi);
                        }
                    }
                    return;
                }
                Next::Exec => {}
            }
            let Some(q) = self.qm(qi) else { return };
            let Some(wr) = q.queue.pop_front() else { return };
            q.executed += 1;
            let GateWr { wr_id, signaled, opcode, byte_len, op } = wr;
            match op {
                GateOp::Hw(w) => self.exec_hw(qi, wr_id, signaled, opcode, byte_len, w),
                GateOp::Wait { .. } | GateOp::Nop => self.exec_sw(qi, wr_id, signaled, opcode, WcStatus::Success),
                GateOp::SendEnable { qp: target, count } => {
                    let ok = match self.qm(target.0) {
                        Some(t) if t.cfg.managed => {
                            t.enabled_upto += count as u64;
                            true
                        }
                        _ => false,
                    };
                    if ok {
                        self.mark_dirty(target.0);
                    }
                    let status = if ok { WcStatus::Success } else { WcStatus::LocQpOpErr };
                    self.exec_sw(qi, wr_id, signaled, opcode, status);
                }
            }
        }
    }

    fn exec_hw(&mut self, qi: u32, wr_id: u64, signaled: bool, opcode: WcOpcode, len: u32, w: W) {
        let (round, action) = (self.round, self.actions.len());
        let Some(q) = self.qm(qi) else { return };
        let report_ok = signaled || q.cfg.sig_all;
        let seq = q.alloc_seq();
        if q.touched_round != Some(round) {
            q.touched_round = Some(round);
            self.touched.push(qi);
        }
        let Some(q) = self.qm(qi) else { return };
        let entry = Entry::Hw { seq, wr_id, opcode, len, report_ok, signaled: report_ok, marker: false };
        q.push_hw(seq, entry, (!report_ok).then_some((round, action)));
        let hw_wr_id = HwWrId { recv: false, qp: qi, seq }.encode();
        self.actions.push(GateAction::Post(HwPost {
            qp: QpHandle(qi),
            wr_id: hw_wr_id,
            signaled: report_ok,
            work: HwWork::User(w),
        }));
        self.counters.hw_posted += 1;
    }

    fn exec_sw(&mut self, qi: u32, wr_id: u64, signaled: bool, opcode: WcOpcode, status: WcStatus) {
        self.counters.ctrl_executed += 1;
        let Some(q) = self.qm(qi) else { return };
        let report = signaled || q.cfg.sig_all || !status.is_ok();
        if !status.is_ok() {
            // Nothing after a failed WQE executes; the QP fails when it
            // reaches the front of the ledger.
            q.halted = true;
        }
        if report && status.is_ok() {
            self.fence(qi);
        }
        if let Some(q) = self.qm(qi) {
            q.push_sw(wr_id, opcode, status, report);
        }
        self.drain_front(qi);
    }

    /// Makes sure a device completion will follow the last hardware entry
    /// of the ledger: signal it if it is still in this round's actions,
    /// else post a marker (or remember to, once the device has room).
    /// Returns `false` only when a marker was needed and the device has no
    /// room for it now.
    fn fence(&mut self, qi: u32) -> bool {
        let Some(q) = self.q(qi) else { return true };
        let Some((round, action)) = q.tail_unsig else { return true };
        let device_full = q.hw_outstanding >= q.cfg.hw_send_depth;
        if round == self.round && self.flip(qi, action) {
            return true;
        }
        if device_full {
            if let Some(q) = self.qm(qi) {
                q.fence_wanted = true;
            }
            return false;
        }
        self.post_marker(qi);
        true
    }

    /// Posts a signaled zero-length WRITE on the QP; returns its sequence.
    fn post_marker(&mut self, qi: u32) -> Option<u64> {
        let q = self.qm(qi)?;
        let seq = q.alloc_seq();
        let entry = Entry::Hw {
            seq,
            wr_id: 0,
            opcode: WcOpcode::Write,
            len: 0,
            report_ok: false,
            signaled: true,
            marker: true,
        };
        q.push_hw(seq, entry, None);
        let wr_id = HwWrId { recv: false, qp: qi, seq }.encode();
        self.actions.push(GateAction::Post(HwPost { qp: QpHandle(qi), wr_id, signaled: true, work: HwWork::Marker }));
        self.counters.markers += 1;
        self.touch_watch(qi);
        Some(seq)
    }

    /// Sets `IBV_SEND_SIGNALED` on this round's action `action`, the last
    /// hardware entry of the QP's ledger; `false` if it is not there.
    fn flip(&mut self, qi: u32, action: usize) -> bool {
        let Some(GateAction::Post(p)) = self.actions.get_mut(action) else { return false };
        p.signaled = true;
        self.counters.signals_added += 1;
        if let Some(q) = self.qm(qi) {
            q.tail_unsig = None;
            // The entry is the last hardware one; only unreported software
            // entries (unsignaled WAIT / NOP) can follow it.
            if let Some(Entry::Hw { signaled, .. }) = q.ledger.iter_mut().rev().find(|e| matches!(e, Entry::Hw { .. }))
            {
                *signaled = true;
            }
        }
        true
    }

    /// Delivers a send-queue CQE of QP `qi`: a flush error becomes the
    /// QP's recorded cause, once, if a completion marker failed before.
    fn push_send_cqe(&mut self, qi: u32, mut wc: Wc) {
        let Some(q) = self.qm(qi) else { return };
        if wc.status == WcStatus::WrFlushErr {
            if let Some(cause) = q.cause.take() {
                wc.status = cause;
            }
        }
        let cq = q.cfg.send_cq;
        self.push_cqe(cq, wc);
    }

    /// Delivers the software entries at the front of the ledger.
    fn drain_front(&mut self, qi: u32) {
        self.touch_watch(qi);
        loop {
            let now = self.now;
            let Some(q) = self.qm(qi) else { return };
            if !matches!(q.ledger.front(), Some(Entry::Sw { .. })) {
                return;
            }
            let Some(Entry::Sw { wr_id, opcode, status, report }) = q.pop_front() else { return };
            q.user_outstanding = q.user_outstanding.saturating_sub(1);
            let (qp_num, state) = (q.cfg.qp_num, q.state);
            if report {
                let wc = Wc { wr_id, status, opcode, byte_len: 0, imm: None, qp_num, timestamp_ns: now };
                self.push_send_cqe(qi, wc);
            }
            if !status.is_ok() && status != WcStatus::WrFlushErr && state != QpState::Err {
                self.enter_error(qi, true);
            }
        }
    }

    /// Moves the QP to ERR in the gate: software entries still in the
    /// ledger and everything held are flushed, in order. WQEs still in the
    /// device end with a drain marker (the `ib_drain_sq` pattern): one
    /// signaled zero-length WRITE posted after the device QP is in ERR,
    /// whose flush completion comes after every earlier WQE of the QP has
    /// completed or been flushed, including unsignaled WQEs that completed
    /// silently before the error and will never produce a CQE.
    fn enter_error(&mut self, qi: u32, move_device: bool) {
        self.touch_watch(qi);
        let Some(q) = self.qm(qi) else { return };
        if q.state == QpState::Err {
            return;
        }
        q.state = QpState::Err;
        q.halted = false;
        q.fence_wanted = false;
        q.waiting = None;
        for e in q.ledger.iter_mut() {
            if let Entry::Sw { status, report, .. } = e {
                *status = WcStatus::WrFlushErr;
                *report = true;
            }
        }
        let held: Vec<GateWr<W>> = q.queue.drain(..).collect();
        for wr in held {
            q.push_sw(wr.wr_id, wr.opcode, WcStatus::WrFlushErr, true);
        }
        let in_device = q.hw_outstanding > 0;
        let room = q.hw_outstanding < q.cfg.hw_send_depth;
        if move_device {
            self.actions.push(GateAction::MoveToError(QpHandle(qi)));
        }
        if in_device {
            if room {
                let seq = self.post_marker(qi);
                if let Some(q) = self.qm(qi) {
                    q.drain = seq;
                }
            } else {
                // No slot for the drain marker: nothing more can be learnt
                // from the device about this QP.
                self.retire_all(qi);
            }
        }
        self.drain_front(qi);
    }

    /// Retires every entry of the ledger in software (the QP is in ERR and
    /// the device cannot say more): what the application asked to hear
    /// about completes with a flush error. Late device CQEs of the retired
    /// sequence numbers are then ignored.
    fn retire_all(&mut self, qi: u32) {
        let now = self.now;
        while let Some(q) = self.qm(qi) {
            let qp_num = q.cfg.qp_num;
            let wc = match q.pop_front() {
                None => break,
                Some(Entry::Hw { marker: true, .. }) => continue,
                Some(Entry::Hw { wr_id, opcode, report_ok, .. }) => {
                    q.user_outstanding = q.user_outstanding.saturating_sub(1);
                    if !report_ok {
                        continue;
                    }
                    Wc::flushed(wr_id, opcode, qp_num, now)
                }
                Some(Entry::Sw { wr_id, opcode, status, report }) => {
                    q.user_outstanding = q.user_outstanding.saturating_sub(1);
                    if !report {
                        continue;
                    }
                    Wc { status, ..Wc::flushed(wr_id, opcode, qp_num, now) }
                }
            };
            self.push_send_cqe(qi, wc);
        }
        if let Some(q) = self.qm(qi) {
            q.drain = None;
            q.hw_lo = q.hw_hi;
        }
        self.touch_watch(qi);
    }

    fn push_cqe(&mut self, cq: CqHandle, wc: Wc) {
        let Some(c) = self.cqs.get_mut(cq.0 as usize).and_then(Option::as_mut) else { return };
        if c.ring.overrun {
            return;
        }
        if !c.ring.push(wc) {
            let users = c.users.clone();
            for qi in users {
                self.enter_error(qi, true);
            }
            return;
        }
        let waiters = std::mem::take(&mut c.waiters);
        for qi in waiters {
            self.wake(qi, cq);
        }
    }

    /// A device completion of send WQE `seq` of `qp` (the CQE's status).
    /// Earlier WQEs of the QP are complete too (RC order); the gate delivers
    /// the CQEs the application asked for, hides its own, and runs. The
    /// completion of the drain marker of a QP in ERR retires everything
    /// before it: a signaled WQE that got no CQE of its own completes with
    /// a flush error, an unsignaled one silently. Finding `seq` is O(1);
    /// the work is proportional to the entries it retires.
    pub fn on_send_completion(&mut self, qp: QpHandle, seq: u64, status: WcStatus, now: u64) {
        self.now = now;
        let qi = qp.0;
        let Some(q) = self.qm(qi) else { return };
        if !q.has_hw_seq(seq) {
            return;
        }
        let drain = q.drain == Some(seq);
        if drain {
            q.drain = None;
        }
        loop {
            let Some(q) = self.qm(qi) else { return };
            match q.ledger.front() {
                Some(Entry::Sw { .. }) => {
                    self.drain_front(qi);
                    continue;
                }
                None => break,
                Some(Entry::Hw { .. }) => {}
            }
            let Some(Entry::Hw { seq: s, wr_id, opcode, len, report_ok, marker, .. }) = q.pop_front() else {
                break;
            };
            if !marker {
                q.user_outstanding = q.user_outstanding.saturating_sub(1);
            }
            let qp_num = q.cfg.qp_num;
            if s != seq {
                if drain && report_ok && !marker {
                    self.push_send_cqe(qi, Wc::flushed(wr_id, opcode, qp_num, now));
                }
                continue; // completed before `seq`, unsignaled: no CQE
            }
            if marker {
                self.counters.hidden_cqes += 1;
                if !status.is_ok() && status != WcStatus::WrFlushErr {
                    // A completion marker failed (e.g. the peer refused the
                    // zero-length WRITE): the flushes that follow say why.
                    if let Some(q) = self.qm(qi) {
                        q.cause = Some(status);
                    }
                }
            } else if report_ok || !status.is_ok() {
                let wc = Wc { wr_id, status, opcode, byte_len: len, imm: None, qp_num, timestamp_ns: now };
                self.push_send_cqe(qi, wc);
            } else {
                self.counters.hidden_cqes += 1;
            }
            break;
        }
        if !status.is_ok() {
            // The device moved the QP to ERR itself.
            self.enter_error(qi, false);
        }
        self.drain_front(qi);
        self.mark_dirty(qi);
        self.run(now);
    }

    /// The device refused the post of send WQE `seq` of `qp` (and so every
    /// later one of the same doorbell, which the backend must not post).
    /// The first refused application WQE completes with `LOC_QP_OP_ERR`
    /// after the WQEs before it (a completion marker follows them if the
    /// last is unsignaled), and the QP then fails. A refused drain marker
    /// retires the QP's work in software.
    pub fn on_post_failed(&mut self, qp: QpHandle, seq: u64, now: u64) {
        self.now = now;
        let qi = qp.0;
        self.touch_watch(qi);
        let Some(q) = self.qm(qi) else { return };
        if !q.has_hw_seq(seq) {
            return;
        }
        if q.state == QpState::Err {
            self.retire_all(qi);
            self.drain_front(qi);
            return;
        }
        let Some(pos) = q.ledger.iter().position(|e| matches!(e, Entry::Hw { seq: s, .. } if *s == seq)) else {
            return;
        };
        let tail: Vec<Entry> = q.ledger.drain(pos..).collect();
        // The refused WQEs never reached the device: their sequence
        // numbers are free again, and the ledger's stay contiguous.
        q.hw_hi = seq;
        q.next_seq = seq;
        q.sw_in_ledger = q.ledger.iter().filter(|e| matches!(e, Entry::Sw { .. })).count() as u32;
        q.hw_outstanding = q.ledger.len() as u32 - q.sw_in_ledger;
        // The hardware entry now last was posted in an earlier doorbell:
        // if unsignaled, only a marker can follow it.
        let last_unsignaled = q.ledger.iter().rev().find_map(|e| match e {
            Entry::Hw { signaled, .. } => Some(!signaled),
            Entry::Sw { .. } => None,
        });
        q.tail_unsig = (last_unsignaled == Some(true)).then_some((PAST_ROUND, 0));
        let mut first = true;
        for e in tail {
            let (wr_id, opcode) = match e {
                Entry::Hw { marker: true, .. } => continue,
                Entry::Hw { wr_id, opcode, .. } | Entry::Sw { wr_id, opcode, .. } => (wr_id, opcode),
            };
            let status = if first { WcStatus::LocQpOpErr } else { WcStatus::WrFlushErr };
            first = false;
            q.push_sw(wr_id, opcode, status, true);
        }
        if first {
            self.enter_error(qi, true);
            return;
        }
        q.halted = true;
        if !self.fence(qi) {
            // No room for the marker that would say when the earlier WQEs
            // are done: fail the QP now, its drain says it instead.
            self.enter_error(qi, true);
        }
        self.drain_front(qi);
    }

    /// Accepts one receive work request; returns the device `wr_id` to post
    /// it with, or `None` if the QP is in ERR (the gate then completes it
    /// with a flush error itself, as the simulator does).
    pub fn submit_recv(&mut self, qp: QpHandle, wr_id: u64, now: u64) -> Result<Option<u64>, RnicError> {
        self.now = now;
        let q = self.q_or_err(qp)?;
        match q.state {
            QpState::Reset => return Err(RnicError::InvalidState { op: "post_recv", state: q.state }),
            QpState::Err => {
                let wc = Wc::flushed(wr_id, WcOpcode::Recv, q.cfg.qp_num, now);
                let cq = q.cfg.recv_cq;
                self.push_cqe(cq, wc);
                return Ok(None);
            }
            _ => {}
        }
        if q.recv.len() as u32 >= q.cfg.max_recv_wr {
            return Err(RnicError::QueueFull { queue: "recv", depth: q.cfg.max_recv_wr });
        }
        let Some(q) = self.qm(qp.0) else { return Err(RnicError::InvalidHandle { kind: "qp", id: qp.0 }) };
        let seq = q.next_recv_seq;
        q.next_recv_seq = (seq + 1) & SEQ_MASK;
        q.recv.push_back((seq, wr_id));
        Ok(Some(HwWrId { recv: true, qp: qp.0, seq }.encode()))
    }

    /// Forgets the last `n` receive requests accepted (the device refused them).
    pub fn unpost_recvs(&mut self, qp: QpHandle, n: usize) {
        if let Some(q) = self.qm(qp.0) {
            for _ in 0..n {
                q.recv.pop_back();
            }
            q.next_recv_seq = q.recv.back().map_or(q.next_recv_seq, |&(s, _)| (s + 1) & SEQ_MASK);
        }
    }

    /// A device completion of receive WQE `seq` of `qp`.
    #[allow(clippy::too_many_arguments, reason = "the fields of one device completion")]
    pub fn on_recv_completion(
        &mut self,
        qp: QpHandle,
        seq: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        now: u64,
    ) {
        self.now = now;
        let Some(q) = self.qm(qp.0) else { return };
        let Some(pos) = q.recv.iter().position(|&(s, _)| s == seq) else { return };
        let mut wr_id = 0;
        for _ in 0..=pos {
            if let Some((_, w)) = q.recv.pop_front() {
                wr_id = w;
            }
        }
        let (cq, qp_num, state) = (q.cfg.recv_cq, q.cfg.qp_num, q.state);
        let opcode = if status.is_ok() { opcode } else { WcOpcode::Recv };
        self.push_cqe(cq, Wc { wr_id, status, opcode, byte_len, imm, qp_num, timestamp_ns: now });
        if !status.is_ok() && state != QpState::Err {
            self.enter_error(qp.0, false);
        }
        self.run(now);
    }

    /// Takes up to `out.len()` delivered CQEs of `cq` (the application's
    /// `poll_cq`); fails with [`RnicError::CqOverrun`] after an overrun.
    pub fn poll(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        let c = self
            .cqs
            .get_mut(cq.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(RnicError::InvalidHandle { kind: "cq", id: cq.0 })?;
        c.ring.poll(cq, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Gate = HostGate<&'static str>;

    const SCQ: CqHandle = CqHandle(0);

    fn cfg(qp_num: u32, cq: CqHandle) -> GateQpConfig {
        GateQpConfig {
            qp_num,
            send_cq: cq,
            recv_cq: cq,
            managed: false,
            cross_channel: false,
            sig_all: false,
            max_send_wr: 16,
            max_recv_wr: 16,
            hw_send_depth: 32,
        }
    }

    /// A cross-channel QP (may post WAIT and SEND_ENABLE).
    fn xcfg(qp_num: u32, cq: CqHandle) -> GateQpConfig {
        GateQpConfig { cross_channel: true, ..cfg(qp_num, cq) }
    }

    fn gate_with(qps: &[GateQpConfig]) -> Gate {
        let mut g = Gate::new();
        g.add_cq(SCQ, 64, false);
        for (i, c) in qps.iter().enumerate() {
            if !g.has_cq(c.send_cq) {
                g.add_cq(c.send_cq, 64, false);
            }
            g.add_qp(QpHandle(i as u32), *c).expect("add qp");
            g.set_state(QpHandle(i as u32), QpState::Rts, 0);
        }
        g
    }

    fn data(wr_id: u64, tag: &'static str, signaled: bool) -> GateWr<&'static str> {
        GateWr { wr_id, signaled, opcode: WcOpcode::Write, byte_len: 16, op: GateOp::Hw(tag) }
    }

    fn ctrl(wr_id: u64, op: GateOp<&'static str>, signaled: bool) -> GateWr<&'static str> {
        let opcode = match op {
            GateOp::Wait { .. } => WcOpcode::Wait,
            GateOp::SendEnable { .. } => WcOpcode::SendEnable,
            _ => WcOpcode::Nop,
        };
        GateWr { wr_id, signaled, opcode, byte_len: 0, op }
    }

    /// The posts of a list of actions: (qp, tag or "marker", signaled, seq).
    fn posts(actions: &[GateAction<&'static str>]) -> Vec<(u32, &'static str, bool, u64)> {
        actions
            .iter()
            .filter_map(|a| match a {
                GateAction::Post(p) => {
                    let id = HwWrId::decode(p.wr_id);
                    assert_eq!(id.qp, p.qp.0);
                    assert!(!id.recv);
                    let tag = match p.work {
                        HwWork::User(t) => t,
                        HwWork::Marker => "marker",
                    };
                    Some((p.qp.0, tag, p.signaled, id.seq))
                }
                GateAction::MoveToError(_) => None,
            })
            .collect()
    }

    fn poll_all(g: &mut Gate, cq: CqHandle) -> Vec<Wc> {
        let mut out = [Wc::EMPTY; 64];
        let n = g.poll(cq, &mut out).expect("poll");
        out[..n].to_vec()
    }

    #[test]
    fn wr_id_round_trip_and_wrap() {
        for id in [
            HwWrId { recv: false, qp: 0, seq: 0 },
            HwWrId { recv: true, qp: MAX_QPS - 1, seq: SEQ_MASK },
            HwWrId { recv: false, qp: 12345, seq: 987_654_321 },
        ] {
            assert_eq!(HwWrId::decode(id.encode()), id);
        }
        let mut q: GQp<()> = GQp::new(cfg(1, SCQ));
        q.next_seq = SEQ_MASK;
        assert_eq!(q.alloc_seq(), SEQ_MASK);
        assert_eq!(q.alloc_seq(), 0, "sequence numbers wrap at 2^40");
    }

    #[test]
    fn data_passes_through_and_completes_in_order() {
        let mut g = gate_with(&[cfg(0x11, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "a", false)).expect("post a");
        g.submit(qp, data(2, "b", true)).expect("post b");
        g.run(5);
        let acts = g.take_actions();
        assert_eq!(posts(&acts), vec![(0, "a", false, 0), (0, "b", true, 1)]);
        assert_eq!(g.held(qp), Some(0));
        assert_eq!(g.outstanding(qp), Some(2));
        // The device's CQE for b retires a too; only b is reported.
        g.on_send_completion(qp, 1, WcStatus::Success, 9);
        let wcs = poll_all(&mut g, SCQ);
        assert_eq!(wcs.len(), 1);
        assert_eq!((wcs[0].wr_id, wcs[0].opcode, wcs[0].byte_len, wcs[0].qp_num), (2, WcOpcode::Write, 16, 0x11));
        assert_eq!(wcs[0].timestamp_ns, 9);
        assert_eq!(g.outstanding(qp), Some(0));
        assert_eq!(g.produced(SCQ), Some(1));
        // A stale completion (unknown seq) changes nothing.
        g.on_send_completion(qp, 77, WcStatus::Success, 10);
        assert!(poll_all(&mut g, SCQ).is_empty());
    }

    #[test]
    fn managed_qp_runs_only_enabled_wqes() {
        let mut managed = cfg(2, SCQ);
        managed.managed = true;
        let mut g = gate_with(&[xcfg(1, SCQ), managed]);
        let (a, m) = (QpHandle(0), QpHandle(1));
        for (i, t) in ["m0", "m1", "m2"].into_iter().enumerate() {
            g.submit(m, data(i as u64, t, false)).expect("post to managed");
        }
        g.run(0);
        assert!(posts(&g.take_actions()).is_empty(), "a managed QP executes nothing unenabled");
        assert_eq!(g.held(m), Some(3));
        g.submit(a, data(10, "a0", false)).expect("post a0");
        g.submit(a, ctrl(11, GateOp::SendEnable { qp: m, count: 2 }, false)).expect("enable");
        g.run(1);
        let p = posts(&g.take_actions());
        // a0 is the last data WQE of a cross-channel QP's doorbell: signaled.
        assert_eq!(p, vec![(0, "a0", true, 0), (1, "m0", false, 0), (1, "m1", false, 1)]);
        assert_eq!(g.held(m), Some(1), "exactly `count` WQEs are released");
        // Credit may arrive before the WQE it releases.
        g.submit(a, ctrl(12, GateOp::SendEnable { qp: m, count: 2 }, false)).expect("enable");
        g.run(2);
        assert_eq!(posts(&g.take_actions()), vec![(1, "m2", false, 2)]);
        g.submit(m, data(3, "m3", false)).expect("post m3");
        g.run(3);
        assert_eq!(posts(&g.take_actions()), vec![(1, "m3", false, 3)]);
        assert_eq!(g.counters().ctrl_executed, 2);
    }

    #[test]
    fn wait_holds_the_rest_of_the_queue_until_the_absolute_count() {
        let watched = CqHandle(5);
        let mut g = gate_with(&[xcfg(1, SCQ), cfg(2, watched)]);
        let (a, b) = (QpHandle(0), QpHandle(1));
        g.submit(a, ctrl(1, GateOp::Wait { cq: watched, count: 2 }, false)).expect("wait");
        g.submit(a, data(2, "after-wait", true)).expect("data");
        g.run(0);
        assert!(posts(&g.take_actions()).is_empty());
        assert_eq!(g.cqs_to_watch(), &[watched], "the backend must reap the watched CQ");
        // Two completions on the watched CQ, from QP b.
        g.submit(b, data(20, "b0", true)).expect("b0");
        g.submit(b, data(21, "b1", true)).expect("b1");
        g.run(1);
        assert_eq!(posts(&g.take_actions()).len(), 2);
        g.on_send_completion(b, 0, WcStatus::Success, 2);
        assert!(posts(&g.take_actions()).is_empty(), "one completion does not reach count 2");
        g.on_send_completion(b, 1, WcStatus::Success, 3);
        assert_eq!(posts(&g.take_actions()), vec![(0, "after-wait", true, 0)]);
        assert_eq!(g.produced(watched), Some(2));
        // A WAIT for a count already reached passes at once, as does count 0.
        g.submit(a, ctrl(3, GateOp::Wait { cq: watched, count: 1 }, false)).expect("wait");
        g.submit(a, ctrl(4, GateOp::Wait { cq: watched, count: 0 }, false)).expect("wait");
        g.submit(a, data(5, "x", false)).expect("data");
        g.run(4);
        assert_eq!(posts(&g.take_actions()), vec![(0, "x", true, 1)]);
        assert!(g.counters().wait_blocks >= 1);
    }

    #[test]
    fn signaled_control_after_unsignaled_data_in_one_list_signals_the_data() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "d", false)).expect("d");
        g.submit(qp, ctrl(2, GateOp::Nop, true)).expect("nop");
        g.run(0);
        let p = posts(&g.take_actions());
        assert_eq!(p, vec![(0, "d", true, 0)], "the gate signals d so it learns when d is done");
        assert!(poll_all(&mut g, SCQ).is_empty(), "the NOP's CQE must not pass d");
        g.on_send_completion(qp, 0, WcStatus::Success, 7);
        let wcs = poll_all(&mut g, SCQ);
        assert_eq!(wcs.len(), 1, "d's CQE is hidden: {wcs:?}");
        assert_eq!((wcs[0].wr_id, wcs[0].opcode, wcs[0].status), (2, WcOpcode::Nop, WcStatus::Success));
        let c = g.counters();
        assert_eq!((c.signals_added, c.hidden_cqes, c.markers), (1, 1, 0));
        assert_eq!(g.produced(SCQ), Some(1), "hidden CQEs do not count for WAITs");
    }

    #[test]
    fn signaled_nop_in_a_later_list_on_a_plain_qp_posts_a_marker() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "d", false)).expect("d");
        g.run(0);
        assert_eq!(posts(&g.take_actions()), vec![(0, "d", false, 0)]);
        g.submit(qp, ctrl(2, GateOp::Nop, true)).expect("nop");
        g.run(1);
        assert_eq!(posts(&g.take_actions()), vec![(0, "marker", true, 1)]);
        assert_eq!(g.outstanding(qp), Some(2), "markers do not take the application's slots");
        g.on_send_completion(qp, 1, WcStatus::Success, 2);
        let wcs = poll_all(&mut g, SCQ);
        assert_eq!(wcs.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(), vec![(2, WcOpcode::Nop)]);
        assert_eq!(g.outstanding(qp), Some(0));
        assert_eq!(g.counters().markers, 1);
    }

    #[test]
    fn cross_channel_qps_signal_each_doorbell_so_later_control_needs_no_marker() {
        let mut g = gate_with(&[xcfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "d1", false)).expect("d1");
        g.submit(qp, data(2, "d2", false)).expect("d2");
        g.run(0);
        assert_eq!(posts(&g.take_actions()), vec![(0, "d1", false, 0), (0, "d2", true, 1)]);
        g.submit(qp, ctrl(3, GateOp::Wait { cq: SCQ, count: 0 }, true)).expect("wait");
        g.run(1);
        assert!(posts(&g.take_actions()).is_empty(), "no marker: d2's completion will come");
        assert!(g.cqs_to_watch().contains(&SCQ));
        g.on_send_completion(qp, 1, WcStatus::Success, 2);
        let wcs = poll_all(&mut g, SCQ);
        assert_eq!(
            wcs.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
            vec![(3, WcOpcode::Wait)],
            "d2's CQE is hidden"
        );
        let c = g.counters();
        assert_eq!((c.markers, c.signals_added, c.hidden_cqes), (0, 1, 1));
    }

    #[test]
    fn software_cqes_keep_send_queue_order() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "d1", true)).expect("d1");
        g.submit(qp, ctrl(2, GateOp::Nop, true)).expect("nop");
        g.submit(qp, data(3, "d3", true)).expect("d3");
        g.run(0);
        assert_eq!(posts(&g.take_actions()), vec![(0, "d1", true, 0), (0, "d3", true, 1)]);
        assert!(poll_all(&mut g, SCQ).is_empty());
        g.on_send_completion(qp, 0, WcStatus::Success, 1);
        g.on_send_completion(qp, 1, WcStatus::Success, 2);
        let ids: Vec<u64> = poll_all(&mut g, SCQ).iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
    }

    #[test]
    fn pcq_handoff_releases_the_waiting_qp() {
        // The engine's hand-off: A ends with SEND_ENABLE(PCQ), the PCQ's
        // signaled NOP completes and bumps the PCQ's CQ, which satisfies
        // B's WAIT at the head of its queue.
        let pcq_cq = CqHandle(9);
        let mut pcq = xcfg(3, pcq_cq);
        pcq.managed = true;
        let mut g = gate_with(&[xcfg(1, SCQ), xcfg(2, SCQ), pcq]);
        let (a, b, p) = (QpHandle(0), QpHandle(1), QpHandle(2));
        g.submit(p, ctrl(0, GateOp::Nop, true)).expect("plan hand-off");
        g.submit(b, ctrl(100, GateOp::Wait { cq: pcq_cq, count: 1 }, false)).expect("b waits");
        g.submit(b, data(101, "b-data", false)).expect("b data");
        g.run(0);
        assert!(posts(&g.take_actions()).is_empty(), "B is paused");
        g.submit(a, data(200, "a-data", false)).expect("a data");
        g.submit(a, ctrl(201, GateOp::SendEnable { qp: p, count: 1 }, false)).expect("release");
        g.run(1);
        assert_eq!(posts(&g.take_actions()), vec![(0, "a-data", true, 0), (1, "b-data", true, 0)]);
        assert_eq!(g.produced(pcq_cq), Some(1));
        let wcs = poll_all(&mut g, pcq_cq);
        assert_eq!((wcs.len(), wcs[0].opcode, wcs[0].qp_num), (1, WcOpcode::Nop, 3));
    }

    #[test]
    fn device_error_flushes_held_and_software_entries_in_order() {
        let watched = CqHandle(4);
        let mut g = gate_with(&[xcfg(1, SCQ)]);
        g.add_cq(watched, 8, false);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "d1", false)).expect("d1");
        g.submit(qp, data(2, "d2", true)).expect("d2");
        g.submit(qp, ctrl(3, GateOp::Nop, false)).expect("nop");
        g.submit(qp, ctrl(4, GateOp::Wait { cq: watched, count: 5 }, false)).expect("wait");
        g.submit(qp, data(5, "held", false)).expect("held");
        g.run(0);
        assert_eq!(posts(&g.take_actions()).len(), 2);
        assert_eq!(g.held(qp), Some(2));
        // d1 fails remotely (reported although unsignaled); d2 is then flushed by the device.
        g.on_send_completion(qp, 0, WcStatus::RemAccessErr, 1);
        assert_eq!(g.state(qp), Some(QpState::Err));
        assert_eq!(
            g.take_actions().iter().map(|a| matches!(a, GateAction::MoveToError(_))).collect::<Vec<_>>(),
            vec![false],
            "the device already moved the QP to ERR; the gate posts only its drain marker"
        );
        g.on_send_completion(qp, 1, WcStatus::WrFlushErr, 2);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            got,
            vec![
                (1, WcStatus::RemAccessErr),
                (2, WcStatus::WrFlushErr),
                (3, WcStatus::WrFlushErr),
                (4, WcStatus::WrFlushErr),
                (5, WcStatus::WrFlushErr),
            ]
        );
        // Posting to a QP in ERR completes with a flush error, after the
        // drain marker (seq 2) retired what the device held.
        g.submit(qp, data(6, "late", false)).expect("post in ERR");
        g.run(3);
        assert!(posts(&g.take_actions()).is_empty());
        assert!(poll_all(&mut g, SCQ).is_empty(), "not before the drain marker");
        g.on_send_completion(qp, 2, WcStatus::WrFlushErr, 4);
        assert_eq!(
            poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(6, WcStatus::WrFlushErr)]
        );
        assert_eq!(g.outstanding(qp), Some(0));
    }

    /// The drain marker of a QP: the one signaled marker post in `actions`.
    fn drain_seq(actions: &[GateAction<&'static str>]) -> u64 {
        let markers: Vec<u64> = posts(actions).into_iter().filter(|p| p.1 == "marker" && p.2).map(|p| p.3).collect();
        assert_eq!(markers.len(), 1, "exactly one drain marker: {:?}", posts(actions));
        markers[0]
    }

    #[test]
    fn err_drain_retires_unsignaled_work_that_completed_before_the_error() {
        // u1 and u2 are unsignaled and complete silently in the device (no
        // CQE ever); an unsignaled NOP sits behind them in the ledger. Then
        // the QP fails: the NOP's flush, and that of a WQE posted to the QP
        // in ERR, would wait behind u1 and u2 forever without a drain.
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "u1", false)).expect("u1");
        g.submit(qp, data(2, "u2", false)).expect("u2");
        g.submit(qp, ctrl(3, GateOp::Nop, false)).expect("nop");
        g.run(0);
        assert_eq!(posts(&g.take_actions()), vec![(0, "u1", false, 0), (0, "u2", false, 1)]);
        assert!(g.cqs_to_watch().contains(&SCQ), "the NOP waits for the device");
        g.set_state(qp, QpState::Err, 1);
        let acts = g.take_actions();
        assert!(!acts.contains(&GateAction::MoveToError(qp)), "the backend moved the device QP itself");
        let drain = drain_seq(&acts);
        assert_eq!(drain, 2);
        g.submit(qp, data(4, "late", true)).expect("a post to a QP in ERR");
        assert!(poll_all(&mut g, SCQ).is_empty(), "nothing passes the work still in the device");
        assert!(g.cqs_to_watch().contains(&SCQ), "the backend must reap the drain's CQE");
        g.on_send_completion(qp, drain, WcStatus::WrFlushErr, 2);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, vec![(3, WcStatus::WrFlushErr), (4, WcStatus::WrFlushErr)]);
        assert_eq!(g.outstanding(qp), Some(0), "every accepted WQE is retired");
        assert!(g.cqs_to_watch().is_empty());
    }

    #[test]
    fn err_drain_after_an_error_cqe_with_unsignaled_work_before_it() {
        // u1 completed silently, s2 fails, u3 (unsignaled, after it) is
        // flushed without a CQE, a NOP is held behind u3 in software.
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        for (id, tag, sig) in [(1, "u1", false), (2, "s2", true), (3, "u3", false)] {
            g.submit(qp, data(id, tag, sig)).expect("post");
        }
        g.submit(qp, ctrl(4, GateOp::Nop, true)).expect("nop");
        g.run(0);
        let p = posts(&g.take_actions());
        assert_eq!(p.len(), 3, "u3 is signaled for the NOP's sake: {p:?}");
        g.on_send_completion(qp, 1, WcStatus::RemAccessErr, 1);
        let drain = drain_seq(&g.take_actions());
        // u3's signaled flush comes, then the drain's.
        g.on_send_completion(qp, 2, WcStatus::WrFlushErr, 2);
        g.on_send_completion(qp, drain, WcStatus::WrFlushErr, 3);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, vec![(2, WcStatus::RemAccessErr), (3, WcStatus::WrFlushErr), (4, WcStatus::WrFlushErr)]);
        assert_eq!(g.outstanding(qp), Some(0));
    }

    #[test]
    fn a_signaled_wqe_the_device_never_flushed_completes_with_the_drain() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "s1", true)).expect("s1");
        g.submit(qp, data(2, "s2", true)).expect("s2");
        g.run(0);
        let _ = g.take_actions();
        g.set_state(qp, QpState::Err, 1);
        let drain = drain_seq(&g.take_actions());
        // A provider that flushed nothing but the drain marker: s1 and s2
        // still complete exactly once.
        g.on_send_completion(qp, drain, WcStatus::WrFlushErr, 2);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]);
        // A late CQE of a retired WQE changes nothing.
        g.on_send_completion(qp, 0, WcStatus::WrFlushErr, 3);
        assert!(poll_all(&mut g, SCQ).is_empty());
    }

    #[test]
    fn a_refused_drain_marker_retires_the_qp_in_software() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "u1", false)).expect("u1");
        g.submit(qp, data(2, "s2", true)).expect("s2");
        g.run(0);
        let _ = g.take_actions();
        g.set_state(qp, QpState::Err, 1);
        let drain = drain_seq(&g.take_actions());
        g.on_post_failed(qp, drain, 2);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, vec![(2, WcStatus::WrFlushErr)], "u1 unsignaled: no CQE; s2 flushed");
        assert_eq!(g.outstanding(qp), Some(0));
        g.submit(qp, data(3, "late", false)).expect("post in ERR");
        assert_eq!(poll_all(&mut g, SCQ)[0].wr_id, 3, "nothing left to wait for");
    }

    #[test]
    fn a_failed_completion_marker_reports_its_cause() {
        // A signaled NOP after unsignaled data of an earlier post needs a
        // marker; the peer refuses the zero-length WRITE. The NOP's CQE
        // says so instead of a bare flush.
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "d", false)).expect("d");
        g.run(0);
        let _ = g.take_actions();
        g.submit(qp, ctrl(2, GateOp::Nop, true)).expect("nop");
        g.run(1);
        assert_eq!(posts(&g.take_actions()), vec![(0, "marker", true, 1)]);
        g.on_send_completion(qp, 1, WcStatus::RemAccessErr, 2);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, vec![(2, WcStatus::RemAccessErr)]);
        assert_eq!(g.state(qp), Some(QpState::Err));
    }

    #[test]
    fn the_watch_set_follows_qps_incrementally() {
        let (cq_a, cq_b) = (CqHandle(1), CqHandle(2));
        let mut g = gate_with(&[xcfg(1, cq_a), xcfg(2, cq_b), cfg(3, cq_a)]);
        assert!(g.cqs_to_watch().is_empty());
        g.submit(QpHandle(0), data(1, "a", false)).expect("a");
        g.submit(QpHandle(1), ctrl(2, GateOp::Wait { cq: cq_a, count: 5 }, false)).expect("wait");
        g.run(0);
        let _ = g.take_actions();
        let mut w = g.cqs_to_watch().to_vec();
        w.sort_unstable();
        assert_eq!(w, vec![cq_a], "QP 0's work in the device and QP 1's WAIT both need CQ a");
        g.on_send_completion(QpHandle(0), 0, WcStatus::Success, 1);
        assert_eq!(g.cqs_to_watch(), &[cq_a], "the WAIT still needs it");
        g.remove_qp(QpHandle(1));
        assert!(g.cqs_to_watch().is_empty(), "a removed QP's wants are dropped");
        // A plain QP with only unsignaled data in the device needs nothing reaped.
        g.submit(QpHandle(2), data(3, "p", false)).expect("p");
        g.run(2);
        let _ = g.take_actions();
        assert!(g.cqs_to_watch().is_empty());
    }

    #[test]
    fn refused_post_fails_the_qp_after_earlier_work() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "ok", true)).expect("ok");
        g.submit(qp, data(2, "bad", true)).expect("bad");
        g.submit(qp, data(3, "after", true)).expect("after");
        g.run(0);
        assert_eq!(posts(&g.take_actions()).len(), 3);
        g.on_post_failed(qp, 1, 1);
        assert_eq!(g.state(qp), Some(QpState::Rts), "the QP fails only when the refused WQE's turn comes");
        assert!(poll_all(&mut g, SCQ).is_empty());
        g.on_send_completion(qp, 0, WcStatus::Success, 2);
        let got: Vec<(u64, WcStatus)> = poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, vec![(1, WcStatus::Success), (2, WcStatus::LocQpOpErr), (3, WcStatus::WrFlushErr)]);
        assert_eq!(g.state(qp), Some(QpState::Err));
        assert_eq!(g.take_actions(), vec![GateAction::MoveToError(qp)]);
    }

    #[test]
    fn send_enable_validation_and_wait_needs_cross_channel() {
        let mut plain = cfg(1, SCQ);
        plain.cross_channel = false;
        let mut g = gate_with(&[plain, xcfg(2, SCQ)]);
        let w = g.submit(QpHandle(0), ctrl(1, GateOp::Wait { cq: SCQ, count: 0 }, false));
        assert!(matches!(w, Err(RnicError::InvalidArgument(ref m)) if m.contains("cross_channel")), "{w:?}");
        let e = g.submit(QpHandle(1), ctrl(1, GateOp::SendEnable { qp: QpHandle(0), count: 1 }, false));
        assert!(matches!(e, Err(RnicError::InvalidArgument(ref m)) if m.contains("not managed")), "{e:?}");
        let gone = g.submit(QpHandle(1), ctrl(1, GateOp::SendEnable { qp: QpHandle(7), count: 1 }, false));
        assert_eq!(gone, Err(RnicError::InvalidHandle { kind: "qp", id: 7 }));
        let nocq = g.submit(QpHandle(1), ctrl(1, GateOp::Wait { cq: CqHandle(99), count: 0 }, false));
        assert_eq!(nocq, Err(RnicError::InvalidHandle { kind: "cq", id: 99 }));
        assert_eq!(g.submit(QpHandle(3), data(1, "x", false)), Err(RnicError::InvalidHandle { kind: "qp", id: 3 }));
        // NOP needs no cross-channel rights.
        assert_eq!(g.submit(QpHandle(0), ctrl(1, GateOp::Nop, false)), Ok(()));
    }

    #[test]
    fn queue_full_and_state_checks() {
        let mut small = cfg(1, SCQ);
        small.max_send_wr = 2;
        let mut g = gate_with(&[small]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "a", false)).expect("a");
        g.submit(qp, data(2, "b", true)).expect("b");
        assert_eq!(g.submit(qp, data(3, "c", false)), Err(RnicError::QueueFull { queue: "send", depth: 2 }));
        g.run(0);
        let _ = g.take_actions();
        g.on_send_completion(qp, 1, WcStatus::Success, 1);
        assert_eq!(g.submit(qp, data(3, "c", false)), Ok(()), "slots free when a CQE retires them");
        g.set_state(qp, QpState::Reset, 2);
        assert_eq!(g.outstanding(qp), Some(0));
        let r = g.submit(qp, data(4, "d", false));
        assert_eq!(r, Err(RnicError::InvalidState { op: "post_send", state: QpState::Reset }));
    }

    #[test]
    fn device_room_is_respected_and_never_deadlocks_on_unsignaled_work() {
        let mut tight = cfg(1, SCQ);
        tight.max_send_wr = 4;
        tight.hw_send_depth = 4;
        let mut g = gate_with(&[tight]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "u1", false)).expect("u1");
        g.submit(qp, data(2, "u2", false)).expect("u2");
        g.run(0);
        // 2 data WQEs fill the data share (depth - 2 marker slots).
        assert_eq!(posts(&g.take_actions()), vec![(0, "u1", false, 0), (0, "u2", false, 1)]);
        g.submit(qp, data(3, "u3", false)).expect("u3");
        g.submit(qp, data(4, "s4", true)).expect("s4");
        g.run(1);
        // u2 was posted in an earlier doorbell: a completion marker takes
        // one reserved slot; the other stays for a drain.
        assert_eq!(posts(&g.take_actions()), vec![(0, "marker", true, 2)]);
        assert_eq!(g.held(qp), Some(2));
        g.on_send_completion(qp, 2, WcStatus::Success, 2);
        assert_eq!(posts(&g.take_actions()), vec![(0, "u3", false, 3), (0, "s4", true, 4)]);
        g.on_send_completion(qp, 4, WcStatus::Success, 3);
        assert_eq!(poll_all(&mut g, SCQ).iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![4]);
        assert_eq!(g.outstanding(qp), Some(0));
        // Blocked within one doorbell, the last data WQE is signaled instead.
        for (id, tag) in [(5, "u5"), (6, "u6"), (7, "u7")] {
            g.submit(qp, data(id, tag, false)).expect("post");
        }
        g.run(4);
        assert_eq!(posts(&g.take_actions()), vec![(0, "u5", false, 5), (0, "u6", true, 6)]);
    }

    #[test]
    fn cq_overrun_and_ignore_overrun() {
        let mut g = Gate::new();
        let (small, lossy) = (CqHandle(0), CqHandle(1));
        g.add_cq(small, 2, false);
        g.add_cq(lossy, 2, true);
        let mut c0 = cfg(1, small);
        c0.sig_all = true;
        let mut c1 = cfg(2, lossy);
        c1.sig_all = true;
        g.add_qp(QpHandle(0), c0).expect("qp0");
        g.add_qp(QpHandle(1), c1).expect("qp1");
        g.set_state(QpHandle(0), QpState::Rts, 0);
        g.set_state(QpHandle(1), QpState::Rts, 0);
        for i in 0..3 {
            g.submit(QpHandle(0), ctrl(i, GateOp::Nop, false)).expect("nop");
            g.submit(QpHandle(1), ctrl(10 + i, GateOp::Nop, false)).expect("nop");
        }
        g.run(0);
        let mut out = [Wc::EMPTY; 4];
        assert_eq!(g.poll(small, &mut out), Err(RnicError::CqOverrun { cq: 0 }));
        assert_eq!(g.state(QpHandle(0)), Some(QpState::Err), "an overrun fails the CQ's QPs");
        assert!(g.take_actions().contains(&GateAction::MoveToError(QpHandle(0))));
        assert_eq!(g.poll(lossy, &mut out), Ok(2));
        assert_eq!((out[0].wr_id, out[1].wr_id), (11, 12), "the oldest CQE is overwritten");
        assert_eq!(g.produced(lossy), Some(3), "the counter counts every completion");
    }

    #[test]
    fn receives_map_back_and_errors_fail_the_qp() {
        let mut g = gate_with(&[cfg(1, SCQ)]);
        let qp = QpHandle(0);
        let id0 = g.submit_recv(qp, 500, 0).expect("recv").expect("posted");
        let id1 = g.submit_recv(qp, 501, 0).expect("recv").expect("posted");
        let d0 = HwWrId::decode(id0);
        assert!(d0.recv && d0.qp == 0 && d0.seq == 0);
        g.on_recv_completion(qp, d0.seq, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 64, Some(9), 1);
        let wcs = poll_all(&mut g, SCQ);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].opcode, wcs[0].byte_len, wcs[0].imm),
            (500, WcOpcode::RecvRdmaWithImm, 64, Some(9))
        );
        g.on_recv_completion(qp, HwWrId::decode(id1).seq, WcStatus::LocLenErr, WcOpcode::Send, 0, None, 2);
        let wcs = poll_all(&mut g, SCQ);
        assert_eq!((wcs[0].wr_id, wcs[0].status, wcs[0].opcode), (501, WcStatus::LocLenErr, WcOpcode::Recv));
        assert_eq!(g.state(qp), Some(QpState::Err));
        assert_eq!(g.submit_recv(qp, 502, 3), Ok(None), "a RECV on a QP in ERR is flushed by the gate");
        assert_eq!(poll_all(&mut g, SCQ)[0].status, WcStatus::WrFlushErr);
        let mut tiny = cfg(2, SCQ);
        tiny.max_recv_wr = 1;
        g.add_qp(QpHandle(1), tiny).expect("qp");
        assert_eq!(
            g.submit_recv(QpHandle(1), 1, 0),
            Err(RnicError::InvalidState { op: "post_recv", state: QpState::Reset })
        );
        g.set_state(QpHandle(1), QpState::Init, 0);
        assert!(g.submit_recv(QpHandle(1), 1, 0).expect("recv").is_some());
        assert_eq!(g.submit_recv(QpHandle(1), 2, 0), Err(RnicError::QueueFull { queue: "recv", depth: 1 }));
        g.unpost_recvs(QpHandle(1), 1);
        assert!(g.submit_recv(QpHandle(1), 2, 0).expect("recv").is_some());
    }

    #[test]
    fn destroyed_watched_cq_releases_the_wait() {
        let watched = CqHandle(3);
        let mut g = gate_with(&[xcfg(1, SCQ)]);
        g.add_cq(watched, 4, false);
        g.submit(QpHandle(0), ctrl(1, GateOp::Wait { cq: watched, count: 10 }, false)).expect("wait");
        g.submit(QpHandle(0), data(2, "d", false)).expect("d");
        g.run(0);
        assert!(posts(&g.take_actions()).is_empty());
        g.remove_cq(watched);
        g.run(1);
        assert_eq!(posts(&g.take_actions()), vec![(0, "d", true, 0)]);
    }

    #[test]
    fn user_moves_qp_to_error() {
        let mut managed = cfg(1, SCQ);
        managed.managed = true;
        let mut g = gate_with(&[managed]);
        let qp = QpHandle(0);
        g.submit(qp, data(1, "held", false)).expect("held");
        g.run(0);
        g.set_state(qp, QpState::Err, 1);
        assert_eq!(
            poll_all(&mut g, SCQ).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(1, WcStatus::WrFlushErr)]
        );
        assert!(g.take_actions().is_empty(), "the backend moved the device QP itself");
    }
}
