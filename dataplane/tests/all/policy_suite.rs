//! The dataplane's pacing and the `slo` policy's control loop, through the
//! public API on the simulated NIC in virtual time (deterministic):
//! - a tenant paced by its policy's token bucket gets the bucket's rate,
//!   even alone on an idle NIC (the loop's timer wakes the driver when the
//!   debt is paid), and a paused tenant posts nothing until resumed;
//! - `slo` beside a bulk tenant converges: its chunk / zero-weight setting
//!   settles and the delay-sensitive tenant's latency ends within target.
//!   `cargo test --release -p perf-dataplane --test policy_suite -- --nocapture
//!   slo_converges` prints the trajectory table of `docs/policies.md`.

use perf_dataplane::engine::{Dataplane, DataplaneConfig, RequestOp, TenantHandle, WorkRequest};
use perf_dataplane::policy::PolicyHost;
use perf_dataplane::rnic::connect::{bring_up, endpoint};
use perf_dataplane::rnic::sim::{SimFabric, SimRnic, PS_PER_NS};
use perf_dataplane::rnic::{AccessFlags, Mr};
use perf_dataplane::traffic::Side;
use perf_policy_sdk::{Pacing, Policy, TenantPlan, TenantStats};

/// Most wake-ups one run may take (a hang is a failure, not a stuck test).
const MAX_WAKEUPS: usize = 50_000_000;

/// One closed-loop tenant: keeps `depth` WRITEs of `size` bytes
/// outstanding on one QP.
struct Load {
    h: TenantHandle,
    mr: Mr,
    side: Side<SimRnic>,
    size: u32,
    depth: u32,
    outstanding: u32,
    next_id: u64,
    /// Payload bytes, completions and summed post-to-completion latency.
    bytes: u64,
    done: u64,
    lat_ns: u64,
    /// Post-to-completion latencies since the trajectory last took them.
    window: Vec<u64>,
}

/// A dataplane on host 0 of a fabric pair with closed-loop tenants.
struct Bench {
    f: SimFabric,
    dp: Dataplane<SimRnic>,
    loads: Vec<Load>,
}

impl Bench {
    fn new(policy: PolicyHost) -> Bench {
        let f = SimFabric::pair(1);
        let dp = Dataplane::new(f.nic(0), policy, DataplaneConfig::default()).expect("dataplane");
        Bench { f, dp, loads: Vec::new() }
    }

    fn load(&mut self, name: &str, size: u32, depth: u32) {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let h = self.dp.add_tenant(name, 1).expect("add_tenant");
        let mr = self.dp.reg_mr(h.id, size as usize).expect("reg_mr");
        let mut side = Side::new(self.f.nic(1), 1, size as usize, 0, 1024).expect("peer side");
        let (index, ep) = self.dp.create_qp(h.id, 0).expect("create_qp");
        let peer = side.qps[0];
        self.dp.connect_qp(h.id, index, endpoint(&side.nic, peer.qp_num)).expect("connect_qp");
        bring_up(&mut side.nic, peer.handle, ep, access).expect("peer bring_up");
        self.loads.push(Load {
            h,
            mr,
            side,
            size,
            depth,
            outstanding: 0,
            next_id: 0,
            bytes: 0,
            done: 0,
            lat_ns: 0,
            window: Vec::new(),
        });
    }

    fn now_ns(&self) -> u64 {
        self.f.now_ns()
    }

    /// Runs until `until_ns`, waking at NIC events and at the loop's timer.
    fn run_until(&mut self, until_ns: u64) {
        for _ in 0..MAX_WAKEUPS {
            loop {
                // The tenants first, so that the loop's first tick sees their
                // traffic (as `traffic::run_virtual` orders a scenario's apps).
                let mut did = false;
                let now = self.f.now_ns();
                for l in &mut self.loads {
                    while let Some(c) = l.h.poll() {
                        assert!(c.status.is_ok(), "{c:?}");
                        l.outstanding -= 1;
                        l.bytes += c.byte_len as u64;
                        l.done += 1;
                        l.lat_ns += c.completed_ns - c.posted_ns;
                        l.window.push(c.completed_ns - c.posted_ns);
                        did = true;
                    }
                    while l.outstanding < l.depth {
                        l.next_id += 1;
                        let remote = l.side.mr.remote(0);
                        let wr = WorkRequest {
                            wr_id: l.next_id,
                            qp: 0,
                            op: RequestOp::Write { remote },
                            mr: l.mr,
                            offset: 0,
                            len: l.size,
                            posted_ns: now,
                        };
                        l.h.post(wr).expect("post");
                        l.outstanding += 1;
                        did = true;
                    }
                }
                while self.dp.round().expect("round") {
                    did = true;
                }
                if !did {
                    break;
                }
            }
            let now = self.now_ns();
            if now >= until_ns {
                return;
            }
            let limit = until_ns.min(self.dp.next_timer_ns()).max(now + 1);
            if !self.f.step_until_visible(limit * PS_PER_NS) {
                self.f.advance_to_ns(limit);
            }
        }
        panic!("not at {until_ns} ns after {MAX_WAKEUPS} wake-ups");
    }

    /// Each load's (bytes, completions, summed latency) so far.
    fn totals(&self) -> Vec<(u64, u64, u64)> {
        self.loads.iter().map(|l| (l.bytes, l.done, l.lat_ns)).collect()
    }
}

/// Paces every tenant with one fixed [`Pacing`].
struct Paced(Pacing);

impl Policy for Paced {
    fn name(&self) -> &str {
        "paced"
    }
    fn on_tick(&mut self, _now: u64, _stats: &[TenantStats], plans: &mut [TenantPlan]) {
        plans.fill(TenantPlan::PASSTHROUGH);
    }
    fn on_pacing(&mut self, _now: u64, pacing: &mut [Pacing]) {
        pacing.fill(self.0);
    }
}

#[test]
fn a_paced_tenant_gets_its_rate_even_alone() {
    // 2.5 GB/s = 20 Gb/s, a fifth of the link, 1 MB burst; 64 KiB WRITEs.
    let rate = 2_500_000_000u64;
    let mut b = Bench::new(PolicyHost::new(Box::new(Paced(Pacing::rate(rate, 1 << 20)))));
    b.load("B", 65536, 64);
    b.run_until(2_000_000);
    let (bytes0, _, _) = b.totals()[0];
    b.run_until(12_000_000);
    let (bytes1, _, _) = b.totals()[0];
    let got = (bytes1 - bytes0) as f64 / 0.010;
    assert!((got / rate as f64 - 1.0).abs() < 0.02, "paced at {rate} B/s, got {got:.0} B/s");
    assert!(b.dp.counters().paced_holds > 0);
}

/// A paced tenant that goes quiet leaves no timer in the past: the debt
/// it pays off with nothing to post is no wake-up (it was one, and a
/// virtual-time driver then stepped one nanosecond at a time).
#[test]
fn a_paced_tenant_that_goes_quiet_leaves_no_timer_in_the_past() {
    let mut b = Bench::new(PolicyHost::new(Box::new(Paced(Pacing::rate(1_000_000_000, 4096)))));
    b.load("B", 65536, 4);
    b.run_until(1_000_000);
    assert!(b.dp.counters().paced_holds > 0);
    b.loads[0].depth = 0;
    b.run_until(2_000_000);
    assert_eq!(b.loads[0].outstanding, 0);
    let (timer, now) = (b.dp.next_timer_ns(), b.now_ns());
    assert!(timer > now, "the loop's next timer, {timer} ns, is not after now, {now} ns");
}

#[test]
fn a_paused_tenant_posts_nothing_until_resumed() {
    let paused = Pacing { paused: 1, ..Pacing::UNLIMITED };
    let mut b = Bench::new(PolicyHost::new(Box::new(Paced(paused))));
    b.load("B", 65536, 8);
    b.run_until(3_000_000);
    // The first round's posts go out before the first tick pauses the
    // tenant; nothing after them.
    let (bytes0, _, _) = b.totals()[0];
    assert!(bytes0 <= 8 * 65536, "{bytes0} bytes through a paused tenant");
    b.run_until(6_000_000);
    assert_eq!(b.totals()[0].0, bytes0, "a paused tenant moved bytes");
    b.dp.swap_policy(PolicyHost::builtin("passthrough").expect("passthrough"));
    b.run_until(8_000_000);
    assert!(b.totals()[0].0 > bytes0 + 100 * 65536, "resumed tenant did not run");
}

/// One row of the `slo` trajectory: the window's end, the bulk tenant's
/// setting, the delay-sensitive tenant's mean latency and the bulk Gb/s.
#[derive(Debug, Clone, Copy)]
struct Row {
    t_ms: f64,
    chunk: u32,
    zero_weight: u32,
    d_lat_ns: f64,
    b_gbps: f64,
    /// D's p99 post-to-completion latency over the ms, ns.
    d_p99_ns: f64,
}

/// Runs `slo` with a 1 MB bulk tenant (128 outstanding) beside a sparse
/// 16 B WRITE tenant (one outstanding) for `ms` ms, one row per ms.
fn slo_trajectory(ms: u64) -> Vec<Row> {
    let mut b = Bench::new(PolicyHost::builtin("slo").expect("built-in slo"));
    b.load("B_single", 1 << 20, 128);
    b.load("D_single", 16, 1);
    let mut rows = Vec::new();
    let mut last = b.totals();
    for k in 1..=ms {
        b.run_until(k * 1_000_000);
        let now = b.totals();
        let plan = b.dp.plans()[0];
        let (dn, dl) = (now[1].1 - last[1].1, now[1].2 - last[1].2);
        let mut window = std::mem::take(&mut b.loads[1].window);
        window.sort_unstable();
        let d_p99_ns = window.get((window.len() * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or(0) as f64;
        rows.push(Row {
            d_p99_ns,
            t_ms: k as f64,
            chunk: plan.split.chunk_bytes,
            zero_weight: plan.split.zero_weight_per_chunk,
            d_lat_ns: if dn > 0 { dl as f64 / dn as f64 } else { 0.0 },
            b_gbps: (now[0].0 - last[0].0) as f64 * 8.0 / 1e6,
        });
        last = now;
    }
    rows
}

#[test]
fn slo_converges() {
    let target = perf_policy_slo::SloParams::default().target_ns as f64;
    let rows = slo_trajectory(40);
    println!("| t (ms) | chunk (B) | zero-weight WRs | D mean post-to-completion (ns) | D p99 (ns) | B (Gb/s) |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {:.0} | {} | {} | {:.0} | {:.0} | {:.2} |",
            r.t_ms, r.chunk, r.zero_weight, r.d_lat_ns, r.d_p99_ns, r.b_gbps
        );
    }
    // It ends looser than PeRF's hand-tuned (16 KB, 16): the target leaves
    // room for fewer zero-weight WRs or bigger chunks.
    let last = rows[rows.len() - 1];
    assert!(last.zero_weight < 16 && last.chunk >= 16384, "did not relax PeRF's setting: {last:?}");
    // Settled: the last 15 ms use at most two adjacent settings of the
    // ladder (the one that meets the target and the next looser one, which
    // its p99 touches).
    let tail = &rows[rows.len() - 15..];
    let level = |r: &Row| {
        perf_policy_slo::LADDER.iter().position(|&s| s == (r.chunk, r.zero_weight)).expect("a ladder setting")
    };
    let (lo, hi) = (tail.iter().map(level).min().unwrap_or(0), tail.iter().map(level).max().unwrap_or(0));
    assert!(hi - lo <= 1, "the last 15 ms moved over more than two settings: {tail:?}");
    // Within target over the last 10 ms.
    // Within target (the p99 it steers by) over the last 10 ms, ms by ms, up
    // to the 1/16 resolution of the per-tick p99 the policy sees: it steps
    // back only after a tick over the target, so it touches the target.
    let tail = &rows[rows.len() - 10..];
    let worst = tail.iter().map(|r| r.d_p99_ns).fold(0.0, f64::max);
    assert!(worst <= target * (1.0 + 1.0 / 16.0), "D p99 {worst:.0} ns in one of the last 10 ms, target {target} ns");
}

/// Caps every tenant to one active QP rotated after 2 requests or 20 us (4 KiB chunks,
/// two zero-weight WRs each), and pauses them all while `paused` is set.
struct RotateOrPause {
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Policy for RotateOrPause {
    fn name(&self) -> &str {
        "rotate-or-pause"
    }
    fn on_tick(&mut self, _now: u64, _stats: &[TenantStats], plans: &mut [TenantPlan]) {
        plans.fill(TenantPlan {
            max_active_qps: 1,
            quantum_requests: 2,
            quantum_ns: 20_000,
            split: perf_policy_sdk::SplitPlan { chunk_bytes: 4096, zero_weight_per_chunk: 2 },
            split_threshold: 1,
            ..TenantPlan::PASSTHROUGH
        });
    }
    fn on_pacing(&mut self, _now: u64, pacing: &mut [Pacing]) {
        let paused = self.paused.load(std::sync::atomic::Ordering::Relaxed) as u32;
        pacing.fill(Pacing { paused, ..Pacing::UNLIMITED });
    }
    fn tick_interval_ns(&self) -> u64 {
        50_000
    }
}

/// A tenant its policy pauses posts nothing, not even hand-offs: its active
/// QP set stands still while paused (a rotation would post a WAIT and a
/// SEND_ENABLE that move no data, for every paused tenant every quantum:
/// most of the loop's work in the paper's scale case, where PeRF pauses
/// all but one of 1000 bulk tenants). Resumed, it rotates again, and every
/// request completes once, with its bytes, in per-QP order.
#[test]
fn a_paused_tenant_posts_no_handoffs_and_resumes_rotating() {
    use crate::common::{post, Ledger, Rig};
    let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let policy = RotateOrPause { paused: paused.clone() };
    let mut rig = Rig::new(5, crate::common::Pol::Passthrough, DataplaneConfig::default());
    rig.dp.swap_policy(PolicyHost::new(Box::new(policy)));
    let t = rig.tenant("multi", 4, 1 << 16);
    let mut ledger = Ledger::default();
    let mut id = 0;
    for _ in 0..48 {
        for qp in 0..4 {
            let wr = rig.wr(t, id, qp, false, 0, 1 << 16);
            ledger.record(&wr);
            post(&rig.tenants[t].h, wr);
            id += 1;
        }
    }
    rig.idle_for(300_000);
    let running = rig.dp.counters();
    assert!(running.handoffs > 5, "the capped tenant rotates: {} hand-offs", running.handoffs);
    paused.store(true, std::sync::atomic::Ordering::Relaxed);
    // The next tick pauses it; what it posted before drains.
    rig.idle_for(200_000);
    let before = rig.dp.counters();
    rig.idle_for(1_000_000);
    let during = rig.dp.counters();
    assert_eq!(during.handoffs, before.handoffs, "hand-offs while paused");
    assert_eq!(during.wqes_posted, before.wqes_posted, "WQEs posted while paused");
    assert!(rig.tenants[t].got.len() < ledger.len(), "the test pauses the tenant before it is done");
    paused.store(false, std::sync::atomic::Ordering::Relaxed);
    rig.drive(100_000_000, |r| (r.tenants[t].got.len() < ledger.len()).then(|| r.now_ns() + 100_000));
    assert!(rig.dp.counters().handoffs > during.handoffs, "resumed, it rotates again");
    ledger.check(&rig.tenants[t].got, true).unwrap_or_else(|e| panic!("{e}"));
}
