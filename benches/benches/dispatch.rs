//! Dispatch rate of the dataplane loop: WQEs posted per second of wall time
//! spent inside `Dataplane::round`, on one core, over the simulated NIC.
//!
//! One bulk tenant keeps 8 RDMA WRITEs of 1 MB outstanding on one QP
//! (host 0 of a `SimFabric::pair`, the peer a passive target on host 1),
//! driven in virtual time. Configurations:
//! - `passthrough`: messages go whole (1 WQE per 1 MB message);
//! - `perf 16K+16zw`: PeRF's plan while a sensitive tenant runs, 16 KiB
//!   chunks each followed by 16 zero-weight WRs (17 WQEs per 16 KiB, about
//!   12 M WQEs/s at 100 Gb/s), through a fixed-plan policy;
//! - `perf (builtin)`: the built-in `perf` policy alone with the tenant
//!   (16 KiB chunks, no zero-weight WRs once it has classified the tenant).
//!
//! Only the wall time inside `round()` counts (the tenant's posts and the
//! simulator's event processing between rounds do not). That time includes
//! the simulated NIC's `post_send` / `poll_cq` (which stand for WQE writes,
//! a doorbell and CQ reads on hardware, and cost more in the model), so the
//! NIC is wrapped in [`TimedNic`], which times those calls, and the report
//! gives both the whole `round()` rate and the loop's own rate with the
//! NIC calls' time taken out. Each configuration runs 5 times; the median
//! (by whole-round rate) is reported. `PERF_BENCH_QUICK=1` runs once,
//! shorter; `PERF_BENCH_ONLY=TEXT` runs only the configurations whose name
//! contains TEXT (for profiling one, e.g. under `valgrind --tool=callgrind`).
//!
//! A second section runs the loop over the null RNIC (`perf_benches::null_rnic`:
//! every WQE executes at once, at no cost), in wall time: the loop's own
//! ceiling, including the wasm `perf` policy beside a delay-sensitive
//! tenant (so it posts 16 zero-weight WRs per 16 KiB chunk).
//!
//! `cargo bench -p perf-benches --bench dispatch`

use std::time::{Duration, Instant};

use perf_benches::load::{DriveSample, Load, LoadShape, Sensitive};
use perf_benches::null_rnic::NullRnic;
use perf_benches::results::Recorder;
use perf_dataplane::engine::{Dataplane, DataplaneConfig, RequestOp, WorkRequest};
use perf_dataplane::policy::PolicyHost;
use perf_dataplane::rnic::sim::{SimFabric, SimRnic, PS_PER_NS};
use perf_dataplane::rnic::*;
use perf_policy_sdk::{Policy, RequestInfo, SplitPlan, TenantPlan};

/// Message size of the bulk tenant.
const MSG: u32 = 1_000_000;
/// Messages it keeps outstanding.
const DEPTH: usize = 8;

/// A fixed plan: every message split into `chunk`-byte sub-requests, each
/// followed by `zw` zero-weight WRs; no QP cap.
struct FixedSplit {
    chunk: u32,
    zw: u32,
}

impl Policy for FixedSplit {
    fn name(&self) -> &str {
        "perf-16k-zw16"
    }

    fn on_request(&mut self, _req: &RequestInfo, _plan: &TenantPlan) -> SplitPlan {
        SplitPlan { chunk_bytes: self.chunk, zero_weight_per_chunk: self.zw }
    }
}

/// The simulated NIC with its data-path calls (`post_send`, `post_recv`,
/// `poll_cq`) timed.
struct TimedNic {
    inner: SimRnic,
    /// Wall time spent in the timed calls.
    spent: Duration,
}

impl TimedNic {
    fn timed<T>(&mut self, f: impl FnOnce(&mut SimRnic) -> T) -> T {
        let t = Instant::now();
        let r = f(&mut self.inner);
        self.spent += t.elapsed();
        r
    }
}

impl Rnic for TimedNic {
    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.timed(|n| n.post_send(qp, wrs))
    }
    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.timed(|n| n.post_recv(qp, wrs))
    }
    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        self.timed(|n| n.poll_cq(cq, out))
    }

    perf_dataplane::forward_rnic!(|s| s.inner; device_info, port_info, port_traffic, initial_psn, backend_counters, clock_ns, alloc_pd, reg_mr, dereg_mr, write_mr,
        read_mr, create_cq, destroy_cq, create_qp, modify_qp, qp_state, destroy_qp);
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// WQEs posted during the measured window.
    wqes: u64,
    /// Data WQEs among them.
    data_wqes: u64,
    /// Doorbells (post lists).
    doorbells: u64,
    /// Wall time inside `round()` during the window.
    in_round: Duration,
    /// Of which inside the NIC's data-path calls.
    in_nic: Duration,
    /// Rounds during the window.
    rounds: u64,
    /// Payload rate the tenant got, Gb/s of virtual time.
    gbps: f64,
}

impl Sample {
    fn wqes_per_s(&self) -> f64 {
        self.wqes as f64 / self.in_round.as_secs_f64()
    }

    fn ns_per_wqe(&self) -> f64 {
        self.in_round.as_nanos() as f64 / self.wqes as f64
    }

    /// The loop's own time per WQE, the NIC calls' time taken out.
    fn loop_ns_per_wqe(&self) -> f64 {
        self.in_round.saturating_sub(self.in_nic).as_nanos() as f64 / self.wqes as f64
    }
}

/// Runs the bulk tenant for `virtual_ms` under `policy`, measuring after
/// `warmup_ms`.
fn run(policy: PolicyHost, warmup_ms: u64, virtual_ms: u64) -> Sample {
    let f = SimFabric::pair(1);
    let nic = TimedNic { inner: f.nic(0), spent: Duration::ZERO };
    let mut dp = Dataplane::new(nic, policy, DataplaneConfig::default()).expect("dataplane");
    let perf_benches::BulkTenant { h, mr, side: _side, remote } = perf_benches::bulk_tenant(&mut dp, &f, MSG as usize);
    let clock = f.nic(0);

    let (warm_ns, end_ns) = (warmup_ms * 1_000_000, virtual_ms * 1_000_000);
    let mut outstanding = 0usize;
    let mut next_id = 0u64;
    let mut in_round = Duration::ZERO;
    let mut rounds = 0u64;
    let mut start = None;
    let mut bytes = 0u64;
    // The NIC's time before the measurement starts.
    let mut nic_before = Duration::ZERO;
    loop {
        let now = clock.clock_ns();
        if start.is_none() && now >= warm_ns {
            start = Some((dp.counters(), now));
            nic_before = dp.nic().spent;
            in_round = Duration::ZERO;
            rounds = 0;
            bytes = 0;
        }
        if now >= end_ns {
            break;
        }
        while let Some(c) = h.poll() {
            assert!(c.status.is_ok(), "completion error {c:?}");
            outstanding -= 1;
            bytes += c.byte_len as u64;
        }
        while outstanding < DEPTH {
            next_id += 1;
            let wr = WorkRequest {
                wr_id: next_id,
                qp: 0,
                op: RequestOp::Write { remote },
                mr,
                offset: 0,
                len: MSG,
                posted_ns: now,
            };
            h.post(wr).expect("post");
            outstanding += 1;
        }
        // The loop runs until it has nothing left to do at this instant.
        loop {
            let t = Instant::now();
            let did = dp.round().expect("round");
            in_round += t.elapsed();
            rounds += 1;
            if !did {
                break;
            }
        }
        if !f.step_until_visible(end_ns * PS_PER_NS) {
            f.advance_to_ns(end_ns);
        }
    }
    let (c0, t0) = start.expect("the run passed its warm-up");
    let c = dp.counters();
    let window_ns = clock.clock_ns() - t0;
    Sample {
        wqes: c.wqes_posted - c0.wqes_posted,
        data_wqes: c.data_wqes - c0.data_wqes,
        doorbells: c.doorbells - c0.doorbells,
        in_round,
        in_nic: dp.nic().spent.saturating_sub(nic_before),
        rounds,
        gbps: bytes as f64 * 8.0 / window_ns as f64,
    }
}

/// The loop over the null RNIC (no NIC cost at all): one bulk tenant with
/// 8 x 1 MB WRITEs outstanding, and for the policies that need one to
/// split with zero-weight WRs, a delay-sensitive tenant beside it.
fn null_run(policy: PolicyHost, with_delay_tenant: bool, budget: Duration) -> DriveSample {
    let sensitive = if with_delay_tenant { Sensitive::Delay } else { Sensitive::None };
    let shape =
        LoadShape { tenants: 1, qps: 1, depth: DEPTH as u32, msg: MSG, sensitive, sq_depth: None, post_list: 1 };
    let mut load = Load::new(NullRnic::new(), policy, shape).expect("null-NIC load");
    load.drive(budget / 4, budget).expect("drive")
}

fn main() {
    let quick = perf_benches::quick();
    let (runs, warmup_ms, virtual_ms) = if quick { (1, 2, 6) } else { (5, 2, 22) };
    let mut rec = Recorder::new("dispatch");
    println!(
        "dispatch: WQEs posted per second of wall time inside Dataplane::round, one bulk tenant \
         ({DEPTH} x {MSG} B WRITE outstanding, 1 QP), {} ms virtual after {warmup_ms} ms warm-up, {runs} run(s)",
        virtual_ms - warmup_ms
    );
    type Make = fn() -> PolicyHost;
    let configs: [(&str, Make); 3] = [
        ("passthrough", || PolicyHost::builtin("passthrough").expect("passthrough")),
        ("perf 16K+16zw", || PolicyHost::new(Box::new(FixedSplit { chunk: 16384, zw: 16 }))),
        ("perf (builtin)", || PolicyHost::builtin("perf").expect("perf")),
    ];
    let only = std::env::var("PERF_BENCH_ONLY").unwrap_or_default();
    println!("over the simulated ConnectX-6:");
    for (name, make) in configs.into_iter().filter(|(name, _)| name.contains(only.as_str())) {
        let mut samples: Vec<Sample> = (0..runs).map(|_| run(make(), warmup_ms, virtual_ms)).collect();
        samples.sort_by(|a, b| a.wqes_per_s().total_cmp(&b.wqes_per_s()));
        let m = samples[samples.len() / 2];
        let all: Vec<String> = samples.iter().map(|s| format!("{:.2}", s.wqes_per_s() / 1e6)).collect();
        println!(
            "  {name:<15} {:>7.2} M WQEs/s {:>7.1} ns/WQE | loop alone {:>7.2} M WQEs/s {:>6.1} ns/WQE \
             ({} WQEs, {} data, {:.1} WQEs/doorbell, {} rounds, {:.2} ms in round(), {:.0}% of it in the NIC, \
             tenant {:.2} Gb/s; runs: [{}] M/s)",
            m.wqes_per_s() / 1e6,
            m.ns_per_wqe(),
            1e3 / m.loop_ns_per_wqe(),
            m.loop_ns_per_wqe(),
            m.wqes,
            m.data_wqes,
            m.wqes as f64 / m.doorbells.max(1) as f64,
            m.rounds,
            m.in_round.as_secs_f64() * 1e3,
            100.0 * m.in_nic.as_secs_f64() / m.in_round.as_secs_f64(),
            m.gbps,
            all.join(", ")
        );
        rec.figure(&format!("sim/{name}/wqes_per_s"), m.wqes_per_s() / 1e6, "M WQEs/s");
        rec.figure(&format!("sim/{name}/loop_ns_per_wqe"), m.loop_ns_per_wqe(), "ns");
    }

    // The loop alone, over the null RNIC, in wall time.
    let budget = if quick { Duration::from_millis(100) } else { Duration::from_millis(500) };
    println!("over the null RNIC (the loop alone; {} ms of wall time per run, {runs} run(s)):", budget.as_millis());
    type MakeNull = (&'static str, fn() -> PolicyHost, bool);
    let null_configs: [MakeNull; 4] = [
        ("passthrough", || PolicyHost::builtin("passthrough").expect("passthrough"), false),
        ("perf 16K+16zw", || PolicyHost::new(Box::new(FixedSplit { chunk: 16384, zw: 16 })), false),
        ("perf native +D", || PolicyHost::builtin("perf").expect("perf"), true),
        ("perf wasm +D", || PolicyHost::load("wasm:perf").expect("the build script embeds perf.wasm"), true),
    ];
    let mut rate = std::collections::BTreeMap::new();
    for (name, make, delay) in null_configs.into_iter().filter(|(name, ..)| name.contains(only.as_str())) {
        let mut samples: Vec<DriveSample> = (0..runs).map(|_| null_run(make(), delay, budget)).collect();
        samples.sort_by(|a, b| a.wqes_per_s().total_cmp(&b.wqes_per_s()));
        let m = samples[samples.len() / 2];
        println!(
            "  {name:<15} {:>7.2} M WQEs/s {:>6.1} ns/WQE ({} WQEs, {} zero-weight, {} rounds, {:.0} ns/round)",
            m.wqes_per_s() / 1e6,
            m.ns_per_wqe(),
            m.wqes,
            m.zero_weight,
            m.rounds,
            m.ns_per_round()
        );
        rec.figure(&format!("null/{name}/wqes_per_s"), m.wqes_per_s() / 1e6, "M WQEs/s");
        rate.insert(name, m.wqes_per_s());
    }
    if let (Some(w), Some(n)) = (rate.get("perf wasm +D"), rate.get("perf native +D")) {
        println!("  wasm perf / native perf dispatch rate: {:.2}x", w / n);
        rec.ratio("null/wasm_over_native_rate", w / n);
    }
    if let (Some(z), Some(p)) = (rate.get("perf 16K+16zw"), rate.get("passthrough")) {
        println!("  16K+16zw / passthrough dispatch rate: {:.2}x", z / p);
        rec.ratio("null/zw_over_passthrough_rate", z / p);
    }
    println!("need: ~12 M WQEs/s for PeRF at 100 Gb/s (17 WQEs per 16 KiB chunk); aim: 20 M WQEs/s with wasm perf");
    rec.save();
}
