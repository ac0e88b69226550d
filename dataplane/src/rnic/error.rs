//! Errors of the RNIC boundary: synchronous verbs errors ([`RnicError`],
//! [`PostError`]) and completion statuses ([`WcStatus`]).

use super::types::QpState;

/// A verb failed synchronously (the `errno` of a libibverbs call).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RnicError {
    /// A handle that names no live object of this device.
    #[error("invalid {kind} handle {id}")]
    InvalidHandle {
        /// The kind of object: "qp", "cq", "mr", "pd".
        kind: &'static str,
        /// The handle's raw value.
        id: u32,
    },
    /// An argument outside what the device accepts (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A work queue has no free slot (ENOMEM from `ibv_post_send`).
    #[error("{queue} queue full ({depth} entries outstanding)")]
    QueueFull {
        /// "send" or "recv".
        queue: &'static str,
        /// The queue's depth.
        depth: u32,
    },
    /// The verb is not allowed in the QP's current state.
    #[error("operation {op} not allowed in QP state {state:?}")]
    InvalidState {
        /// What was attempted.
        op: &'static str,
        /// The state the QP was in.
        state: QpState,
    },
    /// The device or library does not offer this feature.
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    /// A completion queue overran (more CQEs than its depth were pending).
    #[error("completion queue {cq} overran")]
    CqOverrun {
        /// The CQ's handle value.
        cq: u32,
    },
    /// The object is still in use (for example a CQ attached to a QP).
    #[error("resource busy: {0}")]
    Busy(&'static str),
    /// A device-level failure reported by the backend.
    #[error("device error: {0}")]
    Device(String),
}

/// `post_send` / `post_recv` failed at work request `index`; the requests
/// before it were posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} of the post list was rejected: {error}")]
pub struct PostError {
    /// Index in the post list of the first request not posted (`bad_wr`).
    pub index: usize,
    /// Why it was rejected.
    pub error: RnicError,
}

/// Status of a work completion (`enum ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// A receive buffer was too small for the incoming message.
    LocLenErr,
    /// A local QP operation error (for example a WAIT on a foreign CQ).
    LocQpOpErr,
    /// A local SGE failed the lkey, bounds, PD or access check.
    LocProtErr,
    /// Flushed because the QP is in the ERR state.
    WrFlushErr,
    /// The responder rejected the request as invalid (e.g. length).
    RemInvReqErr,
    /// The responder rejected the rkey, bounds or access rights.
    RemAccessErr,
    /// The responder failed the operation.
    RemOpErr,
    /// Transport retries exhausted (no ACK from the peer).
    RetryExcErr,
    /// Receiver-not-ready retries exhausted (no RECV posted at the peer).
    RnrRetryExcErr,
}

impl WcStatus {
    /// Whether this is [`WcStatus::Success`].
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
}
