//! Policy cost: each hook of the `perf` policy, native vs the same code as
//! a wasm module in the sandbox, under both of the host's interruption
//! mechanisms (epoch deadline, fuel), as ratios measured in one run:
//! `on_tick` over 64 tenants (one scheduling round), `on_request`,
//! `on_tenant`, `tick_interval_ns`; and the round and the per-message hook
//! as the dataplane's loop calls them, through the `PolicyHost` (see
//! `HOOKS`). Then the interruption mechanisms
//! alone (`perf_benches::interrupt`): per-call and per-loop-iteration
//! cost of a trivial module with no bound, an epoch deadline and fuel.
//! And the cold load time of the module (compile + validate + init).
//! Then the fuel each hook of every built-in policy spends per call, at 64
//! and at 4096 tenants (the ABI's most), against the default per-call
//! budget (`CallBudget`, `docs/hostile-policies.md`), and the rate at
//! which the looping hostile module (`loop_tick`) burns fuel, which turns
//! the budget into time.
//!
//! `cargo bench -p perf-benches --bench policy_round`; `PERF_BENCH_QUICK=1`
//! runs 11 runs instead of 201.

use std::time::{Duration, Instant};

use perf_benches::interrupt::{Bound, Spinner};
use perf_benches::results::Recorder;
use perf_dataplane::policy::perf_policy::Perf;
use perf_dataplane::policy::wasm::{
    adversarial, embedded, CallBudget, Interruption, WasmLimits, WasmPolicy, DEFAULT_CALL_FUEL,
    DEFAULT_TICK_FUEL_PER_TENANT,
};
use perf_dataplane::policy::PolicyHost;
use perf_policy_sdk::{Pacing, Policy, RequestInfo, RequestOp, TenantInfo, TenantPlan, TenantStats};

/// 64 tenants: a third bandwidth, a third delay-, a third message-sensitive.
fn stats() -> Vec<TenantStats> {
    perf_benches::loop_cost::tenant_stats(64)
}

/// Runs of each measurement (short ones, of tens of microseconds, so that
/// most escape preemption on a shared machine; the median is reported),
/// the subjects measured in turn within each run, so that a change in the
/// machine's load hits all of them alike.
fn runs() -> usize {
    if perf_benches::quick() {
        11
    } else {
        201
    }
}

/// ns per call of `f` over `n` calls.
fn time(n: u32, mut f: impl FnMut(u32)) -> f64 {
    let t0 = Instant::now();
    for i in 0..n {
        f(i);
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

/// The hooks measured. `on_tick64`, `on_request`, `on_tenant` and
/// `tick_interval` call the policy itself (`Perf`, `WasmPolicy`): the cost
/// of a call (`on_tick64` over 64 tenants whose records all changed). `round64`, `round64_churn`, `request` and `request_call` go
/// through the [`PolicyHost`], as the dataplane's loop calls it: a round is
/// `on_tick` and `on_pacing` over 64 tenants (with the plans' validation),
/// its statistics unchanged from the last tick or every record changed
/// (`_churn`); `request` is a 1 MB WRITE (for `perf`, ABI 1.5, the host
/// answers it from the tenant's plan without a call) and `request_call`
/// a 2 KB one under a plan with zero-weight WRs (shorter than a chunk:
/// `perf` was called for it, for its carry, until ABI 1.8 let the host
/// apply the carry).
const HOOKS: [&str; 8] =
    ["on_tick64", "round64", "round64_churn", "on_request", "request", "request_call", "on_tenant", "tick_interval"];

/// The hooks that are a round over 64 tenants (10 calls per run).
fn is_round(h: usize) -> bool {
    h <= 2
}

/// The `perf` policy itself, native or in the sandbox.
enum Raw {
    Native(Box<Perf>),
    Wasm(Box<WasmPolicy>),
}

/// The `perf` policy, native or in the sandbox: called itself and through
/// a [`PolicyHost`] (another instance), with their plans.
struct Subject {
    raw: Raw,
    host: PolicyHost,
    plans: Vec<TenantPlan>,
    host_plans: Vec<TenantPlan>,
    pacing: Vec<Pacing>,
}

/// What a call is given: the statistics (and their churned copy), and the
/// requests.
struct Inputs {
    stats: Vec<TenantStats>,
    churned: Vec<TenantStats>,
    /// Every tenant, as a changed list.
    every: Vec<u32>,
    big: RequestInfo,
    short: RequestInfo,
}

impl Subject {
    fn native() -> Self {
        Self::of(Raw::Native(Box::default()), PolicyHost::new(Box::<Perf>::default()))
    }

    fn wasm(interruption: Interruption) -> Self {
        let bytes = embedded::by_name("perf").expect("the build script embeds policies/perf as wasm");
        let limits = WasmLimits { interruption, ..WasmLimits::default() };
        let load = || WasmPolicy::from_bytes(bytes, limits).expect("perf.wasm loads");
        Self::of(Raw::Wasm(Box::new(load())), PolicyHost::wasm(load()))
    }

    fn of(raw: Raw, host: PolicyHost) -> Self {
        let n = stats().len();
        Subject {
            raw,
            host,
            plans: vec![TenantPlan::PASSTHROUGH; n],
            host_plans: vec![TenantPlan::PASSTHROUGH; n],
            pacing: vec![Pacing::UNLIMITED; n],
        }
    }

    /// One call of hook `h` (an index into [`HOOKS`]).
    fn call(&mut self, h: usize, i: u32, x: &Inputs) {
        let t = TenantInfo { tenant: i % 64, qps: 4, weight: 1 };
        // The raw tick: every record changed since the last (the policy's
        // decisions for every tenant, ABI 1.9 telling it so natively).
        let (s, plans) = (if i % 2 == 1 { &x.churned } else { &x.stats }, &mut self.plans);
        match h {
            1 | 2 => {
                let s = if h == 2 && i % 2 == 1 { &x.churned } else { &x.stats };
                self.host.on_tick(i as u64, s, &mut self.host_plans);
                self.host.on_pacing(i as u64, &mut self.pacing);
                return;
            }
            4 => {
                std::hint::black_box(self.host.on_request(&x.big, &self.host_plans[0]));
                return;
            }
            5 => {
                std::hint::black_box(self.host.on_request(&x.short, &self.host_plans[0]));
                return;
            }
            _ => {}
        }
        match (&mut self.raw, h) {
            (Raw::Native(p), 0) => p.on_tick_changed(i as u64, s, &x.every, plans),
            (Raw::Native(p), 3) => {
                std::hint::black_box(p.on_request(&x.big, &plans[0]));
            }
            (Raw::Native(p), 6) => p.on_tenant(&t),
            (Raw::Native(p), _) => {
                std::hint::black_box(p.tick_interval_ns());
            }
            (Raw::Wasm(w), 0) => w.on_tick(i as u64, s, plans).expect("on_tick"),
            (Raw::Wasm(w), 3) => {
                std::hint::black_box(w.on_request(&x.big, &plans[0]).expect("on_request"));
            }
            (Raw::Wasm(w), 6) => w.on_tenant(&t).expect("on_tenant"),
            (Raw::Wasm(w), _) => {
                std::hint::black_box(w.tick_interval_ns().expect("tick_interval_ns"));
            }
        }
    }
}

fn main() {
    let runs = runs();
    // Calls per run: about 50 us of wasm calls.
    let calls_of = |h: usize| if is_round(h) { 10 } else { 1_000 };
    let mut rec = Recorder::new("policy_round");
    let s = stats();
    // Every record changed (bytes, which `perf` does not read: the same
    // decisions, every stats record crossing).
    let churned = s.iter().map(|r| TenantStats { bytes: r.bytes + 1, ..*r }).collect();
    let req = |len| RequestInfo { tenant: 0, qp: 0, len, op: RequestOp::Write, depth: 4 };
    let every = (0..s.len() as u32).collect();
    let inputs = Inputs { stats: s, churned, every, big: req(1 << 20), short: req(2048) };

    println!("policy cost, perf policy: median ns per call ({runs} runs of 10 rounds / 1000 other calls, the three measured in turn)");
    let mut subjects = [
        Subject::native(),
        Subject::wasm(Interruption::Epoch(Duration::from_millis(50))),
        Subject::wasm(Interruption::Fuel(u64::MAX / 2)),
    ];
    // The plans the requests are decided under: one round first.
    for sub in &mut subjects {
        sub.call(0, 0, &inputs);
        sub.call(1, 0, &inputs);
    }
    let mut cost = [[0.0f64; HOOKS.len()]; 3];
    for (h, _) in HOOKS.iter().enumerate() {
        let mut samples: [Vec<f64>; 3] = Default::default();
        for _ in 0..runs {
            for (k, sub) in subjects.iter_mut().enumerate() {
                samples[k].push(time(calls_of(h), |i| sub.call(h, i, &inputs)));
            }
        }
        for k in 0..3 {
            cost[k][h] = perf_benches::median(&mut samples[k]);
        }
    }
    for sub in &subjects {
        assert!(sub.host.exit_info().is_none(), "the hosted perf runs throughout");
    }
    let answered = subjects[1].host.counters.plan_answers;
    println!("  (the wasm host answered {answered} requests from the plan, without a call)");
    let [native, epoch, fuel] = cost;
    println!(
        "  {:<14} {:>10} {:>10} {:>10} {:>12} {:>11}",
        "hook", "native", "wasm/epoch", "wasm/fuel", "epoch/native", "fuel/native"
    );
    for (i, hook) in HOOKS.iter().enumerate() {
        let (nat, ep, fu) = (native[i].max(0.1), epoch[i], fuel[i]);
        println!("  {hook:<14} {nat:>10.1} {ep:>10.1} {fu:>10.1} {:>11.2}x {:>10.2}x", ep / nat, fu / nat);
        rec.figure(&format!("policy/{hook}/native_ns"), nat, "ns");
        rec.figure(&format!("policy/{hook}/wasm_epoch_ns"), ep, "ns");
        rec.figure(&format!("policy/{hook}/wasm_fuel_ns"), fu, "ns");
        // Hooks that cost a few native ns give ratios too unstable to guard.
        if nat >= 5.0 || matches!(*hook, "on_request" | "request" | "request_call") {
            rec.ratio(&format!("policy/{hook}/wasm_epoch_over_native"), ep / nat);
            rec.ratio(&format!("policy/{hook}/wasm_fuel_over_native"), fu / nat);
        } else {
            rec.figure(&format!("policy/{hook}/wasm_epoch_over_native"), ep / nat, "x");
            rec.figure(&format!("policy/{hook}/wasm_fuel_over_native"), fu / nat, "x");
        }
    }

    // The mechanisms alone, on a trivial module.
    let iters = 10_000;
    let (calls, spins) = (1_000, 5);
    println!("interruption alone (spin module): per call (spin(0)), per loop iteration (spin({iters}))");
    let bounds = [Bound::None, Bound::Epoch, Bound::Fuel, Bound::Both];
    let mut spinners: Vec<Spinner> =
        bounds.iter().map(|&b| Spinner::new(b).expect("the spin module compiles")).collect();
    let (mut calls_ns, mut iters_ns): ([Vec<f64>; 4], [Vec<f64>; 4]) = Default::default();
    for _ in 0..runs {
        for (k, sp) in spinners.iter_mut().enumerate() {
            calls_ns[k].push(time(calls, |_| {
                std::hint::black_box(sp.call(0).expect("spin"));
            }));
            iters_ns[k].push(
                time(spins, |_| {
                    std::hint::black_box(sp.call(iters).expect("spin"));
                }) / iters as f64,
            );
        }
    }
    let mut per_call = [0.0; 4];
    let mut per_iter = [0.0; 4];
    for (k, b) in bounds.into_iter().enumerate() {
        per_call[k] = perf_benches::median(&mut calls_ns[k]);
        per_iter[k] = perf_benches::median(&mut iters_ns[k]);
        println!("  {:<6} {:>7.1} ns per call, {:>6.3} ns per iteration", b.label(), per_call[k], per_iter[k]);
        rec.figure(&format!("interrupt/{}/ns_per_call", b.label()), per_call[k], "ns");
        rec.figure(&format!("interrupt/{}/ns_per_iteration", b.label()), per_iter[k], "ns");
    }
    for (k, b) in [(1, "epoch"), (2, "fuel"), (3, "both")] {
        println!(
            "  {b}: {:.2}x the unbounded call, {:.2}x the unbounded iteration",
            per_call[k] / per_call[0],
            per_iter[k] / per_iter[0]
        );
        rec.ratio(&format!("interrupt/{b}_over_none_per_call"), per_call[k] / per_call[0]);
        rec.ratio(&format!("interrupt/{b}_over_none_per_iteration"), per_iter[k] / per_iter[0]);
    }

    let bytes = embedded::by_name("perf").expect("the build script embeds policies/perf as wasm");
    let mut loads: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            let _ = WasmPolicy::from_bytes(bytes, WasmLimits::default()).expect("perf.wasm loads");
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let load = perf_benches::median(&mut loads);
    println!("load perf.wasm cold (compile + validate + init, {} B): median {load:.2} ms", bytes.len());
    rec.figure("policy/load_cold_ms", load, "ms");

    fuel_per_hook(&mut rec);
    rec.save();
}

/// The most fuel one call of each hook of every built-in policy spends,
/// over a few rounds of ticks and requests at 64 and 4096 tenants (after
/// `on_tenant` for each), against the default budget ([`CallBudget`]:
/// [`DEFAULT_CALL_FUEL`] per call, [`DEFAULT_TICK_FUEL_PER_TENANT`] more
/// per tenant of a tick); and the time the default budget lasts a looping
/// module.
fn fuel_per_hook(rec: &mut Recorder) {
    let limits = WasmLimits { interruption: Interruption::Fuel(u64::MAX / 2), ..WasmLimits::default() };
    let ticks = if perf_benches::quick() { 3 } else { 20 };
    println!("fuel per call (most over {ticks} ticks and 64 requests per tenant count), default budget {DEFAULT_CALL_FUEL} + {DEFAULT_TICK_FUEL_PER_TENANT} per tenant in on_tick):");
    println!(
        "  {:<12} {:>7} {:>10} {:>10} {:>10} {:>10}",
        "policy", "tenants", "on_tenant", "on_tick", "on_request", "init"
    );
    let budget = CallBudget::default();
    let (mut dearest, mut headroom) = (0u64, f64::INFINITY);
    for name in embedded::NAMES {
        let Some(bytes) = embedded::by_name(name) else { continue };
        for n in [64u32, 4096] {
            let mut w = WasmPolicy::from_bytes(bytes, limits).expect("a built-in module loads");
            let init = w.last_call_fuel().unwrap_or(0);
            let mut most = [0u64; 3];
            for t in 0..n {
                w.on_tenant(&TenantInfo { tenant: t, qps: 1 + t % 4, weight: 1 + t % 3 }).expect("on_tenant");
                most[0] = most[0].max(w.last_call_fuel().unwrap_or(0));
            }
            let s = perf_benches::loop_cost::tenant_stats(n);
            let mut plans = vec![TenantPlan::PASSTHROUGH; s.len()];
            for k in 0..ticks {
                w.on_tick(1_000_000 * (k as u64 + 1), &s, &mut plans).expect("on_tick");
                most[1] = most[1].max(w.last_call_fuel().unwrap_or(0));
                for r in 0..64u32 {
                    let tenant = (r * 7 + k) % n;
                    let req = RequestInfo {
                        tenant,
                        qp: r % 4,
                        len: [16, 4096, 65_536, 1 << 20][(r % 4) as usize],
                        op: if r % 5 == 0 { RequestOp::Read } else { RequestOp::Write },
                        depth: 1 + r % 8,
                    };
                    w.on_request(&req, &plans[tenant as usize]).expect("on_request");
                    most[2] = most[2].max(w.last_call_fuel().unwrap_or(0));
                }
            }
            println!("  {name:<12} {n:>7} {:>10} {:>10} {:>10} {init:>10}", most[0], most[1], most[2]);
            for (hook, v) in ["on_tenant", "on_tick", "on_request"].iter().zip(most) {
                rec.figure(&format!("fuel/{name}/{hook}_{n}_max"), v as f64, "fuel");
            }
            dearest = dearest.max(most.into_iter().max().unwrap_or(0));
            // The budget each hook gets against what it spent (on_tick's grows with the tenants).
            let fuel_of = [budget.fuel_for(0), budget.fuel_for(n as usize), budget.fuel_for(0)];
            for (spent, have) in most.into_iter().zip(fuel_of) {
                headroom = headroom.min(have as f64 / spent.max(1) as f64);
            }
        }
    }
    println!("  dearest call: {dearest} fuel; least headroom of any hook: the budget is {headroom:.1}x what it spent");
    rec.figure("fuel/dearest_hook_call", dearest as f64, "fuel");
    rec.figure("fuel/least_headroom", headroom, "x");

    // The looping module: time to spend a budget, with no other bound.
    let path = adversarial::path("loop_tick");
    let bytes = std::fs::read(&path).expect("the build script writes the adversarial modules");
    let spend = 1_000_000_000u64;
    let lim = WasmLimits { interruption: Interruption::Fuel(spend), ..WasmLimits::default() };
    let mut w = WasmPolicy::from_bytes(&bytes, lim).expect("loop_tick loads");
    let s = perf_benches::loop_cost::tenant_stats(4);
    let mut plans = vec![TenantPlan::PASSTHROUGH; 4];
    let mut rates: Vec<f64> = (0..if perf_benches::quick() { 3 } else { 9 })
        .map(|_| {
            let t0 = Instant::now();
            let r = w.on_tick(0, &s, &mut plans);
            let ns = t0.elapsed().as_nanos() as f64;
            assert!(r.is_err(), "loop_tick runs out of fuel");
            spend as f64 / ns
        })
        .collect();
    let rate = perf_benches::median(&mut rates);
    let (small_us, big_us) = (
        budget.fuel_for(0) as f64 / rate / 1e3,
        budget.fuel_for(perf_policy_sdk::abi::MAX_TENANTS) as f64 / rate / 1e3,
    );
    println!(
        "  loop_tick burns {rate:.2} fuel per ns: the default budget lasts {small_us:.0} us of a loop ({big_us:.0} us in a tick over 4096 tenants)"
    );
    rec.figure("fuel/loop_fuel_per_ns", rate, "fuel/ns");
    rec.figure("fuel/default_budget_loop_us", small_us, "us");
    rec.figure("fuel/default_budget_loop_4096_us", big_us, "us");
}
