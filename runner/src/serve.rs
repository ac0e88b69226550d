//! `perf-runner serve`: the dataplane as a daemon for tenants that are
//! other processes ([`perf_client`] on their side, `docs/shm-abi.md` for
//! the ABI).
//!
//! The dataplane spins on its pinned core over the wall-clock simulated
//! NIC ([`Dataplane::run_pinned_with`]); every tenant is one connection on
//! the daemon's Unix socket, and its QPs connect to other tenants' QPs in
//! the NIC's loopback. A thread per connection answers the setup protocol
//! and hands what must touch the dataplane (adding the tenant, registering
//! its memfds as regions, creating and connecting QPs) to the loop as
//! [`Setup`] commands. At every round boundary the loop also runs each
//! client's [`Bridge`]: requests from its shared request ring into its
//! [`TenantHandle`], completions from the handle into its completion ring.
//! Live control (`perf-runner ctl`) works as for `run --realtime`.
//!
//! A client that goes away (its socket ends) or breaks its ring is closed
//! ([`Bridge::close`]): its tenant is flushed ([`Dataplane::flush_tenant`]:
//! what it had in flight completes, with success or a flush error, and is
//! dropped), then removed ([`Dataplane::remove_tenant`]: its QPs destroyed,
//! its regions deregistered and unmapped, its name and slot free for the
//! next client). SIGTERM / SIGINT drain every client
//! (nothing new is taken, everything taken completes into its ring), then
//! stop the loop and remove the socket files.
//!
//! `--metrics ADDR` serves the loop's, the policy's, every tenant's and
//! every client's counters in the Prometheus text format ([`metrics`]).

mod limits;
mod metrics;

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use perf_dataplane::engine::{
    Completion, CompletionKind, Dataplane, DataplaneConfig, EngineError, PostRefused, RequestOp, TenantHandle,
    WorkRequest,
};
use perf_dataplane::policy::PolicyHost;
use perf_dataplane::rnic::sim::{ClockMode, ExternalMemory, RnicProfile, SimFabric, SimRnic};
use perf_dataplane::rnic::*;
use perf_shm::abi::{self, FLAG_IMM, KIND_RECV, KIND_SEND};
use perf_shm::proto::{self, MrWindow, Reply, Request};
use perf_shm::{CompletionEntry, DaemonEnd, Layout, Opcode, RequestEntry, SegmentStatus, SharedRegion, Status};
use serde::Deserialize;

use crate::conn_slots::ConnSlots;
use crate::ctl::{CtlServer, SocketAccess};
use limits::Limits;

/// How long a connection waits for the loop to answer a setup command.
const SETUP_WAIT: Duration = Duration::from_secs(10);
/// How long a closing client's in-flight requests may take to complete
/// before its regions are deregistered anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long after its client closed a tenant the loop still holds WQEs of
/// (a flushed QP's last ones, unsignaled, complete as the NIC flushes
/// them) is waited for before its slot is given up, idle, and its regions
/// deregistered anyway.
const REMOVE_WAIT: Duration = Duration::from_secs(30);
/// Requests taken from one client's ring per round.
const TAKE_PER_ROUND: u64 = 256;

/// `perf-runner serve`'s flags.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Unix socket clients connect to.
    #[arg(long, default_value = "perf-serve.sock", value_name = "PATH")]
    socket: PathBuf,
    /// Scheduling policy: a built-in name, `wasm:NAME` or a `.wasm` file
    /// (`perf-runner policy list`).
    #[arg(long, default_value = "perf", value_name = "SPEC")]
    policy: String,
    /// The simulated RNIC's profile.
    #[arg(long, default_value = "cx6-100g", value_name = "NAME")]
    profile: String,
    /// The dataplane's core (default: the last one).
    #[arg(long, value_name = "N")]
    core: Option<usize>,
    /// Which users may be which tenants, and their weights (TOML:
    /// `[[tenant]] name = "bulk"  uid = 1000  weight = 1`). Without it,
    /// any local process may connect, under the name it asks for.
    #[arg(long, value_name = "FILE.toml")]
    tenants: Option<PathBuf>,
    /// The control socket for `perf-runner ctl` (default: ctl's default,
    /// `$PERF_RUNNER_CTL` or `perf-runner.sock`).
    #[arg(long, value_name = "PATH")]
    ctl: Option<PathBuf>,
    /// Serve the counters in the Prometheus text format at
    /// `http://ADDR/metrics` (e.g. `127.0.0.1:9464`; port 0 picks one, the
    /// first line says which).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// At shutdown, how long to wait for in-flight requests, in seconds.
    #[arg(long, default_value_t = 10, value_name = "S")]
    drain_secs: u64,
    /// Clients served at once; one more is refused at once.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_clients: u32,
    /// How long a new connection may take to say hello, in ms.
    #[arg(long, default_value_t = 5000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    hello_timeout_ms: u64,
    /// QPs one client may create.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    max_qps: u32,
    /// Regions one client may register.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    max_mrs: u32,
    /// Bytes of regions one client may register, in all.
    #[arg(long, default_value_t = 64 << 30, value_name = "BYTES")]
    max_mr_bytes: u64,
    /// The tenants' socket's permission bits, octal: who may connect (write
    /// permission) and so be a tenant.
    #[arg(long, default_value = "0600", value_name = "MODE")]
    socket_mode: String,
    /// The tenants' socket's group (a name or a number), with
    /// `--socket-mode 0660` to let that group's users connect.
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// The control socket's permission bits, octal: who may swap policies
    /// and pause tenants.
    #[arg(long, default_value = "0600", value_name = "MODE")]
    ctl_mode: String,
    /// The control socket's group (a name or a number).
    #[arg(long, value_name = "GROUP")]
    ctl_group: Option<String>,
}

impl Args {
    fn limits(&self) -> Limits {
        Limits {
            max_clients: self.max_clients as usize,
            hello_timeout: Duration::from_millis(self.hello_timeout_ms),
            max_qps: self.max_qps,
            max_mrs: self.max_mrs,
            max_mr_bytes: self.max_mr_bytes,
        }
    }
}

/// One entry of the tenants file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantEntry {
    name: String,
    uid: u32,
    #[serde(default = "one")]
    weight: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsFile {
    #[serde(default)]
    tenant: Vec<TenantEntry>,
}

/// The most bytes a tenant's name has.
const MAX_TENANT_NAME: usize = 64;

/// A tenant name is 1 to [`MAX_TENANT_NAME`] printable ASCII characters
/// without spaces: it appears in logs, `ctl stats` lines and metric
/// labels, where a newline, a control character or a bidirectional
/// override would forge or hide what an operator reads.
fn check_tenant_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TENANT_NAME || !name.bytes().all(|b| b.is_ascii_graphic()) {
        let shown: String = name.chars().take(MAX_TENANT_NAME).collect();
        return Err(format!(
            "tenant name {shown:?}{}: 1 to {MAX_TENANT_NAME} printable ASCII characters, no spaces",
            if name.chars().count() > MAX_TENANT_NAME { "..." } else { "" }
        ));
    }
    Ok(())
}

/// Reads and checks the tenants file.
fn load_tenants(path: &Path) -> anyhow::Result<Vec<TenantEntry>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("tenants file {}", path.display()))?;
    let file: TenantsFile = toml::from_str(&text).with_context(|| format!("tenants file {}", path.display()))?;
    for (i, t) in file.tenant.iter().enumerate() {
        if let Err(why) = check_tenant_name(&t.name) {
            anyhow::bail!("tenants file {}: tenant {i}: {why}", path.display());
        }
        if t.weight == 0 {
            anyhow::bail!("tenants file {}: tenant {:?}: weight 0 (at least 1)", path.display(), t.name);
        }
        if file.tenant[..i].iter().any(|o| o.name == t.name) {
            anyhow::bail!("tenants file {}: tenant {:?} appears twice", path.display(), t.name);
        }
    }
    Ok(file.tenant)
}

/// Which tenant a process of user `uid` (process `pid`) that asked for
/// `asked` is, and its weight.
fn resolve_tenant(
    tenants: Option<&[TenantEntry]>,
    uid: u32,
    pid: i32,
    asked: Option<&str>,
) -> Result<(String, u32), String> {
    let Some(tenants) = tenants else {
        if let Some(a) = asked {
            check_tenant_name(a)?;
        }
        return Ok((asked.map_or_else(|| format!("pid{pid}"), str::to_string), 1));
    };
    let mine: Vec<&TenantEntry> = tenants.iter().filter(|t| t.uid == uid).collect();
    let names = || mine.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
    match asked {
        None => {
            mine.first().map(|t| (t.name.clone(), t.weight)).ok_or(format!("user {uid} is no tenant of this daemon"))
        }
        Some(a) => mine
            .iter()
            .find(|t| t.name == a)
            .map(|t| (t.name.clone(), t.weight))
            .ok_or_else(|| format!("user {uid} may not be tenant {a:?} (it may be: {})", names())),
    }
}

/// Memory a client shared, backing one of its regions on the simulated
/// NIC: bytes `[start, end)` of the memfd (all of it, or the window the
/// client registered).
struct SharedBacking {
    region: SharedRegion,
    start: usize,
    end: usize,
}

impl SharedBacking {
    /// The part of `region` that `window` names (all of it for `None`),
    /// and the address to register it at; an error if it lies outside.
    fn new(region: SharedRegion, window: Option<MrWindow>) -> Result<(Self, Option<u64>), String> {
        let len = region.len();
        let Some(w) = window else {
            return Ok((SharedBacking { region, start: 0, end: len }, None));
        };
        let end = w.offset.checked_add(w.len).filter(|&e| e <= len as u64 && w.len > 0);
        let end = end.ok_or_else(|| format!("window of {} B at {} outside the {len} B memfd", w.len, w.offset))?;
        Ok((SharedBacking { region, start: w.offset as usize, end: end as usize }, Some(w.iova)))
    }
}

impl ExternalMemory for SharedBacking {
    fn bytes(&self) -> &[u8] {
        &self.region.bytes()[self.start..self.end]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.region.bytes_mut()[self.start..self.end]
    }
}

/// What a connection thread asks of the loop.
enum Setup {
    Attach { conn: u64, tenant: String, weight: u32, rings: DaemonEnd, reply: mpsc::Sender<Result<(), String>> },
    RegMr { conn: u64, backing: SharedBacking, iova: Option<u64>, reply: mpsc::Sender<Result<Reply, String>> },
    CreateQp { conn: u64, tc: u8, reply: mpsc::Sender<Result<Reply, String>> },
    ConnectQp { conn: u64, qp: u32, peer: PeerQp, reply: mpsc::Sender<Result<Reply, String>> },
    Detach { conn: u64 },
    Metrics { reply: mpsc::Sender<Result<metrics::HubMetrics, String>> },
}

/// The QP a client connects one of its QPs to.
enum PeerQp {
    /// Tenant `0`'s QP index `1`.
    Named(String, u32),
    /// The QP of this number on the NIC (whoever's it is).
    Number(u32),
}

/// Where a client stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    /// Gone or broken: nothing new is taken; completions are dropped until
    /// everything taken has completed (or [`CLOSE_WAIT`] has passed).
    Closing {
        since: Instant,
    },
}

/// One client's bridge between its shared rings and its tenant's channels.
struct Bridge {
    conn: u64,
    name: String,
    handle: TenantHandle,
    rings: DaemonEnd,
    mrs: Vec<Mr>,
    qp_eps: Vec<QpEndpoint>,
    /// The remote QP (tenant name, QP index) each QP was connected to.
    qp_peers: Vec<Option<(String, u32)>>,
    /// Completions made here (refused entries), waiting for ring room.
    local: VecDeque<CompletionEntry>,
    taken: u64,
    completed: u64,
    /// Completions written to the ring: successful, failed; bytes of the
    /// successful send-side ones; their latencies.
    ok: u64,
    errors: u64,
    bytes: u64,
    latency: metrics::LatencyCounts,
    /// Whether it broke its ring.
    broken: bool,
    phase: Phase,
}

/// Maps a dataplane completion status to the ABI's code.
fn status_code(s: WcStatus) -> u8 {
    (match s {
        WcStatus::Success => Status::Success,
        WcStatus::LocLenErr => Status::LocLenErr,
        WcStatus::LocQpOpErr => Status::LocQpOpErr,
        WcStatus::LocProtErr => Status::LocProtErr,
        WcStatus::WrFlushErr => Status::WrFlushErr,
        WcStatus::RemInvReqErr => Status::RemInvReqErr,
        WcStatus::RemAccessErr => Status::RemAccessErr,
        WcStatus::RemOpErr => Status::RemOpErr,
        WcStatus::RetryExcErr => Status::RetryExcErr,
        WcStatus::RnrRetryExcErr => Status::RnrRetryExcErr,
    }) as u8
}

fn entry_of(c: &Completion) -> CompletionEntry {
    CompletionEntry {
        wr_id: c.wr_id,
        qp: c.qp,
        byte_len: c.byte_len,
        imm: c.imm.unwrap_or(0),
        status: status_code(c.status),
        kind: if c.kind == CompletionKind::Recv { KIND_RECV } else { KIND_SEND },
        flags: if c.imm.is_some() { FLAG_IMM } else { 0 },
        pad: 0,
        latency_ns: c.completed_ns.saturating_sub(c.posted_ns),
    }
}

/// The request a ring entry asks for, or the status it is refused with.
fn translate(e: &RequestEntry, mrs: &[Mr], qps: usize, now: u64) -> Result<WorkRequest, Status> {
    let op = Opcode::from_code(e.opcode).ok_or(Status::LocQpOpErr)?;
    if e.qp as usize >= qps {
        return Err(Status::LocQpOpErr);
    }
    let mr = *mrs.get(e.mr as usize).ok_or(Status::LocProtErr)?;
    let remote = RemoteAddr { addr: e.remote_addr, rkey: e.rkey };
    let op = match op {
        Opcode::Write => RequestOp::Write { remote },
        Opcode::WriteImm => RequestOp::WriteImm { remote, imm: e.imm },
        Opcode::Send => RequestOp::Send,
        Opcode::Recv => RequestOp::Recv,
        Opcode::Read => RequestOp::Read { remote },
    };
    Ok(WorkRequest { wr_id: e.wr_id, qp: e.qp, op, mr, offset: e.local_offset, len: e.len, posted_ns: now })
}

impl Bridge {
    /// Requests taken and not yet completed.
    fn outstanding(&self) -> u64 {
        self.taken - self.completed
    }

    /// Moves completions out and requests in; returns whether it did
    /// anything. A ring fault closes the client.
    fn pump(&mut self, dp: &mut Dataplane<SimRnic>, now: u64, draining: bool) -> bool {
        let mut did = false;
        if let Phase::Closing { .. } = self.phase {
            // Nobody reads the ring any more: drop what completes.
            while self.local.pop_front().is_some() || self.handle.poll().is_some() {
                self.completed += 1;
                did = true;
            }
            return did;
        }
        match self.rings.completion_room() {
            Err(fault) => {
                self.break_ring(dp, &fault.to_string());
                return true;
            }
            Ok(mut room) => {
                let mut pushed = false;
                while room > 0 {
                    let next = match self.local.pop_front() {
                        Some(c) => c,
                        None => match self.handle.poll() {
                            Some(c) => entry_of(&c),
                            None => break,
                        },
                    };
                    if next.status == Status::Success as u8 {
                        self.ok += 1;
                        if next.kind != KIND_RECV {
                            self.bytes += next.byte_len as u64;
                        }
                    } else {
                        self.errors += 1;
                    }
                    self.latency.record(next.latency_ns);
                    self.rings.push_completion(next);
                    self.completed += 1;
                    room -= 1;
                    pushed = true;
                }
                if pushed {
                    self.rings.publish_completions();
                    did = true;
                }
            }
        }
        if draining {
            return did;
        }
        let waiting = match self.rings.requests_waiting() {
            Ok(n) => n.min(TAKE_PER_ROUND),
            Err(fault) => {
                self.break_ring(dp, &fault.to_string());
                return true;
            }
        };
        let mut took = 0;
        let cap = self.rings.layout().cpl_entries as usize;
        for i in 0..waiting {
            let e = self.rings.request(i);
            match translate(&e, &self.mrs, self.qp_eps.len(), now) {
                Ok(wr) => match self.handle.post(wr) {
                    Ok(()) => {}
                    Err(PostRefused::Full | PostRefused::Stopped) => break,
                },
                Err(status) => {
                    if self.local.len() >= cap {
                        break;
                    }
                    let kind = if e.opcode == Opcode::Recv as u8 { KIND_RECV } else { KIND_SEND };
                    let c =
                        CompletionEntry { wr_id: e.wr_id, qp: e.qp, status: status as u8, kind, ..Default::default() };
                    self.local.push_back(c);
                }
            }
            self.taken += 1;
            took += 1;
        }
        if took > 0 {
            self.rings.consume_requests(took);
            did = true;
        }
        did
    }

    /// The client broke its ring: it gets nothing more from it.
    fn break_ring(&mut self, dp: &mut Dataplane<SimRnic>, why: &str) {
        tracing::warn!(tenant = %self.name, "ring broken: {why}");
        self.broken = true;
        self.rings.set_status(SegmentStatus::Broken);
        self.close(dp);
    }

    /// Stops taking requests and flushes the client's QPs (what they hold
    /// completes with `WR_FLUSH_ERR`).
    fn close(&mut self, dp: &mut Dataplane<SimRnic>) {
        if let Phase::Closing { .. } = self.phase {
            return;
        }
        self.phase = Phase::Closing { since: Instant::now() };
        if let Err(e) = dp.flush_tenant(self.handle.id) {
            tracing::warn!(tenant = %self.name, "flushing its QPs: {e}");
        }
    }

    /// How long ago the client closed (zero while it is live).
    fn closing_for(&self) -> Duration {
        match self.phase {
            Phase::Live => Duration::ZERO,
            Phase::Closing { since } => since.elapsed(),
        }
    }

    /// A closing client whose requests have all completed (or who waited
    /// long enough): its regions are deregistered (unmapped).
    fn finished(&self) -> bool {
        match self.phase {
            Phase::Live => false,
            Phase::Closing { since } => self.outstanding() == 0 || since.elapsed() > CLOSE_WAIT,
        }
    }
}

/// What the loop's hook owns: the clients and the commands' channel.
struct Hub {
    setup: mpsc::Receiver<Setup>,
    bridges: Vec<Bridge>,
    draining: Arc<AtomicBool>,
    drain_applied: bool,
    outstanding: Arc<AtomicU64>,
    clients: Arc<AtomicU64>,
    /// Names the engine already has (a name comes back as `name#k`).
    used_names: Vec<String>,
    /// Closed clients whose tenant the loop still holds something of:
    /// removed once it holds nothing (see [`Hub::remove_closed`]).
    removing: Vec<Bridge>,
    /// Clients closed so far, and how many of them broke their ring.
    closed: u64,
    broken: u64,
    /// Attaches of a name still held by a live client, retried until it
    /// goes or the deadline passes (see [`Hub::retry_attaches`]).
    waiting: Vec<WaitingAttach>,
}

/// A client asking for a tenant name another client still holds.
struct WaitingAttach {
    deadline: std::time::Instant,
    conn: u64,
    tenant: String,
    weight: u32,
    rings: DaemonEnd,
    reply: mpsc::Sender<Result<(), String>>,
}

/// How long an attach waits for a client of the same name to go: a
/// process that exits and is started again at once (a script, a restart)
/// reconnects before the daemon has seen its old connection close.
const ATTACH_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl Hub {
    fn bridge(&mut self, conn: u64) -> Result<&mut Bridge, String> {
        self.bridges.iter_mut().find(|b| b.conn == conn).ok_or_else(|| "the connection is closed".to_string())
    }

    fn serve(&mut self, dp: &mut Dataplane<SimRnic>, cmd: Setup) {
        match cmd {
            Setup::Attach { conn, tenant, weight, rings, reply } => {
                if self.holds(&tenant) {
                    let deadline = std::time::Instant::now() + ATTACH_GRACE;
                    self.waiting.push(WaitingAttach { deadline, conn, tenant, weight, rings, reply });
                    return;
                }
                let r = self.attach(dp, conn, tenant, weight, rings);
                let _ = reply.send(r);
            }
            Setup::RegMr { conn, backing, iova, reply } => {
                let r = self.bridge(conn).map(|b| b.handle.id).and_then(|t| {
                    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
                    dp.reg_mr_with(t, |nic, pd| match iova {
                        None => nic.reg_mr_external(pd, Box::new(backing), access),
                        Some(a) => nic.reg_mr_external_at(pd, Box::new(backing), access, a),
                    })
                    .map_err(|e| format!("registering the region: {e}"))
                });
                let r = r.and_then(|mr| {
                    let b = self.bridge(conn)?;
                    b.mrs.push(mr);
                    Ok(Reply::MrRegistered { mr: b.mrs.len() as u32 - 1, addr: mr.addr, rkey: mr.rkey })
                });
                let _ = reply.send(r);
            }
            Setup::CreateQp { conn, tc, reply } => {
                let r = self.bridge(conn).map(|b| b.handle.id).and_then(|t| {
                    if tc > 7 {
                        return Err(format!("traffic class {tc} (0-7)"));
                    }
                    dp.create_qp(t, tc).map_err(|e| format!("creating the QP: {e}"))
                });
                let r = r.and_then(|(qp, ep)| {
                    let b = self.bridge(conn)?;
                    b.qp_eps.push(ep);
                    b.qp_peers.push(None);
                    Ok(Reply::QpCreated { qp, qpn: ep.qp_num })
                });
                let _ = reply.send(r);
            }
            Setup::ConnectQp { conn, qp, peer, reply } => {
                let r = self.peer_of(peer).and_then(|(name, peer_qp)| self.connect(dp, conn, qp, &name, peer_qp));
                let r = r.map(|()| Reply::Connected);
                let _ = reply.send(r);
            }
            Setup::Metrics { reply } => {
                let clients = self
                    .bridges
                    .iter()
                    .map(|b| metrics::ClientMetrics {
                        tenant: b.name.clone(),
                        taken: b.taken,
                        ok: b.ok,
                        errors: b.errors,
                        bytes: b.bytes,
                        latency: b.latency,
                        outstanding: b.outstanding(),
                    })
                    .collect();
                let _ = reply.send(Ok(metrics::HubMetrics { clients, closed: self.closed, broken: self.broken }));
            }
            Setup::Detach { conn } => {
                if let Ok(b) = self.bridge(conn) {
                    tracing::info!(tenant = %b.name, "client gone");
                    b.close(dp);
                }
            }
        }
    }

    fn attach(
        &mut self,
        dp: &mut Dataplane<SimRnic>,
        conn: u64,
        tenant: String,
        weight: u32,
        rings: DaemonEnd,
    ) -> Result<(), String> {
        if self.draining.load(Ordering::Relaxed) {
            return Err("the daemon is shutting down".into());
        }
        if self.holds(&tenant) {
            return Err(format!("tenant {tenant:?} is already connected"));
        }
        let n = self.used_names.iter().filter(|n| **n == tenant).count();
        let engine_name = if n == 0 { tenant.clone() } else { format!("{tenant}#{n}") };
        let handle = dp.add_tenant(&engine_name, weight).map_err(|e| format!("adding the tenant: {e}"))?;
        self.used_names.push(tenant.clone());
        self.bridges.push(Bridge {
            conn,
            name: tenant,
            handle,
            rings,
            mrs: Vec::new(),
            qp_eps: Vec::new(),
            qp_peers: Vec::new(),
            local: VecDeque::new(),
            taken: 0,
            completed: 0,
            ok: 0,
            errors: 0,
            bytes: 0,
            latency: metrics::LatencyCounts::default(),
            broken: false,
            phase: Phase::Live,
        });
        Ok(())
    }

    /// Whether a live client holds the tenant name `tenant`.
    fn holds(&self, tenant: &str) -> bool {
        self.bridges.iter().any(|b| b.name == tenant && b.phase == Phase::Live)
    }

    /// Attaches the waiting clients whose name is free now, and refuses
    /// those whose grace has run out. Returns whether it answered any.
    fn retry_attaches(&mut self, dp: &mut Dataplane<SimRnic>) -> bool {
        if self.waiting.is_empty() {
            return false;
        }
        let now = std::time::Instant::now();
        let mut did = false;
        for w in std::mem::take(&mut self.waiting) {
            if self.holds(&w.tenant) && now < w.deadline {
                self.waiting.push(w);
                continue;
            }
            let r = self.attach(dp, w.conn, w.tenant, w.weight, w.rings);
            let _ = w.reply.send(r);
            did = true;
        }
        did
    }

    /// The live tenant and QP index `peer` names.
    fn peer_of(&self, peer: PeerQp) -> Result<(String, u32), String> {
        match peer {
            PeerQp::Named(name, qp) => Ok((name, qp)),
            PeerQp::Number(qpn) => self
                .bridges
                .iter()
                .filter(|b| b.phase == Phase::Live)
                .find_map(|b| {
                    let i = b.qp_eps.iter().position(|ep| ep.qp_num == qpn)?;
                    Some((b.name.clone(), i as u32))
                })
                .ok_or_else(|| format!("no connected client has a QP numbered 0x{qpn:06x}")),
        }
    }

    fn connect(
        &mut self,
        dp: &mut Dataplane<SimRnic>,
        conn: u64,
        qp: u32,
        peer: &str,
        peer_qp: u32,
    ) -> Result<(), String> {
        let me = self.bridge(conn)?.name.clone();
        let other = self
            .bridges
            .iter()
            .find(|b| b.name == peer && b.phase == Phase::Live)
            .ok_or_else(|| format!("no tenant {peer:?} is connected"))?;
        let remote = other
            .qp_eps
            .get(peer_qp as usize)
            .copied()
            .ok_or_else(|| format!("tenant {peer:?} has no QP {peer_qp}"))?;
        // RC setup takes both owners: the peer QP's owner names its remote
        // QP too. One it connected elsewhere is refused here; one it has
        // not connected yet is the owner's to decide (its NIC drops what
        // comes from any QP but the one it connects to).
        if let Some(Some((name, q))) = other.qp_peers.get(peer_qp as usize) {
            if *name != me || *q != qp {
                return Err(format!(
                    "tenant {peer:?} connected its QP {peer_qp} to another QP: a QP connects only to the QP its owner connected it to"
                ));
            }
        }
        let b = self.bridge(conn)?;
        if qp as usize >= b.qp_eps.len() {
            return Err(format!("no QP {qp} (this client has {})", b.qp_eps.len()));
        }
        let t = b.handle.id;
        dp.connect_qp(t, qp, remote).map_err(|e| format!("connecting QP {qp} to {peer:?} QP {peer_qp}: {e}"))?;
        b.qp_peers[qp as usize] = Some((peer.to_string(), peer_qp));
        Ok(())
    }

    /// The loop's hook (see the module comment).
    fn between(&mut self, dp: &mut Dataplane<SimRnic>) -> bool {
        let mut did = false;
        while let Ok(cmd) = self.setup.try_recv() {
            self.serve(dp, cmd);
            did = true;
        }
        did |= self.retry_attaches(dp);
        let draining = self.draining.load(Ordering::Relaxed);
        if draining && !self.drain_applied {
            for b in &self.bridges {
                b.rings.set_status(SegmentStatus::Draining);
            }
            self.drain_applied = true;
        }
        if !self.bridges.is_empty() {
            let now = dp.nic().clock_ns();
            for b in &mut self.bridges {
                did |= b.pump(dp, now, draining);
            }
        }
        if self.bridges.iter().any(Bridge::finished) {
            let (done, live): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.bridges).into_iter().partition(Bridge::finished);
            self.bridges = live;
            for b in done {
                self.closed += 1;
                self.broken += u64::from(b.broken);
                if b.outstanding() > 0 {
                    tracing::warn!(tenant = %b.name, left = b.outstanding(), "closing client: requests still in flight");
                }
                tracing::info!(tenant = %b.name, taken = b.taken, completed = b.completed, "client closed");
                self.removing.push(b);
            }
            self.clients.store(self.bridges.len() as u64, Ordering::Relaxed);
        }
        did |= self.remove_closed(dp);
        self.outstanding.store(self.bridges.iter().map(Bridge::outstanding).sum(), Ordering::Relaxed);
        did
    }
}

impl Hub {
    /// Removes the tenants of closed clients that the loop holds nothing
    /// of any more. A client's requests may all have completed while its
    /// flushed QPs still hold WQEs whose flush the loop has yet to see (the
    /// drain marker `Dataplane::flush_tenant` posts, the completions left in
    /// its channel): such a tenant is tried again at the next pass, its
    /// regions still mapped, and given up (its slot left idle, its regions
    /// deregistered) only after [`REMOVE_WAIT`].
    fn remove_closed(&mut self, dp: &mut Dataplane<SimRnic>) -> bool {
        if self.removing.is_empty() {
            return false;
        }
        let mut did = false;
        for b in std::mem::take(&mut self.removing) {
            // Drain what the loop handed it, so that its channel is idle.
            while b.handle.poll().is_some() {
                did = true;
            }
            match dp.remove_tenant(b.handle.id) {
                Ok(()) => {
                    if let Some(i) = self.used_names.iter().position(|n| *n == b.name) {
                        self.used_names.swap_remove(i);
                    }
                    tracing::debug!(tenant = %b.name, "tenant removed");
                    did = true;
                }
                Err(EngineError::Busy(_)) if b.closing_for() < REMOVE_WAIT => self.removing.push(b),
                Err(e) => {
                    // Its slot stays, idle; its regions go all the same.
                    tracing::warn!(tenant = %b.name, "removing the tenant: {e}");
                    for mr in &b.mrs {
                        if let Err(e) = dp.dereg_mr(b.handle.id, *mr) {
                            tracing::warn!(tenant = %b.name, "deregistering a region: {e}");
                        }
                    }
                    did = true;
                }
            }
        }
        did
    }
}

/// What every connection thread shares.
struct Ctx {
    tenants: Option<Vec<TenantEntry>>,
    setup: mpsc::SyncSender<Setup>,
    limits: Limits,
}

impl Ctx {
    /// Sends a command to the loop and waits for its answer.
    fn ask<T>(&self, make: impl FnOnce(mpsc::Sender<Result<T, String>>) -> Setup) -> Result<T, String> {
        let (tx, rx) = mpsc::channel();
        self.setup.send(make(tx)).map_err(|_| "the dataplane has stopped".to_string())?;
        rx.recv_timeout(SETUP_WAIT).map_err(|_| "the dataplane did not answer".to_string())?
    }
}

/// Serves one connection (see the module comment).
fn serve_conn(sock: UnixStream, conn: u64, ctx: &Ctx) -> anyhow::Result<()> {
    let (uid, pid) = proto::peer_credentials(&sock)?;
    let refuse = |sock: &UnixStream, message: String| -> anyhow::Result<()> {
        proto::send(sock, &Reply::Error { message: message.clone() }, &[])?;
        anyhow::bail!("refused pid {pid}: {message}")
    };
    // A connection that never says hello would hold its thread and fd.
    sock.set_read_timeout(Some(ctx.limits.hello_timeout)).context("setting the hello timeout")?;
    let first = match proto::recv::<Request>(&sock) {
        Ok(Some((first, _))) => first,
        Ok(None) => return Ok(()),
        Err(e) if is_timeout(&e) => {
            let _ = proto::send(&sock, &Reply::Error { message: "no hello in time".into() }, &[]);
            anyhow::bail!("pid {pid} sent no hello within {:?}: closed", ctx.limits.hello_timeout)
        }
        Err(e) => return Err(e.into()),
    };
    let Request::Hello { abi_major, abi_minor, tenant, req_entries, cpl_entries } = first else {
        return refuse(&sock, "the first request must be hello".into());
    };
    if abi_major != abi::VERSION_MAJOR {
        let m = format!(
            "client ring ABI {abi_major}.{abi_minor}, this daemon speaks {}.{}",
            abi::VERSION_MAJOR,
            abi::VERSION_MINOR
        );
        return refuse(&sock, m);
    }
    let layout = match Layout::new(req_entries, cpl_entries) {
        Ok(l) => l,
        Err(e) => return refuse(&sock, e.to_string()),
    };
    let (name, weight) = match resolve_tenant(ctx.tenants.as_deref(), uid, pid, tenant.as_deref()) {
        Ok(t) => t,
        Err(m) => return refuse(&sock, m),
    };
    let rings = DaemonEnd::create(layout)?;
    let fd = rings.fd().try_clone_to_owned().context("duplicating the segment's descriptor")?;
    let tenant = name.clone();
    if let Err(m) = ctx.ask(|reply| Setup::Attach { conn, tenant, weight, rings, reply }) {
        return refuse(&sock, m);
    }
    tracing::info!(tenant = %name, uid, pid, "client connected");
    proto::send(&sock, &Reply::Welcome { tenant: name, segment_bytes: layout.total_bytes() as u64 }, &[fd.as_fd()])?;
    drop(fd);
    // Set up, a client may stay quiet on its socket as long as it likes.
    sock.set_read_timeout(None).context("clearing the hello timeout")?;
    // What this client holds, against its quotas (every QP and region of
    // its tenant is set up through this connection).
    let (mut qps, mut mrs, mut mr_bytes) = (0u32, 0u32, 0u64);
    let result = loop {
        let (req, mut fds) = match proto::recv::<Request>(&sock) {
            Ok(Some(r)) => r,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.into()),
        };
        let answer = match req {
            Request::Hello { .. } => Err("already said hello".to_string()),
            Request::RegMr { len, window } => {
                let bytes = window.map_or(len, |w| w.len);
                match (ctx.limits.check_mr(mrs, mr_bytes, bytes), fds.pop()) {
                    (Err(e), _) => Err(e),
                    (Ok(()), None) => Err("reg_mr without a memfd".into()),
                    (Ok(()), Some(fd)) => match SharedRegion::open(fd, len as usize)
                        .map_err(|e| e.to_string())
                        .and_then(|region| SharedBacking::new(region, window))
                    {
                        Err(e) => Err(e),
                        Ok((backing, iova)) => {
                            let r = ctx.ask(|reply| Setup::RegMr { conn, backing, iova, reply });
                            if r.is_ok() {
                                mrs += 1;
                                mr_bytes += bytes;
                            }
                            r
                        }
                    },
                }
            }
            Request::CreateQp { tc } => ctx.limits.check_qp(qps).and_then(|()| {
                let r = ctx.ask(|reply| Setup::CreateQp { conn, tc, reply });
                qps += r.is_ok() as u32;
                r
            }),
            Request::ConnectQp { qp, peer, peer_qp } => {
                ctx.ask(|reply| Setup::ConnectQp { conn, qp, peer: PeerQp::Named(peer, peer_qp), reply })
            }
            Request::ConnectQpn { qp, peer_qpn } => {
                ctx.ask(|reply| Setup::ConnectQp { conn, qp, peer: PeerQp::Number(peer_qpn), reply })
            }
        };
        let reply = answer.unwrap_or_else(|message| Reply::Error { message });
        if let Err(e) = proto::send(&sock, &reply, &[]) {
            break Err(e.into());
        }
    };
    let _ = ctx.setup.send(Setup::Detach { conn });
    result
}

/// Whether a socket error is a read timeout.
fn is_timeout(e: &perf_shm::ShmError) -> bool {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    matches!(e, perf_shm::ShmError::Io(_, io) if matches!(io.kind(), WouldBlock | TimedOut))
}

/// Refuses a connection past `--max-clients` from the accepting thread,
/// without a thread of its own: one short, bounded write.
fn refuse_busy(sock: &UnixStream, max: usize) {
    let _ = sock.set_write_timeout(Some(Duration::from_millis(100)));
    let message = format!("the daemon serves its most clients at once ({max}, --max-clients): try again later");
    let _ = proto::send(sock, &Reply::Error { message }, &[]);
}

/// `perf-runner serve`.
pub fn run(a: Args) -> anyhow::Result<()> {
    let tenants = a.tenants.as_deref().map(load_tenants).transpose()?;
    let core = crate::realtime::pick_core(a.core)?;
    let profile = RnicProfile::by_name(&a.profile).with_context(|| {
        format!("--profile: unknown RNIC profile {:?} (known: {})", a.profile, RnicProfile::NAMES.join(", "))
    })?;
    let policy =
        PolicyHost::load(&a.policy).map_err(|e| crate::run_cmd::PolicyRefused::new("--policy", &a.policy, e))?;
    let socket_access = SocketAccess::parse(&a.socket_mode, a.socket_group.as_deref(), "socket")?;
    let ctl_access = SocketAccess::parse(&a.ctl_mode, a.ctl_group.as_deref(), "ctl")?;
    let listener = crate::ctl::bind_socket(&a.socket, crate::ctl::SocketRole::Tenants, socket_access)?;
    let fabric = SimFabric::new(profile, 2, 1, ClockMode::Wall);
    let mut dp = Dataplane::new(fabric.nic(0), policy, DataplaneConfig::default()).context("starting the dataplane")?;
    let op = dp.operator_handle();

    let stop_signal = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop_signal.clone()).context("installing the signal handlers")?;
    }
    let (setup_tx, setup_rx) = mpsc::sync_channel(64);
    let started = Instant::now();
    let metrics = match &a.metrics {
        None => None,
        Some(addr) => {
            let hub_tx = setup_tx.clone();
            let ask: metrics::AskHub = Box::new(move || {
                let (reply, rx) = mpsc::channel();
                hub_tx.send(Setup::Metrics { reply }).map_err(|_| "the dataplane has stopped".to_string())?;
                rx.recv_timeout(SETUP_WAIT).map_err(|_| "the dataplane did not answer".to_string())?
            });
            match metrics::MetricsServer::start(addr, op.clone(), ask, started) {
                Ok(m) => Some(m),
                Err(e) => {
                    let _ = std::fs::remove_file(&a.socket);
                    return Err(e);
                }
            }
        }
    };
    let draining = Arc::new(AtomicBool::new(false));
    let outstanding = Arc::new(AtomicU64::new(0));
    let clients = Arc::new(AtomicU64::new(0));
    let mut hub = Hub {
        setup: setup_rx,
        bridges: Vec::new(),
        draining: draining.clone(),
        drain_applied: false,
        outstanding: outstanding.clone(),
        clients,
        used_names: Vec::new(),
        removing: Vec::new(),
        closed: 0,
        broken: 0,
        waiting: Vec::new(),
    };
    let stop_loop = Arc::new(AtomicBool::new(false));
    let dp_thread = dp
        .run_pinned_with(core, stop_loop.clone(), move |dp| Ok(hub.between(dp)))
        .context("starting the dataplane thread")?;
    let ctl_path = a.ctl.clone().unwrap_or_else(crate::ctl::default_socket);
    let ctl = CtlServer::start(&ctl_path, op, started, ctl_access);
    let ctl = match ctl {
        Ok(c) => c,
        Err(e) => {
            stop_loop.store(true, Ordering::Relaxed);
            let _ = dp_thread.join();
            let _ = std::fs::remove_file(&a.socket);
            if let Some(m) = metrics {
                m.stop();
            }
            return Err(e);
        }
    };
    println!(
        "serving on {} (policy {}, core {}, control socket {}{})",
        a.socket.display(),
        a.policy,
        core.map_or("none".into(), |c| c.to_string()),
        ctl_path.display(),
        metrics.as_ref().map_or(String::new(), |m| format!(", metrics http://{}/metrics", m.addr()))
    );

    let limits = a.limits();
    let ctx = Arc::new(Ctx { tenants, setup: setup_tx, limits });
    let slots = ConnSlots::default();
    let (mut refused_busy, mut busy_logged) = (0u64, Instant::now());
    let mut next_conn = 0u64;
    while !stop_signal.load(Ordering::Relaxed) && !dp_thread.is_finished() {
        match listener.accept() {
            Ok((sock, _)) => {
                next_conn += 1;
                let (ctx, conn) = (ctx.clone(), next_conn);
                if let Err(e) = sock.set_nonblocking(false) {
                    tracing::warn!("client socket: {e}");
                    continue;
                }
                let Some(slot) = slots.take(limits.max_clients) else {
                    refuse_busy(&sock, limits.max_clients);
                    // One line a second at most, however fast they come.
                    refused_busy += 1;
                    if busy_logged.elapsed() >= Duration::from_secs(1) {
                        tracing::warn!(
                            "refused {refused_busy} connections: {} clients, the most at once (--max-clients)",
                            limits.max_clients
                        );
                        (refused_busy, busy_logged) = (0, Instant::now());
                    }
                    continue;
                };
                let spawned = std::thread::Builder::new().name(format!("perf-client-{conn}")).spawn(move || {
                    let _slot = slot;
                    if let Err(e) = serve_conn(sock, conn, &ctx) {
                        tracing::warn!("client connection {conn}: {e:#}");
                    }
                });
                if let Err(e) = spawned {
                    tracing::warn!("starting a client thread: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                tracing::warn!("socket: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    // Shutdown: no new clients; drain what was taken; stop the loop.
    drop(listener);
    let _ = std::fs::remove_file(&a.socket);
    draining.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(a.drain_secs);
    // One more round of the hook publishes the draining status and the count.
    std::thread::sleep(Duration::from_millis(10));
    while outstanding.load(Ordering::Relaxed) > 0 && Instant::now() < deadline && !dp_thread.is_finished() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let left = outstanding.load(Ordering::Relaxed);
    ctl.stop();
    if let Some(m) = metrics {
        m.stop();
    }
    stop_loop.store(true, Ordering::Relaxed);
    let (dp, pin) = dp_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the dataplane thread panicked"))?
        .context("the dataplane loop failed")?;
    let c = dp.counters();
    println!(
        "stopped: {} requests taken, {} completions delivered, {} refused, {left} left in flight; {} rounds, busy {:.1}%",
        c.requests,
        c.completions,
        c.refused,
        pin.rounds,
        pin.busy_fraction * 100.0
    );
    if left > 0 {
        anyhow::bail!("{left} requests were still in flight after {} s of draining", a.drain_secs);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_name_that_could_forge_a_line_or_hide_itself_is_refused() {
        for good in ["bulk", "t0", "M_multi", "team-a.svc#2", &"x".repeat(MAX_TENANT_NAME)] {
            assert!(check_tenant_name(good).is_ok(), "{good:?}");
        }
        let long = "y".repeat(60_000);
        for bad in ["", "a b", "a\tb", "ok\npolicy passthrough", "evil\u{202e}txt", "caf\u{e9}", long.as_str()] {
            let e = check_tenant_name(bad).expect_err(bad);
            assert!(e.contains("printable ASCII") && e.len() < 200, "{e}");
        }
        // A client that asks for such a name is refused before it is a tenant.
        let e = resolve_tenant(None, 1000, 7, Some("a\nb")).expect_err("refused");
        assert!(e.contains("printable ASCII"), "{e}");
        assert_eq!(resolve_tenant(None, 1000, 7, None), Ok(("pid7".to_string(), 1)));
    }
}
