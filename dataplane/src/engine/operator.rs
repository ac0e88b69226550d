//! The operator's hand on a running loop: pausing and resuming a tenant
//! (its send-side requests held in software, as a plan with no allowed QP
//! would, but set by the operator and kept across policy ticks and swaps),
//! and snapshots of the loop's state, asked for from another thread
//! through an [`OperatorHandle`] while the loop runs on its pinned core.
//!
//! A paused tenant's requests are still taken from its channel (up to its
//! queue's capacity, then back-pressure) and checked; RECVs are posted at
//! once, as always. Its data WQEs are not posted until it is resumed; a
//! message being split stops between chunks. What the NIC already holds
//! completes, in order, and hand-off releases are still posted, so its
//! other QPs are never stranded. The watchdog does not count a paused
//! tenant's backlog as a stall.

use std::time::Duration;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::{Dataplane, DataplaneCounters, SwapHandle, SwapRecord};
use crate::policy::loader::PolicySpec;
use crate::policy::wasm::WasmLimits;
use crate::policy::PolicyCounters;
use crate::rnic::Rnic;

/// One tenant in a [`DataplaneSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TenantSnapshot {
    /// Tenant id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Whether the operator has paused it.
    pub paused: bool,
    /// Requests held in software (queued per QP, or being split).
    pub held: usize,
    /// Completions delivered to it so far.
    pub delivered: u64,
}

/// The loop's state at one round boundary.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DataplaneSnapshot {
    /// The NIC's clock, ns.
    pub clock_ns: u64,
    /// The running policy.
    pub policy: String,
    /// The loop's counters.
    pub counters: DataplaneCounters,
    /// The policy host's counters.
    pub policy_counters: PolicyCounters,
    /// Every tenant (removed ones left).
    pub tenants: Vec<TenantSnapshot>,
    /// Every swap so far, in order.
    pub swaps: Vec<SwapRecord>,
}

/// Why an operator request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    /// No tenant has that name (or id).
    #[error("no tenant {name:?} (tenants: {known})")]
    UnknownTenant {
        /// What was asked for.
        name: String,
        /// The tenants there are, comma-separated.
        known: String,
    },
    /// The loop has stopped.
    #[error("the dataplane has stopped")]
    Stopped,
    /// The loop did not answer in time.
    #[error("the dataplane did not answer within {0:?}")]
    Timeout(Duration),
}

/// A request to the loop, answered on its channel.
pub(super) enum Command {
    Pause { tenant: String, paused: bool, reply: Sender<Result<bool, OperatorError>> },
    Snapshot { reply: Sender<DataplaneSnapshot> },
}

/// Reaches a dataplane that runs elsewhere: pause / resume tenants, take
/// snapshots, ask for swaps; from [`Dataplane::operator_handle`]. The loop
/// answers at its next round boundary.
#[derive(Clone)]
pub struct OperatorHandle {
    tx: Sender<Command>,
    swaps: SwapHandle,
}

impl OperatorHandle {
    fn ask<T>(&self, make: impl FnOnce(Sender<T>) -> Command, timeout: Duration) -> Result<T, OperatorError> {
        let (reply, rx) = bounded(1);
        self.tx.send(make(reply)).map_err(|_| OperatorError::Stopped)?;
        rx.recv_timeout(timeout).map_err(|e| match e {
            crossbeam_channel::RecvTimeoutError::Timeout => OperatorError::Timeout(timeout),
            crossbeam_channel::RecvTimeoutError::Disconnected => OperatorError::Stopped,
        })
    }

    /// Pauses (`paused`) or resumes tenant `tenant` (its name, or its id
    /// in decimal). Returns whether that changed anything.
    pub fn set_paused(&self, tenant: &str, paused: bool, timeout: Duration) -> Result<bool, OperatorError> {
        let tenant = tenant.to_string();
        self.ask(|reply| Command::Pause { tenant, paused, reply }, timeout)?
    }

    /// The loop's state at its next round boundary.
    pub fn snapshot(&self, timeout: Duration) -> Result<DataplaneSnapshot, OperatorError> {
        self.ask(|reply| Command::Snapshot { reply }, timeout)
    }

    /// Asks for a hot swap (see [`SwapHandle::request`]); `None` if the
    /// dataplane is gone.
    pub fn request_swap(&self, spec: PolicySpec, limits: WasmLimits) -> Option<super::SwapTicket> {
        self.swaps.request(spec, limits)
    }

    /// Swaps recorded so far (see [`SwapHandle::recorded`]).
    pub fn swaps_recorded(&self) -> u64 {
        self.swaps.recorded()
    }
}

impl<R: Rnic> Dataplane<R> {
    /// A handle other threads can pause tenants, take snapshots and ask
    /// for swaps with while the loop runs.
    pub fn operator_handle(&mut self) -> OperatorHandle {
        let (tx, _) = self.operator.get_or_insert_with(unbounded);
        OperatorHandle { tx: tx.clone(), swaps: self.swap_handle() }
    }

    /// The tenant named `name` (or with id `name`).
    fn find_tenant(&self, name: &str) -> Result<usize, OperatorError> {
        let by_name = self.tenants.iter().position(|t| t.name == name && !t.removed);
        let by_id = name.parse::<usize>().ok().filter(|&i| self.tenants.get(i).is_some_and(|t| !t.removed));
        by_name.or(by_id).ok_or_else(|| OperatorError::UnknownTenant {
            name: name.to_string(),
            known: self.tenants.iter().filter(|t| !t.removed).map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Pauses (`paused`) or resumes tenant `tenant` (its name or id); see
    /// the module comment. Returns whether that changed anything.
    pub fn set_paused(&mut self, tenant: &str, paused: bool) -> Result<bool, OperatorError> {
        let t = self.find_tenant(tenant)?;
        let ts = &mut self.tenants[t];
        let changed = ts.paused != paused;
        ts.paused = paused;
        if changed {
            self.mark_tenant(t);
        }
        if changed && !paused {
            // Its backlog waited on the operator, not on the policy.
            let now = self.nic.clock_ns();
            for &qi in &self.tenants[t].qps {
                self.qps[qi].progress_ns = now;
            }
            self.restart_quanta(t, now);
        }
        Ok(changed)
    }

    /// Whether tenant `t` is paused by the operator.
    pub fn is_paused(&self, t: u32) -> bool {
        self.tenants.get(t as usize).is_some_and(|x| x.paused)
    }

    /// The loop's state now.
    pub fn snapshot(&self) -> DataplaneSnapshot {
        DataplaneSnapshot {
            clock_ns: self.nic.clock_ns(),
            policy: self.policy.name().to_string(),
            counters: self.counters(),
            policy_counters: self.policy.counters,
            tenants: self
                .tenants
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.removed)
                .map(|(i, t)| TenantSnapshot {
                    id: i as u32,
                    name: t.name.clone(),
                    paused: t.paused,
                    held: self.held_requests(i),
                    delivered: t.delivered,
                })
                .collect(),
            swaps: self.swaps().to_vec(),
        }
    }

    /// Whether an operator request waits.
    pub(super) fn has_operator_commands(&self) -> bool {
        self.operator.as_ref().is_some_and(|(_, rx)| !rx.is_empty())
    }

    /// Answers the operator's requests, at a round boundary.
    pub(super) fn serve_operator(&mut self) {
        let Some(rx) = self.operator.as_ref().map(|(_, rx)| rx.clone()) else { return };
        let rx: Receiver<Command> = rx;
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Command::Pause { tenant, paused, reply } => {
                    let _ = reply.send(self.set_paused(&tenant, paused));
                }
                Command::Snapshot { reply } => {
                    let _ = reply.send(self.snapshot());
                }
            }
        }
    }
}
