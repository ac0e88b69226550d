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
//!   the QP-level plan of each tenant: active QP cap, rotation quanta).
//!
//! The host validates every answer (see [`SplitPlan::validate`],
//! [`TenantPlan::validate`]) and falls back to a safe default, counting
//! what it rejected.
#![no_std]

/// Version of this interface: major bumps break compatibility.
pub const ABI_VERSION: (u16, u16) = (0, 1);

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
}

/// Bounds the host enforces on plans.
pub mod limits {
    /// Smallest chunk: 1 KiB.
    pub const MIN_CHUNK: u32 = 1024;
    /// Largest chunk: 1 GiB.
    pub const MAX_CHUNK: u32 = 1 << 30;
    /// Most zero-weight WRs after one chunk.
    pub const MAX_ZERO_WEIGHT: u32 = 256;
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
    };

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

/// A scheduling policy. Every hook has a default, so a policy overrides
/// only what it needs.
pub trait Policy {
    /// A short name (`perf`, `passthrough`, ...).
    fn name(&self) -> &str;

    /// A tenant appeared.
    fn on_tenant(&mut self, _tenant: &TenantInfo) {}

    /// A request arrived; `plan` is the tenant's current plan. Returns how
    /// to dispatch it. Default: split as the tenant plan says.
    fn on_request(&mut self, req: &RequestInfo, plan: &TenantPlan) -> SplitPlan {
        if plan.split_threshold > 0 && req.len >= plan.split_threshold {
            plan.split
        } else {
            SplitPlan::WHOLE
        }
    }

    /// Periodic work: `stats[i]` describes tenant `i`; write tenant `i`'s
    /// plan into `plans[i]`. Default: leave the plans as they are.
    fn on_tick(&mut self, _now_ns: u64, _stats: &[TenantStats], _plans: &mut [TenantPlan]) {}

    /// How often the host calls [`Policy::on_tick`], in ns.
    fn tick_interval_ns(&self) -> u64 {
        1_000_000
    }
}
