//! The verbs of one simulated host, as the [`Rnic`](crate::rnic::Rnic)
//! implementation calls them: object creation with validation, the QP
//! state machine, and posting work.

use smallvec::SmallVec;

use super::cq::CqState;
use super::memory::ExternalMemory;
use super::qp::{PeerRef, RecvEntry, SimQp, SqEntry, WqeStage};
use super::world::{World, QPN_BASE};
use crate::rnic::*;

impl World {
    fn cq_ref(&self, h: usize, cq: CqHandle) -> Result<&CqState, RnicError> {
        self.hosts[h]
            .cqs
            .get(cq.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(RnicError::InvalidHandle { kind: "cq", id: cq.0 })
    }

    fn qp_ref(&self, h: usize, qp: QpHandle) -> Result<&SimQp, RnicError> {
        self.qp(h, qp.0).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })
    }

    pub(crate) fn v_alloc_pd(&mut self, h: usize) -> PdHandle {
        self.hosts[h].pds += 1;
        PdHandle(self.hosts[h].pds - 1)
    }

    fn check_pd(&self, h: usize, pd: PdHandle) -> Result<(), RnicError> {
        if pd.0 < self.hosts[h].pds {
            Ok(())
        } else {
            Err(RnicError::InvalidHandle { kind: "pd", id: pd.0 })
        }
    }

    pub(crate) fn v_reg_mr(
        &mut self,
        h: usize,
        pd: PdHandle,
        len: usize,
        access: AccessFlags,
    ) -> Result<Mr, RnicError> {
        self.check_pd(h, pd)?;
        if len == 0 || len > (1usize << 34) {
            return Err(RnicError::InvalidArgument(format!("memory region length {len} out of range (1 B to 16 GiB)")));
        }
        let (idx, addr, key) = self.mems[h].register(pd.0, len, access);
        Ok(Mr { handle: MrHandle(idx), addr, len, lkey: key, rkey: key })
    }

    pub(crate) fn v_reg_mr_external(
        &mut self,
        h: usize,
        pd: PdHandle,
        mem: Box<dyn ExternalMemory>,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<Mr, RnicError> {
        self.check_pd(h, pd)?;
        let len = mem.bytes().len();
        if len == 0 || len > (1usize << 34) {
            return Err(RnicError::InvalidArgument(format!("memory region length {len} out of range (1 B to 16 GiB)")));
        }
        if iova.is_some_and(|a| a.checked_add(len as u64).is_none()) {
            return Err(RnicError::InvalidArgument(format!("a region of {len} B at {iova:?} wraps the address space")));
        }
        let (idx, addr, key) = self.mems[h].register_external(pd.0, mem, access, iova);
        Ok(Mr { handle: MrHandle(idx), addr, len, lkey: key, rkey: key })
    }

    pub(crate) fn v_write_mr(&mut self, h: usize, mr: MrHandle, off: usize, data: &[u8]) -> Result<(), RnicError> {
        let stamp = self.copier.next_stamp();
        self.mems[h].cpu_write(mr.0, off, data, stamp)
    }

    pub(crate) fn v_create_cq(&mut self, h: usize, attr: CqAttr) -> Result<CqHandle, RnicError> {
        if attr.depth == 0 || attr.depth > self.prof.max_cqe {
            return Err(RnicError::InvalidArgument(format!(
                "CQ depth {} out of range (1 to {})",
                attr.depth, self.prof.max_cqe
            )));
        }
        self.hosts[h].cqs.push(Some(CqState::new(attr.depth, attr.ignore_overrun)));
        Ok(CqHandle(self.hosts[h].cqs.len() as u32 - 1))
    }

    pub(crate) fn v_destroy_cq(&mut self, h: usize, cq: CqHandle) -> Result<(), RnicError> {
        if self.cq_ref(h, cq)?.users > 0 {
            return Err(RnicError::Busy("CQ is still attached to a QP"));
        }
        self.hosts[h].cqs[cq.0 as usize] = None;
        Ok(())
    }

    pub(crate) fn v_create_qp(&mut self, h: usize, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        self.check_pd(h, pd)?;
        self.cq_ref(h, attr.send_cq)?;
        self.cq_ref(h, attr.recv_cq)?;
        let c = attr.caps;
        if c.max_send_wr == 0 || c.max_send_wr > self.prof.max_qp_wr || c.max_recv_wr > self.prof.max_qp_wr {
            return Err(RnicError::InvalidArgument(format!("QP depth out of range (1 to {})", self.prof.max_qp_wr)));
        }
        if c.max_inline_data > self.prof.max_inline_data {
            return Err(RnicError::InvalidArgument(format!(
                "max_inline_data {} exceeds the device's {}",
                c.max_inline_data, self.prof.max_inline_data
            )));
        }
        if attr.traffic_class > 7 {
            return Err(RnicError::InvalidArgument(format!(
                "traffic class {} out of range (0 to 7)",
                attr.traffic_class
            )));
        }
        let idx = self.hosts[h].qps.len() as u32;
        let qp_num = QPN_BASE + idx;
        self.hosts[h].qps.push(Some(SimQp::new(qp_num, pd.0, attr.send_cq.0, attr.recv_cq.0, &attr)));
        for cq in [attr.send_cq, attr.recv_cq] {
            if let Some(c) = self.hosts[h].cqs[cq.0 as usize].as_mut() {
                c.users += 1;
            }
        }
        Ok(Qp { handle: QpHandle(idx), qp_num })
    }

    pub(crate) fn v_destroy_qp(&mut self, h: usize, qp: QpHandle) -> Result<(), RnicError> {
        let q = self.qp_ref(h, qp)?;
        let cqs = [q.send_cq, q.recv_cq];
        self.hosts[h].qps[qp.0 as usize] = None;
        for cq in cqs {
            if let Some(c) = self.hosts[h].cqs.get_mut(cq as usize).and_then(Option::as_mut) {
                c.users = c.users.saturating_sub(1);
            }
        }
        Ok(())
    }

    pub(crate) fn v_modify_qp(&mut self, h: usize, qp: QpHandle, t: QpTransition) -> Result<(), RnicError> {
        let state = self.qp_ref(h, qp)?.state;
        let bad = |op| Err(RnicError::InvalidState { op, state });
        match t {
            QpTransition::Init { access } => {
                if state != QpState::Reset {
                    return bad("modify to INIT");
                }
                let q = self.qp_mut(h, qp.0).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })?;
                q.access = access;
                q.state = QpState::Init;
            }
            QpTransition::Rtr { remote } => {
                if state != QpState::Init {
                    return bad("modify to RTR");
                }
                let host = self
                    .host_by_gid(&remote.gid)
                    .ok_or_else(|| RnicError::InvalidArgument(format!("no host has GID {:02x?}", remote.gid)))?;
                let rqi =
                    remote.qp_num.checked_sub(QPN_BASE).filter(|&i| self.qp(host, i).is_some()).ok_or_else(|| {
                        RnicError::InvalidArgument(format!("no QP 0x{:x} on the remote host", remote.qp_num))
                    })?;
                let q = self.qp_mut(h, qp.0).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })?;
                q.peer = Some(PeerRef { host, qp: rqi });
                // A new connection: the peer's requests start afresh.
                q.resp_next = 0;
                q.state = QpState::Rtr;
            }
            QpTransition::Rts { retry_cnt, rnr_retry } => {
                if state != QpState::Rtr {
                    return bad("modify to RTS");
                }
                if retry_cnt > 7 || rnr_retry > 7 {
                    return Err(RnicError::InvalidArgument("retry_cnt and rnr_retry range over 0 to 7".into()));
                }
                let q = self.qp_mut(h, qp.0).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })?;
                q.retry_cnt = retry_cnt;
                q.rnr_retry = rnr_retry;
                q.rnr_left = rnr_retry;
                q.retry_left = retry_cnt;
                q.state = QpState::Rts;
                self.advance_processing(h, qp.0);
                self.requeue(h, qp.0);
            }
            QpTransition::Err => self.qp_error(h, qp.0),
            QpTransition::Reset => {
                let q = self.qp_mut(h, qp.0).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })?;
                let end = q.sq_end();
                q.sq.clear();
                q.sq_base = end;
                q.exec_next = end;
                q.proc_next = end;
                q.complete_next = end;
                q.enabled_upto = end;
                q.halted_at = u64::MAX;
                q.rq.clear();
                q.responses.clear();
                q.peer = None;
                q.epoch += 1;
                q.resp_next = 0;
                q.resp_from = None;
                q.resp_min_epoch = 0;
                q.timer_epoch = None;
                q.req_lost_at = None;
                q.resp_lost_at = None;
                q.acks_lost = 0;
                q.state = QpState::Reset;
            }
        }
        Ok(())
    }

    fn validate_send(&self, h: usize, q: &SimQp, wr: &SendWr<'_>) -> Result<(), RnicError> {
        if q.sq.len() as u32 >= q.caps.max_send_wr {
            return Err(RnicError::QueueFull { queue: "send", depth: q.caps.max_send_wr });
        }
        let inval = |m: String| Err(RnicError::InvalidArgument(m));
        match wr.opcode {
            WrOpcode::Wait { cq, .. } => {
                if !q.cross_channel {
                    return inval("WAIT needs a QP created with cross_channel".into());
                }
                self.cq_ref(h, cq)?;
            }
            WrOpcode::SendEnable { qp, .. } => {
                if !q.cross_channel {
                    return inval("SEND_ENABLE needs a QP created with cross_channel".into());
                }
                if !self.qp_ref(h, qp)?.managed {
                    return inval(format!("SEND_ENABLE target QP {} is not managed", qp.0));
                }
            }
            WrOpcode::Read { .. } if matches!(wr.payload, Payload::Inline(_)) => {
                return inval("RDMA READ cannot be inline".into());
            }
            _ => {}
        }
        if !wr.opcode.moves_data() && !matches!(wr.payload, Payload::None) {
            return inval("control WQEs carry no payload".into());
        }
        match wr.payload {
            Payload::Sges(s) if s.len() as u32 > q.caps.max_send_sge => {
                inval(format!("{} SGEs exceed max_send_sge {}", s.len(), q.caps.max_send_sge))
            }
            Payload::Inline(b) if b.len() as u32 > q.caps.max_inline_data => {
                inval(format!("inline payload of {} B exceeds max_inline_data {}", b.len(), q.caps.max_inline_data))
            }
            _ if wr.len() > (1 << 31) => inval(format!("message of {} B exceeds 2 GiB", wr.len())),
            _ => Ok(()),
        }
    }

    pub(crate) fn v_post_send(&mut self, h: usize, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let state = self.qp_ref(h, qp).map_err(|e| at(0, e))?.state;
        match state {
            QpState::Rts | QpState::Err => {}
            s => return Err(at(0, RnicError::InvalidState { op: "post_send", state: s })),
        }
        let jitter = self.jitter(self.prof.doorbell_jitter_ps);
        let visible_at = self.now + self.prof.doorbell_ps + jitter;
        let now = self.now;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let Some(q) = self.qp(h, qp.0) else {
                result = Err(at(i, RnicError::InvalidHandle { kind: "qp", id: qp.0 }));
                break;
            };
            // A rejected request ends the list; the ones before it stay
            // posted and must still be processed (verbs `bad_wr`).
            if let Err(e) = self.validate_send(h, q, wr) {
                result = Err(at(i, e));
                break;
            }
            if q.state == QpState::Err {
                let wc = Wc::flushed(wr.wr_id, wr.opcode.wc_opcode(), q.qp_num, now / 1000);
                let cq = q.send_cq;
                self.push_cqe(h, cq, wc);
                continue;
            }
            let (sgl, inline) = match wr.payload {
                Payload::None => (SmallVec::new(), None),
                Payload::Sges(s) => (SmallVec::from_slice(s), None),
                Payload::Inline(b) => (SmallVec::new(), Some(SmallVec::from_slice(b))),
            };
            let entry = SqEntry {
                wr_id: wr.wr_id,
                op: wr.opcode,
                sgl,
                inline,
                len: wr.len(),
                signaled: wr.signaled,
                visible_at,
                ready_at: u64::MAX,
                sent: 0,
                stage: WqeStage::Queued,
            };
            if let Some(q) = self.qp_mut(h, qp.0) {
                q.sq.push_back(entry);
            }
        }
        self.advance_processing(h, qp.0);
        self.requeue(h, qp.0);
        result
    }

    pub(crate) fn v_post_recv(&mut self, h: usize, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let now_ns = self.now / 1000;
        for (i, wr) in wrs.iter().enumerate() {
            let q = self.qp(h, qp.0).ok_or_else(|| at(i, RnicError::InvalidHandle { kind: "qp", id: qp.0 }))?;
            match q.state {
                QpState::Reset => return Err(at(i, RnicError::InvalidState { op: "post_recv", state: q.state })),
                QpState::Err => {
                    let wc = Wc::flushed(wr.wr_id, WcOpcode::Recv, q.qp_num, now_ns);
                    let cq = q.recv_cq;
                    self.push_cqe(h, cq, wc);
                    continue;
                }
                _ => {}
            }
            if q.rq.len() as u32 >= q.caps.max_recv_wr {
                return Err(at(i, RnicError::QueueFull { queue: "recv", depth: q.caps.max_recv_wr }));
            }
            if wr.sgl.len() as u32 > q.caps.max_recv_sge {
                return Err(at(i, RnicError::InvalidArgument(format!("{} SGEs exceed max_recv_sge", wr.sgl.len()))));
            }
            let entry = RecvEntry { wr_id: wr.wr_id, sgl: SmallVec::from_slice(wr.sgl) };
            if let Some(q) = self.qp_mut(h, qp.0) {
                q.rq.push_back(entry);
            }
        }
        Ok(())
    }

    pub(crate) fn v_poll_cq(&mut self, h: usize, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        let c = self.hosts[h]
            .cqs
            .get_mut(cq.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(RnicError::InvalidHandle { kind: "cq", id: cq.0 })?;
        c.ring.poll(cq, out)
    }

    pub(crate) fn v_qp_state(&self, h: usize, qp: QpHandle) -> Result<QpState, RnicError> {
        Ok(self.qp_ref(h, qp)?.state)
    }
}
