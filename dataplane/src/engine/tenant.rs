//! The tenant side: what an application holds ([`TenantHandle`]) and what
//! crosses the bounded queues between it and the dataplane loop
//! ([`WorkRequest`] in, [`Completion`] out; see `chan.rs`).

use std::collections::VecDeque;

use crossbeam_channel::TrySendError;

use super::chan::{BoundedRx, BoundedTx};

use crate::rnic::{Mr, RemoteAddr, WcStatus};

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOp {
    /// RDMA WRITE to `remote`.
    Write {
        /// Destination at the peer.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate data.
    WriteImm {
        /// Destination at the peer.
        remote: RemoteAddr,
        /// Immediate data.
        imm: u32,
    },
    /// SEND into the peer's next RECV.
    Send,
    /// RDMA READ of `remote` into the local buffer.
    Read {
        /// Source at the peer.
        remote: RemoteAddr,
    },
    /// Post a RECV of the local buffer.
    Recv,
}

/// One application work request on one of the tenant's QPs. The local
/// buffer is `len` bytes at `offset` into the tenant's region `mr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Index of the QP within the tenant.
    pub qp: u32,
    /// The operation.
    pub op: RequestOp,
    /// Local region.
    pub mr: Mr,
    /// Offset into it.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// The tenant's clock when it posted, in ns.
    pub posted_ns: u64,
}

impl WorkRequest {
    /// An RDMA WRITE of the first `len` bytes of `mr` to `remote`, on the
    /// tenant's QP `qp`, with no posting time.
    pub fn write(wr_id: u64, qp: u32, mr: Mr, len: u32, remote: RemoteAddr) -> WorkRequest {
        WorkRequest { wr_id, qp, op: RequestOp::Write { remote }, mr, offset: 0, len, posted_ns: 0 }
    }
}

/// What kind of request completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// A send-side request (WRITE, WRITE_WITH_IMM, SEND, READ).
    Send,
    /// A RECV was filled.
    Recv,
}

/// The completion of one accepted request: delivered exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// Index of the QP within the tenant.
    pub qp: u32,
    /// Outcome.
    pub status: WcStatus,
    /// Send or receive side.
    pub kind: CompletionKind,
    /// Bytes of the message.
    pub byte_len: u32,
    /// Immediate data received, if any.
    pub imm: Option<u32>,
    /// When the tenant posted it (tenant clock, ns).
    pub posted_ns: u64,
    /// When the dataplane delivered it (dataplane clock, ns).
    pub completed_ns: u64,
}

impl Completion {
    /// A send-side message's completion (WRITE, WRITE_WITH_IMM, SEND,
    /// READ): its `len` bytes counted only if it succeeded.
    pub fn send(wr_id: u64, qp: u32, status: WcStatus, len: u32, posted_ns: u64, completed_ns: u64) -> Completion {
        let byte_len = if status.is_ok() { len } else { 0 };
        Completion { wr_id, qp, status, kind: CompletionKind::Send, byte_len, imm: None, posted_ns, completed_ns }
    }

    /// RECV `wr`'s completion on the tenant's QP `qp`: the bytes that
    /// landed and the immediate, if any.
    pub fn recv(wr: &WorkRequest, qp: u32, status: WcStatus, byte_len: u32, imm: Option<u32>, at: u64) -> Completion {
        let (wr_id, posted_ns) = (wr.wr_id, wr.posted_ns);
        Completion { wr_id, qp, status, kind: CompletionKind::Recv, byte_len, imm, posted_ns, completed_ns: at }
    }

    /// The completion of request `wr` that moved no data: refused at the
    /// door, or flushed before or after it reached the NIC.
    pub fn failed(wr: &WorkRequest, status: WcStatus, completed_ns: u64) -> Completion {
        if wr.op == RequestOp::Recv {
            Completion::recv(wr, wr.qp, status, 0, None, completed_ns)
        } else {
            Completion::send(wr.wr_id, wr.qp, status, 0, wr.posted_ns, completed_ns)
        }
    }
}

/// Why a post was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostRefused {
    /// The request queue is full: try again later (back-pressure).
    #[error("request queue full")]
    Full,
    /// The dataplane has stopped.
    #[error("dataplane stopped")]
    Stopped,
}

/// An application's end of the dataplane.
pub struct TenantHandle {
    /// Tenant id.
    pub id: u32,
    /// The tenant's name.
    pub name: String,
    /// Its QPs' count.
    pub qps: u32,
    pub(crate) req_tx: BoundedTx<WorkRequest>,
    pub(crate) cpl_rx: BoundedRx<Completion>,
}

impl TenantHandle {
    /// Posts a request. A full queue is reported, never dropped.
    pub fn post(&self, wr: WorkRequest) -> Result<(), PostRefused> {
        self.req_tx.try_send(wr).map_err(|e| match e {
            TrySendError::Full(_) => PostRefused::Full,
            TrySendError::Disconnected(_) => PostRefused::Stopped,
        })
    }

    /// Posts a post list: all of `wrs`, in order, as one item (one lock of
    /// the request queue), or none of them if the queue has not room for
    /// all.
    pub fn post_list(&self, wrs: &[WorkRequest]) -> Result<(), PostRefused> {
        self.req_tx.try_send_all(wrs).map_err(|e| match e {
            TrySendError::Full(()) => PostRefused::Full,
            TrySendError::Disconnected(()) => PostRefused::Stopped,
        })
    }

    /// Takes the next completion, if one is waiting.
    pub fn poll(&self) -> Option<Completion> {
        self.cpl_rx.try_recv()
    }

    /// Takes up to `max` waiting completions into `out`, in order, under
    /// one lock; returns how many.
    pub fn poll_into(&self, max: usize, out: &mut VecDeque<Completion>) -> usize {
        self.cpl_rx.recv_into(max, out)
    }

    /// Requests queued towards the dataplane.
    pub fn queued(&self) -> usize {
        self.req_tx.len()
    }
}
