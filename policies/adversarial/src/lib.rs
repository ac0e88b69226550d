//! Deliberately hostile policies, one behaviour each, for the tests that
//! show the sandbox contains them (`dataplane/tests/all/hostile_policies.rs`,
//! `docs/hostile-policies.md`). [`Hostile<B>`] behaves well except for
//! behaviour `B` (one of the constants below); each example of this crate
//! exports one of them as a wasm module, named after its constant in
//! lower case (`LOOP_TICK` -> `loop_tick.wasm`).
//!
//! Nothing here is for use: every one of these modules must be refused or
//! dropped by the host, with traffic going on under the fallback.
#![cfg_attr(target_arch = "wasm32", no_std)]

use core::hint::black_box;

use perf_policy_sdk::{Policy, RequestInfo, SplitPlan, TenantClass, TenantInfo, TenantPlan, TenantStats};

/// Loops forever in its constructor (`perf_init`).
pub const LOOP_INIT: u32 = 1;
/// Loops forever in `on_tenant`.
pub const LOOP_TENANT: u32 = 2;
/// Loops forever in `on_request`.
pub const LOOP_REQUEST: u32 = 3;
/// Loops forever in `on_tick`.
pub const LOOP_TICK: u32 = 4;
/// Loops forever in `tick_interval_ns`.
pub const LOOP_INTERVAL: u32 = 5;
/// Recurses without end in `on_tick` (a stack overflow).
pub const DEEP_RECURSION: u32 = 6;
/// Grows its linear memory without end in `on_tick`.
pub const MEMORY_GROWTH: u32 = 7;
/// Panics (traps) in its constructor.
pub const TRAP_INIT: u32 = 8;
/// Panics in `on_tick`.
pub const TRAP_TICK: u32 = 9;
/// Splits well, then panics on the [`NTH`]th `on_request`.
pub const TRAP_NTH_REQUEST: u32 = 10;
/// Splits every request into 1-byte chunks (below the host's minimum).
pub const TINY_CHUNK: u32 = 11;
/// Asks for `u32::MAX`-byte chunks (above the host's maximum).
pub const HUGE_CHUNK: u32 = 12;
/// Asks for `u32::MAX` zero-weight WRs per chunk (no send queue holds them).
pub const ZERO_WEIGHT_FLOOD: u32 = 13;
/// 1 KiB chunks with the most zero-weight WRs the host accepts (256):
/// valid, but more than a small send queue holds at once.
pub const ZERO_WEIGHT_MAX: u32 = 14;
/// Caps every tenant's active QPs but gives no quantum (never rotates).
pub const ZERO_QUANTUM: u32 = 15;
/// Caps every tenant to one active QP with a quantum no QP ever spends:
/// valid plans that pause every other QP forever (starvation).
pub const STARVE: u32 = 16;

/// Loops forever in `on_tick`, sending a 256-byte line to the host's log
/// on every turn: the host's work in the call is not charged fuel, so the
/// loop spends little fuel per unit of time and a fuel budget alone would
/// let it run for long; the call budget's wall-clock backstop stops it.
pub const LOG_LOOP_TICK: u32 = 17;

/// The call of [`TRAP_NTH_REQUEST`] that traps.
pub const NTH: u32 = 100;

/// A policy that misbehaves as `B` says and is otherwise passthrough.
#[derive(Debug, Clone, Copy)]
pub struct Hostile<const B: u32> {
    requests: u32,
}

/// Spins forever (a loop the optimiser cannot remove or prove empty).
fn spin() -> ! {
    let mut x = 0u64;
    loop {
        x = black_box(x.wrapping_add(1));
    }
}

/// Recurses until the stack runs out.
#[inline(never)]
fn recurse(n: u64) -> u64 {
    let frame = black_box([n; 32]);
    if black_box(n) == u64::MAX {
        return frame[1];
    }
    recurse(n + 1).wrapping_add(frame[n as usize % 32])
}

/// Logs a 256-byte line forever.
#[cfg(target_arch = "wasm32")]
fn log_forever() -> ! {
    let line = [b'x'; 256];
    let line = core::str::from_utf8(&line).unwrap_or("x");
    loop {
        perf_policy_sdk::host::log(black_box(line));
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn log_forever() -> ! {
    panic!("logging through the host is a wasm behaviour")
}

/// Grows linear memory until the host stops it.
#[cfg(target_arch = "wasm32")]
fn grow_forever() -> ! {
    loop {
        black_box(core::arch::wasm32::memory_grow(0, 16));
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn grow_forever() -> ! {
    panic!("memory growth is a wasm behaviour")
}

impl<const B: u32> Hostile<B> {
    /// The constructor `export_policy!` calls in `perf_init`.
    pub fn new() -> Self {
        match B {
            LOOP_INIT => spin(),
            TRAP_INIT => panic!("hostile: trap in init"),
            _ => Hostile { requests: 0 },
        }
    }
}

impl<const B: u32> Default for Hostile<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const B: u32> Policy for Hostile<B> {
    fn name(&self) -> &str {
        "hostile"
    }

    fn on_tenant(&mut self, _tenant: &TenantInfo) {
        if B == LOOP_TENANT {
            spin();
        }
    }

    fn on_request(&mut self, _req: &RequestInfo, _plan: &TenantPlan) -> SplitPlan {
        self.requests += 1;
        match B {
            LOOP_REQUEST => spin(),
            TRAP_NTH_REQUEST if self.requests >= NTH => panic!("hostile: trap on call {NTH}"),
            TRAP_NTH_REQUEST => SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 1 },
            TINY_CHUNK => SplitPlan { chunk_bytes: 1, zero_weight_per_chunk: 0 },
            HUGE_CHUNK => SplitPlan { chunk_bytes: u32::MAX, zero_weight_per_chunk: 0 },
            ZERO_WEIGHT_FLOOD => SplitPlan { chunk_bytes: 4096, zero_weight_per_chunk: u32::MAX },
            ZERO_WEIGHT_MAX => SplitPlan { chunk_bytes: 1024, zero_weight_per_chunk: 256 },
            _ => SplitPlan::WHOLE,
        }
    }

    fn on_tick(&mut self, _now_ns: u64, _stats: &[TenantStats], plans: &mut [TenantPlan]) {
        match B {
            LOOP_TICK => spin(),
            LOG_LOOP_TICK => log_forever(),
            DEEP_RECURSION => {
                black_box(recurse(black_box(0)));
            }
            MEMORY_GROWTH => grow_forever(),
            TRAP_TICK => panic!("hostile: trap in on_tick"),
            ZERO_QUANTUM | STARVE => {
                let quantum_requests = if B == STARVE { u32::MAX } else { 0 };
                for p in plans.iter_mut() {
                    *p = TenantPlan {
                        max_active_qps: 1,
                        quantum_requests,
                        quantum_bytes: 0,
                        quantum_ns: 0,
                        split: SplitPlan::WHOLE,
                        split_threshold: 0,
                        class: TenantClass::Bandwidth,
                        ..TenantPlan::PASSTHROUGH
                    };
                }
            }
            _ => {}
        }
    }

    fn tick_interval_ns(&self) -> u64 {
        if B == LOOP_INTERVAL {
            spin();
        }
        100_000
    }
}
