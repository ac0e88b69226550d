//! [`CqRing`]: the CQEs of one completion queue as a NIC model keeps them
//! (the simulator's CQs, the verbs backend's host gate): a ring bounded by
//! the CQ's depth that overruns when full, or with `IGNORE_OVERRUN` drops
//! its oldest entry, and the count of every CQE produced (what a
//! cross-channel WAIT counts).

use std::collections::VecDeque;

use super::{CqHandle, RnicError, Wc};

/// The ring of CQEs of one completion queue.
#[derive(Debug)]
pub(crate) struct CqRing {
    /// The CQ's depth.
    pub depth: u32,
    /// Created with `IGNORE_OVERRUN`: a full ring drops its oldest entry.
    pub ignore_overrun: bool,
    /// CQEs not polled yet, oldest first.
    pub entries: VecDeque<Wc>,
    /// CQEs produced since creation (what a WAIT's count refers to).
    pub produced: u64,
    /// Set when the CQ overran without `ignore_overrun`.
    pub overrun: bool,
}

impl CqRing {
    /// An empty ring of `depth` entries.
    pub fn new(depth: u32, ignore_overrun: bool) -> Self {
        CqRing {
            depth,
            ignore_overrun,
            entries: VecDeque::with_capacity(depth.min(4096) as usize),
            produced: 0,
            overrun: false,
        }
    }

    /// Appends a CQE. Returns `false` if the CQ overran (and is now in error).
    pub fn push(&mut self, wc: Wc) -> bool {
        self.produced += 1;
        if self.entries.len() as u32 >= self.depth {
            if self.ignore_overrun {
                self.entries.pop_front();
            } else {
                self.overrun = true;
                return false;
            }
        }
        self.entries.push_back(wc);
        true
    }

    /// Takes up to `out.len()` CQEs, oldest first (`poll_cq` of CQ `cq`);
    /// fails with [`RnicError::CqOverrun`] after an overrun.
    pub fn poll(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        if self.overrun {
            return Err(RnicError::CqOverrun { cq: cq.0 });
        }
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        Ok(n)
    }
}
