//! The libibverbs ABI as plain Rust: the numeric values of the verbs enums
//! the backend uses, the translation of a trait [`SendWr`] into a plain
//! description of the `struct ibv_send_wr` fields ([`IbvSendWr`]), and the
//! mappings back from the library (`ibv_wc_status`, `ibv_wc_opcode`,
//! `errno`, MTU, link width and speed, GID types).
//!
//! Nothing here touches libibverbs, so it is compiled (and unit-tested)
//! without the `verbs` feature; the verbs backend checks at test time that
//! every constant here equals the one `rdma-sys` generates from the
//! installed headers.

use std::net::{IpAddr, Ipv6Addr};

use smallvec::SmallVec;

use super::host_gate::GateOp;
use crate::rnic::{Gid, Payload, QpCaps, QpState, RnicError, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};

/// `enum ibv_wr_opcode` values (the ones RC data WQEs use).
pub mod wr_opcode {
    /// `IBV_WR_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 0;
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// `IBV_WR_SEND`.
    pub const SEND: u32 = 2;
    /// `IBV_WR_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u32 = 3;
    /// `IBV_WR_RDMA_READ`.
    pub const RDMA_READ: u32 = 4;
}

/// `enum ibv_send_flags` values.
pub mod send_flags {
    /// `IBV_SEND_FENCE`.
    pub const FENCE: u32 = 1;
    /// `IBV_SEND_SIGNALED`.
    pub const SIGNALED: u32 = 2;
    /// `IBV_SEND_SOLICITED`.
    pub const SOLICITED: u32 = 4;
    /// `IBV_SEND_INLINE`.
    pub const INLINE: u32 = 8;
}

/// `enum ibv_wc_status` values.
pub mod wc_status {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: u32 = 0;
    /// `IBV_WC_LOC_LEN_ERR`.
    pub const LOC_LEN_ERR: u32 = 1;
    /// `IBV_WC_LOC_QP_OP_ERR`.
    pub const LOC_QP_OP_ERR: u32 = 2;
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    pub const LOC_EEC_OP_ERR: u32 = 3;
    /// `IBV_WC_LOC_PROT_ERR`.
    pub const LOC_PROT_ERR: u32 = 4;
    /// `IBV_WC_WR_FLUSH_ERR`.
    pub const WR_FLUSH_ERR: u32 = 5;
    /// `IBV_WC_MW_BIND_ERR`.
    pub const MW_BIND_ERR: u32 = 6;
    /// `IBV_WC_BAD_RESP_ERR`.
    pub const BAD_RESP_ERR: u32 = 7;
    /// `IBV_WC_LOC_ACCESS_ERR`.
    pub const LOC_ACCESS_ERR: u32 = 8;
    /// `IBV_WC_REM_INV_REQ_ERR`.
    pub const REM_INV_REQ_ERR: u32 = 9;
    /// `IBV_WC_REM_ACCESS_ERR`.
    pub const REM_ACCESS_ERR: u32 = 10;
    /// `IBV_WC_REM_OP_ERR`.
    pub const REM_OP_ERR: u32 = 11;
    /// `IBV_WC_RETRY_EXC_ERR`.
    pub const RETRY_EXC_ERR: u32 = 12;
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    /// `IBV_WC_REM_ABORT_ERR`.
    pub const REM_ABORT_ERR: u32 = 16;
    /// `IBV_WC_INV_EECN_ERR`.
    pub const INV_EECN_ERR: u32 = 17;
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    pub const INV_EEC_STATE_ERR: u32 = 18;
    /// `IBV_WC_FATAL_ERR`.
    pub const FATAL_ERR: u32 = 19;
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    /// `IBV_WC_GENERAL_ERR`.
    pub const GENERAL_ERR: u32 = 21;
}

/// `enum ibv_wc_opcode` values.
pub mod wc_opcode {
    /// `IBV_WC_SEND`.
    pub const SEND: u32 = 0;
    /// `IBV_WC_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 1;
    /// `IBV_WC_RDMA_READ`.
    pub const RDMA_READ: u32 = 2;
    /// `IBV_WC_RECV`.
    pub const RECV: u32 = 128;
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

/// `enum ibv_wc_flags` values.
pub mod wc_flags {
    /// `IBV_WC_WITH_IMM`: the completion carries immediate data.
    pub const WITH_IMM: u32 = 2;
}

/// `enum ibv_access_flags` values (equal to the bits of [`crate::rnic::AccessFlags`]).
pub mod access {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: u32 = 1;
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: u32 = 2;
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: u32 = 4;
}

/// `enum ibv_qp_state` values.
pub mod qp_state {
    /// `IBV_QPS_RESET`.
    pub const RESET: u32 = 0;
    /// `IBV_QPS_INIT`.
    pub const INIT: u32 = 1;
    /// `IBV_QPS_RTR`.
    pub const RTR: u32 = 2;
    /// `IBV_QPS_RTS`.
    pub const RTS: u32 = 3;
    /// `IBV_QPS_SQD`.
    pub const SQD: u32 = 4;
    /// `IBV_QPS_SQE`.
    pub const SQE: u32 = 5;
    /// `IBV_QPS_ERR`.
    pub const ERR: u32 = 6;
}

/// `enum ibv_port_state` values.
pub mod port_state {
    /// `IBV_PORT_DOWN`.
    pub const DOWN: u32 = 1;
    /// `IBV_PORT_INIT`.
    pub const INIT: u32 = 2;
    /// `IBV_PORT_ARMED`.
    pub const ARMED: u32 = 3;
    /// `IBV_PORT_ACTIVE`.
    pub const ACTIVE: u32 = 4;
    /// `IBV_PORT_ACTIVE_DEFER`.
    pub const ACTIVE_DEFER: u32 = 5;
}

/// `IBV_LINK_LAYER_*` values of `ibv_port_attr::link_layer`.
pub mod link_layer {
    /// `IBV_LINK_LAYER_UNSPECIFIED` (old kernels report it for InfiniBand).
    pub const UNSPECIFIED: u8 = 0;
    /// `IBV_LINK_LAYER_INFINIBAND`.
    pub const INFINIBAND: u8 = 1;
    /// `IBV_LINK_LAYER_ETHERNET` (RoCE, iWARP).
    pub const ETHERNET: u8 = 2;
}

/// `enum ibv_transport_type` values.
pub mod transport {
    /// `IBV_TRANSPORT_IB` (InfiniBand and RoCE).
    pub const IB: i32 = 0;
    /// `IBV_TRANSPORT_IWARP` (siw, iWARP NICs).
    pub const IWARP: i32 = 1;
}

/// `ibv_cq_init_attr_ex` values for the zero-weight WRs' CQ.
pub mod cq_attr {
    /// `IBV_CQ_INIT_ATTR_MASK_FLAGS`: `flags` is valid.
    pub const MASK_FLAGS: u32 = 1;
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
    pub const IGNORE_OVERRUN: u32 = 1 << 1;
}

/// `enum ibv_event_type` values.
pub mod event {
    /// `IBV_EVENT_CQ_ERR`: a CQ overran; its QPs get no more CQEs.
    pub const CQ_ERR: u32 = 0;
    /// `IBV_EVENT_QP_FATAL`.
    pub const QP_FATAL: u32 = 1;
    /// `IBV_EVENT_QP_REQ_ERR`: the QP received an invalid request.
    pub const QP_REQ_ERR: u32 = 2;
    /// `IBV_EVENT_QP_ACCESS_ERR`: a remote access violation on the QP.
    pub const QP_ACCESS_ERR: u32 = 3;
    /// `IBV_EVENT_COMM_EST`.
    pub const COMM_EST: u32 = 4;
    /// `IBV_EVENT_SQ_DRAINED`.
    pub const SQ_DRAINED: u32 = 5;
    /// `IBV_EVENT_PATH_MIG`.
    pub const PATH_MIG: u32 = 6;
    /// `IBV_EVENT_PATH_MIG_ERR`.
    pub const PATH_MIG_ERR: u32 = 7;
    /// `IBV_EVENT_DEVICE_FATAL`: the device must be reopened.
    pub const DEVICE_FATAL: u32 = 8;
    /// `IBV_EVENT_PORT_ACTIVE`.
    pub const PORT_ACTIVE: u32 = 9;
    /// `IBV_EVENT_PORT_ERR`: the link went down.
    pub const PORT_ERR: u32 = 10;
    /// `IBV_EVENT_LID_CHANGE`.
    pub const LID_CHANGE: u32 = 11;
    /// `IBV_EVENT_PKEY_CHANGE`.
    pub const PKEY_CHANGE: u32 = 12;
    /// `IBV_EVENT_SM_CHANGE`.
    pub const SM_CHANGE: u32 = 13;
    /// `IBV_EVENT_SRQ_ERR`.
    pub const SRQ_ERR: u32 = 14;
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    pub const CLIENT_REREGISTER: u32 = 17;
    /// `IBV_EVENT_GID_CHANGE`.
    pub const GID_CHANGE: u32 = 18;
    /// `IBV_EVENT_WQ_FATAL`.
    pub const WQ_FATAL: u32 = 19;
}

/// Which member of `ibv_async_event::element` an event sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncSubject {
    /// `element.qp`.
    Qp,
    /// `element.cq`.
    Cq,
    /// `element.port_num`.
    Port,
    /// None: the device as a whole (or an SRQ / WQ, which this backend
    /// never creates).
    Device,
}

/// The member an event of type `raw` sets (as `ibv_get_async_event(3)` lists).
pub fn async_event_subject(raw: u32) -> AsyncSubject {
    use event as e;
    match raw {
        e::CQ_ERR => AsyncSubject::Cq,
        e::QP_FATAL
        | e::QP_REQ_ERR
        | e::QP_ACCESS_ERR
        | e::COMM_EST
        | e::SQ_DRAINED
        | e::PATH_MIG
        | e::PATH_MIG_ERR
        | e::QP_LAST_WQE_REACHED => AsyncSubject::Qp,
        e::PORT_ACTIVE
        | e::PORT_ERR
        | e::LID_CHANGE
        | e::PKEY_CHANGE
        | e::SM_CHANGE
        | e::CLIENT_REREGISTER
        | e::GID_CHANGE => AsyncSubject::Port,
        _ => AsyncSubject::Device,
    }
}

/// The libibverbs name of an event type (as `ibv_event_type_str`) and
/// whether it is an error that stops work on what it names.
pub fn async_event_name(raw: u32) -> (&'static str, bool) {
    use event as e;
    match raw {
        e::CQ_ERR => ("CQ error", true),
        e::QP_FATAL => ("local work queue catastrophic error", true),
        e::QP_REQ_ERR => ("invalid request local work queue error", true),
        e::QP_ACCESS_ERR => ("local access violation work queue error", true),
        e::COMM_EST => ("communication established", false),
        e::SQ_DRAINED => ("send queue drained", false),
        e::PATH_MIG => ("path migrated", false),
        e::PATH_MIG_ERR => ("path migration request error", true),
        e::DEVICE_FATAL => ("local catastrophic error", true),
        e::PORT_ACTIVE => ("port active", false),
        e::PORT_ERR => ("port error", true),
        e::LID_CHANGE => ("LID change", false),
        e::PKEY_CHANGE => ("P_Key change", false),
        e::SM_CHANGE => ("SM change", false),
        e::SRQ_ERR => ("SRQ catastrophic error", true),
        e::SRQ_LIMIT_REACHED => ("SRQ limit reached", false),
        e::QP_LAST_WQE_REACHED => ("last WQE reached", false),
        e::CLIENT_REREGISTER => ("client reregistration", false),
        e::GID_CHANGE => ("GID table change", false),
        e::WQ_FATAL => ("WQ fatal", true),
        _ => ("unknown event", true),
    }
}

/// Linux `errno` values the verbs calls return (asm-generic numbering,
/// shared by x86-64 and aarch64).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// No such file or directory.
    pub const ENOENT: i32 = 2;
    /// I/O error.
    pub const EIO: i32 = 5;
    /// No such device or address.
    pub const ENXIO: i32 = 6;
    /// Try again.
    pub const EAGAIN: i32 = 11;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Permission denied.
    pub const EACCES: i32 = 13;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// No such device.
    pub const ENODEV: i32 = 19;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// No space left.
    pub const ENOSPC: i32 = 28;
    /// Function not implemented.
    pub const ENOSYS: i32 = 38;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Connection timed out.
    pub const ETIMEDOUT: i32 = 110;
}

/// A plain description of the fields of one `struct ibv_send_wr` for a
/// data WQE, owned so that it can be held in software (host gating) after
/// `post_send` returns. `wr_id`, `next` and `IBV_SEND_SIGNALED` are filled in
/// when it is handed to the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbvSendWr {
    /// `opcode` (one of [`wr_opcode`]).
    pub opcode: u32,
    /// `send_flags` without `IBV_SEND_SIGNALED` (only `IBV_SEND_INLINE` is used).
    pub send_flags: u32,
    /// `sg_list` / `num_sge` for gathered payloads (empty when inline).
    pub sg_list: SmallVec<[Sge; 4]>,
    /// The bytes of an inline payload; at post time one SGE points at them.
    pub inline_data: Option<SmallVec<[u8; 64]>>,
    /// `wr.rdma.remote_addr` (WRITE, WRITE_WITH_IMM, READ).
    pub remote_addr: u64,
    /// `wr.rdma.rkey`.
    pub rkey: u32,
    /// `imm_data` in network byte order, as `ibv_send_wr` holds it.
    pub imm_data_be: u32,
    /// Payload length in bytes (what the trait's send CQE reports).
    pub byte_len: u32,
}

impl IbvSendWr {
    /// The `send_flags` to post with, given whether the WQE is signaled.
    pub fn flags(&self, signaled: bool) -> u32 {
        self.send_flags | if signaled { send_flags::SIGNALED } else { 0 }
    }

    /// A zero-length RDMA WRITE: a WQE that moves no data, whose signaled
    /// completion tells the host that every earlier WQE of the send queue
    /// has completed (RC completes in order). A zero-length WRITE carries
    /// no payload, so the responder checks neither rkey nor address
    /// (InfiniBand spec, RDMA WRITE with DMA length 0).
    pub fn completion_marker() -> Self {
        IbvSendWr {
            opcode: wr_opcode::RDMA_WRITE,
            send_flags: 0,
            sg_list: SmallVec::new(),
            inline_data: None,
            remote_addr: 0,
            rkey: 0,
            imm_data_be: 0,
            byte_len: 0,
        }
    }
}

/// What a trait work request becomes on upstream libibverbs: a data WQE
/// for the device, or a control operation the host gate executes (upstream
/// verbs has no WAIT, SEND_ENABLE or RC NOP).
pub type Translated = GateOp<IbvSendWr>;

/// Largest message size of an RC work request (2^31 bytes).
pub const MAX_MESSAGE_BYTES: u64 = 1 << 31;

/// Checks a send work request against the QP's capabilities and the rules
/// of its opcode, as the simulator does; returns the reason it is refused.
pub fn validate_send(wr: &SendWr<'_>, caps: &QpCaps) -> Result<(), RnicError> {
    let inval = |m: String| Err(RnicError::InvalidArgument(m));
    if matches!(wr.opcode, WrOpcode::Read { .. }) && matches!(wr.payload, Payload::Inline(_)) {
        return inval("RDMA READ cannot be inline".into());
    }
    if !wr.opcode.moves_data() && !matches!(wr.payload, Payload::None) {
        return inval("control WQEs carry no payload".into());
    }
    match wr.payload {
        Payload::Sges(s) if s.len() as u32 > caps.max_send_sge => {
            inval(format!("{} SGEs exceed max_send_sge {}", s.len(), caps.max_send_sge))
        }
        Payload::Inline(b) if b.len() as u32 > caps.max_inline_data => {
            inval(format!("inline payload of {} B exceeds max_inline_data {}", b.len(), caps.max_inline_data))
        }
        _ if wr.len() > MAX_MESSAGE_BYTES => inval(format!("message of {} B exceeds 2 GiB", wr.len())),
        _ => Ok(()),
    }
}

/// Translates a trait work request into what the verbs backend does with
/// it: the `ibv_send_wr` fields of a data WQE, or a control operation for
/// the host gate. Does not check QP capabilities (see [`validate_send`]).
pub fn translate_send(wr: &SendWr<'_>) -> Result<Translated, RnicError> {
    let (opcode, remote, imm) = match wr.opcode {
        WrOpcode::Write { remote } => (wr_opcode::RDMA_WRITE, Some(remote), None),
        WrOpcode::WriteImm { remote, imm } => (wr_opcode::RDMA_WRITE_WITH_IMM, Some(remote), Some(imm)),
        WrOpcode::Send => (wr_opcode::SEND, None, None),
        WrOpcode::SendImm { imm } => (wr_opcode::SEND_WITH_IMM, None, Some(imm)),
        WrOpcode::Read { remote } => (wr_opcode::RDMA_READ, Some(remote), None),
        WrOpcode::Wait { cq, count } => return control(wr, Translated::Wait { cq, count }),
        WrOpcode::SendEnable { qp, count } => return control(wr, Translated::SendEnable { qp, count }),
        WrOpcode::Nop => return control(wr, Translated::Nop),
    };
    let len = wr.len();
    if len > MAX_MESSAGE_BYTES {
        return Err(RnicError::InvalidArgument(format!("message of {len} B exceeds 2 GiB")));
    }
    let (sg_list, inline_data, flags) = match wr.payload {
        Payload::None => (SmallVec::new(), None, 0),
        Payload::Sges(s) => (SmallVec::from_slice(s), None, 0),
        Payload::Inline(_) if opcode == wr_opcode::RDMA_READ => {
            return Err(RnicError::InvalidArgument("RDMA READ cannot be inline".into()))
        }
        Payload::Inline(b) => (SmallVec::new(), Some(SmallVec::from_slice(b)), send_flags::INLINE),
    };
    Ok(Translated::Hw(IbvSendWr {
        opcode,
        send_flags: flags,
        sg_list,
        inline_data,
        remote_addr: remote.map_or(0, |r| r.addr),
        rkey: remote.map_or(0, |r| r.rkey),
        imm_data_be: imm.map_or(0, u32::to_be),
        byte_len: len as u32,
    }))
}

fn control(wr: &SendWr<'_>, t: Translated) -> Result<Translated, RnicError> {
    if matches!(wr.payload, Payload::None) {
        Ok(t)
    } else {
        Err(RnicError::InvalidArgument("control WQEs carry no payload".into()))
    }
}

/// Maps `ibv_wc_status` to the trait's [`WcStatus`]. Statuses the trait has
/// no name for are folded into the nearest one (see the match); the raw
/// value's name is available from [`wc_status_name`].
pub fn wc_status_from_raw(raw: u32) -> WcStatus {
    use wc_status as s;
    match raw {
        s::SUCCESS => WcStatus::Success,
        s::LOC_LEN_ERR => WcStatus::LocLenErr,
        s::LOC_PROT_ERR | s::LOC_ACCESS_ERR | s::MW_BIND_ERR | s::LOC_RDD_VIOL_ERR => WcStatus::LocProtErr,
        s::WR_FLUSH_ERR => WcStatus::WrFlushErr,
        s::REM_INV_REQ_ERR | s::REM_INV_RD_REQ_ERR => WcStatus::RemInvReqErr,
        s::REM_ACCESS_ERR => WcStatus::RemAccessErr,
        s::REM_OP_ERR | s::BAD_RESP_ERR | s::REM_ABORT_ERR => WcStatus::RemOpErr,
        s::RETRY_EXC_ERR | s::RESP_TIMEOUT_ERR => WcStatus::RetryExcErr,
        s::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        _ => WcStatus::LocQpOpErr,
    }
}

/// The libibverbs name of a raw `ibv_wc_status` (as `ibv_wc_status_str`
/// would print it, without calling the library).
pub fn wc_status_name(raw: u32) -> &'static str {
    use wc_status as s;
    match raw {
        s::SUCCESS => "success",
        s::LOC_LEN_ERR => "local length error",
        s::LOC_QP_OP_ERR => "local QP operation error",
        s::LOC_EEC_OP_ERR => "local EE context operation error",
        s::LOC_PROT_ERR => "local protection error",
        s::WR_FLUSH_ERR => "Work Request Flushed Error",
        s::MW_BIND_ERR => "memory management operation error",
        s::BAD_RESP_ERR => "bad response error",
        s::LOC_ACCESS_ERR => "local access error",
        s::REM_INV_REQ_ERR => "remote invalid request error",
        s::REM_ACCESS_ERR => "remote access error",
        s::REM_OP_ERR => "remote operation error",
        s::RETRY_EXC_ERR => "transport retry counter exceeded",
        s::RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        s::LOC_RDD_VIOL_ERR => "local RDD violation error",
        s::REM_INV_RD_REQ_ERR => "remote invalid RD request",
        s::REM_ABORT_ERR => "operation aborted",
        s::INV_EECN_ERR => "invalid EE context number",
        s::INV_EEC_STATE_ERR => "invalid EE context state",
        s::FATAL_ERR => "fatal error",
        s::RESP_TIMEOUT_ERR => "response timeout error",
        s::GENERAL_ERR => "general error",
        _ => "unknown",
    }
}

/// Maps a successful completion's `ibv_wc_opcode` to [`WcOpcode`]; `None`
/// for opcodes this backend never posts (atomics, memory windows, TSO,
/// tag matching). On error completions the opcode field is undefined, so
/// the backend takes the opcode from its own record of the work request.
pub fn wc_opcode_from_raw(raw: u32) -> Option<WcOpcode> {
    match raw {
        wc_opcode::SEND => Some(WcOpcode::Send),
        wc_opcode::RDMA_WRITE => Some(WcOpcode::Write),
        wc_opcode::RDMA_READ => Some(WcOpcode::Read),
        wc_opcode::RECV => Some(WcOpcode::Recv),
        wc_opcode::RECV_RDMA_WITH_IMM => Some(WcOpcode::RecvRdmaWithImm),
        _ => None,
    }
}

/// Maps a raw `ibv_qp_state` to [`QpState`]. SQD (drained) still sends when
/// resumed and is reported as RTS; SQE (send queue error) is reported as ERR.
pub fn qp_state_from_raw(raw: u32) -> Option<QpState> {
    match raw {
        qp_state::RESET => Some(QpState::Reset),
        qp_state::INIT => Some(QpState::Init),
        qp_state::RTR => Some(QpState::Rtr),
        qp_state::RTS | qp_state::SQD => Some(QpState::Rts),
        qp_state::SQE | qp_state::ERR => Some(QpState::Err),
        _ => None,
    }
}

/// The libibverbs call a failure came from, for error messages and for
/// mapping its `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `ibv_get_device_list`.
    GetDeviceList,
    /// `ibv_open_device`.
    OpenDevice,
    /// `ibv_query_device`.
    QueryDevice,
    /// `ibv_query_port`.
    QueryPort,
    /// `ibv_query_gid`.
    QueryGid,
    /// `ibv_alloc_pd`.
    AllocPd,
    /// `ibv_reg_mr`.
    RegMr,
    /// `ibv_create_cq` (or `ibv_create_cq_ex`).
    CreateCq,
    /// `ibv_resize_cq`.
    ResizeCq,
    /// `ibv_create_qp`.
    CreateQp,
    /// `ibv_modify_qp`.
    ModifyQp,
    /// `ibv_query_qp`.
    QueryQp,
    /// `ibv_post_send`.
    PostSend,
    /// `ibv_post_recv`.
    PostRecv,
    /// `ibv_poll_cq`.
    PollCq,
    /// One of the `ibv_destroy_*` / `ibv_dereg_mr` / `ibv_dealloc_pd` calls.
    Destroy,
}

impl Verb {
    /// The C function's name.
    pub fn name(self) -> &'static str {
        match self {
            Verb::GetDeviceList => "ibv_get_device_list",
            Verb::OpenDevice => "ibv_open_device",
            Verb::QueryDevice => "ibv_query_device",
            Verb::QueryPort => "ibv_query_port",
            Verb::QueryGid => "ibv_query_gid",
            Verb::AllocPd => "ibv_alloc_pd",
            Verb::RegMr => "ibv_reg_mr",
            Verb::CreateCq => "ibv_create_cq",
            Verb::ResizeCq => "ibv_resize_cq",
            Verb::CreateQp => "ibv_create_qp",
            Verb::ModifyQp => "ibv_modify_qp",
            Verb::QueryQp => "ibv_query_qp",
            Verb::PostSend => "ibv_post_send",
            Verb::PostRecv => "ibv_post_recv",
            Verb::PollCq => "ibv_poll_cq",
            Verb::Destroy => "ibv_destroy",
        }
    }
}

/// Maps the `errno` of a failed verb to [`RnicError`]. `queue_depth` is the
/// depth reported when `ibv_post_send` / `ibv_post_recv` answer ENOMEM
/// (a full work queue).
pub fn errno_to_error(verb: Verb, errno: i32, queue_depth: u32) -> RnicError {
    use self::errno as e;
    let name = verb.name();
    match (verb, errno) {
        (Verb::PostSend, e::ENOMEM) => RnicError::QueueFull { queue: "send", depth: queue_depth },
        (Verb::PostRecv, e::ENOMEM) => RnicError::QueueFull { queue: "recv", depth: queue_depth },
        (Verb::RegMr, e::ENOMEM) | (Verb::RegMr, e::EPERM) | (Verb::RegMr, e::EAGAIN) => RnicError::Device(format!(
            "{name}: cannot pin the memory region (errno {errno}); raise the locked-memory limit (ulimit -l)"
        )),
        (Verb::CreateCq | Verb::ResizeCq | Verb::CreateQp, e::ENOMEM | e::EAGAIN) => RnicError::Device(format!(
            "{name}: out of memory for the queue's rings (errno {errno}): the kernel pins them, so the \
             locked-memory limit counts them; raise it (ulimit -l, memlock in /etc/security/limits.conf; \
             `perf-runner doctor` shows it) or use fewer or shallower queues"
        )),
        (_, e::EINVAL) => RnicError::InvalidArgument(format!("{name} rejected an argument (EINVAL)")),
        (_, e::EFAULT) => RnicError::InvalidArgument(format!("{name}: bad address (EFAULT)")),
        (_, e::EOPNOTSUPP) | (_, e::ENOSYS) => RnicError::NotSupported(name),
        (_, e::EBUSY) => RnicError::Busy(name),
        (_, e::ENOMEM) | (_, e::ENOSPC) => RnicError::Device(format!("{name}: out of device or host resources")),
        (_, e::EPERM) | (_, e::EACCES) => {
            RnicError::Device(format!("{name}: permission denied (access to /dev/infiniband/uverbs*?)"))
        }
        (_, e::ENODEV) | (_, e::ENXIO) | (_, e::ENOENT) => RnicError::Device(format!("{name}: no such device")),
        (_, e::ETIMEDOUT) => RnicError::Device(format!("{name}: timed out")),
        (_, e::EIO) => RnicError::Device(format!("{name}: I/O error (device in a fatal state?)")),
        _ => RnicError::Device(format!("{name} failed with errno {errno}")),
    }
}

/// Bytes of a raw `ibv_mtu` value (`IBV_MTU_256` = 1 ... `IBV_MTU_4096` = 5).
pub fn mtu_bytes(raw: u32) -> Option<u32> {
    match raw {
        1..=5 => Some(128 << raw),
        _ => None,
    }
}

/// The raw `ibv_mtu` of the largest MTU not above `bytes` (`IBV_MTU_256`
/// for anything below 512); `None` below 256 B.
pub fn mtu_from_bytes(bytes: u32) -> Option<u32> {
    (1..=5u32).rev().find(|&raw| 128u32 << raw <= bytes)
}

/// Per-lane rate in Gb/s of a raw `ibv_port_attr::active_speed`, as
/// `ibv_devinfo` names it (SDR 2.5 ... XDR 200).
pub fn lane_gbps(active_speed: u8) -> Option<f64> {
    match active_speed {
        1 => Some(2.5),
        2 => Some(5.0),
        4 | 8 => Some(10.0),
        16 => Some(14.0),
        32 => Some(25.0),
        64 => Some(50.0),
        128 => Some(100.0),
        _ => None,
    }
}

/// Lanes of a raw `ibv_port_attr::active_width` (1X, 2X, 4X, 8X, 12X).
pub fn lanes(active_width: u8) -> Option<u32> {
    match active_width {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Link rate in Gb/s from raw width and speed; `None` if either is unknown.
pub fn link_gbps(active_width: u8, active_speed: u8) -> Option<f64> {
    Some(lanes(active_width)? as f64 * lane_gbps(active_speed)?)
}

/// The name of a raw port state, as `ibv_devinfo` prints it.
pub fn port_state_name(raw: u32) -> &'static str {
    match raw {
        port_state::DOWN => "PORT_DOWN",
        port_state::INIT => "PORT_INIT",
        port_state::ARMED => "PORT_ARMED",
        port_state::ACTIVE => "PORT_ACTIVE",
        port_state::ACTIVE_DEFER => "PORT_ACTIVE_DEFER",
        _ => "PORT_NOP",
    }
}

/// The name of a raw link layer.
pub fn link_layer_name(raw: u8) -> &'static str {
    match raw {
        link_layer::ETHERNET => "Ethernet",
        link_layer::INFINIBAND | link_layer::UNSPECIFIED => "InfiniBand",
        _ => "unknown",
    }
}

/// The protocol a GID table entry addresses (sysfs `gid_attrs/types/N`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum GidKind {
    /// `IB/RoCE v1`: InfiniBand, or RoCE v1 on an Ethernet port.
    IbRoceV1,
    /// `RoCE v2`: routable RoCE over UDP/IP.
    RoceV2,
    /// The type could not be read (old kernel, iWARP).
    Unknown,
}

impl GidKind {
    /// Parses the contents of a sysfs `gid_attrs/types/N` file.
    pub fn from_sysfs(text: &str) -> GidKind {
        match text.trim() {
            "RoCE v2" => GidKind::RoceV2,
            "IB/RoCE v1" => GidKind::IbRoceV1,
            _ => GidKind::Unknown,
        }
    }

    /// The kind of a raw `ibv_gid_entry::gid_type` (`IBV_GID_TYPE_IB` = 0,
    /// `IBV_GID_TYPE_ROCE_V1` = 1, `IBV_GID_TYPE_ROCE_V2` = 2).
    pub fn from_ibv(raw: u32) -> GidKind {
        match raw {
            0 | 1 => GidKind::IbRoceV1,
            2 => GidKind::RoceV2,
            _ => GidKind::Unknown,
        }
    }

    /// A short label.
    pub fn label(&self) -> &'static str {
        match self {
            GidKind::IbRoceV1 => "IB/RoCE v1",
            GidKind::RoceV2 => "RoCE v2",
            GidKind::Unknown => "unknown",
        }
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GidEntry {
    /// Table index (`sgid_index`).
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub kind: GidKind,
}

/// Formats a GID as an IPv6 address (`fe80::...`, `::ffff:10.0.0.1`).
pub fn format_gid(gid: &Gid) -> String {
    Ipv6Addr::from(*gid).to_string()
}

/// Parses a GID: an IPv6 address, or 32 hex digits with optional `:`.
pub fn parse_gid(text: &str) -> Option<Gid> {
    if let Ok(a) = text.trim().parse::<Ipv6Addr>() {
        return Some(a.octets());
    }
    let hex: String = text.trim().chars().filter(|c| *c != ':').collect();
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(gid)
}

fn is_ipv4_mapped(gid: &Gid) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

fn is_link_local(gid: &Gid) -> bool {
    gid[0] == 0xfe && gid[1] & 0xc0 == 0x80
}

/// Chooses the GID index RC QPs use as `sgid_index`. On an Ethernet port:
/// a RoCE v2 GID with an IPv4-mapped address first (the address other
/// hosts reach over routed RoCE), then a RoCE v2 global IPv6 address, then
/// a RoCE v2 link-local one, then any RoCE v1 GID. On InfiniBand: the first
/// non-zero GID (index 0 holds the port GID). Zero GIDs (unused slots) are
/// never chosen.
pub fn select_gid(entries: &[GidEntry], ethernet: bool) -> Option<&GidEntry> {
    select_gid_for(entries, ethernet, None)
}

/// The GID of an IP address as a RoCE GID table holds it (IPv4 as
/// `::ffff:a.b.c.d`).
pub fn gid_of_ip(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// [`select_gid`], preferring on an Ethernet port the RoCE v2 (then any)
/// GID whose address is `prefer`: the local address of the out-of-band
/// connection to the peer, i.e. the interface the kernel routes to it,
/// which the first IPv4 GID of a multi-homed port need not be.
pub fn select_gid_for(entries: &[GidEntry], ethernet: bool, prefer: Option<IpAddr>) -> Option<&GidEntry> {
    let used = || entries.iter().filter(|e| e.gid != [0u8; 16]);
    if !ethernet {
        return used().next();
    }
    let v2 = || used().filter(|e| e.kind == GidKind::RoceV2);
    if let Some(ip) = prefer.filter(|ip| !ip.is_unspecified() && !ip.is_loopback()) {
        let g = gid_of_ip(ip);
        if let Some(e) = v2().find(|e| e.gid == g).or_else(|| used().find(|e| e.gid == g)) {
            return Some(e);
        }
    }
    v2().find(|e| is_ipv4_mapped(&e.gid))
        .or_else(|| v2().find(|e| !is_link_local(&e.gid)))
        .or_else(|| v2().next())
        .or_else(|| used().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::{AccessFlags, CqHandle, QpHandle, RemoteAddr};

    fn wr(opcode: WrOpcode, payload: Payload<'_>) -> SendWr<'_> {
        SendWr { wr_id: 7, opcode, payload, signaled: true }
    }

    #[test]
    fn write_translates_to_rdma_write_fields() {
        let sges = [Sge { addr: 0x1000, length: 64, lkey: 11 }, Sge { addr: 0x2000, length: 36, lkey: 12 }];
        let t = translate_send(&wr(
            WrOpcode::Write { remote: RemoteAddr { addr: 0xdead_0000, rkey: 0x55 } },
            Payload::Sges(&sges),
        ))
        .expect("valid WRITE");
        let Translated::Hw(d) = t else { panic!("WRITE must go to hardware, got {t:?}") };
        assert_eq!(d.opcode, wr_opcode::RDMA_WRITE);
        assert_eq!(d.send_flags, 0);
        assert_eq!(d.sg_list.as_slice(), &sges);
        assert_eq!(d.remote_addr, 0xdead_0000);
        assert_eq!(d.rkey, 0x55);
        assert_eq!(d.byte_len, 100);
        assert_eq!(d.flags(true), send_flags::SIGNALED);
        assert_eq!(d.flags(false), 0);
    }

    #[test]
    fn inline_send_with_imm_sets_inline_flag_and_network_order_imm() {
        let bytes = [1u8, 2, 3, 4, 5];
        let t = translate_send(&wr(WrOpcode::SendImm { imm: 0x0102_0304 }, Payload::Inline(&bytes))).expect("valid");
        let Translated::Hw(d) = t else { panic!("SEND must go to hardware") };
        assert_eq!(d.opcode, wr_opcode::SEND_WITH_IMM);
        assert_eq!(d.send_flags, send_flags::INLINE);
        assert_eq!(d.flags(true), send_flags::INLINE | send_flags::SIGNALED);
        assert_eq!(d.inline_data.as_deref(), Some(&bytes[..]));
        assert!(d.sg_list.is_empty());
        // The bytes in memory are the big-endian encoding of the value.
        assert_eq!(d.imm_data_be.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(d.byte_len, 5);
    }

    #[test]
    fn read_and_write_imm_and_send_opcodes() {
        let sge = [Sge { addr: 1, length: 8, lkey: 2 }];
        let remote = RemoteAddr { addr: 9, rkey: 3 };
        let cases = [
            (WrOpcode::Read { remote }, wr_opcode::RDMA_READ),
            (WrOpcode::WriteImm { remote, imm: 5 }, wr_opcode::RDMA_WRITE_WITH_IMM),
            (WrOpcode::Send, wr_opcode::SEND),
        ];
        for (op, want) in cases {
            match translate_send(&wr(op, Payload::Sges(&sge))) {
                Ok(Translated::Hw(d)) => assert_eq!(d.opcode, want, "{op:?}"),
                other => panic!("{op:?} translated to {other:?}"),
            }
        }
    }

    #[test]
    fn control_opcodes_go_to_the_gate() {
        let w = translate_send(&wr(WrOpcode::Wait { cq: CqHandle(3), count: 9 }, Payload::None));
        assert_eq!(w, Ok(Translated::Wait { cq: CqHandle(3), count: 9 }));
        let e = translate_send(&wr(WrOpcode::SendEnable { qp: QpHandle(4), count: 2 }, Payload::None));
        assert_eq!(e, Ok(Translated::SendEnable { qp: QpHandle(4), count: 2 }));
        assert_eq!(translate_send(&wr(WrOpcode::Nop, Payload::None)), Ok(Translated::Nop));
        let bad = translate_send(&wr(WrOpcode::Nop, Payload::Inline(&[1])));
        assert!(matches!(bad, Err(RnicError::InvalidArgument(_))), "{bad:?}");
    }

    #[test]
    fn inline_read_is_refused() {
        let r = translate_send(&wr(WrOpcode::Read { remote: RemoteAddr { addr: 0, rkey: 0 } }, Payload::Inline(&[0])));
        assert!(matches!(r, Err(RnicError::InvalidArgument(ref m)) if m.contains("READ")), "{r:?}");
    }

    #[test]
    fn validate_send_checks_caps() {
        let caps = QpCaps { max_send_sge: 1, max_inline_data: 4, ..QpCaps::default() };
        let sges = [Sge { addr: 0, length: 1, lkey: 0 }; 2];
        let too_many = validate_send(&wr(WrOpcode::Send, Payload::Sges(&sges)), &caps);
        assert!(matches!(too_many, Err(RnicError::InvalidArgument(ref m)) if m.contains("max_send_sge")));
        let too_long = validate_send(&wr(WrOpcode::Send, Payload::Inline(&[0; 5])), &caps);
        assert!(matches!(too_long, Err(RnicError::InvalidArgument(ref m)) if m.contains("max_inline_data")));
        assert_eq!(validate_send(&wr(WrOpcode::Send, Payload::Inline(&[0; 4])), &caps), Ok(()));
        let huge = [Sge { addr: 0, length: u32::MAX, lkey: 0 }];
        assert!(validate_send(&wr(WrOpcode::Send, Payload::Sges(&huge)), &caps).is_err());
    }

    #[test]
    fn marker_is_a_zero_length_write() {
        let m = IbvSendWr::completion_marker();
        assert_eq!(m.opcode, wr_opcode::RDMA_WRITE);
        assert!(m.sg_list.is_empty() && m.inline_data.is_none());
        assert_eq!(m.byte_len, 0);
        assert_eq!(m.flags(true), send_flags::SIGNALED);
    }

    #[test]
    fn access_bits_equal_ibv_access_flags() {
        assert_eq!(AccessFlags::LOCAL_WRITE.bits(), access::LOCAL_WRITE);
        assert_eq!(AccessFlags::REMOTE_WRITE.bits(), access::REMOTE_WRITE);
        assert_eq!(AccessFlags::REMOTE_READ.bits(), access::REMOTE_READ);
    }

    #[test]
    fn wc_status_mapping() {
        use wc_status as s;
        let cases = [
            (s::SUCCESS, WcStatus::Success),
            (s::LOC_LEN_ERR, WcStatus::LocLenErr),
            (s::LOC_QP_OP_ERR, WcStatus::LocQpOpErr),
            (s::LOC_PROT_ERR, WcStatus::LocProtErr),
            (s::LOC_ACCESS_ERR, WcStatus::LocProtErr),
            (s::WR_FLUSH_ERR, WcStatus::WrFlushErr),
            (s::REM_INV_REQ_ERR, WcStatus::RemInvReqErr),
            (s::REM_ACCESS_ERR, WcStatus::RemAccessErr),
            (s::REM_OP_ERR, WcStatus::RemOpErr),
            (s::BAD_RESP_ERR, WcStatus::RemOpErr),
            (s::RETRY_EXC_ERR, WcStatus::RetryExcErr),
            (s::RESP_TIMEOUT_ERR, WcStatus::RetryExcErr),
            (s::RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExcErr),
            (s::FATAL_ERR, WcStatus::LocQpOpErr),
            (s::GENERAL_ERR, WcStatus::LocQpOpErr),
            (999, WcStatus::LocQpOpErr),
        ];
        for (raw, want) in cases {
            assert_eq!(wc_status_from_raw(raw), want, "raw status {raw} ({})", wc_status_name(raw));
        }
        assert_eq!(wc_status_name(s::WR_FLUSH_ERR), "Work Request Flushed Error");
        assert_eq!(wc_status_name(12345), "unknown");
    }

    #[test]
    fn wc_opcode_mapping() {
        assert_eq!(wc_opcode_from_raw(wc_opcode::SEND), Some(WcOpcode::Send));
        assert_eq!(wc_opcode_from_raw(wc_opcode::RDMA_WRITE), Some(WcOpcode::Write));
        assert_eq!(wc_opcode_from_raw(wc_opcode::RDMA_READ), Some(WcOpcode::Read));
        assert_eq!(wc_opcode_from_raw(wc_opcode::RECV), Some(WcOpcode::Recv));
        assert_eq!(wc_opcode_from_raw(wc_opcode::RECV_RDMA_WITH_IMM), Some(WcOpcode::RecvRdmaWithImm));
        assert_eq!(wc_opcode_from_raw(3), None, "atomics are never posted");
        assert_eq!(WrOpcode::WriteImm { remote: RemoteAddr { addr: 0, rkey: 0 }, imm: 1 }.wc_opcode(), WcOpcode::Write);
        assert_eq!(WrOpcode::SendEnable { qp: QpHandle(0), count: 1 }.wc_opcode(), WcOpcode::SendEnable);
    }

    #[test]
    fn qp_state_mapping() {
        assert_eq!(qp_state_from_raw(qp_state::RESET), Some(QpState::Reset));
        assert_eq!(qp_state_from_raw(qp_state::INIT), Some(QpState::Init));
        assert_eq!(qp_state_from_raw(qp_state::RTR), Some(QpState::Rtr));
        assert_eq!(qp_state_from_raw(qp_state::RTS), Some(QpState::Rts));
        assert_eq!(qp_state_from_raw(qp_state::SQE), Some(QpState::Err));
        assert_eq!(qp_state_from_raw(qp_state::ERR), Some(QpState::Err));
        assert_eq!(qp_state_from_raw(7), None);
    }

    #[test]
    fn errno_mapping() {
        use errno as e;
        assert_eq!(errno_to_error(Verb::PostSend, e::ENOMEM, 128), RnicError::QueueFull { queue: "send", depth: 128 });
        assert_eq!(errno_to_error(Verb::PostRecv, e::ENOMEM, 16), RnicError::QueueFull { queue: "recv", depth: 16 });
        assert!(
            matches!(errno_to_error(Verb::ModifyQp, e::EINVAL, 0), RnicError::InvalidArgument(m) if m.contains("ibv_modify_qp"))
        );
        assert_eq!(errno_to_error(Verb::CreateQp, e::EOPNOTSUPP, 0), RnicError::NotSupported("ibv_create_qp"));
        assert_eq!(errno_to_error(Verb::CreateCq, e::ENOSYS, 0), RnicError::NotSupported("ibv_create_cq"));
        assert_eq!(errno_to_error(Verb::Destroy, e::EBUSY, 0), RnicError::Busy("ibv_destroy"));
        assert!(matches!(errno_to_error(Verb::RegMr, e::ENOMEM, 0), RnicError::Device(m) if m.contains("ulimit -l")));
        for verb in [Verb::CreateCq, Verb::CreateQp, Verb::ResizeCq] {
            let m = errno_to_error(verb, e::ENOMEM, 0).to_string();
            assert!(m.contains("ulimit -l") && m.contains(verb.name()), "{m}");
        }
        assert!(matches!(errno_to_error(Verb::AllocPd, e::ENOMEM, 0), RnicError::Device(m) if m.contains("resources")));
        assert!(
            matches!(errno_to_error(Verb::OpenDevice, e::EACCES, 0), RnicError::Device(m) if m.contains("permission"))
        );
        assert!(
            matches!(errno_to_error(Verb::OpenDevice, e::ENODEV, 0), RnicError::Device(m) if m.contains("no such device"))
        );
        assert!(matches!(errno_to_error(Verb::PollCq, 4242, 0), RnicError::Device(m) if m.contains("4242")));
    }

    #[test]
    fn async_events_name_their_subject() {
        assert_eq!(async_event_subject(event::CQ_ERR), AsyncSubject::Cq);
        assert_eq!(async_event_subject(event::QP_FATAL), AsyncSubject::Qp);
        assert_eq!(async_event_subject(event::QP_ACCESS_ERR), AsyncSubject::Qp);
        assert_eq!(async_event_subject(event::PORT_ERR), AsyncSubject::Port);
        assert_eq!(async_event_subject(event::GID_CHANGE), AsyncSubject::Port);
        assert_eq!(async_event_subject(event::DEVICE_FATAL), AsyncSubject::Device);
        assert_eq!(async_event_subject(event::SRQ_ERR), AsyncSubject::Device, "no SRQ is ever created");
        assert_eq!(async_event_name(event::QP_FATAL), ("local work queue catastrophic error", true));
        assert_eq!(async_event_name(event::PORT_ACTIVE), ("port active", false));
        assert!(async_event_name(777).1, "an unknown event is treated as an error");
    }

    #[test]
    fn mtu_and_rate() {
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
        assert_eq!(mtu_from_bytes(4096), Some(5));
        assert_eq!(mtu_from_bytes(1024), Some(3));
        assert_eq!(mtu_from_bytes(1500), Some(3), "an Ethernet MTU of 1500 carries 1024 B RoCE payloads");
        assert_eq!(mtu_from_bytes(9000), Some(5));
        assert_eq!(mtu_from_bytes(255), None);
        for raw in 1..=5 {
            assert_eq!(mtu_from_bytes(mtu_bytes(raw).expect("valid")), Some(raw));
        }
        // 100 GbE RoCE reports 4X EDR; 200 Gb/s HDR is 4X HDR; Soft-RoCE on 10 GbE is 1X QDR.
        assert_eq!(link_gbps(2, 32), Some(100.0));
        assert_eq!(link_gbps(2, 64), Some(200.0));
        assert_eq!(link_gbps(1, 4), Some(10.0));
        assert_eq!(link_gbps(3, 32), None);
        assert_eq!(port_state_name(port_state::ACTIVE), "PORT_ACTIVE");
        assert_eq!(port_state_name(port_state::DOWN), "PORT_DOWN");
        assert_eq!(link_layer_name(link_layer::ETHERNET), "Ethernet");
        assert_eq!(link_layer_name(link_layer::UNSPECIFIED), "InfiniBand");
    }

    fn gid(text: &str) -> Gid {
        parse_gid(text).expect("test GID")
    }

    #[test]
    fn gid_formatting_and_parsing() {
        let g = gid("::ffff:10.0.0.1");
        assert_eq!(g[10..], [0xff, 0xff, 10, 0, 0, 1]);
        assert_eq!(format_gid(&g), "::ffff:10.0.0.1");
        // sysfs format: eight groups of four hex digits.
        let s = gid("fe80:0000:0000:0000:0202:c9ff:fe00:0001");
        assert_eq!(format_gid(&s), "fe80::202:c9ff:fe00:1");
        assert_eq!(parse_gid("fe800000000000000202c9fffe000001"), Some(s));
        assert_eq!(parse_gid("not a gid"), None);
        assert_eq!(parse_gid("fe80"), None);
    }

    #[test]
    fn gid_kind_from_sysfs() {
        assert_eq!(GidKind::from_sysfs("RoCE v2\n"), GidKind::RoceV2);
        assert_eq!(GidKind::from_sysfs("IB/RoCE v1\n"), GidKind::IbRoceV1);
        assert_eq!(GidKind::from_sysfs(""), GidKind::Unknown);
    }

    #[test]
    fn roce_v2_ipv4_gid_is_preferred() {
        let e = |index, g: &str, kind| GidEntry { index, gid: gid(g), kind };
        let table = vec![
            e(0, "fe80::1", GidKind::IbRoceV1),
            e(1, "fe80::1", GidKind::RoceV2),
            e(2, "::ffff:192.168.1.5", GidKind::IbRoceV1),
            e(3, "::ffff:192.168.1.5", GidKind::RoceV2),
            e(4, "2001:db8::5", GidKind::RoceV2),
        ];
        assert_eq!(select_gid(&table, true).map(|e| e.index), Some(3));
        assert_eq!(select_gid(&table[..3], true).map(|e| e.index), Some(1), "v2 link-local beats v1");
        let no_v4: Vec<_> = table.iter().filter(|e| e.index != 3).cloned().collect();
        assert_eq!(select_gid(&no_v4, true).map(|e| e.index), Some(4), "v2 global beats v2 link-local");
        assert_eq!(select_gid(&table[..1], true).map(|e| e.index), Some(0), "v1 as a last resort");
        assert_eq!(select_gid(&table, false).map(|e| e.index), Some(0), "InfiniBand uses the port GID");
        let empty = [GidEntry { index: 0, gid: [0; 16], kind: GidKind::RoceV2 }];
        assert_eq!(select_gid(&empty, true), None, "unused slots are never chosen");
    }

    #[test]
    fn the_gid_of_the_out_of_band_address_is_preferred() {
        // A port with two IPv4 addresses (two VLANs, or a second address on
        // the interface): the peer is reached through the second.
        let e = |index, g: &str, kind| GidEntry { index, gid: gid(g), kind };
        let table = vec![
            e(0, "fe80::1", GidKind::IbRoceV1),
            e(1, "fe80::1", GidKind::RoceV2),
            e(2, "::ffff:10.0.0.5", GidKind::IbRoceV1),
            e(3, "::ffff:10.0.0.5", GidKind::RoceV2),
            e(4, "::ffff:192.168.7.5", GidKind::IbRoceV1),
            e(5, "::ffff:192.168.7.5", GidKind::RoceV2),
            e(6, "2001:db8::5", GidKind::RoceV2),
        ];
        let pick = |ip: &str| select_gid_for(&table, true, Some(ip.parse().expect("ip"))).map(|e| e.index);
        assert_eq!(select_gid(&table, true).map(|e| e.index), Some(3), "without a hint: the first IPv4 RoCE v2 GID");
        assert_eq!(pick("192.168.7.5"), Some(5), "the RoCE v2 GID of the address that reaches the peer");
        assert_eq!(pick("2001:db8::5"), Some(6));
        assert_eq!(pick("172.16.0.1"), Some(3), "an address not in the table: the usual order");
        assert_eq!(pick("127.0.0.1"), Some(3), "loopback says nothing about the RDMA port");
        assert_eq!(pick("0.0.0.0"), Some(3));
        let v1_only: Vec<_> = table.iter().filter(|e| e.kind == GidKind::IbRoceV1).cloned().collect();
        let p = select_gid_for(&v1_only, true, Some("192.168.7.5".parse().expect("ip"))).map(|e| e.index);
        assert_eq!(p, Some(4), "a RoCE v1 GID of that address beats one of another");
        assert_eq!(
            select_gid_for(&table, false, Some("192.168.7.5".parse().expect("ip"))).map(|e| e.index),
            Some(0),
            "InfiniBand: the port GID"
        );
        assert_eq!(GidKind::from_ibv(2), GidKind::RoceV2);
        assert_eq!(GidKind::from_ibv(1), GidKind::IbRoceV1);
        assert_eq!(GidKind::from_ibv(0), GidKind::IbRoceV1);
        assert_eq!(GidKind::from_ibv(9), GidKind::Unknown);
    }
}
