//! Fair admission: the data WQEs of tenants with an in-flight window
//! (ABI 1.3, `TenantPlan::window_kib` / `read_window_kib`) enter the NIC
//! under a budget they share, in weighted deficit round robin.
//!
//! The budget of a direction (WRITE / SEND on the requester's wire, READ
//! responses on the responder's) is the largest window among the tenants
//! with work: the bytes their posted, not yet completed WQEs hold stay
//! below it, so what queues in the NIC ahead of a new message stays short
//! whatever the tenants' QP counts. Which tenant gets the room a
//! completion frees is decided here, not by the NIC's round robin over
//! QPs: each visit gives a tenant a quantum in proportion to its weight,
//! and a tenant posts while its deficit lasts. Admissions, and so
//! completions, are shared by weight in bytes (payload plus the
//! per-packet overhead), whatever each tenant's round-trip time.
//! A tenant with nothing in flight in a direction may always post one
//! WQE there, and a tenant holding less than its reservation (8 KiB x its
//! weight, at most its weighted share of the budget among the tenants
//! waiting for admission) may post whatever the others hold: a ping-pong
//! or a sparse sender never waits for room, even with a message already in
//! flight. The budget is exceeded by at most the reservations, which are
//! bounded by it. Beyond its reservation a tenant waits its turn, so the
//! shares of backlogged tenants stay those of the deficit round robin
//! (holding its weighted share of the in-flight bytes would not give a
//! tenant its share of the throughput: the NIC serves one WQE per QP per
//! turn, so a tenant with few QPs would see its WQEs wait longer than one
//! with many).
//!
//! Whatever the plans ask, the budget never falls below the bandwidth-delay
//! product of the NIC's pipeline, measured (`pipeline.rs`): below it the
//! wire waits for completions to travel back, so a policy's window can
//! shorten what queues in the NIC but not idle the link.
//!
//! The loop sees completions, and refills the NIC, once per round: in
//! virtual time with the loop's cost charged (`loop_cost.rs`) the budget
//! grows by what the link moves during two rounds (the last one's length),
//! so a loop made slow
//! by a message-rate tenant's work does not leave the wire idle between
//! its rounds (experiment 2: the 1 MB stream beside 16 B messages kept
//! 18.8 Gb/s on the plain budget).
//!
//! A round visits only the windowed tenants in the `admit` ready set
//! (`ready.rs`), in the same rotated order as a walk over all tenants: a
//! tenant leaves the set once it has no data QP to admit from and no
//! deficit left, which is when a visit would change nothing. The budget
//! and the bytes in flight under it are kept up to date as plans change
//! and WQEs post and retire, not summed over the tenants each round.

use super::*;

/// Bytes a tenant of weight 1 may admit per visit.
const QUANTUM_BYTES: i64 = 16 * 1024;

/// In-flight bytes a tenant of weight 1 may hold whatever the others hold.
const RESERVED_BYTES: u64 = 8 * 1024;

impl<R: Rnic> Dataplane<R> {
    /// Admits the windowed tenants' data (see the module comment). Returns
    /// whether anything was posted.
    pub(super) fn admit(&mut self, now: u64) -> Result<bool, RnicError> {
        let n = self.tenants.len();
        // The budget covers the NIC's pipeline with the loop answering at
        // once. A loop that takes a while per round (its charged cost)
        // posts in one round what it sees complete in the next and refills
        // in the one after (a round posts before it polls), so the budget
        // also covers what the link moves in two rounds.
        let round_bytes = (2.0 * self.link_bytes_per_ns * self.clock.last_round_ps as f64 / 1000.0) as u64;
        // Never below the bandwidth-delay product of the NIC's pipeline
        // (`pipeline.rs`), whatever the plans ask: work conservation.
        let link = self.link_bytes_per_ns;
        let mut budget = [0u64; 2];
        for (dir, b) in budget.iter_mut().enumerate() {
            let window = self.window_budget[dir];
            if window > 0 {
                *b = window.max(self.pipeline.floor_bytes(dir == 1, link)) + round_bytes;
            }
        }
        let mut total = self.windowed_inflight;
        // The candidates in the walk's order: from `admit_next` round.
        let mut cands = std::mem::take(&mut self.scratch.admit);
        cands.clear();
        let start = self.admit_next.min(n);
        let mut i = start;
        while let Some(t) = self.ready.admit.next_below(i, n) {
            cands.push(t);
            i = t + 1;
        }
        let mut i = 0;
        while let Some(t) = self.ready.admit.next_below(i, start) {
            cands.push(t);
            i = t + 1;
        }
        // The reservations are shares among the tenants with data to
        // admit (all of them candidates), so together they stay within the
        // budget.
        let weights: u64 = cands
            .iter()
            .filter(|&&t| self.plans[t].windowed() && !self.tenants[t].paused && self.has_data_qp(t))
            .map(|&t| self.tenants[t].weight.max(1) as u64)
            .sum();
        let weights = weights.max(1);
        let mut did = false;
        let mut stopped_at = None;
        loop {
            let mut progress = false;
            for &t in &cands {
                if !self.plans[t].windowed() || self.tenants[t].paused {
                    continue;
                }
                let Some(mut qi) = self.next_data_qp(t) else {
                    self.tenants[t].deficit = 0;
                    continue;
                };
                let quantum = QUANTUM_BYTES * self.tenants[t].weight.max(1) as i64;
                if self.tenants[t].deficit <= 0 {
                    self.tenants[t].deficit += quantum;
                }
                while self.tenants[t].deficit > 0 {
                    let read = self.qps[qi].next_is_read();
                    let dir = read as usize;
                    let held = self.tenants[t].inflight[dir];
                    let w = self.tenants[t].weight.max(1) as u64;
                    let reserved = (budget[dir] * w / weights).min(RESERVED_BYTES * w);
                    let open = budget[dir] == 0 || total[dir] < budget[dir] || held == 0 || held < reserved;
                    if !open {
                        self.counters.window_holds += 1;
                        stopped_at.get_or_insert(t);
                        break;
                    }
                    let before = self.tenants[t].inflight;
                    did |= self.post_qp(qi, true, now, 1)?;
                    let after = self.tenants[t].inflight;
                    let charged = (after[0] + after[1]).saturating_sub(before[0] + before[1]);
                    if charged == 0 {
                        // The QP could not post (send queue full, bucket in
                        // debt): the tenant's turn ends.
                        break;
                    }
                    total[0] += after[0].saturating_sub(before[0]);
                    total[1] += after[1].saturating_sub(before[1]);
                    self.tenants[t].deficit -= charged as i64;
                    progress = true;
                    match self.next_data_qp(t) {
                        Some(q) => qi = q,
                        None => {
                            self.tenants[t].deficit = 0;
                            break;
                        }
                    }
                }
            }
            if !progress {
                break;
            }
        }
        // The next round starts with the first tenant that found no room.
        if let Some(t) = stopped_at {
            self.admit_next = t;
        }
        // A tenant a visit would leave unchanged leaves the set; arrivals,
        // activations, completions and plan changes put it back.
        for &t in &cands {
            let idle = self.tenants[t].deficit == 0 && !self.has_data_qp(t);
            if idle || !self.plans[t].windowed() || self.tenants[t].paused {
                self.ready.admit.remove(t);
            }
        }
        self.scratch.admit = cands;
        Ok(did)
    }

    /// Whether tenant `t` has a QP [`Dataplane::next_data_qp`] would admit
    /// from (without moving its round-robin pointer).
    fn has_data_qp(&self, t: usize) -> bool {
        let capped = self.plans[t].max_active_qps > 0;
        self.tenants[t].qps.iter().map(|&qi| &self.qps[qi]).any(|q| data_ready(q, capped))
    }

    /// Tenant `t`'s QP to admit data from: the one it admitted from last if
    /// that QP is in the middle of a message (messages complete one after
    /// the other), else the next of its QPs with work, round robin.
    fn next_data_qp(&mut self, t: usize) -> Option<usize> {
        let ts = &self.tenants[t];
        let m = ts.qps.len();
        let capped = self.plans[t].max_active_qps > 0;
        let ready = |q: &DpQp| data_ready(q, capped);
        let cur = *ts.qps.get(ts.next_qp % m.max(1))?;
        if self.qps[cur].cursor.is_some() && ready(&self.qps[cur]) {
            return Some(cur);
        }
        for k in 1..=m {
            let j = (ts.next_qp + k) % m;
            let qi = ts.qps[j];
            if ready(&self.qps[qi]) {
                self.tenants[t].next_qp = j;
                return Some(qi);
            }
        }
        None
    }
}

/// Whether fair admission may admit data from `q` (of a tenant `capped`
/// or not).
fn data_ready(q: &DpQp, capped: bool) -> bool {
    !q.failed && !q.parked && q.has_work() && (!capped || q.active) && q.pending_wait.is_none()
}
