//! Completion queues of the simulated NIC: a bounded ring of CQEs plus the
//! monotonic completion counter that cross-channel WAITs watch.

use std::collections::VecDeque;

use crate::rnic::Wc;

/// One completion queue.
pub(crate) struct CqState {
    pub depth: u32,
    pub ignore_overrun: bool,
    pub entries: VecDeque<Wc>,
    /// CQEs produced since creation (what a WAIT's count refers to).
    pub produced: u64,
    /// Set when the CQ overran without `ignore_overrun`.
    pub overrun: bool,
    /// QPs whose head WAIT targets this CQ: (qp index, count).
    pub waiters: Vec<(u32, u64)>,
    /// QPs attached to this CQ (destroy is refused while non-zero).
    pub users: u32,
}

impl CqState {
    pub fn new(depth: u32, ignore_overrun: bool) -> Self {
        CqState {
            depth,
            ignore_overrun,
            entries: VecDeque::with_capacity(depth.min(4096) as usize),
            produced: 0,
            overrun: false,
            waiters: Vec::new(),
            users: 0,
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

    /// Removes and returns the waiters whose count has been reached.
    pub fn take_satisfied(&mut self) -> Vec<u32> {
        if self.waiters.is_empty() {
            return Vec::new();
        }
        let produced = self.produced;
        let mut out = Vec::new();
        self.waiters.retain(|&(qp, count)| {
            if produced >= count {
                out.push(qp);
                false
            } else {
                true
            }
        });
        out
    }
}
