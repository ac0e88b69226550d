//! The simulated ConnectX-6-class RNIC.
//!
//! A [`SimFabric`] is a small cluster: hosts, each with one NIC, joined
//! by a link. [`SimFabric::nic`] hands out a [`SimRnic`] per host, which
//! implements [`Rnic`]. The model executes exactly the WQE stream it is
//! given (data WQEs, WAIT, SEND_ENABLE, managed QPs) with the timing of an
//! [`RnicProfile`], and really moves bytes between memory regions. It knows
//! nothing of tenants or policies.
//!
//! Clocks: in [`ClockMode::Virtual`] time advances only through
//! [`SimFabric::advance_to_ns`] / [`SimFabric::step`] (discrete events,
//! deterministic for a seed); in [`ClockMode::Wall`] every call on a
//! [`SimRnic`] first advances the model to the wall-clock time since the
//! fabric was created, so a spinning real-time loop sees a NIC that runs as
//! time passes. See `docs/rnic-model.md`.

mod cq;
mod dma;
mod fault;
mod memory;
mod profile;
mod qp;
mod sched;
mod transport;
mod verbs_ops;
mod wire;
mod world;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

pub use fault::{ib_timeout_ps, Fault, FaultCounters, IB_TIMEOUT_UNIT_PS};
pub use memory::ExternalMemory;
pub use profile::{Ps, RnicProfile, TcScheduler, PS_PER_NS};
pub use qp::QpCounters;
pub use sched::SchedCounters;
pub use wire::PortCounters;

use super::*;
use world::World;

/// Which clock drives the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockMode {
    /// Discrete-event virtual time, advanced explicitly.
    Virtual,
    /// Wall-clock time: the model catches up to "now" on every call.
    Wall,
}

struct Shared {
    world: Mutex<World>,
    /// The world's clock as last published (`World::clock`).
    clock: Arc<AtomicU64>,
    mode: ClockMode,
    start: Instant,
}

impl Shared {
    /// The model's time in ps: in virtual time the published clock, with no
    /// lock taken; in wall-clock time the model first catches up to now.
    fn now_ps(&self) -> Ps {
        match self.mode {
            ClockMode::Virtual => self.clock.load(Ordering::Acquire),
            ClockMode::Wall => self.lock().now,
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, World> {
        let mut w = self.world.lock();
        if self.mode == ClockMode::Wall {
            let t = self.start.elapsed().as_nanos() as u64 * PS_PER_NS;
            w.advance_to(t);
        }
        w
    }
}

/// A simulated cluster of hosts with one RNIC each.
#[derive(Clone)]
pub struct SimFabric {
    shared: Arc<Shared>,
}

/// Counters of one host's NIC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// The egress port.
    pub port: PortCounters,
    /// The send scheduler.
    pub sched: SchedCounters,
}

impl SimFabric {
    /// A fabric of `hosts` hosts (at least 1) with the given profile,
    /// clock and random seed.
    pub fn new(profile: RnicProfile, hosts: usize, seed: u64, mode: ClockMode) -> Self {
        let mut world = World::new(profile, hosts.max(1), seed);
        if mode == ClockMode::Wall {
            world.dma = Some(Default::default());
        }
        let clock = world.clock.clone();
        SimFabric { shared: Arc::new(Shared { world: Mutex::new(world), clock, mode, start: Instant::now() }) }
    }

    /// Two hosts, the `cx6-100g` profile, virtual time.
    pub fn pair(seed: u64) -> Self {
        Self::new(RnicProfile::cx6_100g(), 2, seed, ClockMode::Virtual)
    }

    /// The NIC of host `host`.
    ///
    /// # Panics
    /// If `host` is not a host of this fabric (a programming error).
    pub fn nic(&self, host: usize) -> SimRnic {
        assert!(host < self.hosts(), "host {host} out of range");
        SimRnic { shared: self.shared.clone(), host }
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.shared.world.lock().hosts.len()
    }

    /// The clock mode.
    pub fn mode(&self) -> ClockMode {
        self.shared.mode
    }

    /// The profile the NICs run.
    pub fn profile(&self) -> RnicProfile {
        self.shared.world.lock().prof.clone()
    }

    /// Current model time in ns.
    pub fn now_ns(&self) -> u64 {
        self.shared.now_ps() / PS_PER_NS
    }

    /// Current model time in ps.
    pub fn now_ps(&self) -> Ps {
        self.shared.now_ps()
    }

    /// Time of the next pending event in ps, if any.
    pub fn next_event_ps(&self) -> Option<Ps> {
        self.shared.world.lock().next_event_at()
    }

    /// Runs all events up to `t_ps` and sets the clock there (virtual time).
    pub fn advance_to_ps(&self, t_ps: Ps) {
        self.shared.world.lock().advance_to(t_ps);
    }

    /// Runs all events up to `t_ns` and sets the clock there (virtual time).
    pub fn advance_to_ns(&self, t_ns: u64) {
        self.advance_to_ps(t_ns * PS_PER_NS);
    }

    /// Runs the events of the next instant; `false` if nothing is pending.
    pub fn step(&self) -> bool {
        self.shared.world.lock().step()
    }

    /// Runs instants up to `limit_ps` until one changes something software
    /// can observe through [`Rnic`] (a CQE, a QP leaving RTS, bytes written
    /// into a memory region), and stops after that instant. Returns `false`
    /// if no event at or before `limit_ps` was pending. A poll-driven
    /// program that reacts only to what it can observe behaves exactly as
    /// with [`SimFabric::step`], with fewer wake-ups (virtual time).
    pub fn step_until_visible(&self, limit_ps: Ps) -> bool {
        self.shared.world.lock().step_until_visible(limit_ps)
    }

    /// Sets how host `host`'s NIC schedules traffic classes (`mlnx_qos`).
    pub fn set_tc_scheduler(&self, host: usize, sched: TcScheduler) {
        if let Some(h) = self.shared.world.lock().hosts.get_mut(host) {
            h.tc_sched = sched;
        }
    }

    /// Counters of host `host`'s NIC.
    pub fn counters(&self, host: usize) -> NicCounters {
        let w = self.shared.world.lock();
        w.hosts
            .get(host)
            .map_or_else(NicCounters::default, |h| NicCounters { port: h.port.counters, sched: h.sched.counters })
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, host: usize, qp: QpHandle) -> Option<QpCounters> {
        self.shared.world.lock().qp(host, qp.0).map(|q| q.stats)
    }

    /// Injects `fault` now (see [`Fault`] for what each does).
    pub fn inject(&self, fault: Fault) {
        self.shared.lock().apply_fault(fault);
    }

    /// Injects `fault` at `at_ns` of model time (now, if that has passed):
    /// a fault plan fixed in advance is as deterministic as the rest of
    /// the model.
    pub fn inject_at(&self, at_ns: u64, fault: Fault) {
        let mut w = self.shared.lock();
        let at = (at_ns * PS_PER_NS).max(w.now);
        w.schedule(at, world::Event::Fault(fault));
    }

    /// What injected faults caused so far.
    pub fn fault_counters(&self) -> FaultCounters {
        self.shared.world.lock().faults
    }

    /// Events processed so far (a measure of simulation work).
    pub fn events_run(&self) -> u64 {
        self.shared.world.lock().events_run
    }

    /// Payload bytes really copied and bytes whose copy was provably
    /// redundant and elided.
    pub fn copy_stats(&self) -> (u64, u64) {
        let w = self.shared.world.lock();
        (w.copier.copied_bytes, w.copier.elided_bytes)
    }
}

/// The simulated NIC of one host; implements [`Rnic`].
#[derive(Clone)]
pub struct SimRnic {
    shared: Arc<Shared>,
    host: usize,
}

impl SimRnic {
    /// The host this NIC belongs to.
    pub fn host(&self) -> usize {
        self.host
    }

    /// The fabric this NIC belongs to.
    pub fn fabric(&self) -> SimFabric {
        SimFabric { shared: self.shared.clone() }
    }

    /// Registers lent memory (all of `mem`) as a region of protection
    /// domain `pd`, like [`Rnic::reg_mr`]: the model moves `mem`'s bytes,
    /// and drops `mem` when the region is deregistered (or the fabric is).
    pub fn reg_mr_external(
        &mut self,
        pd: PdHandle,
        mem: Box<dyn ExternalMemory>,
        access: AccessFlags,
    ) -> Result<Mr, RnicError> {
        self.shared.lock().v_reg_mr_external(self.host, pd, mem, access, None)
    }

    /// Registers lent memory like [`SimRnic::reg_mr_external`], at address
    /// `iova` (as `ibv_reg_mr_iova2` does): the caller picks the region's
    /// address, its key alone tells it from other regions at the same one.
    pub fn reg_mr_external_at(
        &mut self,
        pd: PdHandle,
        mem: Box<dyn ExternalMemory>,
        access: AccessFlags,
        iova: u64,
    ) -> Result<Mr, RnicError> {
        self.shared.lock().v_reg_mr_external(self.host, pd, mem, access, Some(iova))
    }
}

impl Rnic for SimRnic {
    fn device_info(&self) -> DeviceInfo {
        let w = self.shared.world.lock();
        DeviceInfo {
            name: format!("sim-{}:{}", w.prof.name, self.host),
            caps: DeviceCaps {
                cross_channel: true,
                managed_send: true,
                max_qp_wr: w.prof.max_qp_wr,
                max_cqe: w.prof.max_cqe,
                max_inline_data: w.prof.max_inline_data,
                traffic_classes: 8,
                max_rd_atomic: 16,
                vendor: (0, 0),
            },
        }
    }

    fn port_info(&self) -> PortInfo {
        let w = self.shared.world.lock();
        PortInfo {
            active: w.link_up(self.host),
            link_gbps: w.prof.link_gbps as u32,
            mtu: w.prof.mtu,
            gid: w.hosts[self.host].gid,
        }
    }

    fn port_traffic(&self) -> Option<PortTraffic> {
        let w = self.shared.world.lock();
        let c = w.hosts.get(self.host)?.port.counters;
        Some(PortTraffic { xmit_bytes: c.xmit_bytes, rcv_bytes: c.rcv_bytes, at_ns: w.now / PS_PER_NS })
    }

    fn clock_ns(&self) -> u64 {
        self.shared.now_ps() / PS_PER_NS
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, RnicError> {
        Ok(self.shared.lock().v_alloc_pd(self.host))
    }

    fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError> {
        self.shared.lock().v_reg_mr(self.host, pd, len, access)
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
        self.shared.lock().mems[self.host].remove(mr.0)
    }

    fn write_mr(&mut self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<(), RnicError> {
        self.shared.lock().v_write_mr(self.host, mr, offset, data)
    }

    fn read_mr(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<(), RnicError> {
        self.shared.lock().mems[self.host].cpu_read(mr.0, offset, out)
    }

    fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError> {
        self.shared.lock().v_create_cq(self.host, attr)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError> {
        self.shared.lock().v_destroy_cq(self.host, cq)
    }

    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        self.shared.lock().v_create_qp(self.host, pd, attr)
    }

    fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError> {
        self.shared.lock().v_modify_qp(self.host, qp, transition)
    }

    fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError> {
        self.shared.lock().v_qp_state(self.host, qp)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        self.shared.lock().v_destroy_qp(self.host, qp)
    }

    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.shared.lock().v_post_send(self.host, qp, wrs)
    }

    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.shared.lock().v_post_recv(self.host, qp, wrs)
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        self.shared.lock().v_poll_cq(self.host, cq, out)
    }
}
