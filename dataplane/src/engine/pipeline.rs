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
//! The delay is sampled from WQEs posted while at most a kilobyte of other
//! windowed WQEs of their direction was in flight (the pipeline empty but
//! for a few small messages: at the start of every run, and whenever the
//! backlogged tenants go quiet): the time from
//! the post to the completion, less the time the link took to send the
//! WQE's own bytes and those of the other windowed WQEs that completed
//! meanwhile (posted after it, they may have taken turns before it in the
//! NIC's round robin). The least sample is kept: queueing behind traffic
//! that is not windowed only lengthens a sample.
//!
//! WQEs whose payload the NIC fetches by DMA and inline ones are timed
//! apart, and the floor is the longer product: an inline WQE skips the
//! payload fetch (450 ns on `cx6-100g`), so a floor timed on a small
//! inline message alone was 5.6 KB short for the chunks beside it, and a
//! stream of 4 KiB chunks on one QP held to it made 81 Gb/s beside 9 B
//! WRITEs on 7 QPs (93 Gb/s on the floor timed on its own chunks).
//!
//! Whether the floor idled the link is judged on the wire's whole load
//! where the NIC's port counters are read ([`PortTraffic`]): a wire busy
//! with traffic fair admission did not admit (a ping-pong's replies from
//! the peer on the responder's wire, the sparse tenants' messages that
//! post without room) is not idle, and growing the floor there only lets
//! more queue ahead of that traffic.

use crate::rnic::PortTraffic;

/// The share of the link the floor keeps busy: the contract's bar for
/// work conservation (`docs/isolation.md`: a policy keeps at least 0.95 of
/// passthrough's utilization where some tenant is backlogged). A floor of
/// the whole product leaves a policy no room to trade the last few percent
/// of the link for shorter queues: with it, the matrix's latency victims
/// beside many-QP SEND attackers read x1.5 to x1.6 of their p99 alone
/// where they read x1.5 or less at 0.95.
pub(super) const FLOOR_UTILIZATION: f64 = 0.95;

/// The share of the link a direction's completions must give back in a
/// tick in which fair admission held data back for the budget, and on
/// average over such ticks: below it the budget, not the tenants, idled
/// the link, and the floor grows (see [`Pipeline::tick`]). The contract's
/// bar itself ([`FLOOR_UTILIZATION`]), judged on the average too: on
/// single ticks it grew the floor in cells already 0.98 busy, out of a
/// tick's jitter, and the ping-pongs there waited behind what it let
/// queue (x1.49 to x1.52 of their p99 alone beside `send-8k-32q-pl8`);
/// a margin under the bar (0.93 per tick) left cells 0.93 to 0.95 busy
/// (`mr-write-8b-8q vs send-8k-32q-pl8`: 0.939 of passthrough's
/// utilization once fair admission serves the tenants behind first, its
/// 8 B WRITEs holding room in the NIC's per-QP processing; 0.958 now).
/// The tick must be short too: on the average alone the floor went on
/// growing for the ticks the average took to climb back after a start
/// (eleven from 0), where the link was 0.98 busy too, and the 16 B
/// message-rate victims beside `send-8k-32q-pl8` on `cx6-100g-costly`
/// read 0.83 and 0.84 of their entitlement (0.86 and 0.88 now).
const BUSY_SHARE: f64 = FLOOR_UTILIZATION;
/// The weight of a tick in the average of [`Pipeline::busy`].
const BUSY_AVERAGING: f64 = 0.25;
/// How the floor grows after a tick that idled the link, and shrinks back
/// per tick that did not, and its most.
const FLOOR_GROWTH: f64 = 1.125;
const FLOOR_DECAY: f64 = 0.99;
const FLOOR_MOST: f64 = 4.0;

/// The pipeline delay measured per direction (WRITE / SEND, READ) and the
/// sample in flight.
#[derive(Debug, Default)]
pub(super) struct Pipeline {
    /// The least delay seen per direction, ns (`None` before a sample),
    /// of inline WQEs (`[dir][0]`) and of WQEs with a payload to fetch
    /// (`[dir][1]`).
    delay_ns: [[Option<u64>; 2]; 2],
    /// The WQE being timed per direction, inline (`[dir][0]`) and fetched
    /// (`[dir][1]`).
    probe: [[Option<Probe>; 2]; 2],
    /// The most windowed bytes one completion gave back per direction
    /// (a signaled WQE retires its QP's unsignaled ones before it), since
    /// the last policy tick and in the tick before (`[now, before]`).
    largest: [[u64; 2]; 2],
    /// Per direction since the last tick: the windowed bytes completions
    /// gave back, and whether fair admission held data back for the budget.
    moved: [u64; 2],
    held: [bool; 2],
    /// Per direction, what the floor is multiplied by (1 until a tick idles
    /// the link with data held back).
    growth: [f64; 2],
    /// Per direction, the share of the link its completions gave back in
    /// the ticks whose budget held data back, averaged (`None` until the
    /// first): one short tick is jitter, a short average is the floor's.
    busy: [Option<f64>; 2],
    last_tick_ns: u64,
    /// The port's counters as last read, where the NIC reports them, and
    /// the rate of each direction's wire since the reading before, bytes
    /// per ns (`[sent, received]`).
    last_traffic: Option<PortTraffic>,
    wire_rate: [f64; 2],
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

/// Most windowed bytes in flight ahead of a WQE that is still timed: their
/// wire time (82 ns at 100 Gb/s) bounds what they can take off the sample
/// (it subtracts the wire time of the WQEs that complete before it, which
/// may have been on the wire while it was fetched). Small messages always
/// in flight (a few ping-pongs) would otherwise keep every chunk beside
/// them from being timed.
const PROBE_AHEAD_BYTES: u64 = 1024;

/// How long a probe may stay out before another WQE may replace it, ns:
/// far beyond any pipeline delay (2 us on `cx6-100g`), so only a probe
/// whose completion will not come (its QP failed) is replaced.
const PROBE_STALE_NS: u64 = 1_000_000;

impl Pipeline {
    /// A data WQE posted at `posted_ns` with `ahead` windowed bytes of its
    /// direction in flight before it. Returns whether it is timed (it then
    /// needs a completion of its own).
    pub(super) fn posted(&mut self, wqe: PostedWqe, posted_ns: u64, ahead: u64) -> bool {
        if ahead > PROBE_AHEAD_BYTES {
            return false;
        }
        // One probe of a kind at a time: a probe replaced before it
        // completed would never give a sample where the direction always
        // holds a little in flight (a budget of 1 KiB replaced every probe
        // by the next post, and left the floor unmeasured, at 0, for the
        // whole run). A probe still out after `PROBE_STALE_NS` (its QP
        // failed, its completion flushed) gives way.
        let PostedWqe { read, qp, seq, bytes, fetched } = wqe;
        let slot = &mut self.probe[read as usize][fetched as usize];
        if slot.is_some_and(|p| posted_ns.saturating_sub(p.posted_ns) < PROBE_STALE_NS) {
            return false;
        }
        *slot = Some(Probe { qp, seq, posted_ns, bytes, others: 0 });
        true
    }

    /// QP `qp`'s WQE `seq` completed successfully, seen at `now_ns`, on a
    /// link moving `link_bytes_per_ns`, and gave back `released` windowed
    /// bytes per direction.
    pub(super) fn completed(&mut self, qp: usize, seq: u64, now_ns: u64, link_bytes_per_ns: f64, released: [u64; 2]) {
        for (l, r) in self.largest.iter_mut().zip(released) {
            l[0] = l[0].max(r);
        }
        for (m, r) in self.moved.iter_mut().zip(released) {
            *m += r;
        }
        for (dir, released) in released.into_iter().enumerate() {
            for fetched in 0..2 {
                let Some(p) = self.probe[dir][fetched].as_mut() else { continue };
                if (p.qp, p.seq) != (qp, seq) {
                    p.others += released;
                    continue;
                }
                let p = *p;
                self.probe[dir][fetched] = None;
                let wire_bytes = p.bytes + p.others;
                let on_wire_ns = (wire_bytes as f64 / link_bytes_per_ns.max(f64::MIN_POSITIVE)) as u64;
                let delay = now_ns.saturating_sub(p.posted_ns).saturating_sub(on_wire_ns);
                let least = &mut self.delay_ns[dir][fetched];
                *least = Some(least.map_or(delay, |d| d.min(delay)));
            }
        }
    }

    /// Fair admission held data back for the budget in direction `read`.
    pub(super) fn held(&mut self, read: bool) {
        self.held[read as usize] = true;
    }

    /// A policy tick at `now_ns` on a link moving `link_bytes_per_ns`, the
    /// port's counters then being `traffic` (where the NIC reports them):
    /// the largest WQE of the tick ending becomes the one before, and the
    /// floor of a direction whose budget held data back while its link was
    /// less than [`BUSY_SHARE`] busy, in the tick and on average over the
    /// ticks that held data back (a tick that held none resets the
    /// average), grows by [`FLOOR_GROWTH`] (the measured product fell short
    /// of what keeps the link busy: a sample timed on other WQEs,
    /// completions that come back in bursts), and otherwise shrinks back by
    /// [`FLOOR_DECAY`]. A link's load is the more of what its direction's
    /// completions gave back and what its wire moved (the port's sent bytes
    /// for WRITEs and SENDs, its received bytes for READ responses).
    /// Work conservation is then what the floor is held to, not a model of
    /// it.
    pub(super) fn tick(&mut self, now_ns: u64, link_bytes_per_ns: f64, traffic: Option<PortTraffic>) {
        for l in &mut self.largest {
            *l = [0, l[0]];
        }
        let span_ns = now_ns.saturating_sub(self.last_tick_ns);
        let capacity = link_bytes_per_ns * span_ns as f64;
        self.last_tick_ns = now_ns;
        let on_wire = self.on_wire(traffic, span_ns);
        for (dir, on_wire) in on_wire.into_iter().enumerate() {
            let moved = (std::mem::take(&mut self.moved[dir]) as f64).max(on_wire);
            let held = std::mem::take(&mut self.held[dir]);
            let g = self.growth[dir].max(1.0);
            let share = if capacity > 0.0 { moved / capacity } else { 1.0 };
            let busy = &mut self.busy[dir];
            *busy = if held { Some(busy.map_or(share, |b| b + (share - b) * BUSY_AVERAGING)) } else { None };
            self.growth[dir] = if share < BUSY_SHARE && busy.is_some_and(|b| b < BUSY_SHARE) {
                (g * FLOOR_GROWTH).min(FLOOR_MOST)
            } else {
                (g * FLOOR_DECAY).max(1.0)
            };
        }
    }

    /// The bytes each direction's wire moved in a tick of `span_ns` that
    /// ends with the counters at `traffic`: what they moved since the
    /// reading before, where it is the last tick's; the rate between the
    /// last two distinct readings times the tick otherwise (a backend that
    /// samples its counters less often than the policy ticks); none before
    /// two readings.
    fn on_wire(&mut self, traffic: Option<PortTraffic>, span_ns: u64) -> [f64; 2] {
        let Some(t) = traffic else { return [0.0; 2] };
        if let Some(l) = self.last_traffic.filter(|l| t.at_ns > l.at_ns) {
            let moved = [t.xmit_bytes.saturating_sub(l.xmit_bytes), t.rcv_bytes.saturating_sub(l.rcv_bytes)];
            let between = t.at_ns - l.at_ns;
            self.wire_rate = moved.map(|m| m as f64 / between as f64);
            self.last_traffic = Some(t);
            if between == span_ns {
                return moved.map(|m| m as f64);
            }
        } else if self.last_traffic.is_none() {
            self.last_traffic = Some(t);
            return [0.0; 2];
        }
        self.wire_rate.map(|r| r * span_ns as f64)
    }

    /// The least bytes in flight that keep the link [`FLOOR_UTILIZATION`]
    /// busy in a direction: that share of the link's rate times the
    /// pipeline delay, plus the most one completion gave back lately (what
    /// is on the wire, or done and not yet given back, while the others'
    /// completions travel); 0 before the delay was measured.
    pub(super) fn floor_bytes(&self, read: bool, link_bytes_per_ns: f64) -> u64 {
        let dir = read as usize;
        let Some(delay) = self.delay(dir) else { return 0 };
        let largest = self.largest[dir][0].max(self.largest[dir][1]);
        let growth = self.growth[dir].max(1.0);
        (growth * FLOOR_UTILIZATION * (link_bytes_per_ns * delay as f64 + largest as f64)) as u64
    }

    /// The delay the floor rests on in direction `dir`: the longer of the
    /// inline and the fetched WQEs' least delays.
    fn delay(&self, dir: usize) -> Option<u64> {
        let [inline, fetched] = self.delay_ns[dir];
        inline.max(fetched)
    }

    /// The measured delays the floors rest on, ns (for reports and tests).
    pub(super) fn delay_ns(&self) -> [Option<u64>; 2] {
        [self.delay(0), self.delay(1)]
    }
}

/// A windowed data WQE as [`Pipeline::posted`] sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PostedWqe {
    /// A READ (its response is on the responder's wire).
    pub read: bool,
    /// Its QP.
    pub qp: usize,
    /// Its sequence number on the QP.
    pub seq: u64,
    /// Its window charge, bytes.
    pub bytes: u64,
    /// Whether the NIC fetches its payload (it is not inline).
    pub fetched: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floor(bytes: u64) -> u64 {
        (FLOOR_UTILIZATION * bytes as f64) as u64
    }

    fn wqe(read: bool, qp: usize, seq: u64, bytes: u64, fetched: bool) -> PostedWqe {
        PostedWqe { read, qp, seq, bytes, fetched }
    }

    #[test]
    fn the_floor_is_the_least_delay_times_the_link_plus_the_most_one_completion_gave_back() {
        let mut p = Pipeline::default();
        assert_eq!(p.floor_bytes(false, 12.5), 0);
        // Posted into an empty pipeline: timed. 8192 B at 12.5 B/ns is
        // 655 ns on the wire, so 2655 ns is 2000 ns of delay.
        p.posted(wqe(false, 3, 10, 8192, true), 1000, 0);
        p.completed(3, 10, 3655, 12.5, [8192, 0]);
        assert_eq!(p.delay_ns(), [Some(2000), None]);
        assert_eq!(p.floor_bytes(false, 12.5), floor(25_000 + 8192));
        // Posted behind others: not timed (its wait is queueing).
        p.posted(wqe(false, 3, 11, 8192, true), 4000, 8192);
        p.completed(3, 11, 9000, 12.5, [8192, 0]);
        assert_eq!(p.delay_ns()[0], Some(2000));
        // A shorter sample lowers it; a longer one does not raise it.
        p.posted(wqe(false, 4, 0, 64, true), 10_000, 0);
        p.completed(4, 0, 11_505, 12.5, [64, 0]);
        assert_eq!(p.delay_ns()[0], Some(1500));
        p.posted(wqe(false, 4, 1, 64, true), 20_000, 0);
        p.completed(4, 1, 30_000, 12.5, [64, 0]);
        assert_eq!(p.delay_ns()[0], Some(1500));
        // The most given back at once is remembered for a tick and the
        // one after.
        p.tick(0, 12.5, None);
        assert_eq!(p.floor_bytes(false, 12.5), floor(18_750 + 8192));
        p.tick(0, 12.5, None);
        assert_eq!(p.floor_bytes(false, 12.5), floor(18_750));
        // The READ direction is measured on its own.
        assert_eq!(p.floor_bytes(true, 12.5), 0);
        // WQEs posted after a probe that complete before it took the wire
        // from it: their time is not the pipeline's.
        p.posted(wqe(false, 5, 0, 64, true), 40_000, 0);
        p.completed(6, 0, 41_000, 12.5, [12_500, 0]);
        p.completed(5, 0, 42_405, 12.5, [64, 0]);
        assert_eq!(p.delay_ns()[0], Some(1400));
    }

    #[test]
    fn a_probe_in_flight_is_not_replaced_until_it_completes_or_goes_stale() {
        let mut p = Pipeline::default();
        // A direction that always holds a little in flight: every post
        // is within the probe's bound, one every 100 ns.
        assert!(p.posted(wqe(false, 1, 0, 112, false), 0, 0));
        for seq in 1..20 {
            assert!(!p.posted(wqe(false, 2, seq, 112, false), seq * 100, 112), "the probe stays");
        }
        // Its completion gives the sample (less the wire time of the one
        // WQE that completed before it), and the next post is timed.
        p.completed(2, 1, 1450, 12.5, [112, 0]);
        p.completed(1, 0, 1517, 12.5, [112, 0]);
        assert_eq!(p.delay_ns()[0], Some(1500));
        assert!(p.posted(wqe(false, 1, 20, 112, false), 2000, 112));
        // A probe whose completion never comes gives way after 1 ms.
        assert!(!p.posted(wqe(false, 1, 21, 112, false), 500_000, 0));
        assert!(p.posted(wqe(false, 1, 22, 112, false), 1_002_000, 0));
    }

    #[test]
    fn the_floor_rests_on_the_longer_of_the_inline_and_the_fetched_delays() {
        let mut p = Pipeline::default();
        // A 16 B inline WRITE alone: 1500 ns.
        p.posted(wqe(false, 1, 0, 112, false), 0, 0);
        p.completed(1, 0, 1508, 12.5, [112, 0]);
        assert_eq!(p.delay_ns()[0], Some(1500));
        // A chunk whose payload the NIC fetches takes longer; it sets the
        // floor even though its delay is not the least.
        p.posted(wqe(false, 2, 0, 2048, true), 10_000, 0);
        p.completed(2, 0, 12_163, 12.5, [2048, 0]);
        assert_eq!(p.delay_ns()[0], Some(2000));
        // A shorter inline sample does not lower it.
        p.posted(wqe(false, 1, 1, 112, false), 20_000, 0);
        p.completed(1, 1, 21_209, 12.5, [112, 0]);
        assert_eq!(p.delay_ns()[0], Some(2000));
    }

    #[test]
    fn the_floor_grows_while_the_budget_holds_data_back_and_the_link_is_short() {
        let mut p = Pipeline::default();
        let mut t = 0;
        // A 10 us tick in which completions gave back `moved` bytes (the
        // link moves 125 KB in it), with data held back or not.
        let mut tick = |p: &mut Pipeline, moved: u64, held: bool| {
            for k in 0..10 {
                p.completed(9, k, t + k * 1000, 12.5, [moved / 10, 0]);
            }
            if held {
                p.held(false);
            }
            t += 10_000;
            p.tick(t, 12.5, None);
            p.growth[0]
        };
        assert_eq!(tick(&mut p, 60_000, false), 1.0, "short, but nothing held back: the tenants' own doing");
        assert_eq!(tick(&mut p, 125_000, true), 1.0, "held back with the link busy: the floor is enough");
        assert_eq!(tick(&mut p, 112_500, true), 1.0, "one tick 0.90 busy among busy ones is jitter");
        assert_eq!(tick(&mut p, 60_000, true), FLOOR_GROWTH, "held back with the link short");
        assert_eq!(tick(&mut p, 60_000, true), FLOOR_GROWTH * FLOOR_GROWTH);
        for _ in 0..40 {
            tick(&mut p, 0, true);
        }
        assert_eq!(p.growth[0], FLOOR_MOST);
        assert_eq!(p.growth[1], 1.0, "the READ direction is its own");
        // A busy tick stops the growth at once, though the average takes
        // eleven busy ticks to climb from 0 past 0.95: growing on the
        // average alone overshot after every start.
        let grown = tick(&mut p, 125_000, true);
        assert_eq!(grown, FLOOR_MOST * FLOOR_DECAY, "and it shrinks back once the link is busy");
        p.posted(wqe(false, 3, 10, 8192, true), t, 0);
        p.completed(3, 10, t + 2655, 12.5, [8192, 0]);
        // The busy tick's completions gave back 12.5 KB each, the most.
        let floor = (grown * FLOOR_UTILIZATION * (12.5 * 2000.0 + 12_500.0)) as u64;
        assert_eq!(p.floor_bytes(false, 12.5), floor);
    }

    #[test]
    fn a_wire_busy_with_traffic_not_admitted_does_not_grow_the_floor() {
        let mut p = Pipeline::default();
        let mut t = 0;
        let mut sent = PortTraffic::default();
        // A 10 us tick (125 KB of link) in which READ completions gave back
        // 40 KB with READs held back, and the responder's wire carried
        // `rcv` bytes in all (the READ responses and a peer's replies).
        p.tick(t, 12.5, Some(sent));
        let mut tick = |p: &mut Pipeline, rcv: u64| {
            p.completed(7, t / 10_000, t + 5000, 12.5, [0, 40_000]);
            p.held(true);
            sent.rcv_bytes += rcv;
            t += 10_000;
            sent.at_ns = t;
            p.tick(t, 12.5, Some(sent));
            p.growth[1]
        };
        assert_eq!(tick(&mut p, 124_000), 1.0, "the wire was busy: the budget idled nothing");
        assert_eq!(tick(&mut p, 124_000), 1.0);
        assert_eq!(tick(&mut p, 40_000), FLOOR_GROWTH, "the wire was as short as the completions say");
        // Without counters the same busy wire looks short (the rule before).
        let mut blind = Pipeline::default();
        for k in 0..3 {
            blind.completed(7, k, k * 10_000 + 5000, 12.5, [0, 40_000]);
            blind.held(true);
            blind.tick((k + 1) * 10_000, 12.5, None);
        }
        assert!(blind.growth[1] > 1.0);
    }

    #[test]
    fn counters_read_less_often_than_the_ticks_give_the_wire_its_last_rate() {
        let mut p = Pipeline::default();
        // Counters read every 30 us (a sampler beside the loop), ticks every
        // 10 us: each tick counts the rate of the last two readings.
        let reading = |us: u64, rcv: u64| Some(PortTraffic { xmit_bytes: 0, rcv_bytes: rcv, at_ns: us * 1000 });
        p.tick(0, 12.5, reading(0, 0));
        assert_eq!(p.on_wire(reading(0, 0), 10_000), [0.0, 0.0], "one reading: no rate yet");
        // 30 us at 12 B/ns on the responder's wire.
        assert_eq!(p.on_wire(reading(30, 360_000), 10_000), [0.0, 120_000.0]);
        assert_eq!(p.on_wire(reading(30, 360_000), 10_000), [0.0, 120_000.0], "the same reading: the same rate");
        // Read at each tick: what the counters moved, exactly.
        let mut q = Pipeline::default();
        q.on_wire(reading(0, 0), 0);
        assert_eq!(q.on_wire(reading(10, 77_777), 10_000), [0.0, 77_777.0]);
    }
}
