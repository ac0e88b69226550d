//! SEND rendezvous: how two dataplanes, one at each end of a QP, move a
//! large SEND in chunks.
//!
//! A SEND consumes one RECV at the receiver and lands at the start of the
//! RECV's buffer, so the requester alone cannot split it: the NIC sends it
//! as one WQE, in turns as long as its scheduler gives any QP (64 KiB on a
//! ConnectX-6), and a small message of another tenant waits behind each
//! such turn. When both ends run the dataplane they agree on it instead:
//!
//! 1. The receiving end ([`RendezvousReceiver`], a wrapper of the
//!    receiving host's [`Rnic`](crate::rnic::Rnic)) advertises each RECV larger than
//!    [`ADVERTISE_ABOVE`] bytes (one scatter entry, in a region the peer may
//!    write): an 8-byte-aligned [`Descriptor`] (the RECV's sequence number
//!    on its QP, buffer address, rkey and length), written with a small
//!    inline RDMA WRITE into the sending dataplane's descriptor ring of
//!    that QP (as many entries as the QP's receive queue holds RECVs,
//!    [`ring_slots`], so every RECV posted is advertised at once; slot
//!    `seq % slots`). It advertises a RECV only once fewer than `slots`
//!    RECVs before it are outstanding, so a slot is never overwritten
//!    before its RECV completed.
//! 2. The sending dataplane counts the RECVs its messages consume on each
//!    QP (SEND and WRITE_WITH_IMM). For a SEND its policy asks to split
//!    (a [`perf_policy_sdk::SplitPlan`] with a chunk, ABI 1.4) whose RECV
//!    was advertised and is large enough, it posts the bytes after the
//!    first chunk as RDMA WRITE chunks into the RECV's buffer (each with
//!    the plan's zero-weight WRs, as any split message), then a 16-byte
//!    [`Record`] (sequence number, whole length) with an inline WRITE into
//!    the receiver's record ring, then the first chunk as the SEND itself.
//!    Reliable connection ordering places the chunks and the record before
//!    the SEND's RECV completes.
//! 3. The receiving end, polling the RECV's completion, finds the record
//!    of that sequence number and reports the whole length as the
//!    completion's `byte_len`: the application sees one RECV completion
//!    with every byte in its buffer, as from a whole SEND.
//!
//! Without an advertisement (the peer runs no dataplane, the RECV is small
//! or scattered, or its advertisement has not arrived yet) the SEND goes
//! whole, as before; nothing waits for the protocol. Both rings carry the
//! sequence number plus one in every entry (twice in a descriptor, at its
//! start and end, so a torn entry never matches), and an entry counts only
//! when it names the sequence number looked for.

mod receiver;

pub use receiver::RendezvousReceiver;

use crate::rnic::RemoteAddr;

/// Fewest and most entries of a QP's descriptor ring and record ring.
pub const SLOTS: (u32, u32) = (16, 4096);

/// Entries of the rings of a QP whose receive queue holds `recv_depth`
/// RECVs: one per RECV it can hold, within [`SLOTS`].
pub fn ring_slots(recv_depth: u32) -> u32 {
    recv_depth.clamp(SLOTS.0, SLOTS.1)
}
/// Bytes of one [`Descriptor`] entry.
pub const DESCRIPTOR_BYTES: usize = 32;
/// Bytes of one [`Record`] entry.
pub const RECORD_BYTES: usize = 16;
/// Only RECVs larger than this are advertised: a SEND up to this size
/// goes whole (the chunk of a split WRITE is 8 KiB in `fairshare`).
pub const ADVERTISE_ABOVE: u32 = 8192;
/// The `wr_id` of the receiving end's own WRITEs (filtered out of the
/// application's completions).
pub const AGENT_WR_ID: u64 = 0x5244_565a_0000_0000;

/// A RECV advertised by the receiving end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// The RECV's sequence number on its QP (0 for the first RECV posted).
    pub seq: u64,
    /// Its buffer, for the sender's RDMA WRITEs.
    pub buffer: RemoteAddr,
    /// Its length, bytes.
    pub len: u32,
}

impl Descriptor {
    /// The entry's bytes: `seq + 1`, address, rkey, length, `seq + 1`.
    pub fn encode(&self) -> [u8; DESCRIPTOR_BYTES] {
        let mut b = [0u8; DESCRIPTOR_BYTES];
        b[0..8].copy_from_slice(&(self.seq + 1).to_le_bytes());
        b[8..16].copy_from_slice(&self.buffer.addr.to_le_bytes());
        b[16..20].copy_from_slice(&self.buffer.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&(self.seq + 1).to_le_bytes());
        b
    }

    /// The descriptor of RECV `seq` in `b`, if `b` holds that one, whole.
    pub fn decode(b: &[u8; DESCRIPTOR_BYTES], seq: u64) -> Option<Descriptor> {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        (word(0) == seq + 1 && word(24) == seq + 1).then(|| Descriptor {
            seq,
            buffer: RemoteAddr { addr: word(8), rkey: half(16) },
            len: half(20),
        })
    }
}

/// The whole length of a SEND moved by rendezvous, for its RECV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The RECV's sequence number on its QP.
    pub seq: u64,
    /// The SEND's length, bytes.
    pub len: u32,
}

impl Record {
    /// The entry's bytes: `seq + 1`, length, 4 bytes of zero.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&(self.seq + 1).to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The record of RECV `seq` in `b`, if `b` holds that one.
    pub fn decode(b: &[u8; RECORD_BYTES], seq: u64) -> Option<Record> {
        let word = u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8]));
        let len = u32::from_le_bytes(b[8..12].try_into().unwrap_or([0; 4]));
        (word == seq + 1).then_some(Record { seq, len })
    }
}

/// Offset of RECV `seq`'s entry in a ring of `slots` entries of `entry`
/// bytes.
pub fn slot_offset(seq: u64, slots: u32, entry: usize) -> usize {
    (seq % slots.max(1) as u64) as usize * entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_match_only_their_sequence_number() {
        let d = Descriptor { seq: 70, buffer: RemoteAddr { addr: 0x1000_0040, rkey: 9 }, len: 1 << 20 };
        let b = d.encode();
        assert_eq!(Descriptor::decode(&b, 70), Some(d));
        assert_eq!(Descriptor::decode(&b, 70 - SLOTS.0 as u64), None);
        assert_eq!(Descriptor::decode(&[0; DESCRIPTOR_BYTES], 0), None, "a zeroed ring holds nothing");
        let mut torn = b;
        torn[24] ^= 1;
        assert_eq!(Descriptor::decode(&torn, 70), None, "a half-written entry does not count");
        let r = Record { seq: 3, len: 65536 };
        assert_eq!(Record::decode(&r.encode(), 3), Some(r));
        assert_eq!(Record::decode(&r.encode(), 4), None);
        assert_eq!(Record::decode(&[0; RECORD_BYTES], 0), None);
    }
}
