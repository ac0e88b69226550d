//! The sending end of SEND rendezvous (the protocol: [`crate::rendezvous`]):
//! per QP, the descriptor ring the receiving end writes and the staging of
//! the records this end writes back; the lookup that turns a SEND into
//! WRITE chunks plus its first chunk as the SEND.

use super::*;
use crate::rendezvous::{slot_offset, Descriptor, Record, DESCRIPTOR_BYTES, RECORD_BYTES, SLOTS};

/// A QP's rendezvous state: its ring region (descriptors, then the staging
/// of the records to post inline) and the receiving end's record ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpRendezvous {
    pub ring: Mr,
    /// The receiving end's record ring, once attached.
    pub records: Option<RemoteAddr>,
}

/// Where a SEND moved by rendezvous goes: the RECV's buffer, the record's
/// slot at the receiver, and the record's bytes staged for an inline WRITE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RendezvousTarget {
    pub buffer: RemoteAddr,
    pub record: RemoteAddr,
    pub stage: Sge,
}

/// Bytes of a QP's ring region.
const RING_BYTES: usize = SLOTS as usize * (DESCRIPTOR_BYTES + RECORD_BYTES);

impl<R: Rnic> Dataplane<R> {
    /// The descriptor ring of tenant `t`'s QP `index`, for the receiving
    /// end ([`crate::rendezvous::RendezvousReceiver::attach`]): registered
    /// in the tenant's protection domain on the first call, and not among
    /// the tenant's regions (its requests cannot name it).
    pub fn rendezvous_ring(&mut self, t: u32, index: u32) -> Result<RemoteAddr, RnicError> {
        let qi = self.qp_index(t, index)?;
        if let Some(r) = self.qps[qi].rendezvous {
            return Ok(r.ring.remote(0));
        }
        let pd = self.live_tenant_mut(t)?.pd;
        let ring = self.nic.reg_mr(pd, RING_BYTES, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
        self.qps[qi].rendezvous = Some(QpRendezvous { ring, records: None });
        Ok(ring.remote(0))
    }

    /// Completes the rendezvous handshake of tenant `t`'s QP `index`: the
    /// receiving end's record ring. From now on the SENDs the policy asks
    /// to split go by rendezvous where the receiver advertised the RECV.
    pub fn attach_rendezvous(&mut self, t: u32, index: u32, records: RemoteAddr) -> Result<(), RnicError> {
        let qi = self.qp_index(t, index)?;
        let r = self.qps[qi]
            .rendezvous
            .as_mut()
            .ok_or(RnicError::InvalidArgument(format!("QP {index} has no rendezvous ring: ask for it first")))?;
        r.records = Some(records);
        Ok(())
    }

    fn qp_index(&mut self, t: u32, index: u32) -> Result<usize, RnicError> {
        self.tenant_mut(t)?.qps.get(index as usize).copied().ok_or(RnicError::InvalidArgument(format!("no QP {index}")))
    }

    /// For a SEND of `len` bytes on QP `qi` that consumes the peer's RECV
    /// `seq`: where it goes by rendezvous, if the receiver advertised that
    /// RECV with room for it; stages the record.
    pub(super) fn rendezvous_target(&mut self, qi: usize, seq: u64, len: u32) -> Option<RendezvousTarget> {
        let r = self.qps[qi].rendezvous?;
        let record = r.records?;
        let mut b = [0u8; DESCRIPTOR_BYTES];
        self.nic.read_mr(r.ring.handle, slot_offset(seq, DESCRIPTOR_BYTES), &mut b).ok()?;
        let d = Descriptor::decode(&b, seq).filter(|d| d.len >= len)?;
        let stage_at = SLOTS as usize * DESCRIPTOR_BYTES + slot_offset(seq, RECORD_BYTES);
        self.nic.write_mr(r.ring.handle, stage_at, &Record { seq, len }.encode()).ok()?;
        Some(RendezvousTarget {
            buffer: d.buffer,
            record: RemoteAddr { addr: record.addr + slot_offset(seq, RECORD_BYTES) as u64, rkey: record.rkey },
            stage: r.ring.sge(stage_at, RECORD_BYTES as u32),
        })
    }
}
