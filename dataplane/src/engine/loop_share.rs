//! Fair shares of the loop's own time: bounded rounds, in weighted deficit
//! round robin over the tenants, in the units of the loop's cost model
//! ([`loop_cost`]).
//!
//! When the loop's work is charged to the clock it is a bottleneck like
//! the wire: a round that posted every QP's room and polled every CQE
//! would take as long as the busiest tenant's work, and every other
//! tenant's next request would wait for it. So a charged round is
//! bounded:
//!
//! - each tenant with work gets a credit of a quantum x its weight per
//!   round, and posts while its credit lasts. The quantum is
//!   [`QUANTUM_ROUNDS`] times the round's own cost, so that rounds take
//!   at most a tenth of a loop one tenant keeps busy. A longer round does
//!   not hold back a request that comes during it (an arrival step posts
//!   it after the WQE or CQE in progress, `loop_cost.rs`); a
//!   completion that comes during it waits for the next round's poll. A
//!   post is charged what it costs the loop: each WQE, the CQE each
//!   signaled WQE will give (polled in a later round, but caused by this
//!   post), and the policy's `on_request` when a message starts. A tenant
//!   that overdraws carries the debt into its next round; unused credit is
//!   not kept (a sparse tenant cannot save up a burst). A ping-pong's
//!   request costs far less than a quantum, so it is posted in the first
//!   round or arrival step that sees it;
//! - a QP stopped by its tenant's credit stays in the `post` ready set
//!   (`ready.rs`), and the tenant's next round starts from it, so its QPs
//!   take turns (`TenantState::post_resume`); fair admission
//!   (`admission.rs`) ends the tenant's turn likewise, its own rotation
//!   keeping its place;
//! - each shared CQ gives at most [`POLL_BUDGET`] CQEs per round; the rest
//!   wait in the CQ for the next round (which follows at once: a round
//!   that polled is busy).
//!
//! A round's charged length is then bounded by the quanta of the tenants
//! with work and the poll budget, whatever a tenant keeps queued, and
//! tenants share the loop by weight. With a free loop ([`LoopCost::ZERO`],
//! the library's default, and a real-time loop, which takes its real
//! time) nothing is bounded: a round does all the work there is, as before.
//!
//! [`LoopCost::ZERO`]: super::LoopCost::ZERO

use super::*;

/// How many times a round's fixed cost ([`LoopCost::round_ps`]) a tenant
/// of weight 1 may spend per round: a round in which one tenant spends its
/// quantum spends at most a tenth of itself on its fixed cost.
///
/// [`LoopCost::round_ps`]: super::LoopCost::round_ps
pub const QUANTUM_ROUNDS: u64 = 9;

/// CQEs polled from each shared CQ per round when the loop is charged.
pub const POLL_BUDGET: usize = 64;

impl<R: Rnic> Dataplane<R> {
    /// Whether rounds are bounded and the loop's time shared (the loop's
    /// work is charged).
    pub(super) fn loop_shared(&self) -> bool {
        self.clock.charged
    }

    /// Whether tenant `t` may post more in this round: its credit, topped
    /// up by a quantum at its first post of the round.
    pub(super) fn loop_may_post(&mut self, t: usize) -> bool {
        if !self.loop_shared() {
            return true;
        }
        let round = self.counters.rounds;
        if self.tenants[t].loop_round != round {
            let quantum = self.loop_quantum_ps();
            let ts = &mut self.tenants[t];
            ts.loop_round = round;
            ts.loop_credit = ts.loop_credit.min(0) + quantum * ts.weight.max(1) as i64;
        }
        let ts = &mut self.tenants[t];
        ts.visit_round = round;
        ts.loop_credit > 0
    }

    /// The loop time a tenant of weight 1 may spend per round, ps:
    /// [`QUANTUM_ROUNDS`] times the round's fixed cost, and never less than
    /// a message posted whole costs.
    pub(super) fn loop_quantum_ps(&self) -> i64 {
        let c = &self.cfg.loop_cost;
        let message = c
            .wqe_ps
            .saturating_add(c.cqe_ps)
            .saturating_add(c.completion_ps)
            .saturating_add(c.native.call_ps.max(c.wasm.call_ps));
        c.round_ps.saturating_mul(QUANTUM_ROUNDS).max(message).clamp(1, i64::MAX as u64) as i64
    }

    /// Charges tenant `t`'s credit `ps` of the loop's time.
    pub(super) fn charge_loop(&mut self, t: usize, ps: u64) {
        if self.loop_shared() {
            let c = &mut self.tenants[t].loop_credit;
            *c = c.saturating_sub(ps.min(i64::MAX as u64) as i64);
        }
    }

    /// Charges tenant `t` `ps` for WQEs of a post list still being built
    /// (settled when the list is posted, [`Dataplane::settle_loop`]).
    pub(super) fn precharge_loop(&mut self, t: usize, ps: u64) {
        self.charge_loop(t, ps);
        self.precharged_ps = self.precharged_ps.saturating_add(ps);
    }

    /// A post list of tenant `t` went to the NIC, costing `ps`: charges
    /// what its building did not, or gives back what was not posted.
    pub(super) fn settle_loop(&mut self, t: usize, ps: u64) {
        let pre = std::mem::take(&mut self.precharged_ps);
        if ps >= pre {
            self.charge_loop(t, ps - pre);
        } else if self.loop_shared() {
            let c = &mut self.tenants[t].loop_credit;
            *c = c.saturating_add((pre - ps).min(i64::MAX as u64) as i64);
        }
    }

    /// What posting `w` and ending `messages` application messages costs
    /// the loop, ps: the WQEs now, the CQEs and the completions' delivery
    /// later, but this tenant's doing.
    pub(super) fn post_cost_ps(&self, w: WqeCounts, messages: u64) -> u64 {
        let c = &self.cfg.loop_cost;
        c.wqe_ps
            .saturating_mul(w.wqes)
            .saturating_add(c.chunk_ps.saturating_mul(w.chunks))
            .saturating_add(c.inline_ps.saturating_mul(w.inline))
            .saturating_add(c.cqe_ps.saturating_mul(w.signaled))
            .saturating_add(c.completion_ps.saturating_mul(messages))
    }

    /// What a policy call costs the loop, ps.
    pub(super) fn call_cost_ps(&self) -> u64 {
        let c = &self.cfg.loop_cost;
        if self.policy.is_wasm() {
            c.wasm.call_ps
        } else {
            c.native.call_ps
        }
    }

    /// QP `qi` stopped because its tenant's credit ran out: it stays ready,
    /// and its tenant's next round starts from it.
    pub(super) fn loop_held(&mut self, qi: usize) {
        let t = self.qps[qi].tenant as usize;
        self.counters.loop_holds += 1;
        self.ready.post.insert(qi);
        self.ready.admit.insert(t);
        self.tenants[t].post_resume = qi;
    }

    /// Where tenant `t`'s walk over its QPs starts in this round (the QP
    /// its credit last ran out at; fixed for the round). With a free loop,
    /// its first QP.
    pub(super) fn post_start(&mut self, t: usize) -> usize {
        if !self.loop_shared() {
            return 0;
        }
        let round = self.counters.rounds;
        let ts = &mut self.tenants[t];
        if ts.post_round != round {
            ts.post_round = round;
            ts.post_start = ts.post_resume;
        }
        ts.post_start
    }

    /// How many CQEs a round polls from each shared CQ.
    pub(super) fn poll_budget(&self) -> usize {
        if self.loop_shared() {
            POLL_BUDGET
        } else {
            usize::MAX
        }
    }
}

/// The WQEs of a post list, as the loop's cost model counts them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WqeCounts {
    /// WQEs.
    pub wqes: u64,
    /// Of them, chunks ([`super::LoopCost::chunk_ps`]).
    pub chunks: u64,
    /// Of them, inline ([`super::LoopCost::inline_ps`]).
    pub inline: u64,
    /// Of them, signaled (each a CQE to come).
    pub signaled: u64,
}
