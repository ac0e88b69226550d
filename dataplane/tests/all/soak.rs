//! Soak (issue 9's acceptance): mixed traffic through the dataplane for a
//! long stretch of virtual time, with a policy swap at a fixed period that
//! alternates good policies (the built-in ones and the embedded wasm
//! modules) and hostile modules (every one of `common::hostile::ALL` in
//! turn), and benign NIC faults at a fixed period. It ends with every
//! request accounted for: each completed exactly once, in per-QP order,
//! successfully (the faults are all within RC's recovery), with its byte
//! count, and with its data at the other end (a stamp unique to the
//! request at its first and last 8 bytes, compared there); the loop's
//! counters agree. Each slot between two swaps is judged: a good policy is
//! accepted and still runs at the end of its slot; a hostile one is
//! refused, dropped for the fallback with the expected fault, or, for the
//! modules whose decisions are valid (`starve`, `zero_weight_max`), kept
//! or reclaimed by the watchdog, as [`hostile::ALL`] says.
//!
//! - CI runs `soak_short` (205 ms of virtual time, a swap every 5 ms: every
//!   hostile module once).
//! - `soak_long` is `#[ignore]`d: `PERF_SOAK_SECONDS=600 cargo test
//!   --release -p perf-dataplane --test all -- soak:: --ignored --nocapture`
//!   runs the ten simulated minutes (default 60 s), a swap every
//!   simulated second, every hostile module but `zero_weight_max` (see
//!   `soak_long`; `PERF_SOAK_HOSTILE=a,b,...` picks them). docs/security.md
//!   quotes its summary.
//!
//! Both print a summary with the offered load of each traffic source and
//! what it got, and the simulated seconds per wall second.

use crate::common;

use std::time::Instant;

use common::hostile::{self, Hostile, Want};
use common::*;
use hdrhistogram::Histogram;
use perf_dataplane::engine::{DataplaneConfig, PostRefused, SwapOutcome};
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{CallBudget, FaultKind, Interruption, WasmLimits};
use perf_dataplane::policy::ExitInfo;
use perf_dataplane::rnic::sim::Fault;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// How a source's requests arrive.
#[derive(Debug, Clone, Copy)]
enum Arrival {
    /// Closed loop: `window` requests outstanding; the next one is posted
    /// `think_ns` after a completion (a ping-pong with `window` 1).
    Closed { window: usize, think_ns: u64 },
    /// Open loop: Poisson arrivals at `per_s`; at most `window` outstanding
    /// (the application's buffers); arrivals beyond wait in the application.
    Open { per_s: f64, window: usize },
}

impl Arrival {
    fn window(self) -> usize {
        match self {
            Arrival::Closed { window, .. } | Arrival::Open { window, .. } => window,
        }
    }
}

/// One traffic source: a tenant's QP and what it posts.
#[derive(Debug, Clone, Copy)]
struct Source {
    name: &'static str,
    tenant: usize,
    qp: u32,
    /// Request `k` carries `sizes[k % sizes.len()]` bytes (at least 16).
    sizes: &'static [u32],
    /// Request `k` is a READ if `k % read_every == read_every - 1`.
    read_every: u64,
    arrival: Arrival,
}

/// The tenants (name, QPs) and their sources, one source per QP.
struct Mix {
    tenants: &'static [(&'static str, u32)],
    sources: &'static [Source],
}

/// The soak's traffic: a bandwidth tenant with large messages at a modest
/// offered rate, a tenant of small messages and mid-sized ones, and a
/// latency tenant with one small request outstanding at a time; the first
/// four sources are open-loop (Poisson arrivals). About 67,000 requests
/// and 2.4 Gb/s a simulated second: light on a 100 Gb/s link, so that ten
/// simulated minutes run in minutes (the NIC model executes every WQE, and
/// the splitting policies post several zero-weight WRs per chunk).
const MIX: Mix = Mix {
    tenants: &[("bulk", 2), ("msg", 2), ("lat", 1)],
    sources: &[
        Source {
            name: "bulk/0 1 MiB WRITE",
            tenant: 0,
            qp: 0,
            sizes: &[1 << 20],
            read_every: 0,
            arrival: Arrival::Open { per_s: 100.0, window: 8 },
        },
        Source {
            name: "bulk/1 256 KiB WRITE+READ",
            tenant: 0,
            qp: 1,
            sizes: &[256 << 10],
            read_every: 3,
            arrival: Arrival::Open { per_s: 400.0, window: 8 },
        },
        Source {
            name: "msg/0 64 B WRITE",
            tenant: 1,
            qp: 0,
            sizes: &[64],
            read_every: 0,
            arrival: Arrival::Open { per_s: 30_000.0, window: 64 },
        },
        Source {
            name: "msg/1 4-64 KiB WRITE+READ",
            tenant: 1,
            qp: 1,
            sizes: &[4 << 10, 16 << 10, 64 << 10],
            read_every: 4,
            arrival: Arrival::Open { per_s: 3_000.0, window: 16 },
        },
        Source {
            name: "lat/0 16 B WRITE+READ",
            tenant: 2,
            qp: 0,
            sizes: &[16],
            read_every: 5,
            arrival: Arrival::Closed { window: 1, think_ns: 30_000 },
        },
    ],
};

/// The good policies, in turn: the built-in ones and the embedded wasm
/// modules.
const GOOD: &[&str] = &[
    "wasm:perf",
    "justitia",
    "wasm:slo",
    "perf",
    "wasm:weighted",
    "passthrough",
    "wasm:justitia",
    "slo",
    "wasm:passthrough",
    "weighted",
    "fairshare",
    "wasm:fairshare",
];

/// What runs in slot `i` (between swap `i` and swap `i + 1`): good policies
/// in the even slots, hostile modules in the odd ones.
#[derive(Clone, Copy)]
enum Module {
    Good(&'static str),
    Hostile(Hostile),
}

impl Module {
    fn of_slot(i: usize, hostile: &[Hostile]) -> Module {
        if i.is_multiple_of(2) {
            Module::Good(GOOD[(i / 2) % GOOD.len()])
        } else {
            Module::Hostile(hostile[(i / 2) % hostile.len()])
        }
    }

    fn spec(self) -> PolicySpec {
        match self {
            Module::Good(n) => PolicySpec::Named(n.into()),
            Module::Hostile(h) => h.spec(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Module::Good(n) => n,
            Module::Hostile(h) => h.label,
        }
    }
}

/// The bounds of the wasm modules: fuel, so that a looping hook is cut
/// after the same work on any machine, however loaded (the soak is
/// deterministic), with a wall-clock backstop for the loop that spends
/// little fuel (`log_loop_tick`, cut either way: its outcome is the same).
/// The backstop is [`SOAK_BACKSTOP`], not the default: the good modules'
/// hooks take microseconds and must never be judged by the wall clock.
/// With the default 250 us, a good module's tick stalled in the kernel on
/// a machine loaded by the rest of the suite (CPU time that spends no
/// fuel) was twice taken for a stuck call. `hostile_policies` and the
/// `call_bound` bench check the default backstop itself.
fn limits() -> WasmLimits {
    hostile::limits(Interruption::Budget(CallBudget {
        fuel: 10_000_000,
        tick_fuel_per_tenant: 0,
        backstop: SOAK_BACKSTOP,
    }))
}

/// The soak's wall-clock backstop (see [`limits`]).
const SOAK_BACKSTOP: std::time::Duration = std::time::Duration::from_millis(20);

/// A soak's settings.
struct Params {
    sim_ns: u64,
    seed: u64,
    swap_every_ns: u64,
    fault_every_ns: u64,
    /// The `n`-th fault injected.
    fault: fn(u64) -> Fault,
    watchdog_ns: u64,
    /// The hostile modules, in turn.
    hostile: Vec<Hostile>,
}

/// A source's state.
struct Flow {
    src: Source,
    /// Offset of its slots in the tenant's region (on both hosts).
    base: u64,
    /// Size of one slot (its largest message).
    slot: u64,
    posted: u64,
    done: u64,
    /// Open: arrivals so far. Closed: unused.
    due: u64,
    /// Open: the next arrival. Closed: the earliest next post.
    next_at: u64,
    rng: ChaCha8Rng,
    /// Post-to-completion latency, ns.
    lat: Histogram<u64>,
    bytes: u64,
}

impl Flow {
    fn size(&self, k: u64) -> u32 {
        self.src.sizes[(k % self.src.sizes.len() as u64) as usize]
    }

    fn read(&self, k: u64) -> bool {
        self.src.read_every > 0 && k % self.src.read_every == self.src.read_every - 1
    }

    fn offset(&self, k: u64) -> u64 {
        self.base + (k % self.src.arrival.window() as u64) * self.slot
    }

    /// An exponential inter-arrival time, ns (at least 1).
    fn interarrival_ns(&mut self, per_s: f64) -> u64 {
        let u = ((self.rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        ((-u.ln() / per_s * 1e9) as u64).max(1)
    }

    /// Whether request `k` may be posted at `now`.
    fn may_post(&mut self, now: u64) -> bool {
        if self.posted - self.done >= self.src.arrival.window() as u64 {
            return false;
        }
        match self.src.arrival {
            Arrival::Closed { .. } => now >= self.next_at,
            Arrival::Open { per_s, .. } => {
                while self.next_at <= now {
                    self.due += 1;
                    self.next_at += self.interarrival_ns(per_s);
                }
                self.posted < self.due
            }
        }
    }

    /// When this flow next wants to post; `None` while it waits for a
    /// completion (its window is full, or its last post met `Full`).
    fn wake_at(&self, now: u64) -> Option<u64> {
        if self.posted - self.done >= self.src.arrival.window() as u64 {
            return None;
        }
        match self.src.arrival {
            Arrival::Closed { .. } => (self.next_at > now).then_some(self.next_at),
            Arrival::Open { .. } => (self.posted >= self.due).then_some(self.next_at),
        }
    }
}

/// The 8-byte stamp of request `id`: unique to it, so stale data never
/// matches.
fn stamp(id: u64, seed: u64) -> [u8; 8] {
    (id ^ seed.rotate_left(17) ^ 0xA5A5_5A5A_0F0F_F0F0).to_le_bytes()
}

/// How each kind of slot ended.
#[derive(Debug, Default)]
struct Verdicts {
    good: u64,
    refused: u64,
    dropped: u64,
    timeouts: u64,
    traps: u64,
    invalid: u64,
    watchdog: u64,
    kept: u64,
}

/// What a soak run did.
#[derive(Debug, Default)]
struct Summary {
    sim_ns: u64,
    wall_s: f64,
    requests: u64,
    bytes: u64,
    refused_full: u64,
    /// Times the driver woke the soak (each a run of the loop until idle).
    wakes: u64,
    swaps: u64,
    verdicts: Verdicts,
    faults: u64,
}

/// The policy swaps of a run and the checks of each slot.
struct Swaps {
    start: u64,
    every: u64,
    /// Swaps to make.
    count: usize,
    scheduled: usize,
    judged: usize,
    /// Fallbacks seen so far (the host's cumulative counter).
    fallbacks: u64,
    /// Exits not yet attributed to a slot.
    exits: Vec<ExitInfo>,
    hostile: Vec<Hostile>,
    v: Verdicts,
}

impl Swaps {
    /// Keeps the next swap scheduled, collects new exits, and judges every
    /// slot that has ended (all of them with `last`).
    fn step(&mut self, r: &mut Rig, last: bool) {
        while self.scheduled < self.count && self.scheduled < r.dp.swaps().len() + 2 {
            let i = self.scheduled;
            let at = self.start + (i as u64 + 1) * self.every;
            r.dp.schedule_swap(at, Module::of_slot(i, &self.hostile).spec(), limits()).expect("schedule a swap");
            self.scheduled += 1;
        }
        let host = r.dp.policy();
        let new = (host.counters.fallbacks - self.fallbacks) as usize;
        assert!(new <= host.exits().len(), "more than {} exits between two looks", perf_dataplane::policy::MAX_EXITS);
        self.exits.extend_from_slice(&host.exits()[host.exits().len() - new..]);
        self.fallbacks = host.counters.fallbacks;
        if let Some(e) = self.exits.iter().find(|e| e.policy != "hostile") {
            panic!("a good policy was dropped: {e:?}");
        }
        let recorded = r.dp.swaps().len();
        while self.judged < recorded && (self.judged + 1 < recorded || last) {
            let i = self.judged;
            let running = match r.dp.swaps().get(i + 1) {
                Some(next) => next.from.clone(),
                None => r.dp.policy().name().to_string(),
            };
            self.judge(i, &r.dp.swaps()[i].outcome, &running);
            self.judged += 1;
        }
    }

    /// Checks slot `i`: how its swap ended, the exits of its policy, and
    /// what runs at its end.
    fn judge(&mut self, i: usize, outcome: &SwapOutcome, running: &str) {
        let m = Module::of_slot(i, &self.hostile);
        let ctx = format!("slot {i} ({}): {outcome:?}, {running} running at its end", m.label());
        let want = match m {
            Module::Good(name) => {
                assert_eq!(outcome, &SwapOutcome::Accepted, "{ctx}");
                assert_eq!(running, name.trim_start_matches("wasm:"), "{ctx}");
                self.v.good += 1;
                return;
            }
            Module::Hostile(h) => h.want,
        };
        // The hostile exits seen so far are this slot's: the slots around it
        // run good policies, which never exit.
        let exits = std::mem::take(&mut self.exits);
        match want {
            Want::Refused(why) => {
                assert!(matches!(outcome, SwapOutcome::Refused(r) if r.contains(why)), "{ctx}: wanted {why:?}");
                assert!(exits.is_empty() && running != "hostile", "{ctx}: {exits:?}");
                self.v.refused += 1;
            }
            Want::Dropped(kind, hook) => {
                assert_eq!(outcome, &SwapOutcome::Accepted, "{ctx}");
                assert_eq!(running, "passthrough", "{ctx}");
                let [e] = exits.as_slice() else { panic!("{ctx}: one exit wanted, got {exits:?}") };
                // On a loaded machine the call budget's wall-clock backstop
                // may stop a module before its trap (a deep recursion
                // descheduled mid-way): contained either way, and
                // `hostile_policies` checks each module's own kind.
                let budget_first = kind == FaultKind::Trap && e.kind == FaultKind::Timeout;
                assert!(e.hook == hook && (e.kind == kind || budget_first), "{ctx}: wanted {kind:?} in {hook}: {e:?}");
                self.v.dropped += 1;
                match e.kind {
                    FaultKind::Timeout => self.v.timeouts += 1,
                    FaultKind::Trap => self.v.traps += 1,
                    FaultKind::InvalidDecision => self.v.invalid += 1,
                    FaultKind::Watchdog => self.v.watchdog += 1,
                    FaultKind::Marshal => panic!("{ctx}: {e:?}"),
                }
            }
            Want::Valid => {
                assert_eq!(outcome, &SwapOutcome::Accepted, "{ctx}");
                match exits.as_slice() {
                    [] => {
                        assert_eq!(running, "hostile", "{ctx}");
                        self.v.kept += 1;
                    }
                    [e] if e.kind == FaultKind::Watchdog => {
                        assert_eq!(running, "passthrough", "{ctx}");
                        self.v.dropped += 1;
                        self.v.watchdog += 1;
                    }
                    _ => panic!("{ctx}: {exits:?}"),
                }
            }
        }
    }
}

/// Runs `p.sim_ns` of [`MIX`] with the swaps and faults of `p`, checks every
/// request, and prints the summary.
fn soak(p: &Params) -> Summary {
    let wall = Instant::now();
    let cfg = DataplaneConfig { request_queue: 256, watchdog_ns: p.watchdog_ns, ..DataplaneConfig::default() };
    let mut rig = Rig::new(p.seed, Pol::Perf, cfg);
    // Each source has `window` slots of its largest message in its tenant's
    // region, at the same offset on both hosts.
    let mut ends = vec![0u64; MIX.tenants.len()];
    let mut flows: Vec<Flow> = MIX
        .sources
        .iter()
        .enumerate()
        .map(|(i, &src)| {
            let slot = *src.sizes.iter().max().expect("sizes") as u64;
            let base = ends[src.tenant];
            ends[src.tenant] += slot * src.arrival.window() as u64;
            Flow {
                src,
                base,
                slot,
                posted: 0,
                done: 0,
                due: 0,
                next_at: 0,
                rng: ChaCha8Rng::seed_from_u64(p.seed ^ (i as u64 + 1)),
                lat: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram"),
                bytes: 0,
            }
        })
        .collect();
    for (t, &(name, qps)) in MIX.tenants.iter().enumerate() {
        let t2 = rig.tenant(name, qps, ends[t] as usize);
        assert_eq!(t, t2);
    }
    let start = rig.now_ns();
    let end = start + p.sim_ns;
    for f in &mut flows {
        f.next_at = start;
    }
    let mut swaps = Swaps {
        start,
        every: p.swap_every_ns,
        // The last swap leaves its policy a whole period before the end.
        count: (p.sim_ns / p.swap_every_ns) as usize - 1,
        scheduled: 0,
        judged: 0,
        fallbacks: 0,
        exits: Vec::new(),
        hostile: p.hostile.clone(),
        v: Verdicts::default(),
    };
    let mut s = Summary::default();
    let mut next_fault = start + p.fault_every_ns;
    rig.f.inject_at(next_fault, (p.fault)(0));
    let mut stopping = false;
    // Driven one simulated second at a time (each drive's wake-ups are bounded).
    let mut chunk_end = start;
    while !(stopping && flows.iter().all(|f| f.done == f.posted)) {
        if chunk_end > start && (chunk_end - start).is_multiple_of(10_000_000_000) {
            let slot = Module::of_slot(swaps.judged, &swaps.hostile).label();
            eprintln!(
                "soak: {} s simulated, {:.1} s wall, slot {} ({slot})",
                (chunk_end - start) / 1_000_000_000,
                wall.elapsed().as_secs_f64(),
                swaps.judged
            );
        }
        chunk_end += 1_000_000_000;
        rig.drive(chunk_end + 2_000_000_000, |r| {
            let now = r.now_ns();
            s.wakes += 1;
            for t in 0..r.tenants.len() {
                for c in std::mem::take(&mut r.tenants[t].got) {
                    let (i, k) = ((c.wr_id >> 48) as usize, c.wr_id & ((1 << 48) - 1));
                    let f = flows.get_mut(i).unwrap_or_else(|| panic!("tenant {t}: unknown completion {c:?}"));
                    assert!(f.src.tenant == t && f.src.qp == c.qp, "tenant {t}: completion of another QP: {c:?}");
                    assert_eq!(k, f.done, "{}: out of order or repeated: {c:?}", f.src.name);
                    let size = f.size(k);
                    assert!(c.status.is_ok() && c.byte_len == size, "{}: {c:?}", f.src.name);
                    let (off, len) = (f.offset(k) as usize, size as usize);
                    let want = stamp(c.wr_id, p.seed);
                    for at in [off, off + len - 8] {
                        let got = if f.read(k) { r.read_local(t, at, 8) } else { r.read_peer(t, at, 8) };
                        assert_eq!(got, want, "{}: request {k}'s data did not arrive at byte {at}", f.src.name);
                    }
                    f.done += 1;
                    f.bytes += size as u64;
                    f.lat.saturating_record(c.completed_ns.saturating_sub(c.posted_ns));
                    if let Arrival::Closed { think_ns, .. } = f.src.arrival {
                        f.next_at = c.completed_ns + think_ns;
                    }
                }
            }
            swaps.step(r, false);
            if now >= next_fault {
                s.faults += 1;
                next_fault += p.fault_every_ns;
                if next_fault < end {
                    r.f.inject_at(next_fault, (p.fault)(s.faults));
                }
            }
            stopping |= now >= end;
            let mut wake = u64::MAX;
            for (i, f) in flows.iter_mut().enumerate() {
                while !stopping && f.may_post(now) {
                    let k = f.posted;
                    let (read, off, size) = (f.read(k), f.offset(k), f.size(k));
                    let id = ((i as u64) << 48) | k;
                    let t = f.src.tenant;
                    let st = stamp(id, p.seed);
                    for at in [off as usize, (off + size as u64) as usize - 8] {
                        if read {
                            r.write_peer(t, at, &st);
                        } else {
                            r.write_local(t, at, &st);
                        }
                    }
                    match r.tenants[t].h.post(r.wr(t, id, f.src.qp, read, off, size)) {
                        Ok(()) => f.posted += 1,
                        Err(PostRefused::Full) => {
                            s.refused_full += 1;
                            break;
                        }
                        Err(e) => panic!("post refused: {e}"),
                    }
                }
                if !stopping {
                    wake = wake.min(f.wake_at(now).unwrap_or(u64::MAX));
                }
            }
            if stopping && flows.iter().all(|f| f.done == f.posted) {
                return None;
            }
            if now >= chunk_end {
                return None;
            }
            if !stopping {
                wake = wake.min(next_fault).min(end);
            }
            Some(wake.min(chunk_end).max(now + 1))
        });
    }
    swaps.step(&mut rig, true);
    // Nothing more may arrive.
    rig.idle_for(1_000_000);
    for (t, tr) in rig.tenants.iter().enumerate() {
        assert!(tr.got.is_empty(), "tenant {t}: completions after the end: {:?}", tr.got);
    }
    assert_eq!(swaps.judged, swaps.count, "every swap was made and judged");
    s.requests = flows.iter().map(|f| f.posted).sum();
    s.bytes = flows.iter().map(|f| f.bytes).sum();
    let c = rig.dp.counters();
    assert_eq!((c.requests, c.completions, c.refused), (s.requests, s.requests, 0), "{c:?}");
    s.sim_ns = rig.now_ns() - start;
    s.wall_s = wall.elapsed().as_secs_f64();
    s.swaps = swaps.judged as u64;
    s.verdicts = swaps.v;
    print_summary(&s, &flows, p, &rig);
    s
}

fn print_summary(s: &Summary, flows: &[Flow], p: &Params, rig: &Rig) {
    let secs = p.sim_ns as f64 / 1e9;
    println!(
        "soak: {:.3} s simulated in {:.1} s wall ({:.2} simulated s per wall s); {} requests, {:.2} GB, \
         each completed once, in per-QP order, with its bytes and data; {} posts refused Full",
        s.sim_ns as f64 / 1e9,
        s.wall_s,
        s.sim_ns as f64 / 1e9 / s.wall_s,
        s.requests,
        s.bytes as f64 / 1e9,
        s.refused_full
    );
    for f in flows {
        let mean = f.src.sizes.iter().map(|&b| b as f64).sum::<f64>() / f.src.sizes.len() as f64;
        let offered = match f.src.arrival {
            Arrival::Open { per_s, window } => {
                format!(
                    "offered {:.0}/s x {:.0} B = {:.2} Gb/s (open loop, <= {window} outstanding)",
                    per_s,
                    mean,
                    per_s * mean * 8e-9
                )
            }
            Arrival::Closed { window, think_ns } => {
                format!("closed loop, {window} outstanding, {:.0} us think time", think_ns as f64 / 1e3)
            }
        };
        println!(
            "  {:<26} {offered}; got {:.0}/s, {:.2} Gb/s; post-to-completion p50 {:.1} us, p99 {:.1} us, max {:.1} us",
            f.src.name,
            f.done as f64 / secs,
            f.bytes as f64 * 8.0 / secs / 1e9,
            f.lat.value_at_quantile(0.5) as f64 / 1e3,
            f.lat.value_at_quantile(0.99) as f64 / 1e3,
            f.lat.max() as f64 / 1e3
        );
    }
    let v = &s.verdicts;
    println!(
        "  {} policy swaps, one every {:.0} ms: {} good (accepted, still running at the end of their slot); \
         {} hostile: {} refused, {} dropped for passthrough ({} timeouts, {} traps, {} invalid decisions, \
         {} watchdog reclaims), {} kept (valid decisions)",
        s.swaps,
        p.swap_every_ns as f64 / 1e6,
        v.good,
        v.refused + v.dropped + v.kept,
        v.refused,
        v.dropped,
        v.timeouts,
        v.traps,
        v.invalid,
        v.watchdog,
        v.kept
    );
    let c = rig.dp.counters();
    println!(
        "  per simulated second: {:.0} wake-ups of the driver, {:.0} loop rounds ({:.0} busy), {:.0} WQEs posted \
         ({:.0} data, {:.0} zero-weight), {:.0} hidden completions",
        s.wakes as f64 / secs,
        c.rounds as f64 / secs,
        c.busy_rounds as f64 / secs,
        c.wqes_posted as f64 / secs,
        c.data_wqes as f64 / secs,
        c.zero_weight_wrs as f64 / secs,
        c.hidden_completions as f64 / secs
    );
    let fc = rig.f.fault_counters();
    println!(
        "  {} NIC faults injected, one every {:.0} ms ({} segments lost, {} answers lost, {} sequence NAKs, \
         {} timeouts, {} duplicates)",
        s.faults,
        p.fault_every_ns as f64 / 1e6,
        fc.segments_lost,
        fc.answers_lost,
        fc.seq_naks,
        fc.timeouts,
        fc.duplicates
    );
}

/// NIC stalls only: no packet is lost, so no QP waits for a retransmission
/// timeout (67 ms) and a 1 ms watchdog sees only what policies do.
fn stall(_: u64) -> Fault {
    Fault::NicStall { host: 0, for_ns: 20_000 }
}

/// Benign faults in turn, each within RC's recovery: a 5 us link flap, 8
/// lost ACKs, a 20 us NIC stall.
fn benign(n: u64) -> Fault {
    match n % 3 {
        0 => Fault::LinkDown { host: 1, for_ns: 5_000 },
        1 => Fault::DropAcks { host: 0, count: 8 },
        _ => Fault::NicStall { host: 0, for_ns: 20_000 },
    }
}

#[test]
fn soak_short() {
    // Every hostile module once: 2 x 20 slots of 5 ms after 5 ms of `perf`.
    let count = 2 * hostile::ALL.len() as u64;
    let p = Params {
        sim_ns: (count + 1) * 5_000_000,
        seed: 0x50A4,
        swap_every_ns: 5_000_000,
        fault_every_ns: 3_000_000,
        fault: stall,
        watchdog_ns: 1_000_000,
        hostile: hostile::ALL.to_vec(),
    };
    let s = soak(&p);
    assert_eq!(s.swaps, count);
    assert_eq!(s.verdicts.refused + s.verdicts.dropped + s.verdicts.kept, hostile::ALL.len() as u64, "{s:?}");
    assert!(s.requests > 10_000, "{s:?}");
}

#[test]
#[ignore = "long: PERF_SOAK_SECONDS of virtual time (default 60)"]
fn soak_long() {
    let secs: u64 = std::env::var("PERF_SOAK_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    // A policy swap every simulated second, a fault every 100 ms; the
    // watchdog's bound above the longest benign stall (a 67 ms
    // retransmission timeout).
    let p = Params {
        sim_ns: secs * 1_000_000_000,
        seed: 0x50A4_0001,
        swap_every_ns: 1_000_000_000,
        fault_every_ns: 100_000_000,
        fault: benign,
        watchdog_ns: 250_000_000,
        hostile: match std::env::var("PERF_SOAK_HOSTILE") {
            Ok(list) => list.split(',').map(hostile::by_label).collect(),
            // `zero_weight_max` is valid, so it runs its whole slot: 257 WQEs
            // per KiB, 31 M a simulated second for the NIC to execute, a minute
            // of wall time per slot. The short soak and hostile_policies.rs
            // run it.
            Err(_) => hostile::ALL.iter().filter(|h| h.label != "zero_weight_max").copied().collect(),
        },
    };
    let s = soak(&p);
    assert_eq!(s.swaps + 1, secs);
}
