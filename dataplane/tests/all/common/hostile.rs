//! The hostile policy modules of issue 9 and what the host must make of
//! each: the modules of `policies/adversarial` (built to wasm by the
//! dataplane's build script) and hand-written malformed ones. Shared by
//! `hostile_policies.rs` (one swap each, checked in detail) and `soak.rs`
//! (every module in turn, for simulated minutes).

use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{adversarial, FaultKind, Interruption, WasmLimits};

use super::wat::Wat;

/// The memory cap the hostile modules run under.
pub const MAX_MEMORY_BYTES: usize = 4 << 20;
/// The module-size cap they run under.
pub const MAX_MODULE_BYTES: usize = 1 << 20;

/// The bounds of these tests: `interruption` per call, 4 MiB of memory,
/// 1 MiB of module.
pub fn limits(interruption: Interruption) -> WasmLimits {
    WasmLimits { interruption, max_memory_bytes: MAX_MEMORY_BYTES, max_module_bytes: MAX_MODULE_BYTES }
}

/// What a hostile module should come to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    /// Refused at the swap, the reason containing this text; the running
    /// policy stays.
    Refused(&'static str),
    /// Accepted, then dropped for passthrough: the fault and the hook.
    Dropped(FaultKind, &'static str),
    /// Accepted: its decisions are valid (clamped where they ask for more
    /// than the NIC holds), so it runs on, unless it keeps a QP with
    /// backlog from completing anything for longer than the watchdog's
    /// bound, which then drops it (`Watchdog`). Whether that happens
    /// depends on the traffic: starving a QP takes one that never drains
    /// beside it.
    Valid,
}

/// How a module is made.
#[derive(Clone, Copy)]
enum Make {
    /// `policies/adversarial`'s example of this name.
    Adversarial,
    /// Bytes built by the test.
    Bytes(fn() -> Vec<u8>),
}

/// One hostile module.
#[derive(Clone, Copy)]
pub struct Hostile {
    /// Its name (the example's name for `policies/adversarial`).
    pub label: &'static str,
    /// What the host must make of it.
    pub want: Want,
    make: Make,
}

impl Hostile {
    /// The module, to swap in.
    pub fn spec(&self) -> PolicySpec {
        match self.make {
            Make::Adversarial => adversarial::path(self.label).into(),
            Make::Bytes(f) => PolicySpec::Bytes { label: self.label.into(), bytes: f().into() },
        }
    }
}

fn unknown_import() -> Vec<u8> {
    Wat { imports: "(import \"env\" \"sleep\" (func (param i32)))", ..Wat::default() }.bytes()
}

/// Valid wasm with 2 MiB of data segment: over the module cap, refused
/// before any compilation.
fn huge_module() -> Vec<u8> {
    let wat = format!("(module (memory 64) (data (i32.const 0) \"{}\"))", "\\00".repeat(2 << 20));
    ::wat::parse_str(&wat).expect("WAT")
}

/// A memory of 64 MiB from the start: over the memory cap.
fn huge_memory() -> Vec<u8> {
    Wat { memory_pages: 1024, ..Wat::default() }.bytes()
}

fn not_wasm() -> Vec<u8> {
    b"#!/bin/sh\necho not a policy\n".to_vec()
}

const fn adv(label: &'static str, want: Want) -> Hostile {
    Hostile { label, want, make: Make::Adversarial }
}

const fn bytes(label: &'static str, want: Want, f: fn() -> Vec<u8>) -> Hostile {
    Hostile { label, want, make: Make::Bytes(f) }
}

/// Every hostile module and its outcome under [`limits`].
pub const ALL: &[Hostile] = &[
    adv("loop_init", Want::Refused("perf_init")),
    adv("loop_tenant", Want::Refused("on_tenant")),
    // ABI 1.5: `perf_init` fills in the control block, tick interval included.
    adv("loop_interval", Want::Refused("perf_init")),
    adv("loop_request", Want::Dropped(FaultKind::Timeout, "on_request")),
    adv("loop_tick", Want::Dropped(FaultKind::Timeout, "on_tick")),
    adv("log_loop_tick", Want::Dropped(FaultKind::Timeout, "on_tick")),
    adv("deep_recursion", Want::Dropped(FaultKind::Trap, "on_tick")),
    adv("memory_growth", Want::Dropped(FaultKind::Trap, "on_tick")),
    adv("trap_init", Want::Refused("unreachable")),
    adv("trap_tick", Want::Dropped(FaultKind::Trap, "on_tick")),
    adv("trap_nth_request", Want::Dropped(FaultKind::Trap, "on_request")),
    adv("tiny_chunk", Want::Dropped(FaultKind::InvalidDecision, "on_request")),
    adv("huge_chunk", Want::Dropped(FaultKind::InvalidDecision, "on_request")),
    adv("zero_weight_flood", Want::Dropped(FaultKind::InvalidDecision, "on_request")),
    adv("zero_quantum", Want::Dropped(FaultKind::InvalidDecision, "on_tick")),
    adv("starve", Want::Valid),
    adv("zero_weight_max", Want::Valid),
    bytes("unknown_import", Want::Refused("env.sleep"), unknown_import),
    bytes("huge_module", Want::Refused("more than the 1048576-byte cap"), huge_module),
    bytes("huge_memory", Want::Refused("instantiation"), huge_memory),
    bytes("not_wasm", Want::Refused("not a wasm module"), not_wasm),
];

/// The module called `label`.
pub fn by_label(label: &str) -> Hostile {
    *ALL.iter().find(|h| h.label == label).unwrap_or_else(|| panic!("no hostile module {label}"))
}
