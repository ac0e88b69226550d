//! The poll-mode dataplane loop.
//!
//! [`Dataplane`] stands between tenants and the RNIC. Each [`Dataplane::round`]:
//! 1. drains the tenants' request queues (bounded channels) into per-QP
//!    software queues, asking the policy for each request's split plan;
//! 2. keeps each tenant's active QP set within the policy's cap, rotating
//!    after the quantum with an in-NIC hand-off through the tenant's
//!    preemption control QP ([`control_qp`]), or a host hand-off on a NIC
//!    without in-NIC cross-channel ([`handoff`]);
//! 3. posts each allowed QP's next WQEs as one post list ([`split`]);
//! 4. polls the CQs, retires hidden WQEs and delivers each application
//!    message's completion exactly once, in per-QP order;
//! 5. on the policy's tick, hands it per-tenant statistics and applies the
//!    plans and rate limits it returns ([`pacing`]: a tenant's data WQEs
//!    wait in software until its token bucket allows them).
//!
//! The loop runs over any [`Rnic`]; [`Dataplane::run_pinned`] spins it on
//! a core in real time.

pub mod control_qp;
mod handoff;
mod pacing;
mod pinned;
mod qp;
mod recovery;
mod split;
mod supervise;
pub mod tenant;

use std::collections::VecDeque;

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use perf_policy_sdk::{Pacing, RequestInfo, RequestOp as PolicyOp, TenantClass, TenantInfo, TenantPlan, TenantStats};

use crate::policy::PolicyHost;
use crate::rnic::*;
use control_qp::ControlQp;
use pacing::TokenBucket;
pub use pinned::PinReport;
use qp::{Cursor, DpQp, Meta};
use recovery::SharedCq;
use split::{emit_chunk, WqeSpec};
pub use supervise::{SwapHandle, SwapOutcome, SwapRecord};
pub use tenant::{Completion, CompletionKind, PostRefused, RequestOp, TenantHandle, WorkRequest};

/// Settings of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataplaneConfig {
    /// Send-queue depth of each data QP.
    pub sq_depth: u32,
    /// Capacity of each tenant's request queue.
    pub request_queue: usize,
    /// Capacity of each tenant's completion queue.
    pub completion_queue: usize,
    /// Requests taken from one tenant per round.
    pub max_requests_per_round: usize,
    /// The policy watchdog's bound, in ns of the NIC's clock: a data QP
    /// with backlog that completes nothing for longer than this under a
    /// policy other than passthrough makes the host drop the policy (0 =
    /// no watchdog). See [`Dataplane::swap_policy`] and `docs/hostile-policies.md`.
    pub watchdog_ns: u64,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            sq_depth: 2048,
            request_queue: 8192,
            completion_queue: 8192,
            max_requests_per_round: 512,
            watchdog_ns: 1_000_000_000,
        }
    }
}

/// Counters of the loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DataplaneCounters {
    /// Rounds run.
    pub rounds: u64,
    /// Rounds that did something.
    pub busy_rounds: u64,
    /// Application requests accepted.
    pub requests: u64,
    /// Requests refused at the door (bad QP index, foreign MR, bounds).
    pub refused: u64,
    /// WQEs posted (all kinds).
    pub wqes_posted: u64,
    /// Data WQEs posted (chunks and whole messages).
    pub data_wqes: u64,
    /// Zero-weight WRs posted.
    pub zero_weight_wrs: u64,
    /// Post lists (doorbells).
    pub doorbells: u64,
    /// Hidden completions drained (never shown to tenants).
    pub hidden_completions: u64,
    /// Application completions delivered.
    pub completions: u64,
    /// In-NIC hand-offs planned through control QPs.
    pub handoffs: u64,
    /// Hand-offs released by the loop because the QP that was to release
    /// them failed first.
    pub rescued_handoffs: u64,
    /// Policy ticks.
    pub ticks: u64,
    /// Times a QP with work to post was held back by its tenant's pacing
    /// (token bucket in debt, or paused).
    pub paced_holds: u64,
    /// Overruns of a shared CQ (a NIC fault: every data QP failed, the CQ
    /// was recreated).
    pub cq_overruns: u64,
}

struct TenantState {
    name: String,
    pd: PdHandle,
    req_rx: Receiver<WorkRequest>,
    cpl_tx: Sender<Completion>,
    overflow: VecDeque<Completion>,
    qps: Vec<usize>,
    mrs: Vec<Mr>,
    pcq: Option<ControlQp>,
    weight: u32,
    rr: usize,
    tick: TickAccum,
    /// Releases that failed QPs may have taken with them (see
    /// [`Dataplane::rescue_stalls`]).
    lost_releases: u32,
    /// The PCQ's completed count when a stall was first seen.
    stalled_at: Option<u64>,
    /// The tenant's rate limit (the policy's [`Pacing`]).
    bucket: TokenBucket,
}

#[derive(Default, Clone, Copy)]
struct TickAccum {
    max_depth: u32,
    ewma: f64,
    max_msg: u64,
    completed: u64,
    bytes: u64,
    lat_sum_ns: u64,
}

const WR_QP_SHIFT: u32 = 40;
const WR_SEQ_MASK: u64 = (1 << WR_QP_SHIFT) - 1;
/// Send-queue slots kept free for control WQEs (WAIT, SEND_ENABLE).
const CTRL_RESERVE: u32 = 4;
/// Depth of the data QPs' shared send CQ.
const SEND_CQ_DEPTH: u32 = 1 << 20;
/// Depth of the data QPs' shared receive CQ.
const RECV_CQ_DEPTH: u32 = 1 << 20;
/// Receive-queue depth of each data QP.
const RQ_DEPTH: u32 = 1024;

/// The dataplane over one RNIC.
pub struct Dataplane<R: Rnic> {
    nic: R,
    cfg: DataplaneConfig,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    zw_cq: CqHandle,
    tenants: Vec<TenantState>,
    qps: Vec<DpQp>,
    policy: PolicyHost,
    plans: Vec<TenantPlan>,
    /// The policy's rate limit of each tenant (applied to the buckets).
    pacing: Vec<Pacing>,
    next_tick_ns: u64,
    wcs: Vec<Wc>,
    specs: Vec<WqeSpec>,
    /// Scratch buffers reused every round (no per-round allocation).
    scratch: Scratch,
    counters: DataplaneCounters,
    /// CQs replaced after an overrun, destroyed once no QP uses them.
    retired_cqs: Vec<CqHandle>,
    /// Policy swaps and the watchdog.
    sup: supervise::Supervisor,
}

/// Buffers the loop reuses instead of allocating per round.
#[derive(Default)]
struct Scratch {
    /// A tenant's QPs, in rotation order.
    qps: Vec<usize>,
    /// QPs waiting for a slot in their tenant's active set.
    waiting: Vec<usize>,
    /// One SGE per WQE of a post list.
    sges: Vec<[Sge; 1]>,
    /// The post list itself, kept empty between calls (its lifetime is
    /// re-bound on each use, see [`recycle`]).
    wrs: Vec<SendWr<'static>>,
    /// Application completions found while retiring WQEs.
    out: Vec<Completion>,
}

/// Reuses an empty vector's allocation for elements of another lifetime
/// (an in-place `collect`, which keeps the buffer since the layouts match).
fn recycle<'a>(v: Vec<SendWr<'_>>) -> Vec<SendWr<'a>> {
    debug_assert!(v.is_empty());
    v.into_iter().map(|_| unreachable!("recycled vectors are empty")).collect()
}

impl<R: Rnic> Dataplane<R> {
    /// A dataplane over `nic` running `policy`.
    pub fn new(mut nic: R, policy: PolicyHost, cfg: DataplaneConfig) -> Result<Self, RnicError> {
        let send_cq = nic.create_cq(CqAttr { depth: SEND_CQ_DEPTH, ignore_overrun: false })?;
        let recv_cq = nic.create_cq(CqAttr { depth: RECV_CQ_DEPTH, ignore_overrun: false })?;
        let zw_cq = nic.create_cq(CqAttr { depth: 1, ignore_overrun: true })?;
        Ok(Dataplane {
            nic,
            cfg,
            send_cq,
            recv_cq,
            zw_cq,
            tenants: Vec::new(),
            qps: Vec::new(),
            policy,
            plans: Vec::new(),
            pacing: Vec::new(),
            next_tick_ns: 0,
            wcs: vec![Wc::EMPTY; 256],
            specs: Vec::with_capacity(1024),
            scratch: Scratch::default(),
            counters: DataplaneCounters::default(),
            retired_cqs: Vec::new(),
            sup: supervise::Supervisor::default(),
        })
    }

    /// The NIC (for setup and CPU access to registered memory).
    pub fn nic(&mut self) -> &mut R {
        &mut self.nic
    }

    /// Counters so far.
    pub fn counters(&self) -> DataplaneCounters {
        self.counters
    }

    /// When the loop next has timed work to do (the policy tick, which
    /// also rescues stalled hand-offs, or the moment a paced tenant's
    /// token bucket allows its next data WQE), in ns of the NIC's clock. A
    /// virtual-time driver with no NIC event before then should still run
    /// a round at that time.
    pub fn next_timer_ns(&self) -> u64 {
        let buckets = self.tenants.iter().filter_map(|t| t.bucket.ready_at());
        buckets.fold(self.next_tick_ns, u64::min).min(self.sup.next_timer_ns(&self.cfg))
    }

    /// The policy host (its name and counters).
    pub fn policy(&self) -> &PolicyHost {
        &self.policy
    }

    /// The class the policy last gave each tenant.
    pub fn classes(&self) -> Vec<TenantClass> {
        self.plans.iter().map(|p| p.class).collect()
    }

    /// The plan the policy last gave each tenant.
    pub fn plans(&self) -> &[TenantPlan] {
        &self.plans
    }

    /// The rate limit the policy last gave each tenant.
    pub fn pacing(&self) -> &[Pacing] {
        &self.pacing
    }

    /// Adds a tenant with its own protection domain and control QP.
    pub fn add_tenant(&mut self, name: &str, weight: u32) -> Result<TenantHandle, RnicError> {
        let pd = self.nic.alloc_pd()?;
        let pcq = if self.nic.cross_channel() == CrossChannel::InNic {
            Some(ControlQp::new(&mut self.nic, pd)?)
        } else {
            None
        };
        let (req_tx, req_rx) = bounded(self.cfg.request_queue);
        let (cpl_tx, cpl_rx) = bounded(self.cfg.completion_queue);
        let id = self.tenants.len() as u32;
        self.tenants.push(TenantState {
            name: name.to_string(),
            pd,
            req_rx,
            cpl_tx,
            overflow: VecDeque::new(),
            qps: Vec::new(),
            mrs: Vec::new(),
            pcq,
            weight: weight.max(1),
            rr: 0,
            tick: TickAccum::default(),
            lost_releases: 0,
            stalled_at: None,
            bucket: TokenBucket::new(),
        });
        self.plans.push(TenantPlan::PASSTHROUGH);
        self.pacing.push(Pacing::UNLIMITED);
        self.policy.on_tenant(&TenantInfo { tenant: id, qps: 0, weight: weight.max(1) });
        Ok(TenantHandle { id, name: name.to_string(), qps: 0, req_tx, cpl_rx })
    }

    fn tenant_mut(&mut self, t: u32) -> Result<&mut TenantState, RnicError> {
        self.tenants.get_mut(t as usize).ok_or(RnicError::InvalidArgument(format!("no tenant {t}")))
    }

    /// Registers a buffer for tenant `t`.
    pub fn reg_mr(&mut self, t: u32, len: usize) -> Result<Mr, RnicError> {
        let pd = self.tenant_mut(t)?.pd;
        let mr = self.nic.reg_mr(
            pd,
            len,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )?;
        self.tenant_mut(t)?.mrs.push(mr);
        Ok(mr)
    }

    /// Creates a data QP for tenant `t` in traffic class `tc`; returns its
    /// index within the tenant and its endpoint for the peer.
    pub fn create_qp(&mut self, t: u32, tc: u8) -> Result<(u32, QpEndpoint), RnicError> {
        self.tenant_mut(t)?;
        // The loop polls a QP's CQEs before it reuses their send-queue slots
        // (and RECVs likewise), so its shared CQs never hold more CQEs than
        // the QPs' queues: refuse a QP that would break that bound.
        let n = self.qps.len() as u64 + 1;
        if n * self.cfg.sq_depth as u64 > SEND_CQ_DEPTH as u64 || n * RQ_DEPTH as u64 > RECV_CQ_DEPTH as u64 {
            return Err(RnicError::InvalidArgument(format!(
                "{n} data QPs of {} send-queue slots would overrun the shared completion queues",
                self.cfg.sq_depth
            )));
        }
        let (qp, ep) = self.new_nic_qp(t, tc)?;
        let index = self.tenant_mut(t)?.qps.len() as u32;
        let dp_index = self.qps.len();
        self.tenant_mut(t)?.qps.push(dp_index);
        let mut q = DpQp::new(t, index, qp);
        q.traffic_class = tc;
        self.qps.push(q);
        let weight = self.tenants[t as usize].weight;
        self.policy.on_tenant(&TenantInfo { tenant: t, qps: index + 1, weight });
        Ok((index, ep))
    }

    /// Creates a data QP on the NIC for tenant `t`, in RESET.
    fn new_nic_qp(&mut self, t: u32, tc: u8) -> Result<(QpHandle, QpEndpoint), RnicError> {
        let pd = self.tenant_mut(t)?.pd;
        let mut attr = QpInitAttr::new(self.send_cq, self.recv_cq);
        attr.caps = QpCaps { max_send_wr: self.cfg.sq_depth, max_recv_wr: RQ_DEPTH, ..QpCaps::default() };
        attr.cross_channel = self.nic.cross_channel() == CrossChannel::InNic;
        attr.traffic_class = tc;
        let qp = self.nic.create_qp(pd, attr)?;
        Ok((qp.handle, connect::endpoint(&self.nic, qp.qp_num)))
    }

    /// Connects tenant `t`'s QP `index` to the peer's `remote`.
    pub fn connect_qp(&mut self, t: u32, index: u32, remote: QpEndpoint) -> Result<(), RnicError> {
        let qi =
            *self.tenant_mut(t)?.qps.get(index as usize).ok_or(RnicError::InvalidArgument(format!("no QP {index}")))?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        connect::bring_up(&mut self.nic, self.qps[qi].nic_qp, remote, access)
    }

    /// Name of tenant `t`.
    pub fn tenant_name(&self, t: u32) -> Option<&str> {
        self.tenants.get(t as usize).map(|x| x.name.as_str())
    }

    /// One iteration of the loop. Returns whether it did anything.
    pub fn round(&mut self) -> Result<bool, RnicError> {
        self.counters.rounds += 1;
        let now = self.nic.clock_ns();
        if self.sup.has_pending() {
            // At the round boundary, before the tick: a new policy ticks at once.
            self.apply_swaps(now);
        }
        let mut did = self.drain_requests(now);
        did |= self.flush_overflow();
        if now >= self.next_tick_ns {
            self.tick(now);
        }
        if self.cfg.watchdog_ns > 0 && now >= self.sup.next_watchdog_ns {
            self.watchdog(now);
        }
        self.manage_active_sets(now)?;
        did |= self.post_all(now)?;
        did |= self.poll_completions(now)?;
        if did {
            self.counters.busy_rounds += 1;
        }
        Ok(did)
    }

    fn deliver(&mut self, t: usize, c: Completion) {
        let ts = &mut self.tenants[t];
        ts.tick.completed += 1;
        ts.tick.bytes += c.byte_len as u64;
        ts.tick.lat_sum_ns += c.completed_ns.saturating_sub(c.posted_ns);
        self.counters.completions += 1;
        if !ts.overflow.is_empty() {
            ts.overflow.push_back(c);
            return;
        }
        match ts.cpl_tx.try_send(c) {
            Ok(()) => {}
            Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) => ts.overflow.push_back(c),
        }
    }

    fn flush_overflow(&mut self) -> bool {
        let mut did = false;
        for ts in &mut self.tenants {
            while let Some(c) = ts.overflow.pop_front() {
                if let Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) = ts.cpl_tx.try_send(c) {
                    ts.overflow.push_front(c);
                    break;
                }
                did = true;
            }
        }
        did
    }

    fn refuse(&mut self, t: usize, wr: &WorkRequest, status: WcStatus, now: u64) {
        self.counters.refused += 1;
        let kind = if wr.op == RequestOp::Recv { CompletionKind::Recv } else { CompletionKind::Send };
        let c = Completion {
            wr_id: wr.wr_id,
            qp: wr.qp,
            status,
            kind,
            byte_len: 0,
            imm: None,
            posted_ns: wr.posted_ns,
            completed_ns: now,
        };
        self.deliver(t, c);
    }

    fn drain_requests(&mut self, now: u64) -> bool {
        let mut did = false;
        for t in 0..self.tenants.len() {
            // Requests held in software count against the tenant's queue
            // too, and so do completions it has not taken: a tenant that
            // floods, or posts without polling, stays back-pressured at its
            // channel instead of growing the loop's memory.
            let mut held = self.held_requests(t);
            let unpolled = self.tenants[t].overflow.len();
            for _ in 0..self.cfg.max_requests_per_round {
                if held >= self.cfg.request_queue || unpolled >= self.cfg.request_queue {
                    break;
                }
                let Ok(wr) = self.tenants[t].req_rx.try_recv() else { break };
                did = true;
                self.counters.requests += 1;
                let ts = &self.tenants[t];
                let Some(&qi) = ts.qps.get(wr.qp as usize) else {
                    self.refuse(t, &wr, WcStatus::LocQpOpErr, now);
                    continue;
                };
                let owned = ts.mrs.iter().any(|m| m.lkey == wr.mr.lkey && m.addr == wr.mr.addr && m.len == wr.mr.len);
                if !owned || wr.offset.checked_add(wr.len as u64).is_none_or(|end| end > wr.mr.len as u64) {
                    self.refuse(t, &wr, WcStatus::LocProtErr, now);
                    continue;
                }
                if self.qps[qi].failed {
                    if wr.op == RequestOp::Recv {
                        self.refuse(t, &wr, WcStatus::WrFlushErr, now);
                    } else {
                        // Behind whatever the QP still has in flight.
                        self.qps[qi].dead.push_back(failed_completion(&wr, WcStatus::WrFlushErr, now));
                        self.flush_dead(qi);
                    }
                    continue;
                }
                if wr.op == RequestOp::Recv {
                    self.post_recv(qi, wr, now);
                    continue;
                }
                let tick = &mut self.tenants[t].tick;
                tick.ewma = if tick.ewma == 0.0 { wr.len as f64 } else { 0.5 * tick.ewma + 0.5 * wr.len as f64 };
                tick.max_msg = tick.max_msg.max(wr.len as u64);
                let q = &mut self.qps[qi];
                q.held.push_back(wr);
                held += 1;
                let depth = q.depth();
                let tick = &mut self.tenants[t].tick;
                tick.max_depth = tick.max_depth.max(depth);
            }
        }
        did
    }

    /// Requests tenant `t` has waiting in software (not yet posted).
    fn held_requests(&self, t: usize) -> usize {
        self.tenants[t].qps.iter().map(|&qi| self.qps[qi].held.len() + self.qps[qi].cursor.is_some() as usize).sum()
    }

    fn post_recv(&mut self, qi: usize, wr: WorkRequest, now: u64) {
        let q = &mut self.qps[qi];
        let wr_id = ((qi as u64) << WR_QP_SHIFT) | (q.next_recv_seq & WR_SEQ_MASK);
        let sge = [wr.mr.sge(wr.offset as usize, wr.len)];
        match self.nic.post_recv(q.nic_qp, &[RecvWr { wr_id, sgl: &sge }]) {
            Ok(()) => {
                q.next_recv_seq += 1;
                q.recvs.push_back(wr);
            }
            Err(e) => {
                let status = if matches!(e.error, RnicError::QueueFull { .. }) {
                    WcStatus::LocQpOpErr
                } else {
                    WcStatus::WrFlushErr
                };
                let t = q.tenant as usize;
                self.refuse(t, &wr, status, now);
            }
        }
    }

    /// Keeps each capped tenant's active QPs within its plan, rotating
    /// after the quantum with an in-NIC hand-off.
    fn manage_active_sets(&mut self, now: u64) -> Result<(), RnicError> {
        let mut qps = std::mem::take(&mut self.scratch.qps);
        let mut waiting = std::mem::take(&mut self.scratch.waiting);
        let r = (0..self.tenants.len()).try_for_each(|t| self.manage_tenant(t, now, &mut qps, &mut waiting));
        self.scratch.qps = qps;
        self.scratch.waiting = waiting;
        r
    }

    /// [`Dataplane::manage_active_sets`] for tenant `t`, with scratch
    /// buffers for its QPs and the waiting ones.
    fn manage_tenant(
        &mut self,
        t: usize,
        now: u64,
        qps: &mut Vec<usize>,
        waiting: &mut Vec<usize>,
    ) -> Result<(), RnicError> {
        let plan = self.plans[t];
        let cap = if plan.max_active_qps == 0 { usize::MAX } else { plan.max_active_qps as usize };
        qps.clear();
        qps.extend_from_slice(&self.tenants[t].qps);
        // A QP holds its slot while it has work in software or in the NIC.
        for &qi in qps.iter() {
            let q = &mut self.qps[qi];
            if q.active && !q.has_work() && q.outstanding == 0 {
                q.active = false;
            }
            handoff::end_drain(q);
        }
        let mut active = qps.iter().filter(|&&qi| handoff::holds_slot(&self.qps[qi])).count();
        // Over the cap (the plan shrank): stop feeding the extras; what
        // they already posted drains.
        for &qi in qps.iter().rev() {
            if active <= cap {
                break;
            }
            if self.qps[qi].active {
                self.qps[qi].active = false;
                active -= 1;
            }
        }
        let n = qps.len();
        let start = self.tenants[t].rr;
        waiting.clear();
        waiting.extend(
            (0..n)
                .map(|k| qps[(start + k) % n])
                // Only a drained QP can take a slot: a stream still in the NIC
                // would run beside the slot's owner.
                .filter(|&qi| !self.qps[qi].active && self.qps[qi].has_work() && self.qps[qi].outstanding == 0),
        );
        let mut waiting = waiting.iter().copied();
        while active < cap {
            let Some(qi) = waiting.next() else { break };
            self.activate(qi, now, None);
            active += 1;
        }
        if cap == usize::MAX {
            return Ok(());
        }
        for &qi in qps.iter() {
            let q = &self.qps[qi];
            if !q.active || !self.quantum_spent(q, &plan, now) {
                continue;
            }
            let Some(next) = waiting.next() else {
                // Nobody waits: the QP keeps the NIC for another quantum.
                let q = &mut self.qps[qi];
                q.active_since_ns = now;
                q.active_requests = 0;
                q.active_bytes = 0;
                continue;
            };
            let wait = match self.tenants[t].pcq.as_mut() {
                Some(pcq) => Some(pcq.plan_handoff(&mut self.nic)?),
                None => None,
            };
            self.counters.handoffs += 1;
            if handoff::give_up_slot(&mut self.qps[qi], wait.is_some()) {
                self.activate(next, now, wait);
            }
        }
        self.tenants[t].rr = (start + 1) % n.max(1);
        Ok(())
    }

    fn quantum_spent(&self, q: &DpQp, plan: &TenantPlan, now: u64) -> bool {
        quantum_hit(q, plan) || (plan.quantum_ns > 0 && now.saturating_sub(q.active_since_ns) >= plan.quantum_ns)
    }
}

/// The completion of a request that a failed QP never posted.
fn failed_completion(wr: &WorkRequest, status: WcStatus, now: u64) -> Completion {
    Completion {
        wr_id: wr.wr_id,
        qp: wr.qp,
        status,
        kind: CompletionKind::Send,
        byte_len: 0,
        imm: None,
        posted_ns: wr.posted_ns,
        completed_ns: now,
    }
}

/// What the policy sees of a request.
fn request_info(tenant: u32, wr: &WorkRequest, depth: u32) -> RequestInfo {
    RequestInfo {
        tenant,
        qp: wr.qp,
        len: wr.len as u64,
        op: match wr.op {
            RequestOp::Send => PolicyOp::Send,
            RequestOp::Read { .. } => PolicyOp::Read,
            _ => PolicyOp::Write,
        },
        depth,
    }
}

/// Whether a QP posted its request or byte quantum since it became active.
fn quantum_hit(q: &DpQp, plan: &TenantPlan) -> bool {
    (plan.quantum_requests > 0 && q.active_requests >= plan.quantum_requests)
        || (plan.quantum_bytes > 0 && q.active_bytes >= plan.quantum_bytes)
}

impl<R: Rnic> Dataplane<R> {
    fn activate(&mut self, qi: usize, now: u64, wait: Option<u64>) {
        let q = &mut self.qps[qi];
        q.active = true;
        q.active_since_ns = now;
        q.active_requests = 0;
        q.active_bytes = 0;
        q.pending_wait = wait;
    }

    fn post_all(&mut self, now: u64) -> Result<bool, RnicError> {
        let mut did = false;
        for qi in 0..self.qps.len() {
            let t = self.qps[qi].tenant as usize;
            let allowed = self.plans[t].max_active_qps == 0 || self.qps[qi].active;
            if self.qps[qi].failed {
                continue;
            }
            if self.qps[qi].pending_release
                || (allowed && (self.qps[qi].has_work() || self.qps[qi].pending_wait.is_some()))
            {
                did |= self.post_qp(qi, allowed, now)?;
            }
        }
        Ok(did)
    }

    fn post_qp(&mut self, qi: usize, allowed: bool, now: u64) -> Result<bool, RnicError> {
        let depth = self.cfg.sq_depth;
        let signal_every = (depth / 4).max(1);
        let zw_cq = self.zw_cq;
        let t = self.qps[qi].tenant as usize;
        let pcq_ops = self.tenants[t].pcq.as_ref().map(|p| (p.release(), p.cq));
        let plan = self.plans[t];
        let capped = plan.max_active_qps > 0;
        let mut specs = std::mem::take(&mut self.specs);
        specs.clear();
        let q = &mut self.qps[qi];
        let mut free = depth.saturating_sub(q.posted.len() as u32);
        // The release ends the QP's previous stream, so it goes first.
        if q.pending_release && free > 0 {
            if let Some((release, _)) = pcq_ops {
                specs.push(WqeSpec { opcode: release, sge: None, inline: false, signaled: false, meta: Meta::Release });
                q.since_signal += 1;
                free -= 1;
            }
            q.pending_release = false;
        }
        if let (Some(count), Some((_, pcq_cq))) = (q.pending_wait, pcq_ops) {
            if free == 0 {
                self.specs = specs;
                return self.post_specs(qi);
            }
            specs.push(WqeSpec {
                opcode: WrOpcode::Wait { cq: pcq_cq, count },
                sge: None,
                inline: false,
                signaled: false,
                meta: Meta::Hidden,
            });
            q.pending_wait = None;
            q.waiting_on = Some(count);
            q.since_signal += 1;
            free -= 1;
        }
        let mut room = free.saturating_sub(CTRL_RESERVE);
        while allowed && !self.qps[qi].failed {
            if !self.tenants[t].bucket.may_post(now) {
                self.counters.paced_holds += 1;
                break;
            }
            let q = &mut self.qps[qi];
            if q.cursor.is_none() {
                if capped && quantum_hit(q, &plan) {
                    break;
                }
                let Some(wr) = q.held.pop_front() else { break };
                let req = request_info(t as u32, &wr, q.depth() + 1);
                // The split plan is decided when the message starts, so it
                // reflects the policy's current view.
                let mut split = self.policy.on_request(&req, &self.plans[t]);
                // A chunk and its zero-weight WRs must fit an empty send
                // queue (beside a WAIT and the control reserve), or the QP
                // could never post again.
                let max_zw = depth.saturating_sub(CTRL_RESERVE + 2);
                split.zero_weight_per_chunk =
                    handoff::zero_weight_per_chunk(split.zero_weight_per_chunk.min(max_zw), pcq_ops.is_some());
                self.qps[qi].cursor = Some(Cursor { wr, plan: split, offset: 0 });
            }
            let q = &mut self.qps[qi];
            let Some(cur) = q.cursor.as_mut() else { break };
            let before = specs.len();
            match emit_chunk(cur, room, zw_cq, signal_every, &mut q.since_signal, &mut specs) {
                None => break,
                Some(done) => {
                    room -= (specs.len() - before) as u32;
                    let bytes = specs[before].sge.map_or(0, |g| g.length as u64);
                    self.tenants[t].bucket.take(bytes);
                    if done {
                        let len = cur.wr.len as u64;
                        q.cursor = None;
                        q.outstanding += 1;
                        q.active_requests += 1;
                        q.active_bytes += len;
                    }
                }
            }
        }
        self.specs = specs;
        self.post_specs(qi)
    }

    /// Posts the WQEs built in `self.specs` to QP `qi` as one post list.
    fn post_specs(&mut self, qi: usize) -> Result<bool, RnicError> {
        let mut specs = std::mem::take(&mut self.specs);
        let signal_every = (self.cfg.sq_depth / 4).max(1);
        let zw_cq = self.zw_cq;
        let t = self.qps[qi].tenant as usize;
        let q = &mut self.qps[qi];
        if specs.is_empty() {
            self.specs = specs;
            return Ok(false);
        }
        // Seal the list with a signal if the unsignaled tail grew long.
        if let Some(last) = specs.last_mut() {
            if q.since_signal >= signal_every {
                last.signaled = true;
                q.since_signal = 0;
            }
        }
        let base = q.next_seq;
        let nic_qp = q.nic_qp;
        let mut sges = std::mem::take(&mut self.scratch.sges);
        sges.clear();
        sges.extend(specs.iter().map(|s| [s.sge.unwrap_or(Sge { addr: 0, length: 0, lkey: 0 })]));
        // Inline payloads: the CPU copies the bytes out of the tenant's buffer.
        let mut inline: Vec<Vec<u8>> = Vec::new();
        for s in specs.iter().filter(|s| s.inline) {
            let Some(sge) = s.sge else { continue };
            let mut bytes = vec![0u8; sge.length as usize];
            if let Some(mr) = self.tenants[t].mrs.iter().find(|m| m.lkey == sge.lkey) {
                self.nic.read_mr(mr.handle, (sge.addr - mr.addr) as usize, &mut bytes)?;
            }
            inline.push(bytes);
        }
        let mut inline_iter = inline.iter();
        let mut wrs = recycle(std::mem::take(&mut self.scratch.wrs));
        wrs.extend(specs.iter().zip(&sges).enumerate().map(|(k, (s, sge))| SendWr {
            wr_id: ((qi as u64) << WR_QP_SHIFT) | ((base + k as u64) & WR_SEQ_MASK),
            opcode: s.opcode,
            payload: match (s.sge.is_some(), s.inline) {
                (true, true) => inline_iter.next().map_or(Payload::Sges(sge), |b| Payload::Inline(b)),
                (true, false) => Payload::Sges(sge),
                _ => Payload::None,
            },
            signaled: s.signaled,
        }));
        let result = self.nic.post_send(nic_qp, &wrs);
        let posted = match &result {
            Ok(()) => specs.len(),
            Err(e) => e.index,
        };
        wrs.clear();
        self.scratch.wrs = recycle(wrs);
        self.scratch.sges = sges;
        let q = &mut self.qps[qi];
        for (k, s) in specs.iter().take(posted).enumerate() {
            q.posted.push_back((base + k as u64, s.meta));
            if s.sge.is_some() {
                self.counters.data_wqes += 1;
            } else if matches!(s.opcode, WrOpcode::Wait { cq, count: 0 } if cq == zw_cq) {
                self.counters.zero_weight_wrs += 1;
            }
        }
        q.next_seq = base + posted as u64;
        self.counters.wqes_posted += posted as u64;
        self.counters.doorbells += 1;
        if result.is_err() {
            // The NIC refused part of the list (the QP is broken): the first
            // message it cut completes with a local QP error, every later one
            // with a flush error, after what was posted before them.
            let now = self.nic.clock_ns();
            let mut first = Some(WcStatus::LocQpOpErr);
            let q = &mut self.qps[qi];
            let lost = specs[posted..].iter().filter(|s| matches!(s.meta, Meta::Release)).count();
            self.tenants[t].lost_releases += lost as u32;
            for s in &specs[posted..] {
                if let Meta::App { wr_id, posted_ns, .. } = s.meta {
                    let status = first.take().unwrap_or(WcStatus::WrFlushErr);
                    q.outstanding = q.outstanding.saturating_sub(1);
                    q.dead.push_back(Completion {
                        wr_id,
                        qp: q.index,
                        status,
                        kind: CompletionKind::Send,
                        byte_len: 0,
                        imm: None,
                        posted_ns,
                        completed_ns: now,
                    });
                }
            }
            self.fail_qp(qi, Some(first.unwrap_or(WcStatus::WrFlushErr)));
        }
        self.specs = specs;
        Ok(true)
    }

    /// Fails QP `qi`: the message being posted completes with
    /// `cursor_status` (or the error its posted chunks met), everything
    /// held with a flush error; all of them after the messages already
    /// posted, which complete as the NIC flushes them.
    fn fail_qp(&mut self, qi: usize, cursor_status: Option<WcStatus>) {
        let now = self.nic.clock_ns();
        let q = &mut self.qps[qi];
        q.failed = true;
        // Releases still queued (or never posted) may never run: their
        // hand-offs may need rescuing.
        let releases = q.posted.iter().filter(|(_, m)| matches!(m, Meta::Release)).count() as u32;
        let lost = releases + q.pending_release as u32;
        q.pending_release = false;
        self.tenants[q.tenant as usize].lost_releases += lost;
        // A hidden chunk's error belongs to the first message whose last WQE
        // is still posted; if there is none, to the message being posted (its
        // first chunks failed while the rest was still in software).
        let app_posted = q.posted.iter().any(|(_, m)| matches!(m, Meta::App { .. }));
        let cursor_status = cursor_status.unwrap_or_else(|| {
            if app_posted {
                WcStatus::WrFlushErr
            } else {
                q.pending_error.take().unwrap_or(WcStatus::WrFlushErr)
            }
        });
        if let Some(c) = q.cursor.take() {
            q.dead.push_back(failed_completion(&c.wr, cursor_status, now));
        }
        while let Some(wr) = q.held.pop_front() {
            q.dead.push_back(failed_completion(&wr, WcStatus::WrFlushErr, now));
        }
        self.flush_dead(qi);
    }

    /// Delivers a failed QP's unposted requests' completions once every
    /// message it posted has completed (per-QP order).
    fn flush_dead(&mut self, qi: usize) {
        let q = &mut self.qps[qi];
        if q.outstanding > 0 || q.dead.is_empty() {
            return;
        }
        let t = q.tenant as usize;
        let dead = std::mem::take(&mut q.dead);
        for c in dead {
            self.counters.refused += 1;
            self.deliver(t, c);
        }
    }

    fn poll_completions(&mut self, now: u64) -> Result<bool, RnicError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let r = self.poll_shared(SharedCq::Send, &mut wcs, now).and_then(|sent| {
            let received = self.poll_shared(SharedCq::Recv, &mut wcs, now)?;
            Ok(sent | received)
        });
        self.wcs = wcs;
        r
    }

    /// Drains one of the shared CQs; an overrun fails what it held and
    /// replaces it ([`recovery`]). Returns whether anything completed.
    fn poll_shared(&mut self, which: SharedCq, wcs: &mut [Wc], now: u64) -> Result<bool, RnicError> {
        let mut did = false;
        loop {
            let cq = match which {
                SharedCq::Send => self.send_cq,
                SharedCq::Recv => self.recv_cq,
            };
            let n = match self.nic.poll_cq(cq, wcs) {
                Ok(n) => n,
                Err(RnicError::CqOverrun { .. }) => {
                    self.on_cq_overrun(which)?;
                    return Ok(true);
                }
                Err(e) => return Err(e),
            };
            for wc in &wcs[..n] {
                match which {
                    SharedCq::Send => self.on_send_wc(wc, now),
                    SharedCq::Recv => self.on_recv_wc(wc, now),
                }
            }
            did |= n > 0;
            if n < wcs.len() {
                return Ok(did);
            }
        }
    }

    fn on_send_wc(&mut self, wc: &Wc, now: u64) {
        let qi = (wc.wr_id >> WR_QP_SHIFT) as usize;
        let seq_low = wc.wr_id & WR_SEQ_MASK;
        let Some(q) = self.qps.get_mut(qi) else { return };
        let t = q.tenant as usize;
        let index = q.index;
        // `posted` holds consecutive sequence numbers from its front to
        // `next_seq`: a completion is ours if its number lies in that range.
        let Some(&(front, _)) = q.posted.front() else { return };
        if seq_low.wrapping_sub(front) & WR_SEQ_MASK >= q.next_seq - front {
            return;
        }
        let mut out = std::mem::take(&mut self.scratch.out);
        out.clear();
        let mut hidden = 0u64;
        while let Some((seq, meta)) = q.posted.pop_front() {
            let this = seq & WR_SEQ_MASK == seq_low;
            let status = if this { wc.status } else { WcStatus::Success };
            match meta {
                Meta::Hidden | Meta::Release => {
                    hidden += 1;
                    if !status.is_ok() && q.pending_error.is_none() {
                        q.pending_error = Some(status);
                    }
                }
                Meta::App { wr_id, len, posted_ns } => {
                    let status = q.pending_error.take().unwrap_or(status);
                    q.outstanding = q.outstanding.saturating_sub(1);
                    out.push(Completion {
                        wr_id,
                        qp: index,
                        status,
                        kind: CompletionKind::Send,
                        byte_len: if status.is_ok() { len } else { 0 },
                        imm: None,
                        posted_ns,
                        completed_ns: now,
                    });
                }
            }
            if this {
                break;
            }
        }
        let newly_failed = !wc.status.is_ok() && !q.failed;
        let failed = q.failed || newly_failed;
        self.counters.hidden_completions += hidden;
        if !out.is_empty() {
            q.progress_ns = now;
        }
        for c in out.drain(..) {
            self.deliver(t, c);
        }
        self.scratch.out = out;
        if newly_failed {
            self.fail_qp(qi, None);
        } else if failed {
            self.flush_dead(qi);
        }
    }

    fn on_recv_wc(&mut self, wc: &Wc, now: u64) {
        let qi = (wc.wr_id >> WR_QP_SHIFT) as usize;
        let Some(q) = self.qps.get_mut(qi) else { return };
        let Some(wr) = q.recvs.pop_front() else { return };
        let t = q.tenant as usize;
        let c = Completion {
            wr_id: wr.wr_id,
            qp: q.index,
            status: wc.status,
            kind: CompletionKind::Recv,
            byte_len: wc.byte_len,
            imm: wc.imm,
            posted_ns: wr.posted_ns,
            completed_ns: now,
        };
        self.deliver(t, c);
    }

    /// Releases hand-offs that a failed QP took with it. For a tenant that
    /// may have lost releases: if one of its healthy QPs has been blocked on
    /// a hand-off count the PCQ has not reached, with no hand-off completing
    /// for a whole tick, the loop releases one hand-off itself (per tick,
    /// at most as many as may have been lost). A slow but healthy stream can
    /// only be mistaken for a stall while such a loss is outstanding, and
    /// then costs one early hand-off, never a stranded QP.
    fn rescue_stalls(&mut self) {
        for t in 0..self.tenants.len() {
            if self.tenants[t].lost_releases == 0 {
                continue;
            }
            let ts = &mut self.tenants[t];
            let Some(pcq) = ts.pcq.as_mut() else { continue };
            let Ok(done) = pcq.completed(&mut self.nic) else { continue };
            let blocked = ts
                .qps
                .iter()
                .filter(|&&qi| !self.qps[qi].failed)
                .filter_map(|&qi| self.qps[qi].waiting_on)
                .any(|k| k > done);
            if !blocked {
                ts.stalled_at = None;
                continue;
            }
            if ts.stalled_at != Some(done) {
                ts.stalled_at = Some(done);
                continue;
            }
            if pcq.rescue(&mut self.nic, ts.pd, self.zw_cq).is_ok() {
                ts.lost_releases -= 1;
                ts.stalled_at = None;
                self.counters.rescued_handoffs += 1;
            }
        }
    }

    fn tick(&mut self, now: u64) {
        self.counters.ticks += 1;
        self.rescue_stalls();
        self.next_tick_ns = now + self.policy.tick_interval_ns();
        let stats: Vec<TenantStats> = self
            .tenants
            .iter()
            .enumerate()
            .map(|(i, ts)| {
                let backlogged = ts.qps.iter().filter(|&&qi| self.qps[qi].depth() > 0).count() as u32;
                let depth_now = ts.qps.iter().map(|&qi| self.qps[qi].depth()).max().unwrap_or(0);
                TenantStats {
                    tenant: i as u32,
                    qps: ts.qps.len() as u32,
                    backlogged_qps: backlogged,
                    max_depth: ts.tick.max_depth.max(depth_now),
                    ewma_msg_bytes: ts.tick.ewma,
                    max_msg_bytes: ts.tick.max_msg,
                    completed: ts.tick.completed,
                    bytes: ts.tick.bytes,
                    mean_latency_ns: ts.tick.lat_sum_ns.checked_div(ts.tick.completed).unwrap_or(0),
                    weight: ts.weight,
                }
            })
            .collect();
        let mut plans = std::mem::take(&mut self.plans);
        self.policy.on_tick(now, &stats, &mut plans);
        self.plans = plans;
        let mut pacing = std::mem::take(&mut self.pacing);
        self.policy.on_pacing(now, &mut pacing);
        for (ts, p) in self.tenants.iter_mut().zip(&pacing) {
            ts.bucket.set(*p, now);
        }
        self.pacing = pacing;
        for ts in &mut self.tenants {
            let ewma = ts.tick.ewma;
            ts.tick = TickAccum { ewma, ..TickAccum::default() };
        }
    }
}

impl<R: Rnic> crate::perftest::App for Dataplane<R> {
    fn poll(&mut self) -> Result<bool, crate::perftest::AppError> {
        Ok(self.round()?)
    }

    fn next_timer_ns(&self) -> Option<u64> {
        Some(Dataplane::next_timer_ns(self))
    }
}
