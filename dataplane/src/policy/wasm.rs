//! The wasm policy sandbox: loads a policy module (the ABI of
//! [`perf_policy_sdk::abi`], `docs/policy-abi.md`), validates it before it
//! can run, and calls its hooks under bounds.
//!
//! - **Validation** ([`WasmPolicy::from_bytes`]): the bytes are a wasm
//!   module; it imports only `perf.now_ns` / `perf.log` with their
//!   signatures; it exports `memory` and every hook of
//!   [`abi::REQUIRED_EXPORTS`] with the ABI's signature; its
//!   `perf_abi_version` is compatible with [`ABI_VERSION`]; its buffers
//!   lie inside its memory, aligned; its name is UTF-8 of at most
//!   [`abi::MAX_NAME_LEN`] bytes. Any failure is a [`LoadError`] naming
//!   what is wrong.
//! - **Bounds** ([`WasmLimits`]): every call runs under a per-call
//!   budget ([`Interruption::Budget`], the default): fuel, which a loop
//!   runs out of after a fixed number of wasm instructions, whatever the
//!   machine's load, and an epoch backstop (a process-wide ticker thread
//!   advances the engine's epoch every [`EPOCH_TICK`]) for code that is
//!   slow without spending fuel; or, if chosen, an epoch deadline alone or
//!   fuel alone. Linear memory is capped by `StoreLimits` (growing past
//!   the cap traps); the wasm stack is capped by the engine's
//!   `max_wasm_stack`. `docs/hostile-policies.md` gives the numbers.
//! - **Faults**: a call that traps, runs out of time, or returns something
//!   undecodable is a [`Fault`]; the [`PolicyHost`](super::PolicyHost)
//!   then drops to the built-in `passthrough` and records an
//!   [`ExitInfo`](super::ExitInfo).

use std::mem::offset_of;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use perf_policy_sdk::abi::{self, ValType as AbiType};
use perf_policy_sdk::{
    LoopInfo, Pacing, ParamError, RequestCalls, RequestInfo, SplitPlan, TenantInfo, TenantPlan, TenantStats,
    ZeroWeightOp, ABI_VERSION,
};
use wasmtime::{
    Caller, Config, Engine, ExternType, Linker, Memory, Module, Store, StoreLimits, StoreLimitsBuilder, Trap,
    TypedFunc, ValType,
};

use super::delta::{keys_differ, plans_differ, stats_key, StatsKey};

/// How often the process-wide ticker advances the epoch of an engine with
/// epoch deadlines (the granularity of [`Interruption::Epoch`] and of the
/// backstop of [`Interruption::Budget`]).
pub const EPOCH_TICK: Duration = Duration::from_micros(250);

/// Default fuel per call of [`CallBudget`] (every hook): 30x the dearest
/// call of the built-in policies at 64 tenants (`justitia`'s `on_tick`,
/// 134 k), about 0.15 ms of a looping module on the machine it was sized
/// on (`docs/hostile-policies.md`, "The call budget").
pub const DEFAULT_CALL_FUEL: u64 = 4_000_000;

/// Default extra fuel of an `on_tick` call per tenant it carries: 3x the
/// dearest built-in policy's cost per tenant (`justitia`, 665). At 4096
/// tenants (the ABI's most) a tick gets 12.2 M, 4.3x what `justitia`
/// spends there (2.8 M).
pub const DEFAULT_TICK_FUEL_PER_TENANT: u64 = 2_000;

/// Default wall-clock backstop of [`CallBudget`]: one tick. With the look
/// a tick later that confirms the call is still running, a call that
/// spends little fuel is stopped within about 0.5 ms of wall time.
pub const DEFAULT_BACKSTOP: Duration = Duration::from_micros(250);

/// The wall-clock backstop of the calls made while a module loads
/// (`perf_abi_version`, `perf_init`, the buffer getters): they run on the
/// loader's thread, never on the dataplane core, and the first of them
/// faults in the module's memory, which costs the thread CPU time but no
/// fuel. Fuel bounds them as it bounds every call.
pub const LOAD_BACKSTOP: Duration = Duration::from_millis(50);

/// The wasm stack cap of the engine, in bytes.
pub const MAX_WASM_STACK: usize = 512 * 1024;

/// Most log lines kept per module (older ones are dropped).
pub const MAX_LOG_LINES: usize = 64;
/// Longest log line kept, in bytes.
pub const MAX_LOG_LINE: usize = 256;

/// How calls into a module are interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// Epoch deadline: a call is stopped after about this long (rounded
    /// up to whole [`EPOCH_TICK`]s, plus one). Cheap, wall-clock based.
    Epoch(Duration),
    /// Fuel: a call is stopped after about this many wasm instructions.
    /// Deterministic, dearer per instruction.
    Fuel(u64),
    /// Fuel per call (more for a tick over many tenants) and an epoch
    /// backstop ([`CallBudget`]); the default.
    Budget(CallBudget),
}

/// The per-call budget of [`Interruption::Budget`].
///
/// A call that spends its fuel ([`CallBudget::fuel_for`]: about one unit
/// per wasm instruction) traps with `OutOfFuel`: a deterministic bound, the same on
/// every run and machine, which counts only the module's own work (a call
/// descheduled by the OS is not charged). The backstop bounds code that is
/// slow without spending fuel (work in the host's imports, cache-missing
/// loads; wasmtime charges bulk memory operations per byte): a call still
/// running [`CallBudget::backstop`] of wall time after it started is
/// looked at, and stopped (`Interrupt`) at the first later tick of the
/// epoch at least half an [`EPOCH_TICK`] after that look, if it still
/// runs then; so a legitimate call
/// that the OS descheduled past the backstop, and that finishes in
/// microseconds once it runs again, is not taken for a loop. Both traps
/// are [`FaultKind::Timeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBudget {
    /// Fuel per call.
    pub fuel: u64,
    /// Extra fuel of an `on_tick` call per tenant it carries (the one hook
    /// whose work grows with the tenants).
    pub tick_fuel_per_tenant: u64,
    /// Wall time after which a running call is looked at (rounded up to
    /// whole [`EPOCH_TICK`]s); it is stopped about a tick later if it is
    /// still running then.
    pub backstop: Duration,
}

impl Default for CallBudget {
    /// [`DEFAULT_CALL_FUEL`], [`DEFAULT_TICK_FUEL_PER_TENANT`] and
    /// [`DEFAULT_BACKSTOP`].
    fn default() -> Self {
        CallBudget {
            fuel: DEFAULT_CALL_FUEL,
            tick_fuel_per_tenant: DEFAULT_TICK_FUEL_PER_TENANT,
            backstop: DEFAULT_BACKSTOP,
        }
    }
}

impl CallBudget {
    /// The fuel of a call that carries `tenants` tenants (`on_tick`; 0 for
    /// the other hooks).
    pub fn fuel_for(&self, tenants: usize) -> u64 {
        self.fuel.saturating_add(self.tick_fuel_per_tenant.saturating_mul(tenants as u64))
    }
}

impl Interruption {
    /// The fuel a call gets (an `on_tick` over many tenants may get more,
    /// [`CallBudget::fuel_for`]), if this bound counts fuel.
    pub fn fuel(self) -> Option<u64> {
        match self {
            Interruption::Epoch(_) => None,
            Interruption::Fuel(f) => Some(f),
            Interruption::Budget(b) => Some(b.fuel),
        }
    }
}

/// The bounds a module runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmLimits {
    /// Per-call interruption.
    pub interruption: Interruption,
    /// Cap on the module's linear memory, in bytes.
    pub max_memory_bytes: usize,
    /// Largest module accepted, in bytes (checked before compiling, so a
    /// huge module costs no compile time).
    pub max_module_bytes: usize,
}

impl Default for WasmLimits {
    /// The default [`CallBudget`] per call (a looping call is stopped
    /// within 1 ms; see `docs/hostile-policies.md`), 16 MiB of memory,
    /// 4 MiB of module (the repository's policies are 20-340 KB).
    fn default() -> Self {
        WasmLimits {
            interruption: Interruption::Budget(CallBudget::default()),
            max_memory_bytes: 16 << 20,
            max_module_bytes: 4 << 20,
        }
    }
}

/// Reads a module's file: a regular file only (a device or a FIFO could
/// feed or block the loader without end), of at most `max` bytes, checked
/// before reading and while reading (a file that grows is cut at the cap).
pub fn read_module_file(path: &std::path::Path, max: usize) -> Result<Vec<u8>, LoadError> {
    use std::io::Read;
    let shown = || path.display().to_string();
    let io = |source| LoadError::Io { path: shown(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(LoadError::NotAFile { path: shown(), kind });
    }
    if meta.len() > max as u64 {
        return Err(LoadError::TooLarge { len: meta.len().min(usize::MAX as u64) as usize, max });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path).map_err(io)?.take(max as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() > max {
        return Err(LoadError::TooLarge { len: bytes.len(), max });
    }
    Ok(bytes)
}

/// Why a module could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a wasm module (bad magic number).
    #[error("not a wasm module (no `\\0asm` header)")]
    NotWasm,
    /// Too short to hold a wasm header (`\0asm` and a 4-byte version).
    #[error("{len} bytes: too short for a wasm module (its header alone is 8 bytes: `\\0asm` and a version)")]
    Truncated {
        /// Its size.
        len: usize,
    },
    /// The module is larger than [`WasmLimits::max_module_bytes`].
    #[error("the module is {len} bytes, more than the {max}-byte cap")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The module does not compile (wasmtime's reason is the source).
    #[error("the module does not compile")]
    Compile(#[source] wasmtime::Error),
    /// The module imports something the host does not provide.
    #[error(
        "the module imports `{module}.{name}`, which the host does not provide (it provides perf.now_ns, perf.log)"
    )]
    UnknownImport {
        /// Import module.
        module: String,
        /// Import name.
        name: String,
    },
    /// A required export is missing.
    #[error("the module lacks the export `{0}`")]
    MissingExport(String),
    /// An export or import has the wrong kind or signature.
    #[error("`{name}` has type {found}, the ABI wants {want}")]
    WrongType {
        /// Export or import name.
        name: String,
        /// What the module has.
        found: String,
        /// What the ABI wants.
        want: String,
    },
    /// The module speaks another ABI version.
    #[error("the module speaks ABI {}.{}, this host speaks {}.{} (same major and an older or equal minor needed)", module.0, module.1, host.0, host.1)]
    AbiVersion {
        /// The module's version.
        module: (u16, u16),
        /// The host's version.
        host: (u16, u16),
    },
    /// A buffer pointer is out of memory, misaligned, or too small.
    #[error("bad {what} buffer: {detail}")]
    BadBuffer {
        /// Which buffer.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The policy's name is not UTF-8 or too long.
    #[error("bad policy name: {0}")]
    BadName(String),
    /// Instantiation failed (start function trapped, memory over the cap;
    /// wasmtime's reason is the source).
    #[error("instantiation failed")]
    Instantiate(#[source] wasmtime::Error),
    /// A call made while loading failed.
    #[error("`{hook}` failed while loading: {fault}")]
    Init {
        /// The export called.
        hook: &'static str,
        /// What happened.
        fault: Fault,
    },
    /// The wasm engine (or its host functions) could not be created; the
    /// reason is the source, shared because an engine is made once per
    /// process and every later load is refused for the same reason.
    #[error("the wasm engine could not be created")]
    Engine(#[source] Arc<wasmtime::Error>),
    /// The module's path names something other than a regular file (a
    /// device, a FIFO, a directory): it is not read.
    #[error("{path}: {kind}, not a regular file: a module is read from a regular file only")]
    NotAFile {
        /// The path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// The module file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A run-time parameter (`NAME:key=value,...`) was refused.
    #[error("policy {policy:?}: parameter `{param}`: {why}")]
    Param {
        /// The policy asked for (without its parameters).
        policy: String,
        /// The `key=value` refused.
        param: String,
        /// Why.
        why: String,
    },
    /// Neither a built-in policy nor a readable file.
    #[error("unknown policy {0:?}: not a built-in name, `wasm:NAME` of an embedded module, nor a .wasm file")]
    UnknownPolicy(String),
}

/// What kind of fault ended a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum FaultKind {
    /// The module trapped (unreachable, out of bounds, stack overflow,
    /// memory growth past the cap, ...).
    Trap,
    /// The call ran past its deadline or fuel.
    Timeout,
    /// The call returned a decision that is not valid.
    InvalidDecision,
    /// The host could not marshal the call (too many tenants, a buffer
    /// outside memory).
    Marshal,
    /// The watchdog reclaimed control: a QP with backlog completed nothing
    /// for longer than the configured bound under this policy.
    Watchdog,
}

/// A failed call into a module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct Fault {
    /// The kind.
    pub kind: FaultKind,
    /// A description (the trap message, what was invalid).
    pub message: String,
}

impl Fault {
    /// A fault of `kind` with `message`.
    pub fn new(kind: FaultKind, message: impl Into<String>) -> Self {
        Fault { kind, message: message.into() }
    }

    fn from_wasm(e: wasmtime::Error) -> Self {
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) | Some(Trap::OutOfFuel) => Fault::new(FaultKind::Timeout, format!("{e:#}")),
            _ => Fault::new(FaultKind::Trap, format!("{e:#}")),
        }
    }
}

struct HostState {
    limits: StoreLimits,
    now_ns: u64,
    log: Vec<String>,
    /// When the backstop of the current call first fired, and the fuel
    /// left then (`None` until then; reset when a call is armed).
    backstop_mark: Option<BackstopMark>,
    /// The fuel the current (or last) call was armed with.
    armed_fuel: u64,
}

/// Where the backstop first looked at a running call: the wall clock, the
/// calling thread's CPU clock (where the OS has one) and the fuel left.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackstopMark {
    wall: std::time::Instant,
    /// The thread's CPU clock then (the mark is taken and read in the
    /// same call, on the same thread).
    cpu: Option<Duration>,
    fuel: Option<u64>,
}

impl BackstopMark {
    fn now(fuel: Option<u64>) -> Self {
        BackstopMark { wall: std::time::Instant::now(), cpu: thread_cpu(), fuel }
    }

    /// The time the call ran since the mark: the thread's CPU time (a
    /// call the OS descheduled did not run), else the wall time.
    fn ran(&self) -> Duration {
        match (self.cpu, thread_cpu()) {
            (Some(then), Some(now)) => now.saturating_sub(then),
            _ => self.wall.elapsed(),
        }
    }
}

/// The calling thread's CPU clock, where the OS has one.
fn thread_cpu() -> Option<Duration> {
    cpu_time::ThreadTime::try_now().ok().map(|t| t.as_duration())
}

/// The backstop of [`Interruption::Budget`] (see [`CallBudget`]): called
/// by wasmtime when a call reaches its epoch deadline. The first time in a
/// call it notes the time and the fuel left, and looks again at the next
/// tick. A call still running at a look at least half a tick after the
/// first, having run at least half a tick of the thread's CPU time since
/// (a call the OS descheduled is not judged by time it did not run, nor
/// on the few microseconds it ran since: back from a deschedule, with its
/// caches cold, a tick over 4096 tenants spent 1.8 fuel per ns in its
/// first 39 us), has been seen running across that time; it is stopped
/// unless it spent fuel at the rate of computing code per ns of that CPU
/// time ([`BACKSTOP_FUEL_PER_NS`]): such a call is bounded by its fuel already,
/// and stopping it would take a long legitimate hook (an `on_tick` over
/// thousands of tenants on a loaded machine) for a loop. (A legitimate
/// call of a few microseconds that was descheduled past its deadline
/// finishes long before a second look.)
fn backstop(mut cx: wasmtime::StoreContextMut<'_, HostState>) -> wasmtime::Result<wasmtime::UpdateDeadline> {
    let fuel = cx.get_fuel().ok();
    let st = cx.data_mut();
    match st.backstop_mark {
        None => {
            st.backstop_mark = Some(BackstopMark::now(fuel));
            Ok(wasmtime::UpdateDeadline::Continue(1))
        }
        Some(mark) => {
            // Read the thread's CPU clock once: the judgment and its rate
            // rest on the same reading.
            let ran = mark.ran();
            if mark.wall.elapsed() < EPOCH_TICK / 2 || ran < EPOCH_TICK / 2 {
                return Ok(wasmtime::UpdateDeadline::Continue(1));
            }
            let spent = mark.fuel.zip(fuel).map_or(0, |(then, now)| then.saturating_sub(now));
            if spent as u128 >= ran.as_nanos() * BACKSTOP_FUEL_PER_NS as u128 {
                st.backstop_mark = Some(BackstopMark::now(fuel));
                Ok(wasmtime::UpdateDeadline::Continue(1))
            } else {
                Ok(wasmtime::UpdateDeadline::Interrupt)
            }
        }
    }
}

/// The fuel per ns of wall time below which the backstop takes a running
/// call for stuck (outside its own code, or in a slow loop through the
/// host's imports). Wasm code computing spends 23 to 52 fuel per ns on this
/// machine (`policy_round`'s fuel section); a loop around `perf.log`
/// spends far less.
pub const BACKSTOP_FUEL_PER_NS: u64 = 2;

/// `perf_set_param(key_len, value_len) -> i32` (ABI 1.2).
type SetParam = TypedFunc<(i32, i32), i32>;

struct Hooks {
    init: TypedFunc<(), i32>,
    on_tenant: TypedFunc<(i32, i32, i32), ()>,
    on_request: TypedFunc<(), i64>,
    on_tick: TypedFunc<(i64, i32), i32>,
    tick_interval_ns: TypedFunc<(), i64>,
}

/// A loaded, validated wasm policy module and its sandbox.
pub struct WasmPolicy {
    store: Store<HostState>,
    memory: Memory,
    hooks: Hooks,
    stats_ptr: usize,
    plans_ptr: usize,
    request_ptr: usize,
    /// The pacing buffer (ABI 1.1, optional export).
    pacing_ptr: Option<usize>,
    /// The params buffer and `perf_set_param` (ABI 1.2, optional exports).
    params: Option<(usize, SetParam)>,
    /// The control block (ABI 1.5, optional export).
    control_ptr: Option<usize>,
    /// The loop block (ABI 1.7, optional export).
    loop_ptr: Option<usize>,
    /// The changed list's address (ABI 1.9), written before each tick.
    changed_ptr: Option<usize>,
    /// What the control block said at its last read: the tick interval
    /// and the request-call declaration.
    control: Option<abi::Declared>,
    /// The host's copy of the resident tables (ABI 1.5); `None` before.
    resident: Option<Box<Resident>>,
    max_tenants: usize,
    name: String,
    abi_version: (u16, u16),
    limits: WasmLimits,
}

/// Whether two records differ, word by word (inlined: a call of `memcmp`
/// per record would cost more than the record's encoding).
fn differ<const N: usize>(a: &[u8; N], b: &[u8; N]) -> bool {
    let (a, _) = a.as_chunks::<8>();
    let (b, _) = b.as_chunks::<8>();
    a.iter().zip(b).fold(0u64, |acc, (x, y)| acc | (u64::from_ne_bytes(*x) ^ u64::from_ne_bytes(*y))) != 0
}

/// The host's copy of a resident module's tables (ABI 1.5): what it last
/// wrote into the stats table, and the plan and pacing records as it last
/// wrote or decoded them (values and bytes). Record `i` of a table is
/// known for `i` below its `*_known`; an unknown record is always written
/// (stats, plans) or decoded (plans, pacing).
struct Resident {
    stats: Vec<StatsKey>,
    stats_known: usize,
    plans: Vec<TenantPlan>,
    plan_bytes: Vec<[u8; abi::PLAN_SIZE]>,
    plans_known: usize,
    pacing: Vec<Pacing>,
    pacing_bytes: Vec<[u8; abi::PACING_SIZE]>,
    pacing_known: usize,
    /// Records of the last tick: written (stats and plans) and decoded
    /// (plans).
    last: ResidentCounts,
    /// The tick's changed list (ABI 1.9): the tenants whose stats or plan
    /// it wrote.
    changed: Vec<u32>,
    /// The plans and pacing records the last tick decoded (the others are
    /// ones the host wrote or decoded and validated before).
    decoded_plans: Vec<u32>,
    decoded_pacing: Vec<u32>,
}

impl Resident {
    fn new(max_tenants: usize) -> Self {
        Resident {
            stats: vec![[0; 8]; max_tenants],
            stats_known: 0,
            plans: vec![TenantPlan::PASSTHROUGH; max_tenants],
            plan_bytes: vec![[0; abi::PLAN_SIZE]; max_tenants],
            plans_known: 0,
            pacing: vec![Pacing::UNLIMITED; max_tenants],
            pacing_bytes: vec![[0; abi::PACING_SIZE]; max_tenants],
            pacing_known: 0,
            last: ResidentCounts::default(),
            changed: Vec::new(),
            decoded_plans: Vec::new(),
            decoded_pacing: Vec::new(),
        }
    }
}

/// What the last `on_tick` of a module with resident tables (ABI 1.5)
/// moved across the sandbox ([`WasmPolicy::resident_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidentCounts {
    /// Stats records written into the module's table.
    pub stats_written: usize,
    /// Plans written into the module's table (the host's plan differed
    /// from what the table held).
    pub plans_written: usize,
    /// Plans read back and decoded (their bytes changed in the call).
    pub plans_decoded: usize,
}

/// Which instrumentation an engine compiles in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EngineKind {
    /// Epoch checks only.
    Epoch,
    /// Fuel counting only.
    Fuel,
    /// Both (for [`Interruption::Budget`]).
    Both,
}

impl EngineKind {
    fn of(i: Interruption) -> Self {
        match i {
            Interruption::Epoch(_) => EngineKind::Epoch,
            Interruption::Fuel(_) => EngineKind::Fuel,
            Interruption::Budget(_) => EngineKind::Both,
        }
    }
}

/// Has the process-wide ticker thread advance `engine`'s epoch every
/// [`EPOCH_TICK`] (one thread for every engine with epoch deadlines).
fn ticker(engine: &Engine) -> Result<(), Arc<std::io::Error>> {
    static TICKED: parking_lot::Mutex<Vec<Engine>> = parking_lot::Mutex::new(Vec::new());
    static THREAD: OnceLock<Result<(), Arc<std::io::Error>>> = OnceLock::new();
    TICKED.lock().push(engine.clone());
    THREAD
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("perf-wasm-epoch".into())
                .spawn(|| {
                    // The epoch counts whole ticks of wall time: a sleep
                    // that overruns (a loaded machine, timer slack) is
                    // caught up at the next wake-up, so that a deadline in
                    // ticks is not stretched.
                    let (start, tick, mut epoch) = (std::time::Instant::now(), EPOCH_TICK.as_nanos().max(1), 0u128);
                    loop {
                        std::thread::sleep(EPOCH_TICK);
                        let due = start.elapsed().as_nanos() / tick;
                        let engines = TICKED.lock();
                        while epoch < due {
                            engines.iter().for_each(Engine::increment_epoch);
                            epoch += 1;
                        }
                    }
                })
                .map(|_| ())
                .map_err(Arc::new)
        })
        .clone()
}

fn engine(kind: EngineKind) -> Result<&'static Engine, LoadError> {
    static EPOCH: OnceLock<Result<Engine, Arc<wasmtime::Error>>> = OnceLock::new();
    static FUEL: OnceLock<Result<Engine, Arc<wasmtime::Error>>> = OnceLock::new();
    static BOTH: OnceLock<Result<Engine, Arc<wasmtime::Error>>> = OnceLock::new();
    let cell = match kind {
        EngineKind::Epoch => &EPOCH,
        EngineKind::Fuel => &FUEL,
        EngineKind::Both => &BOTH,
    };
    let (fuel, epoch) = (kind != EngineKind::Epoch, kind != EngineKind::Fuel);
    cell.get_or_init(|| {
        let mut cfg = Config::new();
        cfg.max_wasm_stack(MAX_WASM_STACK);
        cfg.consume_fuel(fuel);
        cfg.epoch_interruption(epoch);
        let engine = Engine::new(&cfg).map_err(Arc::new)?;
        if epoch {
            ticker(&engine)
                .map_err(|e| Arc::new(wasmtime::Error::new(e).context("starting the epoch ticker thread")))?;
        }
        Ok(engine)
    })
    .as_ref()
    .map_err(|e| LoadError::Engine(Arc::clone(e)))
}

fn type_string(params: &[AbiType], results: &[AbiType]) -> String {
    let f = |v: &[AbiType]| v.iter().map(|t| format!("{t:?}").to_lowercase()).collect::<Vec<_>>().join(", ");
    format!("func({}) -> ({})", f(params), f(results))
}

fn abi_type(v: &ValType) -> Option<AbiType> {
    match v {
        ValType::I32 => Some(AbiType::I32),
        ValType::I64 => Some(AbiType::I64),
        _ => None,
    }
}

fn check_func(name: &str, ty: &ExternType, params: &[AbiType], results: &[AbiType]) -> Result<(), LoadError> {
    let want = type_string(params, results);
    let ExternType::Func(f) = ty else {
        return Err(LoadError::WrongType { name: name.into(), found: "not a function".into(), want });
    };
    let p: Vec<Option<AbiType>> = f.params().map(|v| abi_type(&v)).collect();
    let r: Vec<Option<AbiType>> = f.results().map(|v| abi_type(&v)).collect();
    let same = |got: &[Option<AbiType>], want: &[AbiType]| {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| *g == Some(*w))
    };
    if same(&p, params) && same(&r, results) {
        return Ok(());
    }
    Err(LoadError::WrongType { name: name.into(), found: format!("{f}"), want })
}

impl WasmPolicy {
    /// Loads, validates and initialises a module from its bytes, compiling
    /// it every time (see [`WasmPolicy::load_cached`] for the cached path).
    pub fn from_bytes(bytes: &[u8], limits: WasmLimits) -> Result<Self, LoadError> {
        let module = Self::compile(bytes, limits)?;
        Self::instantiate(&module, limits)
    }

    /// Like [`WasmPolicy::from_bytes`], but takes the compiled module from
    /// the process-wide cache ([`super::cache::ModuleCache::global`]) when
    /// the same bytes were compiled before for the same engine. Returns the
    /// policy and whether the cache had the module.
    pub fn load_cached(bytes: &[u8], limits: WasmLimits) -> Result<(Self, bool), LoadError> {
        let (module, hit) = super::cache::ModuleCache::global().get_or_compile(bytes, limits)?;
        Ok((Self::instantiate(&module, limits)?, hit))
    }

    /// The engine a module loaded under `limits` runs on.
    pub(crate) fn engine_for(limits: WasmLimits) -> Result<&'static Engine, LoadError> {
        engine(EngineKind::of(limits.interruption))
    }

    /// The instrumentation of the engine a module loaded under `limits`
    /// runs on (part of the module cache's key).
    pub(crate) fn engine_kind(limits: WasmLimits) -> EngineKind {
        EngineKind::of(limits.interruption)
    }

    /// Checks the size and magic number, compiles, and validates imports and
    /// exports against the ABI: everything that does not need an instance.
    pub fn compile(bytes: &[u8], limits: WasmLimits) -> Result<Module, LoadError> {
        if bytes.len() > limits.max_module_bytes {
            return Err(LoadError::TooLarge { len: bytes.len(), max: limits.max_module_bytes });
        }
        if bytes.len() < 8 && b"\0asm".starts_with(&bytes[..bytes.len().min(4)]) {
            return Err(LoadError::Truncated { len: bytes.len() });
        }
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(LoadError::NotWasm);
        }
        let engine = Self::engine_for(limits)?;
        let module = Module::from_binary(engine, bytes).map_err(LoadError::Compile)?;
        Self::validate(&module)?;
        Ok(module)
    }

    /// Instantiates a compiled, validated module under `limits` (its memory
    /// cap, its deadlines), checks its ABI version, initialises it and
    /// locates its buffers.
    pub fn instantiate(module: &Module, limits: WasmLimits) -> Result<Self, LoadError> {
        let engine = Self::engine_for(limits)?;
        let mut linker: Linker<HostState> = Linker::new(engine);
        let host_fn = |e: wasmtime::Error| LoadError::Engine(Arc::new(e));
        linker
            .func_wrap(abi::IMPORT_MODULE, abi::IMPORT_NOW_NS, |c: Caller<'_, HostState>| c.data().now_ns as i64)
            .map_err(host_fn)?;
        linker
            .func_wrap(abi::IMPORT_MODULE, abi::IMPORT_LOG, |mut c: Caller<'_, HostState>, ptr: i32, len: i32| {
                let Some(mem) = c.get_export(abi::MEMORY_EXPORT).and_then(|e| e.into_memory()) else { return };
                let (ptr, len) = (ptr as u32 as usize, (len as u32 as usize).min(MAX_LOG_LINE));
                let line = mem
                    .data(&c)
                    .get(ptr..ptr.saturating_add(len))
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_else(|| "<log message outside memory>".into());
                let log = &mut c.data_mut().log;
                if log.len() >= MAX_LOG_LINES {
                    log.remove(0);
                }
                log.push(line);
            })
            .map_err(host_fn)?;

        let state = HostState {
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.max_memory_bytes)
                .instances(1)
                .memories(1)
                .tables(4)
                .table_elements(1 << 16)
                .trap_on_grow_failure(true)
                .build(),
            now_ns: 0,
            log: Vec::new(),
            backstop_mark: None,
            armed_fuel: 0,
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limits);
        if let Interruption::Budget(_) = limits.interruption {
            store.epoch_deadline_callback(backstop);
        }
        Self::arm(&mut store, limits);
        let instance = linker.instantiate(&mut store, module).map_err(LoadError::Instantiate)?;
        let memory = instance
            .get_memory(&mut store, abi::MEMORY_EXPORT)
            .ok_or_else(|| LoadError::MissingExport(abi::MEMORY_EXPORT.into()))?;
        let get = |store: &mut Store<HostState>, name: &'static str| -> Result<TypedFunc<(), i32>, LoadError> {
            instance.get_typed_func(store, name).map_err(|_| LoadError::MissingExport(name.into()))
        };

        // The version first: nothing else of a module of another ABI runs.
        let version = get(&mut store, "perf_abi_version")?;
        let word = Self::call0(&mut store, limits, &version, "perf_abi_version")?;
        let module_version = abi::split_version_word(word);
        if !abi::compatible(ABI_VERSION, module_version) {
            return Err(LoadError::AbiVersion { module: module_version, host: ABI_VERSION });
        }
        let hooks = Hooks {
            init: get(&mut store, "perf_init")?,
            on_tenant: instance
                .get_typed_func(&mut store, "perf_on_tenant")
                .map_err(|_| LoadError::MissingExport("perf_on_tenant".into()))?,
            on_request: instance
                .get_typed_func(&mut store, "perf_on_request")
                .map_err(|_| LoadError::MissingExport("perf_on_request".into()))?,
            on_tick: instance
                .get_typed_func(&mut store, "perf_on_tick")
                .map_err(|_| LoadError::MissingExport("perf_on_tick".into()))?,
            tick_interval_ns: instance
                .get_typed_func(&mut store, "perf_tick_interval_ns")
                .map_err(|_| LoadError::MissingExport("perf_tick_interval_ns".into()))?,
        };
        let rc = Self::call0(&mut store, limits, &hooks.init, "perf_init")?;
        if rc != 0 {
            return Err(LoadError::Init {
                hook: "perf_init",
                fault: Fault::new(FaultKind::InvalidDecision, format!("returned {rc}, not 0")),
            });
        }
        let mut ptr = |name: &'static str| -> Result<usize, LoadError> {
            let f = get(&mut store, name)?;
            Ok(Self::call0(&mut store, limits, &f, name)? as u32 as usize)
        };
        let max_tenants = ptr("perf_max_tenants")?;
        let stats_ptr = ptr("perf_stats_ptr")?;
        let plans_ptr = ptr("perf_plans_ptr")?;
        let request_ptr = ptr("perf_request_ptr")?;
        let name_ptr = ptr("perf_name_ptr")?;
        let name_len = ptr("perf_name_len")?;
        // ABI 1.1: the optional pacing buffer (a 1.0 module is never paced).
        let pacing_ptr = if module_version.1 >= abi::PACING_MINOR && module.get_export(abi::PACING_EXPORT).is_some() {
            Some(ptr(abi::PACING_EXPORT)?)
        } else {
            None
        };
        let has = |name| module.get_export(name).is_some();
        // ABI 1.5: the control block (a module without it is asked for its
        // tick interval by a call, and called for every request).
        let control_ptr = if module_version.1 >= abi::CONTROL_MINOR && has(abi::CONTROL_EXPORT) {
            Some(ptr(abi::CONTROL_EXPORT)?)
        } else {
            None
        };
        // ABI 1.7: the loop block (a module without it is told nothing of
        // the loop).
        let loop_ptr = if module_version.1 >= abi::LOOP_MINOR && has(abi::LOOP_EXPORT) {
            Some(ptr(abi::LOOP_EXPORT)?)
        } else {
            None
        };
        // ABI 1.9: the changed list (a module without it gets `on_tick`).
        let changed_ptr = if module_version.1 >= abi::CHANGED_MINOR && has(abi::CHANGED_EXPORT) {
            Some(ptr(abi::CHANGED_EXPORT)?)
        } else {
            None
        };
        // ABI 1.2: run-time parameters (a module without them takes none).
        let params =
            if module_version.1 >= abi::PARAMS_MINOR && has(abi::SET_PARAM_EXPORT) && has(abi::PARAMS_PTR_EXPORT) {
                let at = ptr(abi::PARAMS_PTR_EXPORT)?;
                let set = instance
                    .get_typed_func(&mut store, abi::SET_PARAM_EXPORT)
                    .map_err(|_| LoadError::MissingExport(abi::SET_PARAM_EXPORT.into()))?;
                Some((at, set))
            } else {
                None
            };
        if max_tenants == 0 || max_tenants > abi::MAX_TENANTS {
            return Err(LoadError::BadBuffer {
                what: "stats/plans",
                detail: format!("perf_max_tenants is {max_tenants}, not 1..={}", abi::MAX_TENANTS),
            });
        }
        let mem_len = memory.data_size(&store);
        for (what, p, len) in [
            ("stats", stats_ptr, max_tenants * abi::STATS_SIZE),
            ("plans", plans_ptr, max_tenants * abi::PLAN_SIZE),
            ("request", request_ptr, abi::REQUEST_SLOT_SIZE),
            ("pacing", pacing_ptr.unwrap_or(0), if pacing_ptr.is_some() { max_tenants * abi::PACING_SIZE } else { 0 }),
            ("params", params.as_ref().map_or(0, |p| p.0), if params.is_some() { abi::PARAMS_SIZE } else { 0 }),
            ("control", control_ptr.unwrap_or(0), if control_ptr.is_some() { abi::CONTROL_SIZE } else { 0 }),
            ("loop", loop_ptr.unwrap_or(0), if loop_ptr.is_some() { abi::LOOP_SIZE } else { 0 }),
            ("changed", changed_ptr.unwrap_or(0), if changed_ptr.is_some() { abi::CHANGED_SIZE } else { 0 }),
        ] {
            if p % abi::BUFFER_ALIGN != 0 {
                return Err(LoadError::BadBuffer { what, detail: format!("address {p:#x} is not 8-byte aligned") });
            }
            if !matches!(p.checked_add(len), Some(end) if end <= mem_len) {
                return Err(LoadError::BadBuffer {
                    what,
                    detail: format!("{len} bytes at {p:#x} overrun the {mem_len}-byte memory"),
                });
            }
        }
        if name_len > abi::MAX_NAME_LEN {
            return Err(LoadError::BadName(format!("{name_len} bytes long, at most {} allowed", abi::MAX_NAME_LEN)));
        }
        let name = memory
            .data(&store)
            .get(name_ptr..name_ptr.saturating_add(name_len))
            .ok_or_else(|| LoadError::BadName("outside memory".into()))
            .and_then(|b| std::str::from_utf8(b).map_err(|e| LoadError::BadName(e.to_string())))?
            .to_string();
        let resident = (module_version.1 >= abi::RESIDENT_MINOR).then(|| Box::new(Resident::new(max_tenants)));
        let mut policy = WasmPolicy {
            store,
            memory,
            hooks,
            stats_ptr,
            plans_ptr,
            request_ptr,
            pacing_ptr,
            params,
            control_ptr,
            loop_ptr,
            changed_ptr,
            control: None,
            resident,
            max_tenants,
            name,
            abi_version: module_version,
            limits,
        };
        policy.read_control().map_err(|fault| LoadError::Init { hook: "perf_init", fault })?;
        Ok(policy)
    }

    /// Reads the control block (ABI 1.5) after a call that rewrites it; a
    /// module without one has nothing to read.
    fn read_control(&mut self) -> Result<(), Fault> {
        let Some(at) = self.control_ptr else { return Ok(()) };
        let b = self
            .memory
            .data(&self.store)
            .get(at..at.saturating_add(abi::CONTROL_SIZE))
            .ok_or_else(|| Fault::new(FaultKind::Marshal, "control block outside memory"))?;
        let mut block = [0u8; abi::CONTROL_SIZE];
        block.copy_from_slice(b);
        if self.abi_version().1 < abi::ZERO_WEIGHT_OP_MINOR {
            // The word was reserved before ABI 1.6: a WAIT whatever it holds.
            block[offset_of!(abi::Control, zero_weight_op)..].fill(0);
        }
        let c = abi::decode_control(&block)
            .map_err(|e| Fault::new(FaultKind::InvalidDecision, format!("control block: {e:?}")))?;
        if self.abi_version().1 < abi::CARRY_MINOR && matches!(c.request_calls, RequestCalls::PlanWithCarry { .. }) {
            // Not a declaration before ABI 1.8, as a 1.7 host read it.
            let w = c.request_calls.to_word();
            let e = abi::ControlError::BadRequestCalls(w);
            return Err(Fault::new(FaultKind::InvalidDecision, format!("control block: {e:?}")));
        }
        self.control = Some(c);
        Ok(())
    }

    /// Which requests the module wants `perf_on_request` for, as its
    /// control block (ABI 1.5) last said; [`RequestCalls::Every`] for a
    /// module without one.
    pub fn request_calls(&self) -> RequestCalls {
        self.control.map_or(RequestCalls::Every, |c| c.request_calls)
    }

    /// Which WQE the module's zero-weight WRs are, as its control block
    /// last said (ABI 1.6; a WAIT before, and without a control block).
    pub fn zero_weight_op(&self) -> ZeroWeightOp {
        self.control.map_or(ZeroWeightOp::Wait, |c| c.zero_weight_op)
    }

    /// The tick interval the control block (ABI 1.5) last gave, in ns
    /// (after the load, a parameter or a tick); `None` for a module
    /// without one (ask by a call: [`WasmPolicy::tick_interval_ns`]).
    pub fn declared_tick_interval_ns(&self) -> Option<u64> {
        self.control.map(|c| c.tick_interval_ns)
    }

    /// Whether the module's stats and plans tables are resident (ABI 1.5):
    /// a tick carries only the records that changed.
    pub fn resident(&self) -> bool {
        self.resident.is_some()
    }

    /// What the last tick of a module with resident tables moved across
    /// the sandbox (`None` before ABI 1.5).
    pub fn resident_counts(&self) -> Option<ResidentCounts> {
        self.resident.as_ref().map(|r| r.last)
    }

    /// Loads a module from a file (see [`WasmPolicy::from_bytes`] and
    /// [`read_module_file`]).
    pub fn from_file(path: &std::path::Path, limits: WasmLimits) -> Result<Self, LoadError> {
        let bytes = read_module_file(path, limits.max_module_bytes)?;
        Self::from_bytes(&bytes, limits)
    }

    /// Checks imports and exports against the ABI, before instantiation.
    fn validate(module: &Module) -> Result<(), LoadError> {
        for imp in module.imports() {
            let (m, n) = (imp.module(), imp.name());
            let sig: (&[AbiType], &[AbiType]) = match (m, n) {
                (abi::IMPORT_MODULE, abi::IMPORT_NOW_NS) => (&[], &[AbiType::I64]),
                (abi::IMPORT_MODULE, abi::IMPORT_LOG) => (&[AbiType::I32, AbiType::I32], &[]),
                _ => return Err(LoadError::UnknownImport { module: m.into(), name: n.into() }),
            };
            check_func(&format!("{m}.{n}"), &imp.ty(), sig.0, sig.1)?;
        }
        for (name, params, results) in abi::REQUIRED_EXPORTS {
            let ty = module.get_export(name).ok_or_else(|| LoadError::MissingExport((*name).into()))?;
            check_func(name, &ty, params, results)?;
        }
        if let Some(ty) = module.get_export(abi::PACING_EXPORT) {
            check_func(abi::PACING_EXPORT, &ty, &[], &[AbiType::I32])?;
        }
        if let Some(ty) = module.get_export(abi::PARAMS_PTR_EXPORT) {
            check_func(abi::PARAMS_PTR_EXPORT, &ty, &[], &[AbiType::I32])?;
        }
        if let Some(ty) = module.get_export(abi::SET_PARAM_EXPORT) {
            check_func(abi::SET_PARAM_EXPORT, &ty, &[AbiType::I32, AbiType::I32], &[AbiType::I32])?;
        }
        for optional in [abi::CONTROL_EXPORT, abi::LOOP_EXPORT, abi::CHANGED_EXPORT] {
            if let Some(ty) = module.get_export(optional) {
                check_func(optional, &ty, &[], &[AbiType::I32])?;
            }
        }
        match module.get_export(abi::MEMORY_EXPORT) {
            Some(ExternType::Memory(_)) => Ok(()),
            Some(_) => Err(LoadError::WrongType {
                name: abi::MEMORY_EXPORT.into(),
                found: "not a memory".into(),
                want: "memory".into(),
            }),
            None => Err(LoadError::MissingExport(abi::MEMORY_EXPORT.into())),
        }
    }

    fn arm(store: &mut Store<HostState>, limits: WasmLimits) {
        Self::arm_for(store, limits, 0)
    }

    /// Arms the bounds of a call that carries `tenants` tenants.
    fn arm_for(store: &mut Store<HostState>, limits: WasmLimits, tenants: usize) {
        match limits.interruption {
            Interruption::Epoch(d) => {
                let tick = EPOCH_TICK.as_nanos().max(1);
                let ticks = d.as_nanos().div_ceil(tick) as u64 + 1;
                store.set_epoch_deadline(ticks);
            }
            Interruption::Fuel(f) => {
                // Only fails on an engine without fuel, which a fuel limit never gets.
                let _ = store.set_fuel(f);
                store.data_mut().armed_fuel = f;
            }
            Interruption::Budget(b) => {
                let tick = EPOCH_TICK.as_nanos().max(1);
                store.set_epoch_deadline(b.backstop.as_nanos().div_ceil(tick).max(1) as u64);
                store.data_mut().backstop_mark = None;
                // As above: a budget always gets an engine with fuel.
                let _ = store.set_fuel(b.fuel_for(tenants));
                store.data_mut().armed_fuel = b.fuel_for(tenants);
            }
        }
    }

    /// The fuel the last call spent (the last hook called, or the last
    /// call made while loading), under a bound that counts fuel; `None`
    /// under [`Interruption::Epoch`]. For sizing [`CallBudget::fuel`].
    pub fn last_call_fuel(&self) -> Option<u64> {
        self.limits.interruption.fuel()?;
        let left = self.store.get_fuel().ok()?;
        Some(self.store.data().armed_fuel.saturating_sub(left))
    }

    fn call0(
        store: &mut Store<HostState>,
        limits: WasmLimits,
        f: &TypedFunc<(), i32>,
        hook: &'static str,
    ) -> Result<i32, LoadError> {
        let limits = match limits.interruption {
            Interruption::Budget(b) => WasmLimits {
                interruption: Interruption::Budget(CallBudget { backstop: b.backstop.max(LOAD_BACKSTOP), ..b }),
                ..limits
            },
            _ => limits,
        };
        Self::arm(store, limits);
        f.call(store, ()).map_err(|e| LoadError::Init { hook, fault: Fault::from_wasm(e) })
    }

    /// The policy's name, as the module reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ABI version the module was built for, `(major, minor)`.
    pub fn abi_version(&self) -> (u16, u16) {
        self.abi_version
    }

    /// The module's log lines (most recent last, at most [`MAX_LOG_LINES`]).
    pub fn log(&self) -> &[String] {
        &self.store.data().log
    }

    /// Most tenants the module's buffers hold.
    pub fn max_tenants(&self) -> usize {
        self.max_tenants
    }

    /// The bounds the module runs under.
    pub fn limits(&self) -> WasmLimits {
        self.limits
    }

    fn write(&mut self, at: usize, f: impl FnOnce(&mut [u8]), len: usize) -> Result<(), Fault> {
        let mem = self.memory.data_mut(&mut self.store);
        let b = mem
            .get_mut(at..at.saturating_add(len))
            .ok_or_else(|| Fault::new(FaultKind::Marshal, format!("buffer at {at:#x} outside memory")))?;
        f(b);
        Ok(())
    }

    /// Encodes `records` one after the other, `size` bytes each, at `at` in
    /// the module's memory.
    fn write_records<T>(
        &mut self,
        at: usize,
        records: &[T],
        size: usize,
        encode: impl Fn(&T, &mut [u8]),
    ) -> Result<(), Fault> {
        let len = records.len() * size;
        self.write(at, |b| records.iter().zip(b.chunks_exact_mut(size)).for_each(|(r, rec)| encode(r, rec)), len)
    }

    /// Writes every byte of the stats, plans and request buffers back in
    /// place, so that the pages are faulted in (by the caller's thread)
    /// before the first call. The contents do not change.
    pub fn prefault(&mut self) {
        let n = self.max_tenants;
        let ranges = [
            (self.stats_ptr, n * abi::STATS_SIZE),
            (self.plans_ptr, n * abi::PLAN_SIZE),
            (self.request_ptr, abi::REQUEST_SLOT_SIZE),
        ];
        let mem = self.memory.data_mut(&mut self.store);
        for (at, len) in ranges {
            if let Some(b) = mem.get_mut(at..at.saturating_add(len)) {
                let copy = b.to_vec();
                b.copy_from_slice(&copy);
            }
        }
    }

    /// Calls `perf_on_tenant`.
    pub fn on_tenant(&mut self, t: &TenantInfo) -> Result<(), Fault> {
        Self::arm(&mut self.store, self.limits);
        self.hooks
            .on_tenant
            .call(&mut self.store, (t.tenant as i32, t.qps as i32, t.weight as i32))
            .map_err(Fault::from_wasm)
    }

    /// Calls `perf_on_request` with `req` and `plan` in the request slot.
    /// The answer is decoded, not validated.
    pub fn on_request(&mut self, req: &RequestInfo, plan: &TenantPlan) -> Result<SplitPlan, Fault> {
        let at = self.request_ptr;
        self.write(
            at,
            |b| {
                abi::encode_request(req, b);
                abi::encode_plan(plan, &mut b[abi::REQUEST_PLAN_OFFSET..]);
            },
            abi::REQUEST_SLOT_SIZE,
        )?;
        Self::arm(&mut self.store, self.limits);
        let v = self.hooks.on_request.call(&mut self.store, ()).map_err(Fault::from_wasm)?;
        Ok(abi::unpack_split(v))
    }

    /// Writes the loop block (ABI 1.7) that the next `perf_on_tick` hands
    /// to `Policy::on_loop`; nothing for a module without one.
    pub fn write_loop(&mut self, info: &LoopInfo) -> Result<(), Fault> {
        let Some(at) = self.loop_ptr else { return Ok(()) };
        let mem = self.memory.data_mut(&mut self.store);
        let b = mem
            .get_mut(at..at.saturating_add(abi::LOOP_SIZE))
            .ok_or_else(|| Fault::new(FaultKind::Marshal, "loop block outside memory"))?;
        abi::encode_loop(info, b);
        Ok(())
    }

    /// Calls `perf_on_tick` with `stats` and the current `plans` in the
    /// buffers and reads the plans back (decoded, not validated).
    pub fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) -> Result<(), Fault> {
        let n = stats.len().min(plans.len());
        if n > self.max_tenants {
            return Err(Fault::new(
                FaultKind::Marshal,
                format!("{n} tenants, the module's buffers hold {}", self.max_tenants),
            ));
        }
        self.store.data_mut().now_ns = now_ns;
        if self.resident.is_some() {
            return self.on_tick_resident(now_ns, &stats[..n], &mut plans[..n]);
        }
        let (sp, pp) = (self.stats_ptr, self.plans_ptr);
        self.write_records(sp, &stats[..n], abi::STATS_SIZE, abi::encode_stats)?;
        self.write_records(pp, &plans[..n], abi::PLAN_SIZE, abi::encode_plan)?;
        Self::arm_for(&mut self.store, self.limits, n);
        let rc = self.hooks.on_tick.call(&mut self.store, (now_ns as i64, n as i32)).map_err(Fault::from_wasm)?;
        if rc != 0 {
            return Err(Fault::new(FaultKind::InvalidDecision, format!("perf_on_tick returned {rc}, not 0")));
        }
        let mem = self.memory.data(&self.store);
        let b = mem
            .get(pp..pp + n * abi::PLAN_SIZE)
            .ok_or_else(|| Fault::new(FaultKind::Marshal, "plans buffer outside memory"))?;
        for (i, (p, rec)) in plans[..n].iter_mut().zip(b.chunks_exact(abi::PLAN_SIZE)).enumerate() {
            *p = abi::decode_plan(rec)
                .map_err(|e| Fault::new(FaultKind::InvalidDecision, format!("plan of tenant {i}: {e:?}")))?;
        }
        self.read_control()
    }

    /// `on_tick` over resident tables (ABI 1.5): writes the stats records
    /// and plans that differ from what the tables hold, calls, and decodes
    /// the plans whose bytes the call changed. Every plan handed back is
    /// one the host wrote or decoded; what the module left in its tables
    /// is checked against the host's copy byte for byte, so a module that
    /// scribbles over them outside a tick only makes its next plans, which
    /// are decoded and validated like any others.
    fn on_tick_resident(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) -> Result<(), Fault> {
        let n = stats.len().min(plans.len());
        let (sp, pp) = (self.stats_ptr, self.plans_ptr);
        let outside = |what: &str| Fault::new(FaultKind::Marshal, format!("{what} buffer outside memory"));
        let Some(r) = self.resident.as_deref_mut() else { return Ok(()) };
        let mut counts = ResidentCounts::default();
        let mem = self.memory.data_mut(&mut self.store);
        let b = mem.get_mut(sp..sp.saturating_add(n * abi::STATS_SIZE)).ok_or_else(|| outside("stats"))?;
        let (recs, _) = b.as_chunks_mut::<{ abi::STATS_SIZE }>();
        r.changed.clear();
        for (i, (s, rec)) in stats.iter().zip(recs).enumerate() {
            let key = stats_key(s);
            if i >= r.stats_known || keys_differ(&r.stats[i], &key) {
                abi::encode_stats(s, rec);
                r.stats[i] = key;
                counts.stats_written += 1;
                r.changed.push(i as u32);
            }
        }
        let stats_changed = r.changed.len();
        r.stats_known = r.stats_known.max(n);
        let b = mem.get_mut(pp..pp.saturating_add(n * abi::PLAN_SIZE)).ok_or_else(|| outside("plans"))?;
        let (recs, _) = b.as_chunks_mut::<{ abi::PLAN_SIZE }>();
        for (i, (p, rec)) in plans.iter().zip(recs).enumerate() {
            if i >= r.plans_known || plans_differ(&r.plans[i], p) {
                abi::encode_plan(p, &mut r.plan_bytes[i]);
                *rec = r.plan_bytes[i];
                r.plans[i] = *p;
                counts.plans_written += 1;
                r.changed.push(i as u32);
            }
        }
        r.plans_known = r.plans_known.max(n);
        if let Some(at) = self.changed_ptr {
            // ABI 1.9: both lists were in increasing order.
            if r.changed.len() > stats_changed {
                r.changed.sort_unstable();
                r.changed.dedup();
            }
            let b = mem.get_mut(at..at.saturating_add(abi::CHANGED_SIZE)).ok_or_else(|| outside("changed"))?;
            let (words, _) = b.as_chunks_mut::<4>();
            words[0] = (r.changed.len() as u32).to_le_bytes();
            for (w, i) in words[1..].iter_mut().zip(&r.changed) {
                *w = i.to_le_bytes();
            }
        }
        Self::arm_for(&mut self.store, self.limits, n);
        let rc = self.hooks.on_tick.call(&mut self.store, (now_ns as i64, n as i32)).map_err(Fault::from_wasm)?;
        if rc != 0 {
            return Err(Fault::new(FaultKind::InvalidDecision, format!("perf_on_tick returned {rc}, not 0")));
        }
        let b = self.memory.data(&self.store).get(pp..pp + n * abi::PLAN_SIZE).ok_or_else(|| outside("plans"))?;
        let (recs, _) = b.as_chunks::<{ abi::PLAN_SIZE }>();
        r.decoded_plans.clear();
        for (i, (rec, known)) in recs.iter().zip(r.plan_bytes.iter_mut()).enumerate() {
            if differ(rec, known) {
                r.decoded_plans.push(i as u32);
                r.plans[i] = abi::decode_plan(rec)
                    .map_err(|e| Fault::new(FaultKind::InvalidDecision, format!("plan of tenant {i}: {e:?}")))?;
                *known = *rec;
                counts.plans_decoded += 1;
            }
        }
        plans[..n].copy_from_slice(&r.plans[..n]);
        r.last = counts;
        self.read_control()
    }

    /// The plans the last [`WasmPolicy::on_tick`] decoded, by tenant (`None`:
    /// every plan, a module before ABI 1.5); the others it handed back are
    /// the host's own.
    pub fn new_plans(&self) -> Option<&[u32]> {
        self.resident.as_deref().map(|r| r.decoded_plans.as_slice())
    }

    /// The pacing records the last [`WasmPolicy::read_pacing`] decoded, as
    /// [`WasmPolicy::new_plans`].
    pub fn new_pacing(&self) -> Option<&[u32]> {
        self.resident.as_deref().map(|r| r.decoded_pacing.as_slice())
    }

    /// Whether the module exports a pacing buffer (ABI 1.1).
    pub fn paces(&self) -> bool {
        self.pacing_ptr.is_some()
    }

    /// Reads the first `out.len()` pacing records the last `perf_on_tick`
    /// left (decoded, not validated); leaves `out` alone for a module
    /// without a pacing buffer.
    pub fn read_pacing(&mut self, out: &mut [Pacing]) -> Result<(), Fault> {
        let Some(at) = self.pacing_ptr else { return Ok(()) };
        let n = out.len().min(self.max_tenants);
        if let Some(r) = self.resident.as_deref_mut() {
            // ABI 1.5: decode only the records whose bytes changed.
            let b = self
                .memory
                .data(&self.store)
                .get(at..at.saturating_add(n * abi::PACING_SIZE))
                .ok_or_else(|| Fault::new(FaultKind::Marshal, "pacing buffer outside memory"))?;
            let (recs, _) = b.as_chunks::<{ abi::PACING_SIZE }>();
            r.decoded_pacing.clear();
            for (i, (rec, known)) in recs.iter().zip(r.pacing_bytes.iter_mut()).enumerate() {
                if i >= r.pacing_known || differ(rec, known) {
                    r.decoded_pacing.push(i as u32);
                    r.pacing[i] = abi::decode_pacing(rec)
                        .map_err(|e| Fault::new(FaultKind::InvalidDecision, format!("pacing of tenant {i}: {e:?}")))?;
                    *known = *rec;
                }
            }
            r.pacing_known = r.pacing_known.max(n);
            out[..n].copy_from_slice(&r.pacing[..n]);
            return Ok(());
        }
        let b = self
            .memory
            .data(&self.store)
            .get(at..at + n * abi::PACING_SIZE)
            .ok_or_else(|| Fault::new(FaultKind::Marshal, "pacing buffer outside memory"))?;
        for (i, (p, rec)) in out[..n].iter_mut().zip(b.chunks_exact(abi::PACING_SIZE)).enumerate() {
            *p = abi::decode_pacing(rec)
                .map_err(|e| Fault::new(FaultKind::InvalidDecision, format!("pacing of tenant {i}: {e:?}")))?;
        }
        Ok(())
    }

    /// Whether the module takes run-time parameters (ABI 1.2).
    pub fn takes_params(&self) -> bool {
        self.params.is_some()
    }

    /// Sets a run-time parameter through `perf_set_param` (ABI 1.2): `Ok`
    /// with the module's answer (`None`: accepted), or the fault of a call
    /// that trapped or ran out of time. A module without the exports
    /// refuses every key ([`ParamError::UnknownKey`]); a key and value
    /// longer than the params buffer together are
    /// [`ParamError::Malformed`] without a call.
    pub fn set_param(&mut self, key: &str, value: &str) -> Result<Option<ParamError>, Fault> {
        let Some((at, set)) = self.params.clone() else { return Ok(Some(ParamError::UnknownKey)) };
        let (k, v) = (key.len(), value.len());
        if k + v > abi::PARAMS_SIZE {
            return Ok(Some(ParamError::Malformed));
        }
        self.write(
            at,
            |b| {
                b[..k].copy_from_slice(key.as_bytes());
                b[k..k + v].copy_from_slice(value.as_bytes());
            },
            k + v,
        )?;
        Self::arm(&mut self.store, self.limits);
        let rc = set.call(&mut self.store, (k as i32, v as i32)).map_err(Fault::from_wasm)?;
        self.read_control()?;
        Ok(ParamError::from_u32(rc as u32))
    }

    /// Calls `perf_tick_interval_ns`.
    pub fn tick_interval_ns(&mut self) -> Result<u64, Fault> {
        Self::arm(&mut self.store, self.limits);
        let v = self.hooks.tick_interval_ns.call(&mut self.store, ()).map_err(Fault::from_wasm)?;
        if v <= 0 {
            return Err(Fault::new(FaultKind::InvalidDecision, format!("tick interval {v} ns")));
        }
        Ok(v as u64)
    }
}

/// The registry's policies (`super::registry`), built to wasm by the
/// dataplane's build script and embedded in the library.
pub mod embedded {
    /// Names of the embedded modules, in the registry's order.
    pub const NAMES: &[&str] = super::super::registry::NAMES;

    /// The embedded module called `name`; `None` if unknown or if the
    /// build left the modules out (`PERF_NO_WASM_POLICIES=1`).
    pub fn by_name(name: &str) -> Option<&'static [u8]> {
        super::super::registry::by_name(name)?.wasm()
    }
}

/// The hostile test policies of `policies/adversarial`, which the build
/// script writes to disk (never embedded).
pub mod adversarial {
    use std::path::PathBuf;

    /// Where the build script put them.
    pub const DIR: &str = env!("PERF_ADVERSARIAL_DIR");

    /// The module of behaviour `name` (`loop_tick`, `starve`, ...).
    pub fn path(name: &str) -> PathBuf {
        PathBuf::from(DIR).join(format!("{name}.wasm"))
    }
}

#[allow(dead_code, reason = "a compile-time check that a WasmPolicy can move to the loader thread")]
fn _assert_send(p: WasmPolicy) -> impl Send {
    p
}
