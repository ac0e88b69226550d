//! The NIC's pipeline as fair admission sees it: how long a data WQE
//! takes from its post to the loop's sight of its completion when nothing
//! is queued ahead of it, measured, and the bandwidth-delay product that
//! follows, below which fair admission's budget never falls.
//!
//! A windowed budget smaller than the link's rate times that delay (plus
//! the WQE on the wire) leaves the wire idle while completions travel
//! back, whatever a policy asks: the bytes in flight, not the bytes
//! queued, are what keep a link busy (Little's law). A policy's window
//! shrinks what *queues* in the NIC ahead of a new message; this floor
//! keeps the shrinking from idling the wire, so work conservation holds by
//! construction, on any NIC and loop, instead of resting on a window size
//! tuned for one.
//!
//! The delay is sampled from WQEs posted while no other windowed WQE of
//! their direction was in flight (the pipeline empty: at the start of
//! every run, and whenever the windowed tenants go quiet): the time from
//! the post to the completion, less the time the link took to send the
//! WQE's own bytes and those of the other windowed WQEs that completed
//! meanwhile (posted after it, they may have taken turns before it in the
//! NIC's round robin). The least sample is kept: queueing behind traffic
//! that is not windowed only lengthens a sample.

/// The share of the link the floor keeps busy: the contract's bar for
/// work conservation (`docs/isolation.md`: a policy keeps at least 0.95 of
/// passthrough's utilization where some tenant is backlogged). A floor of
/// the whole product leaves a policy no room to trade the last few percent
/// of the link for shorter queues: with it, the matrix's latency victims
/// beside many-QP SEND attackers read x1.5 to x1.6 of their p99 alone
/// where they read x1.5 or less at 0.95.
pub(super) const FLOOR_UTILIZATION: f64 = 0.95;

/// The pipeline delay measured per direction (WRITE / SEND, READ) and the
/// sample in flight.
#[derive(Debug, Default)]
pub(super) struct Pipeline {
    /// The least delay seen per direction, ns (`None` before a sample).
    delay_ns: [Option<u64>; 2],
    /// The WQE being timed per direction.
    probe: [Option<Probe>; 2],
    /// The most windowed bytes one completion gave back per direction
    /// (a signaled WQE retires its QP's unsignaled ones before it), since
    /// the last policy tick and in the tick before (`[now, before]`).
    largest: [[u64; 2]; 2],
}

/// A WQE being timed.
#[derive(Debug, Clone, Copy)]
struct Probe {
    qp: usize,
    seq: u64,
    posted_ns: u64,
    bytes: u64,
    /// Windowed bytes of other WQEs completed while it was in flight.
    others: u64,
}

impl Pipeline {
    /// A data WQE of `bytes` (its window charge) posted at `posted_ns` as
    /// QP `qp`'s sequence number `seq`, with `ahead` windowed bytes of its
    /// direction in flight before it.
    pub(super) fn posted(&mut self, read: bool, qp: usize, seq: u64, posted_ns: u64, bytes: u64, ahead: u64) {
        let dir = read as usize;
        if ahead == 0 {
            // An earlier probe of this direction has retired (it was in
            // flight under the window, and nothing is now), or was never
            // posted: this one replaces it.
            self.probe[dir] = Some(Probe { qp, seq, posted_ns, bytes, others: 0 });
        }
    }

    /// QP `qp`'s WQE `seq` completed successfully, seen at `now_ns`, on a
    /// link moving `link_bytes_per_ns`, and gave back `released` windowed
    /// bytes per direction.
    pub(super) fn completed(&mut self, qp: usize, seq: u64, now_ns: u64, link_bytes_per_ns: f64, released: [u64; 2]) {
        for (l, r) in self.largest.iter_mut().zip(released) {
            l[0] = l[0].max(r);
        }
        for (dir, released) in released.into_iter().enumerate() {
            let Some(p) = self.probe[dir].as_mut() else { continue };
            if (p.qp, p.seq) != (qp, seq) {
                p.others += released;
                continue;
            }
            let p = *p;
            self.probe[dir] = None;
            let wire_bytes = p.bytes + p.others;
            let on_wire_ns = (wire_bytes as f64 / link_bytes_per_ns.max(f64::MIN_POSITIVE)) as u64;
            let delay = now_ns.saturating_sub(p.posted_ns).saturating_sub(on_wire_ns);
            let least = &mut self.delay_ns[dir];
            *least = Some(least.map_or(delay, |d| d.min(delay)));
        }
    }

    /// A policy tick: the largest WQE of the tick ending becomes the one
    /// before.
    pub(super) fn tick(&mut self) {
        for l in &mut self.largest {
            *l = [0, l[0]];
        }
    }

    /// The least bytes in flight that keep the link [`FLOOR_UTILIZATION`]
    /// busy in a direction: that share of the link's rate times the
    /// pipeline delay, plus the most one completion gave back lately (what
    /// is on the wire, or done and not yet given back, while the others'
    /// completions travel); 0 before the delay was measured.
    pub(super) fn floor_bytes(&self, read: bool, link_bytes_per_ns: f64) -> u64 {
        let dir = read as usize;
        let Some(delay) = self.delay_ns[dir] else { return 0 };
        let largest = self.largest[dir][0].max(self.largest[dir][1]);
        (FLOOR_UTILIZATION * (link_bytes_per_ns * delay as f64 + largest as f64)) as u64
    }

    /// The measured delays, ns (for reports and tests).
    pub(super) fn delay_ns(&self) -> [Option<u64>; 2] {
        self.delay_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floor(bytes: u64) -> u64 {
        (FLOOR_UTILIZATION * bytes as f64) as u64
    }

    #[test]
    fn the_floor_is_the_least_delay_times_the_link_plus_the_most_one_completion_gave_back() {
        let mut p = Pipeline::default();
        assert_eq!(p.floor_bytes(false, 12.5), 0);
        // Posted into an empty pipeline: timed. 8192 B at 12.5 B/ns is
        // 655 ns on the wire, so 2655 ns is 2000 ns of delay.
        p.posted(false, 3, 10, 1000, 8192, 0);
        p.completed(3, 10, 3655, 12.5, [8192, 0]);
        assert_eq!(p.delay_ns(), [Some(2000), None]);
        assert_eq!(p.floor_bytes(false, 12.5), floor(25_000 + 8192));
        // Posted behind others: not timed (its wait is queueing).
        p.posted(false, 3, 11, 4000, 8192, 8192);
        p.completed(3, 11, 9000, 12.5, [8192, 0]);
        assert_eq!(p.delay_ns()[0], Some(2000));
        // A shorter sample lowers it; a longer one does not raise it.
        p.posted(false, 4, 0, 10_000, 64, 0);
        p.completed(4, 0, 11_505, 12.5, [64, 0]);
        assert_eq!(p.delay_ns()[0], Some(1500));
        p.posted(false, 4, 1, 20_000, 64, 0);
        p.completed(4, 1, 30_000, 12.5, [64, 0]);
        assert_eq!(p.delay_ns()[0], Some(1500));
        // The most given back at once is remembered for a tick and the
        // one after.
        p.tick();
        assert_eq!(p.floor_bytes(false, 12.5), floor(18_750 + 8192));
        p.tick();
        assert_eq!(p.floor_bytes(false, 12.5), floor(18_750));
        // The READ direction is measured on its own.
        assert_eq!(p.floor_bytes(true, 12.5), 0);
        // WQEs posted after a probe that complete before it took the wire
        // from it: their time is not the pipeline's.
        p.posted(false, 5, 0, 40_000, 64, 0);
        p.completed(6, 0, 41_000, 12.5, [12_500, 0]);
        p.completed(5, 0, 42_405, 12.5, [64, 0]);
        assert_eq!(p.delay_ns()[0], Some(1400));
    }
}
