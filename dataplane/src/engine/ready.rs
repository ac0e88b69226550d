//! Ready sets: which tenants and QPs a round visits, so that a round costs
//! in proportion to what is happening rather than to every tenant and QP
//! the loop holds.
//!
//! Each phase of a round has its set: tenants with requests in their
//! channel (`intake`, fed by the channels' arrival announcements, see
//! `chan.rs`), tenants with completions they have not taken (`overflow`),
//! tenants whose active QP set may change (`manage`: an arrival, a
//! completion, a post, a plan change, or a quantum running out, kept as a
//! timer), QPs that may post (`post`: an arrival, an activation or hand-off,
//! a completion freeing send-queue room, a pacing change or a token bucket
//! paying its debt, room freed in the shared completion queue) and windowed
//! tenants that may admit data (`admit`). A phase visits its set's members
//! in ascending order, as the walk over everyone did, and drops a member
//! once it has nothing to do until one of those events marks it again.
//! Visiting a member with nothing to do is harmless (the phases check
//! their conditions), so an event may mark more than it needs to.
//!
//! The sets are bitsets: membership and insertion are O(1), and a walk
//! costs one word read per 64 indices, so 10,000 QPs cost 157 word reads
//! per round on top of the members' own work. `Dataplane::set_exhaustive`
//! marks everything every round, which is the old walk (the equivalence
//! tests run both and compare).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Dataplane, CTRL_RESERVE};
use crate::rnic::Rnic;

/// A set of small indices, walked in ascending order.
#[derive(Debug, Default, Clone)]
pub(crate) struct IndexSet {
    words: Vec<u64>,
}

impl IndexSet {
    /// Adds `i`.
    #[inline]
    pub fn insert(&mut self, i: usize) {
        let w = i / 64;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (i % 64);
    }

    /// Removes `i`.
    #[inline]
    pub fn remove(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }

    /// The smallest member at least `i`.
    #[inline]
    pub fn next_from(&self, i: usize) -> Option<usize> {
        let mut w = i / 64;
        let mut bits = self.words.get(w)? & (!0u64 << (i % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.words.get(w)?;
        }
    }

    /// The smallest member at least `i` and below `n`.
    #[inline]
    pub fn next_below(&self, i: usize, n: usize) -> Option<usize> {
        self.next_from(i).filter(|&m| m < n)
    }

    /// Adds every index below `n`.
    pub fn fill(&mut self, n: usize) {
        for i in 0..n / 64 {
            if i >= self.words.len() {
                self.words.push(0);
            }
            self.words[i] = !0;
        }
        if !n.is_multiple_of(64) {
            self.insert(n - 1);
            let w = n / 64;
            self.words[w] |= (1u64 << (n % 64)) - 1;
        }
    }
}

/// What a timer wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// A capped tenant's active QP runs out of its time quantum.
    Quantum = 0,
    /// A tenant's token bucket pays its debt.
    Bucket = 1,
}

/// The loop's ready sets and timers.
#[derive(Default)]
pub(crate) struct Ready {
    /// Tenants with requests in their channel.
    pub intake: IndexSet,
    /// Tenants with completions waiting in the overflow queue.
    pub overflow: IndexSet,
    /// Tenants whose active QP set may change.
    pub manage: IndexSet,
    /// QPs that may have something to post.
    pub post: IndexSet,
    /// Windowed tenants that may admit data.
    pub admit: IndexSet,
    /// Timers: (when, tenant, kind), earliest first. A tenant has at most
    /// one live timer of each kind (`TenantState::timer_at`); others are
    /// stale and ignored when they fire.
    timers: BinaryHeap<Reverse<(u64, u32, TimerKind)>>,
}

impl Ready {
    /// Arms a timer; `at` is the tenant's live timer of that kind (kept
    /// when earlier than `when`).
    pub fn arm(&mut self, at: &mut u64, when: u64, t: u32, kind: TimerKind) {
        if when < *at {
            *at = when;
            self.timers.push(Reverse((when, t, kind)));
        }
    }

    /// The next timer due by `now`, if any (possibly stale: the caller
    /// checks it against the tenant's live timer).
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, u32, TimerKind)> {
        match self.timers.peek() {
            Some(Reverse((when, _, _))) if *when <= now => self.timers.pop().map(|Reverse(x)| x),
            _ => None,
        }
    }
}

impl<R: Rnic> Dataplane<R> {
    /// Makes every round visit every tenant and QP (`true`), as the loop
    /// did before ready sets, or only those with something to do (`false`,
    /// the default). Both run the same requests to the same completions;
    /// the equivalence tests compare them.
    #[doc(hidden)]
    pub fn set_exhaustive(&mut self, on: bool) {
        self.exhaustive = on;
        if on {
            self.mark_all();
        }
    }

    /// At the start of a round: the arrivals announced since the last one
    /// and the timers due by `now`.
    pub(super) fn collect_ready(&mut self, now: u64) {
        self.collect_arrivals();
        while let Some((when, t, kind)) = self.ready.pop_due(now) {
            let Some(ts) = self.tenants.get_mut(t as usize) else { continue };
            let at = &mut ts.timer_at[kind as usize];
            if *at != when {
                continue;
            }
            *at = u64::MAX;
            match kind {
                TimerKind::Quantum => self.ready.manage.insert(t as usize),
                TimerKind::Bucket => self.mark_tenant(t as usize),
            }
        }
        self.look_for_descriptors(now);
        if self.exhaustive {
            self.mark_all();
        }
    }

    /// The tenants whose request queues stopped being empty go to the
    /// `intake` set.
    pub(super) fn collect_arrivals(&mut self) {
        let mut arrived = std::mem::take(&mut self.scratch.arrived);
        self.arrivals.take(&mut arrived);
        for &t in &arrived {
            self.ready.intake.insert(t as usize);
        }
        self.scratch.arrived = arrived;
    }

    /// QP `qi` may have something to post (or admit). A QP of a tenant
    /// whose pacing pauses it could post only control WQEs: without any, it
    /// waits for the pacing to change (which marks the whole tenant).
    #[inline]
    pub(super) fn mark_post(&mut self, qi: usize) {
        let q = &self.qps[qi];
        let t = q.tenant as usize;
        if !self.tenants[t].bucket.paused() || q.pending_release || q.pending_wait.is_some() {
            self.ready.post.insert(qi);
        }
        self.ready.admit.insert(t);
    }

    /// Tenant `t`'s active QP set may change.
    #[inline]
    pub(super) fn mark_manage(&mut self, t: usize) {
        self.ready.manage.insert(t);
    }

    /// Something about tenant `t` as a whole changed (its plan, pacing or
    /// pause): every phase looks at it and all its QPs again.
    pub(super) fn mark_tenant(&mut self, t: usize) {
        for &qi in &self.tenants[t].qps {
            self.ready.post.insert(qi);
        }
        self.ready.manage.insert(t);
        self.ready.admit.insert(t);
    }

    /// Every phase looks at everyone (a policy swap, the watchdog taking
    /// control back, the exhaustive mode).
    pub(super) fn mark_all(&mut self) {
        let (nt, nq) = (self.tenants.len(), self.qps.len());
        self.ready.intake.fill(nt);
        self.ready.overflow.fill(nt);
        self.ready.manage.fill(nt);
        self.ready.admit.fill(nt);
        self.ready.post.fill(nq);
    }

    /// Brings tenant `t`'s rotation pointer up to the current manage round:
    /// it advances by one each round the tenant is capped, visited or not.
    /// Called before the tenant is managed, before its plan changes and
    /// before its QP count does.
    pub(super) fn settle_rr(&mut self, t: usize) {
        let capped = self.plans[t].max_active_qps != 0;
        let ts = &mut self.tenants[t];
        let k = self.manage_round - ts.rr_round;
        if capped && k > 0 {
            let n = ts.qps.len().max(1) as u64;
            ts.rr = ((ts.rr as u64 + k % n) % n) as usize;
        }
        ts.rr_round = self.manage_round;
    }

    /// [`Dataplane::settle_rr`] for every tenant (before plans change).
    pub(super) fn settle_all_rr(&mut self) {
        for t in 0..self.tenants.len() {
            self.settle_rr(t);
        }
    }

    /// Arms tenant `t`'s quantum timer: when its earliest active QP runs
    /// out of its time quantum (capped tenants with a time quantum), while
    /// one of its QPs waits for a slot. With none waiting an expiry would
    /// change nothing (`active_set.rs`); the arrival or the completion
    /// that makes a QP wait brings the tenant back here. At thousands of
    /// tenants of one QP each, a timer per tenant per quantum was most of
    /// the loop's work (`benches/scale.rs`, `scale_large`).
    pub(super) fn arm_quantum(&mut self, t: usize) {
        let plan = &self.plans[t];
        if plan.max_active_qps == 0 || plan.quantum_ns == 0 || self.tenant_paused(t) {
            return;
        }
        let qps = &self.qps;
        if !self.tenants[t].qps.iter().any(|&qi| super::active_set::waits_for_slot(&qps[qi])) {
            return;
        }
        let due = self.tenants[t]
            .qps
            .iter()
            .filter(|&&qi| qps[qi].active)
            .map(|&qi| qps[qi].active_since_ns.saturating_add(plan.quantum_ns))
            .min();
        if let Some(due) = due {
            self.ready.arm(
                &mut self.tenants[t].timer_at[TimerKind::Quantum as usize],
                due,
                t as u32,
                TimerKind::Quantum,
            );
        }
    }

    /// Arms tenant `t`'s bucket timer at `when` (its bucket pays its debt).
    pub(super) fn arm_bucket(&mut self, t: usize, when: u64) {
        self.ready.arm(&mut self.tenants[t].timer_at[TimerKind::Bucket as usize], when, t as u32, TimerKind::Bucket);
    }

    /// The shared send CQ's entries still open to data WQEs, when the QPs'
    /// send queues together could overrun it (else unbounded: every queue
    /// fits, as the static rule used to require).
    pub(super) fn send_cq_budget(&self) -> u64 {
        let n = self.qp_count() as u64;
        let cq = self.cfg.cq_depth as u64;
        if n * self.cfg.sq_depth as u64 <= cq {
            return u64::MAX;
        }
        cq.saturating_sub(n * CTRL_RESERVE as u64).saturating_sub(self.cq_used[0])
    }

    /// Whether the shared receive CQ has room for one more RECV.
    pub(super) fn recv_cq_room(&self) -> bool {
        self.cq_used[1] < self.cfg.cq_depth as u64
    }

    /// `n` posted WQEs retired: their CQ entries return to the budget, and
    /// the QPs that waited for room may post.
    pub(super) fn cq_retired(&mut self, n: u64) {
        self.cq_used[0] = self.cq_used[0].saturating_sub(n);
        if n > 0 && !self.cq_waiters.is_empty() {
            let waiters = std::mem::take(&mut self.cq_waiters);
            for &qi in &waiters {
                self.mark_post(qi);
            }
            self.cq_waiters = waiters;
            self.cq_waiters.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_set_walks_in_order_and_fills() {
        let mut s = IndexSet::default();
        for i in [130, 3, 64, 63, 0] {
            s.insert(i);
        }
        s.remove(63);
        let mut seen = Vec::new();
        let mut i = 0;
        while let Some(k) = s.next_from(i) {
            seen.push(k);
            i = k + 1;
        }
        assert_eq!(seen, vec![0, 3, 64, 130]);
        assert_eq!(s.next_from(131), None);
        let mut f = IndexSet::default();
        f.fill(130);
        assert_eq!((f.next_from(0), f.next_from(129), f.next_from(130)), (Some(0), Some(129), None));
        let mut f = IndexSet::default();
        f.fill(128);
        assert_eq!((f.next_from(127), f.next_from(128)), (Some(127), None));
    }

    #[test]
    fn a_tenant_keeps_its_earliest_timer() {
        let mut r = Ready::default();
        let mut at = u64::MAX;
        r.arm(&mut at, 50, 1, TimerKind::Quantum);
        r.arm(&mut at, 70, 1, TimerKind::Quantum);
        r.arm(&mut at, 20, 1, TimerKind::Quantum);
        assert_eq!(at, 20);
        assert_eq!(r.pop_due(19), None);
        assert_eq!(r.pop_due(60), Some((20, 1, TimerKind::Quantum)));
        assert_eq!(r.pop_due(60), Some((50, 1, TimerKind::Quantum)), "stale, for the caller to ignore");
        assert_eq!(r.pop_due(60), None);
    }
}
