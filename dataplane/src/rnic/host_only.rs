//! [`HostOnly`]: any backend seen as a NIC whose cross-channel verbs are
//! not in the NIC, so that the dataplane's host hand-off path (the one it
//! takes on upstream rdma-core) runs, and is tested, on the simulator.
//!
//! The wrapper reports `cross_channel: false` and `managed_send: false`
//! in [`DeviceCaps`] and the placement it was given from
//! [`Rnic::cross_channel`], and refuses what such a NIC cannot do in
//! hardware: creating a cross-channel or managed QP (so a caller that
//! still tried to rely on in-NIC WAIT or SEND_ENABLE fails loudly instead
//! of getting them from the model underneath). Everything else is passed
//! through unchanged; the model underneath never learns it is wrapped.

use super::*;

/// A backend with its in-NIC cross-channel features hidden.
pub struct HostOnly<R: Rnic> {
    inner: R,
    placement: CrossChannel,
}

impl<R: Rnic> HostOnly<R> {
    /// Wraps `inner`, reporting `placement` ([`CrossChannel::HostGated`]
    /// to stand in for the verbs backend on upstream rdma-core,
    /// [`CrossChannel::Absent`] for a backend without the verbs at all).
    ///
    /// # Panics
    /// If `placement` is [`CrossChannel::InNic`] (a programming error:
    /// use the backend unwrapped).
    pub fn new(inner: R, placement: CrossChannel) -> Self {
        assert_ne!(placement, CrossChannel::InNic, "HostOnly hides in-NIC cross-channel; use the backend itself");
        HostOnly { inner, placement }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// The wrapped backend, mutably.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

impl<R: Rnic> Rnic for HostOnly<R> {
    fn device_info(&self) -> DeviceInfo {
        let mut info = self.inner.device_info();
        info.caps.cross_channel = false;
        info.caps.managed_send = false;
        info
    }

    fn cross_channel(&self) -> CrossChannel {
        self.placement
    }

    fn port_info(&self) -> PortInfo {
        self.inner.port_info()
    }

    fn clock_ns(&self) -> u64 {
        self.inner.clock_ns()
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, RnicError> {
        self.inner.alloc_pd()
    }

    fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError> {
        self.inner.reg_mr(pd, len, access)
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
        self.inner.dereg_mr(mr)
    }

    fn write_mr(&mut self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<(), RnicError> {
        self.inner.write_mr(mr, offset, data)
    }

    fn read_mr(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<(), RnicError> {
        self.inner.read_mr(mr, offset, out)
    }

    fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError> {
        self.inner.create_cq(attr)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError> {
        self.inner.destroy_cq(cq)
    }

    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        if attr.cross_channel || attr.managed_send {
            return Err(RnicError::NotSupported("cross-channel and managed QPs: this NIC has no in-NIC cross-channel"));
        }
        self.inner.create_qp(pd, attr)
    }

    fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError> {
        self.inner.modify_qp(qp, transition)
    }

    fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError> {
        self.inner.qp_state(qp)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        self.inner.destroy_qp(qp)
    }

    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.inner.post_send(qp, wrs)
    }

    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.inner.post_recv(qp, wrs)
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        self.inner.poll_cq(cq, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::sim::SimFabric;

    #[test]
    fn reports_the_placement_and_refuses_cross_channel_qps() {
        let fabric = SimFabric::pair(1);
        assert_eq!(fabric.nic(0).cross_channel(), CrossChannel::InNic);
        let mut nic = HostOnly::new(fabric.nic(0), CrossChannel::HostGated);
        assert_eq!(nic.cross_channel(), CrossChannel::HostGated);
        let caps = nic.device_info().caps;
        assert!(!caps.cross_channel && !caps.managed_send);
        let pd = nic.alloc_pd().expect("pd");
        let cq = nic.create_cq(CqAttr { depth: 16, ignore_overrun: false }).expect("cq");
        let mut attr = QpInitAttr::new(cq, cq);
        nic.create_qp(pd, attr).expect("a plain QP is created");
        attr.cross_channel = true;
        assert!(matches!(nic.create_qp(pd, attr), Err(RnicError::NotSupported(_))));
        attr.cross_channel = false;
        attr.managed_send = true;
        assert!(matches!(nic.create_qp(pd, attr), Err(RnicError::NotSupported(_))));
        assert_eq!(HostOnly::new(fabric.nic(1), CrossChannel::Absent).cross_channel(), CrossChannel::Absent);
    }
}
