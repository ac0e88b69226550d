//! The RNIC backend boundary.
//!
//! [`Rnic`] is a verbs-level interface: protection domains, memory regions,
//! completion queues and RC queue pairs, `post_send` / `post_recv` /
//! `poll_cq`, plus the cross-channel work requests (WAIT, SEND_ENABLE) and
//! managed QPs that PeRF's in-NIC preemption is built from. The dataplane
//! speaks only this trait, so the same loop drives the simulator
//! ([`sim::SimRnic`]) and a real NIC.
//!
//! Objects are named by small copyable handles ([`QpHandle`], [`CqHandle`],
//! ...). A backend validates every handle it is given and answers a stale or
//! foreign one with [`RnicError::InvalidHandle`], so no sequence of calls in
//! safe code can reach freed NIC state.

pub mod connect;
mod cq_ring;
mod error;
mod forward;
pub mod host_only;
pub mod sim;
pub mod sizing;
mod types;
pub mod verbs;

pub use error::{PostError, RnicError, WcStatus};
pub use types::*;

/// A verbs-level RDMA NIC: one device context on one host.
///
/// Method names and semantics follow libibverbs; where they differ the
/// method says so. All times are in nanoseconds of the backend's clock
/// ([`Rnic::clock_ns`]).
pub trait Rnic: Send {
    /// Device attributes and capabilities (like `ibv_query_device`).
    fn device_info(&self) -> DeviceInfo;

    /// Where WAIT, SEND_ENABLE and managed send queues run on this backend.
    /// The dataplane uses its preemption control QPs and zero-weight WRs
    /// only when they run in the NIC, and hands QPs off on the host
    /// otherwise. By default derived from [`DeviceCaps`]: in the NIC when
    /// the device reports both `cross_channel` and `managed_send`, absent
    /// otherwise; a backend that emulates them overrides this.
    fn cross_channel(&self) -> CrossChannel {
        let caps = self.device_info().caps;
        if caps.cross_channel && caps.managed_send {
            CrossChannel::InNic
        } else {
            CrossChannel::Absent
        }
    }

    /// The port's link attributes and GID (like `ibv_query_port` + `ibv_query_gid`).
    fn port_info(&self) -> PortInfo;

    /// The port's traffic counters ([`PortTraffic`]), or `None` where the
    /// backend does not read them (by default). The dataplane uses them to
    /// tell a wire busy with traffic it did not admit from an idle one.
    fn port_traffic(&self) -> Option<PortTraffic> {
        None
    }

    /// The starting PSN of local QP `qp_num`'s send queue, which its
    /// endpoint advertises to the peer ([`connect::endpoint`]) and its RTS
    /// transition uses: 0 by default (the simulator does not model PSNs).
    /// A hardware backend picks an unpredictable 24-bit one per QP, as
    /// perftest does, so that a stale or forged packet of an earlier
    /// connection is not taken as in sequence.
    fn initial_psn(&self, _qp_num: u32) -> u32 {
        0
    }

    /// What the backend counts of its own work, by name (the verbs
    /// backend: its host gate's control WQEs, markers and added signals,
    /// the device CQEs it reaped); none by default.
    fn backend_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// The device clock in nanoseconds: virtual time on the simulator in
    /// virtual-clock mode, a monotonic wall clock otherwise.
    fn clock_ns(&self) -> u64;

    /// Allocates a protection domain (`ibv_alloc_pd`).
    fn alloc_pd(&mut self) -> Result<PdHandle, RnicError>;

    /// Registers a new zero-filled memory region of `len` bytes in `pd`
    /// (`ibv_reg_mr` over a buffer the backend allocates and owns).
    fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError>;

    /// Deregisters a memory region (`ibv_dereg_mr`); its keys stop working.
    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError>;

    /// The host CPU writes `data` into the region at `offset`.
    fn write_mr(&mut self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<(), RnicError>;

    /// The host CPU reads the region at `offset` into `out`.
    fn read_mr(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<(), RnicError>;

    /// Creates a completion queue (`ibv_create_cq`, or the experimental
    /// variant with `IGNORE_OVERRUN` when `attr.ignore_overrun`).
    fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError>;

    /// Destroys a completion queue; fails while a QP still uses it.
    fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError>;

    /// Creates an RC queue pair in RESET (`ibv_create_qp`).
    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError>;

    /// Moves a QP through its state machine (`ibv_modify_qp`).
    fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError>;

    /// The QP's current state (`ibv_query_qp`).
    fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError>;

    /// Destroys a QP.
    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError>;

    /// Posts a list of send-queue work requests with one doorbell
    /// (`ibv_post_send`). On failure, the requests before `PostError::index`
    /// were posted and the rest were not, as in verbs.
    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError>;

    /// Posts a list of receive work requests (`ibv_post_recv`).
    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;

    /// Polls up to `out.len()` completions (`ibv_poll_cq`); returns how many
    /// were written. A CQ that overran fails with [`RnicError::CqOverrun`].
    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError>;
}
