//! Injected faults and the RC transport's recovery from them: a QP driven
//! to ERR, a CQ overrun, a link that goes down for a while (packets on it
//! lost), a NIC whose send side stalls, and lost ACKs.
//!
//! Loss recovery follows RC: the responder executes requests in order
//! and, on the first request after a gap, answers with a sequence-error
//! NAK that makes the requester go back to the lost message at once
//! (go-back-N, the same rewind RNR uses); when nothing follows the loss
//! (the tail of a stream, a lost ACK, a lost NAK) the requester's
//! transport timer fires `transport_timeout_ps` after the last answer it
//! received and it retransmits from the oldest unanswered WQE, up to
//! `retry_cnt` times; the next timeout fails that WQE with `RetryExcErr`
//! and the QP goes to ERR. ACKs are cumulative: a later ACK covers WQEs
//! whose own ACK was lost. A duplicate request (a retransmission of
//! something already executed) is answered again without being executed
//! again (a READ is re-read).
//!
//! The timer runs only for an exchange that lost a packet: without faults
//! the model takes none of these paths, so its timing and results are
//! exactly those of a fault-free run.

use super::profile::Ps;
use super::qp::WqeStage;
use super::world::{Answer, Event, World};
use crate::rnic::{CqHandle, QpHandle, QpState, WcStatus, WrOpcode};

/// A fault to inject into the simulated fabric ([`super::SimFabric::inject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The QP goes to ERR (a local QP error, as a firmware-detected fault
    /// would cause): its oldest unfinished WQE completes with `status`,
    /// every later one with `WrFlushErr`.
    QpError {
        /// The QP's host.
        host: usize,
        /// The QP.
        qp: QpHandle,
        /// The status of its oldest unfinished WQE.
        status: WcStatus,
    },
    /// The CQ overruns as if software had stopped polling it: every later
    /// `poll_cq` fails with `CqOverrun`, its pending CQEs are lost and
    /// every QP using it goes to ERR.
    CqOverrun {
        /// The CQ's host.
        host: usize,
        /// The CQ.
        cq: CqHandle,
    },
    /// The host's link goes down for `for_ns` (both directions): every
    /// packet on the wire to or from the host meanwhile is lost.
    LinkDown {
        /// The host.
        host: usize,
        /// How long, in ns (`u64::MAX`: for good).
        for_ns: u64,
    },
    /// The host's NIC processes no WQE and grants no send turn for
    /// `for_ns`; its receive path keeps working.
    NicStall {
        /// The host.
        host: usize,
        /// How long, in ns.
        for_ns: u64,
    },
    /// The next `count` positive ACKs arriving at the host are lost.
    DropAcks {
        /// The requester's host.
        host: usize,
        /// How many.
        count: u32,
    },
}

/// What the fault machinery did so far (all hosts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Faults applied.
    pub injected: u64,
    /// Segments (runs of packets) lost on a down link.
    pub segments_lost: u64,
    /// ACKs and NAKs lost (down link or `DropAcks`).
    pub answers_lost: u64,
    /// Sequence-error NAKs sent by responders after a gap.
    pub seq_naks: u64,
    /// Transport timer expiries that led to a retransmission.
    pub timeouts: u64,
    /// Duplicate requests answered without being executed again.
    pub duplicates: u64,
    /// WQEs failed with `RetryExcErr` after `retry_cnt` retransmissions.
    pub retry_exceeded: u64,
}

/// 4.096 us, the unit of the IB local ACK timeout (`4.096 us x 2^timeout`).
pub const IB_TIMEOUT_UNIT_PS: Ps = 4_096_000;

/// The local ACK timeout of IB timeout code `code` (`ibv_qp_attr.timeout`).
pub const fn ib_timeout_ps(code: u8) -> Ps {
    IB_TIMEOUT_UNIT_PS << code
}

impl World {
    /// Applies a fault now.
    pub(crate) fn apply_fault(&mut self, fault: Fault) {
        self.faults.injected += 1;
        let now = self.now;
        match fault {
            Fault::QpError { host, qp, status } => {
                let Some(q) = self.qp_mut(host, qp.0) else { return };
                if q.state == QpState::Err {
                    return;
                }
                let head = q.complete_next;
                match q.entry_mut(head) {
                    Some(e) => {
                        e.stage = WqeStage::Done(status);
                        self.complete_in_order(host, qp.0);
                    }
                    None => self.qp_error(host, qp.0),
                }
            }
            Fault::CqOverrun { host, cq } => {
                if let Some(c) = self.hosts.get_mut(host).and_then(|h| h.cqs.get_mut(cq.0 as usize)) {
                    if let Some(c) = c.as_mut() {
                        c.ring.overrun = true;
                        c.ring.entries.clear();
                    }
                    self.visible += 1;
                    self.error_cq_users(host, cq.0);
                }
            }
            Fault::LinkDown { host, for_ns } => {
                if let Some(h) = self.hosts.get_mut(host) {
                    let end = now.saturating_add(for_ns.saturating_mul(super::PS_PER_NS));
                    h.link_down.retain(|&(_, e)| e >= now);
                    h.link_down.push((now, end));
                }
            }
            Fault::NicStall { host, for_ns } => {
                if let Some(h) = self.hosts.get_mut(host) {
                    let end = now.saturating_add(for_ns.saturating_mul(super::PS_PER_NS));
                    h.stalled_until = h.stalled_until.max(end);
                    self.schedule(end, Event::Sched { host });
                }
            }
            Fault::DropAcks { host, count } => {
                if let Some(h) = self.hosts.get_mut(host) {
                    h.drop_acks = h.drop_acks.saturating_add(count);
                }
            }
        }
    }

    /// Moves every QP that uses CQ `cq` of host `h` to ERR.
    pub(crate) fn error_cq_users(&mut self, h: usize, cq: u32) {
        let users: Vec<u32> = self.hosts[h]
            .qps
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.as_ref().filter(|q| q.send_cq == cq || q.recv_cq == cq).map(|_| i as u32))
            .collect();
        for qi in users {
            self.qp_error(h, qi);
        }
    }

    /// Whether host `h`'s link was down at any time in `[from, to]`.
    pub(crate) fn link_down_during(&self, h: usize, from: Ps, to: Ps) -> bool {
        self.hosts.get(h).is_some_and(|x| x.link_down.iter().any(|&(s, e)| s <= to && e >= from))
    }

    /// Whether a packet between hosts `a` and `b` on the wire during
    /// `[from, to]` was lost (loopback never is).
    pub(crate) fn path_lost(&self, a: usize, b: usize, from: Ps, to: Ps) -> bool {
        a != b && (self.link_down_during(a, from, to) || self.link_down_during(b, from, to))
    }

    /// Whether host `h`'s link is up now.
    pub(crate) fn link_up(&self, h: usize) -> bool {
        !self.link_down_during(h, self.now, self.now)
    }

    /// Packets of requester QP `qi`'s WQE `wqe` (generation `epoch`) were
    /// lost: the request itself (`response == false`) or its READ response.
    pub(crate) fn note_lost_packets(&mut self, h: usize, qi: u32, wqe: u64, epoch: u32, response: bool) {
        self.faults.segments_lost += 1;
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.epoch != epoch || q.state != QpState::Rts {
            return;
        }
        let slot = if response { &mut q.resp_lost_at } else { &mut q.req_lost_at };
        *slot = Some(slot.map_or(wqe, |w| w.min(wqe)));
        self.arm_retry_timer(h, qi);
    }

    /// An answer to QP `qi` was lost on its way.
    pub(crate) fn note_lost_answer(&mut self, h: usize, qi: u32, epoch: u32, answer: Answer) {
        self.faults.answers_lost += 1;
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.epoch != epoch || q.state != QpState::Rts {
            return;
        }
        if answer == Answer::Ack {
            q.acks_lost = q.acks_lost.saturating_add(1);
        }
        self.arm_retry_timer(h, qi);
    }

    /// Whether an answer arriving now at host `h` from host `from` (sent
    /// `ack_delay` ago) is lost.
    pub(crate) fn answer_lost(&mut self, h: usize, from: usize, answer: Answer) -> bool {
        if from == h {
            return false;
        }
        let sent =
            self.now.saturating_sub(self.prof.ack_turnaround_ps + self.prof.propagation_ps + self.prof.cqe_write_ps);
        let arrived = self.now.saturating_sub(self.prof.cqe_write_ps);
        if self.path_lost(from, h, sent, arrived) {
            return true;
        }
        let host = &mut self.hosts[h];
        if answer == Answer::Ack && host.drop_acks > 0 {
            host.drop_acks -= 1;
            return true;
        }
        false
    }

    /// Starts QP `qi`'s transport timer for its current generation, if
    /// it is not running.
    fn arm_retry_timer(&mut self, h: usize, qi: u32) {
        let timeout = self.prof.transport_timeout_ps;
        let now = self.now;
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.timer_epoch == Some(q.epoch) {
            return;
        }
        q.timer_epoch = Some(q.epoch);
        let at = now.max(q.last_progress) + timeout;
        let epoch = q.epoch;
        self.schedule(at, Event::RetryTimer { host: h, qp: qi, epoch });
    }

    /// The oldest WQE of QP `qi` that was dispatched (fully or in part)
    /// and has no answer yet.
    fn oldest_unanswered(&self, h: usize, qi: u32) -> Option<u64> {
        let q = self.qp(h, qi)?;
        (q.complete_next..q.sq_end()).find(|&i| {
            q.entry(i).is_some_and(|e| {
                !e.is_ctrl() && !matches!(e.stage, WqeStage::Done(_)) && (e.stage == WqeStage::InFlight || e.sent > 0)
            })
        })
    }

    /// QP `qi`'s transport timer expired.
    pub(crate) fn on_retry_timer(&mut self, h: usize, qi: u32, epoch: u32) {
        let (timeout, now) = (self.prof.transport_timeout_ps, self.now);
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.epoch != epoch || q.state != QpState::Rts || q.timer_epoch != Some(epoch) {
            return;
        }
        q.timer_epoch = None;
        let last = q.last_progress;
        let Some(w) = self.oldest_unanswered(h, qi) else { return };
        if last + timeout > now || self.dma_busy(h, qi) {
            // An answer came since the timer started (it runs from there),
            // or the QP's answer waits for its placement to be made.
            let last = if self.dma_busy(h, qi) { now } else { last };
            let Some(q) = self.qp_mut(h, qi) else { return };
            q.timer_epoch = Some(epoch);
            self.schedule(last + timeout, Event::RetryTimer { host: h, qp: qi, epoch });
            return;
        }
        let Some(q) = self.qp_mut(h, qi) else { return };
        if q.retry_left == 0 {
            if let Some(e) = q.entry_mut(w) {
                e.stage = WqeStage::Done(WcStatus::RetryExcErr);
            }
            self.faults.retry_exceeded += 1;
            self.complete_in_order(h, qi);
            return;
        }
        q.retry_left -= 1;
        self.faults.timeouts += 1;
        self.rewind(h, qi, w, now);
    }

    /// Go-back-N: QP `qi` sends again from WQE `from`, not before
    /// `resume_at`, in a new generation (answers to the old one are
    /// ignored). Control WQEs already executed are not executed again.
    pub(crate) fn rewind(&mut self, h: usize, qi: u32, from: u64, resume_at: Ps) {
        let Some(q) = self.qp_mut(h, qi) else { return };
        q.epoch += 1;
        q.stall_until = resume_at;
        q.exec_next = from;
        q.req_lost_at = None;
        q.resp_lost_at = None;
        q.acks_lost = 0;
        for i in from..q.sq_end() {
            if let Some(e) = q.entry_mut(i) {
                if e.is_ctrl() && matches!(e.stage, WqeStage::Done(_)) {
                    continue;
                }
                e.sent = 0;
                e.stage = WqeStage::Queued;
            }
        }
        self.requeue(h, qi);
    }

    /// Marks every WQE of QP `qi` before `upto` that is waiting for an
    /// ACK as acknowledged (RC ACKs are cumulative); READs are not, their
    /// data comes with their own response.
    pub(crate) fn cumulative_ack(&mut self, h: usize, qi: u32, upto: u64) {
        let Some(q) = self.qp_mut(h, qi) else { return };
        for i in q.complete_next..upto {
            if let Some(e) = q.entry_mut(i) {
                if e.stage == WqeStage::InFlight && !matches!(e.op, WrOpcode::Read { .. }) {
                    e.stage = WqeStage::Done(WcStatus::Success);
                    let len = e.len;
                    q.stats.bytes += len;
                    q.stats.data_wqes += 1;
                }
            }
        }
    }
}
