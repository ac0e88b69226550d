//! A run in virtual time: the dataplane's one virtual-time driver
//! (`traffic::run_virtual_observed`), sampling the NIC's wire counters
//! over time and moving the progress bar.

use indicatif::ProgressBar;
use perf_dataplane::rnic::sim::{SimFabric, PS_PER_NS};
use perf_dataplane::traffic::{run_virtual_observed, App, AppError};

/// NIC utilization over time: the fraction of each bucket host 0's wire
/// spent transmitting (sampled at the first wake-up in each bucket), and
/// the same for the NIC's other bottlenecks: the responder's wire (host
/// 1's egress) and host 0's send scheduler (WQEs it touched times
/// `sched_wqe_ps`).
#[derive(Debug, Clone, Default)]
pub struct NicTimeline {
    /// Bucket width, ns.
    pub bucket_ns: u64,
    /// Utilization (0 to 1) of host 0's wire per bucket.
    pub utilization: Vec<f64>,
    /// Utilization of host 1's wire per bucket.
    pub responder: Vec<f64>,
    /// Utilization of host 0's send scheduler per bucket.
    pub wqe: Vec<f64>,
    last: (u64, [u64; 3]),
}

impl NicTimeline {
    /// An empty timeline of `bucket_ns` buckets.
    pub fn new(bucket_ns: u64) -> Self {
        NicTimeline { bucket_ns, ..Self::default() }
    }

    /// Samples host 0's wire at `now_ns` (at most once per bucket).
    pub fn sample(&mut self, fabric: &SimFabric, now_ns: u64) {
        if self.bucket_ns == 0 || now_ns < self.last.0 + self.bucket_ns {
            return;
        }
        let (h0, h1) = (fabric.counters(0), fabric.counters(1));
        let sched_ps = fabric.profile().sched_wqe_ps;
        let busy = [h0.port.busy_ps, h1.port.busy_ps, (h0.sched.data_dispatches + h0.sched.ctrl_wqes) * sched_ps];
        let (t0, b0) = self.last;
        // Spread over the buckets this sample spans.
        let first = (t0 / self.bucket_ns) as usize;
        let upto = (now_ns / self.bucket_ns) as usize;
        for (k, series) in [&mut self.utilization, &mut self.responder, &mut self.wqe].into_iter().enumerate() {
            let frac = busy[k].saturating_sub(b0[k]) as f64 / ((now_ns - t0) as f64 * PS_PER_NS as f64);
            series.resize(upto.max(series.len()), 0.0);
            for u in &mut series[first..upto] {
                *u = frac.min(1.0);
            }
        }
        self.last = (upto as u64 * self.bucket_ns, busy);
    }

    /// Mean utilization of each bottleneck (host 0's wire, host 1's wire,
    /// host 0's scheduler) over the buckets inside `[from_ns, to_ns)`.
    pub fn window_mean(&self, from_ns: u64, to_ns: u64) -> [f64; 3] {
        let b = self.bucket_ns.max(1);
        let (lo, hi) = (from_ns.div_ceil(b) as usize, (to_ns / b) as usize);
        let mean = |v: &[f64]| {
            let s = v.get(lo..hi.min(v.len())).unwrap_or(&[]);
            if s.is_empty() {
                0.0
            } else {
                s.iter().sum::<f64>() / s.len() as f64
            }
        };
        [mean(&self.utilization), mean(&self.responder), mean(&self.wqe)]
    }
}

/// Runs `apps` on `fabric` until `until_ns` with the one virtual-time
/// driver ([`run_virtual_observed`]), sampling the NIC into `nic` and
/// moving `progress` (in ms of virtual time) as it goes.
pub fn drive(
    fabric: &SimFabric,
    apps: &mut [&mut dyn App],
    until_ns: u64,
    nic: &mut NicTimeline,
    progress: &ProgressBar,
) -> Result<(), AppError> {
    let mut wakes = 0u64;
    progress.set_position(0);
    run_virtual_observed(fabric, apps, until_ns, &mut |fabric, now| {
        nic.sample(fabric, now);
        wakes += 1;
        if wakes.is_multiple_of(4096) || now >= until_ns {
            progress.set_position(now / 1_000_000);
        }
    })
}
