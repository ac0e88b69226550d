//! Queue pairs of the simulated NIC: the send queue with its WQEs'
//! progress (processed, dispatched, acknowledged, retired), the receive
//! queue, the state machine and the connection to the peer.

use std::collections::VecDeque;

use smallvec::SmallVec;

use super::profile::Ps;
use crate::rnic::{AccessFlags, QpCaps, QpState, Sge, WcStatus, WrOpcode};

/// Where a WQE is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WqeStage {
    /// Posted, not (fully) dispatched.
    Queued,
    /// All of it dispatched; waiting for the responder's answer.
    InFlight,
    /// Finished with this status; its CQE (if any) is produced in order.
    Done(WcStatus),
}

/// One send-queue entry.
pub(crate) struct SqEntry {
    pub wr_id: u64,
    pub op: WrOpcode,
    pub sgl: SmallVec<[Sge; 2]>,
    pub inline: Option<SmallVec<[u8; 32]>>,
    pub len: u64,
    pub signaled: bool,
    /// When the NIC sees the WQE (doorbell).
    pub visible_at: Ps,
    /// When the WQE's processing is done and it may be dispatched
    /// (`Ps::MAX` until processing is scheduled).
    pub ready_at: Ps,
    /// Payload bytes dispatched so far.
    pub sent: u64,
    pub stage: WqeStage,
}

impl SqEntry {
    pub fn is_ctrl(&self) -> bool {
        !self.op.moves_data()
    }
}

/// One receive-queue entry.
pub(crate) struct RecvEntry {
    pub wr_id: u64,
    pub sgl: SmallVec<[Sge; 2]>,
}

/// The peer QP this one is connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerRef {
    pub host: usize,
    pub qp: u32,
}

/// One queue pair.
pub(crate) struct SimQp {
    pub qp_num: u32,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub caps: QpCaps,
    pub sig_all: bool,
    pub cross_channel: bool,
    pub managed: bool,
    pub tc: u8,
    pub state: QpState,
    pub access: AccessFlags,
    pub peer: Option<PeerRef>,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// Entries not yet retired; `sq[0]` has absolute index `sq_base`.
    pub sq: VecDeque<SqEntry>,
    pub sq_base: u64,
    /// Next WQE the scheduler dispatches.
    pub exec_next: u64,
    /// Next WQE whose processing is not yet scheduled.
    pub proc_next: u64,
    /// When the QP's processing pipeline is free.
    pub proc_free_at: Ps,
    /// Next WQE whose completion is not yet decided (in-order CQEs).
    pub complete_next: u64,
    /// Managed QPs execute only WQEs below this index.
    pub enabled_upto: u64,
    /// A WQE at this index failed at the requester (`u64::MAX`: none): the
    /// QP dispatches nothing after it while earlier WQEs are still in
    /// flight; their completion then moves the QP to ERR.
    pub halted_at: u64,
    pub rq: VecDeque<RecvEntry>,
    /// Whether the QP sits in a scheduler ring.
    pub in_ring: bool,
    /// Earliest pending ready event, if any.
    pub ready_event_at: Option<Ps>,
    /// Go-back-N generation: bumped at each rewind; answers for older
    /// generations are ignored.
    pub epoch: u32,
    /// The QP executes nothing before this time (RNR back-off, a
    /// go-back-N rewind, a parked WAIT's wake-up).
    pub stall_until: Ps,
    /// Whether the QP is registered as a waiter on a CQ.
    pub waiting: bool,
    /// RNR retries left for the head message (7 = infinite).
    pub rnr_left: u8,
    /// Responder side: messages from the peer older than this generation
    /// are discarded.
    pub resp_min_epoch: u32,
    /// Responder side: one past the newest request from the peer that was
    /// executed; an older one is a duplicate (a retransmission).
    pub resp_next: u64,
    /// Responder side: the requester (host, QP index) `resp_next` counts for.
    pub resp_from: Option<PeerRef>,
    /// Transport retries left before `RetryExcErr` (reset by every answer).
    pub retry_left: u8,
    /// The generation the transport timer runs for, if it runs.
    pub timer_epoch: Option<u32>,
    /// When the last answer arrived (the transport timer runs from there).
    pub last_progress: Ps,
    /// Oldest WQE of this generation whose request packets were lost.
    pub req_lost_at: Option<u64>,
    /// Oldest WQE of this generation whose READ response packets were lost.
    pub resp_lost_at: Option<u64>,
    /// Positive ACKs of this generation that were lost.
    pub acks_lost: u32,
    /// Responder side: READ responses still to send, oldest first. They
    /// take turns of this QP in the send scheduler, like its own WQEs.
    pub responses: VecDeque<ReadResponse>,
    /// Whether this QP's last data turn sent a READ response (the next
    /// goes to its own send queue if that is ready: neither starves).
    pub last_turn_responded: bool,
    /// Counters.
    pub stats: QpCounters,
}

/// A READ response the responder QP still has to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadResponse {
    /// The requester's host and QP index.
    pub req_host: usize,
    pub req_qp: u32,
    /// The requester's WQE (absolute index) and go-back-N generation.
    pub wqe: u64,
    pub epoch: u32,
    /// Response payload bytes, and how many of them earlier turns sent.
    pub len: u64,
    pub sent: u64,
}

/// Per-QP counters, as the NIC's own counters would report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Data WQEs completed.
    pub data_wqes: u64,
    /// Control WQEs (WAIT, SEND_ENABLE, NOP) executed.
    pub ctrl_wqes: u64,
    /// Payload bytes acknowledged.
    pub bytes: u64,
    /// Scheduler turns granted.
    pub turns: u64,
}

impl SimQp {
    pub fn new(qp_num: u32, pd: u32, send_cq: u32, recv_cq: u32, attr: &crate::rnic::QpInitAttr) -> Self {
        SimQp {
            qp_num,
            pd,
            send_cq,
            recv_cq,
            caps: attr.caps,
            sig_all: attr.sq_sig_all,
            cross_channel: attr.cross_channel,
            managed: attr.managed_send,
            tc: attr.traffic_class,
            state: QpState::Reset,
            access: AccessFlags::empty(),
            peer: None,
            retry_cnt: 7,
            rnr_retry: 7,
            sq: VecDeque::with_capacity(attr.caps.max_send_wr.min(1024) as usize),
            sq_base: 0,
            exec_next: 0,
            proc_next: 0,
            proc_free_at: 0,
            complete_next: 0,
            enabled_upto: 0,
            halted_at: u64::MAX,
            rq: VecDeque::new(),
            in_ring: false,
            ready_event_at: None,
            epoch: 0,
            stall_until: 0,
            waiting: false,
            rnr_left: 7,
            resp_min_epoch: 0,
            resp_next: 0,
            resp_from: None,
            retry_left: 7,
            timer_epoch: None,
            last_progress: 0,
            req_lost_at: None,
            resp_lost_at: None,
            acks_lost: 0,
            responses: VecDeque::new(),
            last_turn_responded: false,
            stats: QpCounters::default(),
        }
    }

    /// Absolute index one past the last posted WQE.
    pub fn sq_end(&self) -> u64 {
        self.sq_base + self.sq.len() as u64
    }

    pub fn entry(&self, abs: u64) -> Option<&SqEntry> {
        abs.checked_sub(self.sq_base).and_then(|i| self.sq.get(i as usize))
    }

    pub fn entry_mut(&mut self, abs: u64) -> Option<&mut SqEntry> {
        abs.checked_sub(self.sq_base).and_then(|i| self.sq.get_mut(i as usize))
    }

    /// Whether WQE `abs` may execute (managed QPs need it enabled).
    pub fn enabled(&self, abs: u64) -> bool {
        !self.managed || abs < self.enabled_upto
    }
}
