//! The simulated NIC's traffic-class schedulers under load, driven with
//! perftest-like traffic straight on the model (no dataplane, no policy):
//! ETS gives every backlogged class its weighted share of the wire, whatever
//! the weights, and a sparse class that needs almost nothing gets it within
//! a few frames of the other classes. Looped traffic (both QPs on one NIC)
//! takes the port like wire traffic: never above the link rate, and shared
//! with what leaves on the wire.

use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric, SimRnic, TcScheduler};
use perf_dataplane::traffic::bw::{BwClient, BwConfig, BwResult};
use perf_dataplane::traffic::calibrate::{self, Durations};
use perf_dataplane::traffic::lat::LatConfig;
use perf_dataplane::traffic::{run_virtual, App, Side};

const WARMUP_NS: u64 = 500_000;
const WINDOW_NS: u64 = 5_000_000;

/// A bandwidth client of `qps` QPs in class `tc` on host 0 writing `size`
/// B messages to host 1, every message signaled (so that a class with a
/// small share still completes many measured messages in the window).
fn bulk(f: &SimFabric, tc: u8, size: u32, qps: usize) -> BwClient<SimRnic> {
    bulk_to(f, 1, tc, size, qps)
}

/// [`bulk`] with the target on host `target` (0: loopback on host 0's NIC).
fn bulk_to(f: &SimFabric, target: usize, tc: u8, size: u32, qps: usize) -> BwClient<SimRnic> {
    let cfg = BwConfig { tx_depth: 64, cq_mod: 1, ..BwConfig::write(size) };
    let mut a = Side::new(f.nic(0), qps, size as usize, tc, cfg.tx_depth).expect("client side");
    let mut b = Side::new(f.nic(target), qps, size as usize, tc, cfg.tx_depth).expect("target side");
    a.connect(&mut b).expect("connect");
    let remote = b.mr.remote(0);
    BwClient::new(a, remote, cfg, WARMUP_NS, WARMUP_NS + WINDOW_NS)
}

/// Goodput of two saturating classes under `ETS(weights)`: class 0 with 64
/// KiB WRITEs on 4 QPs, class 1 with 16 KiB WRITEs on one QP (different
/// sizes and QP counts, so that only the byte-based arbitration between
/// classes can make the split follow the weights).
fn ets_split(weights: [u32; 2]) -> (BwResult, BwResult) {
    let f = SimFabric::new(RnicProfile::cx6_100g(), 2, 7, ClockMode::Virtual);
    let ets = TcScheduler::Ets(weights.to_vec());
    f.set_tc_scheduler(0, ets.clone());
    f.set_tc_scheduler(1, ets);
    let mut c0 = bulk(&f, 0, 64 * 1024, 4);
    let mut c1 = bulk(&f, 1, 16 * 1024, 1);
    run_virtual(&f, &mut [&mut c0 as &mut dyn App, &mut c1], WARMUP_NS + WINDOW_NS).expect("run");
    (c0.result(), c1.result())
}

#[test]
fn ets_gives_each_saturating_class_its_weighted_share() {
    for weights in [[1, 1], [3, 1], [1, 3], [100, 1]] {
        let (r0, r1) = ets_split(weights);
        let (g0, g1) = (r0.gbps(), r1.gbps());
        let total = g0 + g1;
        let msg = format!("ETS {weights:?}: class 0 {g0:.2} Gb/s, class 1 {g1:.2} Gb/s");
        assert!(total > 95.0, "the wire stays busy: {msg}");
        let sum = (weights[0] + weights[1]) as f64;
        for (class, got) in [(0, g0), (1, g1)] {
            let share = total * weights[class] as f64 / sum;
            assert!(
                (got - share).abs() <= 0.05 * share + 0.1,
                "class {class} gets {got:.2} Gb/s, its share is {share:.2}: {msg}"
            );
        }
    }
}

#[test]
fn ets_serves_a_sparse_class_within_a_few_frames_whatever_its_weight() {
    let profile = RnicProfile::cx6_100g();
    // The 1 MB stream signals every 64 MB: its goodput needs a window
    // above 6 ms (as in `calibration.rs`).
    let d = Durations { warmup_ns: 2_000_000, window_ns: 10_000_000 };
    let lat16 = LatConfig::write(16);
    let (alone, _) = calibrate::lat_with_bulk(&profile, lat16, false, TcScheduler::RoundRobin, d).expect("alone");
    // The ping-pong in class 1 beside a 1 MB WRITE stream in class 0 needs
    // about 0.1% of the wire, under any weight's share. Its 118 B frame
    // fits one quantum of class 1 at weights 1:1 and 3:1 (4200 B and
    // 1400 B), so it waits for at most the packet on the wire, as under
    // strict priority; at 100:1 (a 42 B quantum) it waits three rounds,
    // three 4 KB frames of the stream (about 1 us).
    for (weights, mean_bound_us) in
        [(vec![1, 1], 1.3 * alone.mean_us), (vec![3, 1], 1.3 * alone.mean_us), (vec![100, 1], alone.mean_us + 1.5)]
    {
        let (lat, bw) =
            calibrate::lat_with_bulk(&profile, lat16, true, TcScheduler::Ets(weights.clone()), d).expect("mixed");
        let gbps = bw.map_or(0.0, |b| b.gbps());
        let msg = format!(
            "ETS {weights:?}: {} ping-pongs ({} alone), mean {:.3} us (alone {:.3}), p99 {:.3} us (alone {:.3}); bulk {gbps:.2} Gb/s",
            lat.count, alone.count, lat.mean_us, alone.mean_us, lat.p99_us, alone.p99_us
        );
        assert!(lat.mean_us < mean_bound_us, "{msg}");
        assert!(lat.p99_us < mean_bound_us + (alone.p99_us - alone.mean_us) * 1.5, "{msg}");
        assert!(lat.count as f64 > 0.9 * alone.count as f64 * alone.mean_us / lat.mean_us, "{msg}");
        assert!(gbps > 90.0, "the bulk class keeps the rest of the wire: {msg}");
    }
}

/// Payload goodput of 64 KiB WRITEs at the 100 Gb/s link rate: 4096 B
/// packets with 66 B of headers, 20 B of preamble and gap, 16 B of RETH on
/// each message's first packet.
fn goodput_ceiling_gbps() -> f64 {
    let per_msg = 64.0 * 1024.0;
    let wire = per_msg + 16.0 * (66.0 + 20.0) + 16.0;
    100.0 * per_msg / wire
}

#[test]
fn loopback_traffic_is_bounded_by_the_port() {
    let f = SimFabric::new(RnicProfile::cx6_100g(), 2, 7, ClockMode::Virtual);
    let mut c = bulk_to(&f, 0, 0, 64 * 1024, 4);
    run_virtual(&f, &mut [&mut c as &mut dyn App], WARMUP_NS + WINDOW_NS).expect("run");
    let g = c.result().gbps();
    let ceiling = goodput_ceiling_gbps();
    assert!(g <= ceiling * 1.001, "looped goodput {g:.2} Gb/s is above the port's {ceiling:.2}");
    assert!(g >= 0.95 * ceiling, "looped goodput {g:.2} Gb/s leaves the port idle (ceiling {ceiling:.2})");
}

#[test]
fn loopback_and_wire_traffic_share_the_port() {
    let f = SimFabric::new(RnicProfile::cx6_100g(), 2, 7, ClockMode::Virtual);
    let mut looped = bulk_to(&f, 0, 0, 64 * 1024, 2);
    let mut wired = bulk_to(&f, 1, 0, 64 * 1024, 2);
    run_virtual(&f, &mut [&mut looped as &mut dyn App, &mut wired], WARMUP_NS + WINDOW_NS).expect("run");
    let (gl, gw) = (looped.result().gbps(), wired.result().gbps());
    let ceiling = goodput_ceiling_gbps();
    let msg = format!("looped {gl:.2} Gb/s, wired {gw:.2} Gb/s, port ceiling {ceiling:.2}");
    assert!(gl + gw <= ceiling * 1.001, "together above the port: {msg}");
    assert!(gl + gw >= 0.95 * ceiling, "the port idles: {msg}");
    // Two QPs each behind one round-robin port: about half each.
    assert!((gl - gw).abs() <= 0.1 * (gl + gw), "unequal split: {msg}");
}
