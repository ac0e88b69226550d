//! # perf-policy-sdk
//!
//! The scheduling-policy interface of PeRF-rs, shared by the dataplane
//! (the host) and policies. Everything here is `#![no_std]` plain data:
//! `#[repr(C)]` values in and out, no references into host state, so the
//! same interface can be carried across a WebAssembly sandbox.
//!
//! A policy implements [`Policy`], overriding only the hooks it needs:
//! - [`Policy::on_tenant`] when a tenant and its QPs appear;
//! - [`Policy::on_request`] for every application request (returns the
//!   split plan: chunk size and zero-weight WRs per chunk);
//! - [`Policy::on_tick`] periodically with per-tenant statistics (fills in
//!   the QP-level plan of each tenant: active QP cap, rotation quanta);
//! - [`Policy::on_pacing`] right after each tick (ABI 1.1): a per-tenant
//!   rate limit ([`Pacing`], a token bucket) the dataplane enforces by
//!   holding data WQEs in software;
//! - [`Policy::set_param`] before the first tenant (ABI 1.2): a run-time
//!   parameter, `key=value` as text (`--policy perf:max_active_qps=4`);
//! - [`Policy::request_calls`] (ABI 1.5): which requests need
//!   [`Policy::on_request`] at all; for the others the host applies the
//!   tenant plan's split itself, without a call.
//!
//! The host validates every answer (see [`SplitPlan::validate`],
//! [`TenantPlan::validate`]) and falls back to a safe default, counting
//! what it rejected.
//!
//! ## WebAssembly policies
//!
//! A policy crate compiled for `wasm32-unknown-unknown` exposes its
//! [`Policy`] with one line, [`export_policy!`], which generates every
//! export of the wasm ABI (see [`abi`] and `docs/policy-abi.md`) around a
//! static instance. The host imports a policy may call have safe wrappers
//! in `host` (`now_ns`, `log`; wasm32 only). A minimal policy:
//!
//! ```ignore
//! #![no_std]
//! use perf_policy_sdk::{export_policy, Policy};
//!
//! #[derive(Default)]
//! pub struct Mine;
//! impl Policy for Mine {
//!     fn name(&self) -> &str { "mine" }
//! }
//! export_policy!(Mine);
//! ```
#![no_std]

pub mod abi;
// The guest ABI's statics, shared with the host through linear memory.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[allow(unsafe_code, reason = "the guest side of the wasm ABI: exports and linear-memory access")]
pub mod guest;
// Calls of the host's imports.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code, reason = "calls of the host's imports")]
pub mod host;

/// Version of this interface, `(major, minor)`: a major bump breaks
/// compatibility (layout, signature or meaning changes), a minor bump only
/// adds (new optional exports or imports). See `docs/policy-abi.md`.
pub const ABI_VERSION: (u16, u16) = (1, 9);

/// How a tenant is classified (PeRF's classes).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TenantClass {
    /// Not yet seen enough traffic.
    #[default]
    Unknown = 0,
    /// Large messages (>= 1 KB): wants bandwidth.
    Bandwidth = 1,
    /// Many small messages: wants message rate.
    MessageSensitive = 2,
    /// Sparse small messages: wants latency.
    DelaySensitive = 3,
}

/// A tenant as the policy first sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TenantInfo {
    /// Tenant id (dense, from 0).
    pub tenant: u32,
    /// Number of data QPs the tenant owns.
    pub qps: u32,
    /// Configured weight (1 if none).
    pub weight: u32,
}

/// Operation of a request.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestOp {
    /// RDMA WRITE (with or without immediate).
    #[default]
    Write = 0,
    /// SEND (with or without immediate).
    Send = 1,
    /// RDMA READ.
    Read = 2,
}

/// One application request, as the policy sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// Tenant id.
    pub tenant: u32,
    /// Index of the QP within the tenant.
    pub qp: u32,
    /// Message length in bytes.
    pub len: u64,
    /// Operation.
    pub op: RequestOp,
    /// Requests of this QP held or outstanding, including this one.
    pub depth: u32,
}

/// How one message is dispatched.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitPlan {
    /// Sub-request size in bytes; 0 keeps the message whole.
    pub chunk_bytes: u32,
    /// Zero-weight WRs (WAITs on an always-satisfied CQ) after each chunk.
    pub zero_weight_per_chunk: u32,
}

/// Why the host rejected a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Chunks smaller than the minimum (or not a multiple of 64 B).
    ChunkTooSmall,
    /// Chunks larger than the maximum.
    ChunkTooLarge,
    /// More zero-weight WRs than a send queue could hold.
    TooManyZeroWeight,
    /// An active-QP cap or quantum of zero where that would starve.
    ZeroQuantum,
    /// A pacing record out of bounds (rate, burst or `paused` flag).
    BadPacing,
}

/// Bounds the host enforces on plans.
pub mod limits {
    /// Smallest chunk: 1 KiB.
    pub const MIN_CHUNK: u32 = 1024;
    /// Largest chunk: 1 GiB.
    pub const MAX_CHUNK: u32 = 1 << 30;
    /// Most zero-weight WRs after one chunk.
    pub const MAX_ZERO_WEIGHT: u32 = 256;
    /// Highest pacing rate, bytes/s (1 TB/s; 0 means unlimited).
    pub const MAX_RATE: u64 = 1 << 40;
    /// Smallest token-bucket burst of a paced tenant, bytes.
    pub const MIN_BURST: u64 = 1024;
    /// Largest token-bucket burst, bytes.
    pub const MAX_BURST: u64 = 1 << 40;
    /// What a packet of up to 4 KiB costs the wire beyond its payload:
    /// its RoCEv2 headers (Ethernet, IP, UDP, BTH, ICRC, FCS: 66 B), and
    /// the preamble and inter-frame gap (20 B). A data WQE is charged
    /// against an in-flight window its payload plus this per packet, or
    /// one turn of the NIC's send scheduler at the link's rate (about 112
    /// B at 100 Gb/s), whichever is more.
    pub const PACKET_OVERHEAD_BYTES: u64 = 86;
    /// The RDMA extended transport header (remote address, rkey, length)
    /// that the first packet of a WRITE or a READ request carries beyond
    /// [`PACKET_OVERHEAD_BYTES`]: a WRITE's data WQE is charged it too, so
    /// that a small WRITE is charged what it takes of the wire (a 32 B
    /// WRITE is 134 B there, not 118).
    pub const RETH_BYTES: u64 = 16;
}

impl SplitPlan {
    /// Keep the message whole, no zero-weight WRs.
    pub const WHOLE: SplitPlan = SplitPlan { chunk_bytes: 0, zero_weight_per_chunk: 0 };

    /// Checks the plan against the host's limits.
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.chunk_bytes != 0 && self.chunk_bytes < limits::MIN_CHUNK {
            return Err(Rejection::ChunkTooSmall);
        }
        if self.chunk_bytes > limits::MAX_CHUNK {
            return Err(Rejection::ChunkTooLarge);
        }
        if self.zero_weight_per_chunk > limits::MAX_ZERO_WEIGHT {
            return Err(Rejection::TooManyZeroWeight);
        }
        Ok(())
    }
}

/// Per-tenant statistics the host hands to [`Policy::on_tick`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TenantStats {
    /// Tenant id.
    pub tenant: u32,
    /// Data QPs owned.
    pub qps: u32,
    /// QPs with requests held or outstanding.
    pub backlogged_qps: u32,
    /// Largest per-QP depth (held + outstanding requests) seen this tick.
    pub max_depth: u32,
    /// EWMA (weight 0.5) of request sizes, in bytes.
    pub ewma_msg_bytes: f64,
    /// Largest request this tick, in bytes.
    pub max_msg_bytes: u64,
    /// Requests completed this tick.
    pub completed: u64,
    /// Payload bytes completed this tick.
    pub bytes: u64,
    /// Mean completion latency this tick, in ns (0 if none).
    pub mean_latency_ns: u64,
    /// Configured weight.
    pub weight: u32,
    /// The 99th percentile of this tick's completion latencies, in ns
    /// (estimated from a log-linear histogram: within 1/16 of the value;
    /// saturating at `u32::MAX`; 0 if none). ABI 1.2: these bytes were
    /// padding before, so a 1.1 module never reads them.
    pub p99_latency_ns: u32,
}

/// The QP-level plan of one tenant, filled in by [`Policy::on_tick`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantPlan {
    /// Most QPs of the tenant allowed to have work in the NIC at once
    /// (0 = no cap). The others' requests are held in software.
    pub max_active_qps: u32,
    /// Rotate an active QP out after this many requests (0 = never).
    pub quantum_requests: u32,
    /// ... or after this many bytes (0 = never).
    pub quantum_bytes: u64,
    /// ... or after this long active, in ns (0 = never).
    pub quantum_ns: u64,
    /// The split plan for this tenant's messages of at least
    /// `split_threshold` bytes.
    pub split: SplitPlan,
    /// Messages at least this large are split (0 = never split).
    pub split_threshold: u64,
    /// The class the policy assigned (reported, not enforced).
    pub class: TenantClass,
    /// In-flight window for WRITE and SEND data (ABI 1.3), KiB; 0 = none.
    /// A tenant with a window in either direction posts its data through
    /// the dataplane's fair admission: the payload bytes (plus
    /// [`limits::PACKET_OVERHEAD_BYTES`] per packet, at least a NIC scheduler turn) of the data WQEs that all
    /// such tenants have posted and not completed stay below the largest
    /// of their windows, a WQE being posted while the total is below it
    /// (so it may go over by one WQE), and the room completions free goes
    /// to the tenants in weighted deficit round robin. A tenant with
    /// nothing in flight in a direction may always post one WQE there.
    /// More is held in software, in order. The dataplane never lets the
    /// budget fall below the bandwidth-delay product of the NIC's pipeline
    /// it measured (0.95 of what keeps the link busy), so a window smaller
    /// than that shortens nothing further and does not idle the link.
    /// These bytes were padding before, so a 1.2 module leaves them 0.
    pub window_kib: u16,
    /// The same for READs (ABI 1.3), KiB: the bytes of READ responses
    /// requested and not yet completed (the responder's wire, which the
    /// requester does not schedule). 0 = none.
    pub read_window_kib: u16,
}

impl TenantStats {
    /// All zero (a `const` [`Default`]).
    pub const ZERO: TenantStats = TenantStats {
        tenant: 0,
        qps: 0,
        backlogged_qps: 0,
        max_depth: 0,
        ewma_msg_bytes: 0.0,
        max_msg_bytes: 0,
        completed: 0,
        bytes: 0,
        mean_latency_ns: 0,
        weight: 0,
        p99_latency_ns: 0,
    };
}

impl TenantClass {
    /// The class with wire value `v`, if there is one.
    pub const fn from_u32(v: u32) -> Option<TenantClass> {
        Some(match v {
            0 => TenantClass::Unknown,
            1 => TenantClass::Bandwidth,
            2 => TenantClass::MessageSensitive,
            3 => TenantClass::DelaySensitive,
            _ => return None,
        })
    }
}

impl RequestOp {
    /// The operation with wire value `v`, if there is one.
    pub const fn from_u32(v: u32) -> Option<RequestOp> {
        Some(match v {
            0 => RequestOp::Write,
            1 => RequestOp::Send,
            2 => RequestOp::Read,
            _ => return None,
        })
    }
}

impl TenantPlan {
    /// No isolation: no cap, no split.
    pub const PASSTHROUGH: TenantPlan = TenantPlan {
        max_active_qps: 0,
        quantum_requests: 0,
        quantum_bytes: 0,
        quantum_ns: 0,
        split: SplitPlan::WHOLE,
        split_threshold: 0,
        class: TenantClass::Unknown,
        window_kib: 0,
        read_window_kib: 0,
    };

    /// Whether the tenant has an in-flight window (ABI 1.3) in either
    /// direction, and so posts its data through fair admission.
    pub const fn windowed(&self) -> bool {
        self.window_kib > 0 || self.read_window_kib > 0
    }

    /// Checks the plan against the host's limits.
    pub fn validate(&self) -> Result<(), Rejection> {
        self.split.validate()?;
        if self.max_active_qps > 0 && self.quantum_requests == 0 && self.quantum_bytes == 0 && self.quantum_ns == 0 {
            return Err(Rejection::ZeroQuantum);
        }
        Ok(())
    }
}

impl Default for TenantPlan {
    fn default() -> Self {
        Self::PASSTHROUGH
    }
}

/// The dataplane loop as a policy sees it before each tick (ABI 1.7,
/// [`Policy::on_loop`]): how busy the loop's one core was and what its
/// work costs, so that a policy can size what it asks of the loop (every
/// chunk and zero-weight WR is a WQE the loop posts) to the time the loop
/// has. Zero where unknown: a loop whose cost is not modelled (a free
/// virtual-time loop, `--loop-cost zero`) reads 0 busy and 0 per WQE.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoopInfo {
    /// The share of the last tick interval the loop spent working, per
    /// mille (`0..=1000`).
    pub busy_permille: u32,
    /// What posting one WQE costs the loop, ps.
    pub wqe_ps: u32,
    /// What polling one CQE costs the loop, ps.
    pub cqe_ps: u32,
    /// The link's rate, Gb/s (0 if unknown).
    pub link_gbps: u32,
}

impl LoopInfo {
    /// Nothing known: a free loop on an unknown link.
    pub const UNKNOWN: LoopInfo = LoopInfo { busy_permille: 0, wqe_ps: 0, cqe_ps: 0, link_gbps: 0 };
}

/// A tenant's rate limit (ABI 1.1): a token bucket the dataplane applies
/// to the tenant's data WQEs (chunks and whole messages; zero-weight and
/// control WQEs are free). A WQE is posted when the bucket is not in debt
/// and its bytes are then taken, so the bucket may go into debt by one
/// WQE; the debt is paid back at `rate_bytes_per_s` before the next post.
/// Work held back stays in software, in order.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pacing {
    /// Refill rate in payload bytes per second; 0 = unlimited (no bucket).
    pub rate_bytes_per_s: u64,
    /// Bucket depth in bytes (the most that may go out at once after an
    /// idle period); ignored when the rate is 0.
    pub burst_bytes: u64,
    /// 1 = hold every data WQE of the tenant (time-slicing); 0 = run.
    pub paused: u32,
}

impl Pacing {
    /// No limit (the state of every tenant until a policy says otherwise).
    pub const UNLIMITED: Pacing = Pacing { rate_bytes_per_s: 0, burst_bytes: 0, paused: 0 };

    /// A token bucket of `rate_bytes_per_s` with `burst_bytes`.
    pub const fn rate(rate_bytes_per_s: u64, burst_bytes: u64) -> Pacing {
        Pacing { rate_bytes_per_s, burst_bytes, paused: 0 }
    }

    /// Checks the record against the host's limits.
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.paused > 1 || self.rate_bytes_per_s > limits::MAX_RATE {
            return Err(Rejection::BadPacing);
        }
        if self.rate_bytes_per_s > 0 && !(limits::MIN_BURST..=limits::MAX_BURST).contains(&self.burst_bytes) {
            return Err(Rejection::BadPacing);
        }
        Ok(())
    }
}

/// Why a policy refused a parameter ([`Policy::set_param`], ABI 1.2); the
/// wire value is what `perf_set_param` returns.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamError {
    /// The policy has no parameter of that name.
    UnknownKey = 1,
    /// The value does not parse, or is out of the parameter's range.
    BadValue = 2,
    /// The key or value is not UTF-8, or longer than the params buffer.
    Malformed = 3,
}

impl ParamError {
    /// The answer of wire value `v`: `None` for 0 (accepted), and any
    /// value other than 1 and 2 is [`ParamError::Malformed`].
    pub const fn from_u32(v: u32) -> Option<ParamError> {
        match v {
            0 => None,
            1 => Some(ParamError::UnknownKey),
            2 => Some(ParamError::BadValue),
            _ => Some(ParamError::Malformed),
        }
    }
}

/// Parses a parameter value: `T`'s `FromStr` on the trimmed text, with
/// `_` separators allowed in numbers (`1_000_000`);
/// [`ParamError::BadValue`] if it does not parse.
pub fn parse_param<T: core::str::FromStr>(value: &str) -> Result<T, ParamError> {
    let mut buf = [0u8; 64];
    let mut n = 0;
    for b in value.trim().bytes().filter(|&b| b != b'_') {
        *buf.get_mut(n).ok_or(ParamError::BadValue)? = b;
        n += 1;
    }
    core::str::from_utf8(&buf[..n]).ok().and_then(|v| v.parse().ok()).ok_or(ParamError::BadValue)
}

/// Parses a parameter value of at least `min` (see [`parse_param`]).
pub fn parse_param_min<T: core::str::FromStr + PartialOrd>(value: &str, min: T) -> Result<T, ParamError> {
    parse_param(value).and_then(|v| if v >= min { Ok(v) } else { Err(ParamError::BadValue) })
}

/// Which WQE a zero-weight WR is (ABI 1.6; [`Policy::zero_weight_op`]).
/// Both carry no payload and take a turn of the NIC's send scheduler,
/// which is what a zero-weight WR is for; they differ in what the NIC may
/// do past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroWeightOp {
    /// A WAIT on an always-satisfied CQ (count 0), as PeRF posts it
    /// (`IBV_EXP_WR_CQE_WAIT`): the default, and every module before ABI
    /// 1.6. The NIC processes nothing of the QP past a WAIT before the
    /// WAIT executes, so the next chunk's WQE fetch and payload DMA wait
    /// for the WAIT's turn.
    #[default]
    Wait,
    /// A NOP (`IBV_EXP_WR_NOP` in MLNX_OFED's experimental verbs, the
    /// same release as the cross-channel WAIT; mlx5's `MLX5_OPCODE_NOP`):
    /// it waits on nothing, so the NIC processes and fetches the next
    /// chunk while the NOP waits for its turn.
    Nop,
}

impl ZeroWeightOp {
    /// The wire value (the control block's `zero_weight_op`, ABI 1.6).
    pub const fn to_word(self) -> u32 {
        match self {
            ZeroWeightOp::Wait => 0,
            ZeroWeightOp::Nop => 1,
        }
    }

    /// The op of wire value `w`, if it is one.
    pub const fn from_word(w: u32) -> Option<ZeroWeightOp> {
        match w {
            0 => Some(ZeroWeightOp::Wait),
            1 => Some(ZeroWeightOp::Nop),
            _ => None,
        }
    }
}

/// Which requests the host calls [`Policy::on_request`] for (ABI 1.5;
/// [`Policy::request_calls`]). For the others the host answers itself
/// from the tenant's plan, by the plan rule ([`RequestCalls::answer`]): a
/// message of at least `split_threshold` bytes (a threshold of 0 never
/// splits) is split by the plan's `split`, anything else goes whole. The
/// answer is the same as the call's only if the policy's `on_request`
/// follows that rule for those requests, and changes no state there: a
/// policy declares what holds of its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestCalls {
    /// Every request is a call (the default, and every module before ABI
    /// 1.5): for a policy whose `on_request` keeps state or decides beyond
    /// the plan.
    #[default]
    Every,
    /// No request is a call: the split is always the plan rule's (the
    /// default `on_request`, with `sends: false`).
    Plan {
        /// Whether a SEND is split like a WRITE (ABI 1.4: by rendezvous);
        /// `false` keeps every SEND whole.
        sends: bool,
    },
    /// The plan rule, except for the messages the plan splits that are
    /// shorter than its chunk while the plan has zero-weight WRs: those
    /// are calls (PeRF's zero-weight carry: a short message earns its
    /// bytes' worth of zero-weight WRs, the rest carried to the tenant's
    /// next).
    PlanExceptShort {
        /// As in [`RequestCalls::Plan`].
        sends: bool,
    },
    /// The plan rule, and PeRF's zero-weight carry applied by the host
    /// (ABI 1.8): a message the plan splits that is shorter than its
    /// chunk while the plan has zero-weight WRs gets one zero-weight WR
    /// per `unit_bytes` of its payload plus the tenant's carry (at most
    /// the plan's count), and what is left under a unit becomes the
    /// tenant's carry. The host keeps the carry, one per tenant, from 0;
    /// no request is a call.
    PlanWithCarry {
        /// As in [`RequestCalls::Plan`].
        sends: bool,
        /// The payload one zero-weight WR stands for, in bytes
        /// (`1..=`[`RequestCalls::MAX_UNIT_BYTES`]).
        unit_bytes: u32,
    },
}

impl RequestCalls {
    /// Wire bit: the host may answer from the plan.
    const PLAN: u32 = 1;
    /// Wire bit: SENDs are split like WRITEs.
    const SENDS: u32 = 2;
    /// Wire bit: short messages with zero-weight WRs are calls.
    const SHORT: u32 = 4;
    /// Wire bit (ABI 1.8): the host applies the zero-weight carry; the
    /// unit is the word's bits 8-31.
    const CARRY: u32 = 8;
    /// Where the carry's unit starts in the wire value.
    const UNIT_SHIFT: u32 = 8;
    /// The largest unit [`RequestCalls::PlanWithCarry`] can declare.
    pub const MAX_UNIT_BYTES: u32 = u32::MAX >> Self::UNIT_SHIFT;

    /// The answer for `req` under its tenant's `plan` without a call, or
    /// `None` if the request is a call. `carry` is the tenant's zero-weight
    /// carry, which [`RequestCalls::PlanWithCarry`] reads and updates
    /// (the others leave it).
    pub fn answer(&self, req: &RequestInfo, plan: &TenantPlan, carry: &mut u64) -> Option<SplitPlan> {
        let (sends, short, unit) = match *self {
            RequestCalls::Every => return None,
            RequestCalls::Plan { sends } => (sends, false, None),
            RequestCalls::PlanExceptShort { sends } => (sends, true, None),
            RequestCalls::PlanWithCarry { sends, unit_bytes } => (sends, true, Some(unit_bytes.max(1) as u64)),
        };
        if plan.split_threshold == 0 || req.len < plan.split_threshold || (req.op == RequestOp::Send && !sends) {
            return Some(SplitPlan::WHOLE);
        }
        if short && plan.split.zero_weight_per_chunk > 0 && req.len < plan.split.chunk_bytes as u64 {
            let unit = unit?;
            let bytes = carry.saturating_add(req.len);
            *carry = bytes % unit;
            let zero_weight = (bytes / unit).min(plan.split.zero_weight_per_chunk as u64) as u32;
            return Some(SplitPlan { zero_weight_per_chunk: zero_weight, ..plan.split });
        }
        Some(plan.split)
    }

    /// The wire value (the control block's `request_calls`, ABI 1.5):
    /// 0 for [`RequestCalls::Every`], else bit 0 (plan) with bit 1 (SENDs
    /// split) and bit 2 (short messages are calls), or bit 3 (ABI 1.8: the
    /// host applies the carry) with the unit in bits 8-31. A unit of 0 is
    /// sent as 1; one over [`RequestCalls::MAX_UNIT_BYTES`] cannot be sent,
    /// and its declaration goes as [`RequestCalls::PlanExceptShort`]
    /// (those messages are calls).
    pub const fn to_word(self) -> u32 {
        match self {
            RequestCalls::Every => 0,
            RequestCalls::Plan { sends } => Self::PLAN | if sends { Self::SENDS } else { 0 },
            RequestCalls::PlanExceptShort { sends } => Self::PLAN | Self::SHORT | if sends { Self::SENDS } else { 0 },
            RequestCalls::PlanWithCarry { sends, unit_bytes } => {
                if unit_bytes > Self::MAX_UNIT_BYTES {
                    return RequestCalls::PlanExceptShort { sends }.to_word();
                }
                let unit = if unit_bytes == 0 { 1 } else { unit_bytes };
                Self::PLAN | Self::CARRY | (unit << Self::UNIT_SHIFT) | if sends { Self::SENDS } else { 0 }
            }
        }
    }

    /// The declaration of wire value `w`, if it is one (not: any other
    /// bit, bits 1-3 without bit 0, bits 2 and 3 together, bit 3 with a
    /// unit of 0, or a unit without bit 3).
    pub const fn from_word(w: u32) -> Option<RequestCalls> {
        let sends = w & Self::SENDS != 0;
        let unit_bytes = w >> Self::UNIT_SHIFT;
        let flags = w & ((1 << Self::UNIT_SHIFT) - 1);
        let carry = flags & Self::CARRY != 0;
        Some(match flags {
            0 if unit_bytes == 0 => RequestCalls::Every,
            _ if flags & !(Self::PLAN | Self::SENDS | Self::SHORT | Self::CARRY) != 0 || flags & Self::PLAN == 0 => {
                return None
            }
            _ if carry != (unit_bytes != 0) || (carry && flags & Self::SHORT != 0) => return None,
            _ if carry => RequestCalls::PlanWithCarry { sends, unit_bytes },
            _ if flags & Self::SHORT != 0 => RequestCalls::PlanExceptShort { sends },
            _ => RequestCalls::Plan { sends },
        })
    }
}

/// A scheduling policy. Every hook has a default, so a policy overrides
/// only what it needs.
pub trait Policy {
    /// A short name (`perf`, `passthrough`, ...).
    fn name(&self) -> &str;

    /// A tenant appeared.
    fn on_tenant(&mut self, _tenant: &TenantInfo) {}

    /// A request arrived; `plan` is the tenant's current plan. Returns how
    /// to dispatch it. A plan with a chunk on a SEND (ABI 1.4) moves it by
    /// rendezvous with the receiver's dataplane where the receiver
    /// advertised the RECV, and whole otherwise; with ABI 1.3 and before a
    /// SEND always went whole. Default: split as the tenant plan says, and
    /// SENDs whole.
    fn on_request(&mut self, req: &RequestInfo, plan: &TenantPlan) -> SplitPlan {
        if req.op != RequestOp::Send && plan.split_threshold > 0 && req.len >= plan.split_threshold {
            plan.split
        } else {
            SplitPlan::WHOLE
        }
    }

    /// Periodic work: `stats[i]` describes tenant `i`; write tenant `i`'s
    /// plan into `plans[i]`. Default: leave the plans as they are.
    fn on_tick(&mut self, _now_ns: u64, _stats: &[TenantStats], _plans: &mut [TenantPlan]) {}

    /// [`Policy::on_tick`], told what changed since the last tick (ABI
    /// 1.9): `changed` lists, in increasing order, every tenant `i` whose
    /// `stats[i]` differs from the record the last tick passed, whose
    /// `plans[i]` differs from what the policy left there (the host
    /// replaced it: a new or removed tenant, an invalid plan), or that the
    /// last tick did not have; at the first tick, every tenant. A list
    /// that names more tenants than changed is always correct. A policy
    /// whose decisions follow from its own state and these inputs may
    /// then work only on the tenants listed, leaving `plans` exactly as
    /// [`Policy::on_tick`] would have: the host's work per tick follows
    /// what changed, and so can the policy's. Default: `on_tick`.
    fn on_tick_changed(&mut self, now_ns: u64, stats: &[TenantStats], changed: &[u32], plans: &mut [TenantPlan]) {
        let _ = changed;
        self.on_tick(now_ns, stats, plans)
    }

    /// Whether [`Policy::on_tick_changed`] uses its changed list. A native
    /// policy that says so is given the list the host makes by comparing
    /// every record and plan with the last tick's (a few ns per tenant);
    /// one that does not is called [`Policy::on_tick`], and the host spares
    /// that work. A wasm module is always given the list, which the host's
    /// resident tables (ABI 1.5) make anyway. Default: `false`.
    fn tick_changes(&self) -> bool {
        false
    }

    /// Right before each [`Policy::on_tick`]: the loop's load over the
    /// last tick interval and its costs (ABI 1.7; a module before it is
    /// never called). Default: ignore it.
    fn on_loop(&mut self, _info: &LoopInfo) {}

    /// Right after each [`Policy::on_tick`] (same `now_ns`): write tenant
    /// `i`'s rate limit into `pacing[i]`, which holds the current one.
    /// Default: leave it (every tenant starts [`Pacing::UNLIMITED`]).
    /// In a wasm module this needs ABI 1.1 (the `perf_pacing_ptr` export,
    /// which `export_policy!` generates); a 1.0 module is never paced.
    fn on_pacing(&mut self, _now_ns: u64, _pacing: &mut [Pacing]) {}

    /// How often the host calls [`Policy::on_tick`], in ns.
    fn tick_interval_ns(&self) -> u64 {
        1_000_000
    }

    /// Sets the run-time parameter `key` to `value` (text, parsed by the
    /// policy: [`parse_param`]). The host calls it after creating the
    /// policy and before the first [`Policy::on_tenant`], once per
    /// parameter the user gave, in order. Default: no parameters (every
    /// key is [`ParamError::UnknownKey`]). In a wasm module this needs
    /// ABI 1.2 (the `perf_params_ptr` and `perf_set_param` exports, which
    /// `export_policy!` generates).
    fn set_param(&mut self, _key: &str, _value: &str) -> Result<(), ParamError> {
        Err(ParamError::UnknownKey)
    }

    /// Which requests need [`Policy::on_request`] (ABI 1.5); the host
    /// answers the others from the tenant plan without a call
    /// ([`RequestCalls::answer`]), which takes the per-message hook off a
    /// wasm module's per-message path. Default: [`RequestCalls::Every`]
    /// (a policy that overrides `on_request` keeps being called for every
    /// request unless it says otherwise). A policy that keeps the default
    /// `on_request` may return `RequestCalls::Plan { sends: false }`. The
    /// host asks after creating the policy, after each parameter and after
    /// each tick; it must hold for the policy's `on_request` from then on.
    fn request_calls(&self) -> RequestCalls {
        RequestCalls::Every
    }

    /// Which WQE the host posts as this policy's zero-weight WRs (ABI 1.6;
    /// a module before it gets [`ZeroWeightOp::Wait`]). Read at the same
    /// times as [`Policy::request_calls`]. Default: [`ZeroWeightOp::Wait`].
    fn zero_weight_op(&self) -> ZeroWeightOp {
        ZeroWeightOp::Wait
    }
}

/// Exports a [`Policy`] type as a wasm policy module: generates, for
/// `wasm32` builds only, every export of the ABI (`perf_abi_version`,
/// `perf_init`, `perf_on_tenant`, `perf_on_request`, `perf_on_tick`,
/// `perf_tick_interval_ns`, the buffer and name getters, the optional
/// `perf_pacing_ptr` of ABI 1.1, `perf_params_ptr` / `perf_set_param`
/// of ABI 1.2, `perf_control_ptr` of ABI 1.5 and `perf_loop_ptr` of ABI
/// 1.7; see [`abi`])
/// around one static instance, and a panic handler that traps (so the
/// policy crate must be `#![no_std]`). On other targets it expands to
/// nothing, so the same crate also builds as a native library.
///
/// `export_policy!(Type)` creates the instance with `Type::default()`;
/// `export_policy!(Type, path::to::constructor)` with a `fn() -> Type`.
#[macro_export]
macro_rules! export_policy {
    ($ty:ty) => {
        $crate::export_policy!($ty, <$ty as ::core::default::Default>::default);
    };
    ($ty:ty, $init:expr) => {
        // The exports are `#[no_mangle]`, which `unsafe_code` counts as unsafe.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code, reason = "the exports are #[no_mangle], which unsafe_code counts as unsafe")]
        const _: () = {
            use $crate::guest as g;
            static POLICY: g::PolicyCell<$ty> = g::PolicyCell::new();
            const INIT: fn() -> $ty = $init;

            #[no_mangle]
            extern "C" fn perf_abi_version() -> i32 {
                g::abi_version()
            }
            #[no_mangle]
            extern "C" fn perf_init() -> i32 {
                g::init(&POLICY, INIT)
            }
            #[no_mangle]
            extern "C" fn perf_on_tenant(tenant: i32, qps: i32, weight: i32) {
                g::on_tenant(&POLICY, INIT, tenant, qps, weight)
            }
            #[no_mangle]
            extern "C" fn perf_on_request() -> i64 {
                g::on_request(&POLICY, INIT)
            }
            #[no_mangle]
            extern "C" fn perf_on_tick(now_ns: i64, n: i32) -> i32 {
                g::on_tick(&POLICY, INIT, now_ns, n)
            }
            #[no_mangle]
            extern "C" fn perf_tick_interval_ns() -> i64 {
                g::tick_interval_ns(&POLICY, INIT)
            }
            #[no_mangle]
            extern "C" fn perf_stats_ptr() -> i32 {
                g::stats_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_plans_ptr() -> i32 {
                g::plans_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_request_ptr() -> i32 {
                g::request_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_pacing_ptr() -> i32 {
                g::pacing_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_params_ptr() -> i32 {
                g::params_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_set_param(key_len: i32, value_len: i32) -> i32 {
                g::set_param(&POLICY, INIT, key_len, value_len)
            }
            #[no_mangle]
            extern "C" fn perf_control_ptr() -> i32 {
                g::control_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_loop_ptr() -> i32 {
                g::loop_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_changed_ptr() -> i32 {
                g::changed_ptr()
            }
            #[no_mangle]
            extern "C" fn perf_max_tenants() -> i32 {
                g::max_tenants()
            }
            #[no_mangle]
            extern "C" fn perf_name_ptr() -> i32 {
                g::name_ptr(&POLICY, INIT)
            }
            #[no_mangle]
            extern "C" fn perf_name_len() -> i32 {
                g::name_len(&POLICY, INIT)
            }
            #[panic_handler]
            fn panic(_: &::core::panic::PanicInfo) -> ! {
                ::core::arch::wasm32::unreachable()
            }
        };
    };
}
