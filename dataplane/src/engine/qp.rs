//! One data QP as the dataplane tracks it: requests held in software,
//! the message being dispatched (its split cursor), the WQEs posted and
//! not yet retired (with which of them carry an application completion),
//! and its place in the tenant's active set.

use std::collections::VecDeque;

use perf_policy_sdk::SplitPlan;

use super::rendezvous::{QpRendezvous, RecordWrite};
use super::tenant::{Completion, WorkRequest};
use crate::rnic::{QpHandle, RemoteAddr, WcStatus};

/// The message being posted: the next byte to dispatch.
pub(crate) struct Cursor {
    pub wr: WorkRequest,
    pub plan: SplitPlan,
    pub offset: u64,
    /// A SEND moved by rendezvous: the RECV's buffer, where its bytes
    /// after the first chunk go as WRITEs before the first chunk goes as
    /// the SEND.
    pub rendezvous: Option<RemoteAddr>,
    /// A split message that consumes a RECV: its whole length, written to
    /// the receiver just before its last WQE.
    pub record: Option<RecordWrite>,
}

/// What a posted WQE means to the dataplane.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Meta {
    /// Hidden: a chunk other than the last, a zero-weight WR, a control WQE.
    Hidden,
    /// Hidden: the release (SEND_ENABLE on the tenant's control QP) that
    /// ends this QP's stream and lets the QP taking over start.
    Release,
    /// The last WQE of an application message.
    App { wr_id: u64, len: u32, posted_ns: u64 },
}

impl Meta {
    /// Whether it ends an application message.
    pub(crate) fn is_app(&self) -> bool {
        matches!(self, Meta::App { .. })
    }
}

/// What a posted WQE holds of its tenant's in-flight windows
/// ([`perf_policy_sdk::TenantPlan::window_kib`]) until it is retired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowCharge {
    /// Admitted under the READ direction's budget (else the WRITE / SEND
    /// direction's).
    pub read: bool,
    /// Bytes it holds of each direction's budget, in bytes of the link's
    /// time: `[requester's wire, responder's wire]`. A WRITE or SEND holds
    /// the requester's side only; a READ holds its response on the
    /// responder's side and its request (a header-only packet and a turn of
    /// the requester's send scheduler) on the requester's side.
    pub held: [u32; 2],
}

/// The NIC-wide send scheduler's time per WQE, ns: ConnectX-6's message
/// rate ceiling of about 112 M WQEs/s (9 QPs of 12.4 M messages/s each,
/// PeRF's `PERF_NIC_QPS_CAPA` and `PERF_NIC_MSG_RATE`; the simulated NIC's
/// `sched_wqe_ps`, `docs/rnic-model.md`).
pub(crate) const NIC_WQE_TURN_NS: f64 = 8.96;

/// The fewest QPs that saturate the NIC's send scheduler: a QP's WQEs are
/// processed at most every 80.6 ns (12.4 M messages/s, PeRF's
/// `PERF_NIC_MSG_RATE`), the scheduler takes [`NIC_WQE_TURN_NS`] per WQE,
/// and 80.6 / 8.96 = 9 (PeRF's `PERF_NIC_QPS_CAPA`).
pub(crate) const NIC_QPS_CAPA: usize = 9;

/// What a data WQE moves, for its window charge: which direction's
/// budget it counts against and the extension header its first packet
/// carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChargedOp {
    /// A WRITE (or WRITE with immediate): its first packet carries a RETH.
    Write,
    /// A SEND: base headers only.
    Send,
    /// A READ, charged for its response on the responder's wire.
    Read,
}

impl WindowCharge {
    /// The charge of a data WQE of `len` payload bytes, in bytes of the
    /// link's time: its packets on the wire (the payload plus
    /// [`PACKET_OVERHEAD_BYTES`] per packet of up to 4 KiB, and a WRITE's
    /// [`RETH_BYTES`]), or one turn of the NIC's send scheduler
    /// (`turn_bytes`: [`NIC_WQE_TURN_NS`] at the link's rate), whichever is
    /// more. A WQE is charged for the bottleneck it uses most, as the
    /// isolation contract counts it (dominant-resource fairness): charging
    /// a small message both its headers and a scheduler turn charged a
    /// 32 B SEND 160 B for 118 B of wire (the probe
    /// `mr-send-32b-16q-pl16_vs_read-1m-16q+write-1m-16q` read 0.83 of its
    /// entitlement so, 0.98 since). Leaving out a WRITE's RETH charged a
    /// 32 B WRITE 118 B for 134 B of wire, and a link those WRITEs kept
    /// busy looked 0.88 busy to the pipeline floor's check, which grew
    /// the budget fourfold (random mix #86 of seed 2: a 311 B READ beside
    /// 221 QPs of 32 B WRITEs waited 8.3 us for 1.9 alone). A READ's
    /// request is charged on the requester's side too (its header-only
    /// packet with its RETH, or a scheduler turn): charged only their
    /// responses, READs of 16 B on 240 QPs filled the requester's send
    /// scheduler unseen by the WRITE budget (random mix #4 of seed 3: the
    /// READs at 1.90 of their entitlement, a 512 KB WRITE stream beside
    /// them at 0.15; now 0.62 and 1.20).
    ///
    /// [`PACKET_OVERHEAD_BYTES`]: perf_policy_sdk::limits::PACKET_OVERHEAD_BYTES
    /// [`RETH_BYTES`]: perf_policy_sdk::limits::RETH_BYTES
    pub fn data(len: u32, op: ChargedOp, turn_bytes: u32) -> Self {
        use perf_policy_sdk::limits::{PACKET_OVERHEAD_BYTES, RETH_BYTES};
        let pkts = (len as u64).div_ceil(4096).max(1);
        let reth = if op == ChargedOp::Write { RETH_BYTES } else { 0 };
        let wire = len as u64 + pkts * PACKET_OVERHEAD_BYTES + reth;
        let bytes = wire.max(turn_bytes as u64).min(u32::MAX as u64) as u32;
        match op {
            ChargedOp::Read => WindowCharge { read: true, held: [Self::read_request(turn_bytes), bytes] },
            ChargedOp::Write | ChargedOp::Send => WindowCharge { read: false, held: [bytes, 0] },
        }
    }

    /// What a READ's request holds on the requester's side: its
    /// header-only packet with its RETH, or a turn of the send scheduler
    /// (`turn_bytes`), whichever is more.
    pub fn read_request(turn_bytes: u32) -> u32 {
        use perf_policy_sdk::limits::{PACKET_OVERHEAD_BYTES, RETH_BYTES};
        (PACKET_OVERHEAD_BYTES + RETH_BYTES).max(turn_bytes as u64) as u32
    }

    /// Bytes it holds of the budget it is admitted under.
    pub fn bytes(&self) -> u32 {
        self.held[self.read as usize]
    }
}

/// Dataplane state of one data QP. `repr(C)`, with the fields that the
/// per-tenant passes of a round read for every QP of a tenant first
/// (`active_set.rs`, `tick.rs`: whether it holds a slot, has work, and
/// what it has outstanding), in its first line: at a thousand tenants
/// these passes walk QPs out of cache, and the lines each QP brings in
/// are what they cost (`benches/scale.rs`, the scale case).
#[repr(C, align(64))]
pub(crate) struct DpQp {
    pub tenant: u32,
    /// Application messages posted and not yet completed.
    pub outstanding: u32,
    /// In the tenant's active set (allowed to post).
    pub active: bool,
    /// Host hand-off (a NIC without in-NIC cross-channel): the QP gave up
    /// its slot but keeps it until its posted messages complete, so the QP
    /// taking over starts only then (see `handoff.rs`).
    pub draining: bool,
    /// The QP failed: everything further completes with a flush error.
    pub failed: bool,
    /// Waiting for an advertisement: not offered to fair admission until
    /// the next look ([`super::rendezvous`]).
    pub parked: bool,
    /// Post the PCQ release (SEND_ENABLE) at the end of the next batch.
    pub pending_release: bool,
    /// The hardware traffic class it was created in.
    pub traffic_class: u8,
    /// Requests waiting for the QP to be allowed, in post order.
    pub held: VecDeque<WorkRequest>,
    pub cursor: Option<Cursor>,
    pub index: u32,
    pub nic_qp: QpHandle,
    /// Posted WQEs not yet retired: (sequence number, meaning, window charge).
    pub posted: super::posted::Posted,
    pub next_seq: u64,
    pub since_signal: u32,
    /// Window-charged bytes posted since its last signaled WQE.
    pub unsignaled_bytes: u64,
    /// RECVs posted, in order.
    pub recvs: VecDeque<WorkRequest>,
    pub next_recv_seq: u64,
    /// RECVs of the peer its messages consume (SEND, WRITE_WITH_IMM), in
    /// the order they were started.
    pub peer_recvs: u64,
    /// SEND rendezvous with the peer's dataplane, once set up.
    pub rendezvous: Option<QpRendezvous>,
    /// Since when its next SEND waits for its RECV's advertisement.
    pub descriptor_wait_since: Option<u64>,
    pub active_since_ns: u64,
    pub active_requests: u32,
    pub active_bytes: u64,
    /// A WAIT on the tenant's PCQ count to post before anything else.
    pub pending_wait: Option<u64>,
    /// The PCQ count of the last WAIT posted (the QP is blocked in the NIC
    /// until the PCQ has completed that many hand-offs).
    pub waiting_on: Option<u64>,
    /// Error of a hidden WQE, to report on the message it belongs to.
    pub pending_error: Option<WcStatus>,
    /// Completions of a failed QP's requests that never reached the NIC,
    /// delivered once its posted messages have completed.
    pub dead: VecDeque<Completion>,
    /// When the QP last completed a message or was seen without backlog
    /// (the policy watchdog's reference), ns.
    pub progress_ns: u64,
    /// When the NIC last answered for it (a completion of any of its WQEs,
    /// hidden ones included) or was seen holding none of its WQEs, ns: a
    /// QP whose WQEs sit in the NIC unanswered is held by the NIC, its peer
    /// or its own tenant (no RECV posted, a peer stopped or failed), not by
    /// the policy.
    pub nic_progress_ns: u64,
}

impl DpQp {
    pub fn new(tenant: u32, index: u32, nic_qp: QpHandle) -> Self {
        DpQp {
            tenant,
            index,
            nic_qp,
            traffic_class: 0,
            held: VecDeque::new(),
            cursor: None,
            posted: super::posted::Posted::default(),
            next_seq: 0,
            since_signal: 0,
            unsignaled_bytes: 0,
            recvs: VecDeque::new(),
            next_recv_seq: 0,
            peer_recvs: 0,
            rendezvous: None,
            descriptor_wait_since: None,
            parked: false,
            active: false,
            active_since_ns: 0,
            active_requests: 0,
            active_bytes: 0,
            pending_wait: None,
            waiting_on: None,
            pending_release: false,
            draining: false,
            pending_error: None,
            failed: false,
            outstanding: 0,
            dead: VecDeque::new(),
            progress_ns: 0,
            nic_progress_ns: 0,
        }
    }

    /// Whether the next data WQE it would post is a READ (a READ's bytes
    /// come back on the responder's wire).
    pub fn next_is_read(&self) -> bool {
        let op = self.cursor.as_ref().map(|c| &c.wr.op).or_else(|| self.held.front().map(|w| &w.op));
        matches!(op, Some(super::tenant::RequestOp::Read { .. }))
    }

    /// The payload bytes of the QP's next data WQE, as near as can be told
    /// before it is built: the rest of the message being posted up to its
    /// chunk, or the next held message up to `chunk` (its tenant's plan's
    /// chunk size, 0 for whole messages).
    pub fn next_bytes(&self, chunk: u32) -> u64 {
        let cap = |len: u64, chunk: u32| if chunk > 0 { len.min(chunk as u64) } else { len };
        match (&self.cursor, self.held.front()) {
            (Some(c), _) => cap(c.wr.len as u64 - c.offset, c.plan.chunk_bytes),
            (None, Some(w)) => cap(w.len as u64, chunk),
            (None, None) => 0,
        }
    }

    /// Requests held or being posted.
    pub fn has_work(&self) -> bool {
        self.cursor.is_some() || !self.held.is_empty()
    }

    /// Held + being posted + outstanding application messages.
    pub fn depth(&self) -> u32 {
        self.held.len() as u32 + self.cursor.is_some() as u32 + self.outstanding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_wqe_is_charged_its_wire_bytes_or_a_scheduler_turn_whichever_is_more() {
        let turn = (NIC_WQE_TURN_NS * 12.5).round() as u32;
        assert_eq!(turn, 112);
        // A small message: the scheduler turn is its dominant cost.
        assert_eq!(WindowCharge::data(8, ChargedOp::Send, turn).bytes(), 112);
        // 32 B: 118 B on the wire as a SEND, 134 B as a WRITE (its RETH).
        assert_eq!(WindowCharge::data(32, ChargedOp::Send, turn).bytes(), 118);
        assert_eq!(WindowCharge::data(32, ChargedOp::Write, turn).bytes(), 134);
        // Two packets' headers for an 8 KiB chunk, one RETH; a READ's
        // response has no RETH and counts against the READ budget, its
        // request (a scheduler turn here) against the WRITE budget.
        let chunk = WindowCharge::data(8192, ChargedOp::Write, turn);
        assert_eq!(chunk, WindowCharge { read: false, held: [8192 + 2 * 86 + 16, 0] });
        let read = WindowCharge::data(4096, ChargedOp::Read, turn);
        assert_eq!(read, WindowCharge { read: true, held: [112, 4096 + 86] });
        assert_eq!(read.bytes(), 4096 + 86);
        // No known link rate: the wire alone; a READ's request is its
        // header-only packet and RETH.
        assert_eq!(WindowCharge::data(8, ChargedOp::Send, 0).bytes(), 94);
        assert_eq!(WindowCharge::data(8, ChargedOp::Read, 0).held, [86 + 16, 94]);
    }
}
