//! `perf-runner run --realtime`: the scenario on the wall-clock model of
//! the NIC. The dataplane spins on its own pinned core
//! ([`Dataplane::run_pinned`](perf_dataplane::engine::Dataplane::run_pinned)),
//! each tenant is a thread of its own that talks to it only over its
//! channels, the peers share one thread, and this thread samples the NIC,
//! moves the progress bar, watches a policy file and prints swaps as they
//! happen. An optional control socket ([`crate::ctl`]) takes live swaps,
//! stats and pause / resume.
//!
//! At the scenario's end the control socket closes, paused tenants are
//! resumed so that their held requests complete, and each tenant thread
//! waits (at most [`DRAIN`]) for what it has in flight before the loop
//! stops. Times are of the NIC's clock, which starts when the fabric is
//! made: the setup before the run takes a few ms of it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use perf_dataplane::engine::OperatorHandle;
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::WasmLimits;
use perf_dataplane::rendezvous::RendezvousReceiver;
use perf_dataplane::rnic::sim::{ClockMode, SimRnic, TcScheduler};
use perf_dataplane::traffic::{App, AppError};

use crate::ctl::{swap_line, CtlServer};
use crate::report::{RealtimeReport, Report};
use crate::run_cmd::{report, wire, RunOptions, Wired};
use crate::scenario::Scenario;
use crate::workload::{PeerApp, TenantApp};

/// How long tenants wait for their in-flight requests after the end.
pub const DRAIN: Duration = Duration::from_secs(5);

/// How often the watched policy file is looked at.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The real-time settings of a run.
#[derive(Debug, Clone, Default)]
pub struct Realtime {
    /// The dataplane's core (default: the last one).
    pub core: Option<usize>,
    /// Listen for `perf-runner ctl` on this socket.
    pub ctl: Option<PathBuf>,
    /// Swap to this policy file whenever it changes.
    pub watch: Option<PathBuf>,
    /// Print swaps as they happen (on stderr).
    pub live: bool,
}

/// The core the dataplane spins on: `asked` (`--core`), which must be one
/// of this machine's, or else the last one, away from core 0 where the
/// system and the tenants' threads mostly run. `None` where the machine
/// does not say which cores it has.
pub fn pick_core(asked: Option<usize>) -> anyhow::Result<Option<usize>> {
    let ids: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect();
    match asked {
        Some(c) if !ids.is_empty() && !ids.contains(&c) => {
            let (lo, hi) = (ids.iter().min().copied().unwrap_or(0), ids.iter().max().copied().unwrap_or(0));
            anyhow::bail!("--core {c}: this process may run on cores {lo} to {hi} only")
        }
        Some(c) => Ok(Some(c)),
        None => Ok(ids.iter().max().copied()),
    }
}

/// A tenant's thread: polls its app until the end, then until nothing is
/// in flight (or [`DRAIN`] has passed, or the loop has died: `abort`).
fn tenant_thread(mut app: TenantApp, end_ns: u64, abort: Arc<AtomicBool>) -> Result<TenantApp, AppError> {
    let give_up = end_ns + DRAIN.as_nanos() as u64;
    loop {
        let did = app.poll()?;
        let now = app.now_ns();
        if (now >= end_ns && app.in_flight() == 0) || now >= give_up || abort.load(Ordering::Relaxed) {
            return Ok(app);
        }
        if !did {
            std::thread::yield_now();
        }
    }
}

/// The peers' thread: polls them until `stop`.
fn peers_thread(mut peers: Vec<PeerApp<RendezvousReceiver<SimRnic>>>, stop: Arc<AtomicBool>) -> Result<(), AppError> {
    while !stop.load(Ordering::Relaxed) {
        let mut did = false;
        for p in &mut peers {
            did |= p.poll()?;
        }
        if !did {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Swaps to a policy file each time it changes (modification time).
struct Watch {
    path: PathBuf,
    seen: Option<SystemTime>,
    next: Instant,
}

impl Watch {
    fn new(path: PathBuf) -> Self {
        let seen = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        Watch { path, seen, next: Instant::now() }
    }

    fn check(&mut self, op: &OperatorHandle) {
        if Instant::now() < self.next {
            return;
        }
        self.next = Instant::now() + WATCH_EVERY;
        let Ok(m) = std::fs::metadata(&self.path).and_then(|m| m.modified()) else { return };
        if self.seen != Some(m) {
            self.seen = Some(m);
            tracing::info!(path = %self.path.display(), "watched policy file changed: swapping");
            // Nobody waits for it: it applies when ready, or is refused.
            let _ = op.request_swap(PolicySpec::Named(self.path.display().to_string()), WasmLimits::default());
        }
    }
}

/// Runs `sc` in real time (see the module comment).
pub fn run_realtime(
    sc: &Scenario,
    policy: &str,
    hw: &TcScheduler,
    opts: &RunOptions,
    rt: &Realtime,
) -> anyhow::Result<Report> {
    let Wired { fabric, mut dp, tenants, peers, end_ns, mut nic_timeline } =
        wire(sc, policy, hw, ClockMode::Wall, opts)?;
    let op = dp.operator_handle();
    let core = pick_core(rt.core)?;
    let stop_loop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let dp_thread = dp.run_pinned(core, stop_loop.clone()).context("starting the dataplane thread")?;
    let ctl = match &rt.ctl {
        Some(p) => match CtlServer::start(p, op.clone(), started, crate::ctl::SocketAccess::OWNER) {
            Ok(s) => Some(s),
            Err(e) => {
                stop_loop.store(true, Ordering::Relaxed);
                let _ = dp_thread.join();
                return Err(e);
            }
        },
        None => None,
    };
    let names: Vec<String> = sc.tenants.iter().map(|t| t.name.clone()).collect();
    let abort = Arc::new(AtomicBool::new(false));
    let tenant_threads: Vec<(String, JoinHandle<Result<TenantApp, AppError>>)> = tenants
        .into_iter()
        .zip(&names)
        .map(|(app, name)| {
            let abort = abort.clone();
            let t = std::thread::Builder::new()
                .name(format!("tenant-{name}"))
                .spawn(move || tenant_thread(app, end_ns, abort))
                .with_context(|| format!("starting tenant {name}'s thread"))?;
            Ok((name.clone(), t))
        })
        .collect::<anyhow::Result<_>>()?;
    let stop_peers = Arc::new(AtomicBool::new(false));
    let flag = stop_peers.clone();
    let peer_thread = std::thread::Builder::new()
        .name("peers".into())
        .spawn(move || peers_thread(peers, flag))
        .context("starting the peers' thread")?;

    // The run: sample, show progress, watch, report swaps as they come.
    let mut watch = rt.watch.clone().map(Watch::new);
    let mut printed = 0u64;
    loop {
        let now = fabric.now_ns();
        nic_timeline.sample(&fabric, now);
        if let Some(p) = &opts.progress {
            p.set_position(now / 1_000_000);
        }
        if let Some(w) = &mut watch {
            w.check(&op);
        }
        if rt.live && op.swaps_recorded() > printed {
            if let Ok(s) = op.snapshot(Duration::from_secs(5)) {
                for r in &s.swaps[printed as usize..] {
                    eprintln!("swap at {}", swap_line(r));
                }
                printed = s.swaps.len() as u64;
            }
        }
        if dp_thread.is_finished() {
            // The loop failed: its error is reported below.
            abort.store(true, Ordering::Relaxed);
            break;
        }
        if now >= end_ns {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The end: no more operators; whoever is paused finishes its work.
    if let Some(c) = ctl {
        c.stop();
    }
    for name in &names {
        let _ = op.set_paused(name, false, Duration::from_secs(5));
    }
    let mut apps = Vec::new();
    let mut first_err = None;
    for (name, t) in tenant_threads {
        match t.join() {
            Ok(Ok(app)) => apps.push(app),
            Ok(Err(e)) => {
                first_err.get_or_insert_with(|| anyhow::anyhow!("tenant {name}: {e}"));
            }
            Err(_) => {
                first_err.get_or_insert_with(|| anyhow::anyhow!("tenant {name}'s thread panicked"));
            }
        }
    }
    stop_peers.store(true, Ordering::Relaxed);
    let peers_result = peer_thread.join();
    stop_loop.store(true, Ordering::Relaxed);
    let (dp, pin) = dp_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the dataplane thread panicked"))?
        .context("the dataplane loop failed")?;
    if let Some(e) = first_err {
        return Err(e);
    }
    match peers_result {
        Ok(r) => r.context("a peer failed")?,
        Err(_) => anyhow::bail!("the peers' thread panicked"),
    }
    let total = fabric.now_ns();
    nic_timeline.sample(&fabric, total);
    let taken = apps.iter().map(TenantApp::taken).sum();
    let in_flight = apps.iter().map(TenantApp::in_flight).sum();
    let mut r = report(policy, hw, &fabric, &dp, apps, nic_timeline, total);
    r.realtime = Some(RealtimeReport {
        core: pin.core,
        pinned: pin.pinned,
        wall_ms: pin.wall.as_secs_f64() * 1e3,
        rounds: pin.rounds,
        busy_fraction: pin.busy_fraction,
        policy_share: pin.policy_share,
        delivered: dp.counters().completions,
        taken,
        in_flight,
    });
    Ok(r)
}
