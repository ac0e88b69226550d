//! Run reports: per-tenant goodput, message rate and latency, NIC and
//! dataplane counters; printed as a table or written as JSON.

use std::fmt::Write;

use perf_dataplane::engine::DataplaneCounters;
use perf_dataplane::policy::PolicyCounters;
use serde::Serialize;

use crate::workload::TenantResult;

/// Latency summary in microseconds.
#[derive(Debug, Clone, Serialize)]
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

/// One tenant's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TenantReport {
    /// Tenant name.
    pub name: String,
    /// Payload goodput, 10^9 bit/s.
    pub gbps: f64,
    /// Application messages per second, millions.
    pub mpps: f64,
    /// Messages completed in the window.
    pub completed: u64,
    /// Completions with an error status.
    pub errors: u64,
    /// Latency (half round trip for lat WRITE/SEND tenants).
    pub latency_us: LatencyUs,
    /// The same tenant alone, if measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone: Option<Box<TenantReport>>,
}

impl TenantReport {
    /// Summarises a tenant's result over a window of `window_ns`.
    pub fn new(name: &str, r: &TenantResult, window_ns: u64) -> Self {
        let us = |ps: f64| ps / 1e6;
        let h = &r.hist;
        TenantReport {
            name: name.to_string(),
            gbps: r.bytes as f64 * 8.0 / window_ns as f64,
            mpps: r.messages as f64 * 1e3 / window_ns as f64,
            completed: r.messages,
            errors: r.errors,
            latency_us: LatencyUs {
                mean: us(h.mean()),
                p50: us(h.value_at_quantile(0.5) as f64),
                p99: us(h.value_at_quantile(0.99) as f64),
                p999: us(h.value_at_quantile(0.999) as f64),
                max: us(h.max() as f64),
            },
            alone: None,
        }
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
}

impl Report {
    /// The human table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "policy: {}   hw: {}   scenario: {}", self.policy, self.hw, self.scenario);
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "tenant", "Gb/s", "Mmsg/s", "completed", "mean[us]", "p50[us]", "p99[us]", "p99.9[us]", "max[us]"
        );
        for t in &self.tenants {
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
        }
        let d = &self.dataplane;
        let _ = writeln!(
            s,
            "rnic: utilization {:.3}, wire payload {:.2} Gb/s | dataplane: {} WQEs ({} data, {} zero-weight), {} hand-offs, {} hidden completions, {} refused",
            self.rnic.utilization,
            self.rnic.wire_payload_gbps,
            d.wqes_posted,
            d.data_wqes,
            d.zero_weight_wrs,
            d.handoffs,
            d.hidden_completions,
            d.refused
        );
        s
    }
}
