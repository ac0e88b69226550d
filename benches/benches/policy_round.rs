//! Policy cost: each hook of the `perf` policy, native vs the same code as
//! a wasm module in the sandbox, under both of the host's interruption
//! mechanisms (epoch deadline, fuel), as ratios measured in one run:
//! `on_tick` over 64 tenants (one scheduling round), `on_request`,
//! `on_tenant`, `tick_interval_ns`. Then the interruption mechanisms
//! alone (`perf_benches::interrupt`): per-call and per-loop-iteration
//! cost of a trivial module with no bound, an epoch deadline and fuel.
//! And the cold load time of the module (compile + validate + init).
//!
//! `cargo bench -p perf-benches --bench policy_round`; `PERF_BENCH_QUICK=1`
//! runs fewer calls.

use std::time::{Duration, Instant};

use perf_benches::interrupt::{Bound, Spinner};
use perf_benches::results::Recorder;
use perf_dataplane::policy::perf::Perf;
use perf_dataplane::policy::wasm::{embedded, Interruption, WasmLimits, WasmPolicy};
use perf_policy_sdk::{Policy, RequestInfo, RequestOp, TenantInfo, TenantPlan, TenantStats};

/// 64 tenants: a third bandwidth, a third delay-, a third message-sensitive.
fn stats() -> Vec<TenantStats> {
    (0..64u32)
        .map(|i| {
            let (size, depth) = match i % 3 {
                0 => (1u64 << 20, 128),
                1 => (16, 1),
                _ => (16, 128),
            };
            TenantStats {
                tenant: i,
                qps: 1 + i % 4,
                backlogged_qps: 1 + i % 4,
                max_depth: depth,
                ewma_msg_bytes: size as f64,
                max_msg_bytes: size,
                completed: 100,
                bytes: 100 * size,
                mean_latency_ns: 5_000,
                weight: 1,
            }
        })
        .collect()
}

/// Median ns per call of `f` over 5 runs of `n` calls.
fn time(n: u32, mut f: impl FnMut(u32)) -> f64 {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            for i in 0..n {
                f(i);
            }
            t0.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    perf_benches::median(&mut runs)
}

/// ns per call of each hook, in the order of [`HOOKS`].
type HookCosts = [f64; 4];
/// The hooks measured.
const HOOKS: [&str; 4] = ["on_tick64", "on_request", "on_tenant", "tick_interval"];

fn native_costs(n: u32, s: &[TenantStats], req: &RequestInfo) -> HookCosts {
    let mut p = Perf::default();
    let mut plans = vec![TenantPlan::PASSTHROUGH; s.len()];
    let tick = time(n, |i| p.on_tick(i as u64, s, &mut plans));
    let plan = plans[0];
    let request = time(n, |_| {
        std::hint::black_box(p.on_request(req, &plan));
    });
    let tenant = time(n, |i| p.on_tenant(&TenantInfo { tenant: i % 64, qps: 4, weight: 1 }));
    let interval = time(n, |_| {
        std::hint::black_box(p.tick_interval_ns());
    });
    [tick, request, tenant, interval]
}

fn wasm_costs(n: u32, s: &[TenantStats], req: &RequestInfo, interruption: Interruption) -> HookCosts {
    let bytes = embedded::by_name("perf").expect("the build script embeds policies/perf as wasm");
    let limits = WasmLimits { interruption, ..WasmLimits::default() };
    let mut w = WasmPolicy::from_bytes(bytes, limits).expect("perf.wasm loads");
    let mut plans = vec![TenantPlan::PASSTHROUGH; s.len()];
    let tick = time(n, |i| w.on_tick(i as u64, s, &mut plans).expect("on_tick"));
    let plan = plans[0];
    let request = time(n, |_| {
        std::hint::black_box(w.on_request(req, &plan).expect("on_request"));
    });
    let tenant = time(n, |i| w.on_tenant(&TenantInfo { tenant: i % 64, qps: 4, weight: 1 }).expect("on_tenant"));
    let interval = time(n, |_| {
        std::hint::black_box(w.tick_interval_ns().expect("tick_interval_ns"));
    });
    [tick, request, tenant, interval]
}

fn main() {
    let quick = perf_benches::quick();
    let n = if quick { 2_000 } else { 50_000 };
    let mut rec = Recorder::new("policy_round");
    let s = stats();
    let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 4 };

    println!("policy cost, perf policy: median ns per call (5 runs of {n} calls)");
    let native = native_costs(n, &s, &req);
    let epoch = wasm_costs(n, &s, &req, Interruption::Epoch(Duration::from_millis(50)));
    let fuel = wasm_costs(n, &s, &req, Interruption::Fuel(u64::MAX / 2));
    println!(
        "  {:<14} {:>10} {:>10} {:>10} {:>12} {:>11}",
        "hook", "native", "wasm/epoch", "wasm/fuel", "epoch/native", "fuel/native"
    );
    for (i, hook) in HOOKS.iter().enumerate() {
        let (nat, ep, fu) = (native[i].max(0.1), epoch[i], fuel[i]);
        println!("  {hook:<14} {nat:>10.1} {ep:>10.1} {fu:>10.1} {:>11.2}x {:>10.2}x", ep / nat, fu / nat);
        rec.figure(&format!("policy/{hook}/native_ns"), nat, "ns");
        rec.figure(&format!("policy/{hook}/wasm_epoch_ns"), ep, "ns");
        rec.figure(&format!("policy/{hook}/wasm_fuel_ns"), fu, "ns");
        // Hooks that cost a few native ns give ratios too unstable to guard.
        if nat >= 5.0 || *hook == "on_request" {
            rec.ratio(&format!("policy/{hook}/wasm_epoch_over_native"), ep / nat);
            rec.ratio(&format!("policy/{hook}/wasm_fuel_over_native"), fu / nat);
        } else {
            rec.figure(&format!("policy/{hook}/wasm_epoch_over_native"), ep / nat, "x");
            rec.figure(&format!("policy/{hook}/wasm_fuel_over_native"), fu / nat, "x");
        }
    }

    // The mechanisms alone, on a trivial module.
    let iters = 10_000;
    let calls = if quick { 2_000 } else { 50_000 };
    let spins = if quick { 20 } else { 500 };
    println!("interruption alone (spin module): per call (spin(0)), per loop iteration (spin({iters}))");
    let mut per_call = [0.0; 3];
    let mut per_iter = [0.0; 3];
    for (k, b) in [Bound::None, Bound::Epoch, Bound::Fuel].into_iter().enumerate() {
        let mut sp = Spinner::new(b).expect("the spin module compiles");
        per_call[k] = time(calls, |_| {
            std::hint::black_box(sp.call(0).expect("spin"));
        });
        per_iter[k] = time(spins, |_| {
            std::hint::black_box(sp.call(iters).expect("spin"));
        }) / iters as f64;
        println!("  {:<6} {:>7.1} ns per call, {:>6.3} ns per iteration", b.label(), per_call[k], per_iter[k]);
        rec.figure(&format!("interrupt/{}/ns_per_call", b.label()), per_call[k], "ns");
        rec.figure(&format!("interrupt/{}/ns_per_iteration", b.label()), per_iter[k], "ns");
    }
    for (k, b) in [(1, "epoch"), (2, "fuel")] {
        println!(
            "  {b}: {:.2}x the unbounded call, {:.2}x the unbounded iteration",
            per_call[k] / per_call[0],
            per_iter[k] / per_iter[0]
        );
        rec.ratio(&format!("interrupt/{b}_over_none_per_call"), per_call[k] / per_call[0]);
        rec.ratio(&format!("interrupt/{b}_over_none_per_iteration"), per_iter[k] / per_iter[0]);
    }

    let bytes = embedded::by_name("perf").expect("the build script embeds policies/perf as wasm");
    let mut loads: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            let _ = WasmPolicy::from_bytes(bytes, WasmLimits::default()).expect("perf.wasm loads");
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let load = perf_benches::median(&mut loads);
    println!("load perf.wasm cold (compile + validate + init, {} B): median {load:.2} ms", bytes.len());
    rec.figure("policy/load_cold_ms", load, "ms");
    rec.save();
}
