//! Run reports: per-tenant goodput, message rate and latency, NIC and
//! dataplane counters; printed as a table or written as JSON.

use std::fmt::Write;

use perf_dataplane::engine::{DataplaneCounters, SwapOutcome, SwapRecord};
use perf_dataplane::policy::{ExitInfo, PolicyCounters};
use serde::Serialize;

use hdrhistogram::Histogram;

use crate::driver::NicTimeline;
use crate::workload::{Intervals, TenantResult, Timeline};

/// Latency summary in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencyUs {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl LatencyUs {
    /// The summary of a histogram in ps.
    pub fn of(h: &Histogram<u64>) -> Self {
        let us = |ps: f64| ps / 1e6;
        LatencyUs {
            mean: us(h.mean()),
            p50: us(h.value_at_quantile(0.5) as f64),
            p99: us(h.value_at_quantile(0.99) as f64),
            p999: us(h.value_at_quantile(0.999) as f64),
            max: us(h.max() as f64),
        }
    }
}

/// One tenant's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TenantReport {
    /// Tenant name.
    pub name: String,
    /// Its `[[tenant]]` entry (the name, unless the entry has `count > 1`).
    pub group: String,
    /// Payload goodput over the window, 10^9 bit/s: the bytes sent inside
    /// it (`workload`'s module comment says how they are counted).
    pub gbps: f64,
    /// Application messages per second over the window, millions, counted
    /// the same way.
    pub mpps: f64,
    /// Messages completed in the window.
    pub completed: u64,
    /// Completions with an error status.
    pub errors: u64,
    /// Open-loop arrivals dropped because the application backlog was full.
    pub dropped: u64,
    /// Latency (half round trip for lat WRITE/SEND tenants).
    pub latency_us: LatencyUs,
    /// The same tenant alone, if measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone: Option<Box<TenantReport>>,
    /// Its entitlement and verdict (docs/isolation.md), when its demand
    /// alone was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<crate::isolation::contract::Verdict>,
    /// Latency histogram in ps (for CDF plots and logs; not in JSON).
    #[serde(skip)]
    pub hist: Option<Histogram<u64>>,
    /// Completions over the whole run (for plots; not in JSON).
    #[serde(skip)]
    pub timeline: Timeline,
    /// Interval histograms (for `--hdr-log`; not in JSON).
    #[serde(skip)]
    pub intervals: Option<Intervals>,
    /// Measurement window and posting phase, ns (for plots; not in JSON).
    #[serde(skip)]
    pub window_phase_ns: ((u64, u64), (u64, u64)),
}

impl TenantReport {
    /// Summarises a tenant's result over its measurement window.
    pub fn new(name: &str, group: &str, r: TenantResult) -> Self {
        let window_ns = r.window_ns.1.saturating_sub(r.window_ns.0).max(1);
        TenantReport {
            name: name.to_string(),
            group: group.to_string(),
            gbps: r.sent_bytes * 8.0 / window_ns as f64,
            mpps: r.sent_messages * 1e3 / window_ns as f64,
            completed: r.messages,
            errors: r.errors,
            dropped: r.dropped,
            latency_us: LatencyUs::of(&r.hist),
            alone: None,
            contract: None,
            window_phase_ns: (r.window_ns, r.phase_ns),
            hist: Some(r.hist),
            timeline: r.timeline,
            intervals: r.intervals,
        }
    }

    /// The sum of a group's tenants: rates add up, latency merges.
    pub fn merge(group: &str, members: &[&TenantReport]) -> Self {
        let mut hist: Option<Histogram<u64>> = None;
        for m in members {
            if let Some(h) = &m.hist {
                match &mut hist {
                    None => hist = Some(h.clone()),
                    // Same bounds on both sides, so adding cannot fail.
                    Some(acc) => {
                        let _ = acc.add(h);
                    }
                }
            }
        }
        let mut timeline = members.first().map(|m| m.timeline.clone()).unwrap_or_default();
        for m in members.iter().skip(1) {
            for (a, b) in timeline.bytes.iter_mut().zip(&m.timeline.bytes) {
                *a += b;
            }
            for (a, b) in timeline.messages.iter_mut().zip(&m.timeline.messages) {
                *a += b;
            }
        }
        let name = if members.len() == 1 { members[0].name.clone() } else { format!("{group} (x{})", members.len()) };
        TenantReport {
            name,
            group: group.to_string(),
            gbps: members.iter().map(|m| m.gbps).sum(),
            mpps: members.iter().map(|m| m.mpps).sum(),
            completed: members.iter().map(|m| m.completed).sum(),
            errors: members.iter().map(|m| m.errors).sum(),
            dropped: members.iter().map(|m| m.dropped).sum(),
            latency_us: hist.as_ref().map_or_else(LatencyUs::default, LatencyUs::of),
            alone: members.first().and_then(|m| m.alone.clone()),
            contract: merge_contracts(members),
            hist,
            timeline,
            intervals: None,
            window_phase_ns: members.first().map_or(((0, 0), (0, 0)), |m| m.window_phase_ns),
        }
    }
}

/// A group's verdict: entitlements add up, and it passes if every member
/// does (`None` unless every member has one).
fn merge_contracts(members: &[&TenantReport]) -> Option<crate::isolation::contract::Verdict> {
    let vs: Vec<&crate::isolation::contract::Verdict> =
        members.iter().map(|m| m.contract.as_ref()).collect::<Option<_>>()?;
    let first = vs.first()?;
    let mut e = first.entitled.clone();
    e.mpps = vs.iter().map(|v| v.entitled.mpps).sum();
    e.gbps = vs.iter().map(|v| v.entitled.gbps).sum();
    e.demand_mpps = vs.iter().map(|v| v.entitled.demand_mpps).sum();
    let mpps: f64 = members.iter().map(|m| m.mpps).sum();
    Some(crate::isolation::contract::Verdict {
        ratio: if e.mpps > 0.0 { mpps / e.mpps } else { 1.0 },
        entitled: e,
        latency_bound: vs.iter().all(|v| v.latency_bound),
        p99_over_alone: vs.iter().map(|v| v.p99_over_alone).fold(0.0, f64::max),
        pass: vs.iter().all(|v| v.pass),
    })
}

/// `achieved / entitled 0.97 PASS` or `p99 / alone x1.23 FAIL`.
pub fn verdict_text(v: &crate::isolation::contract::Verdict) -> String {
    let mark = if v.pass { "PASS" } else { "FAIL" };
    if v.latency_bound {
        format!(
            "latency-bound: p99 / alone x{:.2}, at most x{} {mark}",
            v.p99_over_alone,
            crate::isolation::contract::LATENCY_CEILING
        )
    } else {
        format!("achieved / entitled {:.2}, at least {} {mark}", v.ratio, crate::isolation::contract::THROUGHPUT_FLOOR)
    }
}

/// NIC-side figures.
#[derive(Debug, Clone, Serialize)]
pub struct RnicReport {
    /// Fraction of time host 0's wire was transmitting.
    pub utilization: f64,
    /// Payload bits on host 0's wire per second, Gb/s.
    pub wire_payload_gbps: f64,
    /// Scheduler turns granted.
    pub sched_turns: u64,
    /// Control WQEs (WAIT, SEND_ENABLE, NOP) executed.
    pub ctrl_wqes: u64,
    /// What the backend counted of its own work (`Rnic::backend_counters`:
    /// the verbs backend's host gate and reaping), by name; empty on the
    /// simulator.
    pub backend: std::collections::BTreeMap<String, u64>,
}

/// The dataplane's work per completed application message. In virtual
/// time there is no CPU time to measure, so the cost is counted in the
/// work the loop does: WQEs it posts, doorbells it rings, and policy hook
/// calls it makes, each divided by the application messages completed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CostReport {
    /// WQEs posted (data, zero-weight, control hand-offs) per message.
    pub wqes_per_msg: f64,
    /// Doorbells (post lists) per message.
    pub doorbells_per_msg: f64,
    /// Policy hook calls per message.
    pub policy_calls_per_msg: f64,
}

impl CostReport {
    /// The cost of a run from its counters.
    pub fn new(d: &DataplaneCounters, p: &PolicyCounters) -> Self {
        let per = |x: u64| if d.completions > 0 { x as f64 / d.completions as f64 } else { 0.0 };
        CostReport {
            wqes_per_msg: per(d.wqes_posted),
            doorbells_per_msg: per(d.doorbells),
            policy_calls_per_msg: per(p.calls),
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What configuration this row is (policy name, hardware mode, `alone:T`).
    pub config: String,
    /// Scenario file.
    pub scenario: String,
    /// Policy.
    pub policy: String,
    /// NIC traffic-class scheduler.
    pub hw: String,
    /// Per tenant.
    pub tenants: Vec<TenantReport>,
    /// The NIC.
    pub rnic: RnicReport,
    /// The dataplane loop.
    pub dataplane: DataplaneCounters,
    /// The policy host.
    pub policy_counters: PolicyCounters,
    /// Policy swaps and exits (fallbacks, watchdog) during the run.
    pub policy_log: PolicyLog,
    /// The dataplane's work per application message.
    pub cost: CostReport,
    /// NIC utilization over time (for plots; not in JSON).
    #[serde(skip)]
    pub nic_timeline: NicTimeline,
    /// The loop's cost model and its busy time in virtual time.
    pub loop_cost: crate::loop_cost::LoopReport,
    /// Total time run, ns of the NIC's clock (virtual, or wall time with
    /// `--realtime`).
    pub duration_ns: u64,
    /// The dataplane core's figures of a `--realtime` run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realtime: Option<RealtimeReport>,
}

/// What a `--realtime` run measured of its dataplane core and its
/// tenants' threads.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RealtimeReport {
    /// The core the loop was asked to run on.
    pub core: Option<usize>,
    /// Whether pinning it there succeeded.
    pub pinned: bool,
    /// Wall time the loop ran, ms.
    pub wall_ms: f64,
    /// Rounds it ran.
    pub rounds: u64,
    /// Fraction of its wall time spent in rounds that did work.
    pub busy_fraction: f64,
    /// The policy hooks' share of that busy time.
    pub policy_share: f64,
    /// Completions the loop delivered to tenants.
    pub delivered: u64,
    /// Completions the tenant threads took (equal to `delivered` when every
    /// completion was counted exactly once).
    pub taken: u64,
    /// Requests still in flight at the tenants when the run gave up
    /// waiting for them (0 when everything completed).
    pub in_flight: u64,
}

impl Report {
    /// The tenants merged by group (`[[tenant]]` entry), in order.
    pub fn groups(&self) -> Vec<TenantReport> {
        let mut names: Vec<&str> = Vec::new();
        for t in &self.tenants {
            if !names.contains(&t.group.as_str()) {
                names.push(&t.group);
            }
        }
        names
            .iter()
            .map(|g| {
                let members: Vec<&TenantReport> = self.tenants.iter().filter(|t| t.group == *g).collect();
                if members.len() == 1 {
                    members[0].clone()
                } else {
                    TenantReport::merge(g, &members)
                }
            })
            .collect()
    }

    /// The human table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "policy: {}   hw: {}   scenario: {}", self.policy, self.hw, self.scenario);
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "tenant", "Gb/s", "Mmsg/s", "completed", "mean[us]", "p50[us]", "p99[us]", "p99.9[us]", "max[us]"
        );
        for t in &self.groups() {
            let l = &t.latency_us;
            let _ = writeln!(
                s,
                "{:<12} {:>8.2} {:>9.3} {:>10} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                t.name, t.gbps, t.mpps, t.completed, l.mean, l.p50, l.p99, l.p999, l.max
            );
            if let Some(a) = &t.alone {
                let r = |x: f64, y: f64| if y > 0.0 { x / y } else { 0.0 };
                let _ = writeln!(
                    s,
                    "{:<12} {:>8.2} {:>9.3} {:>10} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}   (alone; mean x{:.2}, p99 x{:.2}, Gb/s x{:.2}, Mmsg/s x{:.2})",
                    "  alone",
                    a.gbps,
                    a.mpps,
                    a.completed,
                    a.latency_us.mean,
                    a.latency_us.p50,
                    a.latency_us.p99,
                    a.latency_us.p999,
                    a.latency_us.max,
                    r(l.mean, a.latency_us.mean),
                    r(l.p99, a.latency_us.p99),
                    r(t.gbps, a.gbps),
                    r(t.mpps, a.mpps)
                );
            }
            if let Some(v) = &t.contract {
                let _ = writeln!(
                    s,
                    "{:<12} {:>8.2} {:>9.3}   (entitled, bound by {}; {})",
                    "  entitled",
                    v.entitled.gbps,
                    v.entitled.mpps,
                    v.entitled.bound_by,
                    verdict_text(v)
                );
            }
        }
        let d = &self.dataplane;
        let _ = writeln!(
            s,
            "rnic: utilization {:.3}, wire payload {:.2} Gb/s | dataplane: {} WQEs ({} data, {} zero-weight), {} hand-offs, {} hidden completions, {} refused | cost per message: {:.2} WQEs, {:.2} policy calls",
            self.rnic.utilization,
            self.rnic.wire_payload_gbps,
            d.wqes_posted,
            d.data_wqes,
            d.zero_weight_wrs,
            d.handoffs,
            d.hidden_completions,
            d.refused,
            self.cost.wqes_per_msg,
            self.cost.policy_calls_per_msg
        );
        if d.pipeline_delay_ns != [0, 0] {
            let [send, read] = d.pipeline_delay_ns.map(|ns| if ns == 0 { "-".to_string() } else { format!("{ns} ns") });
            let _ = writeln!(
                s,
                "fair admission: pipeline delay {send} (WRITE / SEND), {read} (READ), the budget's floor; {} window holds",
                d.window_holds
            );
        }
        let _ = writeln!(s, "{}", self.loop_cost.line());
        if let Some(rt) = &self.realtime {
            let core = match (rt.core, rt.pinned) {
                (Some(c), true) => format!("core {c} (pinned)"),
                (Some(c), false) => format!("core {c} (NOT pinned)"),
                (None, _) => "an unpinned thread".to_string(),
            };
            let _ = writeln!(
                s,
                "realtime: dataplane on {core}: busy {:.1}% of {:.0} ms wall, policy {:.1}% of busy; {} rounds; {} completions delivered, {} taken, {} left in flight",
                rt.busy_fraction * 100.0,
                rt.wall_ms,
                rt.policy_share * 100.0,
                rt.rounds,
                rt.delivered,
                rt.taken,
                rt.in_flight
            );
        }
        s
    }
}

/// What happened to the policy during a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyLog {
    /// Every swap, in order.
    pub swaps: Vec<SwapRecord>,
    /// Every exit (fallback to passthrough), in order.
    pub exits: Vec<ExitInfo>,
}

impl PolicyLog {
    /// The swaps and exits as text lines (nothing if there were none).
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.swaps.is_empty() {
            out.push_str("policy swaps:\n");
        }
        for s in &self.swaps {
            let what = match &s.outcome {
                SwapOutcome::Accepted => "accepted".to_string(),
                SwapOutcome::Refused(why) => format!("REFUSED: {why}"),
            };
            let cached = if s.cached { ", module cached" } else { "" };
            out.push_str(&format!(
                "  {:>10.3} ms  {} -> {}  {what} (prepared in {:.2} ms{cached})\n",
                s.at_ns as f64 / 1e6,
                s.from,
                s.to,
                s.prepare_ns as f64 / 1e6
            ));
        }
        if !self.exits.is_empty() {
            out.push_str("policy exits (fell back to passthrough):\n");
        }
        for e in &self.exits {
            out.push_str(&format!(
                "  {:>10.3} ms  {} in {}: {:?}: {}\n",
                e.at_ns as f64 / 1e6,
                e.policy,
                e.hook,
                e.kind,
                e.message
            ));
        }
        out
    }
}
