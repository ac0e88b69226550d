//! The guest half of the wasm ABI (wasm32 only): the static policy
//! instance and the per-round buffers, and the bodies of the exports that
//! [`export_policy!`](crate::export_policy) generates. Not for direct use.
//!
//! wasm32-unknown-unknown without the `atomics` feature is single-threaded
//! and the host never re-enters a module, so the cells below are only ever
//! touched by one call at a time.

use crate::abi::{self, Control, RequestSlot, CHANGED_ALL, MAX_TENANTS, PARAMS_SIZE};
use crate::{LoopInfo, Pacing, Policy, TenantPlan, TenantStats, ABI_VERSION};
use core::cell::UnsafeCell;

/// The static policy instance.
pub struct PolicyCell<T>(UnsafeCell<Option<T>>);

// SAFETY: see the module comment (one thread, no re-entrance).
unsafe impl<T> Sync for PolicyCell<T> {}

impl<T: Policy> PolicyCell<T> {
    /// An empty cell (before `perf_init`).
    pub const fn new() -> Self {
        PolicyCell(UnsafeCell::new(None))
    }

    /// Runs `f` on the policy, initialising it with `init` first if needed.
    pub fn with<R>(&self, init: fn() -> T, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: see the module comment.
        let slot = unsafe { &mut *self.0.get() };
        f(slot.get_or_insert_with(init))
    }

    /// (Re)creates the policy.
    pub fn init(&self, init: fn() -> T) {
        // SAFETY: see the module comment.
        unsafe { *self.0.get() = Some(init()) }
    }
}

impl<T: Policy> Default for PolicyCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[repr(C, align(8))]
struct Buffers {
    stats: [TenantStats; MAX_TENANTS],
    plans: [TenantPlan; MAX_TENANTS],
    pacing: [Pacing; MAX_TENANTS],
    request: RequestSlot,
    params: [u8; PARAMS_SIZE],
    control: Control,
    loop_info: LoopInfo,
    /// The changed list (ABI 1.9): the count, then the indices.
    changed: [u32; 1 + MAX_TENANTS],
}

struct BufferCell(UnsafeCell<Buffers>);
// SAFETY: see the module comment.
unsafe impl Sync for BufferCell {}

static BUFFERS: BufferCell = BufferCell(UnsafeCell::new(Buffers {
    stats: [TenantStats::ZERO; MAX_TENANTS],
    plans: [TenantPlan::PASSTHROUGH; MAX_TENANTS],
    pacing: [Pacing::UNLIMITED; MAX_TENANTS],
    request: RequestSlot::EMPTY,
    params: [0; PARAMS_SIZE],
    control: Control::EMPTY,
    loop_info: LoopInfo::UNKNOWN,
    changed: [CHANGED_ALL; 1 + MAX_TENANTS],
}));

fn buffers() -> &'static mut Buffers {
    // SAFETY: see the module comment; no two of these are live at once.
    unsafe { &mut *BUFFERS.0.get() }
}

/// Rewrites the control block (ABI 1.5, the zero-weight op 1.6) from `p`.
fn refresh_control<T: Policy>(p: &T, control: &mut Control) {
    *control = Control {
        tick_interval_ns: p.tick_interval_ns(),
        request_calls: p.request_calls().to_word(),
        zero_weight_op: p.zero_weight_op().to_word(),
    };
}

/// `perf_init`: (re)creates the policy and writes the control block; 0.
pub fn init<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T) -> i32 {
    cell.init(init);
    cell.with(init, |p| refresh_control(p, &mut buffers().control));
    0
}

/// `perf_control_ptr` (ABI 1.5).
pub fn control_ptr() -> i32 {
    &buffers().control as *const Control as i32
}

/// `perf_loop_ptr` (ABI 1.7).
pub fn loop_ptr() -> i32 {
    &buffers().loop_info as *const LoopInfo as i32
}

/// `perf_changed_ptr` (ABI 1.9).
pub fn changed_ptr() -> i32 {
    buffers().changed.as_ptr() as i32
}

/// `perf_abi_version`.
pub fn abi_version() -> i32 {
    abi::version_word(ABI_VERSION.0, ABI_VERSION.1)
}

/// `perf_stats_ptr`.
pub fn stats_ptr() -> i32 {
    buffers().stats.as_ptr() as i32
}

/// `perf_plans_ptr`.
pub fn plans_ptr() -> i32 {
    buffers().plans.as_ptr() as i32
}

/// `perf_pacing_ptr` (ABI 1.1).
pub fn pacing_ptr() -> i32 {
    buffers().pacing.as_ptr() as i32
}

/// `perf_params_ptr` (ABI 1.2).
pub fn params_ptr() -> i32 {
    buffers().params.as_ptr() as i32
}

/// `perf_set_param` (ABI 1.2): the key is the first `key_len` bytes of the
/// params buffer, the value the next `value_len`; 0, or a
/// [`ParamError`](crate::ParamError) wire value.
pub fn set_param<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T, key_len: i32, value_len: i32) -> i32 {
    let (k, v) = (key_len as u32 as usize, value_len as u32 as usize);
    let b = &buffers().params;
    let (Some(key), Some(value)) = (b.get(..k), k.checked_add(v).and_then(|end| b.get(k..end))) else {
        return crate::ParamError::Malformed as i32;
    };
    let (Ok(key), Ok(value)) = (core::str::from_utf8(key), core::str::from_utf8(value)) else {
        return crate::ParamError::Malformed as i32;
    };
    let r = cell.with(init, |p| {
        let r = p.set_param(key, value);
        // The key and value are read: the buffers may be borrowed again.
        refresh_control(p, &mut buffers().control);
        r
    });
    match r {
        Ok(()) => 0,
        Err(e) => e as i32,
    }
}

/// `perf_request_ptr`.
pub fn request_ptr() -> i32 {
    &buffers().request as *const RequestSlot as i32
}

/// `perf_max_tenants`.
pub fn max_tenants() -> i32 {
    MAX_TENANTS as i32
}

/// `perf_name_ptr`.
pub fn name_ptr<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T) -> i32 {
    cell.with(init, |p| p.name().as_ptr() as i32)
}

/// `perf_name_len`.
pub fn name_len<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T) -> i32 {
    cell.with(init, |p| p.name().len() as i32)
}

/// `perf_on_tenant`.
pub fn on_tenant<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T, tenant: i32, qps: i32, weight: i32) {
    let t = crate::TenantInfo { tenant: tenant as u32, qps: qps as u32, weight: weight as u32 };
    cell.with(init, |p| p.on_tenant(&t))
}

/// `perf_on_request`.
pub fn on_request<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T) -> i64 {
    let slot = buffers().request;
    abi::pack_split(cell.with(init, |p| p.on_request(&slot.req, &slot.plan)))
}

/// `perf_on_tick`: `Policy::on_loop`, `Policy::on_tick_changed` (with the
/// changed list, ABI 1.9; `Policy::on_tick` when the list says every
/// tenant) then `Policy::on_pacing`; 0, or -1 if `n` is out of range.
pub fn on_tick<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T, now_ns: i64, n: i32) -> i32 {
    if n < 0 || n as usize > MAX_TENANTS {
        return -1;
    }
    let b = buffers();
    let n = n as usize;
    cell.with(init, |p| {
        p.on_loop(&b.loop_info);
        let (count, list) = b.changed.split_at(1);
        match list.get(..count[0] as usize) {
            Some(changed) if count[0] as usize <= n => {
                p.on_tick_changed(now_ns as u64, &b.stats[..n], changed, &mut b.plans[..n])
            }
            _ => p.on_tick(now_ns as u64, &b.stats[..n], &mut b.plans[..n]),
        }
        p.on_pacing(now_ns as u64, &mut b.pacing[..n]);
        refresh_control(p, &mut b.control);
    });
    0
}

/// `perf_tick_interval_ns`.
pub fn tick_interval_ns<T: Policy>(cell: &PolicyCell<T>, init: fn() -> T) -> i64 {
    cell.with(init, |p| p.tick_interval_ns() as i64)
}
