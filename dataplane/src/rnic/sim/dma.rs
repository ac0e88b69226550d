//! The NIC's DMA engine in wall-clock time: message placements that the
//! model makes in bounded pieces, beside its other work.
//!
//! In virtual time a message's bytes are placed in the instant it arrives:
//! however long the copy takes on the machine running the model, no
//! simulated time passes. In wall-clock time (the daemon, `--realtime`)
//! the copy is real time, and one large message would hold the whole model,
//! and the dataplane loop that drives it, for as long as its bytes take to
//! copy (seconds for a 2 GiB WRITE into pages not yet faulted in). There,
//! a placement larger than [`QUEUED_BYTES`], or one behind another of the
//! same QP, is queued. The queues are served in pieces of at most
//! [`PIECE_BYTES`], round-robin over the QPs with placements, for at most
//! [`SLICE`] of the machine's time each time the model advances, so the
//! model and the loop always get on with everyone else's messages. A placement's answer (its ACK, its
//! RECV's completion) follows its last byte: the bytes are in place before
//! their completion is seen, and per-QP order holds.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::memory::Span;
use super::world::{Answer, World};
use crate::rnic::{WcOpcode, WcStatus};

/// The largest placement made at once; larger ones are queued.
pub(crate) const QUEUED_BYTES: usize = 64 << 10;

/// The most bytes copied between two looks at the clock.
pub(crate) const PIECE_BYTES: usize = 16 << 10;

/// The longest the queues are served, or events run, at a go.
pub(crate) const SLICE: Duration = Duration::from_micros(100);

/// One part of a placement: a copy between regions, or inline bytes.
pub(crate) enum Piece {
    Copy { src: Span, dst: Span },
    Bytes { data: SmallVec<[u8; 32]>, dst: Span },
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Copy { dst, .. } | Piece::Bytes { dst, .. } => dst.len,
        }
    }
}

/// What follows a placement's last byte.
#[derive(Debug, Clone, Copy)]
pub(crate) enum After {
    /// A WRITE placed at responder QP `rqi` of host `r`: its RECV's
    /// completion if it carried an immediate, then the ACK.
    Write { r: usize, rqi: u32, wqe: u64, epoch: u32, len: u32, imm: Option<(u64, u32)>, delay: u64 },
    /// A SEND placed in RECV `wr_id` of responder QP `rqi` of host `r`.
    Send { r: usize, rqi: u32, wqe: u64, epoch: u32, len: u32, wr_id: u64, imm: Option<u32>, delay: u64 },
    /// A READ response placed at the requester.
    ReadResponse { wqe: u64, epoch: u32, delay: u64 },
}

/// A queued placement for requester QP (`host`, `qp`).
pub(crate) struct Placement {
    pieces: VecDeque<Piece>,
    then: After,
}

/// The queues of placements, one per requester QP.
#[derive(Default)]
pub(crate) struct Dma {
    queues: FxHashMap<(usize, u32), VecDeque<Placement>>,
    /// The QPs with placements, in round-robin order.
    order: VecDeque<(usize, u32)>,
    /// Bytes placed through the queues, and placements finished.
    pub queued_bytes: u64,
    pub finished: u64,
}

impl Dma {
    /// Whether requester QP (`h`, `qi`) has placements queued.
    pub fn busy(&self, h: usize, qi: u32) -> bool {
        self.queues.contains_key(&(h, qi))
    }

    /// Whether anything is queued.
    pub fn idle(&self) -> bool {
        self.order.is_empty()
    }

    fn push(&mut self, h: usize, qi: u32, p: Placement) {
        let q = self.queues.entry((h, qi)).or_default();
        if q.is_empty() {
            self.order.push_back((h, qi));
        }
        q.push_back(p);
    }
}

impl World {
    /// Whether a placement of `len` bytes answering requester QP (`h`,
    /// `qi`) goes through the DMA queues rather than at once.
    pub(crate) fn dma_defers(&self, h: usize, qi: u32, len: usize) -> bool {
        self.dma.as_ref().is_some_and(|d| len > QUEUED_BYTES || d.busy(h, qi))
    }

    /// Whether requester QP (`h`, `qi`) waits for a queued placement (its
    /// transport timer must not read the wait as a lost packet).
    pub(crate) fn dma_busy(&self, h: usize, qi: u32) -> bool {
        self.dma.as_ref().is_some_and(|d| d.busy(h, qi))
    }

    /// Queues `pieces` for requester QP (`h`, `qi`), `then` after them.
    pub(crate) fn dma_queue(&mut self, h: usize, qi: u32, pieces: Vec<Piece>, then: After) {
        if let Some(d) = self.dma.as_mut() {
            d.push(h, qi, Placement { pieces: pieces.into(), then });
        }
    }

    /// Serves the queues for at most [`SLICE`], a piece of at most
    /// [`PIECE_BYTES`] per QP in turn, and finishes the placements done.
    pub(crate) fn run_dma(&mut self) {
        let start = Instant::now();
        loop {
            if start.elapsed() >= SLICE {
                break;
            }
            let Some(d) = self.dma.as_mut() else { return };
            let Some(key) = d.order.pop_front() else { break };
            let Some(queue) = d.queues.get_mut(&key) else { continue };
            let Some(front) = queue.front_mut() else {
                d.queues.remove(&key);
                continue;
            };
            let piece = match front.pieces.pop_front() {
                None => None,
                Some(p) if p.len() <= PIECE_BYTES => Some(p),
                Some(Piece::Copy { src, dst }) => {
                    let (a, rest_src) = split(src, PIECE_BYTES);
                    let (b, rest_dst) = split(dst, PIECE_BYTES);
                    front.pieces.push_front(Piece::Copy { src: rest_src, dst: rest_dst });
                    Some(Piece::Copy { src: a, dst: b })
                }
                Some(p @ Piece::Bytes { .. }) => Some(p),
            };
            let finished = if front.pieces.is_empty() { queue.pop_front().map(|p| p.then) } else { None };
            if queue.is_empty() {
                d.queues.remove(&key);
            } else {
                d.order.push_back(key);
            }
            if let Some(p) = piece {
                d.queued_bytes += p.len() as u64;
                match p {
                    Piece::Copy { src, dst } => self.copier.copy(&mut self.mems, src, dst),
                    Piece::Bytes { data, dst } => self.copier.write_bytes(&mut self.mems, &data, dst),
                }
            }
            if let Some(then) = finished {
                if let Some(d) = self.dma.as_mut() {
                    d.finished += 1;
                }
                self.visible += 1;
                self.after_placement(key.0, key.1, then);
            }
        }
    }

    /// What follows a queued placement's last byte (as the responder does
    /// at once for a placement it makes in the instant).
    fn after_placement(&mut self, h: usize, qi: u32, then: After) {
        match then {
            After::Write { r, rqi, wqe, epoch, len, imm, delay } => {
                if let Some((wr_id, imm)) = imm {
                    self.recv_cqe(r, rqi, wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, len as u64, Some(imm));
                }
                self.answer_at(h, qi, wqe, epoch, Answer::Ack, delay, r);
            }
            After::Send { r, rqi, wqe, epoch, len, wr_id, imm, delay } => {
                self.recv_cqe(r, rqi, wr_id, WcStatus::Success, WcOpcode::Recv, len as u64, imm);
                self.answer_at(h, qi, wqe, epoch, Answer::Ack, delay, r);
            }
            After::ReadResponse { wqe, epoch, delay } => self.answer_at(h, qi, wqe, epoch, Answer::Ack, delay, h),
        }
    }
}

/// `s` split after `n` bytes.
fn split(s: Span, n: usize) -> (Span, Span) {
    (Span { len: n, ..s }, Span { off: s.off + n, len: s.len - n, ..s })
}
