//! `run --realtime` with its control socket, as a user drives it: a live
//! swap over `perf-runner ctl` seen in `ctl stats` and in the run's JSON
//! report and plots, pause / resume of a tenant, and the errors (no such
//! socket, a module that is refused, an unknown tenant). Real time on a
//! shared machine: only what does not depend on timing is asserted
//! (swaps recorded, completions counted exactly once, nothing left in
//! flight), never a rate. Also, in virtual time, swap markers in plots.

use std::path::{Path, PathBuf};
use std::process::{Child, Command as Std, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::common::{bin, read_json};
use serde_json::Value;

/// One real-time run at a time: two dataplanes spinning on the same pinned
/// core (with their tenant threads) on a small machine starve each other.
static REALTIME: Mutex<()> = Mutex::new(());

fn realtime_slot() -> MutexGuard<'static, ()> {
    REALTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch("rt", name)
}

fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{} is not XML: {e}", path.display()));
    doc.descendants().filter(|n| n.is_text()).filter_map(|n| n.text()).map(|t| t.trim().to_string()).collect()
}

/// `perf-runner ctl --socket SOCK ARGS`: (success, stdout, stderr).
fn ctl(sock: &Path, args: &[&str]) -> (bool, String, String) {
    let out = bin().arg("ctl").arg("--socket").arg(sock).args(args).output().expect("ctl runs");
    let s = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
    (out.status.success(), s(out.stdout), s(out.stderr))
}

/// Starts `perf-runner run SC --realtime --policy perf --quiet` with the
/// `(flag, path)` pairs of `extra`, its stdout to `stdout`, its stderr piped.
fn realtime_run(sc: &Path, extra: &[(&str, &Path)], stdout: Stdio) -> Child {
    let mut cmd = Std::new(assert_cmd::cargo::cargo_bin("perf-runner"));
    cmd.arg("run").arg(sc).args(["--realtime", "--policy", "perf", "--quiet"]);
    for (flag, path) in extra {
        cmd.arg(flag).arg(path);
    }
    cmd.stdout(stdout).stderr(Stdio::piped()).spawn().expect("run starts")
}

fn ok(sock: &Path, args: &[&str]) -> String {
    let (success, out, err) = ctl(sock, args);
    assert!(success, "ctl {args:?} failed:\n{out}\n{err}");
    out
}

#[test]
fn a_live_swap_over_the_control_socket_shows_in_stats_and_in_the_report() {
    let _slot = realtime_slot();
    let d = scratch("live");
    let (sc, sock, json, plots) = (d.join("sc.toml"), d.join("ctl.sock"), d.join("r.json"), d.join("plots"));
    std::fs::write(
        &sc,
        "duration_ms = 1000\nwarmup_ms = 10\n\
         [[tenant]]\nname = 'B'\nkind = 'bw'\nsize = 65536\nqps = 2\ndepth = 16\n\
         [[tenant]]\nname = 'D'\nkind = 'lat'\nsize = 16\ntc = 1\n",
    )
    .expect("write");
    let bad = d.join("bad.wasm");
    std::fs::write(&bad, b"not a wasm module").expect("write");
    let mut run = realtime_run(&sc, &[("--ctl", &sock), ("--json", &json), ("--plot", &plots)], Stdio::piped());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "no control socket at {}", sock.display());
        std::thread::sleep(Duration::from_millis(5));
    }

    // The live swap: printed with its time, then in `ctl stats`.
    let out = ok(&sock, &["swap", "wasm:perf"]);
    assert!(out.contains("perf -> wasm:perf: accepted"), "{out}");
    let stats: Value = serde_json::from_str(&ok(&sock, &["--json", "stats"])).expect("stats is JSON");
    assert_eq!(stats["ok"], true);
    let swaps = stats["stats"]["swaps"].as_array().expect("swaps");
    assert!(swaps.iter().any(|s| s["to"] == "wasm:perf" && s["outcome"] == "Accepted"), "{stats}");
    let names: Vec<&str> = stats["stats"]["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["B", "D"]);
    let text = ok(&sock, &["stats"]);
    assert!(text.contains("dataplane core busy") && text.contains("wasm:perf: accepted"), "{text}");

    // A module that is not wasm is refused; the running policy stays.
    let (success, out, err) = ctl(&sock, &["swap", bad.to_str().expect("utf-8 path")]);
    assert!(!success, "a bad module was accepted:\n{out}");
    assert!(err.contains("refused") && err.contains("keeps running") && err.contains("not a wasm module"), "{err}");

    // Pause and resume a tenant; an unknown one is an error naming the tenants.
    assert!(ok(&sock, &["pause", "B"]).contains("tenant B: paused"));
    let stats: Value = serde_json::from_str(&ok(&sock, &["--json", "stats"])).expect("JSON");
    assert_eq!(stats["stats"]["tenants"][0]["paused"], true, "{stats}");
    assert!(ok(&sock, &["pause", "B"]).contains("(already)"));
    let (success, _, err) = ctl(&sock, &["resume", "nobody"]);
    assert!(!success && err.contains("no tenant \"nobody\" (tenants: B, D)"), "{err}");
    assert!(ok(&sock, &["resume", "B"]).contains("tenant B: running"));

    // The run ends on its own; its report has the swaps, and every
    // completion was counted once, with nothing left in flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = run.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = run.wait_with_output().expect("output");
    assert!(status.success(), "run failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!sock.exists(), "the control socket outlived the run");
    let r: Value = read_json(&json);
    let swaps = r["policy_log"]["swaps"].as_array().expect("swaps");
    assert_eq!(swaps.len(), 2, "{swaps:?}");
    assert_eq!((swaps[0]["from"].as_str(), swaps[0]["to"].as_str()), (Some("perf"), Some("wasm:perf")));
    assert_eq!(swaps[0]["outcome"], "Accepted");
    assert!(swaps[1]["outcome"]["Refused"].as_str().is_some_and(|w| w.contains("not a wasm module")), "{swaps:?}");
    let rt = &r["realtime"];
    assert!(rt["delivered"].as_u64().is_some_and(|n| n > 0), "{rt}");
    assert_eq!(rt["delivered"], rt["taken"], "completions counted exactly once: {rt}");
    assert_eq!(rt["in_flight"], 0, "{rt}");
    assert_eq!(rt["delivered"], r["dataplane"]["completions"]);
    let busy = rt["busy_fraction"].as_f64().expect("busy");
    let share = rt["policy_share"].as_f64().expect("share");
    assert!(busy > 0.0 && busy <= 1.0 && (0.0..=1.0).contains(&share), "{rt}");
    for t in r["tenants"].as_array().expect("tenants") {
        assert!(t["completed"].as_u64().is_some_and(|n| n > 0) && t["errors"] == 0, "{t}");
    }
    let thr = svg_texts(&plots.join("throughput-perf.svg"));
    assert!(thr.iter().any(|t| t == "swap: perf -> wasm:perf"), "no swap marker: {thr:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ctl_without_a_run_says_there_is_no_socket() {
    let d = scratch("nosock");
    let (success, _, err) = ctl(&d.join("none.sock"), &["stats"]);
    assert!(!success);
    assert!(err.contains("cannot reach the control socket") && err.contains("none.sock"), "{err}");
    // The run-side flags need --realtime.
    let out = bin().args(["run", "runner/scenarios/b_single.toml", "--ctl"]).output().expect("runs");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--realtime"));
}

/// Scripted swaps in virtual time: a marker per swap in the throughput and
/// NIC plots, accepted or refused.
#[test]
fn plots_mark_policy_swaps() {
    let d = scratch("markers");
    let plots = d.join("plots");
    let out = bin()
        .args(["run", "runner/scenarios/b_single-d_single.toml", "--quiet", "--policy", "perf"])
        .args(["--swap-at", "20=wasm:perf", "--swap-at", "30=missing.wasm", "--plot"])
        .arg(&plots)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["throughput-perf.svg", "nic-utilization.svg"] {
        let texts = svg_texts(&plots.join(file));
        for marker in ["swap: perf -> wasm:perf", "swap refused: missing.wasm"] {
            assert!(texts.iter().any(|t| t == marker), "{file} lacks {marker:?}: {texts:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `--watch FILE`: a change to the file is a swap attempt; here the file is
/// not a module, so the swap is refused and the run goes on under its
/// policy, and the report says so.
#[test]
fn a_watched_policy_file_that_changes_is_swapped_to() {
    let _slot = realtime_slot();
    let d = scratch("watch");
    let (sc, json, watched) = (d.join("sc.toml"), d.join("r.json"), d.join("p.wasm"));
    std::fs::write(&sc, "duration_ms = 600\nwarmup_ms = 10\n[[tenant]]\nname = 'B'\nkind = 'bw'\nsize = 4096\n")
        .expect("write");
    std::fs::write(&watched, b"v1").expect("write");
    let run = realtime_run(&sc, &[("--watch", &watched), ("--json", &json)], Stdio::null());
    std::thread::sleep(Duration::from_millis(250));
    std::fs::write(&watched, b"v2, still not a module").expect("rewrite");
    let out = run.wait_with_output().expect("the run ends");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = read_json(&json);
    let swaps = r["policy_log"]["swaps"].as_array().expect("swaps");
    assert!(
        swaps
            .iter()
            .any(|s| s["to"].as_str().is_some_and(|t| t.ends_with("p.wasm")) && s["outcome"]["Refused"].is_string()),
        "no swap to the watched file: {swaps:?}"
    );
    assert_eq!(r["policy"], "perf");
    assert!(r["tenants"][0]["completed"].as_u64().is_some_and(|n| n > 0));
    let _ = std::fs::remove_dir_all(&d);
}
