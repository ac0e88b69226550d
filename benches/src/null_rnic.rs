//! A null RNIC: an infinitely fast NIC that executes every posted WQE at
//! once, moves no bytes and costs (almost) nothing, so that a benchmark
//! over it measures the dataplane loop alone: the upper bound of what the
//! loop can dispatch on one core, whatever NIC it drives.
//!
//! What it keeps of verbs semantics is what the loop relies on: handles,
//! CQs that return one CQE per signaled (or `sq_sig_all`) send WQE, in
//! posting order, and per-QP state. It reports cross-channel and managed
//! send queues, as the simulated ConnectX-6 and a ConnectX under MLNX_OFED
//! do, so the loop posts what it posts for PeRF's hardware: zero-weight
//! WRs and hand-offs through the preemption control QPs. It executes a
//! WAIT and a SEND_ENABLE at once like any other WQE (every WQE completes
//! when posted, so every condition a WAIT names already holds). Its clock
//! is a monotonic wall clock, so policy ticks come at their real rate.

use std::collections::VecDeque;
use std::time::Instant;

use perf_dataplane::rnic::*;

struct NullQp {
    send_cq: usize,
    sig_all: bool,
    state: QpState,
}

/// A CQ: its entries, and for an ignore-overrun CQ (a preemption control
/// QP's counter) its depth, past which the oldest entry gives way.
struct NullCq {
    wcs: VecDeque<Wc>,
    overrun_at: Option<usize>,
}

/// The null RNIC (see the module documentation).
pub struct NullRnic {
    epoch: Instant,
    pds: u32,
    mrs: Vec<Option<Mr>>,
    cqs: Vec<Option<NullCq>>,
    qps: Vec<Option<NullQp>>,
}

impl Default for NullRnic {
    fn default() -> Self {
        Self::new()
    }
}

impl NullRnic {
    /// A fresh device with nothing allocated.
    pub fn new() -> Self {
        NullRnic { epoch: Instant::now(), pds: 0, mrs: Vec::new(), cqs: Vec::new(), qps: Vec::new() }
    }

    fn qp(&mut self, qp: QpHandle) -> Result<&mut NullQp, RnicError> {
        self.qps
            .get_mut(qp.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })
    }

    /// Heap bytes the device holds for its objects (the CQ entries
    /// waiting to be polled above all): what a real NIC keeps in its own
    /// rings, not the dataplane's.
    pub fn heap_bytes(&self) -> usize {
        let cqs: usize = self.cqs.iter().flatten().map(|q| q.wcs.capacity() * std::mem::size_of::<Wc>()).sum();
        cqs + self.cqs.capacity() * std::mem::size_of::<Option<NullCq>>()
            + self.qps.capacity() * std::mem::size_of::<Option<NullQp>>()
            + self.mrs.capacity() * std::mem::size_of::<Option<Mr>>()
    }

    fn cq_index(&self, cq: CqHandle) -> Result<usize, RnicError> {
        match self.cqs.get(cq.0 as usize) {
            Some(Some(_)) => Ok(cq.0 as usize),
            _ => Err(RnicError::InvalidHandle { kind: "cq", id: cq.0 }),
        }
    }
}

impl Rnic for NullRnic {
    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "null".into(),
            caps: DeviceCaps {
                cross_channel: true,
                managed_send: true,
                max_qp_wr: 1 << 15,
                max_cqe: 1 << 22,
                max_inline_data: 256,
                traffic_classes: 8,
                max_rd_atomic: 16,
                vendor: (0, 0),
            },
        }
    }

    fn port_info(&self) -> PortInfo {
        PortInfo { active: true, link_gbps: 100, mtu: 4096, gid: [0; 16] }
    }

    fn clock_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, RnicError> {
        self.pds += 1;
        Ok(PdHandle(self.pds))
    }

    fn reg_mr(&mut self, _pd: PdHandle, len: usize, _access: AccessFlags) -> Result<Mr, RnicError> {
        let id = self.mrs.len() as u32;
        // Regions get disjoint fake addresses; no memory stands behind them.
        let mr = Mr { handle: MrHandle(id), addr: (id as u64 + 1) << 40, len, lkey: id + 1, rkey: id + 1 };
        self.mrs.push(Some(mr));
        Ok(mr)
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
        match self.mrs.get_mut(mr.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(RnicError::InvalidHandle { kind: "mr", id: mr.0 }),
        }
    }

    fn write_mr(&mut self, _mr: MrHandle, _offset: usize, _data: &[u8]) -> Result<(), RnicError> {
        Ok(())
    }

    fn read_mr(&self, _mr: MrHandle, _offset: usize, out: &mut [u8]) -> Result<(), RnicError> {
        out.fill(0);
        Ok(())
    }

    fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError> {
        let overrun_at = attr.ignore_overrun.then_some(attr.depth.max(1) as usize);
        self.cqs.push(Some(NullCq { wcs: VecDeque::new(), overrun_at }));
        Ok(CqHandle(self.cqs.len() as u32 - 1))
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError> {
        let i = self.cq_index(cq)?;
        self.cqs[i] = None;
        Ok(())
    }

    fn create_qp(&mut self, _pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        let send_cq = self.cq_index(attr.send_cq)?;
        self.cq_index(attr.recv_cq)?;
        let id = self.qps.len() as u32;
        self.qps.push(Some(NullQp { send_cq, sig_all: attr.sq_sig_all, state: QpState::Reset }));
        Ok(Qp { handle: QpHandle(id), qp_num: id + 1 })
    }

    fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError> {
        let q = self.qp(qp)?;
        q.state = match transition {
            QpTransition::Init { .. } => QpState::Init,
            QpTransition::Rtr { .. } => QpState::Rtr,
            QpTransition::Rts { .. } => QpState::Rts,
            QpTransition::Err => QpState::Err,
            QpTransition::Reset => QpState::Reset,
        };
        Ok(())
    }

    fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError> {
        self.qps
            .get(qp.0 as usize)
            .and_then(Option::as_ref)
            .map(|q| q.state)
            .ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        self.qp(qp)?;
        self.qps[qp.0 as usize] = None;
        Ok(())
    }

    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let now = self.clock_ns();
        let q = self.qp(qp).map_err(|error| PostError { index: 0, error })?;
        if q.state != QpState::Rts {
            let state = q.state;
            return Err(PostError { index: 0, error: RnicError::InvalidState { op: "post_send", state } });
        }
        let (cq, sig_all, qp_num) = (q.send_cq, q.sig_all, qp.0 + 1);
        let cq = self.cqs[cq]
            .as_mut()
            .ok_or(PostError { index: 0, error: RnicError::InvalidHandle { kind: "cq", id: cq as u32 } })?;
        for wr in wrs.iter().filter(|wr| wr.signaled || sig_all) {
            if cq.overrun_at.is_some_and(|depth| cq.wcs.len() >= depth) {
                cq.wcs.pop_front();
            }
            cq.wcs.push_back(Wc {
                wr_id: wr.wr_id,
                status: WcStatus::Success,
                opcode: wr.opcode.wc_opcode(),
                byte_len: wr.len() as u32,
                imm: None,
                qp_num,
                timestamp_ns: now,
            });
        }
        Ok(())
    }

    fn post_recv(&mut self, qp: QpHandle, _wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        // Nothing ever arrives: receives stay posted and never complete.
        self.qp(qp).map(|_| ()).map_err(|error| PostError { index: 0, error })
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        let i = self.cq_index(cq)?;
        let q = self.cqs[i].as_mut().ok_or(RnicError::InvalidHandle { kind: "cq", id: cq.0 })?;
        let n = out.len().min(q.wcs.len());
        for (slot, wc) in out.iter_mut().zip(q.wcs.drain(..n)) {
            *slot = wc;
        }
        Ok(n)
    }
}
