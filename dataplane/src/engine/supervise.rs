//! What the loop does to its policy besides calling it: hot swaps and the
//! watchdog.
//!
//! **Swaps.** [`Dataplane::request_swap`] hands the policy to the
//! [`PolicyLoader`] thread, which loads (through the module cache),
//! instantiates and initialises it with the tenants and QPs of the moment;
//! the loop takes the ready policy with a non-blocking receive at the start
//! of a round and installs it there ([`Dataplane::swap_policy`]): tenants or
//! QPs added meanwhile are announced to it, it inherits the old host's
//! counters and exit records, every tenant's plan is reset to passthrough
//! and the new policy ticks in that same round, so QPs the old policy held
//! back (active-set caps) are re-planned at once. Nothing queued or posted
//! is touched: held requests stay in their per-QP queues in order, a
//! message being split keeps its split plan to its end, and in-NIC
//! hand-offs already planned complete (a pending release is always
//! posted, capped or not). [`Dataplane::schedule_swap`] does the same at a
//! given time of the NIC's clock (scripted swaps in virtual time; the load
//! starts at once, and the loop waits for it only if it is not ready when
//! the time comes). A [`SwapHandle`] asks from another thread while the
//! loop runs on its own ([`Dataplane::run_pinned`]). Every swap is recorded ([`SwapRecord`]); a refused one
//! leaves the running policy in place.
//!
//! **Watchdog.** Every quarter of [`DataplaneConfig::watchdog_ns`] the loop
//! checks its data QPs: one with backlog (held, being posted or
//! outstanding requests) that has completed nothing for longer than the
//! bound, under a policy other than passthrough, makes the host reclaim
//! control ([`PolicyHost::reclaim`]: fall back to passthrough, with a
//! `Watchdog` exit naming the tenant and QP, logged as a warning). Only
//! what the policy can cause counts: failed QPs (their requests complete
//! with flush errors), paused tenants (they wait on the operator) and every
//! QP of a tenant one of whose QPs has WQEs in the NIC with no completion
//! of any kind for half the bound are left out. The last is a stall of
//! the NIC, the peer or the tenant itself (a SEND whose receiver posts no
//! RECV, a peer stopped or in error, retransmissions), not of the policy;
//! a QP blocked on its tenant's in-NIC hand-off is the policy's rotation
//! and is not left out. A reclaim is undone: once the starved QP has
//! drained and a bound has passed, the policy is reinstated (a swap record
//! says so). After three reclaims of the policy installed by one swap,
//! passthrough runs until the next swap.

use super::EngineError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};
use perf_policy_sdk::{Pacing, TenantInfo, TenantPlan};

use super::{Dataplane, DataplaneConfig};
use crate::policy::loader::{LoadRequest, PolicyLoader, PolicySpec, PrepareError, Prepared};
use crate::policy::wasm::WasmLimits;
use crate::policy::PolicyHost;
use crate::rnic::Rnic;

/// How long a scheduled swap waits for a load still running when its time
/// comes.
const SCHEDULED_WAIT: Duration = Duration::from_secs(30);

/// How a swap ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum SwapOutcome {
    /// The new policy runs.
    Accepted,
    /// The new policy was refused; the old one keeps running. Why.
    Refused(String),
}

/// One policy swap, for reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SwapRecord {
    /// When the loop switched (or refused), ns of the NIC's clock.
    pub at_ns: u64,
    /// The policy running before.
    pub from: String,
    /// The policy asked for (its label: name, `wasm:NAME` or path).
    pub to: String,
    /// What happened.
    pub outcome: SwapOutcome,
    /// Wall time the loader took to prepare it, ns (0 for a direct swap).
    pub prepare_ns: u64,
    /// Whether its module came from the module cache.
    pub cached: bool,
}

/// A swap request from a [`SwapHandle`], with its ticket's state.
type SwapCommand = (PolicySpec, WasmLimits, Arc<AtomicU8>);

/// A [`SwapTicket`]'s swap is neither applied nor cancelled yet.
const TICKET_PENDING: u8 = 0;
/// Its asker stopped waiting: the loop records it refused, not applied.
const TICKET_CANCELLED: u8 = 1;
/// The loop took it: it is applied (or refused on its own merits).
const TICKET_TAKEN: u8 = 2;

/// A swap asked for through a [`SwapHandle`]: whoever asked can cancel it
/// until the loop takes it, so that a swap nobody waits for any more
/// never applies later, unseen.
#[derive(Debug)]
pub struct SwapTicket(Arc<AtomicU8>);

impl SwapTicket {
    /// Cancels the swap unless the loop has taken it already. Returns
    /// whether it is cancelled: `false` means it is applied, or refused on
    /// its own merits, and its record follows.
    pub fn cancel(&self) -> bool {
        self.0.compare_exchange(TICKET_PENDING, TICKET_CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok()
            || self.0.load(Ordering::Acquire) == TICKET_CANCELLED
    }
}

/// Asks a dataplane that runs elsewhere (on its pinned thread,
/// [`Dataplane::run_pinned`]) for hot swaps; from [`Dataplane::swap_handle`].
/// The loop takes each request at its next round, snapshots its tenants
/// and hands it to the loader, as [`Dataplane::request_swap`] does.
#[derive(Clone)]
pub struct SwapHandle {
    tx: Sender<SwapCommand>,
    done: Arc<AtomicU64>,
}

impl SwapHandle {
    /// Asks for a swap to `spec`; `None` if the dataplane is gone.
    pub fn request(&self, spec: PolicySpec, limits: WasmLimits) -> Option<SwapTicket> {
        let state = Arc::new(AtomicU8::new(TICKET_PENDING));
        self.tx.send((spec, limits, state.clone())).ok().map(|()| SwapTicket(state))
    }

    /// Swaps the loop has recorded so far (accepted or refused), by any
    /// means.
    pub fn recorded(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }
}

/// A swap asked for and not yet applied.
struct Pending {
    id: u64,
    /// Apply at this time (scheduled), or as soon as it is ready.
    at_ns: Option<u64>,
    ready: Option<Prepared>,
    /// The asker's ticket, for a swap asked for through a [`SwapHandle`].
    ticket: Option<Arc<AtomicU8>>,
}

/// How many times the watchdog takes control from one policy (installed
/// by one swap) and puts it back; after the last, passthrough runs until
/// the next swap.
const MAX_RECLAIMS: u32 = 3;

/// A policy the watchdog took control from, waiting to be reinstated.
pub(super) struct Reclaim {
    /// The tenant and QP index it starved.
    tenant: u32,
    qp: u32,
    at_ns: u64,
    /// The tenants as the policy last knew them.
    infos: Vec<TenantInfo>,
    policy: String,
}

/// Swap and watchdog state of a dataplane.
#[derive(Default)]
pub(super) struct Supervisor {
    loader: Option<PolicyLoader>,
    pending: VecDeque<Pending>,
    next_id: u64,
    swaps: Vec<SwapRecord>,
    pub next_watchdog_ns: u64,
    /// Requests from [`SwapHandle`]s.
    ctl: Option<(Sender<SwapCommand>, Receiver<SwapCommand>)>,
    /// How many swaps are recorded, for [`SwapHandle::recorded`].
    done: Arc<AtomicU64>,
    /// The policy the watchdog took control from, while it waits to be
    /// reinstated.
    reclaim: Option<Reclaim>,
    /// Reclaims of the policy installed by the last swap.
    reclaims: u32,
}

impl Supervisor {
    fn record(&mut self, r: SwapRecord) {
        self.swaps.push(r);
        self.done.store(self.swaps.len() as u64, Ordering::Release);
    }
}

impl Supervisor {
    /// Whether the loop has swaps to look at this round.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || self.ctl.as_ref().is_some_and(|(_, rx)| !rx.is_empty())
    }

    /// The next time the supervisor has timed work: a scheduled swap or a
    /// watchdog check.
    pub fn next_timer_ns(&self, cfg: &DataplaneConfig) -> u64 {
        let swap = self.pending.iter().filter_map(|p| p.at_ns).min().unwrap_or(u64::MAX);
        let dog = if cfg.watchdog_ns > 0 { self.next_watchdog_ns } else { u64::MAX };
        swap.min(dog)
    }

    fn loader(&mut self) -> Result<&PolicyLoader, EngineError> {
        if self.loader.is_none() {
            let l = PolicyLoader::spawn().map_err(EngineError::LoaderStart)?;
            self.loader = Some(l);
        }
        Ok(self.loader.as_ref().expect("just set"))
    }

    /// Moves what the loader finished into the pending entries.
    fn collect(&mut self) {
        let Some(l) = &self.loader else { return };
        while let Some(p) = l.try_recv() {
            if let Some(e) = self.pending.iter_mut().find(|e| e.id == p.id) {
                e.ready = Some(p);
            }
        }
    }

    /// Blocks until the loader answers for the pending entry `id`.
    fn wait_for(&mut self, id: u64) -> Result<(), PrepareError> {
        loop {
            if self.pending.iter().any(|e| e.id == id && e.ready.is_some()) {
                return Ok(());
            }
            let Some(l) = &self.loader else { return Err(PrepareError::Loader("no loader".into())) };
            let p = l.recv_timeout(SCHEDULED_WAIT)?;
            if let Some(e) = self.pending.iter_mut().find(|e| e.id == p.id) {
                e.ready = Some(p);
            }
        }
    }
}

/// `e` and its causes on one line (`what: why: deeper why`), for a swap
/// record's reason: a module that does not compile says wasmtime's
/// reason too. A cause whose text the line already ends with (an error
/// that prints its source itself) is not repeated.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.ends_with(&text) {
            line = format!("{line}: {text}");
        }
        cause = c.source();
    }
    line
}

impl<R: Rnic> Dataplane<R> {
    /// The tenants as a policy is told about them (`on_tenant`).
    fn tenant_infos(&self) -> Vec<TenantInfo> {
        self.tenants
            .iter()
            .enumerate()
            .map(|(i, t)| TenantInfo { tenant: i as u32, qps: t.qps.len() as u32, weight: t.weight })
            .collect()
    }

    fn submit_swap(&mut self, spec: PolicySpec, limits: WasmLimits, at_ns: Option<u64>) -> Result<u64, EngineError> {
        self.submit_ticketed(spec, limits, at_ns, None)
    }

    fn submit_ticketed(
        &mut self,
        spec: PolicySpec,
        limits: WasmLimits,
        at_ns: Option<u64>,
        ticket: Option<Arc<AtomicU8>>,
    ) -> Result<u64, EngineError> {
        let tenants = self.tenant_infos();
        let id = self.sup.next_id;
        self.sup.next_id += 1;
        let label = spec.label();
        if !self.sup.loader()?.submit(LoadRequest { id, spec, limits, tenants }) {
            return Err(EngineError::LoaderGone(label));
        }
        self.sup.pending.push_back(Pending { id, at_ns, ready: None, ticket });
        Ok(id)
    }

    /// Asks for a hot swap to `spec`: the loader thread prepares it (wasm
    /// modules under `limits`) and the loop switches at the first round
    /// boundary after it is ready. Returns the swap's id. Swaps apply in
    /// the order they were asked for.
    pub fn request_swap(&mut self, spec: PolicySpec, limits: WasmLimits) -> Result<u64, EngineError> {
        self.submit_swap(spec, limits, None)
    }

    /// Schedules a swap to `spec` at `at_ns` of the NIC's clock: the
    /// loader starts preparing it now; the loop switches at the first round
    /// at or after `at_ns` (waiting for the loader then if it is still
    /// busy, so that scripted swaps in virtual time are deterministic).
    pub fn schedule_swap(&mut self, at_ns: u64, spec: PolicySpec, limits: WasmLimits) -> Result<u64, EngineError> {
        self.submit_swap(spec, limits, Some(at_ns))
    }

    /// A handle other threads can ask for swaps with while the loop runs.
    pub fn swap_handle(&mut self) -> SwapHandle {
        let (tx, _) = self.sup.ctl.get_or_insert_with(unbounded);
        SwapHandle { tx: tx.clone(), done: self.sup.done.clone() }
    }

    /// Swaps asked for and not applied yet.
    pub fn pending_swaps(&self) -> usize {
        self.sup.pending.len()
    }

    /// Every swap so far, in order.
    pub fn swaps(&self) -> &[SwapRecord] {
        &self.sup.swaps
    }

    /// Applies the swaps whose turn has come, in order.
    pub(super) fn apply_swaps(&mut self, now: u64) {
        while let Some((spec, limits, ticket)) = self.sup.ctl.as_ref().and_then(|(_, rx)| rx.try_recv().ok()) {
            let label = spec.label();
            if let Err(e) = self.submit_ticketed(spec, limits, None, Some(ticket)) {
                self.record_refusal(now, label, with_causes(&e), 0, false);
            }
        }
        self.sup.collect();
        while let Some(front) = self.sup.pending.front() {
            let id = front.id;
            match front.at_ns {
                Some(at) if now < at => break,
                Some(_) => {
                    if let Err(e) = self.sup.wait_for(id) {
                        let to = format!("swap #{id}");
                        self.record_refusal(now, to, with_causes(&e), 0, false);
                        self.sup.pending.pop_front();
                        continue;
                    }
                }
                None if front.ready.is_none() => break,
                None => {}
            }
            let Some(Pending { ready: Some(p), ticket, .. }) = self.sup.pending.pop_front() else { break };
            let taken = ticket.is_none_or(|t| {
                t.compare_exchange(TICKET_PENDING, TICKET_TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
            });
            if !taken {
                let why = "cancelled: whoever asked for it stopped waiting before it was ready".to_string();
                self.record_refusal(now, p.label, why, p.prepare_ns, p.cached);
                continue;
            }
            match p.result {
                Ok(host) => self.install(host, &p.tenants, p.label, now, p.prepare_ns, p.cached),
                Err(e) => self.record_refusal(now, p.label, with_causes(&e), p.prepare_ns, p.cached),
            }
        }
    }

    fn record_refusal(&mut self, now: u64, to: String, why: String, prepare_ns: u64, cached: bool) {
        let from = self.policy.name().to_string();
        self.sup.record(SwapRecord { at_ns: now, from, to, outcome: SwapOutcome::Refused(why), prepare_ns, cached });
    }

    /// Replaces the policy now, at a round boundary, with `policy`
    /// (prepared by the caller, e.g. with [`crate::policy::loader::prepare`];
    /// it is told about every tenant here). Held and posted work is kept;
    /// see the module comment for what the new policy takes over.
    pub fn swap_policy(&mut self, policy: PolicyHost) {
        let now = self.nic.clock_ns();
        let label = policy.name().to_string();
        self.install(policy, &[], label, now, 0, false);
    }

    fn install(&mut self, mut host: PolicyHost, seen: &[TenantInfo], label: String, now: u64, ns: u64, cached: bool) {
        // Tenants and QPs added while the loader prepared it.
        for info in self.tenant_infos() {
            if seen.get(info.tenant as usize) != Some(&info) {
                host.on_tenant(&info);
            }
        }
        if let Some(e) = host.exit_info() {
            // It failed in on_tenant just now: the old policy stays.
            let why = format!("failed in {} while being initialised: {:?}: {}", e.hook, e.kind, e.message);
            self.retire(host);
            self.record_refusal(now, label, why, ns, cached);
            return;
        }
        let from = self.policy.name().to_string();
        host.inherit(&self.policy);
        let old = std::mem::replace(&mut self.policy, host);
        self.retire(old);
        self.sup.reclaim = None;
        self.sup.reclaims = 0;
        self.take_over(now);
        let outcome = SwapOutcome::Accepted;
        self.sup.record(SwapRecord { at_ns: now, from, to: label, outcome, prepare_ns: ns, cached });
    }

    /// What every new policy starts from, at a round boundary: its plans
    /// reset to passthrough, no rate limits, a tick in this round.
    fn take_over(&mut self, now: u64) {
        self.settle_all_rr();
        self.plans.fill(TenantPlan::PASSTHROUGH);
        self.plans_changed();
        // The old policy's rate limits go with it.
        self.pacing.fill(Pacing::UNLIMITED);
        self.tenants.iter_mut().for_each(|t| t.bucket.set(Pacing::UNLIMITED, now));
        self.rated = Default::default();
        self.mark_all();
        // Tick in this round: the new plans apply before anything is posted.
        self.next_tick_ns = 0;
        for q in &mut self.qps {
            q.progress_ns = now;
        }
    }

    /// Drops a policy on the loader thread when there is one (tearing
    /// down a wasm instance unmaps its memory), else here.
    fn retire(&self, host: PolicyHost) {
        if let Some(l) = &self.sup.loader {
            let _ = l.retire(host);
        }
    }

    /// The watchdog check (see the module comment).
    pub(super) fn watchdog(&mut self, now: u64) {
        let bound = self.cfg.watchdog_ns;
        self.sup.next_watchdog_ns = now + (bound / 4).max(10_000);
        if self.sup.reclaim.is_some() {
            self.maybe_reinstate(now, bound);
            return;
        }
        let held_by_nic = self.tenants_held_by_nic(now, bound);
        let mut starved = None;
        for q in &mut self.qps {
            // A paused tenant waits on the operator, not on the policy; one
            // whose WQEs the NIC holds waits on the NIC, its peer or itself.
            let t = q.tenant as usize;
            let paused = self.tenants.get(t).is_some_and(|t| t.paused);
            if q.failed || q.depth() == 0 || paused || held_by_nic.get(t).copied().unwrap_or(false) {
                q.progress_ns = now;
            } else if starved.is_none() && now.saturating_sub(q.progress_ns) > bound {
                starved = Some((q.tenant, q.index, q.depth(), now - q.progress_ns));
            }
        }
        let Some((t, qp, depth, idle)) = starved else { return };
        if self.policy.is_passthrough() {
            return;
        }
        let name = self.tenants.get(t as usize).map_or("?", |x| x.name.as_str());
        let why = format!(
            "tenant {t} ({name}) QP {qp}: {depth} requests backlogged, none completed for {} us (bound {} us)",
            idle / 1000,
            bound / 1000
        );
        let policy = self.policy.name().to_string();
        self.sup.reclaims += 1;
        let again = self.sup.reclaims < MAX_RECLAIMS;
        tracing::warn!(
            policy = %policy,
            "watchdog: {why}; passthrough runs {}",
            if again { "until that QP drains, then the policy is reinstated" } else { "until the next swap" }
        );
        let infos = self.tenant_infos();
        self.policy.reclaim(now, why);
        if again {
            self.sup.reclaim = Some(Reclaim { tenant: t, qp, at_ns: now, infos, policy });
        }
        self.settle_all_rr();
        self.plans.fill(TenantPlan::PASSTHROUGH);
        self.mark_all();
        self.plans_changed();
        self.next_tick_ns = now;
        for q in &mut self.qps {
            q.progress_ns = now;
        }
    }

    /// Which tenants have a QP whose WQEs the NIC holds unanswered for
    /// longer than half the bound, not counting a QP blocked on its
    /// tenant's in-NIC hand-off (that wait is the policy's rotation).
    fn tenants_held_by_nic(&mut self, now: u64, bound: u64) -> Vec<bool> {
        let mut held = vec![false; self.tenants.len()];
        for (t, ts) in self.tenants.iter_mut().enumerate() {
            let mut done = None;
            for &qi in &ts.qps {
                let q = &mut self.qps[qi];
                if q.failed || q.posted.is_empty() {
                    q.nic_progress_ns = now;
                    continue;
                }
                if now.saturating_sub(q.nic_progress_ns) <= bound / 2 {
                    continue;
                }
                if let Some(k) = q.waiting_on {
                    let done = *done.get_or_insert_with(|| {
                        ts.pcq.as_mut().and_then(|p| p.completed(&mut self.nic).ok()).unwrap_or(u64::MAX)
                    });
                    if k > done {
                        continue;
                    }
                }
                held[t] = true;
            }
        }
        held
    }

    /// Puts back the policy the watchdog took control from once the QP it
    /// starved has drained (or is gone) and a bound has passed.
    fn maybe_reinstate(&mut self, now: u64, bound: u64) {
        let Some(r) = &self.sup.reclaim else { return };
        let qi = self.tenants.get(r.tenant as usize).and_then(|ts| ts.qps.get(r.qp as usize)).copied();
        let drained = qi.is_none_or(|qi| self.qps[qi].depth() == 0 || self.qps[qi].failed);
        if !drained || now.saturating_sub(r.at_ns) < bound {
            return;
        }
        let Some(r) = self.sup.reclaim.take() else { return };
        if !self.policy.reinstate(now) {
            return;
        }
        for info in self.tenant_infos() {
            if r.infos.get(info.tenant as usize) != Some(&info) {
                self.policy.on_tenant(&info);
            }
        }
        tracing::info!(policy = %r.policy, "watchdog: tenant {} QP {} drained; the policy is reinstated", r.tenant, r.qp);
        self.take_over(now);
        let outcome = SwapOutcome::Accepted;
        let to = format!("{} (reinstated by the watchdog)", r.policy);
        self.sup.record(SwapRecord {
            at_ns: now,
            from: "passthrough".into(),
            to,
            outcome,
            prepare_ns: 0,
            cached: false,
        });
    }
}
