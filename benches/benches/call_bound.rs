//! The longest loop stall a looping hostile policy causes (issue 16's
//! "tight bound on a policy call": at most 1 ms).
//!
//! A running dataplane over the null RNIC (`perf_benches::null_rnic`, so
//! that a round costs the loop alone, in wall time) carries four bulk
//! tenants (2 QPs each, 8 WRITEs of 64 KiB outstanding per QP) and a
//! delay-sensitive one, under the built-in `wasm:perf`. Then, again and
//! again, the loader is asked to swap in a hostile module of
//! `policies/adversarial` that loops forever in `on_tick` (`loop_tick`) or
//! in `on_request` (`loop_request`), under the host's default limits
//! (`WasmLimits::default()`, the per-call budget of
//! `docs/hostile-policies.md`); the loop runs until the module's call is
//! cut off and the host has fallen back to passthrough, and the longest
//! round of that window is its stall. The next trial swaps the module in
//! again (from passthrough). Reported: the max and median stall over all
//! trials, per module and together, the ratio of the max to the 1 ms aim,
//! and, for comparison, one trial of each module under the old default (a
//! 50 ms epoch deadline).
//!
//! Wall time on a shared machine: a round the OS deschedules is longer by
//! the time it waited, which the stall includes.
//!
//! `cargo bench --workspace --bench call_bound`; `PERF_BENCH_QUICK=1` runs
//! 5 trials of each module instead of 40.

use std::sync::Arc;
use std::time::{Duration, Instant};

use perf_benches::load::{Load, LoadShape, Sensitive};
use perf_benches::null_rnic::NullRnic;
use perf_benches::results::Recorder;
use perf_dataplane::engine::SwapOutcome;
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{adversarial, FaultKind, Interruption, WasmLimits};
use perf_dataplane::policy::PolicyHost;

/// The aim: no looping call stalls the loop for longer than this.
const AIM: Duration = Duration::from_millis(1);

/// The hostile modules and the hook each loops in.
const MODULES: [(&str, &str); 2] = [("loop_tick", "on_tick"), ("loop_request", "on_request")];

/// Swaps `module` in and runs the loop until the host has dropped it:
/// the longest round from the swap's request to the fallback.
fn trial(load: &mut Load<NullRnic>, module: &Arc<[u8]>, label: &str, hook: &str, limits: WasmLimits) -> Duration {
    let (swaps, exits) = (load.dp.swaps().len(), load.dp.policy().exits().len());
    let spec = PolicySpec::Bytes { label: label.into(), bytes: module.clone() };
    load.dp.request_swap(spec, limits).expect("request a swap");
    let t0 = Instant::now();
    let mut longest = Duration::ZERO;
    while load.dp.policy().exits().len() == exits {
        assert!(t0.elapsed() < Duration::from_secs(30), "{label} was not dropped within 30 s");
        longest = longest.max(load.step().expect("round"));
        // While the loader prepares the module, give it a core now and then.
        if load.dp.pending_swaps() > 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let rec = &load.dp.swaps()[swaps];
    assert_eq!(rec.outcome, SwapOutcome::Accepted, "{label}: {rec:?}");
    let e = load.dp.policy().exits().last().expect("an exit is recorded");
    assert_eq!((e.kind, e.hook), (FaultKind::Timeout, hook), "{label}: {e:?}");
    assert_eq!(load.dp.policy().name(), "passthrough", "{label}: dropped for the fallback");
    if std::env::var_os("CB_DEBUG").is_some() {
        eprintln!("{label}: {} longest {longest:?}", e.message);
    }
    longest
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let trials = if perf_benches::quick() { 5 } else { 40 };
    let mut rec = Recorder::new("call_bound");
    let shape = LoadShape { tenants: 4, qps: 2, depth: 8, msg: 65_536, sensitive: Sensitive::Delay, sq_depth: None };
    let policy = PolicyHost::load("wasm:perf").expect("wasm:perf loads");
    let mut load = Load::new(NullRnic::new(), policy, shape).expect("the load sets up");
    // Normal rounds under the legitimate wasm policy, for reference.
    let mut normal: Vec<f64> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        normal.push(ms(load.step().expect("round")));
    }
    let normal_p50 = perf_benches::median(&mut normal);
    let normal_max = normal.last().copied().unwrap_or(0.0);
    assert_eq!(load.dp.policy().exits().len(), 0, "wasm:perf runs without a fault under the default budget");

    let modules: Vec<Arc<[u8]>> = MODULES
        .iter()
        .map(|(m, _)| {
            std::fs::read(adversarial::path(m)).expect("the build script writes the adversarial modules").into()
        })
        .collect();
    let old = WasmLimits { interruption: Interruption::Epoch(Duration::from_millis(50)), ..WasmLimits::default() };
    println!(
        "loop stall of a looping hook, {trials} trials per module, default limits {:?}:",
        WasmLimits::default().interruption
    );
    println!("  normal rounds under wasm:perf: p50 {:.4} ms, max {normal_max:.3} ms", normal_p50);
    let mut all: Vec<f64> = Vec::new();
    for ((label, hook), bytes) in MODULES.iter().zip(&modules) {
        // One load first, so that the trials swap a cached module in.
        let _ = trial(&mut load, bytes, label, hook, WasmLimits::default());
        let mut v: Vec<f64> =
            (0..trials).map(|_| ms(trial(&mut load, bytes, label, hook, WasmLimits::default()))).collect();
        let p50 = perf_benches::median(&mut v);
        let max = v.last().copied().unwrap_or(0.0);
        let before = ms(trial(&mut load, bytes, label, hook, old));
        println!(
            "  {label:<13} ({hook}): max {max:.3} ms, median {p50:.3} ms; under a 50 ms epoch deadline: {before:.1} ms"
        );
        rec.figure(&format!("call_bound/{label}/max_stall_ms"), max, "ms");
        rec.figure(&format!("call_bound/{label}/median_stall_ms"), p50, "ms");
        rec.figure(&format!("call_bound/{label}/epoch50_stall_ms"), before, "ms");
        all.extend(v);
    }
    let p50 = perf_benches::median(&mut all);
    let max = all.last().copied().unwrap_or(0.0);
    let aim = ms(AIM);
    println!(
        "  all: max {max:.3} ms, median {p50:.3} ms; max / aim ({aim} ms) = {:.2}, median / aim = {:.2}",
        max / aim,
        p50 / aim
    );
    rec.figure("call_bound/normal_round_p50_ms", normal_p50, "ms");
    rec.figure("call_bound/max_stall_ms", max, "ms");
    rec.figure("call_bound/median_stall_ms", p50, "ms");
    rec.ratio("call_bound/max_stall_over_aim", max / aim);
    rec.ratio("call_bound/median_stall_over_aim", p50 / aim);
    rec.save();
}
