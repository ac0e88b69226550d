//! Hostile policies (issue 9): every module of `policies/adversarial`
//! (built to wasm by the dataplane's build script) and a few hand-written
//! ones is swapped in under traffic, and each is either refused at the
//! swap (the running policy stays) or dropped at its first bad call (the
//! host falls back to passthrough); either way the reason is recorded,
//! and every request still completes exactly once, in per-QP order, with
//! its bytes at both hosts. The watchdog takes control back from a policy
//! whose valid plans starve a QP; a valid zero-weight count larger than
//! a small send queue is clamped instead of stalling the QP.
//!
//! The calls run under a 5 ms epoch deadline (a looping hook costs 5-6 ms
//! of wall time, once).

mod common;

use std::time::Duration;

use common::wat::Wat;
use common::*;
use perf_dataplane::engine::{DataplaneConfig, SwapOutcome, SwapRecord};
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{adversarial, FaultKind, Interruption, WasmLimits};
use perf_dataplane::policy::ExitInfo;

/// The bounds of these tests: 5 ms per call, 4 MiB of memory, 1 MiB of module.
fn limits() -> WasmLimits {
    WasmLimits {
        interruption: Interruption::Epoch(Duration::from_millis(5)),
        max_memory_bytes: 4 << 20,
        max_module_bytes: 1 << 20,
    }
}

/// 160 requests of two tenants (two QPs each) over four bursts 25 us
/// apart, WRITEs and READs from 1 B to about 200 KB.
fn traffic() -> Vec<GenOp> {
    (0..160usize)
        .map(|i| GenOp {
            tenant: i % 2,
            qp: (i / 2 % 2) as u32,
            read: i % 7 == 3,
            size: [1u32, 64, 4096, 16_384, 70_001, 200_000][i % 6],
            burst: (i / 40) as u64,
        })
        .collect()
}

/// What a hostile module should come to.
#[derive(Debug)]
enum Want {
    /// Refused at the swap, the reason containing this text; `perf` stays.
    Refused(&'static str),
    /// Accepted, then dropped for passthrough: the fault and the hook.
    Dropped(FaultKind, &'static str),
}

/// Runs the traffic under `perf`, swaps to `spec` at 10 us, and returns the
/// swap record, the policy running at the end, and its exit records.
fn swap_in(spec: PolicySpec, cfg: DataplaneConfig) -> (SwapRecord, String, Vec<ExitInfo>) {
    let ops = traffic();
    let rig = run_case_with(&[2, 2], &ops, 5, Pol::Perf, cfg, 400_000_000, |r| {
        r.dp.schedule_swap(10_000, spec, limits()).expect("schedule");
    })
    .unwrap_or_else(|e| panic!("invariants broken: {e}"));
    let rec = rig.dp.swaps().first().cloned().expect("the swap is recorded");
    (rec, rig.dp.policy().name().to_string(), rig.dp.policy().exits().to_vec())
}

fn check(label: &str, spec: PolicySpec, want: Want) {
    let (rec, running, exits) = swap_in(spec, DataplaneConfig::default());
    assert_eq!(rec.from, "perf", "{label}");
    match want {
        Want::Refused(why) => {
            match &rec.outcome {
                SwapOutcome::Refused(r) => assert!(r.contains(why), "{label}: refused for {r:?}, wanted {why:?}"),
                o => panic!("{label}: {o:?}, wanted a refusal"),
            }
            assert_eq!(running, "perf", "{label}: the old policy keeps running");
        }
        Want::Dropped(kind, hook) => {
            assert_eq!(rec.outcome, SwapOutcome::Accepted, "{label}");
            assert_eq!(running, "passthrough", "{label}: dropped for the fallback");
            let e = exits.last().unwrap_or_else(|| panic!("{label}: no exit recorded"));
            assert_eq!((e.kind, e.hook, e.policy.as_str()), (kind, hook, "hostile"), "{label}: {e:?}");
            assert!(!e.message.is_empty());
        }
    }
}

#[test]
fn loops_in_every_hook_are_interrupted() {
    check("loop_init", adversarial::path("loop_init").into(), Want::Refused("perf_init"));
    check("loop_tenant", adversarial::path("loop_tenant").into(), Want::Refused("on_tenant"));
    check("loop_interval", adversarial::path("loop_interval").into(), Want::Refused("tick_interval_ns"));
    check("loop_request", adversarial::path("loop_request").into(), Want::Dropped(FaultKind::Timeout, "on_request"));
    check("loop_tick", adversarial::path("loop_tick").into(), Want::Dropped(FaultKind::Timeout, "on_tick"));
}

#[test]
fn recursion_memory_growth_and_traps_are_contained() {
    check("deep_recursion", adversarial::path("deep_recursion").into(), Want::Dropped(FaultKind::Trap, "on_tick"));
    check("memory_growth", adversarial::path("memory_growth").into(), Want::Dropped(FaultKind::Trap, "on_tick"));
    check("trap_init", adversarial::path("trap_init").into(), Want::Refused("unreachable"));
    check("trap_tick", adversarial::path("trap_tick").into(), Want::Dropped(FaultKind::Trap, "on_tick"));
    check(
        "trap_nth_request",
        adversarial::path("trap_nth_request").into(),
        Want::Dropped(FaultKind::Trap, "on_request"),
    );
}

#[test]
fn out_of_range_decisions_are_rejected() {
    let invalid = |hook| Want::Dropped(FaultKind::InvalidDecision, hook);
    check("tiny_chunk", adversarial::path("tiny_chunk").into(), invalid("on_request"));
    check("huge_chunk", adversarial::path("huge_chunk").into(), invalid("on_request"));
    check("zero_weight_flood", adversarial::path("zero_weight_flood").into(), invalid("on_request"));
    check("zero_quantum", adversarial::path("zero_quantum").into(), invalid("on_tick"));
}

#[test]
fn malformed_modules_are_refused() {
    let bytes = |label: &str, b: Vec<u8>| PolicySpec::Bytes { label: label.into(), bytes: b.into() };
    let imports = "(import \"env\" \"sleep\" (func (param i32)))";
    check("unknown import", bytes("import", Wat { imports, ..Wat::default() }.bytes()), Want::Refused("env.sleep"));
    // Valid wasm, 2 MiB of data segment: over the 1 MiB module cap, refused
    // before any compilation.
    let huge = format!("(module (memory 64) (data (i32.const 0) \"{}\"))", "\\00".repeat(2 << 20));
    let huge = ::wat::parse_str(&huge).expect("WAT");
    check("huge module", bytes("huge", huge), Want::Refused("more than the 1048576-byte cap"));
    // A memory of 64 MiB from the start: over the 4 MiB memory cap.
    check(
        "huge memory",
        bytes("mem", Wat { memory_pages: 1024, ..Wat::default() }.bytes()),
        Want::Refused("instantiation"),
    );
    // A file that is not wasm.
    let path = std::env::temp_dir().join(format!("perf-hostile-{}.wasm", std::process::id()));
    std::fs::write(&path, "#!/bin/sh\necho not a policy\n").expect("write temp file");
    check("not wasm", path.clone().into(), Want::Refused("not a wasm module"));
    let _ = std::fs::remove_file(path);
}

/// Valid plans that pause a QP forever (one active QP per tenant, a quantum
/// never spent): the watchdog (0.5 ms here) reclaims control, says which
/// QP starved, and the starved QP completes soon after.
#[test]
fn the_watchdog_reclaims_control_from_a_starving_policy() {
    let bound = 500_000u64;
    let cfg = DataplaneConfig { watchdog_ns: bound, ..DataplaneConfig::default() };
    // QP 0 gets a 2 ms backlog; QP 1 one small request.
    let mut ops: Vec<GenOp> =
        (0..400).map(|_| GenOp { tenant: 0, qp: 0, read: false, size: 65_536, burst: 1 }).collect();
    ops.push(GenOp { tenant: 0, qp: 1, read: false, size: 4096, burst: 1 });
    let rig = run_case_with(&[2], &ops, 9, Pol::Perf, cfg, 400_000_000, |r| {
        r.dp.schedule_swap(0, adversarial::path("starve").into(), limits()).expect("schedule");
    })
    .unwrap_or_else(|e| panic!("invariants broken: {e}"));
    assert_eq!(rig.dp.swaps()[0].outcome, SwapOutcome::Accepted);
    let e = rig.dp.policy().exits().last().expect("the watchdog recorded an exit").clone();
    assert_eq!((e.kind, e.hook, e.policy.as_str()), (FaultKind::Watchdog, "watchdog", "hostile"), "{e:?}");
    assert!(e.message.contains("QP 1"), "{}", e.message);
    assert_eq!(rig.dp.policy().name(), "passthrough");
    let small = rig.tenants[0].got.iter().find(|c| c.qp == 1).expect("QP 1 completed");
    let waited = small.completed_ns - small.posted_ns;
    assert!(waited < 2 * bound, "QP 1 waited {waited} ns, the bound is {bound} ns");
}

/// The most zero-weight WRs the host accepts (256 per 1 KiB chunk) on a
/// 32-deep send queue: clamped to what the queue holds, so the policy
/// keeps running (its plans are valid) and nothing stalls.
#[test]
fn a_zero_weight_count_larger_than_the_send_queue_is_clamped() {
    let cfg = DataplaneConfig { sq_depth: 32, ..DataplaneConfig::default() };
    let (rec, running, exits) = swap_in(adversarial::path("zero_weight_max").into(), cfg);
    assert_eq!(rec.outcome, SwapOutcome::Accepted);
    assert_eq!(running, "hostile");
    assert!(exits.is_empty(), "{exits:?}");
}
