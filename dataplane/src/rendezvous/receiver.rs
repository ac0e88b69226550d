//! The receiving end of SEND rendezvous: a wrapper of the receiving host's
//! NIC that advertises the applications' large RECVs to the sending
//! dataplane and reports a rendezvous SEND's whole length on its RECV's
//! completion (the protocol: [`super`]). Everything else passes through.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::{
    ring_slots, slot_offset, Descriptor, Record, ADVERTISE_ABOVE, AGENT_WR_ID, DESCRIPTOR_BYTES, RECORD_BYTES,
};
use crate::rnic::{
    AccessFlags, CqHandle, Mr, MrHandle, Payload, PdHandle, PostError, Qp, QpHandle, QpInitAttr, RecvWr, RemoteAddr,
    Rnic, RnicError, SendWr, Wc, WcOpcode, WrOpcode,
};

/// One attached QP: its RECVs in order, what was advertised, where.
struct RecvQp {
    handle: QpHandle,
    /// The sending dataplane's descriptor ring of this QP.
    ring: RemoteAddr,
    /// This end's record ring of this QP (the sender writes it).
    records: Mr,
    /// Entries of either ring.
    slots: u32,
    /// RECVs posted, and completed.
    posted: u64,
    completed: u64,
    /// RECVs posted and not yet advertised: (sequence number, descriptor
    /// if the RECV qualifies).
    unadvertised: VecDeque<(u64, Option<Descriptor>)>,
    /// This end's WRITEs posted since the last signaled one, and how many
    /// may go unsignaled in a row (their send-queue slots are reclaimed
    /// only when a later signaled one completes).
    unsignaled: u32,
    signal_every: u32,
}

/// The receiving host's NIC with the receiving end of SEND rendezvous
/// ([`super`]): attach a QP with [`RendezvousReceiver::attach`] once it is
/// connected; until then, and on QPs never attached, it is the NIC itself.
pub struct RendezvousReceiver<R: Rnic> {
    inner: R,
    /// Regions registered through it: (region, access).
    mrs: Vec<(Mr, AccessFlags)>,
    /// The PD, send-queue and receive-queue depths each QP was created
    /// with.
    qp_pd: FxHashMap<QpHandle, (PdHandle, u32, u32)>,
    /// Attached QPs, by QP number (completions name the number).
    attached: FxHashMap<u32, RecvQp>,
    /// QP handle to QP number, for the attached ones.
    numbers: FxHashMap<QpHandle, u32>,
}

impl<R: Rnic> RendezvousReceiver<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        RendezvousReceiver {
            inner,
            mrs: Vec::new(),
            qp_pd: FxHashMap::default(),
            attached: FxHashMap::default(),
            numbers: FxHashMap::default(),
        }
    }

    /// The wrapped NIC.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// Entries of QP `qp`'s rings ([`ring_slots`] of its receive queue),
    /// for the sending dataplane's descriptor ring.
    pub fn ring_slots(&self, qp: QpHandle) -> Result<u32, RnicError> {
        let (_, _, rq) = self.created(qp)?;
        Ok(ring_slots(rq))
    }

    fn created(&self, qp: QpHandle) -> Result<(PdHandle, u32, u32), RnicError> {
        self.qp_pd.get(&qp).copied().ok_or(RnicError::InvalidArgument(format!("QP {} was not created here", qp.0)))
    }

    /// Attaches QP `qp` (number `qp_num`), whose sending dataplane's
    /// descriptor ring is `ring` ([`RendezvousReceiver::ring_slots`]
    /// entries): registers the QP's record ring and
    /// returns its address for the sender. RECVs posted from now on are
    /// advertised; attach before posting any.
    pub fn attach(&mut self, qp: QpHandle, qp_num: u32, ring: RemoteAddr) -> Result<RemoteAddr, RnicError> {
        let (pd, sq_depth, rq_depth) = self.created(qp)?;
        let slots = ring_slots(rq_depth);
        let records = self.inner.reg_mr(
            pd,
            slots as usize * RECORD_BYTES,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )?;
        self.attached.insert(
            qp_num,
            RecvQp {
                handle: qp,
                ring,
                records,
                slots,
                posted: 0,
                completed: 0,
                unadvertised: VecDeque::new(),
                unsignaled: 0,
                signal_every: (sq_depth / 4).clamp(1, 32),
            },
        );
        self.numbers.insert(qp, qp_num);
        Ok(records.remote(0))
    }

    /// What RECV `wr` would advertise as RECV `seq`: one scatter entry of
    /// more than [`ADVERTISE_ABOVE`] bytes in a region the peer may write.
    fn descriptor(&self, seq: u64, wr: &RecvWr<'_>) -> Option<Descriptor> {
        let [sge] = wr.sgl else { return None };
        if sge.length <= ADVERTISE_ABOVE {
            return None;
        }
        let (mr, _) = self.mrs.iter().find(|(m, access)| {
            m.lkey == sge.lkey
                && access.contains(AccessFlags::REMOTE_WRITE)
                && sge.addr >= m.addr
                && sge.addr + sge.length as u64 <= m.addr + m.len as u64
        })?;
        Some(Descriptor { seq, buffer: RemoteAddr { addr: sge.addr, rkey: mr.rkey }, len: sge.length })
    }

    /// Writes the descriptors of QP `qp_num` whose ring slots are free
    /// (fewer than the ring's entries of RECVs before them outstanding).
    fn advertise(&mut self, qp_num: u32) {
        let Some(q) = self.attached.get_mut(&qp_num) else { return };
        while let Some(&(seq, desc)) = q.unadvertised.front() {
            if seq >= q.completed + q.slots as u64 {
                break;
            }
            if let Some(d) = desc {
                let bytes = d.encode();
                let signaled = q.unsignaled + 1 >= q.signal_every;
                let wr = SendWr {
                    wr_id: AGENT_WR_ID,
                    opcode: WrOpcode::Write {
                        remote: RemoteAddr {
                            addr: q.ring.addr + slot_offset(seq, q.slots, DESCRIPTOR_BYTES) as u64,
                            rkey: q.ring.rkey,
                        },
                    },
                    payload: Payload::Inline(&bytes),
                    signaled,
                };
                // A send queue that cannot take it (full: the application's
                // own sends hold it; or broken) is tried again at the next
                // completion; meanwhile the SENDs go whole, always correct.
                if self.inner.post_send(q.handle, &[wr]).is_err() {
                    return;
                }
                q.unsignaled = if signaled { 0 } else { q.unsignaled + 1 };
            }
            q.unadvertised.pop_front();
        }
    }

    /// A RECV of QP `qp_num` completed: its whole length if a record names
    /// it; then advertise what its slot frees.
    fn on_recv(&mut self, qp_num: u32, wc: &mut Wc) {
        let Some(q) = self.attached.get_mut(&qp_num) else { return };
        let seq = q.completed;
        q.completed += 1;
        let mut b = [0u8; RECORD_BYTES];
        if self.inner.read_mr(q.records.handle, slot_offset(seq, q.slots, RECORD_BYTES), &mut b).is_ok() {
            if let Some(r) = Record::decode(&b, seq) {
                if wc.status == crate::rnic::WcStatus::Success {
                    wc.byte_len = r.len;
                }
            }
        }
        self.advertise(qp_num);
    }
}

impl<R: Rnic> Rnic for RendezvousReceiver<R> {
    fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError> {
        let mr = self.inner.reg_mr(pd, len, access)?;
        self.mrs.push((mr, access));
        Ok(mr)
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
        self.mrs.retain(|(m, _)| m.handle != mr);
        self.inner.dereg_mr(mr)
    }

    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        let qp = self.inner.create_qp(pd, attr)?;
        self.qp_pd.insert(qp.handle, (pd, attr.caps.max_send_wr, attr.caps.max_recv_wr));
        Ok(qp)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        if let Some(num) = self.numbers.remove(&qp) {
            if let Some(q) = self.attached.remove(&num) {
                let _ = self.inner.dereg_mr(q.records.handle);
            }
        }
        self.qp_pd.remove(&qp);
        self.inner.destroy_qp(qp)
    }

    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let result = self.inner.post_recv(qp, wrs);
        let Some(&num) = self.numbers.get(&qp) else { return result };
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err(e) => e.index,
        };
        let Some(first) = self.attached.get(&num).map(|q| q.posted) else { return result };
        let descs: Vec<_> = wrs[..posted]
            .iter()
            .enumerate()
            .map(|(k, wr)| (first + k as u64, self.descriptor(first + k as u64, wr)))
            .collect();
        if let Some(q) = self.attached.get_mut(&num) {
            q.posted += posted as u64;
            q.unadvertised.extend(descs);
        }
        self.advertise(num);
        result
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        loop {
            let n = self.inner.poll_cq(cq, out)?;
            let mut kept = 0;
            for k in 0..n {
                let mut wc = out[k];
                let recv = matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
                if !recv && wc.wr_id == AGENT_WR_ID && self.attached.contains_key(&wc.qp_num) {
                    // Its slots are free again: advertise what waited.
                    self.advertise(wc.qp_num);
                    continue;
                }
                if recv {
                    self.on_recv(wc.qp_num, &mut wc);
                }
                out[kept] = wc;
                kept += 1;
            }
            // Only this end's own completions: poll again, so an empty
            // answer means the CQ is empty.
            if kept > 0 || n == 0 {
                return Ok(kept);
            }
        }
    }

    crate::forward_rnic!(|s| s.inner; device_info, cross_channel, port_info, port_traffic, initial_psn, backend_counters, clock_ns, alloc_pd, write_mr, read_mr,
        create_cq, destroy_cq, modify_qp, qp_state, post_send);
}
