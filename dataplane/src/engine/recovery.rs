//! What the loop does when the NIC fails under it, beyond one QP's error
//! (which `fail_qp` / `flush_dead` handle): an overrun of one of the
//! shared completion queues, and bringing a failed QP back.
//!
//! **CQ overrun.** The data QPs of every tenant share one send CQ and one
//! receive CQ, so an overrun is a whole-NIC event: the NIC moves every QP
//! on that CQ to ERR and the CQEs it held are lost. The loop cannot tell
//! which of the messages it had posted completed, so it fails them all:
//! each completes once, in per-QP order, with `WrFlushErr` (its bytes may
//! or may not have been placed; the error says only that the outcome is
//! unknown), then the QP's held requests, with `WrFlushErr` too. Completions
//! that went to the other, healthy CQ (the NIC's flush of the other side)
//! arrive as usual. The loop then creates a new CQ in place of the broken
//! one and keeps running: tenants see errors, never a panic, a hang or a
//! lost request, and [`Dataplane::recover_qp`] brings each QP back. The
//! dataplane cannot overrun its own CQs (the QPs share them under a
//! budget, see `create_qp`), so this takes a NIC fault.
//!
//! **Recovering a QP.** A failed QP whose requests have all completed can
//! be recreated ([`Dataplane::recover_qp`]) and connected again
//! ([`Dataplane::connect_qp`]) to a peer QP the peer reset or created.

use super::qp::{DpQp, Meta};
use super::tenant::Completion;
use super::Dataplane;
use super::EngineError;
use crate::rnic::*;

/// Which of the loop's shared CQs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedCq {
    /// Completions of every data QP's send queue.
    Send,
    /// Completions of every data QP's receive queue.
    Recv,
}

impl<R: Rnic> Dataplane<R> {
    /// The loop's shared CQs: `[send, recv]` (for fault injection and
    /// diagnostics; they change when one is recreated after an overrun).
    pub fn completion_queues(&self) -> [CqHandle; 2] {
        [self.send_cq, self.recv_cq]
    }

    /// The NIC QP behind tenant `t`'s QP `index` (for diagnostics and
    /// fault injection; it changes when the QP is recovered).
    pub fn nic_qp(&self, t: u32, index: u32) -> Option<QpHandle> {
        let &qi = self.tenants.get(t as usize)?.qps.get(index as usize)?;
        Some(self.qps[qi].nic_qp)
    }

    /// Whether tenant `t`'s QP `index` has failed (its requests complete
    /// with errors until it is recovered).
    pub fn qp_failed(&self, t: u32, index: u32) -> Option<bool> {
        let &qi = self.tenants.get(t as usize)?.qps.get(index as usize)?;
        Some(self.qps[qi].failed)
    }

    /// A shared CQ overran: fail every request whose completion it held
    /// and put a new CQ in its place.
    pub(crate) fn on_cq_overrun(&mut self, which: SharedCq) -> Result<(), RnicError> {
        self.counters.cq_overruns += 1;
        let now = self.nic.clock_ns();
        let depth = self.cfg.cq_depth;
        // A CQ that cannot be recreated is a fatal NIC error: the loop
        // reports it from `round` (after failing what it can below).
        let fresh = self.nic.create_cq(CqAttr { depth, ignore_overrun: false });
        let old = match which {
            SharedCq::Send => self.send_cq,
            SharedCq::Recv => self.recv_cq,
        };
        self.retired_cqs.push(old);
        for qi in 0..self.qps.len() {
            match which {
                SharedCq::Send => self.fail_posted(qi, now),
                SharedCq::Recv => self.fail_recvs(qi, now),
            }
        }
        let cq = fresh?;
        match which {
            SharedCq::Send => self.send_cq = cq,
            SharedCq::Recv => self.recv_cq = cq,
        }
        Ok(())
    }

    /// Completes every message QP `qi` had posted with `WrFlushErr` (their
    /// CQEs are lost), then fails the QP.
    fn fail_posted(&mut self, qi: usize, now: u64) {
        if !self.qps[qi].failed {
            // Counts the releases still posted; holds cursor and held
            // requests back until the posted ones below are delivered.
            self.fail_qp(qi, Some(WcStatus::WrFlushErr));
        }
        let q = &mut self.qps[qi];
        let t = q.tenant as usize;
        let index = q.index;
        let mut out = Vec::new();
        let retired = q.posted.len();
        if retired > 0 {
            self.tenants[t].qps_in_nic -= 1;
        }
        let (released, messages) = q.posted.drain();
        for meta in messages {
            if let Meta::App { wr_id, posted_ns, .. } = meta {
                out.push(Completion::send(wr_id, index, WcStatus::WrFlushErr, 0, posted_ns, now));
            }
        }
        self.counters.hidden_completions += retired - out.len() as u64;
        q.outstanding = 0;
        q.pending_error = None;
        self.tenants[t].release_window(released, self.plans[t].windowed().then_some(&mut self.windowed_inflight));
        self.cq_retired(retired);
        for c in out {
            self.counters.refused += 1;
            self.deliver(t, c);
        }
        self.flush_dead(qi);
    }

    /// Completes every RECV QP `qi` had posted with `WrFlushErr` (their
    /// CQEs are lost) and fails the QP; the messages it had posted complete
    /// as the NIC's flush of its send queue arrives on the send CQ.
    fn fail_recvs(&mut self, qi: usize, now: u64) {
        if !self.qps[qi].failed {
            self.fail_qp(qi, None);
        }
        let q = &mut self.qps[qi];
        let t = q.tenant as usize;
        let index = q.index;
        self.cq_used[1] = self.cq_used[1].saturating_sub(q.recvs.len() as u64);
        let out: Vec<Completion> =
            q.recvs.drain(..).map(|wr| Completion::recv(&wr, index, WcStatus::WrFlushErr, 0, None, now)).collect();
        for c in out {
            self.counters.refused += 1;
            self.deliver(t, c);
        }
    }

    /// Recreates tenant `t`'s failed QP `index` once every request it held
    /// has completed, and returns the new QP's endpoint: connect it with
    /// [`Dataplane::connect_qp`] to a peer QP that was reset or created for
    /// it. Fails with [`EngineError::Busy`] while the QP is healthy or still
    /// has requests to complete.
    pub fn recover_qp(&mut self, t: u32, index: u32) -> Result<QpEndpoint, EngineError> {
        let qi = *self.tenant_mut(t)?.qps.get(index as usize).ok_or(EngineError::NoQp { tenant: t, index })?;
        let q = &self.qps[qi];
        if !q.failed {
            return Err(EngineError::Busy("the QP has not failed"));
        }
        if q.outstanding > 0 || !q.posted.is_empty() || !q.dead.is_empty() || q.has_work() || !q.recvs.is_empty() {
            return Err(EngineError::Busy("the failed QP still has requests to complete"));
        }
        let (qp, ep) = self.new_nic_qp(t, self.qps[qi].traffic_class)?;
        let old = std::mem::replace(&mut self.qps[qi], DpQp::new(t, index, qp));
        let q = &mut self.qps[qi];
        // Sequence numbers go on, so nothing of the old QP can be mistaken
        // for the new one's.
        q.next_seq = old.next_seq;
        q.next_recv_seq = old.next_recv_seq;
        q.traffic_class = old.traffic_class;
        // The old QP may hold a retired CQ: destroy both once possible. Its
        // rendezvous ring goes with it (the new QP's peer is new too).
        let _ = self.nic.destroy_qp(old.nic_qp);
        if let Some(r) = old.rendezvous {
            let _ = self.nic.dereg_mr(r.ring.handle);
        }
        let nic = &mut self.nic;
        self.retired_cqs.retain(|&cq| nic.destroy_cq(cq).is_err());
        Ok(ep)
    }
}
