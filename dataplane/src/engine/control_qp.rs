//! The preemption control QP (PCQ): one per tenant, a managed,
//! cross-channel RC QP connected to itself, with its own ignore-overrun
//! CQ. It carries one signaled NOP per planned hand-off; a data QP that
//! gives the NIC to another posts `SEND_ENABLE(PCQ, 1)` at the end of its
//! stream, which completes the next NOP, which bumps the PCQ's completion
//! count, which satisfies the `WAIT(PCQ CQ, count)` at the head of the QP
//! that takes over. The switch happens inside the NIC with no CPU on the
//! path and no gap on the wire.
//!
//! Per tenant rather than per NIC: a tenant's hand-offs are ordered among
//! its own QPs only, so one tenant's rotation never waits on another's
//! count, and a tenant in error cannot stall the others.
//!
//! A data QP that fails before its release runs takes the release with it
//! (the NIC flushes it), which would leave the QP taking over waiting
//! forever. For that case only, the PCQ can issue a release itself
//! ([`ControlQp::rescue`]) through a small unmanaged cross-channel QP,
//! created on first use, and report how many hand-offs have completed
//! ([`ControlQp::completed`]) so the loop can tell a stall from a slow
//! stream.

use crate::rnic::{
    AccessFlags, CqAttr, CqHandle, PdHandle, QpCaps, QpHandle, QpInitAttr, Rnic, RnicError, SendWr, Wc, WrOpcode,
};

/// One tenant's preemption control QP.
pub struct ControlQp {
    /// The managed QP.
    pub qp: QpHandle,
    /// Its CQ: the counter data QPs wait on.
    pub cq: CqHandle,
    /// Hand-offs planned so far (NOPs posted); the next hand-off makes the
    /// count `planned + 1`.
    pub planned: u64,
    /// Hand-offs seen completed (NOP completions polled), see
    /// [`ControlQp::completed`].
    pub done: u64,
    /// The QP that issues rescue releases, once one was needed.
    rescuer: Option<QpHandle>,
    /// The CQ the rescuer uses (an always-satisfied one; its count matters
    /// to nobody).
    rescue_cq: Option<CqHandle>,
}

impl ControlQp {
    /// Creates and connects the PCQ (to itself).
    pub fn new(nic: &mut dyn Rnic, pd: PdHandle) -> Result<Self, RnicError> {
        let cq = nic.create_cq(CqAttr { depth: 64, ignore_overrun: true })?;
        let mut attr = QpInitAttr::new(cq, cq);
        attr.caps = QpCaps { max_send_wr: 4096, max_recv_wr: 1, ..QpCaps::default() };
        attr.cross_channel = true;
        attr.managed_send = true;
        let qp = nic.create_qp(pd, attr)?;
        let me = crate::rnic::connect::endpoint(nic, qp.qp_num);
        crate::rnic::connect::bring_up(nic, qp.handle, me, AccessFlags::empty())?;
        Ok(ControlQp { qp: qp.handle, cq, planned: 0, done: 0, rescuer: None, rescue_cq: None })
    }

    /// Plans one hand-off: posts its NOP and returns the count that the
    /// taking-over QP must WAIT for.
    pub fn plan_handoff(&mut self, nic: &mut dyn Rnic) -> Result<u64, RnicError> {
        nic.post_send(
            self.qp,
            &[SendWr {
                wr_id: self.planned,
                opcode: WrOpcode::Nop,
                payload: crate::rnic::Payload::None,
                signaled: true,
            }],
        )
        .map_err(|e| e.error)?;
        self.planned += 1;
        Ok(self.planned)
    }

    /// The WQE a giving-up QP posts to release the next hand-off.
    pub fn release(&self) -> WrOpcode {
        WrOpcode::SendEnable { qp: self.qp, count: 1 }
    }

    /// Polls the PCQ's CQ and returns how many hand-offs have completed
    /// (NOPs complete in order; the CQ may have overrun, so the count comes
    /// from the newest NOP's id).
    pub fn completed(&mut self, nic: &mut dyn Rnic) -> Result<u64, RnicError> {
        let mut wcs = [Wc::EMPTY; 16];
        loop {
            let n = nic.poll_cq(self.cq, &mut wcs)?;
            for wc in &wcs[..n] {
                self.done = self.done.max(wc.wr_id + 1);
            }
            if n < wcs.len() {
                return Ok(self.done);
            }
        }
    }

    /// Releases one hand-off from outside the data QPs (a failed QP's
    /// release was flushed). `cq` is an always-satisfied CQ for the rescuer.
    pub fn rescue(&mut self, nic: &mut dyn Rnic, pd: PdHandle, cq: CqHandle) -> Result<(), RnicError> {
        let qp = match self.rescuer {
            Some(qp) => qp,
            None => {
                let mut attr = QpInitAttr::new(cq, cq);
                attr.caps = QpCaps { max_send_wr: 64, max_recv_wr: 1, ..QpCaps::default() };
                attr.cross_channel = true;
                let qp = nic.create_qp(pd, attr)?;
                let me = crate::rnic::connect::endpoint(nic, qp.qp_num);
                crate::rnic::connect::bring_up(nic, qp.handle, me, AccessFlags::empty())?;
                self.rescuer = Some(qp.handle);
                self.rescue_cq = Some(cq);
                qp.handle
            }
        };
        nic.post_send(
            qp,
            &[SendWr { wr_id: 0, opcode: self.release(), payload: crate::rnic::Payload::None, signaled: false }],
        )
        .map_err(|e| e.error)
    }

    /// Destroys the PCQ, its rescuer and its CQ (the rescuer's CQ is not
    /// the PCQ's to destroy). The first error is returned, after trying all.
    pub fn destroy(self, nic: &mut dyn Rnic) -> Result<(), RnicError> {
        let mut result = Ok(());
        for qp in [Some(self.qp), self.rescuer].into_iter().flatten() {
            if let Err(e) = nic.destroy_qp(qp) {
                result = result.and(Err(e));
            }
        }
        if let Err(e) = nic.destroy_cq(self.cq) {
            result = result.and(Err(e));
        }
        result
    }

    /// The WQE a taking-over QP posts first: wait for hand-off `count`.
    pub fn wait_for(&self, count: u64) -> WrOpcode {
        WrOpcode::Wait { cq: self.cq, count }
    }
}
