//! The loop's own work in virtual time.
//!
//! On a real host the dataplane loop is one core: while it posts, polls
//! and calls the policy, it does nothing else, and a loop that cannot keep
//! up holds back every tenant. In a virtual-time run the simulator stops
//! its clock while the loop runs, so without a cost model the loop is
//! infinitely fast. [`LoopCost`] charges each round's work to the virtual
//! clock: a round that did something, or called the policy, costs
//!
//! `round + wqe x WQEs posted + cqe x CQEs polled + call x policy calls
//!  + (tick + tick_tenant x tenants) x policy ticks`
//!
//! (the policy's three figures for a native or a wasm policy, whichever ran
//! the round), and the loop then stays busy for that long: it runs its next
//! round no earlier than the end of that time (the dataplane's
//! [`App::poll`](crate::traffic::App::poll) is the gate). The work of a round
//! is done at its start and the time after it is the loop's, an
//! approximation that keeps a run deterministic: the costs are constants
//! (measured once on one machine, [`LoopCost::MEASURED`], or read from a
//! file `perf-runner calibrate-loop` writes), never timed during the run.
//! [`LoopCost::ZERO`] is the loop as before: free.
//!
//! The cost is charged only through the virtual-time drivers
//! ([`App::poll`](crate::traffic::App::poll)); [`Dataplane::round`]
//! itself charges nothing, and a loop spinning in real time
//! ([`Dataplane::run_pinned`]) takes its real time.

use super::Dataplane;
use crate::rnic::Rnic;

/// A policy's cost per hook call, in picoseconds of the loop's core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyCost {
    /// Each hook call other than a tick (`on_request`, once per message), ps.
    pub call_ps: u64,
    /// Each tick (`on_tick` and `on_pacing`), besides its tenants, ps.
    pub tick_ps: u64,
    /// Each tenant's record in an `on_tick` (its statistics in, its plan
    /// out), ps.
    pub tick_tenant_ps: u64,
}

impl PolicyCost {
    /// A free policy.
    pub const ZERO: PolicyCost = PolicyCost { call_ps: 0, tick_ps: 0, tick_tenant_ps: 0 };
}

/// The cost model of the dataplane loop (see the module documentation),
/// in picoseconds of the loop's one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopCost {
    /// Each round that did work or called the policy, ps.
    pub round_ps: u64,
    /// Each WQE posted (data, zero-weight, control), ps.
    pub wqe_ps: u64,
    /// Each CQE polled from the shared CQs (retired, delivered), ps.
    pub cqe_ps: u64,
    /// A native (built-in) policy's calls.
    pub native: PolicyCost,
    /// A wasm policy's calls (in the sandbox, with the marshalling).
    pub wasm: PolicyCost,
}

impl LoopCost {
    /// A free loop: virtual time as before the cost model.
    pub const ZERO: LoopCost =
        LoopCost { round_ps: 0, wqe_ps: 0, cqe_ps: 0, native: PolicyCost::ZERO, wasm: PolicyCost::ZERO };

    /// The loop as `perf-runner calibrate-loop` measured it over the null
    /// RNIC on the reference machine: an Intel Xeon (`model name: Intel(R)
    /// Xeon(R) Processor`), 2 cores shared with other jobs; each figure the
    /// median of three calibrations (`docs/loop-cost.md` gives the
    /// commands and their output).
    pub const MEASURED: LoopCost = LoopCost {
        round_ps: 214_078,
        wqe_ps: 19_111,
        cqe_ps: 99_176,
        native: PolicyCost { call_ps: 2_927, tick_ps: 250_203, tick_tenant_ps: 6_260 },
        wasm: PolicyCost { call_ps: 23_213, tick_ps: 283_808, tick_tenant_ps: 23_292 },
    };

    /// Whether every figure is zero (the loop is free).
    pub fn is_zero(&self) -> bool {
        *self == LoopCost::ZERO
    }

    /// The cost of a round's work, ps.
    pub fn charge(&self, work: &RoundWork) -> u64 {
        let p = if work.wasm { self.wasm } else { self.native };
        self.round_ps
            .saturating_add(self.wqe_ps.saturating_mul(work.wqes))
            .saturating_add(self.cqe_ps.saturating_mul(work.cqes))
            .saturating_add(p.call_ps.saturating_mul(work.policy_calls.saturating_sub(work.ticks)))
            .saturating_add(p.tick_ps.saturating_mul(work.ticks))
            .saturating_add(p.tick_tenant_ps.saturating_mul(work.tick_tenants))
    }
}

/// What one round did, as the cost model counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundWork {
    /// WQEs posted.
    pub wqes: u64,
    /// CQEs polled.
    pub cqes: u64,
    /// Policy hook calls (ticks included).
    pub policy_calls: u64,
    /// Policy ticks.
    pub ticks: u64,
    /// Tenant records handed to `on_tick` (tenants x ticks).
    pub tick_tenants: u64,
    /// Whether the policy that ran is a wasm module.
    pub wasm: bool,
}

/// The loop's busy time on the virtual clock.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LoopClock {
    /// Whether the model charges anything (not [`LoopCost::ZERO`]): read
    /// on every post and poll, so kept here rather than compared each time.
    pub(super) charged: bool,
    /// The loop's next round waits until this time, ns (the end of its
    /// last charged work, rounded up to the clock's nanoseconds).
    pub(super) busy_until_ns: u64,
    /// The exact end of that work, ps.
    pub(super) busy_end_ps: u64,
    /// Work charged so far, ps.
    pub(super) busy_ps: u64,
    /// The last round's charge, ps (0 after a round that did nothing).
    pub(super) last_round_ps: u64,
}

impl<R: Rnic> Dataplane<R> {
    /// The loop's cost model (from [`DataplaneConfig::loop_cost`](super::DataplaneConfig::loop_cost)).
    pub fn loop_cost(&self) -> LoopCost {
        self.cfg.loop_cost
    }

    /// Replaces the loop's cost model; work already charged stays charged.
    pub fn set_loop_cost(&mut self, cost: LoopCost) {
        self.cfg.loop_cost = cost;
        self.clock.charged = !cost.is_zero();
    }

    /// While the loop is still busy with its last round's work: when it is
    /// free again (ns of the NIC's clock). A virtual-time driver wakes it
    /// then; `None` when it is free now (always, with a zero cost).
    pub fn loop_busy_until_ns(&self) -> Option<u64> {
        Some(self.clock.busy_until_ns).filter(|&t| t > self.nic.clock_ns())
    }

    /// The loop's busy time charged up to `now_ns` (work that runs past
    /// `now_ns` counts up to it), ps. Never more than `now_ns` x 1000: the
    /// charged intervals do not overlap.
    pub fn loop_busy_ps(&self, now_ns: u64) -> u64 {
        let over = self.clock.busy_end_ps.saturating_sub(now_ns.saturating_mul(1000));
        self.clock.busy_ps.saturating_sub(over)
    }

    /// Measures the wall time of rounds and policy hooks into
    /// [`DataplaneCounters::policy_ns`](super::DataplaneCounters::policy_ns)
    /// (as [`Dataplane::run_pinned`] does), for benchmarks and the loop's
    /// calibration.
    pub fn set_timed(&mut self, on: bool) {
        self.timed = on;
    }

    /// A round in virtual time: nothing while the loop is busy with its
    /// last round's work, else a round whose work is charged to the loop's
    /// clock (see the module documentation).
    pub(super) fn charged_round(&mut self) -> Result<bool, crate::rnic::RnicError> {
        if !self.clock.charged {
            return self.round();
        }
        let cost = self.cfg.loop_cost;
        let now = self.nic.clock_ns();
        if now < self.clock.busy_until_ns {
            return Ok(false);
        }
        let c0 = self.counters;
        let calls0 = self.policy.counters.calls;
        let did = self.round()?;
        let c = self.counters;
        let ticks = c.ticks - c0.ticks;
        let work = RoundWork {
            wqes: c.wqes_posted - c0.wqes_posted,
            cqes: c.cqes_polled - c0.cqes_polled,
            policy_calls: self.policy.counters.calls.saturating_sub(calls0),
            ticks,
            tick_tenants: if ticks == 0 {
                0
            } else {
                ticks * self.tenants.iter().filter(|t| !t.removed).count() as u64
            },
            wasm: self.policy.is_wasm(),
        };
        self.clock.last_round_ps = 0;
        if did || work.policy_calls > 0 {
            let ps = cost.charge(&work);
            self.clock.last_round_ps = ps;
            let start_ps = now.saturating_mul(1000);
            self.clock.busy_ps = self.clock.busy_ps.saturating_add(ps);
            self.clock.busy_end_ps = start_ps.saturating_add(ps);
            self.clock.busy_until_ns = self.clock.busy_end_ps.div_ceil(1000);
        }
        Ok(did)
    }
}
