//! Simulator speed: how many seconds of virtual time the simulated
//! ConnectX-6 runs per second of wall time on the calibration's case-4
//! traffic (a 1 MB RDMA WRITE bandwidth tenant beside a 16 B WRITE
//! ping-pong, no isolation, both on one 100 Gb/s link).
//!
//! `cargo bench -p perf-benches --bench sim_speed` runs 5 runs of 200 ms of
//! virtual time each and prints the median; `PERF_BENCH_QUICK=1` runs one
//! short run instead. Events per second come from one extra run of the
//! same traffic built by hand (the calibration helper does not expose its
//! fabric); that run is checked to reproduce the helper's latencies exactly.

use std::time::Instant;

use perf_dataplane::perftest::bw::{BwClient, BwConfig};
use perf_dataplane::perftest::calibrate::{lat_with_bulk, Durations, LatStats};
use perf_dataplane::perftest::lat::{LatClient, LatConfig, LatServer};
use perf_dataplane::perftest::{run_virtual, App, Side};
use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric, TcScheduler};

/// The seed `perftest::calibrate` runs its fabrics with.
const CALIBRATION_SEED: u64 = 42;

/// The case-4 traffic on a fabric we keep, to count its events. Mirrors
/// `calibrate::lat_with_bulk(.., with_bulk = true, RoundRobin, ..)`.
fn case4_events(profile: &RnicProfile, d: Durations) -> (u64, LatStats) {
    let f = SimFabric::new(profile.clone(), 2, CALIBRATION_SEED, ClockMode::Virtual);
    let cfg = LatConfig::write(16);
    let end = d.warmup_ns + d.window_ns;
    let mut a = Side::new(f.nic(0), 1, 32, 1, 16).expect("ping-pong side");
    let mut b = Side::new(f.nic(1), 1, 32, 1, 16).expect("ping-pong side");
    a.connect(&mut b).expect("connect");
    let (ra, rb) = (a.mr.remote(16), b.mr.remote(16));
    let mut client = LatClient::new(a, rb, cfg, d.warmup_ns, end);
    let mut server = LatServer::new(b, ra, cfg);
    let bw = BwConfig::write(1 << 20);
    let mut x = Side::new(f.nic(0), 1, 1 << 20, 0, bw.tx_depth).expect("bulk side");
    let mut y = Side::new(f.nic(1), 1, 1 << 20, 0, bw.tx_depth).expect("bulk side");
    x.connect(&mut y).expect("connect");
    let remote = y.mr.remote(0);
    let mut bulk = BwClient::new(x, remote, bw, d.warmup_ns, end);
    run_virtual(&f, &mut [&mut client, &mut server, &mut bulk as &mut dyn App], end).expect("case-4 run");
    (f.events_run(), LatStats::from_histogram(client.histogram()))
}

fn main() {
    let quick = std::env::var("PERF_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (runs, virtual_ms) = if quick { (1, 20) } else { (5, 200) };
    let profile = RnicProfile::cx6_100g();
    let d = Durations { warmup_ns: 2_000_000, window_ns: virtual_ms * 1_000_000 - 2_000_000 };
    let sim_s = virtual_ms as f64 / 1e3;
    println!("sim_speed: case-4 traffic (1 MB WRITE bulk + 16 B WRITE ping-pong, no isolation), {virtual_ms} ms virtual, {runs} run(s)");

    let mut ratios = Vec::with_capacity(runs);
    let mut last = None;
    for i in 0..runs {
        let t = Instant::now();
        let (lat, bw) =
            lat_with_bulk(&profile, LatConfig::write(16), true, TcScheduler::RoundRobin, d).expect("case-4 run");
        let wall = t.elapsed().as_secs_f64();
        let gbps = bw.map_or(0.0, |b| b.gbps());
        println!(
            "  run {}: {wall:.3} s wall, {:.2} simulated s per wall s (ping-pong mean {:.3} us over {} samples, bulk {gbps:.2} Gb/s)",
            i + 1,
            sim_s / wall,
            lat.mean_us,
            lat.count
        );
        ratios.push(sim_s / wall);
        last = Some(lat);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];

    let (events, lat) = case4_events(&profile, d);
    assert_eq!(Some(lat), last, "the hand-built run must reproduce lat_with_bulk's traffic exactly");
    let events_per_sim_s = events as f64 / sim_s;
    println!("simulated seconds per wall second (median of {runs}): {median:.2}");
    println!(
        "events: {events} per {virtual_ms} ms simulated, {:.2} M events/s of wall time",
        events_per_sim_s * median / 1e6
    );
}
