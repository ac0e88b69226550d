//! Posting: each allowed QP's next WQEs (data chunks, zero-weight WRs,
//! WAITs for a pending hand-off) built from its held requests and the
//! policy's split plan, within the send queue's room and the tenant's
//! token bucket, and handed to the NIC as one post list. A round visits
//! only the QPs in the `post` ready set (`ready.rs`): a QP leaves it when
//! it stops, whatever the reason, and the event that lifts the reason
//! (a completion freeing room, an arrival, an activation, a pacing change
//! or bucket timer, room in the shared CQ) marks it again.

use super::active_set::quantum_hit;
use super::loop_share::WqeCounts;
use super::pipeline::PostedWqe;
use super::signaling::WindowedStep;
use super::whole_lane::LaneList;
use super::*;

impl<R: Rnic> Dataplane<R> {
    pub(super) fn post_all(&mut self, now: u64) -> Result<bool, RnicError> {
        // Tenants with an in-flight window post their data through fair
        // admission (`admission.rs`); here they post only control WQEs.
        let mut did = if self.windowed { self.admit(now)? } else { false };
        // With the loop's time shared (`loop_share.rs`), each tenant's QPs
        // are walked from where its credit last ran out: its QPs from
        // there on in a first pass, the ones before it in a second.
        let passes = if self.loop_shared() { 2 } else { 1 };
        for pass in 0..passes {
            did |= self.post_pass(now, pass == 0)?;
        }
        Ok(did)
    }

    /// One walk over the `post` ready set: the QPs at or after their
    /// tenant's start in this round (`first`), or those before it.
    fn post_pass(&mut self, now: u64, first: bool) -> Result<bool, RnicError> {
        let mut did = false;
        let mut next = 0;
        while let Some(qi) = self.ready.post.next_below(next, self.qps.len()) {
            next = qi + 1;
            let start = self.post_start(self.qps[qi].tenant as usize);
            if (qi >= start) != first || !self.in_step(self.qps[qi].tenant as usize) {
                continue;
            }
            self.ready.post.remove(qi);
            let t = self.qps[qi].tenant as usize;
            let allowed = !self.tenants[t].paused && (self.plans[t].max_active_qps == 0 || self.qps[qi].active);
            if self.qps[qi].failed {
                continue;
            }
            let max_chunks = if self.windowed && self.plans[t].windowed() { 0 } else { u32::MAX };
            let wants = self.qps[qi].pending_release
                || (allowed && (self.qps[qi].has_work() || self.qps[qi].pending_wait.is_some()));
            if wants && self.post_qp(qi, allowed, now, max_chunks)? {
                did = true;
                // A post moves the QP towards its quantum, may end its
                // work, and a posted WAIT lets fair admission feed it.
                self.mark_manage(t);
                self.ready.admit.insert(t);
            }
        }
        Ok(did)
    }

    /// Posts QP `qi`'s pending control WQEs and, if `allowed`, up to
    /// `max_chunks` data chunks (whole messages or sub-requests).
    pub(super) fn post_qp(&mut self, qi: usize, allowed: bool, now: u64, max_chunks: u32) -> Result<bool, RnicError> {
        let depth = self.cfg.sq_depth;
        let signal_every = (depth / 4).max(1);
        let zero_weight = self.zero_weight_opcode();
        let turn_bytes = self.wqe_turn_bytes;
        let t = self.qps[qi].tenant as usize;
        let pcq_ops = self.tenants[t].pcq.as_ref().map(|p| (p.release(), p.cq));
        let plan = self.plans[t];
        let capped = plan.max_active_qps > 0;
        let mut specs = std::mem::take(&mut self.specs);
        specs.clear();
        // The shared send CQ's budget, when the QPs' queues oversubscribe it:
        // control WQEs may use all of it, data WQEs what is left beside
        // every QP's control reserve.
        let budget = self.send_cq_budget();
        let ctrl_budget = budget.saturating_add(self.qps.len() as u64 * CTRL_RESERVE as u64);
        let q = &mut self.qps[qi];
        let sq_free = depth.saturating_sub(q.posted.len() as u32);
        let mut free = sq_free.min(ctrl_budget.min(u32::MAX as u64) as u32);
        let cq_bound = free < sq_free;
        // The release ends the QP's previous stream, so it goes first.
        if q.pending_release && free > 0 {
            if let Some((release, _)) = pcq_ops {
                specs.push(WqeSpec {
                    opcode: release,
                    sge: None,
                    inline: false,
                    signaled: false,
                    meta: Meta::Release,
                    charge: WindowCharge::default(),
                });
                q.since_signal += 1;
                free -= 1;
            }
            q.pending_release = false;
        }
        if let (Some(count), Some((_, pcq_cq))) = (q.pending_wait, pcq_ops) {
            if free == 0 {
                if cq_bound {
                    self.cq_waiters.push(qi);
                    self.counters.cq_budget_holds += 1;
                }
                self.specs = specs;
                return self.post_specs(qi);
            }
            specs.push(WqeSpec {
                opcode: WrOpcode::Wait { cq: pcq_cq, count },
                sge: None,
                inline: false,
                signaled: false,
                meta: Meta::Hidden,
                charge: WindowCharge::default(),
            });
            q.pending_wait = None;
            q.waiting_on = Some(count);
            q.since_signal += 1;
            free -= 1;
        }
        let controls = specs.len() as u64;
        let data_budget = budget.saturating_sub(controls).min(u32::MAX as u64) as u32;
        let sq_room = free.saturating_sub(CTRL_RESERVE);
        let mut room = sq_room.min(data_budget);
        let cq_bound = cq_bound || room < sq_room;
        let mut chunks = 0u32;
        let mut held = false;
        let mut grouped = 0u64;
        let lane = self.whole_lane_open(&plan, max_chunks);
        while allowed && !self.qps[qi].failed && chunks < max_chunks {
            if !self.loop_may_post(t) {
                // Work left for the next round: this one counts as busy.
                self.loop_held(qi);
                held = true;
                break;
            }
            if !self.tenants[t].bucket.may_post(now) {
                self.counters.paced_holds += 1;
                // Visited again when the debt is paid (a paused bucket
                // waits for the policy's next pacing).
                if let Some(at) = self.tenants[t].bucket.ready_at() {
                    self.arm_bucket(t, at);
                }
                break;
            }
            if lane && self.qps[qi].cursor.is_none() {
                let mut list =
                    LaneList { specs: &mut specs, room: &mut room, grouped: &mut grouped, signal_every, turn_bytes };
                let n = self.post_whole_run(qi, t, now, &mut list);
                if n > 0 {
                    chunks += n;
                    continue;
                }
            }
            let q = &mut self.qps[qi];
            if q.cursor.is_none() {
                if capped && quantum_hit(q, &plan) {
                    break;
                }
                let Some(wr) = q.held.pop_front() else { break };
                let req = request_info(t as u32, &wr, q.depth() + 1);
                // The split plan is decided when the message starts, so it
                // reflects the policy's current view.
                let timer = self.timed.then(std::time::Instant::now);
                let mut split = self.policy.on_request(&req, &self.plans[t]);
                if let Some(t0) = timer {
                    self.counters.policy_ns += t0.elapsed().as_nanos() as u64;
                }
                let call = self.call_cost_ps();
                self.charge_loop(t, call);
                // A chunk and its zero-weight WRs must fit an empty send
                // queue (beside a WAIT and the control reserve), or the QP
                // could never post again.
                let max_zw = depth.saturating_sub(CTRL_RESERVE + 2);
                split.zero_weight_per_chunk =
                    handoff::zero_weight_per_chunk(split.zero_weight_per_chunk.min(max_zw), pcq_ops.is_some());
                // Every message that consumes a RECV of the peer's takes the
                // next one. Split, such a message needs the receiving end
                // of the dataplane (`crate::rendezvous`): a record of its
                // whole length for the RECV's completion, and for a SEND
                // the RECV's buffer, advertised. Without them it goes whole.
                let consumes_recv = matches!(wr.op, RequestOp::Send | RequestOp::WriteImm { .. });
                let seq = self.qps[qi].peer_recvs;
                self.qps[qi].peer_recvs += consumes_recv as u64;
                let (mut rendezvous, mut record) = (None, None);
                if consumes_recv && split.chunk_bytes > 0 && wr.len > split.chunk_bytes {
                    let send = wr.op == RequestOp::Send;
                    rendezvous = send.then(|| self.advertised_recv(qi, seq, wr.len)).flatten();
                    if send && rendezvous.is_none() && self.wait_for_descriptor(qi, now) {
                        // Not started: it keeps its place at the head, and
                        // its RECV (asked for again when it starts).
                        self.qps[qi].held.push_front(wr);
                        self.qps[qi].peer_recvs = seq;
                        break;
                    }
                    self.qps[qi].descriptor_wait_since = None;
                    if !send || rendezvous.is_some() {
                        record = self.stage_record(qi, seq, wr.len);
                    }
                    if record.is_none() {
                        rendezvous = None;
                        split.chunk_bytes = 0;
                    }
                }
                if rendezvous.is_some() {
                    self.counters.rendezvous_sends += 1;
                }
                self.qps[qi].cursor = Some(Cursor { wr, plan: split, offset: 0, rendezvous, record });
            }
            let q = &mut self.qps[qi];
            let Some(cur) = q.cursor.as_mut() else { break };
            let before = specs.len();
            let since_before = q.since_signal;
            let mut sink = WqeSink {
                zero_weight,
                signal_every,
                since_signal: &mut q.since_signal,
                out: &mut specs,
                turn_bytes,
                grouped_bytes: grouped,
            };
            match emit_chunk(cur, room, &mut sink) {
                None => {
                    if cq_bound {
                        self.cq_waiters.push(qi);
                        self.counters.cq_budget_holds += 1;
                    }
                    break;
                }
                Some(done) => {
                    let msg_len = cur.wr.len as u64;
                    chunks += 1;
                    room -= (specs.len() - before) as u32;
                    let bytes: u64 = specs[before..].iter().filter_map(|s| s.sge).map(|g| g.length as u64).sum();
                    self.tenants[t].bucket.take(bytes);
                    let mut probe = false;
                    if let Some((c, inline)) = specs.get(before).map(|s| (s.charge, s.inline)) {
                        if plan.windowed() && c.bytes() > 0 {
                            let ahead = self.windowed_inflight[c.read as usize];
                            let seq = q.next_seq + before as u64;
                            let fetched = !inline && !c.read;
                            let wqe = PostedWqe { read: c.read, qp: qi, seq, bytes: c.bytes() as u64, fetched };
                            probe = self.pipeline.posted(wqe, now, ahead);
                        }
                        self.tenants[t].charge_window(c, plan.windowed().then_some(&mut self.windowed_inflight));
                    }
                    if plan.windowed() {
                        // The message's end needs a signal where grouping
                        // says so (`split::GROUP_BYTES`); the list's seal
                        // covers the rest.
                        let message_end = done && specs[before..].iter().any(|s| s.signaled && s.meta.is_app());
                        let step = WindowedStep { probe, message_end, since_before };
                        self.signal_windowed(qi, step, signal_every, &mut specs[before..]);
                    }
                    grouped = split::grouped_after(grouped, &specs[before..]);
                    let q = &mut self.qps[qi];
                    if done {
                        q.cursor = None;
                        q.outstanding += 1;
                        q.active_requests += 1;
                        q.active_bytes += msg_len;
                    }
                    // Charged as built, so the credit stops the list (a
                    // list sealed later pays for its seal when posted).
                    let built = &specs[before..];
                    let signaled = built.iter().filter(|s| s.signaled).count() as u64;
                    let parts = built.iter().filter(|s| s.sge.is_some_and(|g| split::is_chunk(s, g))).count() as u64;
                    let inline = built.iter().filter(|s| s.inline).count() as u64;
                    let wqes = WqeCounts { wqes: built.len() as u64, chunks: parts, inline, signaled };
                    let ps = self.post_cost_ps(wqes, done as u64);
                    self.precharge_loop(t, ps);
                }
            }
        }
        self.specs = specs;
        Ok(self.post_specs(qi)? | held)
    }

    /// The zero-weight WR the running policy asks for (ABI 1.6).
    pub(super) fn zero_weight_opcode(&self) -> WrOpcode {
        split::zero_weight(self.policy.zero_weight_op(), self.zw_cq)
    }

    /// Posts one signaled zero-weight WR on QP `qi`: its CQE retires the
    /// QP's WQEs posted before it (a cover signal for unsignaled chunks, a
    /// flushed QP's drain marker). Returns whether it was posted.
    pub(super) fn post_signaled_zero_weight(&mut self, qi: usize) -> Result<bool, RnicError> {
        let mut specs = std::mem::take(&mut self.specs);
        specs.clear();
        specs.push(WqeSpec::zero_weight(self.zero_weight_opcode(), true));
        self.specs = specs;
        self.post_specs(qi)
    }

    /// Posts the WQEs built in `self.specs` to QP `qi` as one post list.
    pub(super) fn post_specs(&mut self, qi: usize) -> Result<bool, RnicError> {
        let mut specs = std::mem::take(&mut self.specs);
        let signal_every = (self.cfg.sq_depth / 4).max(1);
        let zw_cq = self.zw_cq;
        let t = self.qps[qi].tenant as usize;
        let q = &mut self.qps[qi];
        if specs.is_empty() {
            self.specs = specs;
            self.settle_loop(t, 0);
            return Ok(false);
        }
        // Seal the list with a signal if the unsignaled tail grew long, or
        // if a message at its end would otherwise wait for the next list.
        let seal = q.since_signal >= signal_every || split::ends_unsignaled(&specs);
        if let Some(last) = specs.last_mut() {
            if seal {
                last.signaled = true;
                q.since_signal = 0;
                self.uncovered_bytes -= std::mem::take(&mut q.unsignaled_bytes);
            }
        }
        let base = q.next_seq;
        let nic_qp = q.nic_qp;
        let mut sges = std::mem::take(&mut self.scratch.sges);
        sges.clear();
        sges.extend(specs.iter().map(|s| [s.sge.unwrap_or(Sge { addr: 0, length: 0, lkey: 0 })]));
        // Inline payloads: the CPU copies the bytes out of the tenant's
        // buffer, one after another into the reused inline arena.
        let mut inline = std::mem::take(&mut self.scratch.inline);
        inline.clear();
        let mut inline_ends = std::mem::take(&mut self.scratch.inline_ends);
        inline_ends.clear();
        // A list's inline payloads mostly come from one region: the last
        // one found is looked at first.
        let mut found: Option<Mr> = None;
        for s in specs.iter().filter(|s| s.inline) {
            let Some(sge) = s.sge else { continue };
            let start = inline.len();
            inline.resize(start + sge.length as usize, 0);
            if found.is_none_or(|m| m.lkey != sge.lkey) {
                let ring = q.rendezvous.map(|r| r.ring);
                found = self.tenants[t].mrs.iter().chain(ring.iter()).find(|m| m.lkey == sge.lkey).copied();
            }
            if let Some(mr) = found {
                if let Err(e) = self.nic.read_mr(mr.handle, (sge.addr - mr.addr) as usize, &mut inline[start..]) {
                    self.scratch.inline = inline;
                    self.scratch.inline_ends = inline_ends;
                    return Err(e);
                }
            }
            inline_ends.push(inline.len());
        }
        let mut inline_iter = inline_ends.iter().scan(0, |start, &end| {
            let bytes = &inline[*start..end];
            *start = end;
            Some(bytes)
        });
        let mut wrs = recycle(std::mem::take(&mut self.scratch.wrs));
        wrs.extend(specs.iter().zip(&sges).enumerate().map(|(k, (s, sge))| SendWr {
            wr_id: ((qi as u64) << WR_QP_SHIFT) | ((base + k as u64) & WR_SEQ_MASK),
            opcode: s.opcode,
            payload: match (s.sge.is_some(), s.inline) {
                (true, true) => inline_iter.next().map_or(Payload::Sges(sge), Payload::Inline),
                (true, false) => Payload::Sges(sge),
                _ => Payload::None,
            },
            signaled: s.signaled,
        }));
        let result = self.nic.post_send(nic_qp, &wrs);
        let posted = match &result {
            Ok(()) => specs.len(),
            Err(e) => e.index,
        };
        wrs.clear();
        self.scratch.wrs = recycle(wrs);
        self.scratch.sges = sges;
        self.scratch.inline = inline;
        self.scratch.inline_ends = inline_ends;
        let q = &mut self.qps[qi];
        if q.posted.is_empty() && posted > 0 {
            self.tenants[t].qps_in_nic += 1;
        }
        let (mut signaled, mut messages) = (0u64, 0u64);
        let (chunks_before, inline_before) = (self.counters.chunks, self.counters.inline_wqes);
        for (k, s) in specs.iter().take(posted).enumerate() {
            q.posted.push(base + k as u64, s.meta, s.charge);
            signaled += s.signaled as u64;
            messages += s.meta.is_app() as u64;
            if let Some(sge) = s.sge {
                self.counters.data_wqes += 1;
                self.counters.chunks += split::is_chunk(s, sge) as u64;
                self.counters.inline_wqes += s.inline as u64;
            } else if split::is_zero_weight(&s.opcode, zw_cq) {
                self.counters.zero_weight_wrs += 1;
            }
        }
        q.next_seq = base + posted as u64;
        let chunks = self.counters.chunks - chunks_before;
        let inline = self.counters.inline_wqes - inline_before;
        let ps = self.post_cost_ps(WqeCounts { wqes: posted as u64, chunks, inline, signaled }, messages);
        self.settle_loop(t, ps);
        self.cq_used[0] += posted as u64;
        self.counters.wqes_posted += posted as u64;
        self.counters.doorbells += 1;
        self.mark_step(posted as u64);
        if result.is_err() {
            // The NIC refused part of the list (the QP is broken): the first
            // message it cut completes with a local QP error, every later one
            // with a flush error, after what was posted before them.
            let now = self.nic.clock_ns();
            let mut first = Some(WcStatus::LocQpOpErr);
            let q = &mut self.qps[qi];
            let lost = specs[posted..].iter().filter(|s| matches!(s.meta, Meta::Release)).count();
            self.tenants[t].lost_releases += lost as u32;
            let mut unposted = [0u64; 2];
            for s in &specs[posted..] {
                for (k, &b) in s.charge.held.iter().enumerate() {
                    unposted[k] += b as u64;
                }
            }
            self.tenants[t].release_window(unposted, self.plans[t].windowed().then_some(&mut self.windowed_inflight));
            for s in &specs[posted..] {
                if let Meta::App { wr_id, posted_ns, .. } = s.meta {
                    let status = first.take().unwrap_or(WcStatus::WrFlushErr);
                    q.outstanding = q.outstanding.saturating_sub(1);
                    q.dead.push_back(Completion::send(wr_id, q.index, status, 0, posted_ns, now));
                }
            }
            self.fail_qp(qi, Some(first.unwrap_or(WcStatus::WrFlushErr)));
        }
        self.specs = specs;
        Ok(true)
    }
}

/// What the policy sees of a request.
fn request_info(tenant: u32, wr: &WorkRequest, depth: u32) -> RequestInfo {
    RequestInfo { tenant, qp: wr.qp, len: wr.len as u64, op: policy_op(&wr.op), depth }
}

/// How the policy sees a request's operation.
pub(super) fn policy_op(op: &RequestOp) -> PolicyOp {
    match op {
        RequestOp::Send => PolicyOp::Send,
        RequestOp::Read { .. } => PolicyOp::Read,
        _ => PolicyOp::Write,
    }
}
