//! Helpers of the acceptance tests: run the built `perf-runner` on a
//! shipped scenario and read its JSON report (`tenants[i]` with `gbps`,
//! `mpps`, `latency_us`, and with `--alone`, `alone` holding the same
//! tenant run alone under the same policy). Virtual time, seeded by the
//! scenario: every figure is the same on every machine.
#![allow(dead_code, reason = "helpers shared by the test modules, each using some")]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Runs `scenario` (a path under `runner/scenarios/`) under `policy`, with
/// each tenant also alone if `alone`, and returns the JSON report. Fails
/// the test if the run fails or a tenant saw errors or completed nothing.
pub fn run_opts(scenario: &str, policy: &str, alone: bool) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = dir.join("scenarios").join(scenario);
    let tag = scenario.replace('/', "_");
    // Unique per call: tests of one process run the same scenario and
    // policy concurrently, and each removes its report after reading it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = std::env::temp_dir().join(format!(
        "perf-runner-test-{}-{call}-{}-{tag}.json",
        std::process::id(),
        policy.replace([':', '=', ','], "_")
    ));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_perf-runner"));
    // A free loop (`--loop-cost zero`): these tests check the policies'
    // decisions against the paper's figures, as docs/policies.md quotes
    // them; what the loop's cost does is tested in the dataplane's
    // `loop_cost` tests and docs/loop-cost.md.
    cmd.arg("run").arg(&path).args(["--policy", policy, "--loop-cost", "zero", "--json"]).arg(&json);
    if alone {
        cmd.arg("--alone");
    }
    let out = cmd.output().expect("running perf-runner");
    assert!(
        out.status.success(),
        "perf-runner run {scenario} --policy {policy} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).expect("reading the JSON report");
    let _ = std::fs::remove_file(&json);
    let report: Value = serde_json::from_str(&text).expect("parsing the JSON report");
    assert_eq!(report["policy"], policy, "report of the wrong policy");
    for t in report["tenants"].as_array().expect("tenants") {
        assert_eq!(t["errors"], 0, "{scenario} {policy}: tenant {} saw errors", t["name"]);
        assert!(t["completed"].as_u64().expect("completed") > 0, "{scenario} {policy}: tenant {} idle", t["name"]);
    }
    report
}

/// [`run_opts`] with every tenant also run alone.
pub fn run(scenario: &str, policy: &str) -> Value {
    run_opts(scenario, policy, true)
}

/// The tenant called `name`.
pub fn tenant<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tenant {name} in the report"))
}

/// A number at `key` (a JSON pointer) of `v`.
pub fn num(v: &Value, key: &str) -> f64 {
    v.pointer(key).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number at {key} in {v}"))
}

/// D_single keeps its latency beside a bandwidth tenant: a mean of at most
/// 2 us and a p99 of at most 1.5 x its p99 alone (`r` ran with `--alone`).
pub fn assert_d_keeps_latency(r: &Value) {
    let d = tenant(r, "D_single");
    let (mean, p99, p99_alone) =
        (num(d, "/latency_us/mean"), num(d, "/latency_us/p99"), num(d, "/alone/latency_us/p99"));
    assert!(mean <= 2.0, "D_single mean latency {mean:.3} us > 2.0 us");
    assert!(p99 <= 1.5 * p99_alone, "D_single p99 {p99:.3} us > 1.5 x its p99 alone {p99_alone:.3} us");
}

/// M_single keeps 0.7 of its message rate alone and B_single 85 Gb/s
/// (`r` ran with `--alone`).
pub fn assert_m_keeps_rate_and_b_bandwidth(r: &Value) {
    let (b, m) = (tenant(r, "B_single"), tenant(r, "M_single"));
    let (mpps, alone) = (num(m, "/mpps"), num(m, "/alone/mpps"));
    assert!(mpps >= 0.7 * alone, "M_single {mpps:.3} Mmsg/s < 0.7 x its {alone:.3} alone");
    let gbps = num(b, "/gbps");
    assert!(gbps >= 85.0, "B_single got {gbps:.2} Gb/s < 85");
}

/// B_single and B_multi fill the link (90 Gb/s together) and B_multi gets
/// `shares` shares to B_single's one, within 10% (`what` names the case).
pub fn assert_b_multi_gets_shares(r: &Value, shares: f64, what: &str) {
    let (s, m) = (num(tenant(r, "B_single"), "/gbps"), num(tenant(r, "B_multi"), "/gbps"));
    let total = s + m;
    assert!(total >= 90.0, "{what}: B_single + B_multi = {total:.2} Gb/s < 90");
    let want = total * shares / (1.0 + shares);
    let off = (m - want).abs() / want;
    assert!(off <= 0.10, "{what}: B_multi got {m:.2} of {total:.2} Gb/s, {:.1}% off {want:.2}", off * 100.0);
}

/// The JSON document a run wrote to `path`.
pub fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The built `perf-runner`, run from the repository root.
pub fn bin() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("perf-runner").expect("the perf-runner binary");
    c.current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

/// A fresh scratch directory for one test of `area`.
pub fn scratch(area: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("perf-runner-{area}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}
