//! The RC transport: what the responder does with an arriving message
//! (key checks, placing the bytes, consuming RECVs, READ responses), the
//! answers (ACK, NAK, RNR NAK) back at the requester, in-order completion,
//! and the ERR state's flush.

use smallvec::SmallVec;

use super::dma::{After, Piece};
use super::memory::Span;
use super::qp::WqeStage;
use super::qp::{PeerRef, ReadResponse};
use super::wire::{Seg, SegKind};
use super::world::{Answer, Event, World};
use crate::rnic::{AccessFlags, QpState, Sge, Wc, WcOpcode, WcStatus, WrOpcode};

/// The bytes of a request: gathered SGEs or an inline copy.
enum Source {
    Sges(SmallVec<[Sge; 2]>),
    Inline(SmallVec<[u8; 32]>),
}

impl World {
    /// Schedules an answer to requester QP `qi` of host `h`, sent by host
    /// `from` (`h` itself when it crosses no wire), `delay` from now.
    #[allow(clippy::too_many_arguments, reason = "the fields of one scheduled answer")]
    pub(crate) fn answer_at(
        &mut self,
        h: usize,
        qi: u32,
        wqe: u64,
        epoch: u32,
        answer: Answer,
        delay: u64,
        from: usize,
    ) {
        let at = self.now + delay;
        self.schedule(at, Event::Answer { host: h, qp: qi, wqe, epoch, answer, from });
    }

    fn ack_delay(&self) -> u64 {
        self.prof.ack_turnaround_ps + self.prof.propagation_ps + self.prof.cqe_write_ps
    }

    pub(crate) fn on_deliver(&mut self, seg: Seg) {
        match seg.kind {
            SegKind::Request => self.deliver_request(seg),
            SegKind::ReadResponse => self.deliver_read_response(seg),
        }
    }

    fn deliver_request(&mut self, seg: Seg) {
        let (h, qi) = (seg.src_host, seg.qp);
        let Some(q) = self.qp(h, qi) else { return };
        let Some(peer) = q.peer else { return };
        let Some(e) = q.entry(seg.wqe) else { return };
        let (op, len) = (e.op, e.len);
        let req_lost = q.req_lost_at.filter(|_| q.epoch == seg.epoch);
        let source = match &e.inline {
            Some(b) => Source::Inline(b.clone()),
            None => Source::Sges(e.sgl.clone()),
        };
        let delay = self.ack_delay();
        let r = peer.host;
        let me = PeerRef { host: h, qp: qi };
        // An RC responder takes packets only from the QP it is connected
        // to: one connected elsewhere (or not at all) drops them, as a QP
        // whose context names another remote QP fails the packet's header
        // checks, and the requester's transport timer runs out.
        let responder_ok = self
            .qp(r, peer.qp)
            .is_some_and(|rq| matches!(rq.state, QpState::Rtr | QpState::Rts) && rq.peer == Some(me));
        if !responder_ok {
            let timeout = self.prof.transport_timeout_ps * (q.retry_cnt as u64 + 1);
            self.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Nak(WcStatus::RetryExcErr), timeout, h);
            return;
        }
        let Some(rq) = self.qp_mut(r, peer.qp) else { return };
        if rq.resp_from != Some(me) {
            // A new requester: nothing of the previous one's exchange applies.
            rq.resp_from = Some(me);
            rq.resp_next = 0;
            rq.resp_min_epoch = 0;
        }
        if seg.epoch < rq.resp_min_epoch {
            return;
        }
        // Packets of this generation were lost before this message: the
        // responder discards it and the rest of the generation, and asks
        // for a retransmission from the lost one (sequence-error NAK).
        if let Some(lost) = req_lost.filter(|&l| l <= seg.wqe) {
            if let Some(rq) = self.qp_mut(r, peer.qp) {
                rq.resp_min_epoch = seg.epoch + 1;
            }
            self.faults.seq_naks += 1;
            return self.answer_at(h, qi, lost, seg.epoch, Answer::SeqNak, delay, r);
        }
        let Some(rq) = self.qp(r, peer.qp) else { return };
        let duplicate = seg.wqe < rq.resp_next;
        if duplicate && self.dma_busy(h, qi) {
            // Its placement is still being made: its answer follows that.
            self.faults.duplicates += 1;
            return;
        }
        if duplicate {
            self.faults.duplicates += 1;
            // Executed before, its answer lost: answer again, do not
            // execute again (a READ is read again).
            if !matches!(op, WrOpcode::Read { .. }) {
                return self.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Ack, delay, r);
            }
        }
        let Some(rq) = self.qp(r, peer.qp) else { return };
        let (rpd, raccess) = (rq.pd, rq.access);
        let nak = |w: &mut World, status: WcStatus| {
            if let Some(rq) = w.qp_mut(r, peer.qp) {
                rq.resp_min_epoch = seg.epoch + 1;
            }
            w.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Nak(status), delay, r);
        };
        match op {
            WrOpcode::Write { remote } | WrOpcode::WriteImm { remote, .. } => {
                let imm = if let WrOpcode::WriteImm { imm, .. } = op { Some(imm) } else { None };
                if imm.is_some() && self.qp(r, peer.qp).is_some_and(|rq| rq.rq.is_empty()) {
                    return self.rnr(seg, r, peer.qp);
                }
                let dst = match self.mems[r].resolve(remote.rkey, remote.addr, len, rpd, AccessFlags::REMOTE_WRITE) {
                    Ok(_) if !raccess.contains(AccessFlags::REMOTE_WRITE) => return nak(self, WcStatus::RemAccessErr),
                    Ok((mr, off)) => Span { host: r, mr, off, len: len as usize },
                    Err(_) => return nak(self, WcStatus::RemAccessErr),
                };
                if self.dma_defers(h, qi, len as usize) {
                    let pieces = self.pieces(h, &source, &[dst]);
                    self.executed(r, peer.qp, seg.wqe);
                    let imm = match imm {
                        None => None,
                        Some(imm) => {
                            let Some(recv) = self.qp_mut(r, peer.qp).and_then(|rq| rq.rq.pop_front()) else { return };
                            Some((recv.wr_id, imm))
                        }
                    };
                    let (wqe, epoch, len) = (seg.wqe, seg.epoch, len as u32);
                    let then = After::Write { r, rqi: peer.qp, wqe, epoch, len, imm, delay };
                    return self.dma_queue(h, qi, pieces, then);
                }
                self.place(h, &source, &[dst]);
                self.executed(r, peer.qp, seg.wqe);
                if let Some(imm) = imm {
                    let Some(recv) = self.qp_mut(r, peer.qp).and_then(|rq| rq.rq.pop_front()) else { return };
                    self.recv_cqe(r, peer.qp, recv.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, len, Some(imm));
                }
                self.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Ack, delay, r);
            }
            WrOpcode::Send | WrOpcode::SendImm { .. } => {
                let imm = if let WrOpcode::SendImm { imm } = op { Some(imm) } else { None };
                let Some(recv) = self.qp_mut(r, peer.qp).and_then(|rq| rq.rq.pop_front()) else {
                    return self.rnr(seg, r, peer.qp);
                };
                let room: u64 = recv.sgl.iter().map(|s| s.length as u64).sum();
                if room < len {
                    self.recv_cqe(r, peer.qp, recv.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0, None);
                    self.qp_error(r, peer.qp);
                    return nak(self, WcStatus::RemInvReqErr);
                }
                let mut spans: SmallVec<[Span; 2]> = SmallVec::new();
                let mut left = len;
                for s in &recv.sgl {
                    if left == 0 {
                        break;
                    }
                    let n = left.min(s.length as u64);
                    match self.mems[r].resolve(s.lkey, s.addr, n, rpd, AccessFlags::LOCAL_WRITE) {
                        Ok((mr, off)) => spans.push(Span { host: r, mr, off, len: n as usize }),
                        Err(_) => {
                            self.recv_cqe(r, peer.qp, recv.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, 0, None);
                            self.qp_error(r, peer.qp);
                            return nak(self, WcStatus::RemOpErr);
                        }
                    }
                    left -= n;
                }
                if self.dma_defers(h, qi, len as usize) {
                    let pieces = self.pieces(h, &source, &spans);
                    self.executed(r, peer.qp, seg.wqe);
                    let (wqe, epoch, wr_id) = (seg.wqe, seg.epoch, recv.wr_id);
                    let then = After::Send { r, rqi: peer.qp, wqe, epoch, len: len as u32, wr_id, imm, delay };
                    return self.dma_queue(h, qi, pieces, then);
                }
                self.place(h, &source, &spans);
                self.executed(r, peer.qp, seg.wqe);
                self.recv_cqe(r, peer.qp, recv.wr_id, WcStatus::Success, WcOpcode::Recv, len, imm);
                self.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Ack, delay, r);
            }
            WrOpcode::Read { remote } => {
                if self.mems[r].resolve(remote.rkey, remote.addr, len, rpd, AccessFlags::REMOTE_READ).is_err()
                    || !raccess.contains(AccessFlags::REMOTE_READ)
                {
                    return nak(self, WcStatus::RemAccessErr);
                }
                self.executed(r, peer.qp, seg.wqe);
                // The response is sent by the responder QP, in turns its
                // host's send scheduler grants like any other.
                let resp = ReadResponse { req_host: h, req_qp: qi, wqe: seg.wqe, epoch: seg.epoch, len, sent: 0 };
                if let Some(rq) = self.qp_mut(r, peer.qp) {
                    rq.responses.push_back(resp);
                }
                self.requeue(r, peer.qp);
            }
            WrOpcode::Wait { .. } | WrOpcode::SendEnable { .. } | WrOpcode::Nop => {}
        }
    }

    fn rnr(&mut self, seg: Seg, r: usize, rqi: u32) {
        if let Some(rq) = self.qp_mut(r, rqi) {
            rq.resp_min_epoch = seg.epoch + 1;
        }
        let delay = self.ack_delay();
        self.answer_at(seg.src_host, seg.qp, seg.wqe, seg.epoch, Answer::Rnr, delay, r);
    }

    /// Responder QP `rqi` of host `r` executed its peer's request `wqe`.
    fn executed(&mut self, r: usize, rqi: u32, wqe: u64) {
        if let Some(rq) = self.qp_mut(r, rqi) {
            rq.resp_next = rq.resp_next.max(wqe + 1);
        }
    }

    fn deliver_read_response(&mut self, seg: Seg) {
        let (h, qi) = (seg.dst_host, seg.qp);
        let Some(q) = self.qp(h, qi) else { return };
        if q.epoch != seg.epoch || q.state != QpState::Rts {
            return;
        }
        // A response beyond one whose packets were lost: go back to it.
        if let Some(lost) = q.resp_lost_at.filter(|&l| l <= seg.wqe) {
            self.faults.seq_naks += 1;
            let now = self.now;
            return self.rewind(h, qi, lost, now);
        }
        let Some(peer) = q.peer else { return };
        let Some(e) = q.entry(seg.wqe) else { return };
        let WrOpcode::Read { remote } = e.op else { return };
        let (len, sgl, pd) = (e.len, e.sgl.clone(), q.pd);
        let rpd = self.qp(peer.host, peer.qp).map_or(u32::MAX, |rq| rq.pd);
        let src = match self.mems[peer.host].resolve(remote.rkey, remote.addr, len, rpd, AccessFlags::REMOTE_READ) {
            Ok((mr, off)) => Span { host: peer.host, mr, off, len: len as usize },
            Err(_) => {
                let d = self.prof.cqe_write_ps;
                return self.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Nak(WcStatus::RemAccessErr), d, h);
            }
        };
        let defer = self.dma_defers(h, qi, len as usize);
        let mut pieces = Vec::new();
        let mut off = 0usize;
        for s in &sgl {
            let Ok((mr, doff)) = self.mems[h].resolve(s.lkey, s.addr, s.length as u64, pd, AccessFlags::LOCAL_WRITE)
            else {
                continue;
            };
            let piece = Span { host: peer.host, mr: src.mr, off: src.off + off, len: s.length as usize };
            let dst = Span { host: h, mr, off: doff, len: s.length as usize };
            if defer {
                pieces.push(Piece::Copy { src: piece, dst });
            } else {
                self.copier.copy(&mut self.mems, piece, dst);
            }
            off += s.length as usize;
        }
        let d = self.prof.cqe_write_ps;
        if defer {
            let then = After::ReadResponse { wqe: seg.wqe, epoch: seg.epoch, delay: d };
            return self.dma_queue(h, qi, pieces, then);
        }
        self.answer_at(h, qi, seg.wqe, seg.epoch, Answer::Ack, d, h);
    }

    /// Copies a request's bytes (gathered from requester host `h`) into `dst`.
    fn place(&mut self, h: usize, source: &Source, dst: &[Span]) {
        self.each_piece(h, source, dst, |w, p| match p {
            Piece::Copy { src, dst } => w.copier.copy(&mut w.mems, src, dst),
            Piece::Bytes { data, dst } => w.copier.write_bytes(&mut w.mems, &data, dst),
        });
    }

    /// The pieces [`World::place`] would copy, for the DMA queues.
    fn pieces(&mut self, h: usize, source: &Source, dst: &[Span]) -> Vec<Piece> {
        let mut out = Vec::new();
        self.each_piece(h, source, dst, |_, p| out.push(p));
        out
    }

    /// Calls `f` with each piece of a request's bytes (gathered from
    /// requester host `h`) to place in `dst`, in order.
    fn each_piece(&mut self, h: usize, source: &Source, dst: &[Span], mut f: impl FnMut(&mut World, Piece)) {
        match source {
            Source::Inline(bytes) => {
                let mut at = 0;
                for d in dst {
                    f(self, Piece::Bytes { data: SmallVec::from_slice(&bytes[at..at + d.len]), dst: *d });
                    at += d.len;
                }
            }
            Source::Sges(sgl) => {
                let mut srcs: SmallVec<[Span; 2]> = SmallVec::new();
                for s in sgl {
                    if let Ok((mr, off)) = self.mems[h].resolve_any(s.lkey, s.addr, s.length as u64) {
                        srcs.push(Span { host: h, mr, off, len: s.length as usize });
                    }
                }
                let (mut si, mut so, mut di, mut doff) = (0usize, 0usize, 0usize, 0usize);
                while si < srcs.len() && di < dst.len() {
                    let n = (srcs[si].len - so).min(dst[di].len - doff);
                    let a = Span { off: srcs[si].off + so, len: n, ..srcs[si] };
                    let b = Span { off: dst[di].off + doff, len: n, ..dst[di] };
                    f(self, Piece::Copy { src: a, dst: b });
                    so += n;
                    doff += n;
                    if so == srcs[si].len {
                        si += 1;
                        so = 0;
                    }
                    if doff == dst[di].len {
                        di += 1;
                        doff = 0;
                    }
                }
            }
        }
    }

    pub(crate) fn on_answer(&mut self, h: usize, qi: u32, wqe: u64, epoch: u32, answer: Answer, from: usize) {
        if self.answer_lost(h, from, answer) {
            return self.note_lost_answer(h, qi, epoch, answer);
        }
        let rnr_timer = self.prof.rnr_timer_ps;
        let now = self.now;
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.epoch != epoch || q.state != QpState::Rts {
            return;
        }
        q.last_progress = now;
        q.retry_left = q.retry_cnt;
        let acks_lost = q.acks_lost > 0;
        match answer {
            Answer::Ack => {
                // A response beyond a READ response that was lost.
                if let Some(lost) = q.resp_lost_at.filter(|&l| l < wqe) {
                    self.faults.seq_naks += 1;
                    return self.rewind(h, qi, lost, now);
                }
                if let Some(e) = q.entry_mut(wqe) {
                    e.stage = WqeStage::Done(WcStatus::Success);
                    let len = e.len;
                    q.stats.bytes += len;
                    q.stats.data_wqes += 1;
                }
                q.rnr_left = q.rnr_retry;
                if acks_lost {
                    self.cumulative_ack(h, qi, wqe);
                }
            }
            Answer::Nak(status) => {
                if let Some(e) = q.entry_mut(wqe) {
                    e.stage = WqeStage::Done(status);
                }
                if acks_lost {
                    self.cumulative_ack(h, qi, wqe);
                }
            }
            Answer::SeqNak => {
                // Everything before the gap was executed.
                let from = q.resp_lost_at.map_or(wqe, |l| l.min(wqe));
                self.cumulative_ack(h, qi, from);
                self.rewind(h, qi, from, now);
            }
            Answer::Rnr => {
                if q.rnr_left == 0 {
                    if let Some(e) = q.entry_mut(wqe) {
                        e.stage = WqeStage::Done(WcStatus::RnrRetryExcErr);
                    }
                } else {
                    if q.rnr_left != 7 {
                        q.rnr_left -= 1;
                    }
                    return self.rewind(h, qi, wqe, now + rnr_timer);
                }
            }
        }
        self.complete_in_order(h, qi);
    }

    /// Produces CQEs, in send-queue order, for every decided WQE at the
    /// front; an error completion moves the QP to ERR.
    pub(crate) fn complete_in_order(&mut self, h: usize, qi: u32) {
        let now_ns = self.now / super::profile::PS_PER_NS;
        loop {
            let Some(q) = self.qp_mut(h, qi) else { return };
            let idx = q.complete_next;
            let Some(e) = q.entry(idx) else { return };
            let WqeStage::Done(status) = e.stage else { return };
            let report = e.signaled || q.sig_all || !status.is_ok();
            let wc = Wc {
                wr_id: e.wr_id,
                status,
                opcode: e.op.wc_opcode(),
                byte_len: e.len as u32,
                imm: None,
                qp_num: q.qp_num,
                timestamp_ns: now_ns,
            };
            let cq = q.send_cq;
            q.complete_next += 1;
            if report {
                while q.sq_base <= idx {
                    q.sq.pop_front();
                    q.sq_base += 1;
                }
                self.push_cqe(h, cq, wc);
            }
            if !status.is_ok() {
                self.qp_error(h, qi);
                return;
            }
        }
    }

    #[allow(clippy::too_many_arguments, reason = "the fields of one receive completion")]
    pub(crate) fn recv_cqe(
        &mut self,
        h: usize,
        qi: u32,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        len: u64,
        imm: Option<u32>,
    ) {
        let Some(q) = self.qp(h, qi) else { return };
        let wc =
            Wc { wr_id, status, opcode, byte_len: len as u32, imm, qp_num: q.qp_num, timestamp_ns: self.now / 1000 };
        let cq = q.recv_cq;
        self.push_cqe(h, cq, wc);
    }

    /// Writes a CQE; an overrun puts the CQ and its QPs in error.
    pub(crate) fn push_cqe(&mut self, h: usize, cq: u32, wc: Wc) {
        self.visible += 1;
        let Some(c) = self.hosts[h].cqs.get_mut(cq as usize).and_then(Option::as_mut) else { return };
        if c.ring.overrun {
            return;
        }
        if !c.ring.push(wc) {
            return self.error_cq_users(h, cq);
        }
        self.wake_waiters(h, cq);
    }

    /// Moves a QP to ERR and flushes its outstanding work.
    pub(crate) fn qp_error(&mut self, h: usize, qi: u32) {
        let now_ns = self.now / 1000;
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.state == QpState::Err {
            return;
        }
        q.state = QpState::Err;
        q.epoch += 1;
        let (scq, rcq, qpn) = (q.send_cq, q.recv_cq, q.qp_num);
        let mut flushed: Vec<Wc> = Vec::new();
        for i in q.complete_next..q.sq_end() {
            if let Some(e) = q.entry(i) {
                flushed.push(Wc::flushed(e.wr_id, e.op.wc_opcode(), qpn, now_ns));
            }
        }
        let end = q.sq_end();
        q.sq.clear();
        q.responses.clear();
        q.sq_base = end;
        q.exec_next = end;
        q.proc_next = end;
        q.complete_next = end;
        let recvs: Vec<u64> = q.rq.drain(..).map(|r| r.wr_id).collect();
        self.visible += 1;
        for wc in flushed {
            self.push_cqe(h, scq, wc);
        }
        for wr_id in recvs {
            self.push_cqe(h, rcq, Wc::flushed(wr_id, WcOpcode::Recv, qpn, now_ns));
        }
    }
}
