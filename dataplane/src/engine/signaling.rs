//! Completion signaling of windowed WQEs (fair admission's data,
//! `admission.rs`): which of a QP's chunks are signaled, so that a
//! stream's CQEs cost a charged loop a bounded share of its time while
//! the bytes no CQE covers yet stay small enough that the budget never
//! waits for them, and the backstop that covers them when it would.

use super::*;

/// The most of the loop's time the CQEs of a line-rate stream's chunks
/// may take (see [`Dataplane::signal_bounds`]).
const SIGNAL_LOOP_SHARE: f64 = 0.05;

/// What [`Dataplane::signal_windowed`] knows of a windowed step besides
/// its WQEs.
#[derive(Debug, Clone, Copy)]
pub(super) struct WindowedStep {
    /// Timed for the pipeline delay (`pipeline.rs`): its own CQE.
    pub probe: bool,
    /// The last step of a message that needs its own signal
    /// (`split::GROUP_BYTES`): signaled, so that the message completes to
    /// its tenant when it is done and a tenant's messages cost the loop
    /// what they cost alone. A smaller message's end is covered by a later
    /// signal of its post list (the list's seal, `post.rs`).
    pub message_end: bool,
    /// The QP's unsignaled WQEs before the step.
    pub since_before: u32,
}

impl<R: Rnic> Dataplane<R> {
    /// How many window-charged bytes a QP may post before one of its WQEs
    /// is signaled, and how many all QPs together may hold uncovered by a
    /// signal: `(0, 0)`, every step signaled, with a free loop.
    ///
    /// Each CQE costs the loop [`LoopCost::cqe_ps`]. A stream's chunks
    /// signaled one by one would spend on CQEs alone about 15% of a
    /// charged loop at line rate (8 KiB chunks at 100 Gb/s), loop time
    /// taken from every loop-bound tenant, for CQEs the tenant alone (its
    /// message whole) would not cause. So a QP signals once per
    /// [`SIGNAL_LOOP_SHARE`]-worth of the link's time in CQE cost. A CQE
    /// retires the unsignaled chunks before it and gives back their window
    /// charge; the bytes one CQE gives back raise the budget's floor with
    /// them (`pipeline.rs`), so the link stays busy. What no signal covers yet is held below a quarter
    /// of the smallest budget, so the window never stays shut waiting for
    /// it (and [`Dataplane::cover_unsignaled`] is the backstop).
    ///
    /// [`LoopCost::cqe_ps`]: super::LoopCost::cqe_ps
    pub(super) fn signal_bounds(&self, budget: [u64; 2]) -> (u64, u64) {
        let cqe_ps = self.cfg.loop_cost.cqe_ps;
        if cqe_ps == 0 {
            return (0, 0);
        }
        let by_cost = (cqe_ps as f64 / 1000.0 * self.link_bytes_per_ns / SIGNAL_LOOP_SHARE) as u64;
        let cap = budget.into_iter().filter(|&b| b > 0).min().unwrap_or(0) / 4;
        (by_cost.min(cap), cap)
    }

    /// Decides whether the step just built for windowed QP `qi` (`specs`:
    /// its data WQE first, then its zero-weight WRs, or a rendezvous step)
    /// is signaled, and keeps the count of uncovered bytes. A step is
    /// signaled when its QP has [`Dataplane::signal_bounds`]' bytes
    /// unsignaled, when the uncovered bytes of all QPs would pass their
    /// bound, when it is timed for the pipeline delay, when the send queue
    /// needs a signal, and when it ends a message that needs its own
    /// signal (so a split message's end covers its chunks).
    pub(super) fn signal_windowed(&mut self, qi: usize, step: WindowedStep, signal_every: u32, specs: &mut [WqeSpec]) {
        let (signal_bytes, cap) = (self.signal_bytes, self.uncovered_cap);
        let q = &mut self.qps[qi];
        let bytes = specs.first().map_or(0, |s| s.charge.bytes() as u64);
        let n = specs.len() as u32;
        let covered_later = specs.iter().skip(1).any(|s| s.signaled);
        let signal = signal_bytes == 0
            || step.probe
            || step.message_end
            || covered_later
            || step.since_before + n >= signal_every
            || q.unsignaled_bytes + bytes >= signal_bytes
            || self.uncovered_bytes + bytes > cap;
        let Some(first) = specs.first_mut() else { return };
        if signal {
            if !first.signaled {
                first.signaled = true;
                q.since_signal = n - 1;
            }
            self.uncovered_bytes -= std::mem::take(&mut q.unsignaled_bytes);
        } else {
            first.signaled = false;
            q.since_signal = step.since_before + n;
            q.unsignaled_bytes += bytes;
            self.uncovered_bytes += bytes;
        }
    }

    /// The backstop of [`Dataplane::signal_bounds`]: when a windowed
    /// tenant `t` finds no room in direction `dir` and every byte in
    /// flight there is uncovered (no CQE on its way would give any back),
    /// its QPs, then those of the other tenants with data, are covered
    /// while that lasts.
    pub(super) fn cover_unsignaled_from(&mut self, t: usize, dir: usize) -> Result<bool, RnicError> {
        let mut did = self.cover_unsignaled(t)?;
        let total = self.windowed_inflight[dir];
        let mut i = 0;
        for d in 0..2 {
            while self.uncovered_bytes > 0 && total <= self.uncovered_bytes {
                let Some(u) = self.fair.dirs[d].with_data.next_from(i) else { break };
                i = u + 1;
                if u != t {
                    did |= self.cover_unsignaled(u)?;
                }
            }
            i = 0;
        }
        Ok(did)
    }

    /// Each QP of tenant `t` with uncovered bytes gets a signaled
    /// zero-weight WR, whose CQE covers them.
    fn cover_unsignaled(&mut self, t: usize) -> Result<bool, RnicError> {
        let mut did = false;
        for k in 0..self.tenants[t].qps.len() {
            let qi = self.tenants[t].qps[k];
            let q = &self.qps[qi];
            if q.unsignaled_bytes == 0 || q.failed {
                continue;
            }
            self.counters.cover_signals += 1;
            did |= self.post_signaled_zero_weight(qi)?;
            let q = &mut self.qps[qi];
            q.since_signal = 0;
            self.uncovered_bytes -= std::mem::take(&mut q.unsignaled_bytes);
        }
        Ok(did)
    }
}
