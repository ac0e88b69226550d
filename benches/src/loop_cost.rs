//! Measures the dataplane loop's cost model ([`LoopCost`]) on this
//! machine: `perf-runner calibrate-loop` runs it and writes the override
//! file that `--loop-cost FILE` reads.
//!
//! - The loop's own figures (per round, per WQE posted, per CQE polled,
//!   per completion delivered) come from loads over the null RNIC ([`crate::load`], as the `dispatch`
//!   and `scale` benches drive them): the wall time inside `round()` less
//!   the time inside the policy's hooks (the loop's `policy_ns`), fitted by
//!   least squares to the rounds, WQEs, CQEs and completions each load
//!   ran. What the
//!   timing itself adds is taken out: each timed interval (a round, a
//!   policy hook) reads the clock inside it, so an empty interval measured
//!   the same way ([`Calibration::timer_ns`], about 24 ns on a KVM guest's
//!   TSC) is subtracted once per round and once per hook call.
//! - The policy's figures, native and wasm (`perf` and `wasm:perf` through
//!   the [`PolicyHost`] the loop calls): the median time of an
//!   `on_request` (a call), and of an `on_tick` over 64 tenants against one
//!   over 1 tenant (the slope is the cost per tenant record, the rest the
//!   tick's own).

use std::time::{Duration, Instant};

use perf_dataplane::engine::{LoopCost, PolicyCost};
use perf_dataplane::policy::PolicyHost;
use perf_policy_sdk::{RequestInfo, RequestOp, TenantInfo, TenantPlan, TenantStats};

use crate::load::{Load, LoadShape, Sensitive};
use crate::null_rnic::NullRnic;

/// What went wrong in a calibration.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// A policy did not load.
    #[error("policy {name}: {why}")]
    Policy {
        /// The policy.
        name: &'static str,
        /// Why.
        why: String,
    },
    /// The dataplane refused a load's setup or a round failed.
    #[error("load {name}: {source}")]
    Load {
        /// The load.
        name: &'static str,
        /// The dataplane's error.
        source: perf_dataplane::engine::EngineError,
    },
}

/// `n` tenants' statistics: a third bandwidth, a third delay-, a third
/// message-sensitive (the `policy_round` bench's tick over 64 tenants).
pub fn tenant_stats(n: u32) -> Vec<TenantStats> {
    (0..n)
        .map(|i| {
            let (size, depth) = match i % 3 {
                0 => (1u64 << 20, 128),
                1 => (16, 1),
                _ => (16, 128),
            };
            TenantStats {
                tenant: i,
                qps: 1 + i % 4,
                backlogged_qps: 1 + i % 4,
                max_depth: depth,
                ewma_msg_bytes: size as f64,
                max_msg_bytes: size,
                completed: 100,
                bytes: 100 * size,
                mean_latency_ns: 5_000,
                weight: 1,
                p99_latency_ns: 8_000,
            }
        })
        .collect()
}

/// One load of the fit and what it measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadSample {
    /// The load.
    pub name: &'static str,
    /// Rounds run.
    pub rounds: u64,
    /// WQEs posted.
    pub wqes: u64,
    /// Of them, chunks (parts of split messages).
    pub chunks: u64,
    /// Of them, inline.
    pub inline: u64,
    /// CQEs polled.
    pub cqes: u64,
    /// Completions delivered to the tenants.
    pub completions: u64,
    /// Policy hook calls (each timed, so each adds a clock read).
    pub calls: u64,
    /// Wall time inside `round()` less the policy's hooks and the timing's
    /// own cost (one empty interval per round and per hook call), ns.
    pub loop_ns: f64,
    /// What the fitted model gives for the same counts, ns.
    pub fitted_ns: f64,
}

/// The arrival steps of the fit: a tenant of one 16 B WRITE at a time whose
/// every request is taken in by an arrival step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepSample {
    /// Arrival steps run.
    pub steps: u64,
    /// WQEs they posted.
    pub wqes: u64,
    /// Policy hook calls in them.
    pub calls: u64,
    /// Wall time inside the steps less the policy's hooks and the timing's
    /// own cost, ns.
    pub loop_ns: f64,
    /// What one step costs besides its WQEs (the fitted per-WQE cost taken
    /// out), ns: the model's `step_ps`.
    pub step_ns: f64,
}

/// A policy's measured hooks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PolicySample {
    /// The policy (`perf` or `wasm:perf`).
    pub name: &'static str,
    /// ns per `on_request`.
    pub request_ns: f64,
    /// ns per `on_tick` over 1 tenant.
    pub tick1_ns: f64,
    /// ns per `on_tick` over 64 tenants.
    pub tick64_ns: f64,
}

/// A calibration: the model and what it was fitted to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Calibration {
    /// The fitted model.
    pub cost: LoopCost,
    /// What an empty timed interval measures on this machine, ns (taken
    /// out of every load's time once per round and per hook call).
    pub timer_ns: f64,
    /// The loads of the loop's fit.
    pub loads: Vec<LoadSample>,
    /// The arrival steps.
    pub steps: StepSample,
    /// The policies' hooks.
    pub policies: Vec<PolicySample>,
}

/// The loads of the fit: few and many WQEs per round, one CQE per message
/// (passthrough posts each message of 4 KiB and more whole and signaled),
/// one CQE per post list of 16 B messages (perftest's `-s 16 -l 32` over
/// 10 QPs, experiment 4's message-rate tenant), lists of 1 KiB messages
/// (four to a CQE), and chunks (`perf` splits 1 MiB and 256 KiB into
/// 16 KiB chunks, with zero-weight WRs beside a message-rate tenant).
/// Seven loads for the five figures of the fit, so that a model that does
/// not describe the loop shows as a load it misses.
fn shapes() -> [(&'static str, &'static str, LoadShape); 7] {
    let shape = |tenants, qps, depth, msg, sensitive, post_list| LoadShape {
        tenants,
        qps,
        depth,
        msg,
        sensitive,
        sq_depth: None,
        post_list,
    };
    [
        ("passthrough 1x1 depth 1", "passthrough", shape(1, 1, 1, 16, Sensitive::None, 1)),
        ("passthrough 8x4 depth 16", "passthrough", shape(8, 4, 16, 65536, Sensitive::None, 1)),
        ("passthrough 1x10 16B list 32", "passthrough", shape(1, 10, 128, 16, Sensitive::None, 32)),
        ("perf 1x1 depth 2 1MiB", "perf", shape(1, 1, 2, 1 << 20, Sensitive::None, 1)),
        ("perf 8x4 depth 2 1MiB +M", "perf", shape(8, 4, 2, 1 << 20, Sensitive::Message, 1)),
        ("passthrough 4x4 1KiB list 8", "passthrough", shape(4, 4, 32, 1024, Sensitive::None, 8)),
        ("perf 2x2 depth 4 256KiB", "perf", shape(2, 2, 4, 256 << 10, Sensitive::None, 1)),
    ]
}

/// Runs one load for `budget` (after a tenth of it as warm-up).
fn run_load(
    name: &'static str,
    policy: &'static str,
    shape: LoadShape,
    budget: Duration,
    timer_ns: f64,
) -> Result<LoadSample, CalibrateError> {
    let load_err = |source: perf_dataplane::engine::EngineError| CalibrateError::Load { name, source };
    let mut load = timed_load(name, policy, shape)?;
    load.drive(Duration::ZERO, budget / 10).map_err(|e| load_err(e.into()))?;
    let (c0, calls0) = (load.dp.counters(), load.dp.policy().counters.calls);
    let s = load.drive(Duration::ZERO, budget).map_err(|e| load_err(e.into()))?;
    let (c1, calls1) = (load.dp.counters(), load.dp.policy().counters.calls);
    let policy_ns = (c1.policy_ns - c0.policy_ns) as f64;
    let calls = calls1 - calls0;
    let timing_ns = timer_ns * (s.rounds + calls) as f64;
    Ok(LoadSample {
        name,
        rounds: s.rounds,
        wqes: c1.wqes_posted - c0.wqes_posted,
        chunks: c1.chunks - c0.chunks,
        inline: c1.inline_wqes - c0.inline_wqes,
        cqes: c1.cqes_polled - c0.cqes_polled,
        completions: c1.completions - c0.completions,
        calls,
        loop_ns: (s.in_round.as_nanos() as f64 - policy_ns - timing_ns).max(0.0),
        fitted_ns: 0.0,
    })
}

/// Load `name`: `shape` under `policy` over the null RNIC, its rounds and
/// hooks timed.
fn timed_load(name: &'static str, policy: &'static str, shape: LoadShape) -> Result<Load<NullRnic>, CalibrateError> {
    let host = PolicyHost::load(policy).map_err(|e| CalibrateError::Policy { name: policy, why: e.to_string() })?;
    let mut load = Load::new(NullRnic::new(), host, shape).map_err(|source| CalibrateError::Load { name, source })?;
    load.dp.set_timed(true);
    Ok(load)
}

/// Times arrival steps for `budget` (after a tenth of it as warm-up):
/// each takes in one request of a tenant of one 16 B WRITE at a time, as a
/// ping-pong's request comes to a busy loop. `wqe_ns` is the fitted cost
/// of a WQE, taken out of the steps' time with the policy's hooks and the
/// timing's own cost.
fn step_sample(budget: Duration, timer_ns: f64, wqe_ns: f64) -> Result<StepSample, CalibrateError> {
    let name = "passthrough 1x1 depth 1, arrival steps";
    let load_err = |source: perf_dataplane::engine::EngineError| CalibrateError::Load { name, source };
    let shape =
        LoadShape { tenants: 1, qps: 1, depth: 1, msg: 16, sensitive: Sensitive::None, sq_depth: None, post_list: 1 };
    let mut load = timed_load(name, "passthrough", shape)?;
    let warm = Instant::now();
    while warm.elapsed() < budget / 10 {
        load.arrival_step().map_err(|e| load_err(e.into()))?;
    }
    let mut steps = 0u64;
    let mut in_steps = Duration::ZERO;
    let mut wqes = 0u64;
    let mut calls = 0u64;
    let mut policy_ns = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < budget {
        let (c0, calls0) = (load.dp.counters(), load.dp.policy().counters.calls);
        in_steps += load.arrival_step().map_err(|e| load_err(e.into()))?;
        // The round after the step posts nothing (the tenant's one request
        // is in flight): what posted, posted in the step.
        let (c1, calls1) = (load.dp.counters(), load.dp.policy().counters.calls);
        wqes += c1.wqes_posted - c0.wqes_posted;
        calls += calls1 - calls0;
        policy_ns += c1.policy_ns - c0.policy_ns;
        steps += 1;
    }
    let timing_ns = timer_ns * (steps + calls) as f64;
    let loop_ns = (in_steps.as_nanos() as f64 - policy_ns as f64 - timing_ns).max(0.0);
    let step_ns = ((loop_ns - wqe_ns * wqes as f64) / steps.max(1) as f64).max(0.0);
    Ok(StepSample { steps, wqes, calls, loop_ns, step_ns })
}

/// Least squares of `y ~ a x` over rows of `N` regressors, with each
/// coefficient at least 0 (a negative one is fixed at 0 and the rest
/// refitted).
fn fit<const N: usize>(rows: &[([f64; N], f64)]) -> [f64; N] {
    let mut free = [true; N];
    loop {
        let idx: Vec<usize> = (0..N).filter(|&k| free[k]).collect();
        let n = idx.len();
        // Normal equations over the free columns, rows scaled by 1 / y so
        // that every load weighs alike (a relative fit).
        let mut m = vec![vec![0.0; n + 1]; n];
        for (x, y) in rows {
            let w = 1.0 / y.max(1.0);
            for (i, &ki) in idx.iter().enumerate() {
                for (j, &kj) in idx.iter().enumerate() {
                    m[i][j] += x[ki] * w * x[kj] * w;
                }
                m[i][n] += x[ki] * w * y * w;
            }
        }
        let sol = solve(m);
        let mut a = [0.0; N];
        for (i, &k) in idx.iter().enumerate() {
            a[k] = sol[i];
        }
        match (0..N).find(|&k| free[k] && a[k] < 0.0) {
            Some(k) => free[k] = false,
            None => return a,
        }
    }
}

/// Gaussian elimination with partial pivoting of an augmented matrix
/// (a singular column gives 0).
fn solve(mut m: Vec<Vec<f64>>) -> Vec<f64> {
    let n = m.len();
    for c in 0..n {
        let p = (c..n).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs())).unwrap_or(c);
        m.swap(c, p);
        if m[c][c].abs() < 1e-30 {
            continue;
        }
        let pivot = m[c].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row.iter_mut().zip(&pivot).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    (0..n).map(|i| if m[i][i].abs() < 1e-30 { 0.0 } else { m[i][n] / m[i][i] }).collect()
}

/// What an empty interval timed as the loads time a round measures, ns:
/// the median of `runs` runs of 100,000 intervals.
fn empty_interval_ns(runs: usize) -> f64 {
    const N: u32 = 100_000;
    let mut v: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let mut sum = Duration::ZERO;
            for _ in 0..N {
                let t = std::hint::black_box(Instant::now());
                sum += t.elapsed();
            }
            sum.as_nanos() as f64 / N as f64
        })
        .collect();
    crate::median(&mut v)
}

/// ns per call of `f`: the median of `runs` runs of `n` calls each.
fn time_calls(runs: usize, n: u32, mut f: impl FnMut(u32)) -> f64 {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            for i in 0..n {
                f(i);
            }
            t0.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    crate::median(&mut v)
}

/// Times `policy`'s hooks through the host.
fn policy_sample(name: &'static str, runs: usize) -> Result<PolicySample, CalibrateError> {
    let mut host = PolicyHost::load(name).map_err(|e| CalibrateError::Policy { name, why: e.to_string() })?;
    for t in 0..64 {
        host.on_tenant(&TenantInfo { tenant: t, qps: 4, weight: 1 });
    }
    let (s64, s1) = (tenant_stats(64), tenant_stats(1));
    let mut plans = vec![TenantPlan::PASSTHROUGH; 64];
    let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 4 };
    let mut now = 0u64;
    let mut tick = |host: &mut PolicyHost, stats: &[TenantStats], plans: &mut [TenantPlan]| {
        now += 1_000_000;
        host.on_tick(now, stats, plans);
    };
    // Warm-up: caches, the module's first calls.
    for _ in 0..50 {
        tick(&mut host, &s64, &mut plans);
    }
    let tick64 = time_calls(runs, 10, |_| tick(&mut host, &s64, &mut plans));
    let tick1 = time_calls(runs, 10, |_| tick(&mut host, &s1, &mut plans[..1]));
    let plan = plans[0];
    let request_ns = time_calls(runs, 1000, |_| {
        std::hint::black_box(host.on_request(&req, &plan));
    });
    Ok(PolicySample { name, request_ns, tick1_ns: tick1, tick64_ns: tick64 })
}

/// ns to ps, rounded, at least 0.
fn ps(ns: f64) -> u64 {
    (ns.max(0.0) * 1000.0).round() as u64
}

/// The policy's model from its sample: a call costs what `on_request`
/// costs; a tenant record in a tick, the slope from 1 to 64 tenants; a
/// tick, what a tick over 1 tenant costs beyond its record.
fn policy_cost(s: &PolicySample) -> PolicyCost {
    let per_tenant = ((s.tick64_ns - s.tick1_ns) / 63.0).max(0.0);
    PolicyCost { call_ps: ps(s.request_ns), tick_ps: ps(s.tick1_ns - per_tenant), tick_tenant_ps: ps(per_tenant) }
}

/// Measures the model on this machine: each load for `budget`, each
/// policy hook `runs` times (the median).
pub fn calibrate(budget: Duration, runs: usize) -> Result<Calibration, CalibrateError> {
    let timer_ns = empty_interval_ns(runs);
    let mut loads = Vec::new();
    for (name, policy, shape) in shapes() {
        loads.push(run_load(name, policy, shape, budget, timer_ns)?);
    }
    let x = |l: &LoadSample| {
        [l.rounds as f64, l.wqes as f64, l.chunks as f64, l.inline as f64, l.cqes as f64, l.completions as f64]
    };
    let rows: Vec<([f64; 6], f64)> = loads.iter().map(|l| (x(l), l.loop_ns)).collect();
    let a = fit(&rows);
    for l in &mut loads {
        l.fitted_ns = x(l).iter().zip(a).map(|(x, a)| x * a).sum();
    }
    let [round, wqe, chunk, inline, cqe, completion] = a;
    let steps = step_sample(budget, timer_ns, wqe)?;
    let policies = vec![policy_sample("perf", runs)?, policy_sample("wasm:perf", runs)?];
    let cost = LoopCost {
        round_ps: ps(round),
        step_ps: ps(steps.step_ns),
        wqe_ps: ps(wqe),
        chunk_ps: ps(chunk),
        inline_ps: ps(inline),
        cqe_ps: ps(cqe),
        completion_ps: ps(completion),
        native: policy_cost(&policies[0]),
        wasm: policy_cost(&policies[1]),
    };
    Ok(Calibration { cost, timer_ns, loads, steps, policies })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_known_model_and_keeps_coefficients_non_negative() {
        let truth = [50.0, 20.0, 70.0, 10.0];
        let xs = [
            [100.0, 100.0, 100.0, 100.0],
            [100.0, 4000.0, 4000.0, 4000.0],
            [100.0, 3200.0, 100.0, 3200.0],
            [100.0, 6400.0, 200.0, 10.0],
            [1000.0, 9000.0, 300.0, 500.0],
        ];
        let rows: Vec<([f64; 4], f64)> =
            xs.iter().map(|x| (*x, x.iter().zip(truth).map(|(a, b)| a * b).sum())).collect();
        let a = fit(&rows);
        for (got, want) in a.iter().zip(truth) {
            assert!((got - want).abs() < 1e-6, "{a:?}");
        }
        // A load that costs less than its rounds alone would: no negative figure.
        let rows = [([1.0, 0.0, 0.0], 100.0), ([1.0, 10.0, 0.0], 50.0), ([0.0, 0.0, 1.0], 10.0)];
        assert!(fit(&rows).iter().all(|&c| c >= 0.0), "{:?}", fit(&rows));
    }

    #[test]
    fn a_short_calibration_gives_a_model_with_every_loop_figure_measured() {
        let c = calibrate(Duration::from_millis(20), 3).expect("calibrates");
        assert_eq!(c.loads.len(), 7);
        assert!(c.loads.iter().all(|l| l.rounds > 0 && l.wqes > 0 && l.cqes > 0), "{:?}", c.loads);
        assert!(c.cost.wqe_ps + c.cost.cqe_ps + c.cost.round_ps > 0, "{:?}", c.cost);
        assert!(c.cost.wasm.call_ps > 0 && c.cost.native.call_ps > 0, "{:?}", c.cost);
    }
}
