//! The policy loader: prepares policies off the dataplane core.
//!
//! A [`PolicyLoader`] owns one thread. Each [`LoadRequest`] names a policy
//! ([`PolicySpec`]) and carries the tenants the loop had when it asked;
//! the thread loads the policy (a built-in, or a wasm module compiled
//! through the [`ModuleCache`](super::cache::ModuleCache) and
//! instantiated), tells it about every tenant and QP (`on_tenant`), and
//! sends the ready-to-run [`PolicyHost`] back as a [`Prepared`]. The loop
//! picks it up with a non-blocking receive and switches at a round
//! boundary (`Dataplane::request_swap`), so neither compiling nor
//! initialising a module ever runs on the dataplane core.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use perf_policy_sdk::TenantInfo;

use super::wasm::{LoadError, WasmLimits, WasmPolicy};
use super::{ExitInfo, PolicyHost};

/// A policy to load.
pub enum PolicySpec {
    /// Anything [`PolicyHost::load`] takes: a built-in name, `wasm:NAME`,
    /// or the path of a `.wasm` file.
    Named(String),
    /// A module's bytes, with a label for reports.
    Bytes {
        /// How reports name it.
        label: String,
        /// The module.
        bytes: Arc<[u8]>,
    },
    /// A policy already hosted (a native policy of the embedding program);
    /// the loader only initialises it.
    Host(Box<PolicyHost>),
}

impl PolicySpec {
    /// How reports name the policy asked for.
    pub fn label(&self) -> String {
        match self {
            PolicySpec::Named(n) => n.clone(),
            PolicySpec::Bytes { label, .. } => label.clone(),
            PolicySpec::Host(h) => h.name().to_string(),
        }
    }
}

impl From<&str> for PolicySpec {
    fn from(s: &str) -> Self {
        PolicySpec::Named(s.to_string())
    }
}

impl From<PathBuf> for PolicySpec {
    fn from(p: PathBuf) -> Self {
        PolicySpec::Named(p.display().to_string())
    }
}

/// Why a policy could not be prepared; the running policy stays.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// It did not load (not found, not wasm, refused by validation, ...).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// It loaded but failed while being initialised with the tenants.
    #[error("failed in {} while being initialised: {:?}: {}", .0.hook, .0.kind, .0.message)]
    Init(Box<ExitInfo>),
    /// The loader thread is gone or did not answer in time.
    #[error("the policy loader did not answer: {0}")]
    Loader(String),
}

/// A request to the loader.
pub struct LoadRequest {
    /// The caller's id for it (echoed in [`Prepared::id`]).
    pub id: u64,
    /// What to load.
    pub spec: PolicySpec,
    /// The bounds a wasm module runs under.
    pub limits: WasmLimits,
    /// The tenants (and their QP counts) to initialise it with.
    pub tenants: Vec<TenantInfo>,
}

/// A policy the loader prepared (or failed to).
pub struct Prepared {
    /// The request's id.
    pub id: u64,
    /// The request's label.
    pub label: String,
    /// The policy, initialised with [`Prepared::tenants`], or why not.
    pub result: Result<PolicyHost, PrepareError>,
    /// The tenants it was initialised with.
    pub tenants: Vec<TenantInfo>,
    /// Wall time the preparation took, in ns.
    pub prepare_ns: u64,
    /// Whether a wasm module came from the module cache.
    pub cached: bool,
}

/// Loads `spec` and initialises it with `tenants` (what the loader thread
/// does for each request; callable directly).
pub fn prepare(req: LoadRequest) -> Prepared {
    let t0 = Instant::now();
    let label = req.spec.label();
    let mut cached = false;
    let loaded = match req.spec {
        PolicySpec::Named(name) => PolicyHost::load_with(&name, req.limits).map(|(h, c)| {
            cached = c;
            h
        }),
        PolicySpec::Bytes { bytes, .. } => WasmPolicy::load_cached(&bytes, req.limits).map(|(w, c)| {
            cached = c;
            PolicyHost::wasm(w)
        }),
        PolicySpec::Host(h) => Ok(*h),
    };
    let result = loaded.map_err(PrepareError::from).and_then(|mut host| {
        for t in &req.tenants {
            host.on_tenant(t);
        }
        host.prefault();
        // A fresh host has no exit: one now means it failed while loading
        // (its tick interval) or in `on_tenant`.
        match host.exit_info() {
            Some(e) => Err(PrepareError::Init(Box::new(e.clone()))),
            None => Ok(host),
        }
    });
    Prepared { id: req.id, label, result, tenants: req.tenants, prepare_ns: t0.elapsed().as_nanos() as u64, cached }
}

/// Work for the loader thread.
enum Job {
    /// Prepare a policy.
    Load(LoadRequest),
    /// Drop a policy swapped out (tearing down a wasm instance unmaps its
    /// memory: tens of microseconds kept off the loop).
    Retire(Box<PolicyHost>),
}

/// The loader thread and its channels.
pub struct PolicyLoader {
    tx: Option<Sender<Job>>,
    rx: Receiver<Prepared>,
    thread: Option<JoinHandle<()>>,
}

impl PolicyLoader {
    /// Starts the loader thread.
    pub fn spawn() -> std::io::Result<Self> {
        let (tx, req_rx) = unbounded::<Job>();
        let (done_tx, rx) = unbounded::<Prepared>();
        let thread = std::thread::Builder::new().name("perf-policy-loader".into()).spawn(move || {
            while let Ok(job) = req_rx.recv() {
                match job {
                    Job::Load(req) => {
                        if done_tx.send(prepare(req)).is_err() {
                            break;
                        }
                    }
                    Job::Retire(host) => drop(host),
                }
            }
        })?;
        Ok(PolicyLoader { tx: Some(tx), rx, thread: Some(thread) })
    }

    /// Queues a request; `false` if the thread is gone.
    pub fn submit(&self, req: LoadRequest) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(Job::Load(req)).is_ok())
    }

    /// Hands a swapped-out policy to the thread to drop; gives it back
    /// (boxed, as it was sent) if the thread is gone.
    pub fn retire(&self, host: PolicyHost) -> Result<(), Box<PolicyHost>> {
        match &self.tx {
            Some(tx) => tx.send(Job::Retire(Box::new(host))).map_err(|e| match e.0 {
                Job::Retire(h) => h,
                Job::Load(_) => unreachable!("sent a retire job"),
            }),
            None => Err(Box::new(host)),
        }
    }

    /// A prepared policy, if one is ready (never blocks).
    pub fn try_recv(&self) -> Option<Prepared> {
        self.rx.try_recv().ok()
    }

    /// Waits up to `timeout` for a prepared policy.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Prepared, PrepareError> {
        self.rx.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => PrepareError::Loader(format!("nothing after {timeout:?}")),
            RecvTimeoutError::Disconnected => PrepareError::Loader("the loader thread ended".into()),
        })
    }
}

impl Drop for PolicyLoader {
    fn drop(&mut self) {
        // Closing the request channel ends the thread after its current
        // load; it is not joined (a compile may take a while).
        self.tx = None;
        drop(self.thread.take());
    }
}
