//! QP-level isolation: each tenant's set of active QPs kept within its
//! plan's cap, and rotated after the quantum (requests, bytes or time)
//! with an in-NIC hand-off through the tenant's preemption control QP.
//! A round manages only the tenants in the `manage` ready set (an arrival,
//! a completion, a post, a plan change, or a quantum timer: `ready.rs`).

use super::*;

impl<R: Rnic> Dataplane<R> {
    /// Keeps each capped tenant's active QPs within its plan, rotating
    /// after the quantum with an in-NIC hand-off.
    pub(super) fn manage_active_sets(&mut self, now: u64) -> Result<(), RnicError> {
        let mut qps = std::mem::take(&mut self.scratch.qps);
        let mut waiting = std::mem::take(&mut self.scratch.waiting);
        let mut r = Ok(());
        let mut next = 0;
        while let Some(t) = self.ready.manage.next_below(next, self.tenants.len()) {
            next = t + 1;
            self.ready.manage.remove(t);
            self.settle_rr(t);
            r = self.manage_tenant(t, now, &mut qps, &mut waiting);
            self.tenants[t].rr_round = self.manage_round + 1;
            if r.is_err() {
                break;
            }
            self.arm_quantum(t);
        }
        self.manage_round += 1;
        self.scratch.qps = qps;
        self.scratch.waiting = waiting;
        r
    }

    /// [`Dataplane::manage_active_sets`] for tenant `t`, with scratch
    /// buffers for its QPs and the waiting ones.
    pub(super) fn manage_tenant(
        &mut self,
        t: usize,
        now: u64,
        qps: &mut Vec<usize>,
        waiting: &mut Vec<usize>,
    ) -> Result<(), RnicError> {
        let plan = self.plans[t];
        let cap = if plan.max_active_qps == 0 { usize::MAX } else { plan.max_active_qps as usize };
        qps.clear();
        qps.extend_from_slice(&self.tenants[t].qps);
        // A QP holds its slot while it has work in software or in the NIC.
        let mut active = 0;
        for &qi in qps.iter() {
            let q = &mut self.qps[qi];
            if q.active && !q.has_work() && q.outstanding == 0 {
                q.active = false;
            }
            handoff::end_drain(q);
            active += handoff::holds_slot(q) as usize;
        }
        // Over the cap (the plan shrank): stop feeding the extras; what
        // they already posted drains.
        for &qi in qps.iter().rev() {
            if active <= cap {
                break;
            }
            if self.qps[qi].active {
                self.qps[qi].active = false;
                active -= 1;
            }
        }
        // A paused tenant posts nothing, so its active set stands still: a
        // rotation would post a hand-off (a WAIT and a SEND_ENABLE in the
        // NIC) that moves no data, for every paused tenant every quantum.
        // Its QPs' quanta restart when it resumes (`restart_quanta`).
        if self.tenant_paused(t) {
            return Ok(());
        }
        let n = qps.len();
        let start = self.tenants[t].rr;
        waiting.clear();
        // The QPs from the rotation pointer on, then those before it.
        let (earlier, from_start) = qps.split_at(start.checked_rem(n).unwrap_or(0));
        waiting.extend(from_start.iter().chain(earlier).copied().filter(|&qi| waits_for_slot(&self.qps[qi])));
        let mut waiting = waiting.iter().copied();
        while active < cap {
            let Some(qi) = waiting.next() else { break };
            self.activate(qi, now, None);
            active += 1;
        }
        if cap == usize::MAX {
            return Ok(());
        }
        for &qi in qps.iter() {
            let q = &self.qps[qi];
            if !q.active || !self.quantum_spent(q, &plan, now) {
                continue;
            }
            let Some(next) = waiting.next() else {
                // Nobody waits: the QP keeps the NIC. The requests or bytes
                // of its quantum start again (they hold its posts back); its
                // time runs on, so that a QP that comes to wait later takes
                // over at once, whenever the loop looks.
                let q = &mut self.qps[qi];
                if quantum_hit(q, &plan) {
                    q.active_requests = 0;
                    q.active_bytes = 0;
                    self.mark_post(qi);
                }
                continue;
            };
            let wait = match self.tenants[t].pcq.as_mut() {
                Some(pcq) => Some(pcq.plan_handoff(&mut self.nic)?),
                None => None,
            };
            self.counters.handoffs += 1;
            if handoff::give_up_slot(&mut self.qps[qi], wait.is_some()) {
                self.activate(next, now, wait);
            }
            self.mark_post(qi);
        }
        self.tenants[t].rr = (start + 1) % n.max(1);
        Ok(())
    }

    /// Whether tenant `t` may post nothing now: paused by its policy's
    /// pacing or by the operator.
    pub(super) fn tenant_paused(&self, t: usize) -> bool {
        let ts = &self.tenants[t];
        ts.paused || ts.bucket.paused()
    }

    /// Tenant `t` resumed: its active QPs' quanta start again, since the
    /// time it was paused they held no NIC turn.
    pub(super) fn restart_quanta(&mut self, t: usize, now: u64) {
        for &qi in &self.tenants[t].qps {
            if self.qps[qi].active {
                self.qps[qi].active_since_ns = now;
            }
        }
    }

    pub(super) fn quantum_spent(&self, q: &DpQp, plan: &TenantPlan, now: u64) -> bool {
        quantum_hit(q, plan) || (plan.quantum_ns > 0 && now.saturating_sub(q.active_since_ns) >= plan.quantum_ns)
    }

    pub(super) fn activate(&mut self, qi: usize, now: u64, wait: Option<u64>) {
        let q = &mut self.qps[qi];
        q.active = true;
        q.active_since_ns = now;
        q.active_requests = 0;
        q.active_bytes = 0;
        q.pending_wait = wait;
        self.mark_post(qi);
    }
}

/// Whether a QP waits for one of its tenant's active slots: it has work
/// and is drained (a stream still in the NIC would run beside the slot's
/// owner).
pub(super) fn waits_for_slot(q: &DpQp) -> bool {
    !q.active && q.has_work() && q.outstanding == 0
}

/// Whether a QP posted its request or byte quantum since it became active.
pub(super) fn quantum_hit(q: &DpQp, plan: &TenantPlan) -> bool {
    (plan.quantum_requests > 0 && q.active_requests >= plan.quantum_requests)
        || (plan.quantum_bytes > 0 && q.active_bytes >= plan.quantum_bytes)
}
