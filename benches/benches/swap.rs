//! Hot swap cost:
//! - **loop stall at a swap**: a bulk tenant (8 outstanding 1 MB WRITEs
//!   on one QP, split by `perf` into 16 KiB chunks) runs in virtual time
//!   while the loop is asked to swap, through the loader thread, between
//!   `wasm:perf` and the native `perf` every 2 ms of virtual time. The
//!   wall time of every `round()` is measured; the report gives the
//!   rounds that installed a policy (p50, max) against the other rounds
//!   that ran a policy tick (a swap round also ticks the new policy at
//!   once) and against all other rounds (p50, p99, max);
//! - **module load**: `perf.wasm` loaded cold (compile + validate +
//!   instantiate + init) vs from the module cache (instantiate + init),
//!   and through the loader (`prepare`, with 16 tenants to initialise).
//!
//! `cargo bench -p perf-benches --bench swap`; `PERF_BENCH_QUICK=1` runs
//! each case once (one swap each way, one load of each kind).

use std::time::{Duration, Instant};

use perf_benches::results::Recorder;
use perf_dataplane::engine::{Dataplane, DataplaneConfig, RequestOp, WorkRequest};
use perf_dataplane::policy::cache::ModuleCache;
use perf_dataplane::policy::loader::{prepare, LoadRequest, PolicySpec};
use perf_dataplane::policy::wasm::{embedded, WasmLimits, WasmPolicy};
use perf_dataplane::policy::PolicyHost;
use perf_dataplane::rnic::sim::{SimFabric, PS_PER_NS};
use perf_dataplane::rnic::*;
use perf_policy_sdk::TenantInfo;

const MSG: u32 = 1_000_000;
const DEPTH: usize = 8;

/// Percentile `p` (0..=1) of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Wall ns of each round, by kind.
struct Stall {
    swap_rounds: Vec<f64>,
    tick_rounds: Vec<f64>,
    other_rounds: Vec<f64>,
    swaps: usize,
}

/// Runs the bulk tenant for `swaps` swaps, one every 2 ms of virtual time.
fn stall(swaps: usize) -> Stall {
    let f = SimFabric::pair(1);
    let host = PolicyHost::load("perf").expect("perf");
    let mut dp = Dataplane::new(f.nic(0), host, DataplaneConfig::default()).expect("dataplane");
    let perf_benches::BulkTenant { h, mr, side: _side, remote } = perf_benches::bulk_tenant(&mut dp, &f, MSG as usize);
    let clock = f.nic(0);
    // Load the module once, so that the measured swaps use the cache (as
    // a long-running dataplane does after the first load of a module).
    let _ = PolicyHost::load("wasm:perf").expect("wasm:perf");

    let period_ns = 2_000_000u64;
    let end_ns = period_ns * (swaps as u64 + 2);
    let mut next_swap_ns = period_ns;
    let mut requested = 0usize;
    let mut out = Stall { swap_rounds: Vec::new(), tick_rounds: Vec::new(), other_rounds: Vec::new(), swaps: 0 };
    let (mut outstanding, mut next_id) = (0usize, 0u64);
    loop {
        let now = clock.clock_ns();
        if now >= end_ns {
            break;
        }
        if requested < swaps && now >= next_swap_ns {
            let to = if requested.is_multiple_of(2) { "wasm:perf" } else { "perf" };
            dp.request_swap(PolicySpec::from(to), WasmLimits::default()).expect("request");
            requested += 1;
            next_swap_ns += period_ns;
        }
        while let Some(c) = h.poll() {
            assert!(c.status.is_ok(), "completion error {c:?}");
            outstanding -= 1;
        }
        while outstanding < DEPTH {
            next_id += 1;
            let op = RequestOp::Write { remote };
            let wr = WorkRequest { wr_id: next_id, qp: 0, op, mr, offset: 0, len: MSG, posted_ns: now };
            h.post(wr).expect("post");
            outstanding += 1;
        }
        loop {
            let (ticks, nswaps) = (dp.counters().ticks, dp.swaps().len());
            let t = Instant::now();
            let did = dp.round().expect("round");
            let ns = t.elapsed().as_nanos() as f64;
            if dp.swaps().len() > nswaps {
                out.swap_rounds.push(ns);
            } else if dp.counters().ticks > ticks {
                out.tick_rounds.push(ns);
            } else {
                out.other_rounds.push(ns);
            }
            // While a load is in flight, give the loader thread a core now
            // and then (virtual time stands still meanwhile).
            if dp.pending_swaps() > 0 {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            if !did {
                break;
            }
        }
        if !f.step_until_visible(end_ns * PS_PER_NS) {
            f.advance_to_ns(end_ns);
        }
    }
    out.swaps = dp.swaps().len();
    for v in [&mut out.swap_rounds, &mut out.tick_rounds, &mut out.other_rounds] {
        v.sort_by(f64::total_cmp);
    }
    out
}

/// Median of `n` timings of `f`, in ms.
fn median_ms(n: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = perf_benches::quick();
    let mut rec = Recorder::new("swap");
    let (swaps, loads) = if quick { (2, 1) } else { (40, 9) };

    let s = stall(swaps);
    let (sw, tk, ot) = (&s.swap_rounds, &s.tick_rounds, &s.other_rounds);
    println!("loop stall at a hot swap ({} swaps between perf and wasm:perf through the loader):", s.swaps);
    println!("  swap rounds:  p50 {:.1} us, max {:.1} us", pct(sw, 0.5) / 1e3, pct(sw, 1.0) / 1e3);
    println!(
        "  tick rounds:  p50 {:.1} us, max {:.1} us ({} rounds)",
        pct(tk, 0.5) / 1e3,
        pct(tk, 1.0) / 1e3,
        tk.len()
    );
    println!(
        "  other rounds: p50 {:.2} us, p99 {:.2} us, max {:.1} us ({} rounds)",
        pct(ot, 0.5) / 1e3,
        pct(ot, 0.99) / 1e3,
        pct(ot, 1.0) / 1e3,
        ot.len()
    );
    println!(
        "  swap round p50 / tick round p50: {:.1}x; swap round p50 / other round p50: {:.1}x",
        pct(sw, 0.5) / pct(tk, 0.5),
        pct(sw, 0.5) / pct(ot, 0.5)
    );

    rec.figure("swap/swap_round_p50_us", pct(sw, 0.5) / 1e3, "us");
    rec.figure("swap/swap_round_max_us", pct(sw, 1.0) / 1e3, "us");
    rec.figure("swap/tick_round_p50_us", pct(tk, 0.5) / 1e3, "us");
    rec.figure("swap/other_round_p50_us", pct(ot, 0.5) / 1e3, "us");
    rec.figure("swap/other_round_p99_us", pct(ot, 0.99) / 1e3, "us");
    rec.ratio("swap/swap_round_over_tick_round_p50", pct(sw, 0.5) / pct(tk, 0.5));
    rec.ratio("swap/swap_round_over_other_round_p50", pct(sw, 0.5) / pct(ot, 0.5));

    let bytes = embedded::by_name("perf").expect("the build script embeds policies/perf as wasm");
    let limits = WasmLimits::default();
    let cold = median_ms(loads, || {
        WasmPolicy::from_bytes(bytes, limits).expect("loads");
    });
    ModuleCache::global().clear();
    WasmPolicy::load_cached(bytes, limits).expect("loads");
    let cached = median_ms(loads, || {
        let (_, hit) = WasmPolicy::load_cached(bytes, limits).expect("loads");
        assert!(hit, "served by the cache");
    });
    let tenants: Vec<TenantInfo> = (0..16).map(|t| TenantInfo { tenant: t, qps: 4, weight: 1 }).collect();
    let loader = median_ms(loads, || {
        let spec = PolicySpec::Bytes { label: "perf".into(), bytes: bytes.into() };
        let p = prepare(LoadRequest { id: 0, spec, limits, tenants: tenants.clone() });
        assert!(p.result.is_ok() && p.cached);
    });
    println!("module load, perf.wasm ({} B), median of {loads}:", bytes.len());
    println!("  cold (compile + validate + instantiate + init): {cold:.3} ms");
    println!("  cached (instantiate + init): {cached:.3} ms = {:.0}x faster", cold / cached);
    println!("  loader prepare, cached, 16 tenants x 4 QPs initialised: {loader:.3} ms");
    rec.figure("swap/load_cold_ms", cold, "ms");
    rec.figure("swap/load_cached_ms", cached, "ms");
    rec.figure("swap/loader_prepare_ms", loader, "ms");
    rec.ratio("swap/load_cold_over_cached", cold / cached);
    rec.save();
}
