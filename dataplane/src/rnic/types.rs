//! Plain verbs-level data types shared by every backend: handles, memory
//! region descriptors, QP attributes, work requests and work completions.

use super::error::WcStatus;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
    };
}

handle!(
    /// A protection domain.
    PdHandle
);
handle!(
    /// A registered memory region.
    MrHandle
);
handle!(
    /// A completion queue.
    CqHandle
);
handle!(
    /// A queue pair.
    QpHandle
);

bitflags::bitflags! {
    /// Memory region and QP access rights (`enum ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The NIC may write the region on behalf of local work (RECV, READ results).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE into the region.
        const REMOTE_WRITE = 2;
        /// Peers may RDMA READ from the region.
        const REMOTE_READ = 4;
    }
}

/// A registered memory region as the application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Handle for deregistration and CPU access.
    pub handle: MrHandle,
    /// Virtual address of the first byte (what SGEs and remote addresses use).
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Local key, for SGEs of this host's work requests.
    pub lkey: u32,
    /// Remote key, handed to peers for RDMA WRITE / READ.
    pub rkey: u32,
}

impl Mr {
    /// An SGE covering `len` bytes at `offset` into this region.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge { addr: self.addr + offset as u64, length: len, lkey: self.lkey }
    }

    /// The remote address of `offset` into this region, for a peer.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr { addr: self.addr + offset as u64, rkey: self.rkey }
    }
}

/// Completion queue attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqAttr {
    /// Number of CQEs the queue holds before it overruns.
    pub depth: u32,
    /// Overwrite the oldest CQE instead of failing on overrun (mlx5
    /// `IGNORE_OVERRUN`); the completion counter that WAITs watch still counts.
    pub ignore_overrun: bool,
}

/// Queue sizes of a QP (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth in WQEs.
    pub max_send_wr: u32,
    /// Receive queue depth in WQEs.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WQE.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WQE.
    pub max_recv_sge: u32,
    /// Largest payload that may be posted inline.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 220 }
    }
}

/// QP creation attributes (`struct ibv_qp_init_attr` plus the cross-channel
/// creation flags of mlx5's experimental verbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// CQ for send completions.
    pub send_cq: CqHandle,
    /// CQ for receive completions.
    pub recv_cq: CqHandle,
    /// Queue sizes.
    pub caps: QpCaps,
    /// Every send WQE generates a CQE, regardless of its `signaled` flag.
    pub sq_sig_all: bool,
    /// The QP may post WAIT and SEND_ENABLE (`CROSS_CHANNEL`).
    pub cross_channel: bool,
    /// The send queue executes only WQEs released by a SEND_ENABLE
    /// (`MANAGED_SEND`).
    pub managed_send: bool,
    /// Hardware traffic class (0-7) the NIC schedules this QP in.
    pub traffic_class: u8,
}

impl QpInitAttr {
    /// Plain RC QP attributes on the given CQs, default caps, class 0.
    pub fn new(send_cq: CqHandle, recv_cq: CqHandle) -> Self {
        QpInitAttr {
            send_cq,
            recv_cq,
            caps: QpCaps::default(),
            sq_sig_all: false,
            cross_channel: false,
            managed_send: false,
            traffic_class: 0,
        }
    }
}

/// A created QP: its handle and the QP number peers address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qp {
    /// Local handle.
    pub handle: QpHandle,
    /// 24-bit QP number.
    pub qp_num: u32,
}

/// The RC QP state machine (`enum ibv_qp_state`, the states RC uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum QpState {
    /// Just created or reset: no work allowed.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive: connected to its peer.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error: every outstanding and new WQE completes with a flush error.
    Err,
}

/// A 128-bit GID (RoCEv2 address).
pub type Gid = [u8; 16];

/// What two sides exchange out of band to connect RC QPs (as perftest does
/// over TCP): the peer's GID, QP number and first PSN, and the limits the
/// two sides negotiate (each takes the smaller of its own and the peer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpEndpoint {
    /// The port GID of the QP's device.
    pub gid: Gid,
    /// The QP number.
    pub qp_num: u32,
    /// Starting packet sequence number.
    pub psn: u32,
    /// The largest path MTU in bytes this side's port can use (its active
    /// MTU); 0 when not known (the other side then uses its own).
    pub mtu: u32,
    /// RDMA READs this side's QP accepts outstanding as responder
    /// (`max_qp_rd_atom`): the most the other side may have in flight
    /// (its `max_rd_atomic`); 0 when not known.
    pub max_rd_atomic: u32,
}

impl QpEndpoint {
    /// The path MTU in bytes both sides can use: the smaller of `local`
    /// and this (remote) endpoint's MTU, or `local` when the remote did not
    /// say (as perftest does with the MTU it exchanges).
    pub fn negotiated_mtu(&self, local: u32) -> u32 {
        match self.mtu {
            0 => local,
            m if local == 0 => m,
            m => m.min(local),
        }
    }

    /// The RDMA READs a local initiator may keep in flight towards this
    /// (remote) endpoint: the smaller of the local device's
    /// `max_qp_init_rd_atom` and what the remote accepts, at least 1.
    pub fn negotiated_rd_atomic(&self, local_init: u32) -> u32 {
        match self.max_rd_atomic {
            0 => local_init.max(1),
            r => r.min(local_init).max(1),
        }
    }
}

/// One step of the QP state machine (`ibv_modify_qp` with the attribute
/// mask that step needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTransition {
    /// RESET -> INIT with the remote access rights the QP grants.
    Init {
        /// Rights peers get through this QP.
        access: AccessFlags,
    },
    /// INIT -> RTR, connecting to the peer.
    Rtr {
        /// The remote QP.
        remote: QpEndpoint,
    },
    /// RTR -> RTS.
    Rts {
        /// Transport retries before `RetryExcErr` (0-7).
        retry_cnt: u8,
        /// Receiver-not-ready retries before `RnrRetryExcErr` (0-7; 7 = infinite).
        rnr_retry: u8,
    },
    /// Any state -> ERR (flushes outstanding work).
    Err,
    /// Any state -> RESET (drops everything).
    Reset,
}

/// A scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address inside a registered region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// A remote buffer: address and rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Virtual address at the peer.
    pub addr: u64,
    /// Remote key of the peer's region.
    pub rkey: u32,
}

/// What a send-queue WQE does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOpcode {
    /// RDMA WRITE of the payload to `remote`.
    Write {
        /// Destination.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate: also consumes a RECV at the peer.
    WriteImm {
        /// Destination.
        remote: RemoteAddr,
        /// Immediate data delivered in the peer's CQE.
        imm: u32,
    },
    /// SEND: lands in the next RECV posted at the peer.
    Send,
    /// SEND with immediate data.
    SendImm {
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ of `remote` into the local SGEs.
    Read {
        /// Source at the peer.
        remote: RemoteAddr,
    },
    /// Cross-channel WAIT (mlx5 `CQE_WAIT`): the send queue stops here
    /// until `cq` has produced at least `count` completions since it was
    /// created. `count == 0` is always satisfied. No payload, no wire time.
    Wait {
        /// The CQ whose completion counter is watched (same device).
        cq: CqHandle,
        /// Absolute completion count to wait for.
        count: u64,
    },
    /// Cross-channel SEND_ENABLE: lets managed QP `qp` execute `count` more
    /// of its posted WQEs. No payload, no wire time.
    SendEnable {
        /// The managed QP (same device).
        qp: QpHandle,
        /// How many more WQEs it may execute.
        count: u32,
    },
    /// A WQE that does nothing but take its turn (and its CQE if signaled).
    Nop,
}

impl WrOpcode {
    /// The opcode of the completion this WQE produces at the requester.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            WrOpcode::Write { .. } | WrOpcode::WriteImm { .. } => WcOpcode::Write,
            WrOpcode::Send | WrOpcode::SendImm { .. } => WcOpcode::Send,
            WrOpcode::Read { .. } => WcOpcode::Read,
            WrOpcode::Wait { .. } => WcOpcode::Wait,
            WrOpcode::SendEnable { .. } => WcOpcode::SendEnable,
            WrOpcode::Nop => WcOpcode::Nop,
        }
    }

    /// Whether the WQE carries payload on the wire.
    pub fn moves_data(&self) -> bool {
        matches!(
            self,
            WrOpcode::Write { .. }
                | WrOpcode::WriteImm { .. }
                | WrOpcode::Send
                | WrOpcode::SendImm { .. }
                | WrOpcode::Read { .. }
        )
    }
}

/// The payload of a send WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// No payload (control WQEs, zero-byte messages).
    None,
    /// Gathered from registered memory at execution time.
    Sges(&'a [Sge]),
    /// Copied into the WQE at post time (`IBV_SEND_INLINE`).
    Inline(&'a [u8]),
}

/// A send-queue work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Application identifier returned in the CQE.
    pub wr_id: u64,
    /// What the WQE does.
    pub opcode: WrOpcode,
    /// Where its bytes come from (for READ: where they go).
    pub payload: Payload<'a>,
    /// Generate a CQE on completion (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
}

impl<'a> SendWr<'a> {
    /// Payload length in bytes.
    pub fn len(&self) -> u64 {
        match self.payload {
            Payload::None => 0,
            Payload::Sges(s) => s.iter().map(|s| s.length as u64).sum(),
            Payload::Inline(b) => b.len() as u64,
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive-queue work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Application identifier returned in the CQE.
    pub wr_id: u64,
    /// Where an incoming SEND's bytes are scattered.
    pub sgl: &'a [Sge],
}

/// Opcode of a work completion (`enum ibv_wc_opcode`, plus the
/// cross-channel ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum WcOpcode {
    /// RDMA WRITE (with or without immediate) completed at the requester.
    Write,
    /// SEND completed at the requester.
    Send,
    /// RDMA READ completed: the data is in local memory.
    Read,
    /// A WAIT was satisfied and executed.
    Wait,
    /// A SEND_ENABLE executed.
    SendEnable,
    /// A NOP executed.
    Nop,
    /// A SEND arrived in a posted RECV.
    Recv,
    /// A WRITE_WITH_IMM consumed a posted RECV.
    RecvRdmaWithImm,
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receive side) or transferred.
    pub byte_len: u32,
    /// Immediate data, if the message carried it.
    pub imm: Option<u32>,
    /// Local QP number.
    pub qp_num: u32,
    /// Device time at which the CQE was written, in ns.
    pub timestamp_ns: u64,
}

impl Wc {
    /// The flush-error completion of a work request on a QP in ERR.
    pub fn flushed(wr_id: u64, opcode: WcOpcode, qp_num: u32, timestamp_ns: u64) -> Wc {
        Wc { wr_id, status: WcStatus::WrFlushErr, opcode, byte_len: 0, imm: None, qp_num, timestamp_ns }
    }

    /// An all-zero completion, for preallocating poll buffers.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Nop,
        byte_len: 0,
        imm: None,
        qp_num: 0,
        timestamp_ns: 0,
    };
}

/// What a device can do (the part of `ibv_query_device` the dataplane uses).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCaps {
    /// WAIT / SEND_ENABLE WQEs are executed by the NIC.
    pub cross_channel: bool,
    /// Managed send queues are supported.
    pub managed_send: bool,
    /// Largest QP depth.
    pub max_qp_wr: u32,
    /// Largest CQ depth.
    pub max_cqe: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
    /// Hardware traffic classes (for SP / ETS).
    pub traffic_classes: u8,
    /// RDMA READs one QP may have outstanding as responder
    /// (`max_qp_rd_atom`); what a peer may ask for in its `max_rd_atomic`.
    pub max_rd_atomic: u32,
    /// `ibv_query_device`'s `vendor_id` (the IEEE OUI) and
    /// `vendor_part_id` (the PCI device id); `(0, 0)` where there is none
    /// (the simulator).
    pub vendor: (u32, u32),
}

/// Where a backend runs the cross-channel work requests (WAIT,
/// SEND_ENABLE) and managed send queues that PeRF's in-NIC preemption is
/// built from ([`Rnic::cross_channel`](super::Rnic::cross_channel)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum CrossChannel {
    /// The NIC executes them (the simulator; MLNX_OFED 4.x experimental
    /// verbs on ConnectX): a WAIT stops the send queue inside the NIC.
    InNic,
    /// The backend accepts them but executes them on the host
    /// ([`super::verbs::host_gate`]): WQEs are held in host memory and posted when
    /// the condition holds (the verbs backend over upstream rdma-core).
    HostGated,
    /// The backend refuses them.
    Absent,
}

/// Device identity and capabilities.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    /// Device name (`mlx5_0`, `sim-cx6-100g:0`, ...).
    pub name: String,
    /// Capabilities.
    pub caps: DeviceCaps,
}

/// What a port has moved on its wire since it came up, in bytes of
/// frames (headers included), as a port's traffic counters count it
/// (`port_xmit_data` and `port_rcv_data`, in units of 4 bytes, on
/// InfiniBand and RoCE ports), and when they were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PortTraffic {
    /// Bytes the port sent.
    pub xmit_bytes: u64,
    /// Bytes the port received.
    pub rcv_bytes: u64,
    /// The device clock (`Rnic::clock_ns`) when the counters were read: a
    /// backend may hand out a sample read a little earlier than asked.
    pub at_ns: u64,
}

/// Link attributes of the device's port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PortInfo {
    /// Whether the link is up.
    pub active: bool,
    /// Link rate in Gb/s.
    pub link_gbps: u32,
    /// Active MTU in bytes.
    pub mtu: u32,
    /// The port's GID at index 0.
    pub gid: Gid,
}
