//! Completion queues of the simulated NIC: a bounded ring of CQEs plus the
//! monotonic completion counter that cross-channel WAITs watch
//! ([`CqRing`], shared with the verbs backend's host gate), and the QPs
//! waiting on it.

use crate::rnic::cq_ring::CqRing;

/// One completion queue.
pub(crate) struct CqState {
    /// Its CQEs and completion counter.
    pub ring: CqRing,
    /// QPs whose head WAIT targets this CQ: (qp index, count).
    pub waiters: Vec<(u32, u64)>,
    /// QPs attached to this CQ (destroy is refused while non-zero).
    pub users: u32,
}

impl CqState {
    pub fn new(depth: u32, ignore_overrun: bool) -> Self {
        CqState { ring: CqRing::new(depth, ignore_overrun), waiters: Vec::new(), users: 0 }
    }

    /// Removes and returns the waiters whose count has been reached.
    pub fn take_satisfied(&mut self) -> Vec<u32> {
        if self.waiters.is_empty() {
            return Vec::new();
        }
        let produced = self.ring.produced;
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
