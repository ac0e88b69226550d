//! The wasm ABI between the dataplane (host) and a policy module (guest),
//! shared by both sides: export and import names, the fixed byte layout
//! of the records that cross the sandbox, and their little-endian
//! encoding. `docs/policy-abi.md` is the prose version of this module.
//!
//! Records cross through buffers in the guest's linear memory (like eBPF
//! maps), located once by the host through the `perf_*_ptr` exports:
//! - the **stats buffer**: [`MAX_TENANTS`] x [`TenantStats`] records of
//!   [`STATS_SIZE`] bytes; the host writes the first `n` before
//!   `perf_on_tick(now_ns, n)`;
//! - the **plans buffer**: [`MAX_TENANTS`] x [`TenantPlan`] records of
//!   [`PLAN_SIZE`] bytes; the host writes the current plans before
//!   `perf_on_tick` and reads the first `n` back after it;
//! - the **request slot**: one [`RequestInfo`] ([`REQUEST_SIZE`] bytes)
//!   followed by the tenant's [`TenantPlan`] at [`REQUEST_PLAN_OFFSET`],
//!   written before each `perf_on_request()`;
//! - the **pacing buffer** (ABI 1.1, optional export [`PACING_EXPORT`]):
//!   [`MAX_TENANTS`] x [`Pacing`] records of [`PACING_SIZE`] bytes, owned
//!   by the guest (`perf_on_tick` updates them after the plans); the host
//!   reads the first `n` back after each `perf_on_tick`;
//! - the **params buffer** (ABI 1.2, optional exports [`PARAMS_PTR_EXPORT`]
//!   and [`SET_PARAM_EXPORT`]): [`PARAMS_SIZE`] bytes; for each run-time
//!   parameter the host writes the key's UTF-8 bytes then the value's and
//!   calls `perf_set_param(key_len, value_len)`, after `perf_init` and
//!   before the first `perf_on_tenant`;
//! - the **control block** (ABI 1.5, optional export [`CONTROL_EXPORT`]):
//!   one [`Control`] ([`CONTROL_SIZE`] bytes), owned by the guest, which
//!   the SDK's glue rewrites after `perf_init`, each `perf_set_param` and
//!   each `perf_on_tick`: the tick interval, the module's
//!   [`RequestCalls`] declaration and (ABI 1.6, zero before) the
//!   [`ZeroWeightOp`] its zero-weight WRs are. The host reads it after
//!   those calls instead of calling `perf_tick_interval_ns`;
//! - the **loop block** (ABI 1.7, optional export [`LOOP_EXPORT`]): one
//!   [`LoopInfo`] ([`LOOP_SIZE`] bytes) that the host writes before each
//!   `perf_on_tick` and the glue hands to `Policy::on_loop`.
//!
//! **Resident tables (ABI 1.5).** For a module of ABI 1.5 or later the
//! stats and plans buffers are resident: the host rewrites only the
//! records that changed since it last wrote them (a stats record that
//! differs from the one it last wrote, a plan that differs from the one it
//! last wrote or read back), and after `perf_on_tick` decodes only the
//! plan and pacing records whose bytes differ from those it last read.
//! The stats buffer is the host's: a module must not write it (one that
//! does sees its own writes until the host next rewrites the record).
//! Before 1.5 every call carries every record, as it always did.
//!
//! The layouts are those of the `#[repr(C)]` types on wasm32 (checked at
//! compile time below, on every target), so the guest reads them in place.

use crate::{
    LoopInfo, Pacing, RequestCalls, RequestInfo, RequestOp, SplitPlan, TenantClass, TenantPlan, TenantStats,
    ZeroWeightOp,
};
use core::mem::{align_of, offset_of, size_of};

/// Most tenants one `perf_on_tick` call carries: the buffers hold this many
/// records (64 B + 48 B each: 448 KiB of guest memory). A host with more
/// tenants cannot run a wasm policy.
pub const MAX_TENANTS: usize = 4096;

/// Size in bytes of one [`TenantStats`] record.
pub const STATS_SIZE: usize = 64;
/// Size in bytes of one [`TenantPlan`] record.
pub const PLAN_SIZE: usize = 48;
/// Size in bytes of one [`Pacing`] record.
pub const PACING_SIZE: usize = 24;
/// The optional export (ABI 1.1) `perf_pacing_ptr() -> i32`: the address of
/// the pacing buffer. A module without it is never paced.
pub const PACING_EXPORT: &str = "perf_pacing_ptr";
/// The ABI minor version that introduced [`PACING_EXPORT`].
pub const PACING_MINOR: u16 = 1;
/// The optional export (ABI 1.2) `perf_params_ptr() -> i32`: the address
/// of the params buffer.
pub const PARAMS_PTR_EXPORT: &str = "perf_params_ptr";
/// The optional export (ABI 1.2) `perf_set_param(key_len: i32, value_len:
/// i32) -> i32`: sets the parameter in the params buffer; returns 0, or a
/// [`ParamError`](crate::ParamError) wire value. A module without it takes
/// no parameters.
pub const SET_PARAM_EXPORT: &str = "perf_set_param";
/// Size in bytes of the params buffer: the most a key and its value take
/// together.
pub const PARAMS_SIZE: usize = 256;
/// The ABI minor version that introduced [`SET_PARAM_EXPORT`].
pub const PARAMS_MINOR: u16 = 2;
/// The ABI minor version from which the stats and plans buffers are
/// resident (see the module documentation).
pub const RESIDENT_MINOR: u16 = 5;
/// The optional export (ABI 1.5) `perf_control_ptr() -> i32`: the address
/// of the control block ([`Control`]). Without it the host calls
/// `perf_tick_interval_ns` after each tick, and calls `perf_on_request`
/// for every request.
pub const CONTROL_EXPORT: &str = "perf_control_ptr";
/// Size in bytes of the control block.
pub const CONTROL_SIZE: usize = 16;
/// The ABI minor version that introduced [`CONTROL_EXPORT`].
pub const CONTROL_MINOR: u16 = 5;
/// The ABI minor version from which the control block's last word is
/// [`Control::zero_weight_op`] (it was reserved before).
pub const ZERO_WEIGHT_OP_MINOR: u16 = 6;
/// The ABI minor version from which a module may declare
/// [`RequestCalls::PlanWithCarry`] (before, its wire bit was refused).
pub const CARRY_MINOR: u16 = 8;
/// The optional export (ABI 1.7) `perf_loop_ptr() -> i32`: the address of
/// the loop block, one [`LoopInfo`] the host writes before each
/// `perf_on_tick` (the glue hands it to `Policy::on_loop`). A module
/// without it is told nothing of the loop.
pub const LOOP_EXPORT: &str = "perf_loop_ptr";
/// Size in bytes of the loop block.
pub const LOOP_SIZE: usize = 16;
/// The ABI minor version that introduced [`LOOP_EXPORT`].
pub const LOOP_MINOR: u16 = 7;
/// The optional export (ABI 1.9) `perf_changed_ptr() -> i32`: the address
/// of the changed list, which the host writes before each `perf_on_tick`:
/// a `u32` count, then that many `u32` tenant indices in increasing order
/// (the tenants `Policy::on_tick_changed` is told changed); a count of
/// [`CHANGED_ALL`] (or above `n`) means every tenant. A module without it
/// gets `Policy::on_tick`.
pub const CHANGED_EXPORT: &str = "perf_changed_ptr";
/// Size in bytes of the changed list: the count and an index per tenant.
pub const CHANGED_SIZE: usize = 4 * (1 + MAX_TENANTS);
/// The changed list's count that means every tenant.
pub const CHANGED_ALL: u32 = u32::MAX;
/// The ABI minor version that introduced [`CHANGED_EXPORT`].
pub const CHANGED_MINOR: u16 = 9;
/// Size in bytes of one [`RequestInfo`] record.
pub const REQUEST_SIZE: usize = 24;
/// Offset of the tenant plan inside the request slot.
pub const REQUEST_PLAN_OFFSET: usize = 24;
/// Size in bytes of the request slot.
pub const REQUEST_SLOT_SIZE: usize = REQUEST_PLAN_OFFSET + PLAN_SIZE;
/// Alignment the host requires of every buffer pointer.
pub const BUFFER_ALIGN: usize = 8;
/// Longest policy name the host accepts, in bytes (UTF-8).
pub const MAX_NAME_LEN: usize = 64;

/// The module the host's imports live in.
pub const IMPORT_MODULE: &str = "perf";
/// Import `now_ns() -> i64`: the host's current time, in ns.
pub const IMPORT_NOW_NS: &str = "now_ns";
/// Import `log(ptr: i32, len: i32)`: a UTF-8 message for the host's log.
pub const IMPORT_LOG: &str = "log";

/// The exports every module must have, with their wasm signature written
/// as `(params) -> results` over `i32`/`i64`.
pub const REQUIRED_EXPORTS: &[(&str, &[ValType], &[ValType])] = &[
    ("perf_abi_version", &[], &[ValType::I32]),
    ("perf_init", &[], &[ValType::I32]),
    ("perf_on_tenant", &[ValType::I32, ValType::I32, ValType::I32], &[]),
    ("perf_on_request", &[], &[ValType::I64]),
    ("perf_on_tick", &[ValType::I64, ValType::I32], &[ValType::I32]),
    ("perf_tick_interval_ns", &[], &[ValType::I64]),
    ("perf_stats_ptr", &[], &[ValType::I32]),
    ("perf_plans_ptr", &[], &[ValType::I32]),
    ("perf_request_ptr", &[], &[ValType::I32]),
    ("perf_max_tenants", &[], &[ValType::I32]),
    ("perf_name_ptr", &[], &[ValType::I32]),
    ("perf_name_len", &[], &[ValType::I32]),
];

/// The linear memory every module must export.
pub const MEMORY_EXPORT: &str = "memory";

/// A wasm value type of the ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValType {
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
}

/// The ABI version as the `perf_abi_version` export returns it:
/// `major << 16 | minor`.
pub const fn version_word(major: u16, minor: u16) -> i32 {
    ((major as u32) << 16 | minor as u32) as i32
}

/// Splits a `perf_abi_version` word into `(major, minor)`.
pub const fn split_version_word(w: i32) -> (u16, u16) {
    ((w as u32 >> 16) as u16, w as u32 as u16)
}

/// Whether a host speaking `host` runs a module built for `module`: same
/// major, and the module's minor is not newer than the host's.
pub const fn compatible(host: (u16, u16), module: (u16, u16)) -> bool {
    host.0 == module.0 && module.1 <= host.1
}

/// `perf_on_request`'s result: `chunk_bytes | zero_weight_per_chunk << 32`.
pub const fn pack_split(s: SplitPlan) -> i64 {
    (s.chunk_bytes as u64 | (s.zero_weight_per_chunk as u64) << 32) as i64
}

/// The inverse of [`pack_split`].
pub const fn unpack_split(v: i64) -> SplitPlan {
    let v = v as u64;
    SplitPlan { chunk_bytes: v as u32, zero_weight_per_chunk: (v >> 32) as u32 }
}

/// Why a record read back from a guest is not a valid value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer is shorter than the record.
    Short,
    /// The `class` field holds no [`TenantClass`].
    BadClass(u32),
}

/// Why a control block (ABI 1.5) read back from a guest is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlError {
    /// The buffer is shorter than the block.
    Short,
    /// The tick interval is not a positive `i64`.
    BadTickInterval(u64),
    /// `request_calls` holds no [`RequestCalls`].
    BadRequestCalls(u32),
    /// `zero_weight_op` holds no [`ZeroWeightOp`].
    BadZeroWeightOp(u32),
}

/// What a module's control block declares (decoded and checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// The tick interval, ns (positive).
    pub tick_interval_ns: u64,
    /// Which requests need `perf_on_request`.
    pub request_calls: RequestCalls,
    /// The WQE its zero-weight WRs are.
    pub zero_weight_op: ZeroWeightOp,
}

/// The control block (ABI 1.5, [`CONTROL_EXPORT`]): what the module says
/// of itself, rewritten by the SDK's glue after `perf_init`, each
/// `perf_set_param` and each `perf_on_tick`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// `Policy::tick_interval_ns`, in ns (`1..=i64::MAX`).
    pub tick_interval_ns: u64,
    /// `Policy::request_calls`, as [`RequestCalls::to_word`].
    pub request_calls: u32,
    /// `Policy::zero_weight_op`, as [`ZeroWeightOp::to_word`] (ABI 1.6;
    /// zero, a WAIT, before).
    pub zero_weight_op: u32,
}

impl Control {
    /// A block before the glue first writes it: an interval of 0, which
    /// the host refuses.
    pub const EMPTY: Control = Control { tick_interval_ns: 0, request_calls: 0, zero_weight_op: 0 };
}

/// Reads the control block from the first [`CONTROL_SIZE`] bytes of `b`.
pub fn decode_control(b: &[u8]) -> Result<Declared, ControlError> {
    if b.len() < CONTROL_SIZE {
        return Err(ControlError::Short);
    }
    let tick = get_u64(b, offset_of!(Control, tick_interval_ns));
    if tick == 0 || tick > i64::MAX as u64 {
        return Err(ControlError::BadTickInterval(tick));
    }
    let w = get_u32(b, offset_of!(Control, request_calls));
    let request_calls = RequestCalls::from_word(w).ok_or(ControlError::BadRequestCalls(w))?;
    let z = get_u32(b, offset_of!(Control, zero_weight_op));
    let zero_weight_op = ZeroWeightOp::from_word(z).ok_or(ControlError::BadZeroWeightOp(z))?;
    Ok(Declared { tick_interval_ns: tick, request_calls, zero_weight_op })
}

/// Writes the control block of `d` into the first [`CONTROL_SIZE`] bytes
/// of `b` (panics if shorter).
pub fn encode_control(d: &Declared, b: &mut [u8]) {
    let b = &mut b[..CONTROL_SIZE];
    b.fill(0);
    put_u64(b, offset_of!(Control, tick_interval_ns), d.tick_interval_ns);
    put_u32(b, offset_of!(Control, request_calls), d.request_calls.to_word());
    put_u32(b, offset_of!(Control, zero_weight_op), d.zero_weight_op.to_word());
}

/// Writes `l` into the first [`LOOP_SIZE`] bytes of `b` (panics if
/// shorter).
pub fn encode_loop(l: &LoopInfo, b: &mut [u8]) {
    let b = &mut b[..LOOP_SIZE];
    put_u32(b, offset_of!(LoopInfo, busy_permille), l.busy_permille);
    put_u32(b, offset_of!(LoopInfo, wqe_ps), l.wqe_ps);
    put_u32(b, offset_of!(LoopInfo, cqe_ps), l.cqe_ps);
    put_u32(b, offset_of!(LoopInfo, link_gbps), l.link_gbps);
}

/// Reads a [`Pacing`] record from the first [`PACING_SIZE`] bytes of `b`
/// (decoded, not validated: see [`Pacing::validate`]).
pub fn decode_pacing(b: &[u8]) -> Result<Pacing, DecodeError> {
    if b.len() < PACING_SIZE {
        return Err(DecodeError::Short);
    }
    Ok(Pacing {
        rate_bytes_per_s: get_u64(b, offset_of!(Pacing, rate_bytes_per_s)),
        burst_bytes: get_u64(b, offset_of!(Pacing, burst_bytes)),
        paused: get_u32(b, offset_of!(Pacing, paused)),
    })
}

/// Writes `p` into the first [`PACING_SIZE`] bytes of `b` (panics if
/// shorter).
pub fn encode_pacing(p: &Pacing, b: &mut [u8]) {
    let b = &mut b[..PACING_SIZE];
    b.fill(0);
    put_u64(b, offset_of!(Pacing, rate_bytes_per_s), p.rate_bytes_per_s);
    put_u64(b, offset_of!(Pacing, burst_bytes), p.burst_bytes);
    put_u32(b, offset_of!(Pacing, paused), p.paused);
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Writes `s` into the first [`STATS_SIZE`] bytes of `b` (panics if
/// shorter).
pub fn encode_stats(s: &TenantStats, b: &mut [u8]) {
    let b = &mut b[..STATS_SIZE];
    b.fill(0);
    put_u32(b, offset_of!(TenantStats, tenant), s.tenant);
    put_u32(b, offset_of!(TenantStats, qps), s.qps);
    put_u32(b, offset_of!(TenantStats, backlogged_qps), s.backlogged_qps);
    put_u32(b, offset_of!(TenantStats, max_depth), s.max_depth);
    put_u64(b, offset_of!(TenantStats, ewma_msg_bytes), s.ewma_msg_bytes.to_bits());
    put_u64(b, offset_of!(TenantStats, max_msg_bytes), s.max_msg_bytes);
    put_u64(b, offset_of!(TenantStats, completed), s.completed);
    put_u64(b, offset_of!(TenantStats, bytes), s.bytes);
    put_u64(b, offset_of!(TenantStats, mean_latency_ns), s.mean_latency_ns);
    put_u32(b, offset_of!(TenantStats, weight), s.weight);
    put_u32(b, offset_of!(TenantStats, p99_latency_ns), s.p99_latency_ns);
}

/// Writes `p` into the first [`PLAN_SIZE`] bytes of `b` (panics if shorter).
pub fn encode_plan(p: &TenantPlan, b: &mut [u8]) {
    let b = &mut b[..PLAN_SIZE];
    b.fill(0);
    put_u32(b, offset_of!(TenantPlan, max_active_qps), p.max_active_qps);
    put_u32(b, offset_of!(TenantPlan, quantum_requests), p.quantum_requests);
    put_u64(b, offset_of!(TenantPlan, quantum_bytes), p.quantum_bytes);
    put_u64(b, offset_of!(TenantPlan, quantum_ns), p.quantum_ns);
    let split = offset_of!(TenantPlan, split);
    put_u32(b, split + offset_of!(SplitPlan, chunk_bytes), p.split.chunk_bytes);
    put_u32(b, split + offset_of!(SplitPlan, zero_weight_per_chunk), p.split.zero_weight_per_chunk);
    put_u64(b, offset_of!(TenantPlan, split_threshold), p.split_threshold);
    put_u32(b, offset_of!(TenantPlan, class), p.class as u32);
    put_u16(b, offset_of!(TenantPlan, window_kib), p.window_kib);
    put_u16(b, offset_of!(TenantPlan, read_window_kib), p.read_window_kib);
}

/// Reads a [`TenantPlan`] from the first [`PLAN_SIZE`] bytes of `b`.
pub fn decode_plan(b: &[u8]) -> Result<TenantPlan, DecodeError> {
    if b.len() < PLAN_SIZE {
        return Err(DecodeError::Short);
    }
    let raw = get_u32(b, offset_of!(TenantPlan, class));
    let class = TenantClass::from_u32(raw).ok_or(DecodeError::BadClass(raw))?;
    let split = offset_of!(TenantPlan, split);
    Ok(TenantPlan {
        max_active_qps: get_u32(b, offset_of!(TenantPlan, max_active_qps)),
        quantum_requests: get_u32(b, offset_of!(TenantPlan, quantum_requests)),
        quantum_bytes: get_u64(b, offset_of!(TenantPlan, quantum_bytes)),
        quantum_ns: get_u64(b, offset_of!(TenantPlan, quantum_ns)),
        split: SplitPlan {
            chunk_bytes: get_u32(b, split + offset_of!(SplitPlan, chunk_bytes)),
            zero_weight_per_chunk: get_u32(b, split + offset_of!(SplitPlan, zero_weight_per_chunk)),
        },
        split_threshold: get_u64(b, offset_of!(TenantPlan, split_threshold)),
        class,
        window_kib: get_u16(b, offset_of!(TenantPlan, window_kib)),
        read_window_kib: get_u16(b, offset_of!(TenantPlan, read_window_kib)),
    })
}

/// Writes `r` into the first [`REQUEST_SIZE`] bytes of `b` (panics if
/// shorter).
pub fn encode_request(r: &RequestInfo, b: &mut [u8]) {
    let b = &mut b[..REQUEST_SIZE];
    b.fill(0);
    put_u32(b, offset_of!(RequestInfo, tenant), r.tenant);
    put_u32(b, offset_of!(RequestInfo, qp), r.qp);
    put_u64(b, offset_of!(RequestInfo, len), r.len);
    put_u32(b, offset_of!(RequestInfo, op), r.op as u32);
    put_u32(b, offset_of!(RequestInfo, depth), r.depth);
}

/// The request slot as the guest sees it: the request, then the plan of
/// its tenant.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestSlot {
    /// The request.
    pub req: RequestInfo,
    /// Its tenant's current plan.
    pub plan: TenantPlan,
}

impl RequestSlot {
    /// An empty slot.
    pub const EMPTY: RequestSlot = RequestSlot {
        req: RequestInfo { tenant: 0, qp: 0, len: 0, op: RequestOp::Write, depth: 0 },
        plan: TenantPlan::PASSTHROUGH,
    };
}

// The layout is part of the ABI: fail the build if it ever changes.
const _: () = {
    assert!(size_of::<TenantStats>() == STATS_SIZE && align_of::<TenantStats>() == 8);
    assert!(offset_of!(TenantStats, ewma_msg_bytes) == 16 && offset_of!(TenantStats, weight) == 56);
    assert!(offset_of!(TenantStats, p99_latency_ns) == 60);
    assert!(size_of::<TenantPlan>() == PLAN_SIZE && align_of::<TenantPlan>() == 8);
    assert!(offset_of!(TenantPlan, split) == 24 && offset_of!(TenantPlan, class) == 40);
    assert!(offset_of!(TenantPlan, window_kib) == 44 && offset_of!(TenantPlan, read_window_kib) == 46);
    assert!(size_of::<RequestInfo>() == REQUEST_SIZE && offset_of!(RequestInfo, depth) == 20);
    assert!(offset_of!(RequestSlot, plan) == REQUEST_PLAN_OFFSET);
    assert!(size_of::<RequestSlot>() == REQUEST_SLOT_SIZE);
    assert!(size_of::<Pacing>() == PACING_SIZE && align_of::<Pacing>() == 8);
    assert!(offset_of!(Pacing, burst_bytes) == 8 && offset_of!(Pacing, paused) == 16);
    assert!(size_of::<Control>() == CONTROL_SIZE && align_of::<Control>() == 8);
    assert!(offset_of!(Control, request_calls) == 8);
    assert!(size_of::<LoopInfo>() == LOOP_SIZE && align_of::<LoopInfo>() == 8);
    assert!(offset_of!(LoopInfo, wqe_ps) == 4 && offset_of!(LoopInfo, link_gbps) == 12);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_encoding() {
        let plan = TenantPlan {
            max_active_qps: 2,
            quantum_requests: 128,
            quantum_bytes: 1_024_000,
            quantum_ns: u64::MAX,
            split: SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 16 },
            split_threshold: 1024,
            class: TenantClass::DelaySensitive,
            window_kib: 48,
            read_window_kib: 7,
        };
        let mut b = [0xAAu8; PLAN_SIZE];
        encode_plan(&plan, &mut b);
        assert_eq!(decode_plan(&b), Ok(plan));
        assert_eq!(&b[44..48], &[48, 0, 7, 0], "the windows (ABI 1.3), little-endian u16s");
        b[40] = 7;
        assert_eq!(decode_plan(&b), Err(DecodeError::BadClass(7)));
        assert_eq!(decode_plan(&b[..PLAN_SIZE - 1]), Err(DecodeError::Short));
    }

    #[test]
    #[allow(unsafe_code, reason = "reads the bytes back as the value, as the guest does")]
    fn the_encoding_is_the_in_memory_layout() {
        // The guest reads the host's bytes in place: they must be the
        // `#[repr(C)]` value's bytes (this test runs on a little-endian host).
        let s = TenantStats {
            tenant: 3,
            qps: 4,
            max_depth: 9,
            ewma_msg_bytes: 1.5,
            bytes: 77,
            weight: 2,
            p99_latency_ns: 4321,
            ..TenantStats::ZERO
        };
        let mut b = [0u8; STATS_SIZE];
        encode_stats(&s, &mut b);
        let mut back = TenantStats::ZERO;
        // SAFETY: TenantStats is plain old data of STATS_SIZE bytes; every bit pattern is valid.
        unsafe { core::ptr::copy_nonoverlapping(b.as_ptr(), &mut back as *mut TenantStats as *mut u8, STATS_SIZE) };
        assert_eq!(back, s);
        let r = RequestInfo { tenant: 1, qp: 2, len: 1 << 40, op: RequestOp::Read, depth: 5 };
        let mut b = [0u8; REQUEST_SIZE];
        encode_request(&r, &mut b);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 1 << 40);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), RequestOp::Read as u32);
    }

    #[test]
    fn pacing_round_trips_and_validates() {
        let p = Pacing { rate_bytes_per_s: 12_500_000_000, burst_bytes: 4 << 20, paused: 1 };
        let mut b = [0xAAu8; PACING_SIZE];
        encode_pacing(&p, &mut b);
        assert_eq!(decode_pacing(&b), Ok(p));
        assert_eq!(&b[20..24], &[0; 4], "padding is zeroed");
        assert_eq!(decode_pacing(&b[..PACING_SIZE - 1]), Err(DecodeError::Short));
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(Pacing::UNLIMITED.validate(), Ok(()));
        assert_eq!(Pacing { paused: 2, ..p }.validate(), Err(crate::Rejection::BadPacing));
        assert_eq!(Pacing::rate(1000, 0).validate(), Err(crate::Rejection::BadPacing), "a bucket needs a burst");
        assert_eq!(Pacing::rate(crate::limits::MAX_RATE + 1, 4096).validate(), Err(crate::Rejection::BadPacing));
    }

    #[test]
    fn the_control_block_round_trips_and_refuses_nonsense() {
        let mut b = [0xAAu8; CONTROL_SIZE];
        let declared = |tick_interval_ns, request_calls| Declared {
            tick_interval_ns,
            request_calls,
            zero_weight_op: ZeroWeightOp::Wait,
        };
        for calls in [
            RequestCalls::Every,
            RequestCalls::Plan { sends: false },
            RequestCalls::Plan { sends: true },
            RequestCalls::PlanExceptShort { sends: false },
            RequestCalls::PlanExceptShort { sends: true },
            RequestCalls::PlanWithCarry { sends: false, unit_bytes: 1 },
            RequestCalls::PlanWithCarry { sends: true, unit_bytes: 1024 },
            RequestCalls::PlanWithCarry { sends: true, unit_bytes: RequestCalls::MAX_UNIT_BYTES },
        ] {
            for op in [ZeroWeightOp::Wait, ZeroWeightOp::Nop] {
                let d = Declared { zero_weight_op: op, ..declared(1_000_000, calls) };
                encode_control(&d, &mut b);
                assert_eq!(decode_control(&b), Ok(d));
                assert_eq!(ZeroWeightOp::from_word(op.to_word()), Some(op));
            }
            assert_eq!(RequestCalls::from_word(calls.to_word()), Some(calls));
        }
        // A 1.5 module's block (its last word was reserved, zero) declares WAITs.
        encode_control(&declared(10, RequestCalls::Every), &mut b);
        assert_eq!(&b[12..16], &[0; 4], "a WAIT is zero");
        assert_eq!(decode_control(&b).map(|d| d.zero_weight_op), Ok(ZeroWeightOp::Wait));
        b[12..16].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(decode_control(&b), Err(ControlError::BadZeroWeightOp(2)));
        encode_control(&declared(0, RequestCalls::Every), &mut b);
        assert_eq!(decode_control(&b), Err(ControlError::BadTickInterval(0)));
        encode_control(&declared(1 << 63, RequestCalls::Every), &mut b);
        assert_eq!(decode_control(&b), Err(ControlError::BadTickInterval(1 << 63)));
        encode_control(&declared(10, RequestCalls::Every), &mut b);
        for w in [2u32, 4, 6, 8, 1 << 31, 9, 0x10d, 0x101, 0x108] {
            b[8..12].copy_from_slice(&w.to_le_bytes());
            assert_eq!(decode_control(&b), Err(ControlError::BadRequestCalls(w)), "{w:#x}");
        }
        assert_eq!(decode_control(&b[..CONTROL_SIZE - 1]), Err(ControlError::Short));
    }

    #[test]
    fn the_plan_rule_answers_without_a_call() {
        let plan = TenantPlan {
            split: SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 16 },
            split_threshold: 1024,
            ..TenantPlan::PASSTHROUGH
        };
        let req = |len, op| RequestInfo { tenant: 0, qp: 0, len, op, depth: 1 };
        let w = RequestOp::Write;
        let plain = RequestCalls::Plan { sends: false };
        assert_eq!(RequestCalls::Every.answer(&req(1 << 20, w), &plan, &mut 0), None);
        assert_eq!(plain.answer(&req(1 << 20, w), &plan, &mut 0), Some(plan.split));
        assert_eq!(plain.answer(&req(1023, w), &plan, &mut 0), Some(SplitPlan::WHOLE));
        assert_eq!(plain.answer(&req(2048, w), &plan, &mut 0), Some(plan.split));
        assert_eq!(plain.answer(&req(1 << 20, RequestOp::Send), &plan, &mut 0), Some(SplitPlan::WHOLE));
        assert_eq!(
            RequestCalls::Plan { sends: true }.answer(&req(1 << 20, RequestOp::Send), &plan, &mut 0),
            Some(plan.split)
        );
        let short = RequestCalls::PlanExceptShort { sends: true };
        assert_eq!(short.answer(&req(2048, w), &plan, &mut 0), None, "shorter than a chunk, zero-weight WRs: a call");
        assert_eq!(short.answer(&req(16384, w), &plan, &mut 0), Some(plan.split));
        assert_eq!(short.answer(&req(512, w), &plan, &mut 0), Some(SplitPlan::WHOLE));
        let no_zw = TenantPlan { split: SplitPlan { zero_weight_per_chunk: 0, ..plan.split }, ..plan };
        assert_eq!(short.answer(&req(2048, w), &no_zw, &mut 0), Some(no_zw.split));
        let never = TenantPlan { split_threshold: 0, ..plan };
        assert_eq!(short.answer(&req(1 << 20, w), &never, &mut 0), Some(SplitPlan::WHOLE));
        // ABI 1.8: the host applies PeRF's carry, one zero-weight WR per
        // unit of payload with the rest carried, at most the plan's count.
        let carried = RequestCalls::PlanWithCarry { sends: true, unit_bytes: 1024 };
        let zw = |n| Some(SplitPlan { zero_weight_per_chunk: n, ..plan.split });
        let mut carry = 0;
        assert_eq!(carried.answer(&req(1536, w), &plan, &mut carry), zw(1));
        assert_eq!(carry, 512);
        assert_eq!(carried.answer(&req(1536, RequestOp::Send), &plan, &mut carry), zw(2));
        assert_eq!(carry, 0);
        assert_eq!(carried.answer(&req(16384, w), &plan, &mut carry), Some(plan.split), "a chunk: the plan's own");
        assert_eq!(carried.answer(&req(512, w), &plan, &mut carry), Some(SplitPlan::WHOLE), "under the threshold");
        assert_eq!(carry, 0, "only the messages it applies to move the carry");
        let mut carry = 1023;
        let few = TenantPlan { split: SplitPlan { zero_weight_per_chunk: 3, ..plan.split }, ..plan };
        let three = Some(SplitPlan { zero_weight_per_chunk: 3, ..plan.split });
        assert_eq!(carried.answer(&req(16000, w), &few, &mut carry), three, "at most the plan's count");
        assert_eq!(carry, (1023 + 16000) % 1024);
        assert_eq!(carried.answer(&req(2048, w), &no_zw, &mut carry), Some(no_zw.split));
        // The plan rule with `sends: false` is the default `on_request`.
        struct Default0;
        impl crate::Policy for Default0 {
            fn name(&self) -> &str {
                "d"
            }
        }
        for len in [0u64, 1, 1023, 1024, 4096, 16384, 1 << 30] {
            for op in [RequestOp::Write, RequestOp::Send, RequestOp::Read] {
                for p in [plan, no_zw, never, TenantPlan::PASSTHROUGH] {
                    let want = crate::Policy::on_request(&mut Default0, &req(len, op), &p);
                    assert_eq!(plain.answer(&req(len, op), &p, &mut 0), Some(want));
                }
            }
        }
    }

    #[test]
    fn versions_and_packing() {
        let w = version_word(1, 3);
        assert_eq!(split_version_word(w), (1, 3));
        assert!(compatible((1, 3), (1, 0)));
        assert!(compatible((1, 3), (1, 3)));
        assert!(!compatible((1, 3), (1, 4)), "a newer minor may use what the host lacks");
        assert!(!compatible((1, 3), (2, 0)));
        assert!(!compatible((1, 3), (0, 3)));
        let s = SplitPlan { chunk_bytes: u32::MAX, zero_weight_per_chunk: 17 };
        assert_eq!(unpack_split(pack_split(s)), s);
        assert_eq!(unpack_split(pack_split(SplitPlan::WHOLE)), SplitPlan::WHOLE);
    }
}
