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

use common::{
    assert_b_multi_gets_shares, assert_d_keeps_latency, assert_m_keeps_rate_and_b_bandwidth, num, run, tenant,
};

#[test]
fn b_single_d_single_perf_keeps_d_latency_and_b_bandwidth() {
    let r = run("b_single-d_single.toml", "perf");
    assert_d_keeps_latency(&r);
    let gbps = num(tenant(&r, "B_single"), "/gbps");
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
    assert_b_multi_gets_shares(&r, 2.0, "b_single-b_multi");
}

#[test]
fn b_single_b_multi_passthrough_split_follows_qp_count() {
    let r = run("b_single-b_multi.toml", "passthrough");
    let (s, m) = (num(tenant(&r, "B_single"), "/gbps"), num(tenant(&r, "B_multi"), "/gbps"));
    assert!(m >= 3.0 * s, "B_multi (5 QPs) got {m:.2} Gb/s, under 3 x B_single's {s:.2}");
}

#[test]
fn b_single_m_single_perf_keeps_m_message_rate_and_b_bandwidth() {
    assert_m_keeps_rate_and_b_bandwidth(&run("b_single-m_single.toml", "perf"));
}
