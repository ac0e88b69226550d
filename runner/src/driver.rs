//! The virtual-time driver of a run: the apps poll at every instant the
//! NIC makes visible (as `perftest::run_virtual` does), and also at the
//! times they ask for (a tenant's start, an open-loop arrival, the
//! dataplane's policy tick), which no NIC event would reveal. It samples
//! the NIC's wire counters over time and moves the progress bar.

use indicatif::ProgressBar;
use perf_dataplane::engine::Dataplane;
use perf_dataplane::perftest::{App, AppError};
use perf_dataplane::rnic::sim::{SimFabric, SimRnic, PS_PER_NS};

/// An app that may also need a wake-up at a time of its own.
pub trait Actor: App {
    /// The next time (ns) it needs to poll even if the NIC shows nothing.
    fn next_wake_ns(&self) -> Option<u64> {
        None
    }

    /// A time it would like to poll at when the NIC has nothing pending at
    /// all (while the NIC is busy, its events wake everyone often enough).
    fn idle_wake_ns(&self) -> Option<u64> {
        None
    }
}

/// The dataplane's policy tick is a soft timer: waking for it while the
/// NIC is busy would move ticks off the instants `perftest::run_virtual`
/// ticks at, and the policies' figures with them.
impl Actor for Dataplane<SimRnic> {
    /// The end of the loop's busy time (its cost model,
    /// `perf_dataplane::engine::loop_cost`): it runs its next round then.
    fn next_wake_ns(&self) -> Option<u64> {
        self.loop_busy_until_ns()
    }

    fn idle_wake_ns(&self) -> Option<u64> {
        Some(self.next_timer_ns())
    }
}

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

/// Runs `apps` on `fabric` until `until_ns` (see the module comment).
pub fn drive(
    fabric: &SimFabric,
    apps: &mut [&mut dyn Actor],
    until_ns: u64,
    nic: &mut NicTimeline,
    progress: &ProgressBar,
) -> Result<(), AppError> {
    let mut wakes = 0u64;
    progress.set_position(0);
    loop {
        let mut progressed = true;
        while progressed {
            progressed = false;
            for a in apps.iter_mut() {
                progressed |= a.poll()?;
            }
        }
        let now = fabric.now_ns();
        nic.sample(fabric, now);
        wakes += 1;
        if wakes.is_multiple_of(4096) {
            progress.set_position(now / 1_000_000);
        }
        let idle = fabric.next_event_ps().is_none();
        let timer = apps
            .iter()
            .flat_map(|a| a.next_wake_ns().into_iter().chain(a.idle_wake_ns().filter(|_| idle)))
            .filter(|&t| t > now)
            .min();
        let limit = timer.unwrap_or(until_ns).min(until_ns);
        if !fabric.step_until_visible(limit * PS_PER_NS) {
            fabric.advance_to_ps(limit * PS_PER_NS);
            if limit >= until_ns {
                nic.sample(fabric, until_ns);
                progress.set_position(until_ns / 1_000_000);
                return Ok(());
            }
        }
    }
}
