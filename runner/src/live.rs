//! `perf-runner run --backend verbs`: a scenario through the dataplane on a
//! real RDMA device, in real time (`--backend sim`, the default, is the
//! simulator in virtual time: [`crate::run_cmd`]).
//!
//! - **Loopback** (`--device NAME`): the dataplane and the tenants use one
//!   context of the device, the tenants' peers a second context of the same
//!   device; QPs connect on the device (RoCE loopback, or the same IB port).
//! - **Two hosts**: one host serves (`--device NAME --serve PORT`): it runs
//!   the scenario's peer side (targets, SEND receivers, ping-pong
//!   reflectors); the other (`--device NAME --peer HOST:PORT`) runs the
//!   dataplane and the tenants. Both load the same scenario file; they swap
//!   QP endpoints and buffer keys over TCP ([`perf_dataplane::rnic::verbs::oob`]),
//!   meet at a barrier once every QP is in RTS, and again at the end.
//!
//! The run loop spins every app (tenants, the dataplane, local peers) on
//! one thread until the scenario's end on the device clock. The backend is
//! chosen at run time (`Box<dyn Rnic>`), so a build without the `verbs`
//! feature, or a machine without a device, fails with a clear error that
//! names the device looked for and what was found, and exits non-zero.
//! The same loop runs on the simulator in wall-clock mode in the tests.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use indicatif::ProgressBar;
use perf_dataplane::engine::{Dataplane, DataplaneConfig};
use perf_dataplane::rnic::sizing::fit_queue_depths;
use perf_dataplane::rnic::verbs::oob::{ConnInfo, OobConn};
use perf_dataplane::rnic::verbs::open::{open_verbs_with, GidChoice};
use perf_dataplane::rnic::*;
use perf_dataplane::traffic::App;

use crate::driver::NicTimeline;
use crate::report::{Report, RnicReport};
use crate::run_cmd::{self, RunOptions};
use crate::scenario::Scenario;
use crate::workload::{PeerApp, TenantApp};

/// How long to wait for the other host (connect, accept, each message).
const OOB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the serving side keeps answering after the scenario's end, so
/// that the client's last messages complete.
const SERVE_GRACE_NS: u64 = 500_000_000;

/// Which NIC runs a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Backend {
    /// The simulated ConnectX-6-class NIC, in virtual time.
    #[default]
    Sim,
    /// A real RDMA device through libibverbs, in real time.
    Verbs,
}

/// The backend flags of `run`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BackendArgs {
    /// Which NIC runs the scenario: `sim` (the simulator, virtual time) or
    /// `verbs` (a real RDMA device, real time; needs a build with
    /// `--features perf-dataplane/verbs`, see docs/hardware.md).
    #[arg(long, value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// The RDMA device for `--backend verbs` (`mlx5_0`, `rxe0`, ...;
    /// `perf-runner devices` lists them).
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Two-host mode, client side: run the dataplane and the tenants here,
    /// their peers on the host started with `--serve PORT`.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "serve")]
    pub peer: Option<String>,
    /// Two-host mode, serving side: listen on PORT and run the scenario's
    /// peer side for the client that connects.
    #[arg(long, value_name = "PORT")]
    pub serve: Option<u16>,
    /// The GID index QPs use on `--device` (perftest's `-x`; `perf-runner
    /// devices` lists the table). Default: the GID of the address that
    /// reaches `--peer`, else the first IPv4 RoCE v2 GID.
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
}

/// The device of a verbs run and how to choose its GID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsDevice {
    /// `--device`.
    pub name: String,
    /// `--gid-index`.
    pub gid_index: Option<u32>,
}

/// What a verbs run does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveMode {
    /// Both sides on one device.
    Loopback,
    /// The dataplane here, the peers at this address.
    Client(String),
    /// The peers here, for a client connecting to this port.
    Serve(u16),
}

impl BackendArgs {
    /// The device and mode of a verbs run; `None` for the simulator.
    /// Flags that only mean something on the other backend are errors.
    pub fn live(&self) -> anyhow::Result<Option<(VerbsDevice, LiveMode)>> {
        if self.backend == Backend::Sim {
            if self.device.is_some() || self.peer.is_some() || self.serve.is_some() || self.gid_index.is_some() {
                anyhow::bail!(
                    "--device, --peer, --serve and --gid-index need --backend verbs (the simulator has one NIC per host)"
                );
            }
            return Ok(None);
        }
        let Some(device) = self.device.clone() else {
            anyhow::bail!(
                "--backend verbs needs --device NAME (`perf-runner devices` lists this machine's RDMA devices)"
            );
        };
        let mode = match (&self.peer, self.serve) {
            (Some(p), _) => LiveMode::Client(p.clone()),
            (None, Some(port)) => LiveMode::Serve(port),
            (None, None) => LiveMode::Loopback,
        };
        Ok(Some((VerbsDevice { name: device, gid_index: self.gid_index }, mode)))
    }
}

/// One backend shared by the dataplane and the tenants' CPU access to
/// their buffers (a device context has one owner in safe code; this is it),
/// with the clock counted from an epoch set when the run starts, so that
/// the scenario's times start at 0 whatever the setup took.
pub struct Shared<R: Rnic> {
    inner: Arc<Mutex<R>>,
    epoch: Arc<AtomicU64>,
}

impl<R: Rnic> Clone for Shared<R> {
    fn clone(&self) -> Self {
        Shared { inner: self.inner.clone(), epoch: self.epoch.clone() }
    }
}

impl<R: Rnic> Shared<R> {
    /// Shares `nic`, epoch 0.
    pub fn new(nic: R) -> Self {
        Shared { inner: Arc::new(Mutex::new(nic)), epoch: Arc::new(AtomicU64::new(0)) }
    }

    fn lock(&self) -> MutexGuard<'_, R> {
        // Nothing holds the lock across a panic that is caught, so a
        // poisoned lock still guards consistent backend state.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes "now" time 0 for every clone.
    pub fn start_clock(&self) {
        let now = self.lock().clock_ns();
        self.epoch.store(now, Ordering::Relaxed);
    }
}

impl<R: Rnic> Rnic for Shared<R> {
    fn clock_ns(&self) -> u64 {
        self.lock().clock_ns().saturating_sub(self.epoch.load(Ordering::Relaxed))
    }

    perf_dataplane::forward_rnic!(|s| s.lock(); device_info, cross_channel, port_info, port_traffic, initial_psn, backend_counters, alloc_pd, reg_mr, dereg_mr,
        write_mr, read_mr, create_cq, destroy_cq, create_qp, modify_qp, qp_state, destroy_qp, post_send, post_recv,
        poll_cq);
}

/// Where a live run's peers are.
pub enum Peers<P: Rnic + Clone> {
    /// On this host, on this NIC (a second context of the device in
    /// loopback; the simulator's other host in tests).
    Local(P),
    /// On the other host, reached through this connection.
    Remote(OobConn),
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn remote_of(c: &ConnInfo) -> RemoteAddr {
    RemoteAddr { addr: c.addr, rkey: c.rkey }
}

/// Spins `apps` until `clock` reaches `until_ns`, moving `progress` (ms).
fn spin(apps: &mut [&mut dyn App], clock: &dyn Rnic, until_ns: u64, progress: &ProgressBar) -> anyhow::Result<()> {
    let mut passes = 0u64;
    loop {
        let now = clock.clock_ns();
        if now >= until_ns {
            return Ok(());
        }
        passes += 1;
        if passes.is_multiple_of(4096) {
            progress.set_position(now / 1_000_000);
        }
        let mut did = false;
        for a in apps.iter_mut() {
            did |= a.poll()?;
        }
        if !did {
            // Nothing to do this pass: let another thread of this process
            // run (returns at once when none waits for the core).
            std::thread::yield_now();
        }
    }
}

/// Runs `sc` with the dataplane (and the tenants) on `nic` and the peers
/// as `peers` say, in real time on `nic`'s clock.
pub fn run_live<R: Rnic, P: Rnic + Clone>(
    sc: &Scenario,
    policy: &str,
    nic: R,
    mut peers: Peers<P>,
    opts: &RunOptions,
) -> anyhow::Result<Report> {
    let nic = Shared::new(nic);
    // Queue depths the device can hold for this many QPs (max_cqe,
    // mlx5's send-queue blocks), at most the simulator's.
    let qps: usize = sc.tenants.iter().map(|t| t.qps as usize).sum();
    let mut cfg = DataplaneConfig::for_qps(qps);
    (cfg.sq_depth, cfg.rq_depth) = fit_queue_depths(&nic.device_info(), qps, cfg.sq_depth, cfg.rq_depth);
    let mut dp = Dataplane::new(nic.clone(), run_cmd::load_policy(policy)?, cfg)?;
    let end = (sc.duration_ms * 1e6) as u64;
    // Per tenant: what the dataplane holds and its targets; local peers' apps.
    let mut setups = Vec::new();
    let mut local = Vec::new();
    let mut remote_peer = Vec::new();
    for spec in &sc.tenants {
        let added = run_cmd::add_tenant(&mut dp, spec)?;
        match &mut peers {
            Peers::Local(pnic) => {
                let (peer, remotes) = run_cmd::connect_local(&mut dp, spec, &added, pnic.clone())?;
                local.push(peer);
                setups.push((added, remotes));
            }
            Peers::Remote(_) => {
                let reply = added.mr.remote(spec.size as usize);
                for (_, ep) in &added.qps {
                    remote_peer.push(ConnInfo { lid: 0, endpoint: *ep, rkey: reply.rkey, addr: reply.addr });
                }
                setups.push((added, Vec::new()));
            }
        }
    }
    if let Peers::Remote(conn) = &mut peers {
        let theirs = exchange_endpoints(conn, &remote_peer, "serving host")?;
        let mut it = theirs.iter();
        for (added, remotes) in setups.iter_mut() {
            for (index, _) in &added.qps {
                let Some(c) = it.next() else { break };
                dp.connect_qp(added.handle.id, *index, c.endpoint)?;
                remotes.push(remote_of(c));
            }
        }
        conn.barrier().context("waiting for the serving host's QPs to reach RTS")?;
    }
    let mut tenants = Vec::new();
    for (spec, (added, remotes)) in sc.tenants.iter().zip(setups) {
        let setup = run_cmd::tenant_setup(sc, spec, opts);
        tenants.push(TenantApp::new(spec.clone(), added.handle, added.mr, remotes, nic.clone(), &setup));
    }
    tracing::info!(policy, tenants = sc.tenants.len(), duration_ms = sc.duration_ms, "live run starts");
    nic.start_clock();
    {
        let mut apps = run_cmd::apps(&mut tenants, &mut dp, &mut local);
        let hidden = ProgressBar::hidden();
        spin(&mut apps, &nic, end, opts.progress.as_ref().unwrap_or(&hidden)).context("the run failed")?;
    }
    if let Peers::Remote(conn) = &mut peers {
        conn.barrier().context("the final barrier with the serving host")?;
    }
    let hw = format!("{} ({:?})", dp.nic().device_info().name, dp.nic().cross_channel());
    // A real NIC's wire counters are not read (ethtool / port counters
    // are outside libibverbs): only the tenants' own figures.
    let backend = dp.nic().backend_counters().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let rnic = RnicReport { utilization: 0.0, wire_payload_gbps: 0.0, sched_turns: 0, ctrl_wqes: 0, backend };
    Ok(run_cmd::report_of(policy, hw, &dp, tenants, rnic, NicTimeline::new(run_cmd::bucket_ns(sc)), end))
}

/// Swaps this host's QP endpoints, `mine`, with those of the other host
/// (`other` names it) over `conn`; both hosts must have as many QPs (they
/// loaded the same scenario file).
fn exchange_endpoints(conn: &mut OobConn, mine: &[ConnInfo], other: &str) -> anyhow::Result<Vec<ConnInfo>> {
    let theirs = conn.exchange(mine).with_context(|| format!("swapping QP endpoints with the {other}"))?;
    if theirs.len() != mine.len() {
        anyhow::bail!(
            "the {other} has {} QPs for this scenario, this host {}: do both load the same scenario file?",
            theirs.len(),
            mine.len()
        );
    }
    Ok(theirs)
}

/// The serving side of a two-host run: the scenario's peers on `nic` for
/// the client that connects to `listener`, until the scenario's end.
pub fn serve<P: Rnic>(sc: &Scenario, nic: P, listener: &TcpListener) -> anyhow::Result<()> {
    let clock = Shared::new(nic);
    let mut sides = Vec::new();
    let mut mine = Vec::new();
    for spec in &sc.tenants {
        let side = run_cmd::peer_side(clock.clone(), spec)?;
        let target = side.mr.remote(run_cmd::target_offset(spec));
        for qp in &side.qps {
            let endpoint = connect::endpoint(&side.nic, qp.qp_num);
            mine.push(ConnInfo { lid: 0, endpoint, rkey: target.rkey, addr: target.addr });
        }
        sides.push(side);
    }
    let at = listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
    eprintln!("serving {} tenants' peers on {at}; waiting for the client (--peer)", sc.tenants.len());
    let mut conn = OobConn::accept(listener, OOB_TIMEOUT).context("waiting for the client")?;
    let theirs = exchange_endpoints(&mut conn, &mine, "client")?;
    let mut it = theirs.iter();
    let mut peers = Vec::new();
    for (spec, mut side) in sc.tenants.iter().zip(sides) {
        let mut reply = RemoteAddr { addr: 0, rkey: 0 };
        for i in 0..side.qps.len() {
            let Some(c) = it.next() else { break };
            let qp = side.qps[i];
            connect::bring_up(&mut side.nic, qp.handle, c.endpoint, access())?;
            reply = remote_of(c);
        }
        peers.push(PeerApp::new(spec, side, reply));
    }
    // Post the receives (SEND receivers prime on their first poll) before
    // the client may send, as perftest does, so that no SEND meets an
    // empty receive queue (RNR retries) at the start.
    for p in peers.iter_mut() {
        p.poll()?;
    }
    conn.barrier().context("waiting for the client's QPs to reach RTS")?;
    clock.start_clock();
    let mut apps: Vec<&mut dyn App> = peers.iter_mut().map(|p| p as &mut dyn App).collect();
    let until = (sc.duration_ms * 1e6) as u64 + SERVE_GRACE_NS;
    spin(&mut apps, &clock, until, &ProgressBar::hidden()).context("serving failed")?;
    conn.barrier().context("the final barrier with the client")?;
    eprintln!("served {} tenants' peers for {} ms", sc.tenants.len(), sc.duration_ms);
    Ok(())
}

/// `run --backend verbs`: opens the device (a clear error naming the
/// device and what this machine has if it cannot) and runs `sc` in `mode`.
/// Returns `None` on the serving side (the client reports).
pub fn run_verbs(
    sc: &Scenario,
    policy: &str,
    device: &VerbsDevice,
    mode: &LiveMode,
    opts: &RunOptions,
) -> anyhow::Result<Option<Report>> {
    let name = &device.name;
    let open = |prefer_addr| {
        open_verbs_with(name, &GidChoice { index: device.gid_index, prefer_addr })
            .with_context(|| format!("--backend verbs --device {name}"))
    };
    match mode {
        LiveMode::Loopback => {
            let nic = open(None)?;
            // A second context of the same device for the peers.
            let peers = Shared::new(open(None)?);
            run_live(sc, policy, nic, Peers::Local(peers), opts).map(Some)
        }
        LiveMode::Client(addr) => {
            // Connect first: the socket's local address names the
            // interface that reaches the peer, whose GID the QPs then use.
            let conn = OobConn::connect(addr.as_str(), OOB_TIMEOUT)
                .with_context(|| format!("--peer {addr}: connecting to the serving host"))?;
            let nic = open(conn.local_addr().ok().map(|a| a.ip()))?;
            run_live::<_, Shared<Box<dyn Rnic>>>(sc, policy, nic, Peers::Remote(conn), opts).map(Some)
        }
        LiveMode::Serve(port) => {
            let nic = open(None)?;
            let listener =
                TcpListener::bind(("0.0.0.0", *port)).with_context(|| format!("--serve {port}: listening"))?;
            serve(sc, nic, &listener)?;
            Ok(None)
        }
    }
}

/// Refuses, for `run --backend verbs`, the flags only the simulator has.
pub fn check_flags(hw: &str, alone: bool, swaps: bool, ctl_or_watch: bool) -> anyhow::Result<()> {
    if hw != "rr" {
        anyhow::bail!(
            "--hw {hw}: a real NIC's traffic-class scheduler is set outside PeRF-rs (mlnx_qos, dcb; docs/hardware.md)"
        );
    }
    if alone || swaps {
        anyhow::bail!("--alone and --swap-at run only on the simulator (--backend sim)");
    }
    if ctl_or_watch {
        anyhow::bail!(
            "--ctl and --watch drive the simulator's real-time run; with --backend verbs they are not supported yet"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_dataplane::rnic::host_only::HostOnly;
    use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric};

    /// WRITE bandwidth on two QPs, a WRITE ping-pong, SEND bandwidth.
    const SCENARIO: &str = "duration_ms = 40\nwarmup_ms = 5\nseed = 3\n\
        [[tenant]]\nname = 'bulk'\nkind = 'bw'\nop = 'write'\nsize = 65536\nqps = 2\ndepth = 8\n\
        [[tenant]]\nname = 'pingpong'\nkind = 'lat'\nop = 'write'\nsize = 64\n\
        [[tenant]]\nname = 'sends'\nkind = 'bw'\nop = 'send'\nsize = 4096\ndepth = 16\n";

    fn check(report: &Report) {
        assert_eq!(report.tenants.len(), 3);
        for t in &report.tenants {
            assert!(t.completed > 0, "{} completed nothing", t.name);
            assert_eq!(t.errors, 0, "{} had error completions", t.name);
        }
        assert!(report.dataplane.completions > 0);
    }

    #[test]
    fn backend_flags_are_checked() {
        let sim = BackendArgs::default();
        assert_eq!(sim.live().expect("sim"), None);
        let e = BackendArgs { device: Some("rxe0".into()), ..BackendArgs::default() }.live().expect_err("sim + device");
        assert!(e.to_string().contains("--backend verbs"), "{e}");
        let verbs = BackendArgs { backend: Backend::Verbs, ..BackendArgs::default() };
        assert!(verbs.live().expect_err("no device").to_string().contains("--device NAME"));
        let dev = |peer: Option<&str>, serve| BackendArgs {
            backend: Backend::Verbs,
            device: Some("rxe0".into()),
            peer: peer.map(String::from),
            serve,
            gid_index: None,
        };
        let rxe0 = VerbsDevice { name: "rxe0".into(), gid_index: None };
        assert_eq!(dev(None, None).live().expect("ok"), Some((rxe0.clone(), LiveMode::Loopback)));
        assert_eq!(dev(Some("h:1"), None).live().expect("ok"), Some((rxe0.clone(), LiveMode::Client("h:1".into()))));
        assert_eq!(dev(None, Some(7)).live().expect("ok"), Some((rxe0, LiveMode::Serve(7))));
        let gid3 = BackendArgs { gid_index: Some(3), ..dev(None, None) }.live().expect("ok");
        assert_eq!(gid3.map(|(d, _)| d.gid_index), Some(Some(3)));
        let e = BackendArgs { gid_index: Some(3), ..BackendArgs::default() }.live().expect_err("sim + gid index");
        assert!(e.to_string().contains("--gid-index"), "{e}");
    }

    #[test]
    fn a_missing_device_fails_clearly() {
        let sc = Scenario::parse(SCENARIO).expect("scenario");
        let device = VerbsDevice { name: "perf-rs-no-such-device".into(), gid_index: None };
        let e =
            run_verbs(&sc, "perf", &device, &LiveMode::Loopback, &RunOptions::default()).expect_err("no such device");
        let text = format!("{e:#}");
        assert!(
            text.contains("--device perf-rs-no-such-device") && text.contains("\"perf-rs-no-such-device\""),
            "{text}"
        );
    }

    /// The live loop in loopback mode, with the simulator (wall clock) as
    /// the device and its cross-channel hidden, as on upstream rdma-core.
    #[test]
    fn the_live_loop_runs_a_scenario_in_loopback() {
        let sc = Scenario::parse(SCENARIO).expect("scenario");
        let f = SimFabric::new(RnicProfile::cx6_100g(), 2, 1, ClockMode::Wall);
        let nic = HostOnly::new(f.nic(0), CrossChannel::HostGated);
        let report = run_live(&sc, "perf", nic, Peers::Local(f.nic(1)), &RunOptions::default()).expect("live run");
        check(&report);
        assert!(report.hw.contains("HostGated"), "{}", report.hw);
    }

    /// Two-host mode: the serving side on one thread, the client on this
    /// one, over a TCP connection on localhost.
    #[test]
    fn two_hosts_swap_endpoints_and_run() {
        let sc = Scenario::parse(SCENARIO).expect("scenario");
        let f = SimFabric::new(RnicProfile::cx6_100g(), 2, 1, ClockMode::Wall);
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (server_sc, server_nic) = (sc.clone(), f.nic(1));
        let server = std::thread::spawn(move || serve(&server_sc, server_nic, &listener));
        let conn = OobConn::connect(addr, OOB_TIMEOUT).expect("connect");
        // Cross-channel hidden as in loopback (the simulator's in-NIC
        // zero-weight WAITs cost it many events in wall-clock mode).
        let nic = Napping(HostOnly::new(f.nic(0), CrossChannel::HostGated));
        let report =
            run_live::<_, SimRnic>(&sc, "perf", nic, Peers::Remote(conn), &RunOptions::default()).expect("client run");
        server.join().expect("server thread").expect("server");
        check(&report);
    }

    use perf_dataplane::rnic::sim::SimRnic;

    /// The client's NIC in the two-host test: sleeps briefly on every
    /// clock read. Both threads share one wall-clock simulator behind one
    /// lock, which a thread spinning on it can hold nearly all the time;
    /// the naps let the serving thread in. (Two real hosts share nothing.)
    struct Napping(HostOnly<SimRnic>);

    impl Rnic for Napping {
        fn device_info(&self) -> DeviceInfo {
            self.0.device_info()
        }
        fn cross_channel(&self) -> CrossChannel {
            self.0.cross_channel()
        }
        fn port_info(&self) -> PortInfo {
            self.0.port_info()
        }
        fn clock_ns(&self) -> u64 {
            std::thread::sleep(Duration::from_micros(20));
            self.0.clock_ns()
        }
        fn alloc_pd(&mut self) -> Result<PdHandle, RnicError> {
            self.0.alloc_pd()
        }
        fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError> {
            self.0.reg_mr(pd, len, access)
        }
        fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
            self.0.dereg_mr(mr)
        }
        fn write_mr(&mut self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<(), RnicError> {
            self.0.write_mr(mr, offset, data)
        }
        fn read_mr(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<(), RnicError> {
            self.0.read_mr(mr, offset, out)
        }
        fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError> {
            self.0.create_cq(attr)
        }
        fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError> {
            self.0.destroy_cq(cq)
        }
        fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
            self.0.create_qp(pd, attr)
        }
        fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError> {
            self.0.modify_qp(qp, transition)
        }
        fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError> {
            self.0.qp_state(qp)
        }
        fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
            self.0.destroy_qp(qp)
        }
        fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
            self.0.post_send(qp, wrs)
        }
        fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
            self.0.post_recv(qp, wrs)
        }
        fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
            self.0.poll_cq(cq, out)
        }
    }
}
