//! The dataplane loop through its public API, on the simulated NIC in
//! virtual time (deterministic for a seed): the dataplane runs on host 0 of
//! a [`SimFabric::pair`], each tenant's peer [`Side`] on host 1, as
//! `perf-runner run` wires a scenario.
//!
//! Covered, each under `passthrough` and under PeRF-style splitting (the
//! built-in `perf` policy, and a test policy, [`ForceSplit`], that splits
//! every message and caps every tenant to one active QP with small rotation
//! quanta, so chunking, zero-weight WRs and in-NIC hand-offs through the
//! control QPs are exercised on every request):
//! - exactly-once completion with the right byte count and status under
//!   random workloads (proptest), per-QP completion order, no completion a
//!   tenant never posted (hidden completions stay hidden), and the bytes at
//!   both hosts' regions;
//! - data integrity of a 1 MiB WRITE and a 1 MiB READ through 16 KiB chunks;
//! - work conservation: two bulk tenants with rotation keep the wire busy
//!   and no QP with work is stranded;
//! - back-pressure: a full request queue refuses posts, nothing accepted is
//!   lost, and a full completion channel loses nothing either;
//! - a QP failed by a bad rkey: one error completion, flush errors after it,
//!   exactly once each, while other QPs keep completing.
//!
//! Every wait is bounded in virtual time and in loop iterations, so a hang
//! is a test failure, not a stuck test.

use crate::common;

use common::*;

proptest! {
    #![proptest_config(seeded_config(24, 0x5EED_0003))]

    /// Random workloads complete exactly once, in per-QP order, with their
    /// byte counts, never show a hidden completion, and move the right
    /// bytes; under every built-in policy, perf with parameters, and forced
    /// splitting with rotation.
    #[test]
    fn random_workloads_complete_exactly_once_in_order((qps, ops, seed) in case()) {
        let named = ["justitia", "weighted", "slo", "fairshare"].map(Pol::Named);
        for pol in BASE_POLICIES.into_iter().chain(named).chain([TIGHT_FAIRSHARE, ROTATE_EVERY_REQUEST]) {
            run_case(&qps, &ops, seed, pol)?;
        }
    }
}

// ---------------------------------------------------------------------------
// 1b. Hand-offs between QPs of one tenant, deterministically.
// ---------------------------------------------------------------------------

/// Four QPs of one tenant capped to one active QP, rotated after every
/// request: every rotation is an in-NIC hand-off through the control QP,
/// and all requests still complete in per-QP order with intact data.
#[test]
fn rotation_through_the_control_qp_keeps_order_and_data() {
    let pol = Pol::Force(ForceSplit { chunk: 4096, zw: 2, cap: 1, quantum_requests: 1, quantum_bytes: 0 });
    let (nqps, per_qp, size) = (4u32, 6usize, 40_000u32);
    let mut rig = Rig::new(11, pol, DataplaneConfig::default());
    let mem = nqps as usize * per_qp * size as usize;
    rig.tenant("rot", nqps, mem);
    let mut ledger = Ledger::default();
    for k in 0..per_qp {
        for q in 0..nqps {
            let slot = (k * nqps as usize + q as usize) * size as usize;
            rig.write_local(0, slot, &pattern(size as usize, slot as u64));
            let wr = rig.wr(0, app_wr_id(0, slot), q, false, slot as u64, size);
            post(&rig.tenants[0].h, wr);
            ledger.record(&wr);
        }
    }
    let n = ledger.len();
    rig.drive(50_000_000, |r| (r.tenants[0].got.len() < n).then_some(u64::MAX));
    rig.idle_for(100_000);
    ledger.check(&rig.tenants[0].got, true).unwrap();
    let c = rig.dp.counters();
    // At least one full rotation. (A QP re-enters the active set only once
    // its previous stream drained, so the active QP may keep the NIC for
    // several quanta when every other QP still has work in flight.)
    assert!(c.handoffs >= nqps as u64 - 1, "too few hand-offs for {n} requests: {c:?}");
    assert!(c.hidden_completions > 0 && c.zero_weight_wrs > 0, "{c:?}");
    assert_eq!(rig.read_peer(0, 0, mem), rig.read_local(0, 0, mem), "peer region differs from what was written");
}

/// A QP that comes to wait after the active QP has had its time quantum
/// alone takes the slot at once: with nobody waiting, an expiry would
/// rotate nothing, so the quantum's time runs on (and the loop arms no
/// timer for it) until a QP waits. Here QP 0 streams 64 KiB WRITEs faster
/// than the link from 0 to 125 us, and QP 1's one message comes at 50 us,
/// 10 us past the first 40 us quantum. It then waits only for what QP 0
/// had already posted (the hand-off's release follows it): 38 us. When the
/// quantum started again at each expiry with nobody waiting, it also
/// waited for the next expiry: 124 us.
#[test]
fn a_qp_that_comes_to_wait_after_the_quantum_ran_out_alone_takes_over_at_once() {
    let pol = Pol::Named(
        "perf:max_active_qps=1,quantum_ns=40000,quantum_requests=1000000,quantum_bytes=1000000000000,chunk_bytes=4096",
    );
    let stream = |burst| (0..8).map(move |_| GenOp { tenant: 0, qp: 0, read: false, size: 65536, burst });
    let mut ops: Vec<GenOp> = (0..5).flat_map(stream).collect();
    ops.push(GenOp { tenant: 0, qp: 1, read: false, size: 64, burst: 2 });
    let rig = run_case_with(&[2], &ops, 3, pol, DataplaneConfig::default(), 200_000_000, |_| {}).expect("runs");
    let late = rig.tenants[0].got.iter().find(|c| c.qp == 1).expect("QP 1's message completed");
    let wait = late.completed_ns - late.posted_ns;
    assert!(wait < 60_000, "QP 1 waited {wait} ns for the slot (posted at {} ns)", late.posted_ns);
    assert!(rig.dp.counters().handoffs >= 1, "{:?}", rig.dp.counters());
}

// ---------------------------------------------------------------------------
// 2. Data integrity through splitting.
// ---------------------------------------------------------------------------

const MIB: u32 = 1 << 20;

/// 16 KiB chunks with 16 zero-weight WRs each (the paper's parameters while
/// a sensitive tenant runs), no QP cap.
const SPLIT_16K: ForceSplit = ForceSplit { chunk: 16384, zw: 16, cap: 0, quantum_requests: 0, quantum_bytes: 0 };

/// Moves one 1 MiB message (WRITE or READ) of a pseudo-random pattern and
/// checks it landed byte-identical, in `want_data_wqes` chunks with
/// `want_zw` zero-weight WRs in all. With `warm`, a bulk stream of 1 MiB
/// WRITEs (4 deep, into the second half of the regions) runs for 2.1 ms
/// first, so that the built-in perf policy has classified the tenant as
/// bandwidth when the measured message goes; the stream stops as it does.
fn check_one_mib(pol: Pol, read: bool, warm: bool, want_data_wqes: u64, want_zw: u64) {
    let mut rig = Rig::new(5, pol, DataplaneConfig::default());
    rig.tenant("bulk", 1, 2 * MIB as usize);
    let data = pattern(MIB as usize, 0xB16);
    if read {
        rig.write_peer(0, 0, &data);
    } else {
        rig.write_local(0, 0, &data);
    }
    let warm_until = if warm { 2_100_000 } else { 0 };
    let mut ledger = Ledger::default();
    let mut next = 1000u64;
    let mut before = None;
    rig.drive(100_000_000, |r| {
        let got = r.tenants[0].got.len();
        if before.is_none() {
            if r.now_ns() < warm_until {
                while ledger.len() - got < 4 {
                    next += 1;
                    let wr = r.wr(0, next, 0, false, MIB as u64, MIB);
                    post(&r.tenants[0].h, wr);
                    ledger.record(&wr);
                }
                return Some(warm_until);
            }
            // Everything posted so far is in the NIC: count from here.
            before = Some(r.dp.counters());
            let wr = r.wr(0, 7, 0, read, 0, MIB);
            post(&r.tenants[0].h, wr);
            ledger.record(&wr);
        }
        (got < ledger.len()).then_some(u64::MAX)
    });
    rig.idle_for(100_000);
    ledger.check(&rig.tenants[0].got, true).unwrap_or_else(|e| panic!("{pol:?} read={read}: {e}"));
    let (before, c) = (before.expect("measured message posted"), rig.dp.counters());
    let got = if read { rig.read_local(0, 0, MIB as usize) } else { rig.read_peer(0, 0, MIB as usize) };
    assert!(got == data, "{pol:?} read={read}: the 1 MiB message did not land byte-identical");
    assert_eq!(c.data_wqes - before.data_wqes, want_data_wqes, "{pol:?} read={read}: data WQEs: {c:?}");
    assert_eq!(c.zero_weight_wrs - before.zero_weight_wrs, want_zw, "{pol:?} read={read}: zero-weight WRs: {c:?}");
    // Every WQE of the message but its last chunk is hidden; the zero-weight
    // WRs after that last chunk retire with the next signaled WQE, not yet.
    // (With warm-up, the stream's chunks still in flight retire here too.)
    let hidden = c.hidden_completions - before.hidden_completions;
    let zw_per_chunk = want_zw / want_data_wqes;
    let want_hidden = want_data_wqes - 1 + want_zw - zw_per_chunk;
    assert!(
        hidden >= want_hidden && (warm || hidden <= want_hidden + zw_per_chunk),
        "{pol:?} read={read}: {hidden} hidden completions, want {want_hidden}: {c:?}"
    );
    let last = rig.tenants[0].got.last().copied().expect("a completion");
    assert_eq!((last.wr_id, last.byte_len, last.status), (7, MIB, WcStatus::Success));
}

#[test]
fn a_1mib_write_lands_byte_identical_through_16k_chunks_and_zero_weight_wrs() {
    check_one_mib(Pol::Force(SPLIT_16K), false, false, 64, 64 * 16);
}

#[test]
fn a_1mib_read_lands_byte_identical_through_16k_chunks_and_zero_weight_wrs() {
    check_one_mib(Pol::Force(SPLIT_16K), true, false, 64, 64 * 16);
}

#[test]
fn a_1mib_write_and_read_land_byte_identical_whole_under_passthrough() {
    check_one_mib(Pol::Passthrough, false, false, 1, 0);
    check_one_mib(Pol::Passthrough, true, false, 1, 0);
}

/// The built-in perf policy splits a bandwidth tenant's messages into
/// 16 KiB chunks once it has classified it (after a tick of traffic).
#[test]
fn a_1mib_write_and_read_land_byte_identical_through_the_perf_policy_split() {
    check_one_mib(Pol::Perf, false, true, 64, 0);
    check_one_mib(Pol::Perf, true, true, 64, 0);
}

// ---------------------------------------------------------------------------
// 3. Work conservation.
// ---------------------------------------------------------------------------

/// Two bulk tenants with three QPs each keep every QP `depth` 1 MiB WRITEs
/// deep for `run_ns`. Checks that the wire is busy at least 95% of the
/// measured interval, that every QP keeps completing (no gap longer than
/// `max_gap_ns`: nobody is stranded behind a paused QP) and that once the
/// tenants stop posting everything drains within a bound.
fn work_conservation(pol: Pol, max_gap_ns: u64) {
    const NQPS: u32 = 3;
    const DEPTH: usize = 4;
    const SIZE: u32 = MIB;
    let run_ns = 6_000_000u64;
    let mut rig = Rig::new(3, pol, DataplaneConfig::default());
    for t in 0..2 {
        rig.tenant(&format!("bulk{t}"), NQPS, SIZE as usize);
    }
    let mut outstanding = [[0usize; NQPS as usize]; 2];
    let mut ledgers = [Ledger::default(), Ledger::default()];
    let mut next_id = 0u64;
    let mut seen = [0usize; 2];
    // Last completion time of each QP (start: 0).
    let mut last_ns = [[0u64; NQPS as usize]; 2];
    let mut max_gap = 0u64;
    let mut busy_at_start = None;
    let warm_ns = 500_000;
    let end = rig.drive(run_ns + 50_000_000, |r| {
        let now = r.now_ns();
        if busy_at_start.is_none() && now >= warm_ns {
            busy_at_start = Some((now, r.f.counters(0).port.busy_ps));
        }
        for t in 0..2 {
            for c in &r.tenants[t].got[seen[t]..] {
                let q = c.qp as usize;
                outstanding[t][q] -= 1;
                if c.completed_ns < run_ns {
                    max_gap = max_gap.max(c.completed_ns - last_ns[t][q]);
                }
                last_ns[t][q] = c.completed_ns;
            }
            seen[t] = r.tenants[t].got.len();
            if now < run_ns {
                for q in 0..NQPS {
                    while outstanding[t][q as usize] < DEPTH {
                        next_id += 1;
                        let wr = r.wr(t, next_id, q, false, 0, SIZE);
                        post(&r.tenants[t].h, wr);
                        ledgers[t].record(&wr);
                        outstanding[t][q as usize] += 1;
                    }
                }
            }
        }
        let busy = outstanding.iter().flatten().any(|&o| o > 0);
        (now < run_ns || busy).then_some(run_ns)
    });
    // Every QP was fed to the end, so a QP stranded since its last
    // completion shows as a gap to the end of the run.
    for (t, last) in last_ns.iter().enumerate() {
        for (q, &last) in last.iter().enumerate() {
            assert!(last > 0, "{pol:?}: tenant {t} QP {q} never completed anything");
            max_gap = max_gap.max(run_ns.saturating_sub(last));
        }
        ledgers[t].check(&rig.tenants[t].got, true).unwrap_or_else(|e| panic!("{pol:?} tenant {t}: {e}"));
    }
    assert!(max_gap <= max_gap_ns, "{pol:?}: a QP went {max_gap} ns without a completion (bound {max_gap_ns})");
    // Once posting stops, the backlog (at most 2 x 3 x DEPTH MiB) drains at
    // line rate: 24 MiB at ~97 Gb/s is about 2.1 ms.
    let drain_ns = end - run_ns;
    assert!(drain_ns < 3_000_000, "{pol:?}: the backlog took {drain_ns} ns to drain after the run");
    let (t0, b0) = busy_at_start.expect("warm-up passed");
    let busy_ps = rig.f.counters(0).port.busy_ps - b0;
    let util = busy_ps as f64 / ((run_ns - t0) as f64 * PS_PER_NS as f64);
    assert!(util >= 0.95, "{pol:?}: wire busy only {util:.4} of [{t0}, {run_ns}] ns");
    let c = rig.dp.counters();
    if pol != Pol::Passthrough {
        assert!(c.handoffs > 0, "{pol:?}: rotation never handed a QP off: {c:?}");
    }
}

#[test]
fn work_conservation_passthrough() {
    // The NIC's round-robin over 6 QPs: each QP completes every ~0.5 ms.
    work_conservation(Pol::Passthrough, 1_000_000);
}

// Under rotation a QP rejoins its tenant's active set only once its own
// stream has drained, and a QP handed the NIC starts when its predecessor's
// stream (up to 4 MiB queued) ends: a QP may wait for about its tenant's
// whole backlog, 12 MiB at half the line rate (~2 ms), between turns. A
// stranded QP would show a gap to the end of the 6 ms run.

#[test]
fn work_conservation_perf() {
    // 2 active QPs per tenant, rotated after each 1 MiB request (over the
    // 1,024,000 B quantum).
    work_conservation(Pol::Perf, 3_000_000);
}

#[test]
fn work_conservation_with_one_active_qp_per_tenant_and_rotation() {
    // One active QP per tenant, rotated after 2 requests.
    let pol = Pol::Force(ForceSplit { chunk: 16384, zw: 1, cap: 1, quantum_requests: 2, quantum_bytes: 0 });
    work_conservation(pol, 3_000_000);
}

// ---------------------------------------------------------------------------
// 4. Back-pressure.
// ---------------------------------------------------------------------------

/// A tenant that floods `post` meets `PostRefused::Full` once its bounded
/// queue is full; every accepted request completes exactly once, and none
/// is lost when the tenant's completion channel is full too.
fn back_pressure(pol: Pol) {
    let cfg =
        DataplaneConfig { request_queue: 8, completion_queue: 4, max_requests_per_round: 3, ..Default::default() };
    let mut rig = Rig::new(9, pol, cfg);
    rig.tenant("flood", 2, 1 << 16);
    let size = 20_000u32;
    let mut ledger = Ledger::default();
    let mut next = 0u64;
    // Before the loop runs, exactly the queue's capacity is accepted.
    let mut refused = 0;
    for _ in 0..20 {
        next += 1;
        let wr = rig.wr(0, next, (next % 2) as u32, false, 0, size);
        match rig.tenants[0].h.post(wr) {
            Ok(()) => ledger.record(&wr),
            Err(PostRefused::Full) => refused += 1,
            Err(e) => panic!("unexpected refusal {e}"),
        }
    }
    assert_eq!((ledger.len(), refused), (8, 12), "{pol:?}: a queue of 8 must take 8 and refuse the rest");
    // Keep flooding while the loop runs. The rig polls only between bursts
    // of rounds, so the completion channel (4) overflows as well.
    let target = 300usize;
    let mut fulls = 0usize;
    let mut polled: Vec<Completion> = Vec::new();
    rig.drive(100_000_000, |r| {
        polled.append(&mut r.tenants[0].got);
        while ledger.len() < target {
            next += 1;
            let wr = r.wr(0, next, (next % 2) as u32, false, 0, size);
            match r.tenants[0].h.post(wr) {
                Ok(()) => ledger.record(&wr),
                Err(PostRefused::Full) => {
                    fulls += 1;
                    break;
                }
                Err(e) => panic!("unexpected refusal {e}"),
            }
        }
        (polled.len() < target).then_some(u64::MAX)
    });
    rig.idle_for(100_000);
    polled.append(&mut rig.tenants[0].got);
    ledger.check(&polled, true).unwrap_or_else(|e| panic!("{pol:?}: {e}"));
    assert!(fulls > 0, "{pol:?}: the flood never met a full queue");
    let c = rig.dp.counters();
    assert_eq!((c.requests, c.completions, c.refused), (target as u64, target as u64, 0), "{pol:?}: {c:?}");
}

per_policy!(back_pressure:
    back_pressure_passthrough => Pol::Passthrough,
    back_pressure_perf => Pol::Perf,
    back_pressure_forced_split => Pol::Force(ForceSplit::HEAVY),
);

/// Completions pile up beyond the completion channel's capacity while the
/// tenant does not poll; all of them arrive once it does.
fn slow_poller_loses_nothing(pol: Pol) {
    let cfg = DataplaneConfig { completion_queue: 4, ..Default::default() };
    let mut rig = Rig::new(13, pol, cfg);
    rig.tenant("slow", 1, 1 << 16);
    let mut ledger = Ledger::default();
    for k in 0..50u64 {
        let wr = rig.wr(0, 100 + k, 0, false, 0, 5000);
        post(&rig.tenants[0].h, wr);
        ledger.record(&wr);
    }
    // Run the loop and the NIC without the tenant polling.
    let until = rig.now_ns() + 2_000_000;
    for _ in 0..MAX_WAKEUPS {
        while rig.dp.round().expect("round") {}
        if rig.now_ns() >= until {
            break;
        }
        if !rig.f.step_until_visible(until * PS_PER_NS) {
            rig.f.advance_to_ns(until);
        }
    }
    let c = rig.dp.counters();
    assert_eq!(c.completions, 50, "{pol:?}: the loop did not finish the work: {c:?}");
    assert!(rig.tenants[0].got.is_empty());
    // Now the tenant polls: everything is there, once, in order.
    rig.idle_for(10_000);
    ledger.check(&rig.tenants[0].got, true).unwrap_or_else(|e| panic!("{pol:?}: {e}"));
}

per_policy!(slow_poller_loses_nothing:
    slow_poller_loses_nothing_passthrough => Pol::Passthrough,
    slow_poller_loses_nothing_perf => Pol::Force(ForceSplit::HEAVY),
);

// ---------------------------------------------------------------------------
// 5. A failed QP.
// ---------------------------------------------------------------------------

/// Makes a WRITE's remote key one the peer never issued.
fn spoil_rkey(wr: &mut WorkRequest) {
    let RequestOp::Write { remote } = wr.op else { panic!("not a WRITE: {wr:?}") };
    wr.op = RequestOp::Write { remote: RemoteAddr { rkey: remote.rkey ^ 0x5a5a, ..remote } };
}

/// Tenant "bad" posts two good WRITEs, one with a bad rkey and three more
/// on its QP 0, then two after the failure is known; tenant "good" streams
/// WRITEs beside it. The bad request completes once with the NIC's error,
/// everything after it on that QP once with a flush error, the good ones
/// before it successfully, and the other tenant is unaffected.
fn failed_qp(pol: Pol, cfg: DataplaneConfig, size: u32) {
    let mut rig = Rig::new(17, pol, cfg);
    let bad = rig.tenant("bad", 1, 8 * size as usize);
    let good = rig.tenant("good", 1, size as usize);
    for k in 0..6u64 {
        let mut wr = rig.wr(bad, 10 + k, 0, false, k * size as u64, size);
        if k == 2 {
            spoil_rkey(&mut wr);
        }
        post(&rig.tenants[bad].h, wr);
    }
    let mut good_ledger = Ledger::default();
    let mut good_next = 0u64;
    let mut good_out = 0usize;
    let mut seen_good = 0usize;
    let mut late_posted = false;
    rig.drive(50_000_000, |r| {
        good_out -= r.tenants[good].got.len() - seen_good;
        seen_good = r.tenants[good].got.len();
        if good_ledger.len() < 40 {
            while good_out < 4 {
                good_next += 1;
                let wr = r.wr(good, 500 + good_next, 0, false, 0, size);
                post(&r.tenants[good].h, wr);
                good_ledger.record(&wr);
                good_out += 1;
            }
        }
        let bad_done = r.tenants[bad].got.len();
        if bad_done >= 6 && !late_posted {
            // The failure is known: later posts are refused with a flush error.
            for k in 0..2u64 {
                let wr = r.wr(bad, 20 + k, 0, false, k * size as u64, size);
                post(&r.tenants[bad].h, wr);
            }
            late_posted = true;
        }
        (!(late_posted && bad_done >= 8 && good_out == 0 && good_ledger.len() >= 40)).then_some(u64::MAX)
    });
    rig.idle_for(200_000);
    let got: Vec<(u64, WcStatus, u32)> = rig.tenants[bad].got.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect();
    let flush = WcStatus::WrFlushErr;
    let want = vec![
        (10, WcStatus::Success, size),
        (11, WcStatus::Success, size),
        (12, WcStatus::RemAccessErr, 0),
        (13, flush, 0),
        (14, flush, 0),
        (15, flush, 0),
        (20, flush, 0),
        (21, flush, 0),
    ];
    assert_eq!(got, want, "{pol:?}: completions of the failed QP");
    good_ledger.check(&rig.tenants[good].got, true).unwrap_or_else(|e| panic!("{pol:?}: good tenant: {e}"));
}

#[test]
fn failed_qp_passthrough() {
    failed_qp(Pol::Passthrough, DataplaneConfig::default(), 8192);
}

#[test]
fn failed_qp_perf() {
    failed_qp(Pol::Perf, DataplaneConfig::default(), 8192);
}

#[test]
fn failed_qp_split_error_on_a_hidden_chunk() {
    // 64 KiB messages in 4 KiB chunks: the bad rkey fails the first,
    // hidden, chunk; the message still reports the NIC's error.
    failed_qp(Pol::Force(ForceSplit::HEAVY), DataplaneConfig::default(), 65536);
}

#[test]
fn failed_qp_split_error_while_the_message_is_still_being_posted() {
    // A send queue of 64 WQEs holds part of one 64 KiB message (16 chunks x
    // 4 WQEs): the error arrives while the rest is still in software.
    let cfg = DataplaneConfig { sq_depth: 32, ..Default::default() };
    failed_qp(Pol::Force(ForceSplit::HEAVY), cfg, 65536);
}

/// A QP that the NIC refuses work on (never connected: still in RESET)
/// fails its requests once each, in order: the first with a local QP
/// error, the rest with flush errors; none is dropped.
fn unconnected_qp_fails_each_request_once(pol: Pol) {
    let mut rig = Rig::new(23, pol, DataplaneConfig::default());
    let h = rig.dp.add_tenant("lonely", 1).expect("add_tenant");
    let mr = rig.dp.reg_mr(h.id, 1 << 16).expect("reg_mr");
    let (index, _) = rig.dp.create_qp(h.id, 0).expect("create_qp");
    let remote = RemoteAddr { addr: 0x1000, rkey: 1 };
    let wr = |wr_id, len| WorkRequest::write(wr_id, index, mr, len, remote);
    for (k, len) in [100u32, 20_000, 9].into_iter().enumerate() {
        post(&h, wr(k as u64 + 1, len));
    }
    rig.idle_for(10_000);
    post(&h, wr(4, 64));
    rig.idle_for(10_000);
    let got: Vec<(u64, WcStatus, u32)> =
        std::iter::from_fn(|| h.poll()).map(|c| (c.wr_id, c.status, c.byte_len)).collect();
    let flush = WcStatus::WrFlushErr;
    assert_eq!(got, [(1, WcStatus::LocQpOpErr, 0), (2, flush, 0), (3, flush, 0), (4, flush, 0)], "{pol:?}");
}

per_policy!(unconnected_qp_fails_each_request_once:
    unconnected_qp_fails_each_request_once_passthrough => Pol::Passthrough,
    unconnected_qp_fails_each_request_once_forced_split => Pol::Force(ForceSplit::HEAVY),
);

/// Tenant-wide: when a QP that is to hand the NIC to a sibling QP fails
/// before its release runs, the sibling must not wait forever.
fn failed_qp_does_not_strand_its_siblings(pol: Pol) {
    let mut rig = Rig::new(19, pol, DataplaneConfig::default());
    // Long enough that the bad chunk's NAK returns while the QP's stream,
    // and the release at its end, are still queued in the NIC.
    let size = MIB;
    rig.tenant("pair", 2, 8 * size as usize);
    let mut good = Ledger::default();
    for k in 0..4u64 {
        let mut wr = rig.wr(0, 10 + k, 0, false, k * size as u64, size);
        if k == 0 {
            spoil_rkey(&mut wr);
        }
        post(&rig.tenants[0].h, wr);
        let wr1 = rig.wr(0, 100 + k, 1, false, (4 + k) * size as u64, size);
        post(&rig.tenants[0].h, wr1);
        good.record(&wr1);
    }
    rig.drive(20_000_000, |r| {
        let g = r.tenants[0].got.iter().filter(|c| c.qp == 1).count();
        let b = r.tenants[0].got.iter().filter(|c| c.qp == 0).count();
        (g < 4 || b < 4).then_some(u64::MAX)
    });
    let qp1: Vec<Completion> = rig.tenants[0].got.iter().filter(|c| c.qp == 1).copied().collect();
    good.check(&qp1, true).unwrap_or_else(|e| panic!("{pol:?}: sibling QP: {e}"));
    let qp0: Vec<(u64, WcStatus)> =
        rig.tenants[0].got.iter().filter(|c| c.qp == 0).map(|c| (c.wr_id, c.status)).collect();
    let flush = WcStatus::WrFlushErr;
    assert_eq!(qp0, [(10, WcStatus::RemAccessErr), (11, flush), (12, flush), (13, flush)], "{pol:?}: failed QP");
    // Under rotation the failed QP had handed the NIC to its sibling: the
    // loop released that hand-off itself, within two policy ticks.
    let c = rig.dp.counters();
    if pol.splits_everything() {
        assert!(c.handoffs > 0 && c.rescued_handoffs > 0, "{pol:?}: {c:?}");
        let last = qp1.last().expect("sibling completions").completed_ns;
        assert!(last < 4_000_000, "{pol:?}: the sibling finished only at {last} ns");
    } else {
        assert_eq!(c.rescued_handoffs, 0, "{pol:?}: {c:?}");
    }
}

per_policy!(failed_qp_does_not_strand_its_siblings:
    failed_qp_does_not_strand_its_siblings_passthrough => Pol::Passthrough,
    failed_qp_does_not_strand_its_siblings_under_rotation => Pol::Force(ForceSplit::HEAVY),
);
