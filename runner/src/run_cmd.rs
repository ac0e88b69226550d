//! `perf-runner run`: one scenario on the simulated NIC through the
//! dataplane, under a policy, in virtual time.

use std::path::PathBuf;

use anyhow::Context;
use perf_dataplane::engine::{Dataplane, DataplaneConfig, SwapOutcome, SwapRecord};
use perf_dataplane::perftest::{run_virtual, App, Side};
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::WasmLimits;
use perf_dataplane::policy::{ExitInfo, PolicyHost};
use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric, TcScheduler};
use perf_dataplane::rnic::{connect, AccessFlags};

use crate::report::{Report, TenantReport};
use crate::scenario::Scenario;
use crate::workload::{PeerApp, TenantApp};

/// Flags of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// The scenario file (TOML; see docs/scenarios.md).
    scenario: PathBuf,
    /// Scheduling policy: a built-in name, `wasm:NAME` for an embedded wasm
    /// module, or the path of a policy `.wasm` file (`perf-runner policy list`).
    #[arg(long, default_value = "passthrough")]
    policy: String,
    /// Hardware traffic-class scheduling of the simulated NIC: `rr`
    /// (default), `sp` (strict priority), or `ets:W0,W1,...`.
    #[arg(long, default_value = "rr")]
    hw: String,
    /// Bypass the dataplane: tenants' requests go to the NIC unchanged
    /// (the "no isolation" baseline; same as `--policy passthrough`).
    #[arg(long)]
    direct: bool,
    /// Also run each tenant alone (same seed) and report the ratios.
    #[arg(long)]
    alone: bool,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Swap the policy at MS milliseconds of virtual time to POLICY (a
    /// built-in name, `wasm:NAME` or a `.wasm` file); repeatable. The
    /// module is prepared off the loop at the start and installed at the
    /// first round at or after MS; the run prints each swap and its outcome.
    #[arg(long = "swap-at", value_name = "MS=POLICY")]
    swap_at: Vec<String>,
}

/// One `--swap-at`: when (ms of virtual time) and to what.
#[derive(Debug, Clone, PartialEq)]
pub struct SwapAt {
    /// Virtual time, ms.
    pub ms: f64,
    /// The policy (built-in name, `wasm:NAME` or a `.wasm` file).
    pub policy: String,
}

/// Parses `--swap-at MS=POLICY`.
pub fn parse_swap_at(s: &str) -> anyhow::Result<SwapAt> {
    let Some((ms, policy)) = s.split_once('=') else {
        anyhow::bail!("--swap-at {s:?}: expected MS=POLICY, e.g. 50=wasm:perf");
    };
    let ms: f64 = ms.trim().parse().with_context(|| format!("--swap-at {s:?}: {:?} is not a time in ms", ms.trim()))?;
    if !ms.is_finite() || ms < 0.0 {
        anyhow::bail!("--swap-at {s:?}: the time must be a non-negative number of ms");
    }
    let policy = policy.trim();
    if policy.is_empty() {
        anyhow::bail!("--swap-at {s:?}: no policy after `=`");
    }
    Ok(SwapAt { ms, policy: policy.to_string() })
}

/// Parses `--hw`.
pub fn parse_hw(s: &str) -> anyhow::Result<TcScheduler> {
    Ok(match s {
        "rr" => TcScheduler::RoundRobin,
        "sp" => TcScheduler::StrictPriority,
        _ => match s.strip_prefix("ets:") {
            Some(w) => TcScheduler::Ets(
                w.split(',')
                    .map(|x| x.trim().parse::<u32>().with_context(|| format!("--hw {s}: weight {x:?} is not a number")))
                    .collect::<anyhow::Result<_>>()?,
            ),
            None => anyhow::bail!("--hw {s:?}: expected rr, sp or ets:W0,W1,..."),
        },
    })
}

/// Runs one scenario under one configuration.
// The binary itself goes through `run_scenario_swapping`; this is the
// entry point of the tests and of other commands.
#[allow(dead_code)]
pub fn run_scenario(sc: &Scenario, policy: &str, hw: &TcScheduler) -> anyhow::Result<Report> {
    run_scenario_swapping(sc, policy, hw, &[]).map(|(r, _)| r)
}

/// [`run_scenario`] with scripted policy swaps; also returns the swap
/// records and the policy exits (fallbacks, watchdog) of the run.
pub fn run_scenario_swapping(
    sc: &Scenario,
    policy: &str,
    hw: &TcScheduler,
    swaps: &[SwapAt],
) -> anyhow::Result<(Report, PolicyLog)> {
    let profile = RnicProfile::by_name(&sc.profile).with_context(|| {
        format!("key `profile`: unknown RNIC profile {:?} (known: {})", sc.profile, RnicProfile::NAMES.join(", "))
    })?;
    // A built-in name, `wasm:NAME` (an embedded module), or a .wasm file.
    let host = PolicyHost::load(policy).with_context(|| {
        format!("policy {policy:?}: not loadable (a built-in name, wasm:NAME or a .wasm file; see `perf-runner policy list`)")
    })?;
    let fabric = SimFabric::new(profile.clone(), 2, sc.seed, ClockMode::Virtual);
    fabric.set_tc_scheduler(0, hw.clone());
    fabric.set_tc_scheduler(1, hw.clone());
    let mut dp = Dataplane::new(fabric.nic(0), host, DataplaneConfig::default())?;
    let warm = (sc.warmup_ms * 1e6) as u64;
    let end = (sc.duration_ms * 1e6) as u64;
    let mut tenants = Vec::new();
    let mut peers = Vec::new();
    for spec in &sc.tenants {
        let handle = dp.add_tenant(&spec.name, spec.weight)?;
        let t = handle.id;
        let buf = 2 * spec.size as usize;
        let mr = dp.reg_mr(t, buf)?;
        let mut side = Side::new(fabric.nic(1), spec.qps as usize, buf, spec.tc, spec.depth.clamp(16, 4096))?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        for i in 0..spec.qps {
            let (index, ep) = dp.create_qp(t, spec.tc)?;
            let peer_qp = side.qps[i as usize];
            dp.connect_qp(t, index, connect::endpoint(&side.nic, peer_qp.qp_num))?;
            connect::bring_up(&mut side.nic, peer_qp.handle, ep, access)?;
        }
        let target = side.mr.remote(spec.size as usize);
        let remotes = vec![target; spec.qps as usize];
        let client_recv = mr.remote(spec.size as usize);
        peers.push(PeerApp::new(spec, side, client_recv));
        tenants.push(TenantApp::new(spec.clone(), handle, mr, remotes, fabric.nic(0), (warm, end)));
    }
    for s in swaps {
        let at_ns = (s.ms * 1e6) as u64;
        dp.schedule_swap(at_ns, PolicySpec::Named(s.policy.clone()), WasmLimits::default())?;
    }
    {
        let mut apps: Vec<&mut dyn App> = Vec::new();
        for t in tenants.iter_mut() {
            apps.push(t);
        }
        apps.push(&mut dp);
        for p in peers.iter_mut() {
            apps.push(p);
        }
        run_virtual(&fabric, &mut apps, end + 1_000_000).context("simulation failed")?;
    }
    let log = PolicyLog { swaps: dp.swaps().to_vec(), exits: dp.policy().exits().to_vec() };
    let window_ns = end - warm;
    let nic = fabric.counters(0);
    let reports = tenants.iter().map(|t| TenantReport::new(t.name(), t.result(), window_ns)).collect();
    let report = Report {
        config: policy.to_string(),
        scenario: String::new(),
        policy: policy.to_string(),
        hw: format!("{hw:?}"),
        tenants: reports,
        rnic: crate::report::RnicReport {
            utilization: nic.port.busy_ps as f64 / ((end + 1_000_000) as f64 * 1000.0),
            wire_payload_gbps: nic.port.payload_bytes as f64 * 8.0 / (end + 1_000_000) as f64,
            sched_turns: nic.sched.turns,
            ctrl_wqes: nic.sched.ctrl_wqes,
        },
        dataplane: dp.counters(),
        policy_counters: dp.policy().counters,
    };
    Ok((report, log))
}

/// What happened to the policy during a run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PolicyLog {
    /// Every swap, in order.
    pub swaps: Vec<SwapRecord>,
    /// Every exit (fallback to passthrough), in order.
    pub exits: Vec<ExitInfo>,
}

impl PolicyLog {
    /// The swaps and exits as text lines (nothing if there were none).
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.swaps.is_empty() {
            out.push_str("policy swaps:\n");
        }
        for s in &self.swaps {
            let what = match &s.outcome {
                SwapOutcome::Accepted => "accepted".to_string(),
                SwapOutcome::Refused(why) => format!("REFUSED: {why}"),
            };
            let cached = if s.cached { ", module cached" } else { "" };
            out.push_str(&format!(
                "  {:>10.3} ms  {} -> {}  {what} (prepared in {:.2} ms{cached})\n",
                s.at_ns as f64 / 1e6,
                s.from,
                s.to,
                s.prepare_ns as f64 / 1e6
            ));
        }
        if !self.exits.is_empty() {
            out.push_str("policy exits (fell back to passthrough):\n");
        }
        for e in &self.exits {
            out.push_str(&format!(
                "  {:>10.3} ms  {} in {}: {:?}: {}\n",
                e.at_ns as f64 / 1e6,
                e.policy,
                e.hook,
                e.kind,
                e.message
            ));
        }
        out
    }
}

/// Runs the command.
pub fn run(a: Args) -> anyhow::Result<()> {
    let sc = Scenario::load(&a.scenario)?;
    let hw = parse_hw(&a.hw)?;
    let policy = if a.direct { "passthrough" } else { a.policy.as_str() };
    let swaps = a.swap_at.iter().map(|s| parse_swap_at(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let (mut report, log) = run_scenario_swapping(&sc, policy, &hw, &swaps)?;
    report.scenario = a.scenario.display().to_string();
    if a.alone {
        for i in 0..sc.tenants.len() {
            // Same swaps alone, so that the ratios compare like with like.
            let (alone, _) = run_scenario_swapping(&sc.alone(i), policy, &hw, &swaps)?;
            if let Some(t) = alone.tenants.into_iter().next() {
                report.tenants[i].alone = Some(Box::new(t));
            }
        }
    }
    print!("{}", report.table());
    print!("{}", log.table());
    if let Some(path) = a.json {
        // The report, plus the swaps and exits under `policy_log`.
        let mut json = serde_json::to_value(&report)?;
        if let Some(obj) = json.as_object_mut() {
            obj.insert("policy_log".into(), serde_json::to_value(&log)?);
        }
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wasm `perf` module (the embedded build of `policies/perf`) gives
    /// the same run as the native `perf`, figure for figure, in virtual time.
    #[test]
    fn wasm_perf_runs_a_scenario_identically_to_native_perf() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/b_single-d_single.toml");
        let sc = Scenario::load(&path).expect("scenario loads");
        let hw = parse_hw("rr").expect("rr");
        let native = run_scenario(&sc, "perf", &hw).expect("native run");
        let wasm = run_scenario(&sc, "wasm:perf", &hw).expect("wasm run");
        let json = |r: &Report| {
            serde_json::to_value((&r.tenants, &r.rnic, &r.dataplane, &r.policy_counters)).expect("serialises")
        };
        assert_eq!(json(&native), json(&wasm));
        assert!(native.tenants.iter().all(|t| t.completed > 0));
        assert_eq!(wasm.policy_counters.fallbacks, 0);
        assert_eq!(wasm.policy_counters.traps, 0);
    }

    #[test]
    fn swap_at_parses_and_names_what_is_wrong() {
        assert_eq!(parse_swap_at("50=wasm:perf").expect("ok"), SwapAt { ms: 50.0, policy: "wasm:perf".into() });
        assert_eq!(parse_swap_at(" 2.5 = p.wasm").expect("ok"), SwapAt { ms: 2.5, policy: "p.wasm".into() });
        for (bad, says) in
            [("50", "MS=POLICY"), ("x=perf", "not a time"), ("-1=perf", "non-negative"), ("5=", "no policy")]
        {
            let e = format!("{:#}", parse_swap_at(bad).expect_err(bad));
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// Scripted swaps in a run: perf -> wasm:perf -> a module that does
    /// not exist (refused, wasm:perf stays) -> passthrough; each recorded
    /// at or after its time; every tenant still completes.
    #[test]
    fn scripted_swaps_are_applied_and_reported() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/b_single-d_single.toml");
        let sc = Scenario::load(&path).expect("scenario loads");
        let hw = parse_hw("rr").expect("rr");
        let swaps: Vec<SwapAt> = ["2=wasm:perf", "4=missing.wasm", "6=passthrough"]
            .iter()
            .map(|s| parse_swap_at(s).expect("parses"))
            .collect();
        let (report, log) = run_scenario_swapping(&sc, "perf", &hw, &swaps).expect("run");
        let s = &log.swaps;
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(
            (s[0].from.as_str(), s[0].to.as_str(), &s[0].outcome),
            ("perf", "wasm:perf", &SwapOutcome::Accepted)
        );
        assert!(matches!(&s[1].outcome, SwapOutcome::Refused(why) if why.contains("missing.wasm")), "{:?}", s[1]);
        assert_eq!(
            (s[2].from.as_str(), s[2].to.as_str(), &s[2].outcome),
            ("perf", "passthrough", &SwapOutcome::Accepted)
        );
        for (rec, ms) in s.iter().zip([2.0, 4.0, 6.0]) {
            assert!(rec.at_ns >= (ms * 1e6) as u64, "{rec:?}");
        }
        assert!(report.tenants.iter().all(|t| t.completed > 0));
        let text = log.table();
        assert!(text.contains("perf -> wasm:perf  accepted") && text.contains("REFUSED"), "{text}");
    }
}
