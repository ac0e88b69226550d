//! Experiment 1 (a 1 MiB WRITE stream beside a 16 B WRITE ping-pong,
//! `runner/scenarios/paper/exp1.toml`) under `perf`, in wall-clock time,
//! two ways, through the `perf-runner` binary:
//!
//! - **in process**: `perf-runner run --realtime` (tenants are threads of
//!   the runner; each tenant's peer is a passive side on the other host of
//!   the simulated fabric);
//! - **as processes**: `perf-runner serve --policy perf` and two client
//!   processes, `write-bw --connect` (B: 1 MiB, 1 QP, 128 deep) and
//!   `write-lat --connect` (D: 16 B, traffic class 1).
//!
//! Reported: D's median and mean latency each way (median of 3 runs) and
//! their ratios (processes / in process). The two are not the same
//! measurement in one respect, which the ratio includes: a client of the
//! daemon plays both ends of its ping-pong (the reply is a second request
//! through the daemon's rings and loop), where the in-process tenant's
//! reply comes from its passive peer on the other host. Both spin in wall
//! time: on a machine with fewer free cores than spinning threads (the
//! loop, each client, the runner's tenant threads) the figures are the
//! scheduler's. Not run in the quick mode (about 8 s of wall clock a run).
//!
//! `cargo bench -p perf-benches --bench serve_exp1`

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use perf_benches::results::{results_dir, Recorder};
use perf_benches::runner::{cut_scenario, runner_binary, workspace};

/// D's (median, mean) latency in process, then as processes, µs.
type Run = ((f64, f64), (f64, f64));

/// Wall-clock window of each measurement, s.
const WINDOW_S: f64 = 1.0;

/// D's (median, mean) latency in µs, in process.
fn in_process(bin: &Path, scenario: &Path) -> Result<(f64, f64), String> {
    let json = results_dir().join("serve-exp1-run.json");
    let out = Command::new(bin)
        .arg("run")
        .arg(scenario)
        .args(["--realtime", "--policy", "perf", "-Q", "--json"])
        .arg(&json)
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let text = std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let d = v["tenants"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "D_single"))
        .ok_or("no D_single in the report")?;
    let (p50, mean) = (d["latency_us"]["p50"].as_f64(), d["latency_us"]["mean"].as_f64());
    p50.zip(mean).ok_or_else(|| "no latency_us of D_single in the report".to_string())
}

/// D's (median, mean) latency in µs, as processes of a daemon.
fn as_processes(bin: &Path) -> Result<(f64, f64), String> {
    let dir = results_dir().join("serve-exp1");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let sock = dir.join("serve.sock");
    let mut daemon = Command::new(bin)
        .args(["serve", "--policy", "perf", "--socket"])
        .arg(&sock)
        .arg("--ctl")
        .arg(dir.join("ctl.sock"))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let mut out = BufReader::new(daemon.stdout.take().ok_or("no stdout")?);
    let mut first = String::new();
    let started = out.read_line(&mut first).map_err(|e| e.to_string()).and_then(|_| {
        if first.starts_with("serving on") {
            Ok(())
        } else {
            Err(format!("the daemon said {first:?}"))
        }
    });
    let result = started.and_then(|()| clients(bin, &sock, &dir));
    // SIGTERM: the daemon drains and exits.
    let _ = Command::new("kill").arg("-TERM").arg(daemon.id().to_string()).status();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let _ = daemon.wait();
    result
}

fn clients(bin: &Path, sock: &Path, dir: &Path) -> Result<(f64, f64), String> {
    let client = |args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args).arg("--connect").arg(sock).stdout(Stdio::null()).stderr(Stdio::piped());
        c
    };
    let bulk_s = format!("{}", WINDOW_S + 0.5);
    let mut bulk =
        client(&["write-bw", "--tenant", "B_single", "-s", "1048576", "-q", "1", "-t", "128", "-D", &bulk_s])
            .spawn()
            .map_err(|e| e.to_string())?;
    // The bulk client's own warm-up (0.2 s), then the ping-pong's.
    std::thread::sleep(Duration::from_millis(250));
    let json = dir.join("lat.json");
    let json_arg = json.display().to_string();
    let window = format!("{WINDOW_S}");
    let lat_args =
        ["write-lat", "--tenant", "D_single", "-s", "16", "--tc", "1", "-D", &window, "--out_json_file", &json_arg];
    let lat = client(&lat_args).output().map_err(|e| e.to_string())?;
    let bulk_ok = bulk.wait().map_err(|e| e.to_string())?;
    if !lat.status.success() {
        return Err(format!("write-lat: {}", String::from_utf8_lossy(&lat.stderr).trim()));
    }
    if !bulk_ok.success() {
        return Err(format!("write-bw: {bulk_ok}"));
    }
    let text = std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let r = &v["results"];
    r["t_typical"].as_f64().zip(r["t_avg"].as_f64()).ok_or_else(|| "no t_typical / t_avg in write-lat's JSON".into())
}

fn main() {
    let mut rec = Recorder::new("serve_exp1");
    if perf_benches::quick() {
        println!("serve_exp1: not in the quick mode (about 8 s of wall clock a run)");
        rec.note("serve_exp1/skipped", "not run in the quick mode");
        rec.save();
        return;
    }
    let measured = runner_binary()
        .and_then(|bin| {
            let paper = workspace().join("runner/scenarios/paper/exp1.toml");
            let scenario = cut_scenario(&paper, "exp1-serve.toml", (WINDOW_S * 1e3) as u64 + 200, 200)?;
            (0..3).map(|_| Ok((in_process(&bin, &scenario)?, as_processes(&bin)?))).collect::<Result<Vec<_>, String>>()
        })
        .map(|runs| {
            let med = |f: fn(&Run) -> f64| perf_benches::median(&mut runs.iter().map(f).collect::<Vec<_>>());
            (med(|r| r.0 .0), med(|r| r.0 .1), med(|r| r.1 .0), med(|r| r.1 .1))
        });
    match measured {
        Ok((in_p50, in_mean, pr_p50, pr_mean)) => {
            println!("exp1 under perf, D_single's latency (median of 3 runs, {WINDOW_S} s windows, wall clock):");
            println!("  in process (run --realtime)      p50 {in_p50:9.2} us   mean {in_mean:9.2} us");
            println!("  as processes (serve + clients)   p50 {pr_p50:9.2} us   mean {pr_mean:9.2} us");
            println!(
                "  processes / in process           p50 {:9.2}x     mean {:9.2}x   (target <= 1.1x)",
                pr_p50 / in_p50,
                pr_mean / in_mean
            );
            rec.figure("serve_exp1/d_p50_in_process_us", in_p50, "us");
            rec.figure("serve_exp1/d_mean_in_process_us", in_mean, "us");
            rec.figure("serve_exp1/d_p50_processes_us", pr_p50, "us");
            rec.figure("serve_exp1/d_mean_processes_us", pr_mean, "us");
            rec.ratio("serve_exp1/d_p50_processes_over_in_process", pr_p50 / in_p50);
            rec.ratio("serve_exp1/d_mean_processes_over_in_process", pr_mean / in_mean);
        }
        Err(e) => {
            println!("serve_exp1: not measured: {e}");
            rec.note("serve_exp1/refused", &e);
        }
    }
    rec.save();
}
