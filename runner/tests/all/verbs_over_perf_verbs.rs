//! The real verbs backend (`--backend verbs`) over a verbs implementation
//! that needs no NIC: `perf-runner exec` puts `perf-verbs` under a
//! `perf-runner run --backend verbs --device perfsim0`, whose device is a
//! daemon's simulated NIC. The host gate (the backend's software
//! cross-channel) and its CQ reaping run end to end, under `passthrough`,
//! under `perf` (sub-requests) and under `perf` rotating a many-QP
//! tenant's active QPs (host hand-offs), and every tenant's messages
//! complete, none refused. Needs a runner built with
//! `--features perf-dataplane/verbs` (CI's verbs step); without it the
//! test prints a loud SKIPPED.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_perf-runner");

fn scenario() -> String {
    scenario_file("b_single-d_single")
}

fn scenario_file(name: &str) -> String {
    format!("{}/scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// A daemon on sockets in `dir`, until dropped.
struct Daemon(Child, PathBuf);

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        let sock = dir.join("serve.sock");
        let mut child = Command::new(BIN)
            .args(["serve", "--policy", "passthrough", "--socket"])
            .arg(&sock)
            .arg("--ctl")
            .arg(dir.join("ctl.sock"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("perf-runner serve starts");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("its first line");
        assert!(first.starts_with("serving on"), "{first}");
        Daemon(child, sock)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether this runner has the verbs backend: without it, `--backend
/// verbs` is refused naming the feature.
fn has_verbs_backend() -> bool {
    let out = Command::new(BIN)
        .args(["run", &scenario(), "--backend", "verbs", "--device", "perf-rs-no-such-device"])
        .output()
        .expect("runs");
    !String::from_utf8_lossy(&out.stderr).contains("--features perf-dataplane/verbs")
}

#[test]
fn the_verbs_backend_runs_a_scenario_on_perf_verbs_under_each_policy() {
    if !has_verbs_backend() {
        eprintln!(
            "======== SKIPPED the_verbs_backend_runs_a_scenario_on_perf_verbs: this perf-runner has no verbs backend (build with --features perf-dataplane/verbs) ========"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("perf-verbs-backend-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let daemon = Daemon::start(&dir);
    for (policy, name) in
        [("passthrough", "b_single-d_single"), ("perf", "b_single-d_single"), ("perf", "b_single-b_multi")]
    {
        let json = dir.join(format!("{policy}-{name}.json"));
        let t0 = Instant::now();
        let out = Command::new(BIN)
            .args(["exec", "--connect"])
            .arg(&daemon.1)
            .args([
                "--tenant",
                policy,
                "--",
                BIN,
                "run",
                &scenario_file(name),
                "--backend",
                "verbs",
                "--device",
                "perfsim0",
            ])
            .args(["--policy", policy, "--json"])
            .arg(&json)
            .output()
            .expect("exec runs");
        let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{policy}: exited {}:\n{so}\n{se}", out.status);
        assert!(t0.elapsed() < Duration::from_secs(120), "{policy}: took {:?}", t0.elapsed());
        assert!(so.contains("hw: perfsim0 (HostGated)"), "{policy}: the host gate runs the control WQEs:\n{so}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("the run's JSON")).expect("JSON");
        let dp = &report["dataplane"];
        let n = |k: &str| dp[k].as_u64().unwrap_or_else(|| panic!("{policy}: no dataplane.{k} in {dp}"));
        assert_eq!(n("refused"), 0, "{policy}: {dp}");
        assert!(n("completions") > 0 && n("completions") <= n("requests"), "{policy}: {dp}");
        let tenants = report["tenants"].as_array().expect("tenants");
        assert!(!tenants.is_empty(), "{policy}: {tenants:?}");
        for t in tenants {
            assert!(t["completed"].as_u64().is_some_and(|d| d > 0), "{policy}: a tenant completed nothing: {t}");
            assert_eq!(t["errors"].as_u64(), Some(0), "{policy}: {t}");
        }
        // The host gate posted the data and reaped the device's CQEs.
        let gate = &report["rnic"]["backend"];
        let g = |k: &str| gate[k].as_u64().unwrap_or_else(|| panic!("{policy}: no rnic.backend.{k} in {gate}"));
        assert!(g("gate_hw_posted") > 0 && g("cqes_reaped") > 0, "{policy}: {gate}");
        eprintln!("{policy}: {gate}");
        if policy == "perf" {
            // 1 MB messages in sub-requests, retired by later CQEs.
            assert!(n("chunks") > 0 && n("hidden_completions") > 0, "{policy}: {dp}");
        }
        if name == "b_single-b_multi" {
            assert!(n("handoffs") > 0, "{policy} rotates B_multi's QPs: {dp}");
        }
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
