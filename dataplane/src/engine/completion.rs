//! Completions: polling the shared CQs, retiring hidden WQEs (chunks and
//! zero-weight WRs) and delivering each application message's completion
//! exactly once, in per-QP order; failing a QP and flushing what it held.

use super::*;

impl<R: Rnic> Dataplane<R> {
    /// Fails QP `qi`: the message being posted completes with
    /// `cursor_status` (or the error its posted chunks met), everything
    /// held with a flush error; all of them after the messages already
    /// posted, which complete as the NIC flushes them.
    pub(super) fn fail_qp(&mut self, qi: usize, cursor_status: Option<WcStatus>) {
        let now = self.nic.clock_ns();
        let q = &mut self.qps[qi];
        q.failed = true;
        self.ready.admit.insert(q.tenant as usize);
        // The NIC flushes what it holds, signaled or not.
        self.uncovered_bytes -= std::mem::take(&mut q.unsignaled_bytes);
        // Releases still queued (or never posted) may never run: their
        // hand-offs may need rescuing.
        let releases = q.posted.releases();
        let lost = releases + q.pending_release as u32;
        q.pending_release = false;
        self.tenants[q.tenant as usize].lost_releases += lost;
        // A hidden chunk's error belongs to the first message whose last WQE
        // is still posted; if there is none, to the message being posted (its
        // first chunks failed while the rest was still in software).
        let app_posted = q.posted.has_app();
        let cursor_status = cursor_status.unwrap_or_else(|| {
            if app_posted {
                WcStatus::WrFlushErr
            } else {
                q.pending_error.take().unwrap_or(WcStatus::WrFlushErr)
            }
        });
        if let Some(c) = q.cursor.take() {
            q.dead.push_back(Completion::failed(&c.wr, cursor_status, now));
        }
        while let Some(wr) = q.held.pop_front() {
            q.dead.push_back(Completion::failed(&wr, WcStatus::WrFlushErr, now));
        }
        self.flush_dead(qi);
    }

    /// Delivers a failed QP's unposted requests' completions once every
    /// message it posted has completed (per-QP order).
    pub(super) fn flush_dead(&mut self, qi: usize) {
        let q = &mut self.qps[qi];
        if q.outstanding > 0 || q.dead.is_empty() {
            return;
        }
        let t = q.tenant as usize;
        let dead = std::mem::take(&mut q.dead);
        for c in dead {
            self.counters.refused += 1;
            self.deliver(t, c);
        }
    }

    pub(super) fn poll_completions(&mut self, now: u64) -> Result<bool, RnicError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let r = self.poll_shared(SharedCq::Send, &mut wcs, now).and_then(|sent| {
            let received = self.poll_shared(SharedCq::Recv, &mut wcs, now)?;
            Ok(sent | received)
        });
        self.wcs = wcs;
        r
    }

    /// Drains one of the shared CQs; an overrun fails what it held and
    /// replaces it ([`recovery`]). Returns whether anything completed.
    pub(super) fn poll_shared(&mut self, which: SharedCq, wcs: &mut [Wc], now: u64) -> Result<bool, RnicError> {
        let mut did = false;
        // A charged round polls at most its budget (`loop_share.rs`); the
        // rest waits in the CQ for the next round.
        let mut budget = self.poll_budget();
        loop {
            let cq = match which {
                SharedCq::Send => self.send_cq,
                SharedCq::Recv => self.recv_cq,
            };
            let want = wcs.len().min(budget);
            let n = match self.nic.poll_cq(cq, &mut wcs[..want]) {
                Ok(n) => n,
                Err(RnicError::CqOverrun { .. }) => {
                    self.on_cq_overrun(which)?;
                    return Ok(true);
                }
                Err(e) => return Err(e),
            };
            for wc in &wcs[..n] {
                self.counters.cqes_polled += 1;
                let delivered = self.counters.completions;
                match which {
                    SharedCq::Send => self.on_send_wc(wc, now),
                    SharedCq::Recv => self.on_recv_wc(wc, now),
                }
                // The loop may look at its arrivals after each completion
                // a CQE retires, not only after the CQE: one CQE of a post
                // list retires up to its whole list.
                self.mark_step(self.counters.completions - delivered);
            }
            did |= n > 0;
            budget -= n;
            if n < want || budget == 0 {
                return Ok(did);
            }
        }
    }

    pub(super) fn on_send_wc(&mut self, wc: &Wc, now: u64) {
        let qi = (wc.wr_id >> WR_QP_SHIFT) as usize;
        let seq_low = wc.wr_id & WR_SEQ_MASK;
        let Some(q) = self.qps.get_mut(qi) else { return };
        let t = q.tenant as usize;
        let index = q.index;
        // `posted` holds consecutive sequence numbers from its front to
        // `next_seq`: a completion is ours if its number lies in that range.
        let Some(front) = q.posted.front_seq() else { return };
        if seq_low.wrapping_sub(front) & WR_SEQ_MASK >= q.next_seq - front {
            return;
        }
        q.nic_progress_ns = now;
        let had_outstanding = q.outstanding > 0;
        let mut out = std::mem::take(&mut self.scratch.out);
        out.clear();
        let mut hidden = 0u64;
        let mut released = [0u64; 2];
        let mut retired = 0u64;
        let mut this_seq = None;
        loop {
            // The hidden WQEs before the one completed, a run at a time.
            let (n, held) = q.posted.retire_hidden_before(seq_low, WR_SEQ_MASK);
            if n > 0 {
                retired += n;
                hidden += n;
                released[0] += held[0];
                released[1] += held[1];
                continue;
            }
            let Some((seq, meta, charge)) = q.posted.pop_front() else { break };
            retired += 1;
            for (k, &b) in charge.held.iter().enumerate() {
                released[k] += b as u64;
            }
            let this = seq & WR_SEQ_MASK == seq_low;
            if this {
                this_seq = Some(seq);
            }
            let status = if this { wc.status } else { WcStatus::Success };
            match meta {
                Meta::Hidden | Meta::Release => {
                    hidden += 1;
                    if !status.is_ok() && q.pending_error.is_none() {
                        q.pending_error = Some(status);
                    }
                }
                Meta::App { wr_id, len, posted_ns } => {
                    let status = q.pending_error.take().unwrap_or(status);
                    q.outstanding = q.outstanding.saturating_sub(1);
                    out.push(Completion::send(wr_id, index, status, len, posted_ns, now));
                }
            }
            if this {
                break;
            }
        }
        if let Some(seq) = this_seq.filter(|_| wc.status.is_ok() && self.plans[t].windowed()) {
            self.pipeline.completed(qi, seq, now, self.link_bytes_per_ns, released);
        }
        let newly_failed = !wc.status.is_ok() && !q.failed;
        if q.posted.is_empty() {
            self.tenants[t].qps_in_nic -= 1;
            // Nothing left in the NIC: no byte of the QP waits for a signal
            // (whatever signaled it: a plan that stopped windowing it, the
            // send queue's seal).
            self.uncovered_bytes -= std::mem::take(&mut q.unsignaled_bytes);
        }
        self.tenants[t].release_window(released, self.plans[t].windowed().then_some(&mut self.windowed_inflight));
        let failed = q.failed || newly_failed;
        self.counters.hidden_completions += hidden;
        if !out.is_empty() {
            q.progress_ns = now;
        }
        for c in out.drain(..) {
            self.deliver(t, c);
        }
        self.scratch.out = out;
        // Room in its send queue and in the shared CQ.
        self.cq_retired(retired);
        self.mark_post(qi);
        let q = &self.qps[qi];
        if had_outstanding && q.outstanding == 0 && !q.active {
            // Drained out of the active set: it may now wait for a slot,
            // or free the one it held while draining.
            self.mark_manage(t);
        }
        if newly_failed {
            self.fail_qp(qi, None);
        } else if failed {
            self.flush_dead(qi);
        }
    }

    pub(super) fn on_recv_wc(&mut self, wc: &Wc, now: u64) {
        let qi = (wc.wr_id >> WR_QP_SHIFT) as usize;
        let Some(q) = self.qps.get_mut(qi) else { return };
        let Some(wr) = q.recvs.pop_front() else { return };
        self.cq_used[1] = self.cq_used[1].saturating_sub(1);
        let t = q.tenant as usize;
        let c = Completion::recv(&wr, q.index, wc.status, wc.byte_len, wc.imm, now);
        self.deliver(t, c);
    }
}
