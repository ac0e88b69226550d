//! The headline figures of the dataplane issue, as deterministic
//! virtual-time runs of the built `perf-runner` on the shipped paper
//! scenarios (`runner/scenarios/`): the simulator is seeded by the
//! scenario, so every figure is the same on every machine and these are
//! not timing tests.
//!
//! Each test runs `perf-runner run SCENARIO --policy P --alone --json FILE`
//! and checks the JSON report (`tenants[i]` with `gbps`, `mpps`,
//! `latency_us`, and `alone` holding the same tenant run alone under the
//! same policy).

use crate::common;

use common::{num, run, tenant};

#[test]
fn b_single_d_single_perf_keeps_d_latency_and_b_bandwidth() {
    let r = run("b_single-d_single.toml", "perf");
    let (b, d) = (tenant(&r, "B_single"), tenant(&r, "D_single"));
    let (mean, p99, p99_alone) =
        (num(d, "/latency_us/mean"), num(d, "/latency_us/p99"), num(d, "/alone/latency_us/p99"));
    assert!(mean <= 2.0, "D_single mean latency {mean:.3} us > 2.0 us");
    assert!(p99 <= 1.5 * p99_alone, "D_single p99 {p99:.3} us > 1.5 x its p99 alone {p99_alone:.3} us");
    let gbps = num(b, "/gbps");
    assert!(gbps >= 90.0, "B_single got {gbps:.2} Gb/s < 90");
}

#[test]
fn b_single_d_single_passthrough_inflates_d_latency() {
    let r = run("b_single-d_single.toml", "passthrough");
    let d = tenant(&r, "D_single");
    let (mean, alone) = (num(d, "/latency_us/mean"), num(d, "/alone/latency_us/mean"));
    assert!(mean >= 5.0 * alone, "D_single mean {mean:.3} us is under 5 x its mean alone {alone:.3} us");
}

#[test]
fn b_single_b_multi_perf_runs_two_of_b_multis_qps() {
    // As PeRF does (docs/policies.md#perf): B_multi keeps 2 of its 5 QPs
    // active and the NIC round-robins over QPs, so it gets two thirds.
    let r = run("b_single-b_multi.toml", "perf");
    let (s, m) = (num(tenant(&r, "B_single"), "/gbps"), num(tenant(&r, "B_multi"), "/gbps"));
    let total = s + m;
    assert!(total >= 90.0, "B_single + B_multi = {total:.2} Gb/s < 90");
    let off = (m - total * 2.0 / 3.0).abs() / (total * 2.0 / 3.0);
    assert!(off <= 0.10, "B_multi got {m:.2} of {total:.2} Gb/s: {:.1}% off two thirds", off * 100.0);
}

#[test]
fn b_single_b_multi_passthrough_split_follows_qp_count() {
    let r = run("b_single-b_multi.toml", "passthrough");
    let (s, m) = (num(tenant(&r, "B_single"), "/gbps"), num(tenant(&r, "B_multi"), "/gbps"));
    assert!(m >= 3.0 * s, "B_multi (5 QPs) got {m:.2} Gb/s, under 3 x B_single's {s:.2}");
}

#[test]
fn b_single_m_single_perf_keeps_m_message_rate_and_b_bandwidth() {
    let r = run("b_single-m_single.toml", "perf");
    let (b, m) = (tenant(&r, "B_single"), tenant(&r, "M_single"));
    let (mpps, alone) = (num(m, "/mpps"), num(m, "/alone/mpps"));
    assert!(mpps >= 0.7 * alone, "M_single {mpps:.3} Mmsg/s < 0.7 x its {alone:.3} alone");
    let gbps = num(b, "/gbps");
    assert!(gbps >= 85.0, "B_single got {gbps:.2} Gb/s < 85");
}
