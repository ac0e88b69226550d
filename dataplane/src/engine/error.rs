//! What the engine's setup and control calls refuse, as a type: a tenant
//! or QP that does not exist, a tenant removed or still busy, queues that
//! do not fit the shared completion queues, the policy loader gone; and
//! the NIC's own errors, kept as the source.

use crate::rnic::RnicError;

/// Why a setup or control call of the [`Dataplane`](super::Dataplane)
/// failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No tenant has this id.
    #[error("no tenant {0}")]
    NoTenant(u32),
    /// The tenant was removed.
    #[error("tenant {0} was removed")]
    TenantRemoved(u32),
    /// The tenant has no QP of this index.
    #[error("tenant {tenant} has no QP {index}")]
    NoQp {
        /// The tenant.
        tenant: u32,
        /// The QP index asked for.
        index: u32,
    },
    /// The tenant has no such registered region.
    #[error("tenant {tenant} has no region with lkey {lkey:#x}")]
    NoRegion {
        /// The tenant.
        tenant: u32,
        /// The region's lkey.
        lkey: u32,
    },
    /// One more data QP would not fit the shared completion queues.
    #[error(
        "{qps} data QPs of {sq_depth} send-queue and {rq_depth} receive-queue slots do not fit the shared \
         completion queues ({cq_depth} entries each, {reserve} per QP kept for control WQEs)"
    )]
    QueuesDoNotFit {
        /// The data QPs there would be.
        qps: u64,
        /// Send-queue slots per QP.
        sq_depth: u32,
        /// Receive-queue slots per QP.
        rq_depth: u32,
        /// Entries of each shared CQ.
        cq_depth: u32,
        /// Entries kept per QP for control WQEs.
        reserve: u32,
    },
    /// The QP's SEND rendezvous was not set up in this order.
    #[error("tenant {tenant}'s QP {index} has no rendezvous ring: ask for it first")]
    NoRendezvousRing {
        /// The tenant.
        tenant: u32,
        /// The QP index.
        index: u32,
    },
    /// The call cannot be served now (the tenant or QP still has
    /// requests to complete, or the QP is healthy).
    #[error("{0}")]
    Busy(&'static str),
    /// The policy loader thread could not be started.
    #[error("cannot start the policy loader")]
    LoaderStart(#[source] std::io::Error),
    /// The policy loader thread is gone: the policy was not loaded.
    #[error("the policy loader is gone; {0} not loaded")]
    LoaderGone(String),
    /// The NIC refused.
    #[error(transparent)]
    Nic(#[from] RnicError),
}
