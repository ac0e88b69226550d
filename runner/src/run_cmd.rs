//! `perf-runner run`: one scenario on the simulated NIC through the
//! dataplane, under a policy, in virtual time ([`wire`] builds a run,
//! [`report`] sums it up; `--realtime` hands the wired run to
//! [`crate::realtime`]).

use std::path::PathBuf;

use anyhow::Context;
use indicatif::ProgressBar;
use perf_dataplane::engine::{Dataplane, DataplaneConfig, TenantHandle};
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{LoadError, WasmLimits};
use perf_dataplane::policy::PolicyHost;
use perf_dataplane::rendezvous::RendezvousReceiver;
use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric, SimRnic, TcScheduler};
use perf_dataplane::rnic::{connect, AccessFlags, Mr, QpEndpoint, RemoteAddr, Rnic, RnicError};
use perf_dataplane::traffic::{App, Side};

use crate::driver::{drive, NicTimeline};
use crate::loop_cost::{LoopChoice, LoopCostArgs, LoopReport};
use crate::output::OutputArgs;
use crate::realtime::{run_realtime, Realtime};
use crate::report::{CostReport, PolicyLog, Report, RnicReport, TenantReport};
use crate::scenario::{Kind, Scenario, TenantSpec};
use crate::workload::{PeerApp, TenantApp, TenantSetup};

/// Flags of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// The scenario file (TOML; see docs/scenarios.md).
    scenario: PathBuf,
    /// Scheduling policy: a built-in name, `wasm:NAME` for an embedded wasm
    /// module, or the path of a policy `.wasm` file (`perf-runner policy list`),
    /// optionally with run-time parameters: `perf:max_active_qps=4,quantum_requests=64`
    /// (docs/policies.md lists each policy's keys).
    #[arg(long, default_value = "passthrough")]
    policy: String,
    /// Hardware traffic-class scheduling of the simulated NIC: `rr`
    /// (default), `sp` (strict priority), or `ets:W0,W1,...`.
    #[arg(long, default_value = "rr")]
    hw: String,
    /// Shorthand for `--policy passthrough`, the "no isolation" baseline:
    /// requests still go through the dataplane, which posts each as one WR
    /// unchanged (no splitting, no zero-weight WRs, no QP rotation).
    #[arg(long, conflicts_with = "policy")]
    direct: bool,
    /// Also run each tenant alone (same seed) and report the ratios.
    #[arg(long)]
    alone: bool,
    /// Output files and terminal options.
    #[command(flatten)]
    out: OutputArgs,
    /// The loop's cost in virtual time.
    #[command(flatten)]
    loop_cost: LoopCostArgs,
    /// Swap the policy at MS milliseconds of the NIC's clock (virtual
    /// time, or wall time with --realtime) to POLICY (a
    /// built-in name, `wasm:NAME` or a `.wasm` file); repeatable. The
    /// module is prepared off the loop at the start and installed at the
    /// first round at or after MS; the run prints each swap and its outcome.
    #[arg(long = "swap-at", value_name = "MS=POLICY")]
    swap_at: Vec<String>,
    /// Run in real time: the NIC model on the wall clock, the dataplane
    /// spinning on its own pinned core, each tenant a thread of its own.
    /// The report adds the dataplane core's busy fraction and the policy's
    /// share of it. Figures depend on the machine (not seeded).
    #[arg(long, conflicts_with = "alone")]
    realtime: bool,
    /// With --realtime: listen for `perf-runner ctl` (live swaps, stats,
    /// pause / resume) on this Unix socket (default `$PERF_RUNNER_CTL`,
    /// else ./perf-runner.sock); removed at the end of the run.
    #[arg(long, value_name = "PATH", num_args = 0..=1, requires = "realtime")]
    ctl: Option<Option<PathBuf>>,
    /// With --realtime: swap to this policy file (.wasm) whenever it
    /// changes (checked every 100 ms).
    #[arg(long, value_name = "FILE", requires = "realtime")]
    watch: Option<PathBuf>,
    /// With --realtime: the core the dataplane spins on (default: the last).
    #[arg(long, value_name = "N", requires = "realtime")]
    core: Option<usize>,
    /// The NIC: the simulator (default) or a real device (`crate::live`).
    #[command(flatten)]
    backend: crate::live::BackendArgs,
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
            Some(w) => {
                let weights: Vec<u32> = w
                    .split(',')
                    .map(|x| x.trim().parse::<u32>().with_context(|| format!("--hw {s}: weight {x:?} is not a number")))
                    .collect::<anyhow::Result<_>>()?;
                anyhow::ensure!(
                    weights.len() <= 8,
                    "--hw {s}: {} weights, the NIC has 8 traffic classes",
                    weights.len()
                );
                if let Some(c) = weights.iter().position(|&w| w == 0) {
                    anyhow::bail!("--hw {s}: class {c} has weight 0 and would never be served (weights are 1 or more)");
                }
                TcScheduler::Ets(weights)
            }
            None => anyhow::bail!("--hw {s:?}: expected rr, sp or ets:W0,W1,..."),
        },
    })
}

/// How to run a scenario beyond policy and hardware mode.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Record interval histograms of this length (ns) for `--hdr-log`.
    pub hdr_interval_ns: Option<u64>,
    /// Progress of the run, in ms of virtual time (hidden when `None`).
    pub progress: Option<ProgressBar>,
    /// Scripted policy swaps (`--swap-at`), in any order.
    pub swaps: Vec<SwapAt>,
    /// The loop's cost in virtual time (`--loop-cost`; a free loop by
    /// default here, `measured` by default on the command line).
    pub loop_cost: LoopChoice,
}

/// Width of the timeline buckets (throughput and utilization over time):
/// a hundredth of the run, at least 10 us.
pub fn bucket_ns(sc: &Scenario) -> u64 {
    ((sc.duration_ms * 1e6) as u64 / 100).max(10_000)
}

/// Runs one scenario under one configuration (the plain form other
/// commands and tests call).
#[allow(
    dead_code,
    reason = "the plain entry point the integration tests and benches call; the binary uses run_scenario_with"
)]
pub fn run_scenario(sc: &Scenario, policy: &str, hw: &TcScheduler) -> anyhow::Result<Report> {
    run_scenario_with(sc, policy, hw, &RunOptions::default())
}

/// A scenario wired up and not yet run: the dataplane on host 0 with the
/// tenants' apps, their peers on host 1, scripted swaps scheduled.
pub struct Wired {
    /// The simulated hosts.
    pub fabric: SimFabric,
    /// The dataplane over host 0's NIC.
    pub dp: Dataplane<SimRnic>,
    /// The tenants' applications, in scenario order.
    pub tenants: Vec<TenantApp>,
    /// Their peers' applications.
    pub peers: Vec<PeerApp<RendezvousReceiver<SimRnic>>>,
    /// The scenario's end, ns of the NIC's clock.
    pub end_ns: u64,
    /// NIC utilization over time, to fill while running.
    pub nic_timeline: NicTimeline,
}

/// Loads the run's policy (every backend says the same when it cannot).
pub fn load_policy(policy: &str) -> anyhow::Result<PolicyHost> {
    PolicyHost::load(policy).map_err(|e| PolicyRefused::new("--policy", policy, e).into())
}

/// A policy that did not load, as the command line names it: what was
/// refused and why on the first line (`--policy "x.wasm": the module does
/// not compile`), and the load error's own causes (wasmtime's reason) as
/// this error's causes, so that the binary prints them below it.
#[derive(Debug)]
pub struct PolicyRefused {
    /// Where the policy was named (`--policy`).
    flag: &'static str,
    /// The policy as given.
    policy: String,
    /// Why it did not load.
    err: LoadError,
}

impl PolicyRefused {
    /// `policy`, given with `flag`, refused for `err`.
    pub fn new(flag: &'static str, policy: &str, err: LoadError) -> Self {
        PolicyRefused { flag, policy: policy.to_string(), err }
    }
}

impl std::fmt::Display for PolicyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}: {}", self.flag, self.policy, self.err)
    }
}

impl std::error::Error for PolicyRefused {
    // The load error's text is already on this one's line: its causes follow.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.err.source()
    }
}

/// The dataplane of a run of `sc` over `nic`: its queues sized for the
/// scenario's QP count (thousands of QPs, exp6, get shallower queues than
/// the default, not a refusal).
pub fn dataplane<R: Rnic>(sc: &Scenario, policy: &str, nic: R) -> anyhow::Result<Dataplane<R>> {
    let host = load_policy(policy)?;
    let qps: usize = sc.tenants.iter().map(|t| t.qps as usize).sum();
    Ok(Dataplane::new(nic, host, DataplaneConfig::for_qps(qps))?)
}

/// What tenant `spec`'s app needs beyond its spec, in a run of `sc`.
pub fn tenant_setup(sc: &Scenario, spec: &TenantSpec, opts: &RunOptions) -> TenantSetup {
    let end = (sc.duration_ms * 1e6) as u64;
    TenantSetup {
        window: ((sc.warmup_ms * 1e6) as u64, end),
        duration_ns: end,
        // From the name, so a tenant alone draws what it draws beside others.
        seed: spec
            .name
            .bytes()
            .fold(sc.seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)),
        bucket_ns: bucket_ns(sc),
        interval_ns: opts.hdr_interval_ns,
    }
}

/// A tenant added to the dataplane: its handle, its buffer (twice the
/// size for a ping-pong, which sends from the first half and receives into
/// the second) and its QPs (index, endpoint), not yet connected.
pub struct Added {
    /// The tenant.
    pub handle: TenantHandle,
    /// Its buffer.
    pub mr: Mr,
    /// Its QPs.
    pub qps: Vec<(u32, QpEndpoint)>,
}

/// Adds `spec` to `dp` (see [`Added`]).
pub fn add_tenant<R: Rnic>(dp: &mut Dataplane<R>, spec: &TenantSpec) -> anyhow::Result<Added> {
    let handle = dp.add_tenant(&spec.name, spec.weight)?;
    let mr = dp.reg_mr(handle.id, peer_buf(spec))?;
    let qps = (0..spec.qps).map(|_| dp.create_qp(handle.id, spec.tc)).collect::<Result<_, _>>()?;
    Ok(Added { handle, mr, qps })
}

/// A tenant's buffer size, at either end: `size`, twice for a ping-pong.
pub fn peer_buf(spec: &TenantSpec) -> usize {
    if spec.kind == Kind::Lat {
        2 * spec.size as usize
    } else {
        spec.size as usize
    }
}

/// Where a tenant's requests land in its peer's buffer (a ping-pong
/// writes into the second half) and where replies land in its own.
pub fn target_offset(spec: &TenantSpec) -> usize {
    if spec.kind == Kind::Lat {
        spec.size as usize
    } else {
        0
    }
}

/// A tenant's peer side on `nic`: a PD, CQ, buffer and its QPs.
pub fn peer_side<P: Rnic>(nic: P, spec: &TenantSpec) -> Result<Side<P>, RnicError> {
    Side::new(nic, spec.qps as usize, peer_buf(spec), spec.tc, spec.depth.clamp(16, 4096))
}

/// Connects an added tenant's QPs to a peer on `peer_nic` (both ways, to
/// RTS); returns the peer's app and the tenant's targets, one per QP. The
/// peer runs the receiving end of the dataplane
/// ([`RendezvousReceiver`]), attached to each QP, so the SENDs a policy
/// splits can go by rendezvous.
pub fn connect_local<R: Rnic, P: Rnic>(
    dp: &mut Dataplane<R>,
    spec: &TenantSpec,
    t: &Added,
    peer_nic: P,
) -> anyhow::Result<(PeerApp<RendezvousReceiver<P>>, Vec<RemoteAddr>)> {
    let mut side = peer_side(RendezvousReceiver::new(peer_nic), spec)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    for ((index, ep), peer_qp) in t.qps.iter().zip(side.qps.clone()) {
        dp.connect_qp(t.handle.id, *index, connect::endpoint(&side.nic, peer_qp.qp_num))?;
        connect::bring_up(&mut side.nic, peer_qp.handle, *ep, access)?;
        let slots = side.nic.ring_slots(peer_qp.handle)?;
        let ring = dp.rendezvous_ring(t.handle.id, *index, slots)?;
        let records = side.nic.attach(peer_qp.handle, peer_qp.qp_num, ring)?;
        dp.attach_rendezvous(t.handle.id, *index, records)?;
    }
    let target = side.mr.remote(target_offset(spec));
    let peer = PeerApp::new(spec, side, t.mr.remote(spec.size as usize));
    Ok((peer, vec![target; spec.qps as usize]))
}

/// Builds the run of `sc` under `policy` and `hw` on a fabric whose clock
/// is `clock` (virtual for `run`, wall for `run --realtime`).
pub fn wire(
    sc: &Scenario,
    policy: &str,
    hw: &TcScheduler,
    clock: ClockMode,
    opts: &RunOptions,
) -> anyhow::Result<Wired> {
    let profile = RnicProfile::by_name(&sc.profile).with_context(|| {
        format!("key `profile`: unknown RNIC profile {:?} (known: {})", sc.profile, RnicProfile::NAMES.join(", "))
    })?;
    tracing::info!(policy, hw = ?hw, tenants = sc.tenants.len(), duration_ms = sc.duration_ms, ?clock, "run starts");
    let fabric = SimFabric::new(profile.clone(), 2, sc.seed, clock);
    fabric.set_tc_scheduler(0, hw.clone());
    fabric.set_tc_scheduler(1, hw.clone());
    let mut dp = dataplane(sc, policy, fabric.nic(0))?;
    let mut tenants = Vec::new();
    let mut peers = Vec::new();
    // Thousands of tenants take a while to connect: say so on the bar.
    let message = opts.progress.as_ref().map(|p| p.message());
    if let Some(p) = &opts.progress {
        p.set_message(format!("connecting {} tenants' QPs", sc.tenants.len()));
    }
    for spec in &sc.tenants {
        let added = add_tenant(&mut dp, spec)?;
        let (peer, remotes) = connect_local(&mut dp, spec, &added, fabric.nic(1))?;
        peers.push(peer);
        let setup = tenant_setup(sc, spec, opts);
        tenants.push(TenantApp::new(spec.clone(), added.handle, added.mr, remotes, fabric.nic(0), &setup));
    }
    for s in &opts.swaps {
        let at_ns = (s.ms * 1e6) as u64;
        dp.schedule_swap(at_ns, PolicySpec::Named(s.policy.clone()), WasmLimits::default())?;
    }
    if let (Some(p), Some(m)) = (&opts.progress, message) {
        p.set_message(m);
    }
    let end_ns = (sc.duration_ms * 1e6) as u64;
    Ok(Wired { fabric, dp, tenants, peers, end_ns, nic_timeline: NicTimeline::new(bucket_ns(sc)) })
}

/// The report of a finished run on any backend: `hw` names the NIC's
/// scheduling, `rnic` its wire figures (zero where they are not read).
pub fn report_of<R: Rnic, N: Rnic>(
    policy: &str,
    hw: String,
    dp: &Dataplane<R>,
    tenants: Vec<TenantApp<N>>,
    rnic: RnicReport,
    nic_timeline: NicTimeline,
    total_ns: u64,
) -> Report {
    let reports: Vec<TenantReport> = tenants.into_iter().map(TenantApp::into_report).collect();
    let dataplane = dp.counters();
    let policy_counters = dp.policy().counters;
    let policy_log = PolicyLog { swaps: dp.swaps().to_vec(), exits: dp.policy().exits().to_vec() };
    Report {
        config: policy.to_string(),
        scenario: String::new(),
        policy: policy.to_string(),
        hw,
        tenants: reports,
        rnic,
        cost: CostReport::new(&dataplane, &policy_counters),
        dataplane,
        policy_counters,
        policy_log,
        nic_timeline,
        loop_cost: LoopReport {
            // The caller names the source (`run_scenario_with`, real time).
            source: if dp.loop_cost().is_zero() { "zero".into() } else { "set".into() },
            model: dp.loop_cost(),
            busy_ns: dp.loop_busy_ps(total_ns) as f64 / 1000.0,
            utilization: dp.loop_busy_ps(total_ns) as f64 / (total_ns.max(1) as f64 * 1000.0),
        },
        duration_ns: total_ns.max(1),
        realtime: None,
    }
}

/// The report of a finished simulated run that lasted `total_ns` of the
/// NIC's clock.
pub fn report(
    policy: &str,
    hw: &TcScheduler,
    fabric: &SimFabric,
    dp: &Dataplane<SimRnic>,
    tenants: Vec<TenantApp>,
    nic_timeline: NicTimeline,
    total_ns: u64,
) -> Report {
    let nic = fabric.counters(0);
    let total = total_ns.max(1);
    tracing::info!(policy, events = fabric.events_run(), "run done");
    let rnic = RnicReport {
        utilization: nic.port.busy_ps as f64 / (total as f64 * 1000.0),
        wire_payload_gbps: nic.port.payload_bytes as f64 * 8.0 / total as f64,
        sched_turns: nic.sched.turns,
        ctrl_wqes: nic.sched.ctrl_wqes,
        backend: Default::default(),
    };
    report_of(policy, format!("{hw:?}"), dp, tenants, rnic, nic_timeline, total)
}

/// Every party of a run in the order a round serves them: the tenants,
/// the dataplane, then the peers.
pub(crate) fn apps<'a>(
    tenants: &'a mut [impl App],
    dp: &'a mut impl App,
    peers: &'a mut [impl App],
) -> Vec<&'a mut dyn App> {
    let mut apps: Vec<&mut dyn App> = Vec::with_capacity(tenants.len() + 1 + peers.len());
    apps.extend(tenants.iter_mut().map(|t| t as &mut dyn App));
    apps.push(dp);
    apps.extend(peers.iter_mut().map(|p| p as &mut dyn App));
    apps
}

/// Runs one scenario under one configuration, with options, in virtual time.
pub fn run_scenario_with(sc: &Scenario, policy: &str, hw: &TcScheduler, opts: &RunOptions) -> anyhow::Result<Report> {
    let Wired { fabric, mut dp, mut tenants, mut peers, end_ns: end, mut nic_timeline } =
        wire(sc, policy, hw, ClockMode::Virtual, opts)?;
    // Virtual time only: a loop in real time takes its real time.
    dp.set_loop_cost(opts.loop_cost.cost);
    {
        let mut apps = apps(&mut tenants, &mut dp, &mut peers);
        let hidden = ProgressBar::hidden();
        let progress = opts.progress.as_ref().unwrap_or(&hidden);
        drive(&fabric, &mut apps, end + 1_000_000, &mut nic_timeline, progress).context("simulation failed")?;
    }
    let mut r = report(policy, hw, &fabric, &dp, tenants, nic_timeline, end + 1_000_000);
    r.loop_cost.source = opts.loop_cost.source.clone();
    Ok(r)
}

/// Runs the command.
pub fn run(a: Args) -> anyhow::Result<()> {
    a.out.check()?;
    let sc = Scenario::load(&a.scenario)?;
    let live = a.backend.live()?;
    let policy = if a.direct { "passthrough" } else { a.policy.as_str() };
    let swaps = check_swaps(&a.swap_at, &sc)?;
    let hw = match &live {
        Some(_) => {
            crate::live::check_flags(&a.hw, a.alone, !swaps.is_empty(), a.ctl.is_some() || a.watch.is_some())?;
            TcScheduler::RoundRobin
        }
        None => {
            let hw = parse_hw(&a.hw)?;
            check_hw(&a.hw, &hw, &sc);
            hw
        }
    };
    let runs = 1 + if a.alone { sc.groups().len() } else { 0 };
    // The same swaps in the alone runs, so that the ratios compare like with like.
    let loop_cost = if live.is_some() || a.realtime { a.loop_cost.real_time()? } else { a.loop_cost.choice()? };
    let opts = RunOptions { swaps, loop_cost, ..a.out.run_options(&sc, runs) };
    let mut report = if let Some((device, mode)) = &live {
        match crate::live::run_verbs(&sc, policy, device, mode, &opts)? {
            Some(r) => r,
            // The serving side of a two-host run: the client reports.
            None => return Ok(()),
        }
    } else if a.realtime {
        let rt = Realtime {
            core: a.core,
            ctl: a.ctl.clone().map(|p| p.unwrap_or_else(crate::ctl::default_socket)),
            watch: a.watch.clone(),
            live: !a.out.quiet,
        };
        if let Some(p) = &rt.ctl {
            crate::ctl::check_socket_path(p, crate::ctl::SocketRole::Control)?;
            if !a.out.quiet {
                eprintln!("control socket: {} (perf-runner ctl --socket {} stats)", p.display(), p.display());
            }
        }
        run_realtime(&sc, policy, &hw, &opts, &rt)?
    } else {
        run_scenario_with(&sc, policy, &hw, &opts)?
    };
    report.scenario = a.scenario.display().to_string();
    report.loop_cost.source = opts.loop_cost.source.clone();
    if a.alone {
        let mut group_alone = std::collections::HashMap::new();
        for (group, first) in sc.groups() {
            let alone = run_scenario_with(&sc.alone(first), policy, &hw, &opts)?;
            if let Some(t) = alone.tenants.into_iter().next() {
                group_alone.insert(group, t.clone());
                report.tenants[first].alone = Some(Box::new(t));
            }
        }
        // The contract needs the simulator's profile (a verbs run has no alone runs).
        if let Some(profile) = RnicProfile::by_name(&sc.profile) {
            let alone = crate::isolation::contract::alone_by_tenant(&sc.tenants, &group_alone);
            crate::isolation::contract::annotate(
                &profile,
                &opts.loop_cost.cost,
                &sc.tenants,
                &mut report.tenants,
                &alone,
            );
        }
    }
    if let Some(p) = &opts.progress {
        p.finish_and_clear();
    }
    if !a.out.quiet {
        print!("{}", report.table());
        print!("{}", report.policy_log.table());
    }
    a.out.write_files(std::slice::from_ref(&report), None, &report)?;
    Ok(())
}

/// Parses the `--swap-at`s and checks them against the run: in time
/// order, and each before the scenario's end.
pub fn check_swaps(swap_at: &[String], sc: &Scenario) -> anyhow::Result<Vec<SwapAt>> {
    let swaps = swap_at.iter().map(|s| parse_swap_at(s)).collect::<anyhow::Result<Vec<_>>>()?;
    for (i, s) in swaps.iter().enumerate() {
        anyhow::ensure!(
            s.ms < sc.duration_ms,
            "--swap-at {}={}: at or after the run's end (duration_ms = {}), so it would never happen",
            s.ms,
            s.policy,
            sc.duration_ms
        );
        if let Some(prev) = i.checked_sub(1).map(|j| &swaps[j]) {
            anyhow::ensure!(
                s.ms >= prev.ms,
                "--swap-at {}={} comes after --swap-at {}={}: give the swaps in time order",
                s.ms,
                s.policy,
                prev.ms,
                prev.policy
            );
        }
    }
    Ok(swaps)
}

/// Says (on stderr) when a class scheduler cannot change anything: every
/// tenant in one traffic class.
pub fn check_hw(flag: &str, hw: &TcScheduler, sc: &Scenario) {
    let first = sc.tenants.first().map_or(0, |t| t.tc);
    if !matches!(hw, TcScheduler::RoundRobin) && sc.tenants.iter().all(|t| t.tc == first) {
        eprintln!(
            "warning: --hw {flag}: every tenant is in traffic class {first} (the scenario's `tc`), so the class \
             scheduler has nothing to order and changes nothing"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_dataplane::engine::SwapOutcome;

    /// The shipped `b_single-d_single` scenario, on the NIC's round-robin.
    fn b_single_d_single() -> (Scenario, TcScheduler) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/b_single-d_single.toml");
        (Scenario::load(&path).expect("scenario loads"), parse_hw("rr").expect("rr"))
    }

    /// The wasm `perf` module (the embedded build of `policies/perf`) gives
    /// the same run as the native `perf`, figure for figure, in virtual time.
    #[test]
    fn wasm_perf_runs_a_scenario_identically_to_native_perf() {
        let (sc, hw) = b_single_d_single();
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

    /// With nothing in flight, only the driver's timers wake a tenant that
    /// starts late or an open-loop tenant between sparse arrivals.
    #[test]
    fn timers_wake_late_and_sparse_tenants_on_an_idle_nic() {
        let sc = Scenario::parse(
            "duration_ms = 40\nwarmup_ms = 1\n\
             [[tenant]]\nname = 'late'\nkind = 'bw'\nsize = 4096\nstart_ms = 30\nstop_ms = 31\n\
             [[tenant]]\nname = 'sparse'\nkind = 'open'\nrate_per_s = 5000\nsize = 64\n",
        )
        .expect("scenario");
        let r = run_scenario(&sc, "passthrough", &parse_hw("rr").expect("rr")).expect("run");
        let (late, sparse) = (&r.tenants[0], &r.tenants[1]);
        assert!(late.completed > 100, "late tenant completed {}", late.completed);
        // 5000/s over 39 ms: about 195 arrivals, each served at once.
        assert!((150..=250).contains(&sparse.completed), "sparse tenant completed {}", sparse.completed);
        assert!(sparse.latency_us.p50 < 2.5, "an idle NIC serves an arrival at once: {:?}", sparse.latency_us);
        let start_bucket = (30_000_000 / late.timeline.bucket_ns) as usize;
        let before: u64 = late.timeline.messages[..start_bucket].iter().sum();
        assert_eq!(before, 0, "the late tenant posted before its start");
    }

    /// Every run's JSON and table carry the loop's cost model and busy
    /// time; a zero cost reports none and runs as before.
    #[test]
    fn the_report_carries_the_loop_cost_model_and_its_utilization() {
        let (sc, hw) = b_single_d_single();
        let free = run_scenario(&sc, "perf", &hw).expect("run");
        let zero = LoopChoice::parse("zero").expect("zero");
        let zero = run_scenario_with(&sc, "perf", &hw, &RunOptions { loop_cost: zero, ..RunOptions::default() })
            .expect("zero run");
        let json = |r: &Report| serde_json::to_value(r).expect("serialises");
        assert_eq!(json(&free), json(&zero), "a zero cost is the default of a library run");
        assert_eq!(json(&zero)["loop_cost"]["utilization"], 0.0);
        let opts = RunOptions { loop_cost: LoopChoice::measured(), ..RunOptions::default() };
        let r = run_scenario_with(&sc, "perf", &hw, &opts).expect("measured run");
        let j = json(&r);
        let l = &j["loop_cost"];
        assert_eq!(l["source"], "measured");
        assert_eq!(l["model"]["wqe_ps"], perf_dataplane::engine::LoopCost::MEASURED.wqe_ps);
        for key in ["round_ps", "cqe_ps"] {
            assert!(l["model"][key].as_u64().is_some_and(|v| v > 0), "{key}: {l}");
        }
        for key in ["call_ps", "tick_ps", "tick_tenant_ps"] {
            assert!(l["model"]["native"][key].is_u64() && l["model"]["wasm"][key].is_u64(), "{key}: {l}");
        }
        let util = l["utilization"].as_f64().expect("utilization");
        assert!(util > 0.0 && util <= 1.0, "{l}");
        assert!(l["busy_ns"].as_f64().is_some_and(|b| b > 0.0 && b <= r.duration_ns as f64), "{l}");
        let table = r.table();
        assert_eq!(table.lines().filter(|l| l.starts_with("loop: cost measured")).count(), 1, "{table}");
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
        let (sc, hw) = b_single_d_single();
        let swaps: Vec<SwapAt> = ["2=wasm:perf", "4=missing.wasm", "6=passthrough"]
            .iter()
            .map(|s| parse_swap_at(s).expect("parses"))
            .collect();
        let opts = RunOptions { swaps, ..RunOptions::default() };
        let report = run_scenario_with(&sc, "perf", &hw, &opts).expect("run");
        let log = &report.policy_log;
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
