//! Taking tenants' requests: the bounded request channels drained into
//! per-QP software queues (with ownership and bounds checks, and
//! back-pressure when a tenant's held work reaches its queue's capacity),
//! RECVs posted at once, refusals, and completions delivered to tenants
//! in batches (gathered in a per-tenant queue that also holds what a
//! tenant that does not poll has no room for). A round
//! drains only the tenants whose channel announced requests and flushes
//! only the tenants with an overflow (the `intake` and `overflow` ready
//! sets, `ready.rs`).

use super::*;

impl<R: Rnic> Dataplane<R> {
    pub(super) fn deliver(&mut self, t: usize, c: Completion) {
        let ts = &mut self.tenants[t];
        ts.tick.completed += 1;
        ts.delivered += 1;
        ts.tick.bytes += c.byte_len as u64;
        let lat = c.completed_ns.saturating_sub(c.posted_ns);
        ts.tick.lat_sum_ns += lat;
        ts.tick.tail.record(lat);
        self.counters.completions += 1;
        // A completion may end a QP's hold on its slot or a host hand-off's
        // drain.
        self.ready.manage.insert(t);
        // Delivered in a batch, one lock of the tenant's queue per flush
        // (`Dataplane::flush_overflow`, at the end of each round and step).
        ts.overflow.push_back(c);
        self.ready.overflow.insert(t);
    }

    /// Hands each tenant's waiting completions to its queue, as many as
    /// it has room for, in order. Returns whether any went.
    pub(super) fn flush_overflow(&mut self) -> bool {
        let mut did = false;
        let mut i = 0;
        while let Some(t) = self.ready.overflow.next_from(i) {
            i = t + 1;
            let Some(ts) = self.tenants.get_mut(t) else { break };
            did |= ts.cpl_tx.send_from(&mut ts.overflow) > 0;
            if ts.overflow.is_empty() {
                self.ready.overflow.remove(t);
            }
        }
        did
    }

    pub(super) fn refuse(&mut self, t: usize, wr: &WorkRequest, status: WcStatus, now: u64) {
        self.counters.refused += 1;
        self.deliver(t, Completion::failed(wr, status, now));
    }

    pub(super) fn drain_requests(&mut self, now: u64) -> bool {
        let mut did = false;
        let mut next = 0;
        while let Some(t) = self.ready.intake.next_below(next, self.tenants.len()) {
            next = t + 1;
            // Requests held in software count against the tenant's queue
            // too, and so do completions it has not taken: a tenant that
            // floods, or posts without polling, stays back-pressured at its
            // channel instead of growing the loop's memory.
            let mut held = self.held_requests(t);
            let unpolled = self.tenants[t].overflow.len();
            let (most, bound) = (self.cfg.max_requests_per_round, self.cfg.request_queue);
            let mut taken = 0;
            // Taken in batches, each no larger than the requests the bounds
            // still allow (a request adds at most one to `held`), so a batch
            // is never cut short.
            let mut batch = std::mem::take(&mut self.scratch.batch);
            // The ready sets learn of each QP once per run of its requests.
            let mut marked = usize::MAX;
            loop {
                if taken >= most || held >= bound || unpolled >= bound {
                    break;
                }
                if batch.is_empty()
                    && self.tenants[t].req_rx.recv_into((most - taken).min(bound - held), &mut batch) == 0
                {
                    break;
                }
                let Some(wr) = batch.pop_front() else { break };
                taken += 1;
                did = true;
                self.counters.requests += 1;
                let ts = &self.tenants[t];
                let Some(&qi) = ts.qps.get(wr.qp as usize) else {
                    self.refuse(t, &wr, WcStatus::LocQpOpErr, now);
                    continue;
                };
                let owned = ts.mrs.iter().any(|m| m.lkey == wr.mr.lkey && m.addr == wr.mr.addr && m.len == wr.mr.len);
                if !owned || wr.offset.checked_add(wr.len as u64).is_none_or(|end| end > wr.mr.len as u64) {
                    self.refuse(t, &wr, WcStatus::LocProtErr, now);
                    continue;
                }
                if self.qps[qi].failed {
                    if wr.op == RequestOp::Recv {
                        self.refuse(t, &wr, WcStatus::WrFlushErr, now);
                    } else {
                        // Behind whatever the QP still has in flight.
                        self.qps[qi].dead.push_back(Completion::failed(&wr, WcStatus::WrFlushErr, now));
                        self.flush_dead(qi);
                    }
                    continue;
                }
                if wr.op == RequestOp::Recv {
                    self.post_recv(qi, wr, now);
                    continue;
                }
                let tick = &mut self.tenants[t].tick;
                tick.ewma = if tick.ewma == 0.0 { wr.len as f64 } else { 0.5 * tick.ewma + 0.5 * wr.len as f64 };
                tick.max_msg = tick.max_msg.max(wr.len as u64);
                let q = &mut self.qps[qi];
                q.held.push_back(wr);
                held += 1;
                let depth = q.depth();
                let tick = &mut self.tenants[t].tick;
                tick.max_depth = tick.max_depth.max(depth);
                if marked != qi {
                    marked = qi;
                    self.mark_post(qi);
                    self.mark_manage(t);
                }
            }
            debug_assert!(batch.is_empty(), "a batch is taken whole");
            self.scratch.batch = batch;
            // Back in the set when its next post finds the channel empty.
            if self.tenants[t].req_rx.is_idle() {
                self.ready.intake.remove(t);
            }
        }
        did
    }

    /// Requests tenant `t` has waiting in software (not yet posted).
    pub(super) fn held_requests(&self, t: usize) -> usize {
        self.tenants[t].qps.iter().map(|&qi| self.qps[qi].held.len() + self.qps[qi].cursor.is_some() as usize).sum()
    }

    pub(super) fn post_recv(&mut self, qi: usize, wr: WorkRequest, now: u64) {
        if !self.recv_cq_room() {
            // The shared receive CQ's budget is spent (the QPs' receive
            // queues together oversubscribe it): refused like a full queue.
            let t = self.qps[qi].tenant as usize;
            self.refuse(t, &wr, WcStatus::LocQpOpErr, now);
            return;
        }
        let q = &mut self.qps[qi];
        let wr_id = ((qi as u64) << WR_QP_SHIFT) | (q.next_recv_seq & WR_SEQ_MASK);
        let sge = [wr.mr.sge(wr.offset as usize, wr.len)];
        match self.nic.post_recv(q.nic_qp, &[RecvWr { wr_id, sgl: &sge }]) {
            Ok(()) => {
                q.next_recv_seq += 1;
                q.recvs.push_back(wr);
                self.cq_used[1] += 1;
            }
            Err(e) => {
                let status = if matches!(e.error, RnicError::QueueFull { .. }) {
                    WcStatus::LocQpOpErr
                } else {
                    WcStatus::WrFlushErr
                };
                let t = q.tenant as usize;
                self.refuse(t, &wr, status, now);
            }
        }
    }
}
