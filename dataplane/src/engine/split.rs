//! Turning application messages into WQEs: sub-requests (chunks) of the
//! planned size where the operation allows it (WRITE, WRITE_WITH_IMM,
//! READ; a SEND consumes one RECV and stays whole unless the receiver's
//! dataplane advertised it for rendezvous), zero-weight WRs after
//! each chunk, and signaling so that only the last chunk carries the
//! application's completion while send-queue slots are still reclaimed.

use super::qp::{Cursor, Meta, WindowCharge};
use super::rendezvous::RecordWrite;
use super::tenant::RequestOp;
use crate::rnic::{CqHandle, RemoteAddr, Sge, WrOpcode};

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

/// The zero-weight WR: a WAIT on an always-satisfied CQ.
pub(crate) fn zero_weight(zw_cq: CqHandle) -> WrOpcode {
    WrOpcode::Wait { cq: zw_cq, count: 0 }
}

/// Whether an operation may be split into sub-requests.
pub(crate) fn splittable(op: &RequestOp) -> bool {
    matches!(op, RequestOp::Write { .. } | RequestOp::WriteImm { .. } | RequestOp::Read { .. })
}

fn offset_remote(r: RemoteAddr, by: u64) -> RemoteAddr {
    RemoteAddr { addr: r.addr + by, rkey: r.rkey }
}

/// Emits the next chunk of `cur` (and its zero-weight WRs) into `out` if
/// `room` slots allow. Returns `Some(done)` if a chunk was emitted, where
/// `done` says the message is complete; `None` if there was no room.
pub(crate) fn emit_chunk(
    cur: &mut Cursor,
    room: u32,
    zw_cq: CqHandle,
    signal_every: u32,
    since_signal: &mut u32,
    out: &mut Vec<WqeSpec>,
) -> Option<bool> {
    if cur.rendezvous.is_some() {
        return emit_rendezvous(cur, room, zw_cq, signal_every, since_signal, out);
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
    let signaled = last || *since_signal + 1 + zw >= signal_every;
    let meta = if last {
        Meta::App { wr_id: cur.wr.wr_id, len: cur.wr.len, posted_ns: cur.wr.posted_ns }
    } else {
        Meta::Hidden
    };
    let inline = last && cur.offset == 0 && this <= INLINE_MAX as u64 && !matches!(cur.wr.op, RequestOp::Read { .. });
    let mut charge = WindowCharge::data(this as u32, matches!(cur.wr.op, RequestOp::Read { .. }));
    if let Some(r) = record {
        // The step's charge rides on its first WQE.
        out.push(record_wqe(r, WindowCharge::data(this as u32 + r.stage.length, false)));
        charge = WindowCharge::default();
    }
    out.push(WqeSpec { opcode, sge, inline, signaled, meta, charge });
    *since_signal = if signaled { 0 } else { *since_signal + 1 };
    push_zero_weight(zw, zw_cq, since_signal, out);
    cur.offset += this;
    Some(last)
}

/// [`emit_chunk`] for a SEND moved by rendezvous (`crate::rendezvous`):
/// `cur.offset` runs over the bytes after the first chunk, each chunk a
/// WRITE into the RECV's buffer; then the record (inline WRITE) and the
/// first chunk as the SEND, which carries the application's completion.
/// The step's window charge rides on its first WQE.
fn emit_rendezvous(
    cur: &mut Cursor,
    room: u32,
    zw_cq: CqHandle,
    signal_every: u32,
    since_signal: &mut u32,
    out: &mut Vec<WqeSpec>,
) -> Option<bool> {
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
        let signaled = *since_signal + 1 + zw >= signal_every;
        out.push(WqeSpec {
            opcode: WrOpcode::Write { remote: offset_remote(buffer, cur.offset) },
            sge: Some(cur.wr.mr.sge((cur.wr.offset + cur.offset) as usize, this as u32)),
            inline: false,
            signaled,
            meta: Meta::Hidden,
            charge: WindowCharge::data(this as u32, false),
        });
        *since_signal = if signaled { 0 } else { *since_signal + 1 };
        push_zero_weight(zw, zw_cq, since_signal, out);
        cur.offset += this;
        return Some(false);
    }
    if room < 2 + zw {
        return None;
    }
    out.push(record_wqe(record, WindowCharge::data(chunk as u32 + record.stage.length, false)));
    out.push(WqeSpec {
        opcode: WrOpcode::Send,
        sge: Some(cur.wr.mr.sge(cur.wr.offset as usize, chunk as u32)),
        inline: false,
        signaled: true,
        meta: Meta::App { wr_id: cur.wr.wr_id, len: cur.wr.len, posted_ns: cur.wr.posted_ns },
        charge: WindowCharge::default(),
    });
    *since_signal = 0;
    push_zero_weight(zw, zw_cq, since_signal, out);
    cur.rendezvous = None;
    cur.offset = len;
    Some(true)
}

/// The inline WRITE of a message's record (`crate::rendezvous::Record`).
fn record_wqe(r: RecordWrite, charge: WindowCharge) -> WqeSpec {
    WqeSpec {
        opcode: WrOpcode::Write { remote: r.remote },
        sge: Some(r.stage),
        inline: true,
        signaled: false,
        meta: Meta::Hidden,
        charge,
    }
}

/// `zw` zero-weight WRs.
fn push_zero_weight(zw: u32, zw_cq: CqHandle, since_signal: &mut u32, out: &mut Vec<WqeSpec>) {
    for _ in 0..zw {
        out.push(WqeSpec::zero_weight(zw_cq, false));
        *since_signal += 1;
    }
}

impl WqeSpec {
    /// A zero-weight WR (a WAIT on the always-satisfied CQ `zw_cq`).
    pub(crate) fn zero_weight(zw_cq: CqHandle, signaled: bool) -> WqeSpec {
        WqeSpec {
            opcode: zero_weight(zw_cq),
            sge: None,
            inline: false,
            signaled,
            meta: Meta::Hidden,
            charge: WindowCharge::default(),
        }
    }
}
