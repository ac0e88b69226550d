//! Tenants that leave: an application that goes away (its process ended,
//! its connection closed) is flushed, then removed.
//!
//! [`Dataplane::flush_tenant`] fails each of the tenant's QPs as a NIC
//! error would: the NIC's QPs move to the error state, so what they hold
//! completes with `WR_FLUSH_ERR` as the NIC flushes it, and what was still
//! in software (held, being split, or still in the tenant's channel)
//! completes with `WR_FLUSH_ERR` after it, in per-QP order. A signaled
//! marker posted to each flushed QP behind what it holds retires the WQEs
//! that completed unsignaled before the error (they give no CQE of their
//! own), so that the QP drains whatever its stream ended on. Every request
//! the loop accepted therefore completes exactly once, with success (it
//! finished before the flush) or a flush error.
//!
//! Once nothing of the tenant is left anywhere ([`Dataplane::tenant_idle`]),
//! [`Dataplane::remove_tenant`] destroys its QPs (data and control) on the
//! NIC, deregisters its regions, and frees its slot: its name is free
//! again, it leaves snapshots, the policy sees it with no QPs, and the
//! next [`Dataplane::add_tenant`] takes its id. Its data QPs' slots are
//! reused by later [`Dataplane::create_qp`]s, so a long-running daemon's
//! clients can come and go without using up the shared completion queues.
//! (The simulated and verbs NICs have no way here to free a protection
//! domain: the tenant's stays allocated, empty.)

use super::EngineError;
use perf_policy_sdk::{Pacing, TenantInfo, TenantPlan};

use super::Dataplane;
use crate::rnic::*;

impl<R: Rnic> Dataplane<R> {
    /// Fails every QP of tenant `t` (see the module comment): the NIC
    /// flushes them and the loop completes the rest with `WR_FLUSH_ERR`.
    /// Nothing new of the tenant is posted to the NIC after this.
    pub fn flush_tenant(&mut self, t: u32) -> Result<(), EngineError> {
        let live = self.tenant_mut(t)?;
        if live.removed {
            return Err(EngineError::TenantRemoved(t));
        }
        // Its requests are no longer the operator's to hold.
        live.paused = false;
        let qps = live.qps.clone();
        let mut first_error = None;
        for qi in qps {
            if let Err(e) = self.nic.modify_qp(self.qps[qi].nic_qp, QpTransition::Err) {
                first_error.get_or_insert(e);
            }
            if !self.qps[qi].failed {
                self.fail_qp(qi, Some(WcStatus::WrFlushErr));
            }
            // The drain marker (rdma-core's `ib_drain_sq`): the QP is in
            // the error state, so the NIC completes it at once with a flush
            // error, after whatever it still flushes of the QP, and its CQE
            // retires every WQE posted before it. WQEs that completed
            // unsignaled before the error give no CQE of their own: a
            // stream that ended on unsignaled zero-weight WRs kept them
            // posted for good, and its tenant never became idle (the
            // `serve` test's bulk client, on a loaded machine).
            if !self.qps[qi].posted.is_empty() {
                if let Err(e) = self.post_signaled_zero_weight(qi) {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Whether tenant `t` has nothing left anywhere: nothing in the NIC,
    /// nothing held in software, no RECV posted, nothing in its request
    /// channel and no completion it has not been handed (false for a
    /// tenant that does not exist or was removed).
    pub fn tenant_idle(&self, t: u32) -> bool {
        let Some(ts) = self.tenants.get(t as usize).filter(|ts| !ts.removed) else { return false };
        ts.req_rx.is_idle()
            && ts.overflow.is_empty()
            && ts.qps.iter().all(|&qi| {
                let q = &self.qps[qi];
                q.outstanding == 0 && q.posted.is_empty() && q.dead.is_empty() && !q.has_work() && q.recvs.is_empty()
            })
    }

    /// Removes tenant `t` (see the module comment). Fails with
    /// [`EngineError::Busy`] while it is not idle ([`Dataplane::tenant_idle`];
    /// [`Dataplane::flush_tenant`] gets it there), and with
    /// [`EngineError::NoTenant`] or [`EngineError::TenantRemoved`] for a tenant that does not exist or
    /// was removed already.
    pub fn remove_tenant(&mut self, t: u32) -> Result<(), EngineError> {
        if self.tenant_mut(t)?.removed {
            return Err(EngineError::TenantRemoved(t));
        }
        if !self.tenant_idle(t) {
            return Err(EngineError::Busy("the tenant still has requests to complete"));
        }
        let ts = &mut self.tenants[t as usize];
        ts.removed = true;
        ts.paused = false;
        let qps = std::mem::take(&mut ts.qps);
        let mrs = std::mem::take(&mut ts.mrs);
        let pcq = ts.pcq.take();
        let weight = ts.weight;
        let mut first_error = None;
        for qi in qps {
            // An empty, failed QP: inert in every loop over the QPs until
            // `create_qp` takes its slot.
            let q = &mut self.qps[qi];
            q.failed = true;
            q.active = false;
            self.uncovered_bytes -= std::mem::take(&mut q.unsignaled_bytes);
            if let Err(e) = self.nic.destroy_qp(q.nic_qp) {
                first_error.get_or_insert(e);
            }
            if let Some(r) = q.rendezvous.take() {
                if let Err(e) = self.nic.dereg_mr(r.ring.handle) {
                    first_error.get_or_insert(e);
                }
            }
            self.free_qps.push(qi);
        }
        for mr in mrs {
            if let Err(e) = self.nic.dereg_mr(mr.handle) {
                first_error.get_or_insert(e);
            }
        }
        if let Some(pcq) = pcq {
            if let Err(e) = pcq.destroy(&mut self.nic) {
                first_error.get_or_insert(e);
            }
        }
        self.ready.admit.insert(t as usize);
        self.plans[t as usize] = TenantPlan::PASSTHROUGH;
        self.pacing[t as usize] = Pacing::UNLIMITED;
        self.plans_changed();
        let now = self.nic.clock_ns();
        self.tenants[t as usize].bucket.set(Pacing::UNLIMITED, now);
        self.policy.on_tenant(&TenantInfo { tenant: t, qps: 0, weight });
        first_error.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Tenants there are now (removed ones not counted).
    pub fn tenant_count(&self) -> usize {
        self.tenants.iter().filter(|t| !t.removed).count()
    }

    /// Data QPs there are now (removed tenants' not counted).
    pub fn qp_count(&self) -> usize {
        self.qps.len() - self.free_qps.len()
    }
}
