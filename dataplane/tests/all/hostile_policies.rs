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
//! The calls run under a 50 ms epoch deadline (a looping hook costs 50 ms
//! of wall time, once).

use crate::common;

use std::time::Duration;

use common::hostile::Want;
use common::*;
use perf_dataplane::engine::{DataplaneConfig, SwapOutcome, SwapRecord};
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{adversarial, CallBudget, FaultKind, Interruption, WasmLimits};
use perf_dataplane::policy::ExitInfo;

/// The bounds of these tests: 50 ms per call, 4 MiB of memory, 1 MiB of
/// module. The wall-clock bound is loose so that it cannot beat a stack
/// overflow on a loaded machine: at 5 ms, `deep_recursion` was once cut
/// off as a timeout before it overflowed its stack, with CI's other test
/// binaries running beside it.
fn limits() -> WasmLimits {
    hostile::limits(Interruption::Epoch(Duration::from_millis(50)))
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

/// Runs the traffic under `perf`, swaps to `spec` at 10 us, and returns the
/// swap record, the policy running at the end, and its exit records.
fn swap_in(spec: PolicySpec, cfg: DataplaneConfig) -> (SwapRecord, String, Vec<ExitInfo>) {
    swap_in_under(spec, cfg, limits())
}

/// [`swap_in`] with the module under `limits`.
fn swap_in_under(spec: PolicySpec, cfg: DataplaneConfig, limits: WasmLimits) -> (SwapRecord, String, Vec<ExitInfo>) {
    let ops = traffic();
    let rig = run_case_with(&[2, 2], &ops, 5, Pol::Perf, cfg, 400_000_000, |r| {
        r.dp.schedule_swap(10_000, spec, limits).expect("schedule");
    })
    .unwrap_or_else(|e| panic!("invariants broken: {e}"));
    let rec = rig.dp.swaps().first().cloned().expect("the swap is recorded");
    (rec, rig.dp.policy().name().to_string(), rig.dp.policy().exits().to_vec())
}

/// Swaps in the hostile module `label` and checks the outcome [`hostile::ALL`] gives it.
fn check(label: &str) {
    let h = hostile::by_label(label);
    let (rec, running, exits) = swap_in(h.spec(), DataplaneConfig::default());
    assert_eq!(rec.from, "perf", "{label}");
    match h.want {
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
        Want::Valid => panic!("{label}: a valid module has a test of its own"),
    }
}

#[test]
fn loops_in_every_hook_are_interrupted() {
    ["loop_init", "loop_tenant", "loop_interval", "loop_request", "loop_tick", "log_loop_tick"]
        .into_iter()
        .for_each(check);
}

/// The default per-call budget (issue 16, `CallBudget`): a hook that loops
/// runs out of its fuel (a trap, `Timeout`), the host records the exit
/// and falls back to passthrough, and every request still completes once.
/// With fuel without end, the wall-clock backstop stops the same loop.
/// Not timed: the bench `call_bound` measures the stall.
#[test]
fn the_default_call_budget_cuts_off_loops_and_traffic_goes_on() {
    let default = hostile::limits(WasmLimits::default().interruption);
    assert!(matches!(default.interruption, Interruption::Budget(_)), "the default bound is the call budget");
    let backstop_only = hostile::limits(Interruption::Budget(CallBudget {
        fuel: u64::MAX / 2,
        tick_fuel_per_tenant: 0,
        backstop: Duration::from_millis(1),
    }));
    // A tight loop spends its fuel at a rate near the backstop's bar (a
    // fuel unit or two per ns), so on a loaded machine whichever bound
    // comes first stops it; both are the call budget.
    let either = ["fuel", "interrupt"].as_slice();
    for (label, hook, limits, why) in [
        ("loop_tick", "on_tick", default, either),
        ("loop_request", "on_request", default, either),
        ("loop_tick", "on_tick", backstop_only, ["interrupt"].as_slice()),
        // Little fuel per unit of time: the default backstop stops it.
        ("log_loop_tick", "on_tick", default, ["interrupt"].as_slice()),
    ] {
        let (rec, running, exits) = swap_in_under(adversarial::path(label).into(), DataplaneConfig::default(), limits);
        assert_eq!(rec.outcome, SwapOutcome::Accepted, "{label}");
        assert_eq!(running, "passthrough", "{label}: dropped for the fallback");
        let e = exits.last().unwrap_or_else(|| panic!("{label}: no exit recorded"));
        assert_eq!((e.kind, e.hook, e.policy.as_str()), (FaultKind::Timeout, hook, "hostile"), "{label}: {e:?}");
        assert!(why.iter().any(|w| e.message.contains(w)), "{label}: stopped by {why:?}? {}", e.message);
    }
}

#[test]
fn recursion_memory_growth_and_traps_are_contained() {
    ["deep_recursion", "memory_growth", "trap_init", "trap_tick", "trap_nth_request"].into_iter().for_each(check);
}

#[test]
fn out_of_range_decisions_are_rejected() {
    ["tiny_chunk", "huge_chunk", "zero_weight_flood", "zero_quantum"].into_iter().for_each(check);
}

#[test]
fn malformed_modules_are_refused() {
    // An unknown import; valid wasm over the module cap; a memory over the
    // memory cap; bytes that are not wasm.
    ["unknown_import", "huge_module", "huge_memory", "not_wasm"].into_iter().for_each(check);
    // A file that is not wasm, by path.
    let path = std::env::temp_dir().join(format!("perf-hostile-{}.wasm", std::process::id()));
    std::fs::write(&path, "#!/bin/sh\necho not a policy\n").expect("write temp file");
    let (rec, running, _) = swap_in(path.clone().into(), DataplaneConfig::default());
    let _ = std::fs::remove_file(path);
    assert!(matches!(&rec.outcome, SwapOutcome::Refused(r) if r.contains("not a wasm module")), "{rec:?}");
    assert_eq!(running, "perf");
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
    let small = rig.tenants[0].got.iter().find(|c| c.qp == 1).expect("QP 1 completed");
    let waited = small.completed_ns - small.posted_ns;
    assert!(waited < 2 * bound, "QP 1 waited {waited} ns, the bound is {bound} ns");
    // Once QP 1 drained, the policy came back: the reclaim is undone.
    let back = rig.dp.swaps().iter().find(|s| s.to.contains("reinstated by the watchdog")).expect("reinstated");
    assert_eq!((back.from.as_str(), &back.outcome), ("passthrough", &SwapOutcome::Accepted), "{back:?}");
    assert!(back.at_ns >= e.at_ns + bound, "{back:?} after {e:?}");
    assert_eq!(rig.dp.policy().name(), "hostile");
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
