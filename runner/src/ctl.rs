//! Live control of a `run --realtime`: the control socket the run listens
//! on ([`CtlServer`]) and the `perf-runner ctl` client.
//!
//! The protocol is one JSON object per line over a Unix domain socket:
//! the client sends one request and reads one answer, then closes.
//! Requests: `{"cmd":"swap","policy":P}`, `{"cmd":"stats"}`,
//! `{"cmd":"pause","tenant":T}`, `{"cmd":"resume","tenant":T}`. Answers
//! carry `"ok": true` and the command's result, or `"ok": false` and an
//! `"error"` line (a refused swap also carries its record). The server
//! answers up to [`MAX_CONTROLLERS`] connections at once, each on its own
//! thread, through the dataplane's [`OperatorHandle`], which the loop
//! serves at its round boundaries; a request line must arrive whole
//! within [`REQUEST_WAIT`], so a slow or silent controller holds only its
//! own connection, for a bounded time.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use perf_dataplane::engine::{DataplaneSnapshot, OperatorHandle, SwapOutcome, SwapRecord};
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::WasmLimits;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The socket `run --ctl` and `ctl` use when given no path: `$PERF_RUNNER_CTL`
/// if set, else `perf-runner.sock` in the current directory (the run's).
pub fn default_socket() -> PathBuf {
    std::env::var_os("PERF_RUNNER_CTL").map_or_else(|| PathBuf::from("perf-runner.sock"), PathBuf::from)
}

/// The longest request line the control socket reads (a policy's path
/// fits many times over); a longer one is refused, and what follows it is
/// never read.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// How long the server waits for the loop to answer, or for a swap to be
/// prepared and applied.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// Controllers served at once; one more is answered with an error at once.
pub const MAX_CONTROLLERS: usize = 16;

/// How long a controller has to send its whole request line.
pub const REQUEST_WAIT: Duration = Duration::from_secs(5);

/// A request on the socket, and `ctl`'s subcommands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Subcommand)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// Hot-swaps the running policy: a `.wasm` file, `wasm:NAME` or a
    /// built-in name. Prints what changed and when; a refused module
    /// leaves the running policy in place, says why, and exits 1.
    Swap {
        /// The policy.
        policy: String,
    },
    /// Prints the run's state: clock, policy, dataplane core busy
    /// fraction and the policy's share, tenants, swaps so far.
    Stats,
    /// Holds a tenant's requests in the dataplane (nothing of it is posted
    /// until `resume`; what the NIC holds completes).
    Pause {
        /// The tenant's name (or id).
        tenant: String,
    },
    /// Releases a paused tenant.
    Resume {
        /// The tenant's name (or id).
        tenant: String,
    },
}

/// Which listening socket a path is for, to name it in errors: the
/// control socket (`--ctl`) or the daemon's clients' socket (`--socket`).
#[derive(Debug, Clone, Copy)]
pub enum SocketRole {
    /// `perf-runner ctl`'s socket.
    Control,
    /// `perf-runner serve`'s tenants' socket.
    Tenants,
}

impl SocketRole {
    fn what(self) -> &'static str {
        match self {
            SocketRole::Control => "control socket",
            SocketRole::Tenants => "socket",
        }
    }
    fn holder(self) -> &'static str {
        match self {
            SocketRole::Control => "another run",
            SocketRole::Tenants => "another daemon",
        }
    }
    fn flag(self) -> &'static str {
        match self {
            SocketRole::Control => "--ctl",
            SocketRole::Tenants => "--socket",
        }
    }
}

/// Checks that a listening socket may be created at `path`: nothing is
/// there, or a stale socket (nothing listens on it), which it returns
/// `true` for. A regular file, directory, link or other file is never
/// replaced, nor a socket a live run listens on.
pub fn check_socket_path(path: &Path, role: SocketRole) -> anyhow::Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(false) };
    let what = role.what();
    if !meta.file_type().is_socket() {
        anyhow::bail!(
            "{what} {}: a file that is not a socket is there; it is never replaced (choose another {} path)",
            path.display(),
            role.flag()
        );
    }
    if UnixStream::connect(path).is_ok() {
        anyhow::bail!("{what} {}: {} is listening on it", path.display(), role.holder());
    }
    Ok(true)
}

/// Who may connect to a listening socket: connecting to a Unix socket
/// needs write permission on its file, so its mode and group say who.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    /// The socket file's permission bits.
    pub mode: u32,
    /// The group it is given, if any (else the process's).
    pub group: Option<u32>,
}

impl SocketAccess {
    /// Only the user the process runs as.
    pub const OWNER: SocketAccess = SocketAccess { mode: 0o600, group: None };

    /// From `--...-mode` (octal, `0660` or `660`) and `--...-group` (a
    /// group's name or number); `flag` names the flags in errors.
    pub fn parse(mode: &str, group: Option<&str>, flag: &str) -> anyhow::Result<SocketAccess> {
        let bits = u32::from_str_radix(mode.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .with_context(|| format!("--{flag}-mode {mode:?}: permission bits in octal, e.g. 0660"))?;
        let group = match group {
            None => None,
            Some(g) => Some(match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => nix::unistd::Group::from_name(g)
                    .with_context(|| format!("--{flag}-group {g:?}: looking the group up"))?
                    .with_context(|| format!("--{flag}-group {g:?}: no such group"))?
                    .gid
                    .as_raw(),
            }),
        };
        Ok(SocketAccess { mode: bits, group })
    }
}

/// Binds a listening socket at `path` ([`check_socket_path`] first: only
/// a stale socket is replaced), non-blocking, with `access`'s mode and
/// group.
pub fn bind_socket(path: &Path, role: SocketRole, access: SocketAccess) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let what = role.what();
    if check_socket_path(path, role)? {
        std::fs::remove_file(path).with_context(|| format!("{what} {}: removing the stale socket", path.display()))?;
    }
    let listener = UnixListener::bind(path).with_context(|| format!("{what} {}: cannot listen", path.display()))?;
    let set = || -> std::io::Result<()> {
        if let Some(gid) = access.group {
            std::os::unix::fs::chown(path, None, Some(gid))?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode))
    };
    if let Err(e) = set() {
        let _ = std::fs::remove_file(path);
        return Err(e)
            .with_context(|| format!("{what} {}: setting its mode {:o} and group", path.display(), access.mode));
    }
    listener.set_nonblocking(true).with_context(|| format!("{what} {}: non-blocking accept", path.display()))?;
    Ok(listener)
}

/// The listening side, on its own thread for the length of a run.
pub struct CtlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CtlServer {
    /// Listens on `path`, open to `access`, for the run whose loop `op`
    /// reaches and whose pinned loop started at `started`. A socket left by a run that is
    /// gone is replaced; one a live run listens on, or anything that is not
    /// a socket, is an error ([`check_socket_path`]).
    pub fn start(path: &Path, op: OperatorHandle, started: Instant, access: SocketAccess) -> anyhow::Result<Self> {
        let listener = bind_socket(path, SocketRole::Control, access)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let slots = crate::conn_slots::ConnSlots::default();
        let thread = std::thread::Builder::new()
            .name("perf-ctl".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let Some(slot) = slots.take(MAX_CONTROLLERS) else {
                                refuse_busy(&stream);
                                continue;
                            };
                            let op = op.clone();
                            let spawned = std::thread::Builder::new().name("perf-ctl-conn".into()).spawn(move || {
                                let _slot = slot;
                                if let Err(e) = serve(stream, &op, started) {
                                    tracing::warn!("control connection: {e:#}");
                                }
                            });
                            if let Err(e) = spawned {
                                tracing::warn!("control connection: starting its thread: {e}");
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5))
                        }
                        Err(e) => {
                            tracing::warn!("control socket: {e}");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })
            .context("control socket: starting its thread")?;
        tracing::info!(path = %path.display(), "control socket listening");
        Ok(CtlServer { path: path.to_path_buf(), stop, thread: Some(thread) })
    }

    /// Stops listening and removes the socket file.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Answers a controller past [`MAX_CONTROLLERS`] from the accepting
/// thread: one short, bounded write.
fn refuse_busy(stream: &UnixStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let error = format!("{MAX_CONTROLLERS} controllers are connected, the most at once: try again later");
    let mut out = stream;
    let _ = writeln!(out, "{}", json!({"ok": false, "error": error}));
}

/// Reads one request line of at most [`MAX_REQUEST_BYTES`], whole within
/// `wait` (each read waits only for what is left of it). `Ok(None)` for a
/// line over the cap.
fn read_request(stream: &UnixStream, wait: Duration) -> anyhow::Result<Option<String>> {
    let deadline = Instant::now() + wait;
    let mut line = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        anyhow::ensure!(!left.is_zero(), "no whole request line within {wait:?}");
        stream.set_read_timeout(Some(left))?;
        let n = match (&*stream).read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                anyhow::bail!("no whole request line within {wait:?}")
            }
            Err(e) => return Err(e.into()),
        };
        let end = buf[..n].iter().position(|&b| b == b'\n');
        line.extend_from_slice(&buf[..end.unwrap_or(n)]);
        if line.len() > MAX_REQUEST_BYTES {
            return Ok(None);
        }
        if end.is_some() || n == 0 {
            return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
        }
    }
}

/// Answers one connection: one request line, one answer line.
fn serve(stream: UnixStream, op: &OperatorHandle, started: Instant) -> anyhow::Result<()> {
    stream.set_nonblocking(false)?;
    let answer = match read_request(&stream, REQUEST_WAIT) {
        Err(e) => json!({"ok": false, "error": format!("{e:#}")}),
        Ok(None) => json!({"ok": false, "error": format!("a request line is at most {MAX_REQUEST_BYTES} bytes")}),
        Ok(Some(line)) => match serde_json::from_str::<Request>(line.trim()) {
            Ok(req) => answer(&req, op, started),
            Err(e) => json!({"ok": false, "error": format!("bad request {:?}: {e}", line.trim())}),
        },
    };
    let mut out = &stream;
    stream.set_write_timeout(Some(REQUEST_WAIT))?;
    writeln!(out, "{answer}")?;
    Ok(())
}

fn fail(e: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": e.to_string()})
}

/// The answer to `req`.
pub fn answer(req: &Request, op: &OperatorHandle, started: Instant) -> Value {
    match req {
        Request::Stats => match op.snapshot(ANSWER_WAIT) {
            Ok(s) => json!({"ok": true, "stats": stats(&s, started)}),
            Err(e) => fail(e),
        },
        Request::Pause { tenant } | Request::Resume { tenant } => {
            let paused = matches!(req, Request::Pause { .. });
            match op.set_paused(tenant, paused, ANSWER_WAIT) {
                Ok(changed) => json!({"ok": true, "tenant": tenant, "paused": paused, "changed": changed}),
                Err(e) => fail(e),
            }
        }
        Request::Swap { policy } => swap(policy, op),
    }
}

/// Asks for a swap and waits until the loop records its outcome.
fn swap(policy: &str, op: &OperatorHandle) -> Value {
    swap_within(policy, op, ANSWER_WAIT)
}

/// [`swap`], waiting at most `wait`: a swap not ready by then is cancelled
/// (the loop records it refused), so it never applies later, unseen.
fn swap_within(policy: &str, op: &OperatorHandle, wait: Duration) -> Value {
    let before = op.swaps_recorded();
    let Some(ticket) = op.request_swap(PolicySpec::Named(policy.to_string()), WasmLimits::default()) else {
        return fail("the dataplane has stopped");
    };
    let mut deadline = Instant::now() + wait;
    while op.swaps_recorded() <= before {
        if Instant::now() > deadline {
            if ticket.cancel() {
                return fail(format!("the swap to {policy} was not ready within {wait:?}: cancelled"));
            }
            // Taken just now: its record follows at once.
            deadline = Instant::now() + ANSWER_WAIT;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let snap = match op.snapshot(ANSWER_WAIT) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    // Scripted swaps may have been recorded meanwhile: ours is the last
    // one to this policy.
    let Some(rec) = snap.swaps[before as usize..].iter().rev().find(|r| r.to == policy).or(snap.swaps.last()) else {
        return fail("the swap left no record");
    };
    let record = serde_json::to_value(rec).unwrap_or(Value::Null);
    match &rec.outcome {
        SwapOutcome::Accepted => json!({"ok": true, "swap": record}),
        SwapOutcome::Refused(why) => json!({
            "ok": false,
            "swap": record,
            "error": format!("refused {policy}: {why}; {} keeps running", rec.from),
        }),
    }
}

/// `ctl stats`' body: the snapshot and the loop's busy fraction so far.
fn stats(s: &DataplaneSnapshot, started: Instant) -> Value {
    let wall_ns = started.elapsed().as_nanos().max(1) as f64;
    let c = &s.counters;
    json!({
        "clock_ms": s.clock_ns as f64 / 1e6,
        "policy": s.policy,
        "busy_fraction": c.busy_ns as f64 / wall_ns,
        "policy_share": c.policy_ns as f64 / (c.busy_ns as f64).max(1.0),
        "tenants": s.tenants,
        "swaps": s.swaps,
        "dataplane": s.counters,
        "policy_counters": s.policy_counters,
    })
}

/// One line for a swap record.
pub fn swap_line(r: &SwapRecord) -> String {
    let what = match &r.outcome {
        SwapOutcome::Accepted => "accepted".to_string(),
        SwapOutcome::Refused(why) => format!("REFUSED ({why}); {} keeps running", r.from),
    };
    format!(
        "{:.3} ms: {} -> {}: {what} (prepared in {:.2} ms)",
        r.at_ns as f64 / 1e6,
        r.from,
        r.to,
        r.prepare_ns as f64 / 1e6
    )
}

/// Flags of `ctl`.
#[derive(clap::Args)]
pub struct Args {
    /// The run's control socket (default: `$PERF_RUNNER_CTL`, else
    /// `./perf-runner.sock`).
    #[arg(long, short = 's', value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the server's JSON answer instead of text.
    #[arg(long)]
    json: bool,
    /// What to do.
    #[command(subcommand)]
    cmd: Request,
}

/// Sends `req` to the socket at `path` and reads the answer.
pub fn call(path: &Path, req: &Request) -> anyhow::Result<Value> {
    let stream = UnixStream::connect(path).with_context(|| {
        format!("cannot reach the control socket {} (is a `perf-runner run --realtime --ctl` running?)", path.display())
    })?;
    stream.set_read_timeout(Some(ANSWER_WAIT + Duration::from_secs(5)))?;
    let mut out = &stream;
    writeln!(out, "{}", serde_json::to_string(req)?)?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).context("reading the answer")?;
    serde_json::from_str(line.trim()).with_context(|| format!("the run answered {:?}, not JSON", line.trim()))
}

/// Runs `ctl`.
pub fn run(a: Args) -> anyhow::Result<()> {
    let path = a.socket.clone().unwrap_or_else(default_socket);
    let req = match a.cmd {
        // A file is named for the run, whose directory may differ.
        Request::Swap { policy } if Path::new(&policy).is_file() => {
            let path = std::fs::canonicalize(&policy).with_context(|| format!("resolving {policy}"))?;
            Request::Swap { policy: path.display().to_string() }
        }
        other => other,
    };
    let ans = call(&path, &req)?;
    if a.json {
        println!("{ans}");
    } else {
        print!("{}", text(&req, &ans));
    }
    if ans["ok"].as_bool() != Some(true) {
        let why = ans["error"].as_str().unwrap_or("the run refused the request");
        anyhow::bail!("{why}");
    }
    Ok(())
}

/// The human form of an answer.
fn text(req: &Request, ans: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let mut s = String::new();
    match req {
        Request::Swap { .. } => {
            if let Ok(r) = serde_json::from_value::<SwapLine>(ans["swap"].clone()) {
                s += &format!("swap at {}\n", r.line());
            }
        }
        Request::Pause { tenant } | Request::Resume { tenant } if ans["ok"] == true => {
            let state = if ans["paused"] == true { "paused" } else { "running" };
            let note = if ans["changed"] == true { "" } else { " (already)" };
            s += &format!("tenant {tenant}: {state}{note}\n");
        }
        Request::Stats if ans["ok"] == true => {
            let st = &ans["stats"];
            s += &format!(
                "clock {:.3} ms   policy {}   dataplane core busy {:.1}%, policy {:.1}% of busy\n",
                f(&st["clock_ms"]),
                st["policy"].as_str().unwrap_or("?"),
                f(&st["busy_fraction"]) * 100.0,
                f(&st["policy_share"]) * 100.0
            );
            s += &format!("{:<16} {:<8} {:>12} {:>8}\n", "tenant", "state", "completions", "held");
            for t in st["tenants"].as_array().into_iter().flatten() {
                let state = if t["paused"] == true { "paused" } else { "running" };
                s += &format!(
                    "{:<16} {state:<8} {:>12} {:>8}\n",
                    t["name"].as_str().unwrap_or("?"),
                    t["delivered"].as_u64().unwrap_or(0),
                    t["held"].as_u64().unwrap_or(0)
                );
            }
            let swaps: Vec<SwapLine> = serde_json::from_value(st["swaps"].clone()).unwrap_or_default();
            if !swaps.is_empty() {
                s += "swaps:\n";
            }
            for r in swaps {
                s += &format!("  {}\n", r.line());
            }
        }
        _ => {}
    }
    s
}

/// A [`SwapRecord`] as it comes over the socket.
#[derive(Deserialize)]
struct SwapLine {
    at_ns: u64,
    from: String,
    to: String,
    outcome: Value,
    prepare_ns: u64,
}

impl SwapLine {
    fn line(&self) -> String {
        let outcome = match &self.outcome {
            Value::Object(m) => match m.get("Refused") {
                Some(why) => SwapOutcome::Refused(why.as_str().unwrap_or("?").to_string()),
                None => SwapOutcome::Accepted,
            },
            _ => SwapOutcome::Accepted,
        };
        let r = SwapRecord {
            at_ns: self.at_ns,
            from: self.from.clone(),
            to: self.to.clone(),
            outcome,
            prepare_ns: self.prepare_ns,
            cached: false,
        };
        swap_line(&r)
    }
}
