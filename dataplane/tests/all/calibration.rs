//! The calibration figures of the simulator issue as tests: perftest-like
//! traffic straight on the simulated `cx6-100g` NIC (no dataplane, no
//! policy), each figure asserted by name against the issue's bounds.
//!
//! `perf-runner calibrate` prints the same table; the window here is shorter
//! (10 ms of virtual time per case instead of 20 ms) to keep the test quick.
//! The 1 MB bandwidth case measures between signaled completions, one every
//! 64 MB, so the window must stay above about 6 ms.

use perf_dataplane::rnic::sim::RnicProfile;
use perf_dataplane::traffic::bw::BwConfig;
use perf_dataplane::traffic::calibrate::{self, Calibration, Durations};

/// Measurement durations for the tests (virtual time).
const DURATIONS: Durations = Durations { warmup_ns: 2_000_000, window_ns: 10_000_000 };

/// Asserts that case `name` exists, has `unit`, and lies in `[low, high]`.
fn check(cal: &Calibration, name: &str, unit: &str, low: f64, high: f64) {
    let c = cal
        .cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("calibration case {name} missing\n{}", cal.table()));
    assert_eq!(c.unit, unit, "unit of {name}\n{}", cal.table());
    assert!(c.value.is_finite(), "{name} is not a number\n{}", cal.table());
    assert!(
        c.value >= low && c.value <= high,
        "{name} = {:.3} {unit} is outside {low} - {high}\n{}",
        c.value,
        cal.table()
    );
    assert!(c.pass, "{name} is reported as failing\n{}", cal.table());
}

#[test]
fn calibration_cases_within_the_issue_bounds() {
    let profile = RnicProfile::cx6_100g();
    let cal = calibrate::run(&profile, DURATIONS).expect("calibration run");
    assert_eq!(cal.profile, "cx6-100g");
    let names: Vec<&str> = cal.cases.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "write_bw_1mb",
            "write_lat_16b",
            "msg_rate_16b_1qp",
            "msg_rate_16b_16qp",
            "lat_inflation_no_isolation",
            "lat_inflation_sp",
            "bw_under_sp"
        ],
        "\n{}",
        cal.table()
    );
    // 1. 1 MB WRITEs, 1 QP, 128 outstanding.
    check(&cal, "write_bw_1mb", "Gb/s", 95.0, 98.0);
    // 2. 16 B WRITE ping-pong, half round trip, median.
    check(&cal, "write_lat_16b", "us", 0.9, 2.0);
    // 3. 16 B WRITEs, post list 32: one QP, and 16 QPs near the NIC-wide ceiling.
    check(&cal, "msg_rate_16b_1qp", "M msg/s", 11.0, 14.0);
    let ceiling = 1e6 / profile.sched_wqe_ps as f64;
    check(&cal, "msg_rate_16b_16qp", "M msg/s", 0.85 * ceiling, 1.02 * ceiling);
    // 4. Bulk tenant beside the ping-pong, no isolation: the paper's 6.1x.
    check(&cal, "lat_inflation_no_isolation", "x", 5.0, 7.0);
    // 5. Strict priority: ping-pong back within 1.3x, bulk keeps 90 Gb/s.
    check(&cal, "lat_inflation_sp", "x", 0.0, 1.3);
    check(&cal, "bw_under_sp", "Gb/s", 90.0, 100.0);
}

/// The aggregate 16 B message rate grows with QPs up to about 9 and then
/// stops growing near the NIC-wide ceiling (PERF_NIC_QPS_CAPA = 9).
#[test]
fn msg_rate_stops_growing_at_the_nic_ceiling() {
    let profile = RnicProfile::cx6_100g();
    let d = Durations { warmup_ns: 500_000, window_ns: 2_000_000 };
    let m = BwConfig { post_list: 32, ..BwConfig::write(16) };
    let rate = |qps| calibrate::bw_alone(&profile, m, qps, d).expect("bw run").mpps();
    let (r1, r4, r9, r16) = (rate(1), rate(4), rate(9), rate(16));
    let ceiling = 1e6 / profile.sched_wqe_ps as f64;
    let msg = format!("1 QP {r1:.2}, 4 QPs {r4:.2}, 9 QPs {r9:.2}, 16 QPs {r16:.2} M msg/s; ceiling {ceiling:.2}");
    assert!(r4 > 3.5 * r1, "4 QPs should scale almost linearly: {msg}");
    assert!(r9 >= 0.85 * ceiling, "9 QPs should reach the ceiling: {msg}");
    assert!(r16 <= 1.02 * ceiling, "16 QPs must not exceed the ceiling: {msg}");
    assert!((r16 - r9).abs() <= 0.08 * r9, "beyond 9 QPs the rate should stop growing: {msg}");
}
