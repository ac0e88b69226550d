//! The simulated world: hosts, their NICs, the link between them, and the
//! discrete-event queue that advances them. Deterministic: events at the
//! same instant run in the order they were scheduled, and all randomness
//! comes from one seeded generator.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::cq::CqState;
use super::dma::{self, Dma};
use super::fault::{Fault, FaultCounters};
use super::memory::{CopyEngine, MemStore};
use super::profile::{Ps, RnicProfile, TcScheduler};
use super::qp::SimQp;
use super::sched::Scheduler;
use super::wire::{Port, Seg};
use crate::rnic::{Gid, WcStatus};

/// How a response reaches the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Positive acknowledgement.
    Ack,
    /// Negative acknowledgement: the WQE fails with this status.
    Nak(WcStatus),
    /// Receiver not ready: retry later.
    Rnr,
    /// Sequence error: the responder saw a gap (packets lost before this
    /// WQE); the requester goes back to the WQE the answer names.
    SeqNak,
}

/// Something that happens at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A QP's head WQE finished processing.
    QpReady { host: usize, qp: u32 },
    /// The scheduler may dispatch again (its busy time ended, or egress drained).
    Sched { host: usize },
    /// The wire finished its current run of packets.
    WireDone { host: usize, gen: u64 },
    /// The last packet of a message (or a READ request) reached `seg.dst_host`.
    Deliver { seg: Seg },
    /// An answer to WQE `wqe` of requester QP `qp` arrived back from host
    /// `from` (`from == host`: produced locally, it crossed no wire).
    Answer { host: usize, qp: u32, wqe: u64, epoch: u32, answer: Answer, from: usize },
    /// A QP's transport (ACK) timer for generation `epoch` expired.
    RetryTimer { host: usize, qp: u32, epoch: u32 },
    /// An injected fault takes effect.
    Fault(Fault),
}

/// A pending event's place in the queue: (time, sequence number, slot of
/// its [`Event`] in `World::slots`). Kept small so that heap operations move
/// little; the sequence number makes same-instant events run in the order
/// they were scheduled.
type Scheduled = (Ps, u64, u32);

/// One host: its NIC's objects, scheduler and port.
pub(crate) struct Host {
    pub gid: Gid,
    pub pds: u32,
    pub cqs: Vec<Option<CqState>>,
    pub qps: Vec<Option<SimQp>>,
    pub sched: Scheduler,
    pub port: Port,
    pub tc_sched: TcScheduler,
    /// Intervals `[start, end]` during which the host's link is down.
    pub link_down: Vec<(Ps, Ps)>,
    /// The send side processes nothing before this time (injected stall).
    pub stalled_until: Ps,
    /// Positive ACKs still to drop on arrival (injected).
    pub drop_acks: u32,
}

/// First QP number handed out (QPNs below are reserved, as on real NICs).
pub(crate) const QPN_BASE: u32 = 0x100;

/// Everything the simulator knows.
pub(crate) struct World {
    pub now: Ps,
    /// `now`, published after each advance so that reading the clock
    /// (`Rnic::clock_ns` in virtual time) need not take the world's lock.
    pub clock: Arc<AtomicU64>,
    seq: u64,
    /// The earliest pending event when it was scheduled ahead of every
    /// event in `events` (the common case: the scheduler's next turn, a
    /// QP's next WQE), kept out of the heap. Never later than the heap's
    /// top, so the queue's order is `front` then `events`.
    front: Option<Scheduled>,
    events: BinaryHeap<Reverse<Scheduled>>,
    /// The pending events' payloads, indexed by their queue entry's slot.
    slots: Vec<Option<Event>>,
    /// Free indices of `slots`.
    free: Vec<u32>,
    pub prof: RnicProfile,
    pub hosts: Vec<Host>,
    pub mems: Vec<MemStore>,
    pub copier: CopyEngine,
    rng: ChaCha8Rng,
    /// Events processed so far.
    pub events_run: u64,
    /// Bumped by every change the verbs interface can observe: a CQE
    /// written, a QP moved to ERR, a message delivered (memory written).
    pub visible: u64,
    /// What injected faults caused.
    pub faults: FaultCounters,
    /// The DMA queues: in wall-clock time only (see `dma.rs`).
    pub dma: Option<Dma>,
}

impl World {
    pub fn new(prof: RnicProfile, hosts: usize, seed: u64) -> Self {
        let hosts_v = (0..hosts)
            .map(|h| {
                let mut gid = [0u8; 16];
                gid[10] = 0xff;
                gid[11] = 0xff;
                gid[12..16].copy_from_slice(&[10, 0, 0, h as u8 + 1]);
                Host {
                    gid,
                    pds: 0,
                    cqs: Vec::new(),
                    qps: Vec::new(),
                    sched: Scheduler::default(),
                    port: Port::default(),
                    tc_sched: TcScheduler::RoundRobin,
                    link_down: Vec::new(),
                    stalled_until: 0,
                    drop_acks: 0,
                }
            })
            .collect();
        World {
            now: 0,
            clock: Arc::new(AtomicU64::new(0)),
            seq: 0,
            front: None,
            events: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            prof,
            hosts: hosts_v,
            mems: (0..hosts).map(MemStore::new).collect(),
            copier: CopyEngine::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            events_run: 0,
            visible: 0,
            faults: FaultCounters::default(),
            dma: None,
        }
    }

    pub fn schedule(&mut self, at: Ps, ev: Event) {
        let at = at.max(self.now);
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(ev);
                i
            }
            None => {
                self.slots.push(Some(ev));
                (self.slots.len() - 1) as u32
            }
        };
        let key = (at, self.seq, slot);
        // `seq` grows, so a key that ties on time comes after every
        // pending one: the front slot takes it only if it is strictly
        // earlier than everything queued.
        let heap_after = self.events.peek().is_none_or(|Reverse(top)| at < top.0);
        match self.front {
            None if heap_after => self.front = Some(key),
            Some(f) if at < f.0 => {
                self.events.push(Reverse(f));
                self.front = Some(key);
            }
            _ => self.events.push(Reverse(key)),
        }
    }

    /// The next pending event's key, without taking it.
    fn peek(&self) -> Option<Scheduled> {
        self.front.or_else(|| self.events.peek().map(|Reverse(s)| *s))
    }

    /// Takes the next pending event's key.
    fn pop(&mut self) -> Option<Scheduled> {
        self.front.take().or_else(|| self.events.pop().map(|Reverse(s)| s))
    }

    /// Time of the next pending event.
    pub fn next_event_at(&self) -> Option<Ps> {
        self.peek().map(|s| s.0)
    }

    /// Runs every event up to and including `t`, then sets the clock to `t`.
    /// In wall-clock time (`dma` set) it stops after a [`dma::SLICE`] of
    /// the machine's time with the clock at the last event run: a model
    /// that has fallen behind the wall catches up over several calls, and
    /// the loop that drives it is never held for long.
    pub fn advance_to(&mut self, t: Ps) {
        let slice = self.dma.is_some().then(Instant::now);
        let mut run = 0u32;
        let mut behind = false;
        while let Some((at, _, slot)) = self.peek() {
            if at > t {
                break;
            }
            self.pop();
            let ev = self.slots.get_mut(slot as usize).and_then(Option::take);
            self.free.push(slot);
            self.now = at;
            let Some(ev) = ev else { continue };
            self.events_run += 1;
            self.dispatch(ev);
            run += 1;
            if run.is_multiple_of(16) && slice.is_some_and(|s| s.elapsed() >= dma::SLICE) {
                behind = true;
                break;
            }
        }
        if !behind {
            self.now = self.now.max(t);
        }
        if self.dma.as_ref().is_some_and(|d| !d.idle()) {
            self.run_dma();
        }
        self.clock.store(self.now, Ordering::Release);
    }

    /// Runs all events at the next event instant. Returns `false` if none.
    pub fn step(&mut self) -> bool {
        match self.next_event_at() {
            Some(t) => {
                self.advance_to(t);
                true
            }
            None => false,
        }
    }

    /// Runs instants, none later than `limit`, until one of them changed
    /// something the verbs interface can observe. Returns `false` if no
    /// event at or before `limit` was pending.
    pub fn step_until_visible(&mut self, limit: Ps) -> bool {
        let start = self.visible;
        let mut ran = false;
        while let Some(t) = self.next_event_at() {
            if t > limit {
                break;
            }
            self.advance_to(t);
            ran = true;
            if self.visible != start {
                break;
            }
        }
        ran
    }

    fn dispatch(&mut self, ev: Event) {
        if matches!(ev, Event::Deliver { .. }) {
            self.visible += 1;
        }
        match ev {
            Event::QpReady { host, qp } => self.on_qp_ready(host, qp),
            Event::Sched { host } => self.arbitrate(host),
            Event::WireDone { host, gen } => self.on_wire_done(host, gen),
            Event::Deliver { seg } => self.on_deliver(seg),
            Event::Answer { host, qp, wqe, epoch, answer, from } => self.on_answer(host, qp, wqe, epoch, answer, from),
            Event::RetryTimer { host, qp, epoch } => self.on_retry_timer(host, qp, epoch),
            Event::Fault(fault) => self.apply_fault(fault),
        }
    }

    /// An exponentially distributed jitter with the given mean.
    pub fn jitter(&mut self, mean: Ps) -> Ps {
        if mean == 0 {
            return 0;
        }
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let x = -(1.0 - u).ln() * mean as f64;
        x.min(mean as f64 * 50.0) as Ps
    }

    pub fn qp(&self, host: usize, qp: u32) -> Option<&SimQp> {
        self.hosts.get(host)?.qps.get(qp as usize)?.as_ref()
    }

    pub fn qp_mut(&mut self, host: usize, qp: u32) -> Option<&mut SimQp> {
        self.hosts.get_mut(host)?.qps.get_mut(qp as usize)?.as_mut()
    }

    pub fn host_by_gid(&self, gid: &Gid) -> Option<usize> {
        self.hosts.iter().position(|h| &h.gid == gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drains the queue, returning each event's (time, marker).
    fn drain(w: &mut World) -> Vec<(Ps, usize)> {
        let mut out = Vec::new();
        while let Some((at, _, slot)) = w.pop() {
            if let Some(Event::Sched { host }) = w.slots[slot as usize].take() {
                out.push((at, host));
            }
        }
        out
    }

    #[test]
    fn events_run_by_time_then_by_the_order_they_were_scheduled() {
        let mut w = World::new(RnicProfile::cx6_100g(), 1, 1);
        // Earlier-than-everything events take the front slot and push the
        // previous front into the heap; ties keep their scheduling order.
        let times: [Ps; 9] = [50, 40, 40, 10, 60, 10, 5, 40, 5];
        for (marker, &t) in times.iter().enumerate() {
            w.schedule(t, Event::Sched { host: marker });
        }
        let mut want: Vec<(Ps, usize)> = times.iter().enumerate().map(|(m, &t)| (t, m)).collect();
        want.sort();
        assert_eq!(drain(&mut w), want);
    }

    #[test]
    fn an_event_scheduled_while_running_keeps_its_place() {
        let mut w = World::new(RnicProfile::cx6_100g(), 1, 1);
        w.schedule(30, Event::Sched { host: 0 });
        w.schedule(20, Event::Sched { host: 1 });
        let first = w.pop().map(|k| k.0);
        assert_eq!(first, Some(20));
        // Same time as the pending one: it runs after it.
        w.schedule(30, Event::Sched { host: 2 });
        w.schedule(25, Event::Sched { host: 3 });
        assert_eq!(drain(&mut w), vec![(25, 3), (30, 0), (30, 2)]);
    }
}
