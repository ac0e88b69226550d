//! Policy cost: one `perf` round (`on_tick` over 64 tenants) and one
//! `on_request`, native vs the same code as a wasm module in the sandbox
//! (epoch and fuel interruption), as ratios in one run; and the cold load
//! time of the module (compile + validate + init).
//!
//! `cargo bench -p perf-benches --bench policy_round`; `PERF_BENCH_QUICK=1`
//! runs fewer rounds.

use std::time::{Duration, Instant};

use perf_dataplane::policy::perf::Perf;
use perf_dataplane::policy::wasm::{embedded, Interruption, WasmLimits, WasmPolicy};
use perf_policy_sdk::{Policy, RequestInfo, RequestOp, TenantPlan, TenantStats};

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
                p99_latency_ns: 8_000,
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
    runs.sort_by(f64::total_cmp);
    runs[2]
}

fn main() {
    let n = if std::env::var_os("PERF_BENCH_QUICK").is_some() { 2_000 } else { 50_000 };
    let bytes = embedded::by_name("perf").expect("the build script embeds policies/perf as wasm");
    let s = stats();
    let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 4 };

    let mut native = Perf::default();
    let mut plans = vec![TenantPlan::PASSTHROUGH; s.len()];
    let native_tick = time(n, |i| native.on_tick(i as u64, &s, &mut plans));
    let plan = plans[0];
    let native_req = time(n, |_| {
        std::hint::black_box(native.on_request(&req, &plan));
    });
    println!("native: on_tick(64) {native_tick:.0} ns, on_request {native_req:.1} ns");

    for (label, i) in
        [("epoch", Interruption::Epoch(Duration::from_millis(50))), ("fuel", Interruption::Fuel(u64::MAX / 2))]
    {
        let limits = WasmLimits { interruption: i, ..WasmLimits::default() };
        let mut w = WasmPolicy::from_bytes(bytes, limits).expect("perf.wasm loads");
        let tick = time(n, |i| w.on_tick(i as u64, &s, &mut plans).expect("on_tick"));
        let req_ns = time(n, |_| {
            std::hint::black_box(w.on_request(&req, &plan).expect("on_request"));
        });
        println!(
            "wasm ({label}): on_tick(64) {tick:.0} ns = {:.2}x native, on_request {req_ns:.1} ns = {:.2}x native",
            tick / native_tick,
            req_ns / native_req.max(0.1)
        );
    }

    let mut loads: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            let _ = WasmPolicy::from_bytes(bytes, WasmLimits::default()).expect("perf.wasm loads");
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    loads.sort_by(f64::total_cmp);
    println!("load perf.wasm cold (compile + validate + init, {} B): median {:.2} ms", bytes.len(), loads[2]);
}
