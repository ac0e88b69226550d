//! Hot policy swaps under traffic, on the simulated NIC in virtual time:
//! - a property test over random workloads, random swap times and random
//!   sequences of policies (native `perf`, `passthrough`, the forced-split
//!   test policy with one active QP per tenant, `wasm:perf`, and a module
//!   that traps in its first tick): every request completes exactly once,
//!   in per-QP order, with its bytes at both hosts, and every swap is
//!   recorded;
//! - swaps in the middle of in-NIC hand-offs (one active QP, rotated after
//!   every request) lose and strand nothing;
//! - a module of another ABI version is refused, the running policy stays
//!   and says why;
//! - the loader thread: `request_swap` switches at a round boundary
//!   once the loader is done, and the module cache serves a second load;
//!   tenants and QPs added while it loads are announced at the switch;
//! - in real time, swaps through a `SwapHandle` while the loop spins on
//!   its own thread and a tenant thread streams;
//! - a swap cancelled through its ticket before the loop took it is
//!   recorded refused and never applies; one the loop took cannot be
//!   cancelled.

use crate::common;

use common::wat::Wat;
use common::*;
use perf_dataplane::engine::{DataplaneConfig, SwapOutcome};
use perf_dataplane::policy::cache::ModuleCache;
use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::{adversarial, embedded, FaultKind, WasmLimits};
use perf_dataplane::policy::PolicyHost;

/// The policies a swap may go to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum To {
    Perf,
    Passthrough,
    Force,
    WasmPerf,
    /// The flagship: fair admission under a shared in-flight budget.
    FairShare,
    /// `policies/adversarial`'s `trap_tick`: accepted, then traps in its
    /// first tick, and the host falls back.
    Trapping,
}

impl To {
    fn spec(self) -> PolicySpec {
        match self {
            To::Perf => "perf".into(),
            To::Passthrough => "passthrough".into(),
            To::Force => PolicySpec::Host(Box::new(PolicyHost::new(Box::new(ForceSplit::HEAVY)))),
            To::WasmPerf => "wasm:perf".into(),
            To::FairShare => "fairshare".into(),
            To::Trapping => adversarial::path("trap_tick").into(),
        }
    }
}

fn to() -> impl Strategy<Value = To> {
    prop_oneof![
        Just(To::Perf),
        Just(To::Passthrough),
        Just(To::Force),
        Just(To::WasmPerf),
        Just(To::FairShare),
        Just(To::Trapping)
    ]
}

fn start() -> impl Strategy<Value = Pol> {
    prop_oneof![
        Just(Pol::Passthrough),
        Just(Pol::Perf),
        Just(Pol::Force(ForceSplit::HEAVY)),
        Just(Pol::Named("fairshare"))
    ]
}

/// Runs a random case with `swaps` (time in ns, policy) scheduled, and
/// checks the swap records.
fn run_swapping(qps: &[u32], ops: &[GenOp], seed: u64, pol: Pol, swaps: &[(u64, To)]) -> Result<(), TestCaseError> {
    let rig = run_case_with(qps, ops, seed, pol, DataplaneConfig::default(), 200_000_000, |r| {
        let mut sorted = swaps.to_vec();
        sorted.sort_by_key(|s| s.0);
        for (at, to) in sorted {
            r.dp.schedule_swap(at, to.spec(), WasmLimits::default()).expect("schedule");
        }
    })?;
    let recs = rig.dp.swaps();
    prop_assert_eq!(recs.len(), swaps.len(), "every swap is recorded: {:?}", recs);
    for r in recs {
        prop_assert_eq!(&r.outcome, &SwapOutcome::Accepted, "{:?}", r);
    }
    // Swap times are when the loop switched: in order, never early.
    let mut want: Vec<u64> = swaps.iter().map(|s| s.0).collect();
    want.sort();
    for (r, at) in recs.iter().zip(&want) {
        prop_assert!(r.at_ns >= *at, "swap at {} ns, scheduled for {} ns", r.at_ns, at);
    }
    prop_assert!(recs.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
    let traps = rig.dp.policy().exits().iter().filter(|e| e.policy == "hostile").count();
    let trapping = swaps.iter().filter(|s| s.1 == To::Trapping).count();
    // Each trapping module that got to tick trapped (one installed after the
    // traffic ended still ticks: the loop runs until idle).
    prop_assert!(traps <= trapping);
    // The last swap decides what runs at the end (a trapping module ticked
    // at once, trapped, and left passthrough).
    let last = swaps.iter().max_by_key(|s| s.0).map(|s| s.1);
    let running = rig.dp.policy().name();
    let want = match last {
        Some(To::Perf | To::WasmPerf) => "perf",
        Some(To::Force) => "force-split",
        Some(To::FairShare) => "fairshare",
        _ => "passthrough",
    };
    prop_assert_eq!(running, want);
    for e in rig.dp.policy().exits() {
        prop_assert_eq!((e.kind, e.hook), (FaultKind::Trap, "on_tick"), "{:?}", e);
    }
    Ok(())
}

proptest! {
    #![proptest_config(seeded_config(16, 0x5EED_0004))]

    /// Random workloads with policy swaps at random times keep
    /// exactly-once, per-QP order and the bytes.
    #[test]
    fn swaps_at_random_times_lose_duplicate_and_reorder_nothing(
        (qps, ops, seed) in case(),
        pol in start(),
        swaps in prop::collection::vec((0u64..160_000, to()), 1..6),
    ) {
        run_swapping(&qps, &ops, seed, pol, &swaps)?;
    }
}

/// One tenant, four QPs, one active at a time and rotated after every
/// request (an in-NIC hand-off per request), swapped to passthrough and
/// back every 7 us while hand-offs run: all requests complete in order with
/// their bytes.
#[test]
fn swaps_in_the_middle_of_handoffs_strand_nothing() {
    let rotate = ForceSplit { chunk: 4096, zw: 2, cap: 1, quantum_requests: 1, quantum_bytes: 0 };
    let ops: Vec<GenOp> = (0..48)
        .map(|i| GenOp { tenant: 0, qp: i % 4, read: i % 5 == 0, size: 20_000 + 997 * i, burst: (i / 12) as u64 })
        .collect();
    let rig = run_case_with(&[4], &ops, 7, Pol::Force(rotate), DataplaneConfig::default(), 200_000_000, |r| {
        for k in 1..=20u64 {
            let spec = if k % 2 == 1 {
                PolicySpec::from("passthrough")
            } else {
                PolicySpec::Host(Box::new(PolicyHost::new(Box::new(rotate))))
            };
            r.dp.schedule_swap(k * 7_000, spec, WasmLimits::default()).expect("schedule");
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let c = rig.dp.counters();
    assert!(c.handoffs > 0, "rotation happened: {c:?}");
    assert_eq!(rig.dp.swaps().len(), 20);
    assert!(rig.dp.swaps().iter().all(|s| s.outcome == SwapOutcome::Accepted));
}

/// A module built for ABI 2.0 is refused at the swap: the running `perf`
/// keeps running, the record says why, traffic completes.
#[test]
fn a_refused_module_leaves_the_old_policy_running() {
    let bad = Wat { version: 2 << 16, ..Wat::default() }.bytes();
    let ops: Vec<GenOp> = (0..24)
        .map(|i| GenOp { tenant: i % 2, qp: 0, read: false, size: 1 + 9_000 * i as u32, burst: (i / 8) as u64 })
        .collect();
    let rig = run_case_with(&[1, 1], &ops, 11, Pol::Perf, DataplaneConfig::default(), 200_000_000, |r| {
        let spec = PolicySpec::Bytes { label: "abi2.wasm".into(), bytes: bad.into() };
        r.dp.schedule_swap(30_000, spec, WasmLimits::default()).expect("schedule");
        r.dp.schedule_swap(40_000, PolicySpec::from("no/such/policy.wasm"), WasmLimits::default()).expect("schedule");
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let recs = rig.dp.swaps();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!((recs[0].from.as_str(), recs[0].to.as_str()), ("perf", "abi2.wasm"));
    match &recs[0].outcome {
        SwapOutcome::Refused(why) => assert!(why.contains("ABI 2.0"), "{why}"),
        o => panic!("accepted a module of ABI 2.0: {o:?}"),
    }
    match &recs[1].outcome {
        SwapOutcome::Refused(why) => assert!(why.contains("no/such/policy.wasm"), "{why}"),
        o => panic!("accepted a missing file: {o:?}"),
    }
    assert_eq!(rig.dp.policy().name(), "perf");
    assert!(!rig.dp.policy().is_wasm());
    assert!(rig.dp.policy().exit_info().is_none());
}

/// `request_swap` goes through the loader thread: the loop keeps running
/// rounds while it loads, switches once it is ready, and the new policy
/// has ticked in the round it was installed. A second load of the same
/// module is served by the cache.
#[test]
fn request_swap_loads_off_the_loop_and_the_cache_serves_the_second_load() {
    let bytes = embedded::by_name("perf").expect("embedded perf");
    let mut rig = Rig::new(3, Pol::Passthrough, DataplaneConfig::default());
    rig.tenant("a", 2, 1 << 16);
    let ticks = rig.dp.counters().ticks;
    let label = "perf (bytes)".to_string();
    rig.dp
        .request_swap(PolicySpec::Bytes { label: label.clone(), bytes: bytes.into() }, WasmLimits::default())
        .expect("request");
    let mut rounds = 0u64;
    while rig.dp.pending_swaps() > 0 {
        rig.dp.round().expect("round");
        rounds += 1;
        assert!(rounds < 50_000_000, "the loader never answered");
        if rounds.is_multiple_of(1000) {
            std::thread::yield_now();
        }
    }
    assert_eq!(rig.dp.policy().name(), "perf");
    assert!(rig.dp.policy().is_wasm());
    assert!(rig.dp.counters().ticks > ticks, "the new policy ticked at once");
    let rec = &rig.dp.swaps()[0];
    assert_eq!(
        (rec.from.as_str(), rec.to.as_str(), &rec.outcome),
        ("passthrough", label.as_str(), &SwapOutcome::Accepted)
    );
    // The same bytes again: a cache hit.
    let hits = ModuleCache::global().counters().hits;
    rig.dp.request_swap(PolicySpec::Bytes { label, bytes: bytes.into() }, WasmLimits::default()).expect("request");
    while rig.dp.pending_swaps() > 0 {
        rig.dp.round().expect("round");
        std::thread::yield_now();
    }
    assert!(rig.dp.swaps()[1].cached);
    assert!(ModuleCache::global().counters().hits > hits);
}

/// A native policy that records every `on_tenant` call.
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<perf_policy_sdk::TenantInfo>>>);

impl Policy for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn on_tenant(&mut self, t: &perf_policy_sdk::TenantInfo) {
        self.0.lock().expect("lock").push(*t);
    }
}

/// The new policy is told about every tenant and QP: those the loop had
/// when it asked for the swap (by the loader) and those added while the
/// loader worked (by the loop, at the switch).
#[test]
fn tenants_and_qps_added_during_a_load_are_announced_at_the_switch() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut rig = Rig::new(5, Pol::Perf, DataplaneConfig::default());
    rig.tenant("a", 2, 4096);
    let spec = PolicySpec::Host(Box::new(PolicyHost::new(Box::new(Recorder(seen.clone())))));
    rig.dp.request_swap(spec, WasmLimits::default()).expect("request");
    // Added after the request: the loader's snapshot cannot have them.
    rig.tenant("b", 3, 4096);
    rig.dp.create_qp(0, 0).expect("a third QP for tenant a");
    while rig.dp.pending_swaps() > 0 {
        rig.dp.round().expect("round");
        std::thread::yield_now();
    }
    assert_eq!(rig.dp.policy().name(), "recorder");
    let seen = seen.lock().expect("lock").clone();
    let last = |t: u32| seen.iter().rfind(|i| i.tenant == t).map(|i| i.qps);
    assert_eq!((last(0), last(1)), (Some(3), Some(3)), "{seen:?}");
}

/// Real time: the loop spins on its own thread, a tenant thread streams
/// WRITEs on two QPs, and the main thread swaps the policy through a
/// [`SwapHandle`] five times (one of them to a module that traps): every
/// request completes once, successfully, in per-QP order, and every swap
/// is recorded.
#[test]
fn swaps_through_a_handle_while_the_pinned_loop_runs() {
    use perf_dataplane::rnic::sim::{ClockMode, RnicProfile};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let f = SimFabric::new(RnicProfile::cx6_100g(), 2, 3, ClockMode::Wall);
    let mut dp = Dataplane::new(f.nic(0), PolicyHost::load("perf").expect("perf"), DataplaneConfig::default())
        .expect("dataplane");
    let h = dp.add_tenant("t", 1).expect("tenant");
    let mr = dp.reg_mr(h.id, 1 << 16).expect("mr");
    let mut side = Side::new(f.nic(1), 2, 1 << 16, 0, 64).expect("peer");
    for i in 0..2 {
        let (index, ep) = dp.create_qp(h.id, 0).expect("qp");
        dp.connect_qp(h.id, index, endpoint(&side.nic, side.qps[i].qp_num)).expect("connect");
        bring_up(&mut side.nic, side.qps[i].handle, ep, all_access()).expect("bring up");
    }
    let remote = side.mr.remote(0);
    let swaps = dp.swap_handle();
    let stop = Arc::new(AtomicBool::new(false));
    let lp = dp.run_pinned(None, stop.clone()).expect("spawn");
    // The tenant streams until told to stop, then drains.
    let done_posting = Arc::new(AtomicBool::new(false));
    let quit = done_posting.clone();
    let app = std::thread::spawn(move || {
        let mut ledger = Ledger::default();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next = 0u64;
        while Instant::now() < deadline {
            let stopping = quit.load(Ordering::Relaxed);
            if stopping && got.len() as u64 == next {
                break;
            }
            if !stopping && next - got.len() as u64 <= 32 {
                let op = RequestOp::Write { remote };
                let wr =
                    WorkRequest { wr_id: next, qp: (next % 2) as u32, op, mr, offset: 0, len: 65_536, posted_ns: 0 };
                if h.post(wr).is_ok() {
                    ledger.record(&wr);
                    next += 1;
                }
            }
            match h.poll() {
                Some(c) => got.push(c),
                None => std::thread::yield_now(),
            }
        }
        let last_ns = got.iter().map(|c| c.completed_ns).max().unwrap_or(0);
        (ledger.check(&got, true), got.len(), last_ns)
    });
    let trapping = adversarial::path("trap_tick");
    let order = ["wasm:perf", "passthrough", "perf", trapping.to_str().expect("utf-8"), "wasm:perf"];
    for (k, to) in order.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(10));
        assert!(swaps.request(PolicySpec::from(*to), WasmLimits::default()).is_some());
        // One at a time, so that each policy gets to run.
        let t0 = Instant::now();
        while swaps.recorded() <= k as u64 {
            assert!(t0.elapsed() < Duration::from_secs(30), "swap {k} to {to} never applied");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    done_posting.store(true, Ordering::Relaxed);
    let (result, completed, last_ns) = app.join().expect("tenant thread");
    stop.store(true, Ordering::Relaxed);
    let (dp, _) = lp.join().expect("loop thread").expect("loop");
    result.unwrap_or_else(|e| panic!("{e}"));
    assert!(completed > 100, "{completed} requests");
    let recs = dp.swaps();
    assert_eq!(recs.len(), 5, "{recs:?}");
    assert!(recs.iter().all(|r| r.outcome == SwapOutcome::Accepted), "{recs:?}");
    assert_eq!(dp.policy().name(), "perf");
    assert!(
        dp.policy().exits().iter().any(|e| e.policy == "hostile"),
        "{:?} {recs:?} {:?}",
        dp.policy().exits(),
        dp.counters()
    );
    // Traffic ran across every swap.
    assert!(recs.iter().all(|r| r.at_ns < last_ns), "swaps {recs:?}, last completion at {last_ns} ns");
}

/// Runs rounds until no swap is pending (the loader answered).
fn settle_swaps(rig: &mut Rig) {
    let mut rounds = 0u64;
    while rig.dp.pending_swaps() > 0 || rounds == 0 {
        rig.dp.round().expect("round");
        rounds += 1;
        assert!(rounds < 50_000_000, "the loader never answered");
        if rounds.is_multiple_of(1000) {
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_cancelled_swap_is_recorded_refused_and_never_applies() {
    let mut rig = Rig::new(3, Pol::Passthrough, DataplaneConfig::default());
    rig.tenant("a", 1, 4096);
    let handle = rig.dp.swap_handle();
    let ticket = handle.request(PolicySpec::Named("perf".into()), WasmLimits::default()).expect("asked");
    assert!(ticket.cancel(), "cancelled before the loop took it");
    settle_swaps(&mut rig);
    assert_eq!(rig.dp.policy().name(), "passthrough", "the cancelled swap never applies");
    let rec = rig.dp.swaps().last().expect("recorded");
    assert!(matches!(&rec.outcome, SwapOutcome::Refused(why) if why.contains("cancelled")), "{rec:?}");
    assert_eq!(handle.recorded(), 1);
    // Taken, it applies, and a late cancel says so.
    let ticket = handle.request(PolicySpec::Named("perf".into()), WasmLimits::default()).expect("asked");
    while handle.recorded() < 2 {
        settle_swaps(&mut rig);
    }
    assert!(!ticket.cancel(), "the loop took it: too late to cancel");
    assert_eq!(rig.dp.policy().name(), "perf");
}
