//! The egress port and the link: per-class queues of dispatched segments,
//! the packet scheduler between classes (FIFO, strict priority or ETS
//! deficit round-robin), serialisation at link rate, and propagation to the
//! peer.
//!
//! A segment is the part of one message that one scheduling turn
//! dispatched. The wire sends it as MTU packets; while only one class has
//! traffic a segment is sent as one run of packets (one event), and a run is
//! cut at the next packet boundary when another class must get the wire.

use std::collections::VecDeque;

use super::profile::{Ps, TcScheduler};
use super::world::{Event, World};
use crate::rnic::QpState;

/// ETS deficit round-robin quantum of the heaviest class, in wire bytes:
/// one full frame (4096 B payload, 66 B headers, 20 B preamble and gap,
/// 16 B RETH) rounded up; a lighter class's quantum is this times its
/// weight over the heaviest weight (at least 1 B), so a round is at most
/// one frame per class and a class waits for at most a frame of each
/// other class before its deficit grows.
pub(crate) const ETS_QUANTUM_BYTES: i64 = 4200;

/// What a segment carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegKind {
    /// Request packets: WRITE / SEND payload, or a READ request.
    Request,
    /// READ response payload, from responder to requester.
    ReadResponse,
}

/// Dispatched packets of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seg {
    pub src_host: usize,
    pub dst_host: usize,
    /// The requester QP (index on the requester's host).
    pub qp: u32,
    /// The requester WQE (absolute index).
    pub wqe: u64,
    pub epoch: u32,
    /// Payload bytes in this segment.
    pub bytes: u32,
    pub pkts: u32,
    pub sent_pkts: u32,
    /// Extra transport header on the first packet (RETH).
    pub first_extra: u32,
    /// Whether this is the message's last segment (its arrival is delivered).
    pub last: bool,
    pub kind: SegKind,
    pub tc: u8,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    queue: usize,
    start: Ps,
    end: Ps,
    pkts: u32,
    /// Whether the run is charged to its queue's ETS deficit: it started
    /// while another class had packets queued (a class alone on the wire
    /// uses no quantum).
    charged: bool,
}

/// Port counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Time the wire spent transmitting, in ps.
    pub busy_ps: u64,
    /// Payload bytes transmitted.
    pub payload_bytes: u64,
    /// Frames transmitted.
    pub frames: u64,
    /// Bytes of the frames transmitted: payload, headers, preamble and
    /// gap (so that over the link's rate they are `busy_ps`).
    pub xmit_bytes: u64,
    /// Bytes of the frames other hosts transmitted to this one.
    pub rcv_bytes: u64,
}

/// One host's egress port.
#[derive(Default)]
pub(crate) struct Port {
    queues: [VecDeque<Seg>; 8],
    queued_ps: [Ps; 8],
    run: Option<Run>,
    gen: u64,
    deficit: [i64; 8],
    dwrr_at: usize,
    /// When the last message sent on this port is delivered at the peer:
    /// the receive path (parse, PCIe posted writes) keeps arrival order, so
    /// a message's receive jitter delays the messages behind it instead of
    /// letting them overtake it (RC requires in-order delivery per QP).
    last_deliver: Ps,
    pub counters: PortCounters,
}

impl Port {
    /// Wire time still queued for `queue` at `now` (not yet transmitted).
    pub fn backlog_ps(&self, queue: usize, now: Ps) -> Ps {
        let running = match self.run {
            Some(r) if r.queue == queue => r.end.saturating_sub(now),
            _ => 0,
        };
        self.queued_ps[queue] + running
    }
}

/// Which port queue a class uses under a scheduler.
pub(crate) fn queue_of(sched: &TcScheduler, tc: u8) -> usize {
    match sched {
        TcScheduler::RoundRobin => 0,
        _ => (tc & 7) as usize,
    }
}

impl World {
    fn seg_frame_bytes(&self, seg: &Seg, from: u32, k: u32) -> u64 {
        let mtu = self.prof.mtu as u64;
        let last_payload = seg.bytes as u64 - (seg.pkts as u64 - 1) * mtu;
        let payload = if from + k >= seg.pkts { (k as u64 - 1) * mtu + last_payload } else { k as u64 * mtu };
        let extra = if from == 0 { seg.first_extra as u64 } else { 0 };
        payload + extra + k as u64 * (self.prof.header_bytes + self.prof.preamble_ifg_bytes) as u64
    }

    fn seg_ps(&self, seg: &Seg, from: u32, k: u32) -> Ps {
        self.prof.wire_ps(self.seg_frame_bytes(seg, from, k))
    }

    /// Number of packets a segment of `bytes` payload needs.
    pub fn pkts_for(&self, bytes: u32) -> u32 {
        bytes.div_ceil(self.prof.mtu).max(1)
    }

    /// Puts a dispatched segment on `seg.src_host`'s port.
    ///
    /// A segment between two QPs of the same NIC (loopback) queues on the
    /// port too: the NIC's transmit scheduler arbitrates every send queue
    /// of a port at the port's rate, whether the embedded switch then
    /// turns the packet back or the MAC puts it on the wire, so looped
    /// traffic shares the port with wire traffic and never exceeds the
    /// link rate. Only what follows the port differs: no propagation and
    /// no link to lose it on, `loopback_ps` instead of the wire's
    /// propagation and receive processing.
    pub fn enqueue_seg(&mut self, seg: Seg) {
        let h = seg.src_host;
        let q = queue_of(&self.hosts[h].tc_sched, seg.tc);
        let ps = self.seg_ps(&seg, 0, seg.pkts);
        let host = &mut self.hosts[h];
        host.port.queued_ps[q] += ps;
        host.port.queues[q].push_back(seg);
        match host.port.run {
            None => self.start_run(h),
            Some(run) if run.queue != q => {
                let preempt = match &self.hosts[h].tc_sched {
                    TcScheduler::RoundRobin => false,
                    TcScheduler::StrictPriority => q > run.queue,
                    TcScheduler::Ets(_) => true,
                };
                if preempt {
                    self.cut_run(h);
                }
            }
            Some(_) => {}
        }
    }

    /// Shortens the current run to the packets already started.
    fn cut_run(&mut self, h: usize) {
        let Some(run) = self.hosts[h].port.run else { return };
        let Some(seg) = self.hosts[h].port.queues[run.queue].front().copied() else { return };
        let mut k = 1;
        while k < run.pkts && run.start + self.seg_ps(&seg, seg.sent_pkts, k) <= self.now {
            k += 1;
        }
        if k >= run.pkts {
            return;
        }
        let new_end = run.start + self.seg_ps(&seg, seg.sent_pkts, k);
        let removed = run.end - new_end;
        let port = &mut self.hosts[h].port;
        port.queued_ps[run.queue] += removed;
        port.gen += 1;
        port.run = Some(Run { end: new_end, pkts: k, ..run });
        let gen = port.gen;
        self.schedule(new_end, Event::WireDone { host: h, gen });
    }

    fn pick_queue(&mut self, h: usize) -> Option<usize> {
        let host = &mut self.hosts[h];
        let busy: u32 = (0..8).filter(|&q| !host.port.queues[q].is_empty()).fold(0, |m, q| m | (1 << q));
        if busy == 0 {
            return None;
        }
        let lowest = busy.trailing_zeros() as usize;
        match &host.tc_sched {
            TcScheduler::RoundRobin => Some(lowest),
            TcScheduler::StrictPriority => Some(31 - busy.leading_zeros() as usize),
            TcScheduler::Ets(weights) => {
                let port = &mut host.port;
                // An empty class keeps a debt (a negative deficit: its last
                // run overshot) but no credit.
                for (q, d) in port.deficit.iter_mut().enumerate() {
                    if busy & (1 << q) == 0 {
                        *d = (*d).min(0);
                    }
                }
                if busy.count_ones() == 1 {
                    // Alone on the wire: its runs use no quantum.
                    return Some(lowest);
                }
                let cur = port.dwrr_at;
                if busy & (1 << cur) != 0 && port.deficit[cur] > 0 {
                    return Some(cur);
                }
                // Deficit round-robin from the class after `cur`, in class
                // order: each visit adds the class's quantum, and the first
                // class whose deficit turns positive takes the wire. The
                // rounds are skipped over rather than walked: with `r` the
                // rounds the winner needs, the classes up to it in this
                // round's order get `r` quanta and those after it `r - 1`.
                let weight = |q: usize| weights.get(q).copied().unwrap_or(1).max(1) as i64;
                let heaviest = (0..8).map(weight).max().unwrap_or(1);
                let quantum = |q: usize| (ETS_QUANTUM_BYTES * weight(q) / heaviest).max(1);
                let order = |k: usize| (cur + 1 + k) % 8;
                let mut winner: Option<(i64, usize)> = None;
                for k in 0..8 {
                    let q = order(k);
                    if busy & (1 << q) != 0 {
                        let rounds = (-port.deficit[q]).max(0) / quantum(q) + 1;
                        if winner.is_none_or(|(r, _)| rounds < r) {
                            winner = Some((rounds, k));
                        }
                    }
                }
                let (rounds, at) = winner?;
                for k in 0..8 {
                    let q = order(k);
                    if busy & (1 << q) != 0 {
                        port.deficit[q] += quantum(q) * if k <= at { rounds } else { rounds - 1 };
                    }
                }
                port.dwrr_at = order(at);
                Some(order(at))
            }
        }
    }

    /// Starts transmitting, if the wire is idle and something is queued.
    pub(crate) fn start_run(&mut self, h: usize) {
        if self.hosts[h].port.run.is_some() {
            return;
        }
        loop {
            let Some(q) = self.pick_queue(h) else { return };
            let Some(seg) = self.hosts[h].port.queues[q].front().copied() else { return };
            if !self.seg_alive(&seg) {
                let left = self.seg_ps(&seg, seg.sent_pkts, seg.pkts - seg.sent_pkts);
                let port = &mut self.hosts[h].port;
                port.queued_ps[q] -= left;
                port.queues[q].pop_front();
                continue;
            }
            let others = (0..8).any(|o| o != q && !self.hosts[h].port.queues[o].is_empty());
            let charged = others && matches!(self.hosts[h].tc_sched, TcScheduler::Ets(_));
            let remaining = seg.pkts - seg.sent_pkts;
            let k = match &self.hosts[h].tc_sched {
                TcScheduler::Ets(_) if others => {
                    let deficit = self.hosts[h].port.deficit[q];
                    let mut k = 1;
                    while k < remaining && (self.seg_frame_bytes(&seg, seg.sent_pkts, k + 1) as i64) <= deficit {
                        k += 1;
                    }
                    k
                }
                _ => remaining,
            };
            let ps = self.seg_ps(&seg, seg.sent_pkts, k);
            let now = self.now;
            let port = &mut self.hosts[h].port;
            port.queued_ps[q] -= ps;
            port.gen += 1;
            port.run = Some(Run { queue: q, start: now, end: now + ps, pkts: k, charged });
            let gen = port.gen;
            self.schedule(now + ps, Event::WireDone { host: h, gen });
            return;
        }
    }

    /// Whether a queued segment still belongs to a live exchange.
    fn seg_alive(&self, seg: &Seg) -> bool {
        let req_host = match seg.kind {
            SegKind::Request => seg.src_host,
            SegKind::ReadResponse => seg.dst_host,
        };
        self.qp(req_host, seg.qp).is_some_and(|q| q.epoch == seg.epoch && q.state == QpState::Rts)
    }

    pub(crate) fn on_wire_done(&mut self, h: usize, gen: u64) {
        let port = &self.hosts[h].port;
        if port.gen != gen {
            return;
        }
        let Some(run) = port.run else { return };
        let Some(seg) = port.queues[run.queue].front().copied() else { return };
        let frame = self.seg_frame_bytes(&seg, seg.sent_pkts, run.pkts);
        let overhead = run.pkts as u64 * (self.prof.header_bytes + self.prof.preamble_ifg_bytes) as u64
            + if seg.sent_pkts == 0 { seg.first_extra as u64 } else { 0 };
        let port = &mut self.hosts[h].port;
        port.counters.busy_ps += run.end - run.start;
        port.counters.payload_bytes += frame - overhead;
        port.counters.frames += run.pkts as u64;
        port.counters.xmit_bytes += frame;
        if seg.dst_host != h {
            if let Some(dst) = self.hosts.get_mut(seg.dst_host) {
                dst.port.counters.rcv_bytes += frame;
            }
        }
        let port = &mut self.hosts[h].port;
        if run.charged {
            port.deficit[run.queue] -= frame as i64;
        }
        port.run = None;
        let done = {
            let s = port.queues[run.queue].front_mut().expect("segment under transmission");
            s.sent_pkts += run.pkts;
            s.sent_pkts >= s.pkts
        };
        // Packets sent while either end's link was down are lost.
        let lost = self.path_lost(seg.src_host, seg.dst_host, run.start, self.now + self.prof.propagation_ps);
        if lost {
            let (req_host, response) = match seg.kind {
                SegKind::Request => (seg.src_host, false),
                SegKind::ReadResponse => (seg.dst_host, true),
            };
            self.note_lost_packets(req_host, seg.qp, seg.wqe, seg.epoch, response);
        }
        let port = &mut self.hosts[h].port;
        if done {
            port.queues[run.queue].pop_front();
            if seg.last && !lost {
                let path = if seg.src_host == seg.dst_host {
                    self.prof.loopback_ps
                } else {
                    self.prof.propagation_ps + self.prof.rx_process_ps + self.jitter(self.prof.rx_jitter_ps)
                };
                let port = &mut self.hosts[h].port;
                let at = (self.now + path).max(port.last_deliver);
                port.last_deliver = at;
                self.schedule(at, Event::Deliver { seg });
            }
        }
        self.start_run(h);
        self.arbitrate(h);
    }
}
