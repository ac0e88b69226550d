//! Running the loop in real time: a dedicated thread, pinned to a core
//! with `core_affinity`, spinning on [`Dataplane::round`] until told to
//! stop. Tenants are other threads that talk to it only through their
//! [`TenantHandle`](super::TenantHandle)s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Dataplane;
use crate::rnic::{Rnic, RnicError};

/// Where the loop ran and how busy it was.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PinReport {
    /// The core asked for.
    pub core: Option<usize>,
    /// Whether pinning to it succeeded.
    pub pinned: bool,
    /// Rounds run.
    pub rounds: u64,
    /// Fraction of the loop's wall time spent in rounds that did work
    /// (or called the policy).
    pub busy_fraction: f64,
    /// The policy's share of that busy time (its hooks' wall time over the
    /// busy time; see [`DataplaneCounters::policy_ns`](super::DataplaneCounters)).
    pub policy_share: f64,
    /// Wall time the loop ran.
    pub wall: Duration,
}

impl<R: Rnic + 'static> Dataplane<R> {
    /// Moves the dataplane onto its own thread, pinned to `core` (if given
    /// and available), and spins until `stop` is set. The thread returns
    /// the dataplane (for its counters) and a [`PinReport`].
    pub fn run_pinned(
        self,
        core: Option<usize>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<JoinHandle<Result<(Self, PinReport), RnicError>>> {
        self.run_pinned_with(core, stop, |_| Ok(false))
    }

    /// [`run_pinned`](Self::run_pinned), calling `between` on the loop's
    /// thread after every round, at the round boundary: the owner's work
    /// that must touch the running dataplane (adding tenants, registering
    /// memory, moving requests in from elsewhere). `between` returns
    /// whether it did anything (its time then counts as busy); its error
    /// stops the loop like the NIC's.
    pub fn run_pinned_with(
        mut self,
        core: Option<usize>,
        stop: Arc<AtomicBool>,
        mut between: impl FnMut(&mut Self) -> Result<bool, RnicError> + Send + 'static,
    ) -> std::io::Result<JoinHandle<Result<(Self, PinReport), RnicError>>> {
        std::thread::Builder::new().name("perf-dataplane".into()).spawn(move || {
            let pinned = match core {
                Some(c) => core_affinity::get_core_ids()
                    .and_then(|ids| ids.into_iter().find(|id| id.id == c))
                    .is_some_and(core_affinity::set_for_current),
                None => false,
            };
            let start = Instant::now();
            let mut busy = Duration::ZERO;
            let mut rounds = 0u64;
            self.timed = true;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let policy_before = self.counters.policy_ns;
                // A round that only ticked the policy worked too: the
                // policy's time stays a part of the busy time.
                let worked = self.round()?;
                if between(&mut self)? | worked || self.counters.policy_ns != policy_before {
                    let d = t.elapsed();
                    busy += d;
                    self.counters.busy_ns += d.as_nanos() as u64;
                }
                rounds += 1;
            }
            self.timed = false;
            let wall = start.elapsed();
            let busy_fraction = busy.as_secs_f64() / wall.as_secs_f64().max(1e-9);
            let policy_share = self.counters.policy_ns as f64 / (self.counters.busy_ns as f64).max(1.0);
            Ok((self, PinReport { core, pinned, rounds, busy_fraction, policy_share, wall }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DataplaneConfig, WorkRequest};
    use crate::policy::PolicyHost;
    use crate::rnic::sim::{ClockMode, RnicProfile, SimFabric};
    use crate::rnic::{connect, AccessFlags, WcStatus};
    use crate::traffic::Side;

    #[test]
    fn a_pinned_loop_serves_a_tenant_thread_on_the_wall_clock_model() {
        let fabric = SimFabric::new(RnicProfile::cx6_100g(), 2, 7, ClockMode::Wall);
        let policy = PolicyHost::builtin("perf").expect("built-in policy");
        let mut dp = Dataplane::new(fabric.nic(0), policy, DataplaneConfig::default()).expect("dataplane");
        let tenant = dp.add_tenant("t", 1).expect("tenant");
        let mr = dp.reg_mr(tenant.id, 1 << 20).expect("mr");
        let pattern: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        fabric.nic(0).write_mr(mr.handle, 0, &pattern).expect("write");
        let mut peer = Side::new(fabric.nic(1), 1, 1 << 20, 0, 64).expect("peer");
        let (idx, ep) = dp.create_qp(tenant.id, 0).expect("qp");
        dp.connect_qp(tenant.id, idx, connect::endpoint(&peer.nic, peer.qps[0].qp_num)).expect("connect");
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        connect::bring_up(&mut peer.nic, peer.qps[0].handle, ep, access).expect("bring up");
        let remote = peer.mr.remote(0);

        let stop = Arc::new(AtomicBool::new(false));
        let handle = dp.run_pinned(Some(0), stop.clone()).expect("spawn");
        let n = 8u64;
        let app = std::thread::spawn(move || {
            for wr_id in 0..n {
                let wr = WorkRequest::write(wr_id, 0, mr, 1 << 20, remote);
                while tenant.post(wr).is_err() {
                    std::thread::yield_now();
                }
            }
            let mut done = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            while done.len() < n as usize && Instant::now() < deadline {
                match tenant.poll() {
                    Some(c) => done.push(c),
                    None => std::thread::yield_now(),
                }
            }
            done
        });
        let done = app.join().expect("tenant thread");
        stop.store(true, Ordering::Relaxed);
        let (dp, report) = handle.join().expect("dataplane thread").expect("loop");
        assert_eq!(done.len(), n as usize, "every request completes");
        assert!(done.iter().all(|c| c.status == WcStatus::Success && c.byte_len == 1 << 20));
        assert_eq!(done.iter().map(|c| c.wr_id).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>(), "in post order");
        assert!(report.rounds > 0 && report.busy_fraction > 0.0 && report.busy_fraction <= 1.0);
        assert!((0.0..=1.0).contains(&report.policy_share), "{report:?}");
        assert!(dp.counters().busy_ns > 0 && dp.counters().policy_ns <= dp.counters().busy_ns);
        assert!(dp.counters().completions >= n);
        let mut landed = vec![0u8; 1 << 20];
        peer.nic.read_mr(peer.mr.handle, 0, &mut landed).expect("read");
        assert!(landed == pattern, "the bytes landed intact");
    }
}
