//! The sending end of SEND rendezvous (the protocol: [`crate::rendezvous`]):
//! per QP, the descriptor ring the receiving end writes and the staging of
//! the records this end writes back; the lookup that lets a SEND go as
//! WRITE chunks plus its first chunk as the SEND, and the record that lets
//! any message consuming a RECV (SEND, WRITE_WITH_IMM) be split with its
//! whole length reported at the receiver.

use super::*;
use crate::rendezvous::{slot_offset, Descriptor, Record, DESCRIPTOR_BYTES, RECORD_BYTES, SLOTS};

/// A QP's rendezvous state: its ring region (descriptors, then the staging
/// of the records to post inline) and the receiving end's record ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpRendezvous {
    pub ring: Mr,
    /// Entries of either ring.
    pub slots: u32,
    /// The receiving end's record ring, once attached.
    pub records: Option<RemoteAddr>,
    /// The receiving end has advertised a RECV on this QP: a later large
    /// SEND whose advertisement is missing waits for it a while.
    pub advertised: bool,
}

/// How often a SEND waiting for its RECV's advertisement looks again, ns.
const DESCRIPTOR_POLL_NS: u64 = 500;
/// How long a SEND waits for its RECV's advertisement before it goes
/// whole, ns: a few small-message round trips on the reverse path (the
/// receiver reposts a RECV when the previous SEND lands; the sender may
/// post the next one as soon as its ACK is back, before the advertisement).
const DESCRIPTOR_WAIT_NS: u64 = 10_000;

/// A record to WRITE (inline, from its staging) to the receiver's record
/// ring just before the WQE that consumes the RECV it names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordWrite {
    pub remote: RemoteAddr,
    pub stage: Sge,
}

impl<R: Rnic> Dataplane<R> {
    /// The descriptor ring of tenant `t`'s QP `index`, of `slots` entries
    /// (the receiving end's
    /// [`ring_slots`](crate::rendezvous::RendezvousReceiver::ring_slots)),
    /// for the receiving end
    /// ([`crate::rendezvous::RendezvousReceiver::attach`]): registered in
    /// the tenant's protection domain on the first call, and not among the
    /// tenant's regions (its requests cannot name it).
    pub fn rendezvous_ring(&mut self, t: u32, index: u32, slots: u32) -> Result<RemoteAddr, EngineError> {
        let qi = self.qp_index(t, index)?;
        if let Some(r) = self.qps[qi].rendezvous {
            return Ok(r.ring.remote(0));
        }
        let slots = slots.clamp(SLOTS.0, SLOTS.1);
        let pd = self.live_tenant_mut(t)?.pd;
        let bytes = slots as usize * (DESCRIPTOR_BYTES + RECORD_BYTES);
        let ring = self.nic.reg_mr(pd, bytes, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
        self.qps[qi].rendezvous = Some(QpRendezvous { ring, slots, records: None, advertised: false });
        Ok(ring.remote(0))
    }

    /// Completes the rendezvous handshake of tenant `t`'s QP `index`: the
    /// receiving end's record ring. From now on the SENDs the policy asks
    /// to split go by rendezvous where the receiver advertised the RECV.
    pub fn attach_rendezvous(&mut self, t: u32, index: u32, records: RemoteAddr) -> Result<(), EngineError> {
        let qi = self.qp_index(t, index)?;
        let r = self.qps[qi].rendezvous.as_mut().ok_or(EngineError::NoRendezvousRing { tenant: t, index })?;
        r.records = Some(records);
        Ok(())
    }

    fn qp_index(&mut self, t: u32, index: u32) -> Result<usize, EngineError> {
        self.tenant_mut(t)?.qps.get(index as usize).copied().ok_or(EngineError::NoQp { tenant: t, index })
    }

    /// The buffer of the peer's RECV `seq` on QP `qi`, if the receiving
    /// end advertised it with room for `len` bytes.
    pub(super) fn advertised_recv(&mut self, qi: usize, seq: u64, len: u32) -> Option<RemoteAddr> {
        let r = self.qps[qi].rendezvous?;
        r.records?;
        let mut b = [0u8; DESCRIPTOR_BYTES];
        self.nic.read_mr(r.ring.handle, slot_offset(seq, r.slots, DESCRIPTOR_BYTES), &mut b).ok()?;
        let d = Descriptor::decode(&b, seq)?;
        if let Some(r) = self.qps[qi].rendezvous.as_mut() {
            r.advertised = true;
        }
        (d.len >= len).then_some(d.buffer)
    }

    /// Whether QP `qi`'s next SEND, whose RECV `seq` is not advertised,
    /// should wait for the advertisement instead of going whole: the
    /// receiving end has advertised on this QP before, and the SEND has
    /// not waited [`DESCRIPTOR_WAIT_NS`] yet. Parks the QP until the next
    /// look.
    pub(super) fn wait_for_descriptor(&mut self, qi: usize, now: u64) -> bool {
        let q = &mut self.qps[qi];
        if !q.rendezvous.is_some_and(|r| r.advertised) {
            return false;
        }
        let since = *q.descriptor_wait_since.get_or_insert(now);
        if now.saturating_sub(since) >= DESCRIPTOR_WAIT_NS {
            q.descriptor_wait_since = None;
            self.counters.rendezvous_timeouts += 1;
            return false;
        }
        q.parked = true;
        self.descriptor_waiters.push(qi);
        let at = now + DESCRIPTOR_POLL_NS;
        self.descriptor_poll_ns = self.descriptor_poll_ns.min(at);
        true
    }

    /// At the look: the parked QPs may post again.
    pub(super) fn look_for_descriptors(&mut self, now: u64) {
        if now < self.descriptor_poll_ns {
            return;
        }
        self.descriptor_poll_ns = u64::MAX;
        let waiters = std::mem::take(&mut self.descriptor_waiters);
        for &qi in &waiters {
            if let Some(q) = self.qps.get_mut(qi) {
                q.parked = false;
                self.mark_post(qi);
            }
        }
        self.descriptor_waiters = waiters;
        self.descriptor_waiters.clear();
    }

    /// Stages the record of a message of `len` bytes that consumes the
    /// peer's RECV `seq` on QP `qi`, if a receiving end is attached.
    pub(super) fn stage_record(&mut self, qi: usize, seq: u64, len: u32) -> Option<RecordWrite> {
        let r = self.qps[qi].rendezvous?;
        let records = r.records?;
        let stage_at = r.slots as usize * DESCRIPTOR_BYTES + slot_offset(seq, r.slots, RECORD_BYTES);
        self.nic.write_mr(r.ring.handle, stage_at, &Record { seq, len }.encode()).ok()?;
        Some(RecordWrite {
            remote: RemoteAddr {
                addr: records.addr + slot_offset(seq, r.slots, RECORD_BYTES) as u64,
                rkey: records.rkey,
            },
            stage: r.ring.sge(stage_at, RECORD_BYTES as u32),
        })
    }
}
