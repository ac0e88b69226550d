//! The loop's own work in virtual time.
//!
//! On a real host the dataplane loop is one core: while it posts, polls
//! and calls the policy, it does nothing else, and a loop that cannot keep
//! up holds back every tenant. In a virtual-time run the simulator stops
//! its clock while the loop runs, so without a cost model the loop is
//! infinitely fast. [`LoopCost`] charges each round's work to the virtual
//! clock: a round that did something, or called the policy, costs
//!
//! `round + wqe x WQEs posted + chunk x chunks + inline x inline WQEs
//!  + cqe x CQEs polled + completion x completions delivered
//!  + call x policy calls
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
//! A request that comes while the loop is busy does not wait for the whole
//! round: the loop looks at its arrival list after each WQE it builds and
//! each CQE it processes (the round's *marks*, placed on the clock by what
//! the work before them costs; a post list in the making is posted as it
//! stands when a step cuts in). When requests were announced by a
//! tenant the round in progress has not visited, the first mark after the
//! announcement runs an *arrival step*: it takes the requests in and posts
//! them for those tenants, within what is left of their share of the round
//! (`loop_share.rs`), and the rest of the round moves back by what the step
//! costs, `step + wqe x WQEs + cqe x CQEs + call x calls`. A tenant the
//! round already visited waits for the next round, as in deficit round
//! robin: a ping-pong is served within a WQE or CQE of its request, a
//! flood's arrivals never step.
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
    /// Each arrival step: a look at the arrival list between two WQEs or
    /// CQEs of a round that found requests and served them, ps (the step's
    /// WQEs, CQEs and calls are charged on top, as in a round).
    #[serde(default)]
    pub step_ps: u64,
    /// Each WQE posted (data, zero-weight, control), ps.
    pub wqe_ps: u64,
    /// Each chunk posted besides its WQE: a data WQE that carries part of
    /// a message (a sub-request, a rendezvous step, a length record),
    /// which the general path builds from the message's cursor and plan,
    /// ps. A whole message's WQE pays `wqe_ps` only.
    #[serde(default)]
    pub chunk_ps: u64,
    /// Each WQE posted inline besides its WQE: the loop's CPU copies the
    /// payload out of the tenant's region into the WQE, ps.
    #[serde(default)]
    pub inline_ps: u64,
    /// Each CQE polled from the shared CQs, with the WQEs it retires, ps.
    pub cqe_ps: u64,
    /// Each completion delivered to a tenant (one per application message
    /// or RECV, whether its own CQE or a later one retired it), ps. The
    /// calibration's loads post one message per completion, so this figure
    /// also carries the rest of a message's own work: taking it in,
    /// starting it (its cursor, the policy's plan) and retiring it.
    #[serde(default)]
    pub completion_ps: u64,
    /// A native (built-in) policy's calls.
    pub native: PolicyCost,
    /// A wasm policy's calls (in the sandbox, with the marshalling).
    pub wasm: PolicyCost,
}

impl LoopCost {
    /// A free loop: virtual time as before the cost model.
    pub const ZERO: LoopCost = LoopCost {
        round_ps: 0,
        step_ps: 0,
        wqe_ps: 0,
        chunk_ps: 0,
        inline_ps: 0,
        cqe_ps: 0,
        completion_ps: 0,
        native: PolicyCost::ZERO,
        wasm: PolicyCost::ZERO,
    };

    /// The loop as `perf-runner calibrate-loop` measured it over the null
    /// RNIC on the reference machine: an Intel Xeon (`model name: Intel(R)
    /// Xeon(R) Processor`), 2 cores shared with other jobs; each figure the
    /// median of three calibrations (`docs/loop-cost.md` gives the
    /// commands and their output). The arrival step came later, on a
    /// slower machine of the same model: it is that machine's step over
    /// its round, times the reference round. The reference measured a
    /// message's completion work and its CQE as one figure (99.2 ns); the
    /// two are split in the proportion a later machine measured them
    /// apart (`docs/loop-cost.md`, "The defaults"). The reference machine
    /// measured neither chunks nor inline WQEs apart from other WQEs
    /// (`chunk_ps` and `inline_ps` are 0), nor the whole-message lane: its
    /// completion figure is a message's cost on the general path.
    pub const MEASURED: LoopCost = LoopCost {
        round_ps: 214_078,
        step_ps: 237_621,
        wqe_ps: 19_111,
        chunk_ps: 0,
        inline_ps: 0,
        cqe_ps: 20_787,
        completion_ps: 78_389,
        native: PolicyCost { call_ps: 2_927, tick_ps: 250_203, tick_tenant_ps: 6_260 },
        wasm: PolicyCost { call_ps: 23_213, tick_ps: 283_808, tick_tenant_ps: 23_292 },
    };

    /// Whether every figure is zero (the loop is free).
    pub fn is_zero(&self) -> bool {
        *self == LoopCost::ZERO
    }

    /// The cost of a round's work, ps.
    pub fn charge(&self, work: &RoundWork) -> u64 {
        self.round_ps.saturating_add(self.work_ps(work))
    }

    /// The cost of `work` besides the fixed cost of its round or step, ps.
    pub fn work_ps(&self, work: &RoundWork) -> u64 {
        let p = if work.wasm { self.wasm } else { self.native };
        self.wqe_ps
            .saturating_mul(work.wqes)
            .saturating_add(self.chunk_ps.saturating_mul(work.chunks))
            .saturating_add(self.inline_ps.saturating_mul(work.inline))
            .saturating_add(self.cqe_ps.saturating_mul(work.cqes))
            .saturating_add(self.completion_ps.saturating_mul(work.completions))
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
    /// Of them, chunks ([`LoopCost::chunk_ps`]).
    pub chunks: u64,
    /// Of them, inline ([`LoopCost::inline_ps`]).
    pub inline: u64,
    /// CQEs polled.
    pub cqes: u64,
    /// Completions delivered to tenants.
    pub completions: u64,
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
#[derive(Debug, Clone, Default)]
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
    /// Where the busy interval's WQEs and CQEs end, ps, in order: the
    /// points between them where the loop looks at its arrival list again.
    pub(super) marks: Vec<u64>,
    /// The round or step being run: where its marks are measured from.
    pub(super) base: Option<WorkBase>,
    /// When the busy loop first had requests announced: they are served at
    /// the first mark at or after it.
    pub(super) arrival_seen_ps: Option<u64>,
    /// The last policy tick's time, ns, and the loop's busy time then, ps
    /// (what [`Dataplane::loop_info`] measures from).
    pub(super) tick_mark: (u64, u64),
}

/// Where a round or an arrival step started, to place its marks.
#[derive(Debug, Clone, Copy)]
pub(super) struct WorkBase {
    /// Its start, ps.
    start_ps: u64,
    /// Its fixed cost ([`LoopCost::round_ps`] or [`LoopCost::step_ps`]).
    fixed_ps: u64,
    /// The dataplane's counters at its start.
    counters: super::DataplaneCounters,
    /// The policy's calls at its start.
    calls: u64,
    /// Live tenants, counted at the first mark after a tick.
    tenants: Option<u64>,
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
    /// free again, or reaches the mark where it serves requests announced
    /// meanwhile (ns of the NIC's clock). A virtual-time driver wakes it
    /// then; `None` when it is free now (always, with a zero cost).
    pub fn loop_busy_until_ns(&self) -> Option<u64> {
        let now = self.nic.clock_ns();
        let until = Some(self.clock.busy_until_ns).filter(|&t| t > now)?;
        Some(self.arrival_step_ns().filter(|&t| t > now).map_or(until, |t| t.min(until)))
    }

    /// The loop's busy time charged up to `now_ns` (work that runs past
    /// `now_ns` counts up to it), ps. Never more than `now_ns` x 1000: the
    /// charged intervals do not overlap.
    pub fn loop_busy_ps(&self, now_ns: u64) -> u64 {
        let over = self.clock.busy_end_ps.saturating_sub(now_ns.saturating_mul(1000));
        self.clock.busy_ps.saturating_sub(over)
    }

    /// The loop's load since the last call (the last policy tick) and its
    /// costs, as a policy's `on_loop` sees them (ABI 1.7): the busy share
    /// is the charged work on the virtual clock, or, when the loop is not
    /// charged, the wall time [`Dataplane::run_pinned`] measured working
    /// (0 when nothing measures it); the costs are the cost model's (0 for
    /// a free loop).
    pub(super) fn loop_info(&mut self, now_ns: u64) -> perf_policy_sdk::LoopInfo {
        let busy_ps =
            if self.clock.charged { self.loop_busy_ps(now_ns) } else { self.counters.busy_ns.saturating_mul(1000) };
        let (then_ns, then_ps) = std::mem::replace(&mut self.clock.tick_mark, (now_ns, busy_ps));
        let span_ps = now_ns.saturating_sub(then_ns).saturating_mul(1000);
        let busy = busy_ps.saturating_sub(then_ps).saturating_mul(1000).checked_div(span_ps).unwrap_or(0);
        let cost = self.cfg.loop_cost;
        perf_policy_sdk::LoopInfo {
            busy_permille: busy.min(1000) as u32,
            wqe_ps: cost.wqe_ps.min(u32::MAX as u64) as u32,
            cqe_ps: cost.cqe_ps.min(u32::MAX as u64) as u32,
            link_gbps: (self.link_bytes_per_ns * 8.0).round() as u32,
        }
    }

    /// Measures the wall time of rounds and policy hooks into
    /// [`DataplaneCounters::policy_ns`](super::DataplaneCounters::policy_ns)
    /// (as [`Dataplane::run_pinned`] does), for benchmarks and the loop's
    /// calibration.
    pub fn set_timed(&mut self, on: bool) {
        self.timed = on;
    }

    /// A round in virtual time: nothing while the loop is busy with its
    /// last round's work (but an arrival step, when requests were announced
    /// and the loop reached the end of a WQE or CQE since), else
    /// a round whose work is charged to the loop's clock (see the module
    /// documentation).
    pub(super) fn charged_round(&mut self) -> Result<bool, crate::rnic::RnicError> {
        if !self.clock.charged {
            return self.round();
        }
        let cost = self.cfg.loop_cost;
        let now = self.nic.clock_ns();
        let now_ps = now.saturating_mul(1000);
        if now < self.clock.busy_until_ns {
            return self.busy_poll(now);
        }
        self.clock.marks.clear();
        self.clock.arrival_seen_ps = None;
        self.begin_work(now_ps, cost.round_ps);
        let did = self.round()?;
        let work = self.end_work();
        self.clock.last_round_ps = 0;
        if did || work.policy_calls > 0 {
            let ps = cost.charge(&work);
            self.clock.last_round_ps = ps;
            self.clock.busy_ps = self.clock.busy_ps.saturating_add(ps);
            self.clock.busy_end_ps = now_ps.saturating_add(ps);
            self.clock.busy_until_ns = self.clock.busy_end_ps.div_ceil(1000);
        } else {
            self.clock.marks.clear();
        }
        Ok(did)
    }

    /// A poll while the loop is busy: requests announced meanwhile are
    /// served by an arrival step at the first mark at or after their
    /// announcement (the driver wakes the loop there,
    /// [`Dataplane::loop_busy_until_ns`]), and the rest of the busy
    /// interval moves back by the step's cost.
    fn busy_poll(&mut self, now: u64) -> Result<bool, crate::rnic::RnicError> {
        let now_ps = now.saturating_mul(1000);
        if self.clock.arrival_seen_ps.is_none() && self.arrivals.any(|&t| self.unvisited(t as usize)) {
            self.clock.arrival_seen_ps = Some(now_ps);
        }
        let Some(seen) = self.clock.arrival_seen_ps else { return Ok(false) };
        match self.clock.marks.iter().find(|&&m| m >= seen) {
            Some(&m) if m <= now_ps => {}
            // Not there yet, or the busy interval has no mark left: the
            // next round serves them.
            _ => return Ok(false),
        }
        let cost = self.cfg.loop_cost;
        self.clock.arrival_seen_ps = None;
        let mut rest = std::mem::take(&mut self.clock.marks);
        rest.retain(|&m| m > now_ps);
        self.begin_work(now_ps, cost.step_ps);
        self.counters.arrival_steps += 1;
        let did = self.arrival_step(now)?;
        let work = self.end_work();
        let ps = cost.step_ps.saturating_add(cost.work_ps(&work));
        self.clock.busy_ps = self.clock.busy_ps.saturating_add(ps);
        self.clock.busy_end_ps = self.clock.busy_end_ps.saturating_add(ps);
        self.clock.busy_until_ns = self.clock.busy_end_ps.div_ceil(1000);
        self.clock.marks.extend(rest.into_iter().map(|m| m.saturating_add(ps)));
        Ok(did)
    }

    /// Starts counting the work of a round or step that starts at
    /// `start_ps` and costs `fixed_ps` besides its work.
    fn begin_work(&mut self, start_ps: u64, fixed_ps: u64) {
        self.clock.base = Some(WorkBase {
            start_ps,
            fixed_ps,
            counters: self.counters,
            calls: self.policy.counters.calls,
            tenants: None,
        });
    }

    /// The work done since [`Dataplane::begin_work`], which it ends.
    fn end_work(&mut self) -> RoundWork {
        let work = self.work_so_far();
        self.clock.base = None;
        work
    }

    /// The work of the round or step in progress so far.
    fn work_so_far(&mut self) -> RoundWork {
        let Some(base) = self.clock.base else { return RoundWork::default() };
        let c = self.counters;
        let ticks = c.ticks - base.counters.ticks;
        let tick_tenants = if ticks == 0 {
            0
        } else {
            let n = match base.tenants {
                Some(n) => n,
                None => {
                    let n = self.tenants.iter().filter(|t| !t.removed).count() as u64;
                    if let Some(b) = &mut self.clock.base {
                        b.tenants = Some(n);
                    }
                    n
                }
            };
            ticks * n
        };
        RoundWork {
            wqes: c.wqes_posted - base.counters.wqes_posted,
            chunks: c.chunks - base.counters.chunks,
            inline: c.inline_wqes - base.counters.inline_wqes,
            cqes: c.cqes_polled - base.counters.cqes_polled,
            completions: c.completions - base.counters.completions,
            policy_calls: self.policy.counters.calls.saturating_sub(base.calls),
            ticks,
            tick_tenants,
            wasm: self.policy.is_wasm(),
        }
    }

    /// A post list of `wqes` WQEs or a CQE of the round or step in progress
    /// ended: the loop may look at its arrival list after each of them.
    pub(super) fn mark_step(&mut self, wqes: u64) {
        if !self.clock.charged {
            return;
        }
        let Some(base) = self.clock.base else { return };
        let work = self.work_so_far();
        let at = base.start_ps.saturating_add(base.fixed_ps).saturating_add(self.cfg.loop_cost.work_ps(&work));
        // A post list's WQEs are built one after the other: the loop may
        // look between them too (posting what it built so far).
        let from = self.clock.marks.last().copied().unwrap_or(base.start_ps.saturating_add(base.fixed_ps)).min(at);
        let n = wqes.max(1);
        self.clock.marks.extend((1..=n).map(|k| from + (at - from) * k / n));
    }

    /// When an announced request waits for an arrival step: the mark it
    /// is served at, ns.
    fn arrival_step_ns(&self) -> Option<u64> {
        let seen = self.clock.arrival_seen_ps?;
        self.clock.marks.iter().find(|&&m| m >= seen).map(|m| m.div_ceil(1000))
    }
}
