//! Turning application messages into WQEs: sub-requests (chunks) of the
//! planned size where the operation allows it (WRITE, WRITE_WITH_IMM,
//! READ; a SEND consumes one RECV and stays whole unless the receiver's
//! dataplane advertised it for rendezvous), zero-weight WRs after
//! each chunk, and signaling: only a message's last chunk can carry its
//! completion, small whole messages of one post list share a CQE
//! ([`GROUP_BYTES`]), and send-queue slots are still reclaimed.

use super::qp::{ChargedOp, Cursor, Meta, WindowCharge};
use super::rendezvous::RecordWrite;
use super::tenant::RequestOp;
use crate::rnic::{CqHandle, RemoteAddr, Sge, WrOpcode};
use perf_policy_sdk::ZeroWeightOp;

/// One WQE to post, owning what it needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WqeSpec {
    pub opcode: WrOpcode,
    pub sge: Option<Sge>,
    /// Post the SGE's bytes inline (copied into the WQE by the CPU).
    pub inline: bool,
    pub signaled: bool,
    pub meta: Meta,
    /// What it holds of the tenant's in-flight windows.
    pub charge: WindowCharge,
}

/// Whole messages up to this size are posted inline, as verbs
/// applications do for small messages (saves the NIC's payload DMA read).
pub(crate) const INLINE_MAX: u32 = 64;

/// The most payload a post list's whole messages carry between two
/// signaled WQEs: a message that would take its list's unsignaled
/// messages to this is signaled, and the list's last message always is
/// (`post.rs` seals it). RC completes a QP's WQEs in order, so one CQE
/// retires every message before it (`completion.rs`), and a tenant of
/// 16 B messages in lists of 32 costs the loop one CQE per list, as
/// perftest's `-l 32` with its selective signaling costs the NIC. A
/// grouped message's completion waits at most for this much more of its
/// QP's data on the wire: 0.33 us at 100 Gb/s, under one NIC round trip,
/// so a stream's window of messages is never held back by it; a message
/// of this size or more is signaled on its own.
pub const GROUP_BYTES: u64 = 4096;

/// The zero-weight WR the policy asked for: a WAIT on the always-satisfied
/// CQ `zw_cq`, or a NOP.
pub(crate) fn zero_weight(op: ZeroWeightOp, zw_cq: CqHandle) -> WrOpcode {
    match op {
        ZeroWeightOp::Wait => WrOpcode::Wait { cq: zw_cq, count: 0 },
        ZeroWeightOp::Nop => WrOpcode::Nop,
    }
}

/// Whether `opcode` is a zero-weight WR (a NOP, or a WAIT on `zw_cq`).
pub(crate) fn is_zero_weight(opcode: &WrOpcode, zw_cq: CqHandle) -> bool {
    matches!(opcode, WrOpcode::Nop) || matches!(opcode, WrOpcode::Wait { cq, count: 0 } if *cq == zw_cq)
}

/// Whether an operation may be split into sub-requests.
pub(crate) fn splittable(op: &RequestOp) -> bool {
    matches!(op, RequestOp::Write { .. } | RequestOp::WriteImm { .. } | RequestOp::Read { .. })
}

/// The budget a request's bytes are charged to in fair admission.
pub(crate) fn charged_op(op: &RequestOp) -> ChargedOp {
    match op {
        RequestOp::Send => ChargedOp::Send,
        RequestOp::Read { .. } => ChargedOp::Read,
        _ => ChargedOp::Write,
    }
}

/// The WQE opcode of a message posted whole, with its charge; `None` for
/// a RECV, which is no send WQE.
pub(crate) fn whole_opcode(op: &RequestOp) -> Option<(WrOpcode, ChargedOp)> {
    let opcode = match *op {
        RequestOp::Write { remote } => WrOpcode::Write { remote },
        RequestOp::WriteImm { remote, imm } => WrOpcode::WriteImm { remote, imm },
        RequestOp::Send => WrOpcode::Send,
        RequestOp::Read { remote } => WrOpcode::Read { remote },
        RequestOp::Recv => return None,
    };
    Some((opcode, charged_op(op)))
}

fn offset_remote(r: RemoteAddr, by: u64) -> RemoteAddr {
    RemoteAddr { addr: r.addr + by, rkey: r.rkey }
}

/// Where a QP's next WQEs go: the specs to post, with the QP's signaling
/// state (a WQE is signaled at least every `signal_every` so that the send
/// queue's slots come back) and its zero-weight WR.
pub(crate) struct WqeSink<'a> {
    /// The zero-weight WR ([`zero_weight`]).
    pub zero_weight: WrOpcode,
    pub signal_every: u32,
    /// WQEs posted since the last signaled one.
    pub since_signal: &'a mut u32,
    pub out: &'a mut Vec<WqeSpec>,
    /// One NIC scheduler turn in bytes of the link's time (the least a
    /// data WQE is charged, [`WindowCharge::data`]).
    pub turn_bytes: u32,
    /// Payload of the whole messages pushed unsignaled since this list's
    /// last signaled WQE ([`GROUP_BYTES`]).
    pub grouped_bytes: u64,
}

impl WqeSink<'_> {
    /// Whether a data WQE followed by `zw` zero-weight WRs must be signaled.
    fn signal_due(&self, zw: u32) -> bool {
        *self.since_signal + 1 + zw >= self.signal_every
    }

    /// Whether the last WQE of a message of `len` bytes must be signaled
    /// for its completion's sake ([`GROUP_BYTES`]).
    fn message_signal_due(&self, len: u64) -> bool {
        self.grouped_bytes + len >= GROUP_BYTES
    }

    /// The window charge of a data WQE of `len` payload bytes.
    fn charge(&self, len: u32, op: ChargedOp) -> WindowCharge {
        WindowCharge::data(len, op, self.turn_bytes)
    }

    /// Appends `spec`, counting it towards the next signal.
    fn push(&mut self, spec: WqeSpec) {
        if spec.signaled {
            *self.since_signal = 0;
            self.grouped_bytes = 0;
        } else {
            *self.since_signal += 1;
            if let Meta::App { len, .. } = spec.meta {
                self.grouped_bytes += len as u64;
            }
        }
        self.out.push(spec);
    }

    /// Appends `zw` zero-weight WRs.
    fn push_zero_weight(&mut self, zw: u32) {
        for _ in 0..zw {
            self.push(WqeSpec::zero_weight(self.zero_weight, false));
        }
    }

    /// Appends the inline WRITE of a message's record
    /// (`crate::rendezvous::Record`), which does not count towards the
    /// next signal.
    fn push_record(&mut self, r: RecordWrite, charge: WindowCharge) {
        self.out.push(WqeSpec {
            opcode: WrOpcode::Write { remote: r.remote },
            sge: Some(r.stage),
            inline: true,
            signaled: false,
            meta: Meta::Hidden,
            charge,
        });
    }
}

/// Emits the next chunk of `cur` (and its zero-weight WRs) into `sink` if
/// `room` slots allow. Returns `Some(done)` if a chunk was emitted, where
/// `done` says the message is complete; `None` if there was no room.
#[inline]
pub(crate) fn emit_chunk(cur: &mut Cursor, room: u32, sink: &mut WqeSink<'_>) -> Option<bool> {
    if cur.rendezvous.is_some() {
        return emit_rendezvous(cur, room, sink);
    }
    let len = cur.wr.len as u64;
    let chunk = if cur.plan.chunk_bytes > 0 && splittable(&cur.wr.op) { cur.plan.chunk_bytes as u64 } else { len };
    let this = chunk.min(len - cur.offset);
    let last = cur.offset + this >= len;
    let zw = cur.plan.zero_weight_per_chunk;
    let record = cur.record.filter(|_| last);
    if room < 1 + zw + record.is_some() as u32 {
        return None;
    }
    let at = cur.offset;
    let opcode = match cur.wr.op {
        RequestOp::Write { remote } => WrOpcode::Write { remote: offset_remote(remote, at) },
        RequestOp::WriteImm { remote, imm } if last => WrOpcode::WriteImm { remote: offset_remote(remote, at), imm },
        RequestOp::WriteImm { remote, .. } => WrOpcode::Write { remote: offset_remote(remote, at) },
        RequestOp::Send => WrOpcode::Send,
        RequestOp::Read { remote } => WrOpcode::Read { remote: offset_remote(remote, at) },
        RequestOp::Recv => return Some(true),
    };
    let sge = (this > 0).then(|| cur.wr.mr.sge((cur.wr.offset + at) as usize, this as u32));
    let signaled = (last && sink.message_signal_due(len)) || sink.signal_due(zw);
    let meta = if last {
        Meta::App { wr_id: cur.wr.wr_id, len: cur.wr.len, posted_ns: cur.wr.posted_ns }
    } else {
        Meta::Hidden
    };
    let inline = last && cur.offset == 0 && this <= INLINE_MAX as u64 && !matches!(cur.wr.op, RequestOp::Read { .. });
    let mut charge = sink.charge(this as u32, charged_op(&cur.wr.op));
    if let Some(r) = record {
        // The step's charge rides on its first WQE.
        sink.push_record(r, sink.charge(this as u32 + r.stage.length, ChargedOp::Write));
        charge = WindowCharge::default();
    }
    sink.push(WqeSpec { opcode, sge, inline, signaled, meta, charge });
    sink.push_zero_weight(zw);
    cur.offset += this;
    Some(last)
}

/// [`emit_chunk`] for a SEND moved by rendezvous (`crate::rendezvous`):
/// `cur.offset` runs over the bytes after the first chunk, each chunk a
/// WRITE into the RECV's buffer; then the record (inline WRITE) and the
/// first chunk as the SEND, which carries the application's completion.
/// The step's window charge rides on its first WQE.
fn emit_rendezvous(cur: &mut Cursor, room: u32, sink: &mut WqeSink<'_>) -> Option<bool> {
    let (buffer, record) = (cur.rendezvous?, cur.record?);
    let len = cur.wr.len as u64;
    let chunk = (cur.plan.chunk_bytes as u64).clamp(1, len);
    let zw = cur.plan.zero_weight_per_chunk;
    if cur.offset == 0 {
        cur.offset = chunk;
    }
    if cur.offset < len {
        if room < 1 + zw {
            return None;
        }
        let this = chunk.min(len - cur.offset);
        let signaled = sink.signal_due(zw);
        sink.push(WqeSpec {
            opcode: WrOpcode::Write { remote: offset_remote(buffer, cur.offset) },
            sge: Some(cur.wr.mr.sge((cur.wr.offset + cur.offset) as usize, this as u32)),
            inline: false,
            signaled,
            meta: Meta::Hidden,
            charge: sink.charge(this as u32, ChargedOp::Write),
        });
        sink.push_zero_weight(zw);
        cur.offset += this;
        return Some(false);
    }
    if room < 2 + zw {
        return None;
    }
    sink.push_record(record, sink.charge(chunk as u32 + record.stage.length, ChargedOp::Write));
    sink.push(WqeSpec {
        opcode: WrOpcode::Send,
        sge: Some(cur.wr.mr.sge(cur.wr.offset as usize, chunk as u32)),
        inline: false,
        signaled: true,
        meta: Meta::App { wr_id: cur.wr.wr_id, len: cur.wr.len, posted_ns: cur.wr.posted_ns },
        charge: WindowCharge::default(),
    });
    sink.push_zero_weight(zw);
    cur.rendezvous = None;
    cur.offset = len;
    Some(true)
}

/// The payload of whole messages left unsignaled at the end of `specs`,
/// given `before` such bytes ahead of them ([`WqeSink::grouped_bytes`]).
pub(crate) fn grouped_after(before: u64, specs: &[WqeSpec]) -> u64 {
    specs.iter().fold(before, |acc, s| match (s.signaled, s.meta) {
        (true, _) => 0,
        (false, Meta::App { len, .. }) => acc + len as u64,
        _ => acc,
    })
}

/// Whether data WQE `spec` (of SGE `sge`) carries part of a message, not
/// a whole one: a hidden data WQE (a sub-request, a rendezvous WRITE, a
/// length record), or a message's last WQE that is shorter than it.
pub(crate) fn is_chunk(spec: &WqeSpec, sge: Sge) -> bool {
    match spec.meta {
        Meta::App { len, .. } => sge.length < len,
        _ => true,
    }
}

/// Whether a post list ends with a whole message no signaled WQE after
/// it covers: its completion would wait for a later list's CQE.
pub(crate) fn ends_unsignaled(specs: &[WqeSpec]) -> bool {
    specs.iter().rev().take_while(|s| !s.signaled).any(|s| matches!(s.meta, Meta::App { .. }))
}

impl WqeSpec {
    /// A zero-weight WR of `opcode` ([`zero_weight`]).
    pub(crate) fn zero_weight(opcode: WrOpcode, signaled: bool) -> WqeSpec {
        WqeSpec { opcode, sge: None, inline: false, signaled, meta: Meta::Hidden, charge: WindowCharge::default() }
    }
}
