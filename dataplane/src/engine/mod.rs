//! The poll-mode dataplane loop.
//!
//! [`Dataplane`] stands between tenants and the RNIC. Each [`Dataplane::round`]:
//! 1. drains the tenants' request queues (bounded channels) into per-QP
//!    software queues, asking the policy for each request's split plan;
//! 2. keeps each tenant's active QP set within the policy's cap, rotating
//!    after the quantum with an in-NIC hand-off through the tenant's
//!    preemption control QP ([`control_qp`]), or a host hand-off on a NIC
//!    without in-NIC cross-channel (`handoff.rs`);
//! 3. posts each allowed QP's next WQEs as one post list (`split.rs`);
//! 4. polls the CQs, retires hidden WQEs and delivers each application
//!    message's completion exactly once, in per-QP order;
//! 5. on the policy's tick, hands it per-tenant statistics and applies the
//!    plans and rate limits it returns (`pacing.rs`: a tenant's data WQEs
//!    wait in software until its token bucket allows them).
//!
//! The loop runs over any [`Rnic`]; [`Dataplane::run_pinned`] spins it on
//! a core in real time.

mod active_set;
mod admission;
mod chan;
mod completion;
pub mod control_qp;
mod error;
mod fair_index;
mod handoff;
mod intake;
pub mod loop_cost;
pub mod loop_share;
mod operator;
mod pacing;
mod pinned;
mod pipeline;
mod post;
mod posted;
mod qp;
mod ready;
mod recovery;
mod removal;
mod rendezvous;
mod signaling;
mod split;
mod supervise;
mod tail;
pub mod tenant;
mod tick;
mod whole_lane;

use std::collections::VecDeque;

use crossbeam_channel::{Receiver, Sender};
use perf_policy_sdk::{Pacing, RequestInfo, RequestOp as PolicyOp, TenantClass, TenantInfo, TenantPlan, TenantStats};

use crate::policy::PolicyHost;
use crate::rnic::*;
use chan::{Arrivals, BoundedRx, BoundedTx};
use control_qp::ControlQp;
pub use error::EngineError;
pub use loop_cost::{LoopCost, PolicyCost, RoundWork};
pub use operator::{DataplaneSnapshot, OperatorError, OperatorHandle, TenantSnapshot};
use pacing::TokenBucket;
pub use pinned::PinReport;
use qp::{Cursor, DpQp, Meta, WindowCharge};
use ready::{IndexSet, Ready};
use recovery::SharedCq;
pub use split::GROUP_BYTES;
use split::{emit_chunk, WqeSink, WqeSpec};
pub use supervise::{SwapHandle, SwapOutcome, SwapRecord, SwapTicket};
pub use tenant::{Completion, CompletionKind, PostRefused, RequestOp, TenantHandle, WorkRequest};

/// Settings of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataplaneConfig {
    /// Send-queue depth of each data QP.
    pub sq_depth: u32,
    /// Receive-queue depth of each data QP.
    pub rq_depth: u32,
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
    /// Entries of each of the loop's two shared CQs (every data QP's send
    /// completions go to one, its receive completions to the other). When
    /// the QPs' queues together hold more than this, the QPs share it under
    /// a budget (see [`Dataplane::create_qp`]).
    pub cq_depth: u32,
    /// What the loop's work costs in virtual time ([`loop_cost`]):
    /// [`LoopCost::ZERO`] by default (a free loop, and a real-time loop
    /// takes its real time whatever this says); `perf-runner` runs with
    /// [`LoopCost::MEASURED`] unless told otherwise.
    pub loop_cost: LoopCost,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            sq_depth: 2048,
            rq_depth: 1024,
            request_queue: 8192,
            completion_queue: 8192,
            max_requests_per_round: 512,
            watchdog_ns: 1_000_000_000,
            cq_depth: SHARED_CQ_DEPTH,
            loop_cost: LoopCost::ZERO,
        }
    }
}

impl DataplaneConfig {
    /// The default settings with queue depths that let `qps` data QPs
    /// fit the loop's completion queues without sharing them under a
    /// budget: each queue depth is the default's, or the largest power of
    /// two that fits (at least 16), so a run with thousands of QPs gets
    /// shallower queues; as on a real NIC, a QP's rings cost memory per
    /// slot.
    pub fn for_qps(qps: usize) -> Self {
        let d = Self::default();
        let fit = |default: u32, cq: u32| {
            let most = (cq as u64 / qps.max(1) as u64).max(16);
            if most >= default as u64 {
                default
            } else {
                1u32 << (63 - most.leading_zeros())
            }
        };
        DataplaneConfig { sq_depth: fit(d.sq_depth, d.cq_depth), rq_depth: fit(d.rq_depth, d.cq_depth), ..d }
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
    /// Data WQEs that carry part of a message (a sub-request of a split
    /// message, a rendezvous step, a length record), not a whole one.
    pub chunks: u64,
    /// WQEs posted with their payload inline (copied into the WQE by the
    /// loop's CPU).
    pub inline_wqes: u64,
    /// Times fair admission held data back: once per direction and round
    /// in which the shared in-flight budget (the plans' `window_kib` /
    /// `read_window_kib`) was full with a tenant waiting, and each time the
    /// requester's side refused a READ room.
    pub window_holds: u64,
    /// Times fair admission visited a tenant and admitted nothing (it
    /// found no room, its QP could not post, its deficit was spent, or its
    /// data had gone): the visits a round makes beside those that admit.
    pub admit_idle_visits: u64,
    /// The NIC pipeline's delay fair admission measured, ns, for WRITE /
    /// SEND data and for READs (0: not measured): its budget never falls
    /// below the link's rate times it (`engine/pipeline.rs`).
    pub pipeline_delay_ns: [u64; 2],
    /// Times a QP found no room for its WQEs in the shared send CQ's
    /// budget (only when the QPs' send queues together oversubscribe it).
    pub cq_budget_holds: u64,
    /// Zero-weight WRs posted.
    pub zero_weight_wrs: u64,
    /// SENDs moved by rendezvous with the peer's dataplane
    /// ([`crate::rendezvous`]).
    pub rendezvous_sends: u64,
    /// Large SENDs that waited for their RECV's advertisement in vain and
    /// went whole.
    pub rendezvous_timeouts: u64,
    /// Post lists (doorbells).
    pub doorbells: u64,
    /// CQEs polled from the shared send and receive CQs.
    pub cqes_polled: u64,
    /// Hidden completions drained (never shown to tenants).
    pub hidden_completions: u64,
    /// Signaled zero-weight WRs posted to cover a windowed QP's unsignaled
    /// bytes when nothing else would (`admission.rs`).
    pub cover_signals: u64,
    /// Application completions delivered.
    pub completions: u64,
    /// In-NIC hand-offs planned through control QPs.
    pub handoffs: u64,
    /// Hand-offs released by the loop because the QP that was to release
    /// them failed first.
    pub rescued_handoffs: u64,
    /// Policy ticks.
    pub ticks: u64,
    /// Ticks put off past the policy's interval because the last one
    /// took more than 5% of the loop's time at that interval
    /// (`engine/tick.rs`).
    pub ticks_put_off: u64,
    /// Times a QP with work to post waited for the next round because its
    /// tenant had spent its share of the loop's time in this one
    /// ([`loop_share`]; only when the loop is charged).
    pub loop_holds: u64,
    /// Arrival steps: requests announced while the loop was busy, served
    /// after the WQE or CQE in progress rather than at the round's end
    /// ([`loop_cost`]; only when the loop is charged).
    pub arrival_steps: u64,
    /// Times a QP with work to post was held back by its tenant's pacing
    /// (token bucket in debt, or paused).
    pub paced_holds: u64,
    /// Overruns of a shared CQ (a NIC fault: every data QP failed, the CQ
    /// was recreated).
    pub cq_overruns: u64,
    /// Wall time spent in rounds that did work or called the policy, ns
    /// (measured only when the loop runs on its pinned thread,
    /// [`Dataplane::run_pinned`]; 0 in virtual time).
    pub busy_ns: u64,
    /// Wall time spent in the policy's hooks (`on_request`, `on_tick`,
    /// `on_pacing`), ns; measured like `busy_ns`, and part of it.
    pub policy_ns: u64,
}

struct TenantState {
    name: String,
    pd: PdHandle,
    req_rx: BoundedRx<WorkRequest>,
    cpl_tx: BoundedTx<Completion>,
    /// Completions waiting to go to the tenant: the round's, delivered
    /// in one batch at its end, and those its full queue had no room for.
    overflow: VecDeque<Completion>,
    qps: Vec<usize>,
    mrs: Vec<Mr>,
    pcq: Option<ControlQp>,
    weight: u32,
    rr: usize,
    /// The manage round `rr` is up to date for (it advances once per
    /// round while the tenant is capped; see [`Dataplane::settle_rr`]).
    rr_round: u64,
    /// The tenant's live timers, by [`TimerKind`] (`u64::MAX`: none).
    timer_at: [u64; 2],
    tick: TickAccum,
    /// Releases that failed QPs may have taken with them (see
    /// [`Dataplane::rescue_stalls`]).
    lost_releases: u32,
    /// The PCQ's completed count when a stall was first seen.
    stalled_at: Option<u64>,
    /// The tenant's rate limit (the policy's [`Pacing`]).
    bucket: TokenBucket,
    /// Paused by the operator ([`Dataplane::set_paused`]).
    paused: bool,
    /// Completions delivered to it so far.
    delivered: u64,
    /// Bytes charged against its in-flight windows (WRITE / SEND, READ):
    /// data WQEs posted and not yet retired.
    inflight: [u64; 2],
    /// Fair admission, per direction (WRITE / SEND, READ): bytes it may
    /// still admit (deficit round robin), and the QP of its own to admit
    /// from next.
    deficit: [i64; 2],
    next_qp: [usize; 2],
    /// Fair admission, per direction: the bytes admitted per unit of
    /// weight (`admission.rs`), at most one budget behind the lead.
    admitted_per_weight: [f64; 2],
    /// The last of fair admission's walks that served it behind the lead.
    behind_walk: u64,
    /// How many of its QPs hold WQEs posted to the NIC (a non-empty
    /// [`DpQp::posted`]): kept where a QP's first WQE is posted and where
    /// its last one retires, so admission's QP cap needs no walk.
    qps_in_nic: usize,
    /// The loop's time it may still spend in this round, ps, and the round
    /// it was topped up in (`loop_share.rs`).
    loop_credit: i64,
    loop_round: u64,
    /// The last round in which the loop visited the tenant: posted for it,
    /// or considered it in fair admission. An arrival step serves only
    /// tenants not visited in the round in progress.
    visit_round: u64,
    /// The QP its credit last ran out at, where its next round's walk
    /// starts; and this round's start, fixed at its first visit in
    /// `post_round`.
    post_resume: usize,
    post_start: usize,
    post_round: u64,
    /// Removed (`removal.rs`): an empty slot that `add_tenant` reuses.
    removed: bool,
}

impl TenantState {
    /// Gives back what retired WQEs held of the windows, and of `windowed`
    /// (the windowed tenants' total) if the tenant is windowed.
    fn release_window(&mut self, released: [u64; 2], mut windowed: Option<&mut [u64; 2]>) {
        for (k, r) in released.into_iter().enumerate() {
            let freed = self.inflight[k].min(r);
            self.inflight[k] -= freed;
            if let Some(w) = windowed.as_deref_mut() {
                w[k] = w[k].saturating_sub(freed);
            }
        }
    }

    /// Charges a data WQE against the windows, and against `windowed` (the
    /// windowed tenants' total) if the tenant is windowed.
    fn charge_window(&mut self, c: WindowCharge, mut windowed: Option<&mut [u64; 2]>) {
        for (k, &b) in c.held.iter().enumerate() {
            self.inflight[k] += b as u64;
            if let Some(w) = windowed.as_deref_mut() {
                w[k] += b as u64;
            }
        }
    }
}

impl<R: Rnic> Dataplane<R> {
    /// After the plans changed: whether any is windowed, fair admission's
    /// budget and what the windowed tenants hold in flight.
    fn plans_changed(&mut self) {
        self.windowed = self.plans.iter().any(|p| p.windowed());
        self.window_budget = [0; 2];
        self.windowed_inflight = [0; 2];
        for (p, ts) in self.plans.iter().zip(&self.tenants).filter(|(p, _)| p.windowed()) {
            self.window_budget[0] = self.window_budget[0].max(p.window_kib as u64 * 1024);
            self.window_budget[1] = self.window_budget[1].max(p.read_window_kib as u64 * 1024);
            self.windowed_inflight[0] += ts.inflight[0];
            self.windowed_inflight[1] += ts.inflight[1];
        }
    }
}

#[derive(Default, Clone, Copy)]
struct TickAccum {
    max_depth: u32,
    ewma: f64,
    max_msg: u64,
    completed: u64,
    bytes: u64,
    lat_sum_ns: u64,
    tail: tail::TailHist,
}

impl TickAccum {
    /// Clears the tick's figures for the next tick, keeping the message
    /// size average (a tenant's size outlives a tick). The histogram is a
    /// kilobyte: it clears only the buckets it counted.
    fn restart(&mut self) {
        let TickAccum { max_depth, ewma: _, max_msg, completed, bytes, lat_sum_ns, tail } = self;
        (*max_depth, *max_msg, *completed, *bytes, *lat_sum_ns) = (0, 0, 0, 0, 0);
        tail.clear();
    }
}

const WR_QP_SHIFT: u32 = 40;
const WR_SEQ_MASK: u64 = (1 << WR_QP_SHIFT) - 1;
/// Send-queue slots kept free for control WQEs (WAIT, SEND_ENABLE).
const CTRL_RESERVE: u32 = 4;
/// Default depth of the data QPs' shared send and receive CQs.
const SHARED_CQ_DEPTH: u32 = 1 << 20;

/// The dataplane over one RNIC.
pub struct Dataplane<R: Rnic> {
    nic: R,
    cfg: DataplaneConfig,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    zw_cq: CqHandle,
    tenants: Vec<TenantState>,
    qps: Vec<DpQp>,
    /// Slots of `qps` that removed tenants left (`removal.rs`), for
    /// `create_qp` to reuse.
    free_qps: Vec<usize>,
    policy: PolicyHost,
    plans: Vec<TenantPlan>,
    /// Some plan has an in-flight window: those tenants' data goes through
    /// fair admission (`admission.rs`).
    windowed: bool,
    /// The tenant fair admission serves first in the next round, per
    /// direction (WRITE / SEND, READ).
    admit_next: [usize; 2],
    /// Fair admission's index of the tenants with data to admit
    /// ([`fair_index`]).
    fair: fair_index::FairIndex,
    /// The last round whose fair admission ran (not an arrival step's).
    admit_round: u64,
    /// Fair admission's walks that served tenants behind the lead so far
    /// (`TenantState::behind_walk`).
    admit_walks: u64,
    /// Fair admission's budget per direction: the largest window among
    /// the windowed plans (kept by [`Dataplane::plans_changed`]).
    window_budget: [u64; 2],
    /// Bytes the windowed tenants hold in flight, per direction.
    windowed_inflight: [u64; 2],
    /// The NIC pipeline's measured delay: fair admission's budget never
    /// falls below its bandwidth-delay product ([`pipeline`]).
    pipeline: pipeline::Pipeline,
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
    /// Requests from [`OperatorHandle`]s.
    operator: Option<(Sender<operator::Command>, Receiver<operator::Command>)>,
    /// Whether the loop measures its wall time (`busy_ns`, `policy_ns`).
    timed: bool,
    /// Who a round visits ([`ready`]).
    ready: Ready,
    /// Tenants' announcements that their request channel stopped being
    /// empty (shared with each tenant's channel).
    arrivals: Arrivals,
    /// During an arrival step: the tenants it posts for, sorted.
    step_only: Option<Vec<u32>>,
    /// Rounds of active-set management run so far.
    manage_round: u64,
    /// Visit every tenant and QP every round (the walk before ready sets).
    exhaustive: bool,
    /// Entries of the shared send and receive CQs that posted WQEs and
    /// RECVs may still fill (`[send, recv]`): the shared-CQ budget.
    cq_used: [u64; 2],
    /// QPs that found no room in the shared send CQ's budget.
    cq_waiters: Vec<usize>,
    /// Tenants whose token bucket has a rate (may hold a timer).
    rated: IndexSet,
    /// The plans and rate limits before the policy's tick (reused).
    before: (Vec<TenantPlan>, Vec<Pacing>),
    /// The loop's busy time on the virtual clock ([`loop_cost`]).
    clock: loop_cost::LoopClock,
    /// Loop time charged to the post list being built ([`loop_share`]).
    precharged_ps: u64,
    /// What the port's link moves per ns, bytes (fair admission's budget
    /// grows by what it moves during one of the loop's rounds).
    link_bytes_per_ns: f64,
    /// One turn of the NIC's send scheduler in bytes of the link's time:
    /// the least fair admission charges a data WQE (`WindowCharge::data`).
    wqe_turn_bytes: u32,
    /// Window-charged bytes a QP may post before a chunk of its is
    /// signaled, and the most all QPs together may hold uncovered by a
    /// signal (`signaling.rs`).
    signal_bytes: u64,
    uncovered_cap: u64,
    /// Window-charged bytes posted after their QP's last signaled WQE, all
    /// QPs together.
    uncovered_bytes: u64,
    /// QPs parked until their SEND's RECV is advertised, and when to look
    /// again (`rendezvous.rs`).
    descriptor_waiters: Vec<usize>,
    descriptor_poll_ns: u64,
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
    /// The tenants fair admission may let post with its budget full.
    admit: Vec<usize>,
    /// The tenants of an arrival step fair admission serves ahead of its
    /// round robin, with their bytes admitted per unit of weight
    /// (`admission.rs`).
    behind: Vec<(f64, usize)>,
    /// Tenant ids announced by their request channels.
    arrived: Vec<u32>,
    /// Requests taken from a tenant's channel in one batch.
    batch: VecDeque<WorkRequest>,
    /// The inline payloads of a post list, end to end.
    inline: Vec<u8>,
    /// Where each inline payload in `inline` ends.
    inline_ends: Vec<usize>,
    /// The statistics a tick hands to the policy.
    stats: Vec<TenantStats>,
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
        let charged = !cfg.loop_cost.is_zero();
        let send_cq = nic.create_cq(CqAttr { depth: cfg.cq_depth, ignore_overrun: false })?;
        let recv_cq = nic.create_cq(CqAttr { depth: cfg.cq_depth, ignore_overrun: false })?;
        let zw_cq = nic.create_cq(CqAttr { depth: 1, ignore_overrun: true })?;
        let link_bytes_per_ns = nic.port_info().link_gbps as f64 / 8.0;
        Ok(Dataplane {
            link_bytes_per_ns,
            wqe_turn_bytes: (qp::NIC_WQE_TURN_NS * link_bytes_per_ns).round() as u32,
            signal_bytes: 0,
            uncovered_cap: 0,
            uncovered_bytes: 0,
            descriptor_waiters: Vec::new(),
            descriptor_poll_ns: u64::MAX,
            nic,
            cfg,
            send_cq,
            recv_cq,
            zw_cq,
            tenants: Vec::new(),
            qps: Vec::new(),
            free_qps: Vec::new(),
            policy,
            plans: Vec::new(),
            windowed: false,
            admit_next: [0; 2],
            fair: fair_index::FairIndex::default(),
            admit_walks: 0,
            admit_round: 0,
            window_budget: [0; 2],
            windowed_inflight: [0; 2],
            pipeline: pipeline::Pipeline::default(),
            pacing: Vec::new(),
            next_tick_ns: 0,
            wcs: vec![Wc::EMPTY; 256],
            specs: Vec::with_capacity(1024),
            scratch: Scratch::default(),
            counters: DataplaneCounters::default(),
            retired_cqs: Vec::new(),
            sup: supervise::Supervisor::default(),
            operator: None,
            timed: false,
            ready: Ready::default(),
            arrivals: Arrivals::default(),
            step_only: None,
            manage_round: 0,
            exhaustive: false,
            cq_used: [0; 2],
            cq_waiters: Vec::new(),
            rated: IndexSet::default(),
            before: (Vec::new(), Vec::new()),
            clock: loop_cost::LoopClock { charged, ..Default::default() },
            precharged_ps: 0,
        })
    }

    /// The NIC, read-only (its clock, device and port attributes): what
    /// the dataplane posts and polls is its own; a tenant's memory is
    /// reached through the tenant's side of the NIC, not through the loop.
    pub fn nic(&self) -> &R {
        &self.nic
    }

    /// Counters so far.
    pub fn counters(&self) -> DataplaneCounters {
        DataplaneCounters { pipeline_delay_ns: self.pipeline.delay_ns().map(|d| d.unwrap_or(0)), ..self.counters }
    }

    /// When the loop next has timed work to do (the policy tick, which
    /// also rescues stalled hand-offs, or the moment a paced tenant's
    /// token bucket allows its next data WQE), in ns of the NIC's clock. A
    /// virtual-time driver with no NIC event before then should still run
    /// a round at that time. A bucket whose debt is paid by now is not a
    /// timer: its tenant has nothing waiting (a bucket is only refilled
    /// when its tenant posts), and a past time would have such a driver
    /// step one nanosecond at a time.
    pub fn next_timer_ns(&self) -> u64 {
        let now = self.nic.clock_ns();
        let mut at = self.next_tick_ns.min(self.sup.next_timer_ns(&self.cfg)).min(self.descriptor_poll_ns);
        let mut i = 0;
        while let Some(t) = self.rated.next_from(i) {
            i = t + 1;
            if let Some(ready) = self.tenants[t].bucket.ready_at().filter(|&r| r > now) {
                at = at.min(ready);
            }
        }
        at
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
    pub fn add_tenant(&mut self, name: &str, weight: u32) -> Result<TenantHandle, EngineError> {
        let pd = self.nic.alloc_pd()?;
        let pcq = if self.nic.cross_channel() == CrossChannel::InNic {
            Some(ControlQp::new(&mut self.nic, pd)?)
        } else {
            None
        };
        // A removed tenant's slot is taken first (its id comes back).
        let reuse = self.tenants.iter().position(|t| t.removed);
        let id = reuse.unwrap_or(self.tenants.len()) as u32;
        let (req_tx, req_rx) = chan::bounded(self.cfg.request_queue, Some((self.arrivals.clone(), id)));
        let (cpl_tx, cpl_rx) = chan::bounded(self.cfg.completion_queue, None);
        let state = TenantState {
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
            rr_round: self.manage_round,
            timer_at: [u64::MAX; 2],
            tick: TickAccum::default(),
            lost_releases: 0,
            stalled_at: None,
            bucket: TokenBucket::new(),
            paused: false,
            delivered: 0,
            inflight: [0; 2],
            deficit: [0; 2],
            admitted_per_weight: [0.0; 2],
            behind_walk: 0,
            next_qp: [0; 2],
            qps_in_nic: 0,
            loop_credit: 0,
            loop_round: u64::MAX,
            visit_round: u64::MAX,
            post_resume: 0,
            post_start: 0,
            post_round: u64::MAX,
            removed: false,
        };
        match reuse {
            Some(i) => {
                self.tenants[i] = state;
                self.plans[i] = TenantPlan::PASSTHROUGH;
                self.pacing[i] = Pacing::UNLIMITED;
                self.plans_changed();
            }
            None => {
                self.tenants.push(state);
                self.plans.push(TenantPlan::PASSTHROUGH);
                self.pacing.push(Pacing::UNLIMITED);
            }
        }
        self.policy.on_tenant(&TenantInfo { tenant: id, qps: 0, weight: weight.max(1) });
        Ok(TenantHandle { id, name: name.to_string(), qps: 0, req_tx, cpl_rx })
    }

    fn tenant_mut(&mut self, t: u32) -> Result<&mut TenantState, EngineError> {
        self.tenants.get_mut(t as usize).ok_or(EngineError::NoTenant(t))
    }

    /// A tenant that exists and was not removed.
    fn live_tenant_mut(&mut self, t: u32) -> Result<&mut TenantState, EngineError> {
        self.tenant_mut(t)?;
        self.tenants.get_mut(t as usize).filter(|ts| !ts.removed).ok_or(EngineError::TenantRemoved(t))
    }

    /// Registers a buffer for tenant `t`.
    pub fn reg_mr(&mut self, t: u32, len: usize) -> Result<Mr, EngineError> {
        let pd = self.live_tenant_mut(t)?.pd;
        let mr = self.nic.reg_mr(
            pd,
            len,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )?;
        self.tenant_mut(t)?.mrs.push(mr);
        Ok(mr)
    }

    /// Registers a region for tenant `t` that `register` makes on the NIC
    /// in the tenant's protection domain (for memory the NIC's own
    /// [`Rnic::reg_mr`] does not allocate, such as
    /// `SimRnic::reg_mr_external`); the tenant's requests may then use it.
    pub fn reg_mr_with(
        &mut self,
        t: u32,
        register: impl FnOnce(&mut R, PdHandle) -> Result<Mr, RnicError>,
    ) -> Result<Mr, EngineError> {
        let pd = self.live_tenant_mut(t)?.pd;
        let mr = register(&mut self.nic, pd)?;
        self.tenant_mut(t)?.mrs.push(mr);
        Ok(mr)
    }

    /// Deregisters tenant `t`'s region `mr`: the tenant's requests can no
    /// longer name it. The caller makes sure nothing in flight uses it.
    pub fn dereg_mr(&mut self, t: u32, mr: Mr) -> Result<(), EngineError> {
        let ts = self.tenant_mut(t)?;
        let at = ts.mrs.iter().position(|m| *m == mr).ok_or(EngineError::NoRegion { tenant: t, lkey: mr.lkey })?;
        ts.mrs.swap_remove(at);
        Ok(self.nic.dereg_mr(mr.handle)?)
    }

    /// Creates a data QP for tenant `t` in traffic class `tc`; returns its
    /// index within the tenant and its endpoint for the peer.
    pub fn create_qp(&mut self, t: u32, tc: u8) -> Result<(u32, QpEndpoint), EngineError> {
        self.live_tenant_mut(t)?;
        // The loop polls a QP's CQEs before it reuses their send-queue
        // slots (and RECVs likewise). When the QPs' queues together hold
        // more than the shared CQs, the QPs share them under a budget
        // (`ready.rs`, `send_cq_budget`): the WQEs and RECVs posted and not
        // yet polled never exceed the CQs' entries, and control WQEs keep a
        // reserve of `CTRL_RESERVE` entries per QP. A QP whose queue alone,
        // or whose reserve, would not fit is refused.
        let n = self.qp_count() as u64 + 1;
        let cq = self.cfg.cq_depth as u64;
        if self.cfg.sq_depth as u64 + n * CTRL_RESERVE as u64 > cq || self.cfg.rq_depth as u64 > cq {
            return Err(EngineError::QueuesDoNotFit {
                qps: n,
                sq_depth: self.cfg.sq_depth,
                rq_depth: self.cfg.rq_depth,
                cq_depth: self.cfg.cq_depth,
                reserve: CTRL_RESERVE,
            });
        }
        let (qp, ep) = self.new_nic_qp(t, tc)?;
        // The rotation pointer counts QPs: bring it up to date first.
        self.settle_rr(t as usize);
        let index = self.tenant_mut(t)?.qps.len() as u32;
        let mut q = DpQp::new(t, index, qp);
        q.traffic_class = tc;
        let dp_index = match self.free_qps.pop() {
            Some(qi) => {
                // Sequence numbers go on (as in `recover_qp`), so nothing of
                // the slot's old QP can be mistaken for the new one's.
                q.next_seq = self.qps[qi].next_seq;
                q.next_recv_seq = self.qps[qi].next_recv_seq;
                self.qps[qi] = q;
                qi
            }
            None => {
                self.qps.push(q);
                self.qps.len() - 1
            }
        };
        self.tenant_mut(t)?.qps.push(dp_index);
        let weight = self.tenants[t as usize].weight;
        self.policy.on_tenant(&TenantInfo { tenant: t, qps: index + 1, weight });
        Ok((index, ep))
    }

    /// Creates a data QP on the NIC for tenant `t`, in RESET.
    fn new_nic_qp(&mut self, t: u32, tc: u8) -> Result<(QpHandle, QpEndpoint), EngineError> {
        let pd = self.live_tenant_mut(t)?.pd;
        let mut attr = QpInitAttr::new(self.send_cq, self.recv_cq);
        attr.caps = QpCaps { max_send_wr: self.cfg.sq_depth, max_recv_wr: self.cfg.rq_depth, ..QpCaps::default() };
        attr.cross_channel = self.nic.cross_channel() == CrossChannel::InNic;
        attr.traffic_class = tc;
        let qp = self.nic.create_qp(pd, attr)?;
        Ok((qp.handle, connect::endpoint(&self.nic, qp.qp_num)))
    }

    /// Connects tenant `t`'s QP `index` to the peer's `remote`.
    pub fn connect_qp(&mut self, t: u32, index: u32, remote: QpEndpoint) -> Result<(), EngineError> {
        let qi = *self.tenant_mut(t)?.qps.get(index as usize).ok_or(EngineError::NoQp { tenant: t, index })?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        Ok(connect::bring_up(&mut self.nic, self.qps[qi].nic_qp, remote, access)?)
    }

    /// Name of tenant `t`.
    pub fn tenant_name(&self, t: u32) -> Option<&str> {
        self.tenants.get(t as usize).map(|x| x.name.as_str())
    }

    /// One iteration of the loop. Returns whether it did anything.
    pub fn round(&mut self) -> Result<bool, RnicError> {
        self.counters.rounds += 1;
        let now = self.nic.clock_ns();
        self.collect_ready(now);
        if self.sup.has_pending() {
            // At the round boundary, before the tick: a new policy ticks at once.
            self.apply_swaps(now);
        }
        if self.has_operator_commands() {
            self.serve_operator();
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
        // A charged round takes time: it polls first, so that what
        // completed during the last round is refilled in this one (fair
        // admission's budget then covers one round of the loop, not two).
        // A free round takes none, and keeps the order the free-loop
        // results were measured with.
        let poll_first = self.loop_shared();
        if poll_first {
            did |= self.poll_completions(now)?;
        }
        did |= self.post_all(now)?;
        if !poll_first {
            did |= self.poll_completions(now)?;
        }
        // The round's completions go to their tenants in one batch each.
        did |= self.flush_overflow();
        if did {
            self.counters.busy_rounds += 1;
        }
        Ok(did)
    }
}

impl<R: Rnic> Dataplane<R> {
    /// An arrival step inside a charged round (`loop_cost.rs`): the
    /// requests announced since the round began are taken in and posted,
    /// each tenant within what is left of its share of the round
    /// (`loop_share.rs`).
    pub(super) fn arrival_step(&mut self, now: u64) -> Result<bool, RnicError> {
        self.collect_arrivals();
        let mut only = std::mem::take(&mut self.scratch.arrived);
        only.retain(|&t| self.unvisited(t as usize));
        only.sort_unstable();
        self.step_only = Some(only);
        let r = self.step_work(now);
        self.scratch.arrived = self.step_only.take().unwrap_or_default();
        r
    }

    /// Runs an arrival step now, as a charged loop does after a WQE or CQE
    /// when requests were announced meanwhile
    /// (`loop_cost.rs`): takes the announced requests in and posts them
    /// for the tenants the round in progress has not visited. Charges
    /// nothing; `perf-runner calibrate-loop` times it. Returns whether it
    /// did anything.
    pub fn step_arrivals(&mut self) -> Result<bool, RnicError> {
        let now = self.nic.clock_ns();
        self.arrival_step(now)
    }

    fn step_work(&mut self, now: u64) -> Result<bool, RnicError> {
        let mut did = self.drain_requests(now);
        self.manage_active_sets(now)?;
        did |= self.post_all(now)?;
        did |= self.flush_overflow();
        Ok(did)
    }

    /// Whether the round in progress has not visited tenant `t` yet
    /// (neither posted for it nor admitted its data): its turn is still to
    /// come.
    /// A tenant with data that fair admission held back counts as
    /// visited once the round's admission has run: its turn came and
    /// found no room (the index, not a visit, says so).
    pub(super) fn unvisited(&self, t: usize) -> bool {
        let rounds = self.counters.rounds;
        self.tenants.get(t).is_some_and(|ts| ts.visit_round != rounds)
            && !(self.admit_round == rounds && (self.fair.member(t, 0) || self.fair.member(t, 1)))
    }

    /// Whether tenant `t` may post in this round or step (an arrival step
    /// posts only for the announced tenants the round had not visited).
    pub(super) fn in_step(&self, t: usize) -> bool {
        self.step_only.as_ref().is_none_or(|only| only.binary_search(&(t as u32)).is_ok())
    }
}

/// The dataplane in a virtual-time run: each poll is a round, charged to
/// the loop's clock by [`DataplaneConfig::loop_cost`] ([`loop_cost`]).
impl<R: Rnic> crate::traffic::App for Dataplane<R> {
    fn poll(&mut self) -> Result<bool, crate::traffic::AppError> {
        Ok(self.charged_round()?)
    }

    /// The end of the loop's busy time (its cost model, [`loop_cost`]):
    /// it runs its next round then.
    fn next_timer_ns(&self) -> Option<u64> {
        self.loop_busy_until_ns()
    }

    /// The policy tick and the other timers are soft: waking for them
    /// while the NIC is busy would move ticks off the NIC's instants, and
    /// the policies' figures with them.
    fn idle_timer_ns(&self) -> Option<u64> {
        Some(Dataplane::next_timer_ns(self))
    }
}
