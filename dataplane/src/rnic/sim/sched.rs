//! The NIC's send side: per-QP WQE processing (doorbell, prefetch,
//! processing at the per-QP rate) and the NIC-wide send scheduler that
//! grants turns round-robin (or by strict priority between classes) to QPs
//! whose head WQE is executable.
//!
//! The scheduler knows nothing of tenants or policies: it sees QPs, their
//! classes and their WQEs. A control WQE (WAIT, SEND_ENABLE, NOP) takes a
//! turn of its own and no wire time; a data turn dispatches up to
//! `turn_max_wqes` consecutive data WQEs and `turn_max_bytes` of payload
//! into the port, and only while the port's queue for the QP's class holds
//! at most `egress_lookahead_ps` of wire time.

use std::collections::VecDeque;

use super::profile::{Ps, TcScheduler};
use super::wire::{queue_of, Seg, SegKind};
use super::world::{Event, World};
use crate::rnic::{AccessFlags, QpState, WcStatus, WrOpcode};

/// Scheduler counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedCounters {
    /// Turns granted.
    pub turns: u64,
    /// Data WQEs dispatched (counting each turn of a multi-turn message).
    pub data_dispatches: u64,
    /// Control WQEs executed.
    pub ctrl_wqes: u64,
}

/// The NIC-wide send scheduler of one host.
#[derive(Default)]
pub(crate) struct Scheduler {
    data: [VecDeque<(u64, u32)>; 8],
    ctrl: [VecDeque<(u64, u32)>; 8],
    /// Classes whose data or control ring is not empty (bit = class), so
    /// that arbitration looks only at those.
    occupied: u8,
    stamp: u64,
    busy_until: Ps,
    pending: Option<Ps>,
    pub counters: SchedCounters,
}

/// What a QP's head WQE allows.
enum Head {
    /// Nothing executable (empty, not enabled, not RTS).
    Idle,
    /// Head is a WAIT on `cq` for `count` that is not yet satisfied.
    WaitCq { cq: u32, count: u64 },
    /// Executable from this time on.
    ReadyAt(Ps),
    /// Executable now; `ctrl` if it is a control WQE.
    Ready { ctrl: bool },
}

impl World {
    /// Schedules processing of newly executable WQEs of a QP.
    pub(crate) fn advance_processing(&mut self, h: usize, qi: u32) {
        let now = self.now;
        let prof = &self.prof;
        let (wqe_ps, ctrl_ps, dma_ps, window) =
            (prof.wqe_process_ps, prof.ctrl_wqe_process_ps, prof.payload_dma_ps, prof.prefetch_wqes as u64);
        let host = &mut self.hosts[h];
        let stalled = host.stalled_until;
        let Some(q) = host.qps.get_mut(qi as usize).and_then(Option::as_mut) else { return };
        loop {
            let idx = q.proc_next;
            if idx >= q.sq_end() || idx >= q.exec_next + window || !q.enabled(idx) {
                break;
            }
            if idx > q.exec_next && matches!(q.entry(idx - 1).map(|e| e.op), Some(WrOpcode::Wait { .. })) {
                break;
            }
            let free = q.proc_free_at;
            let Some(e) = q.entry_mut(idx) else { break };
            let ctrl = e.is_ctrl();
            let done = e.visible_at.max(free).max(now).max(stalled) + if ctrl { ctrl_ps } else { wqe_ps };
            let dma = !ctrl && e.inline.is_none() && !e.sgl.is_empty() && !matches!(e.op, WrOpcode::Read { .. });
            e.ready_at = done + if dma { dma_ps } else { 0 };
            q.proc_free_at = done;
            q.proc_next += 1;
        }
    }

    /// What the QP offers the scheduler: a READ response to send, or its
    /// send queue's head.
    fn head(&self, h: usize, qi: u32) -> Head {
        let Some(q) = self.qp(h, qi) else { return Head::Idle };
        if !q.responses.is_empty() && matches!(q.state, QpState::Rtr | QpState::Rts) {
            return Head::Ready { ctrl: false };
        }
        self.sq_head(h, qi)
    }

    /// What the QP's send queue head allows.
    fn sq_head(&self, h: usize, qi: u32) -> Head {
        let Some(q) = self.qp(h, qi) else { return Head::Idle };
        if q.state != QpState::Rts {
            return Head::Idle;
        }
        let idx = q.exec_next;
        let Some(e) = q.entry(idx) else { return Head::Idle };
        if !q.enabled(idx) || idx >= q.proc_next || idx > q.halted_at {
            return Head::Idle;
        }
        let at = e.ready_at.max(q.stall_until);
        if at > self.now {
            return Head::ReadyAt(at);
        }
        if let WrOpcode::Wait { cq, count } = e.op {
            let produced =
                self.hosts[h].cqs.get(cq.0 as usize).and_then(Option::as_ref).map_or(u64::MAX, |c| c.ring.produced);
            if produced < count {
                return Head::WaitCq { cq: cq.0, count };
            }
        }
        Head::Ready { ctrl: e.is_ctrl() }
    }

    /// Re-evaluates a QP that is not in a ring: puts it in one, arms a
    /// ready event, or registers it as a CQ waiter.
    pub(crate) fn requeue(&mut self, h: usize, qi: u32) {
        if self.qp(h, qi).is_none_or(|q| q.in_ring) {
            return;
        }
        match self.head(h, qi) {
            Head::Idle => {}
            Head::Ready { ctrl } => {
                let Some(tc) = self.qp(h, qi).map(|q| (q.tc & 7) as usize) else { return };
                let s = &mut self.hosts[h].sched;
                s.stamp += 1;
                let ring = if ctrl { &mut s.ctrl[tc] } else { &mut s.data[tc] };
                ring.push_back((s.stamp, qi));
                s.occupied |= 1 << tc;
                if let Some(q) = self.qp_mut(h, qi) {
                    q.in_ring = true;
                }
                self.kick(h);
            }
            Head::ReadyAt(t) => {
                let now = self.now;
                let Some(q) = self.qp_mut(h, qi) else { return };
                if q.ready_event_at.is_none_or(|p| p > t || p < now) {
                    q.ready_event_at = Some(t);
                    self.schedule(t, Event::QpReady { host: h, qp: qi });
                }
            }
            Head::WaitCq { cq, count } => {
                let Some(q) = self.qp_mut(h, qi) else { return };
                if !q.waiting {
                    q.waiting = true;
                    if let Some(c) = self.hosts[h].cqs.get_mut(cq as usize).and_then(Option::as_mut) {
                        c.waiters.push((qi, count));
                    }
                }
            }
        }
    }

    pub(crate) fn on_qp_ready(&mut self, h: usize, qi: u32) {
        let now = self.now;
        if let Some(q) = self.qp_mut(h, qi) {
            if q.ready_event_at == Some(now) {
                q.ready_event_at = None;
            }
        }
        self.requeue(h, qi);
    }

    /// A CQ's counter moved: wake the QPs whose WAIT it satisfied.
    pub(crate) fn wake_waiters(&mut self, h: usize, cq: u32) {
        let woken = match self.hosts[h].cqs.get_mut(cq as usize).and_then(Option::as_mut) {
            Some(c) => c.take_satisfied(),
            None => return,
        };
        let wake_at = self.now + self.prof.wait_wake_ps;
        for qi in woken {
            if let Some(q) = self.qp_mut(h, qi) {
                q.waiting = false;
                q.stall_until = q.stall_until.max(wake_at);
            }
            self.requeue(h, qi);
        }
    }

    fn kick(&mut self, h: usize) {
        let s = &self.hosts[h].sched;
        if s.busy_until > self.now {
            let t = s.busy_until;
            self.sched_at(h, t);
        } else {
            self.sched_at(h, self.now);
        }
    }

    fn sched_at(&mut self, h: usize, t: Ps) {
        let s = &mut self.hosts[h].sched;
        if s.pending.is_some_and(|p| p <= t && p >= self.now) {
            return;
        }
        s.pending = Some(t);
        self.schedule(t, Event::Sched { host: h });
    }

    /// Picks the ring entry to serve: (class, is_ctrl). Also returns the
    /// earliest time a backlogged class could take a data turn.
    fn pick(&self, h: usize) -> (Option<(usize, bool)>, Option<Ps>) {
        let host = &self.hosts[h];
        let s = &host.sched;
        let lookahead = self.prof.egress_lookahead_ps;
        let mut blocked: Option<Ps> = None;
        let mut best: Option<(u64, usize, bool)> = None;
        let sp = matches!(host.tc_sched, TcScheduler::StrictPriority);
        // Occupied classes from the highest down.
        let mut classes = s.occupied;
        while classes != 0 {
            let tc = 7 - classes.leading_zeros() as usize;
            classes &= !(1 << tc);
            if let Some(&(stamp, _)) = s.ctrl[tc].front() {
                if best.is_none_or(|b| stamp < b.0) {
                    best = Some((stamp, tc, true));
                }
            }
            if let Some(&(stamp, _)) = s.data[tc].front() {
                let backlog = host.port.backlog_ps(queue_of(&host.tc_sched, tc as u8), self.now);
                if backlog <= lookahead {
                    if best.is_none_or(|b| stamp < b.0) {
                        best = Some((stamp, tc, false));
                    }
                } else {
                    let t = self.now + backlog - lookahead;
                    blocked = Some(blocked.map_or(t, |b: Ps| b.min(t)));
                }
            }
            if sp && best.is_some() {
                break;
            }
        }
        (best.map(|(_, tc, ctrl)| (tc, ctrl)), blocked)
    }

    /// Grants at most one turn, if the scheduler is free.
    pub(crate) fn arbitrate(&mut self, h: usize) {
        if self.hosts[h].sched.pending == Some(self.now) {
            self.hosts[h].sched.pending = None;
        }
        if self.hosts[h].sched.busy_until > self.now {
            let t = self.hosts[h].sched.busy_until;
            self.sched_at(h, t);
            return;
        }
        if self.hosts[h].stalled_until > self.now {
            // An injected stall: the fault schedules the scheduler's return.
            return;
        }
        loop {
            let (choice, blocked) = self.pick(h);
            let Some((tc, ctrl)) = choice else {
                if let Some(t) = blocked {
                    self.sched_at(h, t);
                }
                return;
            };
            let s = &mut self.hosts[h].sched;
            let ring = if ctrl { &mut s.ctrl[tc] } else { &mut s.data[tc] };
            let Some((_, qi)) = ring.pop_front() else { return };
            if s.ctrl[tc].is_empty() && s.data[tc].is_empty() {
                s.occupied &= !(1 << tc);
            }
            if let Some(q) = self.qp_mut(h, qi) {
                q.in_ring = false;
            }
            match self.head(h, qi) {
                Head::Ready { ctrl: c } if c == ctrl => {
                    let n = if ctrl {
                        self.exec_ctrl(h, qi)
                    } else if self.responds_now(h, qi) {
                        self.exec_response_turn(h, qi)
                    } else {
                        self.exec_data_turn(h, qi)
                    };
                    let busy = self.now + n as Ps * self.prof.sched_wqe_ps;
                    let s = &mut self.hosts[h].sched;
                    s.busy_until = busy;
                    s.counters.turns += 1;
                    if let Some(q) = self.qp_mut(h, qi) {
                        q.stats.turns += 1;
                    }
                    self.requeue(h, qi);
                    // Come back when the next turn can be granted: when the
                    // scheduler is free if something is eligible, when the
                    // egress backlog admits a blocked class, or not at all if
                    // the rings are empty (a requeue kicks the scheduler).
                    match self.pick(h) {
                        (Some(_), _) => self.sched_at(h, busy),
                        (None, Some(t)) => self.sched_at(h, t.max(busy)),
                        (None, None) => {}
                    }
                    return;
                }
                _ => self.requeue(h, qi),
            }
        }
    }

    /// Executes the head control WQE. Returns the WQEs executed (1).
    fn exec_ctrl(&mut self, h: usize, qi: u32) -> u32 {
        let Some(q) = self.qp_mut(h, qi) else { return 1 };
        let idx = q.exec_next;
        let Some((op, stage)) = q.entry(idx).map(|e| (e.op, e.stage)) else { return 1 };
        q.exec_next += 1;
        if matches!(stage, super::qp::WqeStage::Done(_)) {
            // Executed before a go-back-N rewind: not executed twice.
            self.advance_processing(h, qi);
            return 1;
        }
        q.stats.ctrl_wqes += 1;
        let mut status = WcStatus::Success;
        if let WrOpcode::SendEnable { qp: target, count } = op {
            match self.qp_mut(h, target.0) {
                Some(t) if t.managed => t.enabled_upto += count as u64,
                _ => status = WcStatus::LocQpOpErr,
            }
            self.advance_processing(h, target.0);
            self.requeue(h, target.0);
        }
        self.hosts[h].sched.counters.ctrl_wqes += 1;
        if let Some(q) = self.qp_mut(h, qi) {
            if !status.is_ok() {
                q.halted_at = q.halted_at.min(idx);
            }
            if let Some(e) = q.entry_mut(idx) {
                e.stage = super::qp::WqeStage::Done(status);
            }
        }
        self.advance_processing(h, qi);
        self.complete_in_order(h, qi);
        1
    }

    /// Dispatches a data turn. Returns the WQEs it touched.
    fn exec_data_turn(&mut self, h: usize, qi: u32) -> u32 {
        let (max_wqes, max_bytes) = (self.prof.turn_max_wqes, self.prof.turn_max_bytes as u64);
        let mut n = 0u32;
        let mut bytes = 0u64;
        if let Some(q) = self.qp_mut(h, qi) {
            q.last_turn_responded = false;
        }
        while n < max_wqes && bytes < max_bytes {
            if n > 0 && !matches!(self.sq_head(h, qi), Head::Ready { ctrl: false }) {
                break;
            }
            let Some(q) = self.qp(h, qi) else { break };
            let (idx, tc, epoch, pd) = (q.exec_next, q.tc, q.epoch, q.pd);
            let Some(peer) = q.peer else { break };
            let Some(e) = q.entry(idx) else { break };
            let (op, len, sent) = (e.op, e.len, e.sent);
            n += 1;
            if sent == 0 {
                let need =
                    if matches!(op, WrOpcode::Read { .. }) { AccessFlags::LOCAL_WRITE } else { AccessFlags::empty() };
                let ok = e.sgl.iter().all(|s| self.mems[h].resolve(s.lkey, s.addr, s.length as u64, pd, need).is_ok());
                if !ok {
                    self.fail_wqe(h, qi, idx, WcStatus::LocProtErr);
                    break;
                }
            }
            let is_read = matches!(op, WrOpcode::Read { .. });
            let take = if is_read { 0 } else { (len - sent).min(max_bytes - bytes) };
            let complete = is_read || sent + take == len;
            let reth = matches!(op, WrOpcode::Write { .. } | WrOpcode::WriteImm { .. } | WrOpcode::Read { .. });
            let seg = Seg {
                src_host: h,
                dst_host: peer.host,
                qp: qi,
                wqe: idx,
                epoch,
                bytes: take as u32,
                pkts: self.pkts_for(take as u32),
                sent_pkts: 0,
                first_extra: if sent == 0 && reth { self.prof.reth_bytes } else { 0 },
                last: complete,
                kind: SegKind::Request,
                tc,
            };
            let Some(q) = self.qp_mut(h, qi) else { break };
            if let Some(e) = q.entry_mut(idx) {
                e.sent += take;
                if complete {
                    e.stage = super::qp::WqeStage::InFlight;
                }
            }
            if complete {
                q.exec_next += 1;
            }
            bytes += take;
            self.hosts[h].sched.counters.data_dispatches += 1;
            self.enqueue_seg(seg);
            if !complete {
                break;
            }
        }
        self.advance_processing(h, qi);
        n.max(1)
    }

    /// Whether the QP's data turn goes to a READ response: it has one, and
    /// its send queue is not ready or had the QP's last turn.
    fn responds_now(&self, h: usize, qi: u32) -> bool {
        let Some(q) = self.qp(h, qi) else { return false };
        !q.responses.is_empty()
            && (!q.last_turn_responded || !matches!(self.sq_head(h, qi), Head::Ready { ctrl: false }))
    }

    /// Sends up to a turn's bytes of the QP's oldest READ response.
    /// Returns the WQEs it touched (1).
    fn exec_response_turn(&mut self, h: usize, qi: u32) -> u32 {
        let max_bytes = self.prof.turn_max_bytes as u64;
        let Some(q) = self.qp_mut(h, qi) else { return 1 };
        let tc = q.tc;
        q.last_turn_responded = true;
        let Some(r) = q.responses.front_mut() else { return 1 };
        let take = (r.len - r.sent).min(max_bytes);
        let first = r.sent == 0;
        r.sent += take;
        let resp = *r;
        let last = resp.sent >= resp.len;
        if last {
            q.responses.pop_front();
        }
        let seg = Seg {
            src_host: h,
            dst_host: resp.req_host,
            qp: resp.req_qp,
            wqe: resp.wqe,
            epoch: resp.epoch,
            bytes: take as u32,
            pkts: self.pkts_for(take as u32),
            sent_pkts: 0,
            first_extra: if first { 4 } else { 0 },
            last,
            kind: SegKind::ReadResponse,
            tc,
        };
        self.hosts[h].sched.counters.data_dispatches += 1;
        // A response for a requester generation that is gone is dropped
        // when its turn comes (the wire drops it too: `seg_alive`).
        self.enqueue_seg(seg);
        1
    }

    /// Marks a WQE failed and completes in order (which errors the QP).
    pub(crate) fn fail_wqe(&mut self, h: usize, qi: u32, idx: u64, status: WcStatus) {
        if let Some(q) = self.qp_mut(h, qi) {
            if let Some(e) = q.entry_mut(idx) {
                e.stage = super::qp::WqeStage::Done(status);
            }
            if q.exec_next <= idx {
                q.exec_next = idx + 1;
            }
            q.halted_at = q.halted_at.min(idx);
        }
        self.complete_in_order(h, qi);
    }
}
