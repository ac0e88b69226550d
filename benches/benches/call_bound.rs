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
//! `docs/hostile-policies.md`), or one that calls the host's log in an
//! endless loop (`log_loop_tick`); the loop runs until the module's call is
//! cut off and the host has fallen back to passthrough, and the longest
//! round of that window is its stall. The next trial swaps the module in
//! again (from passthrough). Reported: the max and median stall over all
//! trials, per module and together, the ratio of the max to the 1 ms aim,
//! and, for comparison, one trial of each module under the old default (a
//! 50 ms epoch deadline).
//!
//! Wall time on a shared machine: a round the OS deschedules is longer by
//! the time it waited, which the stall includes. So each trial also notes
//! whether the loop's thread was preempted meanwhile (its
//! `nonvoluntary_ctxt_switches`), and the report gives the stalls of the
//! trials that were not apart.
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

/// The hostile modules and the hook each loops in: two plain loops, which
/// run out of fuel, and one that spends little fuel per unit of time
/// (`log_loop_tick`: the host's log on every turn), which the wall-clock
/// backstop stops.
const MODULES: [(&str, &str); 3] =
    [("loop_tick", "on_tick"), ("loop_request", "on_request"), ("log_loop_tick", "on_tick")];

/// The CPU time of the epoch ticker threads so far, in ns (their
/// `/proc/self/task/*/schedstat`), if readable.
fn ticker_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = t.ok()?.path();
        if std::fs::read_to_string(dir.join("comm")).ok()?.trim() == "perf-wasm-epoch" {
            let s = std::fs::read_to_string(dir.join("schedstat")).ok()?;
            total += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(total)
}

/// The times the OS has preempted this thread so far
/// (`nonvoluntary_ctxt_switches` of `/proc/thread-self/status`), if readable.
fn preemptions() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    s.lines().find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
}

/// One trial's stall, and whether the OS preempted the loop's thread
/// meanwhile (then the stall includes time the thread did not run).
struct Stall {
    longest: Duration,
    preempted: bool,
}

/// Swaps `module` in and runs the loop until the host has dropped it:
/// the longest round from the swap's request to the fallback.
fn trial(load: &mut Load<NullRnic>, module: &Arc<[u8]>, label: &str, hook: &str, limits: WasmLimits) -> Stall {
    let before = preemptions();
    // Exits are kept up to a bound; the fallbacks counter counts them all.
    let (swaps, fallbacks) = (load.dp.swaps().len(), load.dp.policy().counters.fallbacks);
    let spec = PolicySpec::Bytes { label: label.into(), bytes: module.clone() };
    load.dp.request_swap(spec, limits).expect("request a swap");
    let t0 = Instant::now();
    let mut longest = Duration::ZERO;
    while load.dp.policy().counters.fallbacks == fallbacks {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{label} was not dropped within 30 s: {} swaps (before {swaps}: {:?}), {} pending, running {}, {:?}",
            load.dp.swaps().len(),
            load.dp.swaps().last(),
            load.dp.pending_swaps(),
            load.dp.policy().name(),
            load.dp.counters()
        );
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
    let preempted = match (before, preemptions()) {
        (Some(a), Some(b)) => b > a,
        _ => false,
    };
    Stall { longest, preempted }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let trials = if perf_benches::quick() { 5 } else { 40 };
    let mut rec = Recorder::new("call_bound");
    let shape = LoadShape {
        tenants: 4,
        qps: 2,
        depth: 8,
        msg: 65_536,
        sensitive: Sensitive::Delay,
        sq_depth: None,
        post_list: 1,
    };
    let policy = PolicyHost::load("wasm:perf").expect("wasm:perf loads");
    let mut load = Load::new(NullRnic::new(), policy, shape).expect("the load sets up");
    let (ticker0, wall0) = (ticker_cpu_ns(), Instant::now());
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
    let (mut all, mut clean): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for ((label, hook), bytes) in MODULES.iter().zip(&modules) {
        // One load first, so that the trials swap a cached module in.
        let _ = trial(&mut load, bytes, label, hook, WasmLimits::default());
        let stalls: Vec<Stall> =
            (0..trials).map(|_| trial(&mut load, bytes, label, hook, WasmLimits::default())).collect();
        let mut v: Vec<f64> = stalls.iter().map(|s| ms(s.longest)).collect();
        let mut c: Vec<f64> = stalls.iter().filter(|s| !s.preempted).map(|s| ms(s.longest)).collect();
        let (p50, cp50) = (perf_benches::median(&mut v), perf_benches::median(&mut c));
        let (max, cmax) = (v.last().copied().unwrap_or(0.0), c.last().copied().unwrap_or(0.0));
        let before = ms(trial(&mut load, bytes, label, hook, old).longest);
        println!(
            "  {label:<13} ({hook}): max {max:.3} ms, median {p50:.3} ms; not preempted ({} of {trials}): max {cmax:.3} ms, median {cp50:.3} ms; under a 50 ms epoch deadline: {before:.1} ms",
            c.len()
        );
        rec.figure(&format!("call_bound/{label}/max_stall_ms"), max, "ms");
        rec.figure(&format!("call_bound/{label}/median_stall_ms"), p50, "ms");
        rec.figure(&format!("call_bound/{label}/max_stall_not_preempted_ms"), cmax, "ms");
        rec.figure(&format!("call_bound/{label}/epoch50_stall_ms"), before, "ms");
        all.extend(v);
        clean.extend(c);
    }
    let p50 = perf_benches::median(&mut all);
    let max = all.last().copied().unwrap_or(0.0);
    perf_benches::median(&mut clean);
    let cmax = clean.last().copied().unwrap_or(0.0);
    let aim = ms(AIM);
    println!(
        "  all: max {max:.3} ms, median {p50:.3} ms; max / aim ({aim} ms) = {:.2}, median / aim = {:.2}; trials not preempted ({} of {}): max {cmax:.3} ms = {:.2} of the aim",
        max / aim,
        p50 / aim,
        clean.len(),
        all.len(),
        cmax / aim
    );
    rec.figure("call_bound/normal_round_p50_ms", normal_p50, "ms");
    rec.figure("call_bound/max_stall_ms", max, "ms");
    rec.figure("call_bound/median_stall_ms", p50, "ms");
    rec.figure("call_bound/max_stall_not_preempted_ms", cmax, "ms");
    rec.figure("call_bound/trials_preempted", (all.len() - clean.len()) as f64, "trials");
    if let (Some(a), Some(b)) = (ticker0, ticker_cpu_ns()) {
        let share = b.saturating_sub(a) as f64 / wall0.elapsed().as_nanos() as f64;
        println!("  the epoch ticker thread(s): {:.2} % of a core", share * 100.0);
        rec.figure("call_bound/ticker_cpu_percent", share * 100.0, "%");
    }
    rec.ratio("call_bound/max_stall_over_aim", max / aim);
    rec.ratio("call_bound/median_stall_over_aim", p50 / aim);
    rec.ratio("call_bound/max_stall_not_preempted_over_aim", cmax / aim);
    rec.save();
}
