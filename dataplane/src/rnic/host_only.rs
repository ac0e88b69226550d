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
//!
//! [`HostOnly::with_limits`] also stands in for a device's limits: it
//! reports the [`DeviceCaps`] it is given and refuses, as the verbs
//! backend does ([`super::sizing`]), a QP whose send queue and markers do
//! not fit `max_qp_wr` or whose queues would need more device CQEs than
//! `max_cqe` on the CQs they share.

use super::sizing::{self, SqModel, MARKER_SLOTS};
use super::*;

/// A backend with its in-NIC cross-channel features hidden.
pub struct HostOnly<R: Rnic> {
    inner: R,
    placement: CrossChannel,
    limits: Option<DeviceCaps>,
    /// Per CQ: entries of the queues attached to it (with `limits`).
    attached: Vec<u64>,
    /// Per QP: (send CQ, its entries, receive CQ, its entries).
    qp_queues: Vec<Option<(u32, u64, u32, u64)>>,
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
        HostOnly { inner, placement, limits: None, attached: Vec::new(), qp_queues: Vec::new() }
    }

    /// Like [`HostOnly::new`], and the device has these limits (a faked
    /// `ibv_query_device`: rxe's, a ConnectX's).
    pub fn with_limits(inner: R, placement: CrossChannel, limits: DeviceCaps) -> Self {
        HostOnly { limits: Some(limits), ..HostOnly::new(inner, placement) }
    }

    fn attached_mut(&mut self, cq: u32) -> &mut u64 {
        let i = cq as usize;
        if self.attached.len() <= i {
            self.attached.resize(i + 1, 0);
        }
        &mut self.attached[i]
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
        if let Some(l) = &self.limits {
            info.caps = l.clone();
        }
        info.caps.cross_channel = false;
        info.caps.managed_send = false;
        info
    }

    fn cross_channel(&self) -> CrossChannel {
        self.placement
    }

    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        if attr.cross_channel || attr.managed_send {
            return Err(RnicError::NotSupported("cross-channel and managed QPs: this NIC has no in-NIC cross-channel"));
        }
        let Some(limits) = self.limits.clone() else { return self.inner.create_qp(pd, attr) };
        let info = self.inner.device_info();
        let name = info.name;
        let send = attr.caps.max_send_wr as u64 + MARKER_SLOTS as u64;
        let recv = attr.caps.max_recv_wr.max(1) as u64;
        let hw = QpCaps { max_send_wr: send.min(u32::MAX as u64) as u32, ..attr.caps };
        sizing::check_send_depth(&name, SqModel::of(&info.caps), limits.max_qp_wr, &hw, hw.max_send_wr)?;
        let (s, r) = (attr.send_cq.0, attr.recv_cq.0);
        if s == r {
            sizing::cq_ring_need(s, *self.attached_mut(s), send + recv, limits.max_cqe)?;
        } else {
            sizing::cq_ring_need(s, *self.attached_mut(s), send, limits.max_cqe)?;
            sizing::cq_ring_need(r, *self.attached_mut(r), recv, limits.max_cqe)?;
        }
        let qp = self.inner.create_qp(pd, attr)?;
        *self.attached_mut(s) += send;
        *self.attached_mut(r) += recv;
        let i = qp.handle.0 as usize;
        if self.qp_queues.len() <= i {
            self.qp_queues.resize(i + 1, None);
        }
        self.qp_queues[i] = Some((s, send, r, recv));
        Ok(qp)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        self.inner.destroy_qp(qp)?;
        if let Some((s, send, r, recv)) = self.qp_queues.get_mut(qp.0 as usize).and_then(Option::take) {
            let a = self.attached_mut(s);
            *a = a.saturating_sub(send);
            let a = self.attached_mut(r);
            *a = a.saturating_sub(recv);
        }
        Ok(())
    }

    crate::forward_rnic!(|s| s.inner; port_info, port_traffic, initial_psn, backend_counters, clock_ns, alloc_pd, reg_mr, dereg_mr, write_mr, read_mr, create_cq,
        destroy_cq, modify_qp, qp_state, post_send, post_recv, poll_cq);
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

    /// rxe's limits as rdma-core's rxe reports them.
    fn rxe_caps() -> DeviceCaps {
        DeviceCaps {
            cross_channel: false,
            managed_send: false,
            max_qp_wr: 16383,
            max_cqe: 32767,
            max_inline_data: 220,
            traffic_classes: 0,
            max_rd_atomic: 128,
            vendor: (0, 0),
        }
    }

    /// The dataplane on an rxe-sized NIC: its default queues for 24 QPs
    /// do not fit `max_cqe` (the first run on rxe would fail at start-up),
    /// the depths fitted to the device's caps do, and the run completes.
    #[test]
    fn dataplane_queues_fitted_to_rxe_limits() {
        use crate::engine::{Dataplane, DataplaneConfig};
        use crate::policy::PolicyHost;
        let qps = 24;
        let fabric = SimFabric::pair(1);
        let nic = HostOnly::with_limits(fabric.nic(0), CrossChannel::HostGated, rxe_caps());
        let host = PolicyHost::load("passthrough").expect("policy");
        let mut dp = Dataplane::new(nic, host, DataplaneConfig::for_qps(qps)).expect("dataplane");
        let t = dp.add_tenant("t", 1).expect("tenant").id;
        let refused = (0..qps).map(|_| dp.create_qp(t, 0)).find_map(Result::err).expect("refused");
        assert!(refused.to_string().contains("max_cqe 32767"), "{refused}");

        let nic = HostOnly::with_limits(fabric.nic(0), CrossChannel::HostGated, rxe_caps());
        let mut cfg = DataplaneConfig::for_qps(qps);
        (cfg.sq_depth, cfg.rq_depth) = sizing::fit_queue_depths(&nic.device_info(), qps, cfg.sq_depth, cfg.rq_depth);
        assert_eq!((cfg.sq_depth, cfg.rq_depth), (1024, 1024));
        let host = PolicyHost::load("passthrough").expect("policy");
        let mut dp = Dataplane::new(nic, host, cfg).expect("dataplane");
        let t = dp.add_tenant("t", 1).expect("tenant").id;
        for _ in 0..qps {
            dp.create_qp(t, 0).expect("a QP within the device's CQ budget");
        }
    }

    #[test]
    fn limits_refuse_a_send_queue_past_max_qp_wr_with_its_markers() {
        let fabric = SimFabric::pair(1);
        let mut nic = HostOnly::with_limits(fabric.nic(0), CrossChannel::HostGated, rxe_caps());
        assert_eq!(nic.device_info().caps.max_cqe, 32767);
        let pd = nic.alloc_pd().expect("pd");
        let cq = nic.create_cq(CqAttr { depth: 1 << 20, ignore_overrun: false }).expect("a host-side depth is free");
        let mut attr = QpInitAttr::new(cq, cq);
        attr.caps.max_send_wr = 16382;
        attr.caps.max_recv_wr = 1;
        let e = nic.create_qp(pd, attr).expect_err("16382 + 2 markers > 16383");
        assert!(e.to_string().contains("max_qp_wr 16383"), "{e}");
        attr.caps.max_send_wr = 16381;
        let qp = nic.create_qp(pd, attr).expect("fits");
        let e = nic.create_qp(pd, attr).expect_err("two such QPs exceed max_cqe on one CQ");
        assert!(e.to_string().contains("max_cqe"), "{e}");
        nic.destroy_qp(qp.handle).expect("destroy");
        nic.create_qp(pd, attr).expect("fits again once the first is gone");
    }
}
