//! Scale: the dataplane loop's cost per round and per WQE as tenants and
//! QPs grow (10, 100, 1000 bandwidth tenants x 1, 2, 4, 8 QPs, each QP
//! keeping 2 WRITEs of 1 MB outstanding, beside one message-rate tenant so
//! that `perf` splits with zero-weight WRs), over the null RNIC (the loop
//! alone, wall time inside `round()`), under `passthrough`, native `perf`,
//! the wasm `perf` module and `fairshare` (native: its fair admission is
//! the dataplane's, the policy only sizes windows and chunks). Every data
//! QP has a 1024-slot send queue (beyond 1024 QPs they oversubscribe the
//! shared CQs, which they then share under a budget).
//!
//! Then the paper's scale case, 1000 `B_App` tenants x 8 QPs beside one
//! `M_App`: set up as the runner would (default configuration); if the
//! dataplane refuses it, the reason is recorded. And two larger shapes
//! under wasm `perf`: 3000 tenants x 1 QP, and 1250 tenants x 8 QPs
//! (10,000 QPs).
//!
//! `cargo bench -p perf-benches --bench scale`; `PERF_BENCH_QUICK=1` runs
//! each cell once, briefly; `PERF_BENCH_ONLY=TEXT` runs only the cells
//! whose key (`perf-wasm/1000x8`, `scale_case`, `scale_large/3000x1`)
//! contains TEXT (for profiling one). Each cell is the median of 5 runs, the cells
//! measured in turn within a run. `bench-report` plots the curve.

use std::time::Duration;

use perf_benches::load::{DriveSample, Load, LoadShape, Sensitive};
use perf_benches::null_rnic::NullRnic;
use perf_benches::results::Recorder;
use perf_dataplane::policy::PolicyHost;

/// The policies of the curve: label, how to make it.
const POLICIES: [(&str, &str); 4] =
    [("passthrough", "passthrough"), ("perf-native", "perf"), ("perf-wasm", "wasm:perf"), ("fairshare", "fairshare")];
/// Bandwidth tenants of the curve.
pub const TENANTS: [u32; 3] = [10, 100, 1000];
/// QPs per bandwidth tenant of the curve.
pub const QPS: [u32; 4] = [1, 2, 4, 8];
/// Message size and depth of each bandwidth QP.
const MSG: u32 = 1 << 20;
const DEPTH: u32 = 2;

/// One drive of `shape` under `policy`.
fn measure(policy: &str, shape: LoadShape, warmup: Duration, budget: Duration) -> Result<DriveSample, String> {
    let host = PolicyHost::load(policy).map_err(|e| e.to_string())?;
    let mut load = Load::new(NullRnic::new(), host, shape).map_err(|e| e.to_string())?;
    load.drive(warmup, budget).map_err(|e| e.to_string())
}

/// The sample with the median ns per round.
fn median_sample(mut v: Vec<DriveSample>) -> DriveSample {
    v.sort_by(|a, b| a.ns_per_round().total_cmp(&b.ns_per_round()));
    v[v.len() / 2]
}

fn main() {
    let quick = perf_benches::quick();
    let (runs, warmup, budget) = if quick {
        (1, Duration::from_millis(5), Duration::from_millis(20))
    } else {
        (5, Duration::from_millis(40), Duration::from_millis(150))
    };
    let mut rec = Recorder::new("scale");
    println!(
        "scale: null RNIC, {MSG} B WRITEs x {DEPTH} outstanding per QP + one M tenant, {} ms per run, median of {runs}",
        budget.as_millis()
    );
    // Every run measures each cell once, in turn, so that a change in the
    // machine's load spreads over all cells instead of skewing a few.
    let only = std::env::var("PERF_BENCH_ONLY").unwrap_or_default();
    let cells: Vec<(&str, &str, u32, u32)> = POLICIES
        .iter()
        .flat_map(|&(label, policy)| TENANTS.iter().flat_map(move |&t| QPS.iter().map(move |&q| (label, policy, t, q))))
        .filter(|&(label, _, t, q)| format!("{label}/{t}x{q}").contains(only.as_str()))
        .collect();
    let shape = |t, q| LoadShape {
        tenants: t,
        qps: q,
        depth: DEPTH,
        msg: MSG,
        sensitive: Sensitive::Message,
        sq_depth: Some(1024),
        post_list: 1,
    };
    let mut samples: Vec<Result<Vec<DriveSample>, String>> = vec![Ok(Vec::new()); cells.len()];
    for _ in 0..runs {
        for (i, &(_, policy, t, q)) in cells.iter().enumerate() {
            if let Ok(v) = &mut samples[i] {
                match measure(policy, shape(t, q), warmup, budget) {
                    Ok(m) => v.push(m),
                    Err(e) => samples[i] = Err(e),
                }
            }
        }
    }
    for (&(label, _, t, q), result) in cells.iter().zip(samples) {
        let key = format!("scale/{label}/{t}x{q}");
        match result {
            Ok(v) => {
                let m = median_sample(v);
                println!(
                    "  {label:<12} {t:>5} tenants x {q} QPs: {:>9.0} ns/round {:>6.1} ns/WQE {:>7.2} M WQEs/s ({} rounds, {} WQEs, {} zero-weight)",
                    m.ns_per_round(),
                    m.ns_per_wqe(),
                    m.wqes_per_s() / 1e6,
                    m.rounds,
                    m.wqes,
                    m.zero_weight
                );
                rec.figure(&format!("{key}/ns_per_round"), m.ns_per_round(), "ns");
                rec.figure(&format!("{key}/ns_per_wqe"), m.ns_per_wqe(), "ns");
                rec.figure(&format!("{key}/wqes_per_s"), m.wqes_per_s() / 1e6, "M WQEs/s");
            }
            Err(e) => {
                println!("  {label:<12} {t:>5} tenants x {q} QPs: refused: {e}");
                rec.note(&format!("{key}/refused"), &e);
            }
        }
    }
    // Growth of the per-WQE cost over the curve, as ratios of this run.
    for (label, _) in POLICIES {
        let get = |rec: &Recorder, cell: &str| rec.value(&format!("scale/{label}/{cell}/ns_per_wqe"));
        if let (Some(lo), Some(hi)) = (get(&rec, "10x1"), get(&rec, "1000x1")) {
            println!("  {label}: ns/WQE at 1000x1 / at 10x1: {:.2}x", hi / lo);
            rec.ratio(&format!("scale/{label}/wqe_cost_1000x1_over_10x1"), hi / lo);
        }
        if let (Some(lo), Some(hi)) = (get(&rec, "100x1"), get(&rec, "100x8")) {
            println!("  {label}: ns/WQE at 100x8 / at 100x1: {:.2}x", hi / lo);
            rec.ratio(&format!("scale/{label}/wqe_cost_100x8_over_100x1"), hi / lo);
        }
        if let (Some(lo), Some(hi)) = (get(&rec, "10x1"), get(&rec, "1000x8")) {
            println!("  {label}: ns/WQE at 1000x8 / at 10x1: {:.2}x (aim 1.5x)", hi / lo);
            rec.ratio(&format!("scale/{label}/wqe_cost_1000x8_over_10x1"), hi / lo);
        }
    }
    if let (Some(w), Some(p)) =
        (rec.value("scale/perf-wasm/100x8/ns_per_wqe"), rec.value("scale/passthrough/100x8/ns_per_wqe"))
    {
        rec.ratio("scale/wqe_cost_perf_wasm_over_passthrough_100x8", w / p);
    }

    // The paper's scale case, as the runner would set it up.
    if "scale_case".contains(only.as_str()) {
        scale_case(&mut rec, runs, warmup, budget);
    }
    // Larger shapes, once each.
    for (t, q) in [(3000u32, 1u32), (1250, 8)] {
        if format!("scale_large/{t}x{q}").contains(only.as_str()) {
            large(&mut rec, t, q, warmup, budget);
        }
    }
    if only.is_empty() {
        rec.save();
    } else {
        println!("PERF_BENCH_ONLY is set: figures not saved");
    }
}

/// The paper's scale case, 1000 B tenants x 8 QPs + one M tenant, under
/// wasm `perf`: the median of `runs` drives.
fn scale_case(rec: &mut Recorder, runs: usize, warmup: Duration, budget: Duration) {
    let shape = LoadShape {
        tenants: 1000,
        qps: 8,
        depth: DEPTH,
        msg: MSG,
        sensitive: Sensitive::Message,
        sq_depth: None,
        post_list: 1,
    };
    match (0..runs).map(|_| measure("wasm:perf", shape, warmup, budget)).collect::<Result<Vec<_>, _>>() {
        Ok(v) => {
            let m = median_sample(v);
            println!(
                "scale case (1000 B x 8 QPs + M, wasm perf, median of {runs}): {:.0} ns/round, {:.1} ns/WQE, {:.2} M WQEs/s",
                m.ns_per_round(),
                m.ns_per_wqe(),
                m.wqes_per_s() / 1e6
            );
            rec.figure("scale_case/wqes_per_s", m.wqes_per_s() / 1e6, "M WQEs/s");
            rec.figure("scale_case/ns_per_round", m.ns_per_round(), "ns");
        }
        Err(e) => {
            println!("scale case (1000 B x 8 QPs + M, {} QPs): refused: {e}", shape.total_qps());
            rec.note("scale_case/refused", &e);
        }
    }
}

/// One larger shape, `t` tenants x `q` QPs, under wasm `perf`, once.
fn large(rec: &mut Recorder, t: u32, q: u32, warmup: Duration, budget: Duration) {
    let shape = LoadShape {
        tenants: t,
        qps: q,
        depth: DEPTH,
        msg: MSG,
        sensitive: Sensitive::Message,
        sq_depth: None,
        post_list: 1,
    };
    let key = format!("scale_large/perf-wasm/{t}x{q}");
    match measure("wasm:perf", shape, warmup, budget) {
        Ok(m) => {
            println!(
                "large (wasm perf) {t} tenants x {q} QPs ({} QPs): {:.0} ns/round, {:.1} ns/WQE, {:.2} M WQEs/s",
                shape.total_qps(),
                m.ns_per_round(),
                m.ns_per_wqe(),
                m.wqes_per_s() / 1e6
            );
            rec.figure(&format!("{key}/ns_per_wqe"), m.ns_per_wqe(), "ns");
            rec.figure(&format!("{key}/wqes_per_s"), m.wqes_per_s() / 1e6, "M WQEs/s");
        }
        Err(e) => {
            println!("large (wasm perf) {t} tenants x {q} QPs: refused: {e}");
            rec.note(&format!("{key}/refused"), &e);
        }
    }
}
