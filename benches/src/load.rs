//! A synthetic tenant load for benchmarks over any [`Rnic`]: `tenants`
//! bandwidth tenants with `qps` QPs each, every QP keeping `depth` WRITEs of
//! `msg` bytes outstanding (posted in lists of `post_list`), plus optionally one sensitive tenant (see
//! [`Sensitive`]) so that PeRF-style policies insert zero-weight WRs. QPs
//! are connected to themselves (loopback), which is all a null NIC needs.
//!
//! [`Load::drive`] plays the tenants and runs the loop for a wall-clock
//! budget, timing only what happens inside [`Dataplane::round`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use perf_dataplane::engine::{Completion, Dataplane, DataplaneConfig, EngineError, TenantHandle, WorkRequest};
use perf_dataplane::policy::PolicyHost;
use perf_dataplane::rnic::{Mr, RemoteAddr, Rnic, RnicError};

/// The shape of the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadShape {
    /// Bandwidth tenants.
    pub tenants: u32,
    /// QPs per bandwidth tenant.
    pub qps: u32,
    /// Outstanding messages per QP.
    pub depth: u32,
    /// Message size in bytes.
    pub msg: u32,
    /// The sensitive tenant beside the bandwidth tenants, if any.
    pub sensitive: Sensitive,
    /// Send-queue depth of each data QP (`None`: the dataplane's default).
    /// The dataplane bounds QPs x depth by its shared CQs, so loads of
    /// many QPs need a shallower queue.
    pub sq_depth: Option<u32>,
    /// Requests per post list (1: one at a time): a QP posts a list when
    /// it has room for all of it, as perftest's `-l` does.
    pub post_list: u32,
}

/// A sensitive tenant added to a [`LoadShape`] (one QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sensitive {
    /// None.
    None,
    /// Delay-sensitive: a 16 B WRITE, one at a time (the paper's `D_App`).
    Delay,
    /// Message-rate-sensitive: 16 B WRITEs, 128 outstanding (the paper's `M_App`).
    Message,
}

impl LoadShape {
    /// All QPs of the load, the sensitive tenant's included.
    pub fn total_qps(&self) -> u32 {
        self.tenants * self.qps + u32::from(self.sensitive != Sensitive::None)
    }
}

struct LoadTenant {
    handle: TenantHandle,
    mr: Mr,
    remote: RemoteAddr,
    outstanding: Vec<u32>,
    size: u32,
    depth: u32,
    list: u32,
}

/// The dataplane with its tenants.
pub struct Load<R: Rnic> {
    /// The loop under test.
    pub dp: Dataplane<R>,
    tenants: Vec<LoadTenant>,
    next_wr: u64,
    /// One post list in the making.
    list: Vec<WorkRequest>,
    /// Completions taken in one batch.
    done: VecDeque<Completion>,
}

/// What [`Load::drive`] measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct DriveSample {
    /// Rounds run.
    pub rounds: u64,
    /// WQEs posted.
    pub wqes: u64,
    /// Zero-weight WRs among them.
    pub zero_weight: u64,
    /// Application messages completed.
    pub messages: u64,
    /// Wall time inside `round()`.
    pub in_round: Duration,
}

impl DriveSample {
    /// WQEs posted per second of time inside the loop.
    pub fn wqes_per_s(&self) -> f64 {
        self.wqes as f64 / self.in_round.as_secs_f64().max(1e-12)
    }

    /// Nanoseconds of loop time per WQE.
    pub fn ns_per_wqe(&self) -> f64 {
        self.in_round.as_nanos() as f64 / self.wqes.max(1) as f64
    }

    /// Nanoseconds per round.
    pub fn ns_per_round(&self) -> f64 {
        self.in_round.as_nanos() as f64 / self.rounds.max(1) as f64
    }
}

impl<R: Rnic> Load<R> {
    /// Builds the dataplane over `nic` under `policy` with the tenants of `shape`.
    pub fn new(nic: R, policy: PolicyHost, shape: LoadShape) -> Result<Self, EngineError> {
        // Queues sized so that every data QP fits the shared CQs (the
        // paper's scale case has 8001 of them), as `perf-runner run` does.
        let qps = shape.tenants as usize * shape.qps as usize + 1;
        let mut cfg = DataplaneConfig::for_qps(qps);
        if let Some(d) = shape.sq_depth {
            cfg.sq_depth = d;
        }
        let mut dp = Dataplane::new(nic, policy, cfg)?;
        let mut tenants = Vec::new();
        let list = shape.post_list.clamp(1, shape.depth.max(1));
        let mut specs = vec![(shape.qps, shape.msg, shape.depth, list); shape.tenants as usize];
        match shape.sensitive {
            Sensitive::None => {}
            Sensitive::Delay => specs.push((1, 16, 1, 1)),
            Sensitive::Message => specs.push((1, 16, 128, 1)),
        }
        for (i, (qps, size, depth, list)) in specs.into_iter().enumerate() {
            let handle = dp.add_tenant(&format!("t{i}"), 1)?;
            let mr = dp.reg_mr(handle.id, size as usize)?;
            for _ in 0..qps {
                let (index, ep) = dp.create_qp(handle.id, 0)?;
                dp.connect_qp(handle.id, index, ep)?;
            }
            tenants.push(LoadTenant {
                remote: mr.remote(0),
                handle,
                mr,
                outstanding: vec![0; qps as usize],
                size,
                depth,
                list,
            });
        }
        Ok(Load { dp, tenants, next_wr: 0, list: Vec::new(), done: VecDeque::new() })
    }

    /// Reaps completions and tops every QP up to its depth, a post list at
    /// a time.
    fn play_tenants(&mut self) -> u64 {
        let mut done = 0;
        for t in &mut self.tenants {
            while t.handle.poll_into(1024, &mut self.done) > 0 {
                for c in self.done.drain(..) {
                    if let Some(o) = t.outstanding.get_mut(c.qp as usize) {
                        *o = o.saturating_sub(1);
                    }
                    done += 1;
                }
            }
            for qp in 0..t.outstanding.len() {
                while t.outstanding[qp] + t.list <= t.depth {
                    self.list.clear();
                    for _ in 0..t.list {
                        self.next_wr += 1;
                        self.list.push(WorkRequest::write(self.next_wr, qp as u32, t.mr, t.size, t.remote));
                    }
                    if t.handle.post_list(&self.list).is_err() {
                        break;
                    }
                    t.outstanding[qp] += t.list;
                }
            }
        }
        done
    }

    /// Plays the tenants once and runs one round: the wall time of the
    /// round alone.
    pub fn step(&mut self) -> Result<Duration, RnicError> {
        self.play_tenants();
        let t = Instant::now();
        self.dp.round()?;
        Ok(t.elapsed())
    }

    /// Plays the tenants, takes their requests in with an arrival step
    /// ([`Dataplane::step_arrivals`]), whose wall time it returns, and
    /// reaps what completed with a round (untimed).
    pub fn arrival_step(&mut self) -> Result<Duration, RnicError> {
        self.play_tenants();
        let t = Instant::now();
        self.dp.step_arrivals()?;
        let d = t.elapsed();
        self.dp.round()?;
        Ok(d)
    }

    /// Plays the tenants and runs the loop for `budget` of wall time (at
    /// least one round), after `warmup` of the same untimed.
    pub fn drive(&mut self, warmup: Duration, budget: Duration) -> Result<DriveSample, RnicError> {
        let t0 = Instant::now();
        while t0.elapsed() < warmup {
            self.play_tenants();
            self.dp.round()?;
        }
        let c0 = self.dp.counters();
        let mut s = DriveSample::default();
        let t1 = Instant::now();
        loop {
            s.messages += self.play_tenants();
            let t = Instant::now();
            self.dp.round()?;
            s.in_round += t.elapsed();
            s.rounds += 1;
            if t1.elapsed() >= budget {
                break;
            }
        }
        let c = self.dp.counters();
        s.wqes = c.wqes_posted - c0.wqes_posted;
        s.zero_weight = c.zero_weight_wrs - c0.zero_weight_wrs;
        Ok(s)
    }
}
