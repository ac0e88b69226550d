//! The wasm policy host: the embedded `perf` and `passthrough` modules load
//! and decide exactly as the native code does; malformed modules (built
//! from WAT text) are refused with an error naming what is wrong; a module
//! that loops, traps, grows memory without bound, or returns nonsense is
//! stopped, and the host falls back to passthrough with a recorded reason.

use std::time::{Duration, Instant};

use perf_dataplane::policy::perf_policy::Perf;
use perf_dataplane::policy::wasm::{
    embedded, CallBudget, FaultKind, Interruption, LoadError, WasmLimits, WasmPolicy, DEFAULT_CALL_FUEL,
    DEFAULT_TICK_FUEL_PER_TENANT,
};
use perf_dataplane::policy::PolicyHost;
use perf_policy_sdk::{Policy, RequestInfo, RequestOp, SplitPlan, TenantInfo, TenantPlan, TenantStats, ZeroWeightOp};

use crate::common;

use common::wat::Wat;

fn perf_wasm() -> &'static [u8] {
    embedded::by_name("perf").expect("the build script embeds policies/perf as wasm")
}

/// A deterministic pseudo-random tenant set for round `round`.
fn stats(n: usize, round: u64) -> Vec<TenantStats> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ round.wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let max_msg = [16u64, 64, 512, 1024, 4096, 1 << 20][(next() % 6) as usize];
            let depth = (next() % 200) as u32;
            let qps = 1 + (next() % 8) as u32;
            TenantStats {
                tenant: i as u32,
                qps,
                backlogged_qps: (next() % (qps as u64 + 1)) as u32,
                max_depth: depth,
                ewma_msg_bytes: max_msg as f64 * 0.75,
                max_msg_bytes: if next() % 5 == 0 { 0 } else { max_msg },
                completed: next() % 3 * 10,
                bytes: next() % 1_000_000,
                mean_latency_ns: next() % 100_000,
                weight: 1,
                p99_latency_ns: (next() % 200_000) as u32,
            }
        })
        .collect()
}

#[test]
fn embedded_modules_load_and_report_their_names() {
    let p = WasmPolicy::from_bytes(perf_wasm(), WasmLimits::default()).expect("perf.wasm loads");
    assert_eq!(p.name(), "perf");
    assert_eq!(p.max_tenants(), perf_policy_sdk::abi::MAX_TENANTS);
    let bytes = embedded::by_name("passthrough").expect("passthrough embedded");
    let h = PolicyHost::from_wasm_bytes(bytes, WasmLimits::default()).expect("passthrough.wasm loads");
    assert_eq!(h.name(), "passthrough");
    assert!(h.is_wasm());
    assert_eq!(h.tick_interval_ns(), 1_000_000);
    let h = PolicyHost::load("wasm:perf").expect("load by name");
    assert!(h.is_wasm() && h.name() == "perf");
    assert!(!PolicyHost::load("perf").expect("built-in").is_wasm());
    assert!(matches!(PolicyHost::load("no-such-policy"), Err(LoadError::UnknownPolicy(_))));
}

#[test]
fn wasm_perf_decides_exactly_as_native_perf() {
    let mut wasm = WasmPolicy::from_bytes(perf_wasm(), WasmLimits::default()).expect("perf.wasm loads");
    let mut native = Perf::default();
    for n in [1usize, 2, 7, 64] {
        for t in 0..n {
            let info = TenantInfo { tenant: t as u32, qps: 2, weight: 1 };
            native.on_tenant(&info);
            wasm.on_tenant(&info).expect("on_tenant");
        }
    }
    let mut np = vec![TenantPlan::PASSTHROUGH; 64];
    let mut wp = np.clone();
    let mut distinct = std::collections::HashSet::new();
    // Many rounds, so that the classes the policy remembers across ticks
    // are exercised too; the tenant count varies round to round.
    for round in 0..200u64 {
        let n = [64usize, 3, 17, 64, 1][(round % 5) as usize];
        let s = stats(n, round);
        native.on_tick(round * 1_000_000, &s, &mut np[..n]);
        wasm.on_tick(round * 1_000_000, &s, &mut wp[..n]).expect("on_tick");
        assert_eq!(np, wp, "round {round}");
        for p in &np[..n] {
            distinct.insert((p.split.chunk_bytes, p.split.zero_weight_per_chunk, p.split_threshold, p.class as u32));
        }
        for (t, plan) in np[..n].iter().enumerate() {
            for len in [16u64, 1024, 1 << 20] {
                let req = RequestInfo { tenant: t as u32, qp: 0, len, op: RequestOp::Write, depth: 3 };
                assert_eq!(native.on_request(&req, plan), wasm.on_request(&req, plan).expect("on_request"));
            }
        }
    }
    // The comparison covered more than one kind of decision.
    assert!(distinct.len() >= 4, "{distinct:?}");
    assert_eq!(wasm.tick_interval_ns().expect("interval"), native.tick_interval_ns());
}

#[test]
fn a_well_formed_wat_module_loads() {
    let p = Wat::default().load(WasmLimits::default()).expect("loads");
    assert_eq!(p.name(), "wat");
}

#[test]
fn load_errors_name_what_is_wrong() {
    let l = WasmLimits::default();
    assert!(matches!(WasmPolicy::from_bytes(b"definitely not wasm", l), Err(LoadError::NotWasm)));
    // A file cut inside the header says so, rather than "no header".
    assert!(matches!(WasmPolicy::from_bytes(b"\0asm", l), Err(LoadError::Truncated { len: 4 })));
    assert!(matches!(WasmPolicy::from_bytes(b"", l), Err(LoadError::Truncated { len: 0 })));
    // wasmtime's reason is kept as the error's source, not flattened.
    match WasmPolicy::from_bytes(b"\0asm\x01\0\0\0garbage", l) {
        Err(e @ LoadError::Compile(_)) => {
            let cause = std::error::Error::source(&e).expect("wasmtime's error as the source");
            assert!(!cause.to_string().is_empty(), "{e:?}");
        }
        other => panic!("wanted a compile error, got {:?}", other.err()),
    }

    match (Wat { version: 2 << 16, ..Wat::default() }).load(l) {
        Err(LoadError::AbiVersion { module, host }) => {
            assert_eq!(module, (2, 0));
            assert_eq!(host, perf_policy_sdk::ABI_VERSION);
        }
        other => panic!("wanted an ABI version error, got {:?}", other.err()),
    }
    // A newer minor than the host's is refused too.
    let newer = (1 << 16) | (perf_policy_sdk::ABI_VERSION.1 as u32 + 1);
    assert!(matches!((Wat { version: newer, ..Wat::default() }).load(l), Err(LoadError::AbiVersion { .. })));

    match (Wat { omit: Some("perf_on_tick"), ..Wat::default() }).load(l) {
        Err(LoadError::MissingExport(name)) => assert_eq!(name, "perf_on_tick"),
        other => panic!("wanted a missing-export error, got {:?}", other.err()),
    }
    match (Wat { omit: Some("perf_abi_version"), ..Wat::default() }).load(l) {
        Err(LoadError::MissingExport(name)) => assert_eq!(name, "perf_abi_version"),
        other => panic!("wanted a missing-export error, got {:?}", other.err()),
    }
    let imports = "(import \"env\" \"sleep\" (func (param i32)))";
    match (Wat { imports, ..Wat::default() }).load(l) {
        Err(e @ LoadError::UnknownImport { .. }) => assert!(e.to_string().contains("env.sleep"), "{e}"),
        other => panic!("wanted an unknown-import error, got {:?}", other.err()),
    }
    // A host import with the wrong signature.
    let imports = "(import \"perf\" \"now_ns\" (func (result i32)))";
    match (Wat { imports, ..Wat::default() }).load(l) {
        Err(LoadError::WrongType { name, .. }) => assert_eq!(name, "perf.now_ns"),
        other => panic!("wanted a wrong-type error, got {:?}", other.err()),
    }
    // The host's real imports are accepted.
    let imports = "(import \"perf\" \"now_ns\" (func (result i64))) (import \"perf\" \"log\" (func (param i32 i32)))";
    assert!((Wat { imports, ..Wat::default() }).load(l).is_ok());
    // A memory too small for the ABI's buffers.
    match (Wat { memory_pages: 1, name_at: 100, ..Wat::default() }).load(l) {
        Err(LoadError::BadBuffer { what, detail }) => assert_eq!(what, "stats", "{detail}"),
        other => panic!("wanted a bad-buffer error, got {:?}", other.err()),
    }
    // A memory larger than the cap from the start.
    let small = WasmLimits { max_memory_bytes: 256 * 1024, ..l };
    match Wat::default().load(small) {
        Err(e @ LoadError::Instantiate(_)) => assert!(std::error::Error::source(&e).is_some(), "{e:?}"),
        other => panic!("wanted an instantiation error, got {:?}", other.err()),
    }
}

#[test]
fn a_module_that_loops_forever_is_interrupted_and_the_host_falls_back() {
    let looping = Wat { on_tick: "(loop $l (br $l)) (i32.const 0)".into(), ..Wat::default() };
    for limits in [
        WasmLimits { interruption: Interruption::Epoch(Duration::from_millis(5)), ..WasmLimits::default() },
        WasmLimits { interruption: Interruption::Fuel(10_000_000), ..WasmLimits::default() },
        WasmLimits::default(),
    ] {
        let mut host = PolicyHost::wasm(looping.load(limits).expect("loads"));
        let s = stats(4, 0);
        let mut plans = vec![TenantPlan { max_active_qps: 2, quantum_requests: 1, ..TenantPlan::PASSTHROUGH }; 4];
        let t0 = Instant::now();
        host.on_tick(42_000, &s, &mut plans);
        let took = t0.elapsed();
        // 5 ms deadline (+1 tick) or ~10M instructions; generous for a loaded machine.
        assert!(took < Duration::from_secs(2), "{limits:?}: took {took:?}");
        let exit = host.exit_info().expect("an exit reason is recorded");
        assert_eq!(exit.kind, FaultKind::Timeout, "{exit:?}");
        assert_eq!(exit.hook, "on_tick");
        assert_eq!(exit.at_ns, 42_000);
        assert_eq!(exit.policy, "wat");
        assert_eq!((host.counters.traps, host.counters.fallbacks), (1, 1));
        assert!(!host.is_wasm());
        assert_eq!(host.name(), "passthrough");
        assert!(plans.iter().all(|p| *p == TenantPlan::PASSTHROUGH));
        // Traffic keeps flowing: the fallback answers.
        let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 };
        assert_eq!(host.on_request(&req, &plans[0]), SplitPlan::WHOLE);
        host.on_tick(43_000, &s, &mut plans);
        assert_eq!(host.counters.fallbacks, 1);
    }
}

/// A loop that spends little fuel per unit of time (a call of the host's
/// `perf.log` with a 256-byte line per iteration: a few units of fuel, a
/// few hundred ns in the host) would outlast a fuel budget sized for the
/// real hooks by far; the wall-clock backstop of the default call budget
/// stops it (an `Interrupt`, not `OutOfFuel`). (Bulk memory operations
/// are charged fuel per byte by wasmtime, so they are no such loop.) Not
/// timed beyond a generous bound.
#[test]
fn a_slow_loop_that_spends_little_fuel_is_stopped_by_the_backstop() {
    let logging = Wat {
        imports: "(import \"perf\" \"log\" (func $log (param i32 i32)))",
        on_tick: "(loop $l (call $log (i32.const 0) (i32.const 256)) (br $l)) (i32.const 0)".into(),
        ..Wat::default()
    };
    let mut host = PolicyHost::wasm(logging.load(WasmLimits::default()).expect("loads"));
    let s = stats(4, 0);
    let mut plans = vec![TenantPlan::PASSTHROUGH; 4];
    let t0 = Instant::now();
    host.on_tick(42_000, &s, &mut plans);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let exit = host.exit_info().expect("an exit reason is recorded");
    assert_eq!((exit.kind, exit.hook), (FaultKind::Timeout, "on_tick"), "{exit:?}");
    assert!(exit.message.contains("interrupt"), "stopped by the backstop after {took:?}: {}", exit.message);
    assert_eq!(host.name(), "passthrough");
}

/// Every built-in policy runs within the default call budget at the most
/// tenants the ABI allows (4096), with room to spare: its hooks are never
/// cut off for their own work (fuel is deterministic, so this holds on any
/// machine). Its ticks over random tenant sets spend at most half of the
/// budget (4.3x headroom measured by the `policy_round` bench).
#[test]
fn built_in_policies_fit_the_default_call_budget_at_4096_tenants() {
    let n = perf_policy_sdk::abi::MAX_TENANTS;
    let budget = CallBudget::default();
    for name in embedded::NAMES {
        let Some(bytes) = embedded::by_name(name) else { continue };
        let mut w = WasmPolicy::from_bytes(bytes, WasmLimits::default()).expect("a built-in module loads");
        for t in 0..n as u32 {
            w.on_tenant(&TenantInfo { tenant: t, qps: 1 + t % 8, weight: 1 + t % 3 }).expect("on_tenant");
        }
        let mut plans = vec![TenantPlan::PASSTHROUGH; n];
        for round in 0..4 {
            let s = stats(n, round);
            w.on_tick(1_000_000 * (round + 1), &s, &mut plans).unwrap_or_else(|f| panic!("{name}: on_tick: {f}"));
            let spent = w.last_call_fuel().expect("the budget counts fuel");
            assert!(spent <= budget.fuel_for(n) / 2, "{name}: a tick over {n} tenants spent {spent}");
            for (i, p) in plans.iter().enumerate().step_by(97) {
                let req = RequestInfo { tenant: i as u32, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 4 };
                w.on_request(&req, p).unwrap_or_else(|f| panic!("{name}: on_request: {f}"));
                assert!(w.last_call_fuel().expect("fuel") <= budget.fuel / 2, "{name}");
            }
        }
    }
}

/// The fuel a call spent is readable under a bound that counts fuel (for
/// sizing the budget), and `on_tick` gets more of it per tenant.
#[test]
fn the_fuel_of_a_call_is_measured_and_a_tick_gets_more_per_tenant() {
    let b = CallBudget::default();
    assert_eq!(b.fuel_for(0), DEFAULT_CALL_FUEL);
    assert_eq!(b.fuel_for(4096), DEFAULT_CALL_FUEL + 4096 * DEFAULT_TICK_FUEL_PER_TENANT);
    let mut w = WasmPolicy::from_bytes(perf_wasm(), WasmLimits::default()).expect("loads");
    let s = stats(64, 0);
    let mut plans = vec![TenantPlan::PASSTHROUGH; 64];
    w.on_tick(1_000_000, &s, &mut plans).expect("tick");
    let spent = w.last_call_fuel().expect("the default bound counts fuel");
    assert!(spent > 0 && spent < b.fuel_for(64), "{spent}");
    let epoch = WasmLimits { interruption: Interruption::Epoch(Duration::from_millis(10)), ..WasmLimits::default() };
    let mut w = WasmPolicy::from_bytes(perf_wasm(), epoch).expect("loads");
    w.on_tick(1_000_000, &s, &mut plans).expect("tick");
    assert_eq!(w.last_call_fuel(), None);
}

#[test]
fn a_module_that_grows_memory_without_bound_hits_the_cap() {
    let greedy =
        Wat { on_tick: "(loop $l (drop (memory.grow (i32.const 16))) (br $l)) (i32.const 0)".into(), ..Wat::default() };
    let limits = WasmLimits { max_memory_bytes: 4 << 20, ..WasmLimits::default() };
    let mut host = PolicyHost::wasm(greedy.load(limits).expect("loads"));
    let mut plans = vec![TenantPlan::PASSTHROUGH; 2];
    let t0 = Instant::now();
    host.on_tick(7, &stats(2, 1), &mut plans);
    let exit = host.exit_info().expect("an exit reason is recorded");
    // Growing past the cap traps at once (not a timeout).
    assert_eq!(exit.kind, FaultKind::Trap, "{exit:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(host.counters.traps, 1);
}

#[test]
fn traps_and_nonsense_fall_back_with_a_reason() {
    let trapping = Wat { on_request: "(unreachable)", ..Wat::default() };
    let mut host = PolicyHost::wasm(trapping.load(WasmLimits::default()).expect("loads"));
    let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 };
    assert_eq!(host.on_request(&req, &TenantPlan::PASSTHROUGH), SplitPlan::WHOLE);
    let exit = host.exit_info().expect("recorded");
    assert_eq!((exit.kind, exit.hook), (FaultKind::Trap, "on_request"));
    assert!(exit.message.contains("unreachable"), "{}", exit.message);

    // A 1-byte chunk: rejected, and the module is dropped.
    let tiny = Wat { on_request: "(i64.const 1)", ..Wat::default() };
    let mut host = PolicyHost::wasm(tiny.load(WasmLimits::default()).expect("loads"));
    assert_eq!(host.on_request(&req, &TenantPlan::PASSTHROUGH), SplitPlan::WHOLE);
    let exit = host.exit_info().expect("recorded");
    assert_eq!(exit.kind, FaultKind::InvalidDecision);
    assert_eq!((host.counters.rejections, host.counters.fallbacks, host.counters.traps), (1, 1, 0));

    // A class that does not exist, written into tenant 0's plan (offset 40).
    let bad_class =
        Wat { on_tick: "(i32.store (i32.const 262184) (i32.const 99)) (i32.const 0)".into(), ..Wat::default() };
    dropped_by_its_tick(&bad_class, 3, 2, "BadClass(99)");
}

/// Loads `module` and ticks it once over `n` tenants (the stats of `round`):
/// the tick drops it for an invalid decision whose message names `reason`,
/// and every tenant is back on the passthrough plan.
fn dropped_by_its_tick(module: &Wat, n: usize, round: u64, reason: &str) {
    let mut host = PolicyHost::wasm(module.load(WasmLimits::default()).expect("loads"));
    let mut plans = vec![TenantPlan::PASSTHROUGH; n];
    host.on_tick(1, &stats(n, round), &mut plans);
    let exit = host.exit_info().expect("dropped");
    assert_eq!((exit.kind, exit.hook), (FaultKind::InvalidDecision, "on_tick"));
    assert!(exit.message.contains(reason), "{}", exit.message);
    assert!(plans.iter().all(|p| *p == TenantPlan::PASSTHROUGH));
}

/// Epoch vs fuel vs native: the cost of one `perf` round (64 tenants).
/// Run with `--ignored --nocapture`; the figures are in docs/policy-abi.md.
#[test]
#[ignore]
fn measure_round_cost() {
    let s = stats(64, 3);
    let rounds = 20_000u32;
    let mut plans = vec![TenantPlan::PASSTHROUGH; 64];
    let mut native = Perf::default();
    let t0 = Instant::now();
    for r in 0..rounds {
        native.on_tick(r as u64, &s, &mut plans);
    }
    let native_ns = t0.elapsed().as_nanos() as f64 / rounds as f64;
    let mut out = vec![("native".to_string(), native_ns)];
    for (label, i) in
        [("epoch", Interruption::Epoch(Duration::from_millis(10))), ("fuel", Interruption::Fuel(u64::MAX / 2))]
    {
        let mut w = WasmPolicy::from_bytes(perf_wasm(), WasmLimits { interruption: i, ..WasmLimits::default() })
            .expect("loads");
        let t0 = Instant::now();
        for r in 0..rounds {
            w.on_tick(r as u64, &s, &mut plans).expect("tick");
        }
        out.push((format!("{label} on_tick"), t0.elapsed().as_nanos() as f64 / rounds as f64));
        let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 };
        let t0 = Instant::now();
        for _ in 0..rounds {
            w.on_request(&req, &plans[0]).expect("request");
        }
        out.push((format!("{label} on_request"), t0.elapsed().as_nanos() as f64 / rounds as f64));
    }
    let t0 = Instant::now();
    let _ = WasmPolicy::from_bytes(perf_wasm(), WasmLimits::default()).expect("loads");
    out.push(("load (compile + validate + init)".into(), t0.elapsed().as_nanos() as f64));
    for (k, v) in out {
        println!("{k}: {v:.0} ns");
    }
}

#[test]
fn run_time_parameters_reach_native_and_wasm_policies_alike() {
    let tick = |spec: &str| {
        let mut h = PolicyHost::load(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let s = stats(3, 1);
        let mut plans = vec![TenantPlan::PASSTHROUGH; s.len()];
        h.on_tick(1_000_000, &s, &mut plans);
        (h.tick_interval_ns(), plans)
    };
    let spec = "perf:max_active_qps=4,quantum_requests=64,tick_interval_ns=250_000";
    let (native_tick, native) = tick(spec);
    let (wasm_tick, wasm) = tick(&format!("wasm:{spec}"));
    assert_eq!(native, wasm, "the module got the same parameters");
    assert_eq!((native_tick, wasm_tick), (250_000, 250_000), "the tick interval is re-read after them");
    assert!(native.iter().all(|p| p.max_active_qps == 4 && p.quantum_requests == 64), "{native:?}");
    let (_, defaults) = tick("wasm:perf");
    assert!(
        defaults.iter().all(|p| p.max_active_qps != 4 && p.quantum_requests == 128),
        "defaults without parameters: {defaults:?}"
    );

    // Refusals name the policy, the parameter and why, native or wasm.
    for (spec, why) in [
        ("wasm:perf:no_such_key=1", "has no parameter `no_such_key`"),
        ("perf:no_such_key=1", "has no parameter `no_such_key`"),
        ("wasm:slo:target_ns=soon", "not a valid value of `target_ns`"),
        ("perf:max_active_qps=0", "not a valid value"),
        ("perf:max_active_qps=2,quantum_requests", "expected key=value"),
        ("perf:chunk_bytes=4096,chunk_bytes=8192", "given twice"),
        ("passthrough:x=1", "has no parameter `x`"),
    ] {
        let Err(e) = PolicyHost::load(spec) else { panic!("{spec} loaded") };
        assert!(matches!(e, LoadError::Param { .. }), "{spec}: {e}");
        assert!(e.to_string().contains(why), "{spec}: {e}");
    }
    // A module of ABI 1.0 (no perf_set_param) still loads, and takes no parameters.
    let mut old = PolicyHost::wasm(Wat::default().load(WasmLimits::default()).expect("a 1.0 module loads"));
    let e = old.set_params("wat", &[("max_active_qps", "2")]).expect_err("a 1.0 module has no parameters");
    assert!(e.to_string().contains("has no parameter"), "{e}");
}

/// ABI 1.5, the version word.
const V1_5: u32 = 1 << 16 | 5;

/// A control block export (ABI 1.5) at `at`, holding `tick` and the
/// request-call word `calls`.
fn control_block(at: u32, tick: u64, calls: u32) -> String {
    let mut b = tick.to_le_bytes().to_vec();
    b.extend_from_slice(&calls.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    let data: String = b.iter().map(|x| format!("\\{x:02x}")).collect();
    format!("(func (export \"perf_control_ptr\") (result i32) (i32.const {at}))\n(data (i32.const 460000) \"{data}\")")
}

#[test]
fn resident_tables_carry_only_what_changed() {
    let mut wasm = WasmPolicy::from_bytes(perf_wasm(), WasmLimits::default()).expect("perf.wasm loads");
    assert!(wasm.resident() && wasm.abi_version() >= (1, 5));
    let mut native = Perf::default();
    let (mut np, mut wp) = (vec![TenantPlan::PASSTHROUGH; 16], vec![TenantPlan::PASSTHROUGH; 16]);
    let mut s = stats(12, 1);
    let mut tick = |n: usize, s: &[TenantStats], wp: &mut [TenantPlan], np: &mut [TenantPlan], at: u64| {
        native.on_tick(at, &s[..n], &mut np[..n]);
        wasm.on_tick(at, &s[..n], &mut wp[..n]).expect("on_tick");
        assert_eq!(np, wp, "at {at}");
        wasm.resident_counts().expect("resident")
    };
    let c = tick(8, &s, &mut wp, &mut np, 1_000_000);
    assert_eq!((c.stats_written, c.plans_written), (8, 8), "the first tick writes every record");
    let c = tick(8, &s, &mut wp, &mut np, 2_000_000);
    assert_eq!((c.stats_written, c.plans_written), (0, 0), "nothing changed: nothing crosses");
    s[3].bytes += 1;
    s[5].ewma_msg_bytes += 0.5;
    let c = tick(8, &s, &mut wp, &mut np, 3_000_000);
    assert_eq!((c.stats_written, c.plans_written), (2, 0));
    // A plan the host changed is written back before the next tick.
    wp[6] = TenantPlan { max_active_qps: 1, quantum_requests: 7, ..TenantPlan::PASSTHROUGH };
    np[6] = wp[6];
    let c = tick(8, &s, &mut wp, &mut np, 4_000_000);
    assert_eq!((c.stats_written, c.plans_written), (0, 1));
    // Tenants added: only theirs cross; removed: nothing.
    let c = tick(12, &s, &mut wp, &mut np, 5_000_000);
    assert_eq!((c.stats_written, c.plans_written), (4, 4));
    let c = tick(4, &s, &mut wp, &mut np, 6_000_000);
    assert_eq!((c.stats_written, c.plans_written), (0, 0));
    // A tenant at an index seen before, with new statistics.
    s[10] = stats(12, 99)[10];
    let c = tick(12, &s, &mut wp, &mut np, 7_000_000);
    assert_eq!(c.stats_written, 1);
    // The plans that changed in the call are the ones decoded.
    s = stats(12, 5);
    let c = tick(12, &s, &mut wp, &mut np, 12_000_000);
    assert!(c.plans_decoded <= 12 && c.stats_written == 12, "{c:?}");
}

/// Every built-in policy, native and as its embedded module (ABI 1.5),
/// through the host as the dataplane calls it: the same plans, rate limits
/// and split answers over ticks whose statistics change in part, not at
/// all, or entirely, while tenants come and go, across hot swaps to the
/// next policy (fresh instances on both sides, the plans carried over).
#[test]
fn every_built_in_policy_decides_as_native_over_resident_tables() {
    let names: Vec<&str> = embedded::NAMES.iter().copied().filter(|n| embedded::by_name(n).is_some()).collect();
    assert!(names.len() >= 6, "{names:?}");
    let load = |name: &str| {
        let native = PolicyHost::builtin(name).expect("built-in");
        // Fuel alone: a loaded test machine does not stop a call by the clock.
        let limits = WasmLimits { interruption: Interruption::Fuel(u64::MAX / 2), ..WasmLimits::default() };
        let (wasm, _) = PolicyHost::load_with(&format!("wasm:{name}"), limits).expect("embedded");
        assert_eq!(wasm.wasm_abi_version(), Some(perf_policy_sdk::ABI_VERSION), "{name}");
        assert_eq!(native.request_calls(), wasm.request_calls(), "{name}");
        assert_eq!(native.zero_weight_op(), wasm.zero_weight_op(), "{name}");
        (native, wasm)
    };
    let (mut np, mut wp) = (vec![TenantPlan::PASSTHROUGH; 64], vec![TenantPlan::PASSTHROUGH; 64]);
    let (mut npace, mut wpace) =
        (vec![perf_policy_sdk::Pacing::UNLIMITED; 64], vec![perf_policy_sdk::Pacing::UNLIMITED; 64]);
    let mut s = stats(64, 0);
    for (k, name) in names.iter().enumerate() {
        let (mut native, mut wasm) = load(name);
        // The rate limits start over with each policy (a module's pacing
        // buffer is its own; a native policy that does not pace leaves the
        // record it is handed).
        npace.fill(perf_policy_sdk::Pacing::UNLIMITED);
        wpace.fill(perf_policy_sdk::Pacing::UNLIMITED);
        for t in 0..64u32 {
            let info = TenantInfo { tenant: t, qps: 1 + t % 4, weight: 1 + t % 3 };
            native.on_tenant(&info);
            wasm.on_tenant(&info);
        }
        for round in 0..60u64 {
            let at = (k as u64 * 60 + round) * 1_000_000;
            let n = [64usize, 64, 3, 17, 17, 64, 1, 40][(round % 8) as usize];
            match round % 3 {
                0 => {}
                1 => {
                    let fresh = stats(64, at);
                    for i in (0..64).step_by(4) {
                        s[i] = fresh[i];
                    }
                }
                _ => s = stats(64, at),
            }
            // The loop block (ABI 1.7): a free loop, then the measured one.
            let info = if round % 2 == 0 {
                perf_policy_sdk::LoopInfo::UNKNOWN
            } else {
                perf_policy_sdk::LoopInfo { busy_permille: 700, wqe_ps: 19_111, cqe_ps: 99_176, link_gbps: 100 }
            };
            native.on_loop(&info);
            wasm.on_loop(&info);
            native.on_tick(at, &s[..n], &mut np[..n]);
            native.on_pacing(at, &mut npace[..n]);
            wasm.on_tick(at, &s[..n], &mut wp[..n]);
            wasm.on_pacing(at, &mut wpace[..n]);
            assert!(wasm.is_wasm() && wasm.exit_info().is_none(), "{name}: {:?}", wasm.exit_info());
            assert_eq!(np, wp, "{name}, round {round}");
            if *name == "fairshare" {
                // The module read the loop block: its chunk follows the loop.
                let chunk = if round % 2 == 0 { 2048 } else { 5 * 1024 };
                assert_eq!(wp[0].split.chunk_bytes, chunk, "round {round}");
            }
            assert_eq!(npace, wpace, "{name}, round {round}");
            assert_eq!(native.tick_interval_ns(), wasm.tick_interval_ns(), "{name}");
            for t in 0..n {
                for len in [16u64, 1024, 1536, 2048, 8192, 16384, 1 << 20] {
                    for op in [RequestOp::Write, RequestOp::Send, RequestOp::Read] {
                        let req = RequestInfo { tenant: t as u32, qp: t as u32 % 4, len, op, depth: 2 };
                        let (a, b) = (native.on_request(&req, &np[t]), wasm.on_request(&req, &wp[t]));
                        assert_eq!(a, b, "{name}, round {round}, {req:?}");
                    }
                }
            }
        }
        assert_eq!(native.counters.calls, wasm.counters.calls, "{name}");
        assert_eq!(native.counters.plan_answers, wasm.counters.plan_answers, "{name}");
        if *name != "fairshare" {
            assert!(wasm.counters.plan_answers > 0, "{name} declares its answers");
        }
    }
}

/// The answers the host takes from the plan are those the policy would
/// give: each built-in policy called for every request beside the same
/// policy hosted (which skips the calls it declared it does not need),
/// over the same sequence, so that state a call would change (PeRF's
/// zero-weight carry) is compared too; and the same for each built-in
/// policy's wasm module, hosted.
#[test]
fn answers_from_the_plan_are_the_policies_own() {
    for r in PolicyHost::BUILTINS {
        let wasm = r.wasm().map(|_| PolicyHost::load(&format!("wasm:{}", r.name)).expect("embedded module loads"));
        for host in std::iter::once(PolicyHost::new(r.native())).chain(wasm) {
            answers_match_the_calls(r, host);
        }
    }
}

/// Calls `r` natively for every request and asks `host` for the same,
/// over 20 ticks of 8 tenants, and compares the answers.
fn answers_match_the_calls(r: &perf_dataplane::policy::registry::Registered, mut host: PolicyHost) {
    let mut called = r.native();
    let mut requests = 0;
    let mut plans = vec![TenantPlan::PASSTHROUGH; 8];
    for round in 0..20u64 {
        let s = stats(8, round);
        called.on_tick(round * 1_000_000, &s, &mut plans);
        let mut hp = plans.clone();
        host.on_tick(round * 1_000_000, &s, &mut hp);
        assert_eq!(plans, hp, "{}", r.name);
        for t in 0..8u32 {
            for len in [16u64, 900, 1024, 1100, 1536, 3000, 16383, 16384, 65536] {
                for op in [RequestOp::Write, RequestOp::Send, RequestOp::Read] {
                    let req = RequestInfo { tenant: t, qp: 0, len, op, depth: 1 };
                    let p = &plans[t as usize];
                    assert_eq!(called.on_request(&req, p), host.on_request(&req, p), "{}: {req:?}", r.name);
                    requests += 1;
                }
            }
        }
    }
    match host.request_calls() {
        perf_policy_sdk::RequestCalls::Every => {}
        // ABI 1.8: the host applies the carry too, and calls for nothing.
        perf_policy_sdk::RequestCalls::PlanWithCarry { .. } => {
            assert_eq!(host.counters.plan_answers, requests, "{}", r.name)
        }
        _ => assert!(host.counters.plan_answers > 0, "{}", r.name),
    }
}

#[test]
fn a_module_that_scribbles_over_its_tables_is_contained() {
    // A 1.5 module that writes a class that does not exist into tenant 0's
    // plan from `on_request`, outside a tick: the next tick sees the bytes
    // changed, decodes them, and drops the module.
    let scribbler = Wat {
        version: V1_5,
        on_request: "(i32.store (i32.const 262184) (i32.const 99)) (i64.const 0)",
        ..Wat::default()
    };
    let mut host = PolicyHost::wasm(scribbler.load(WasmLimits::default()).expect("loads"));
    let mut plans = vec![TenantPlan::PASSTHROUGH; 3];
    host.on_tick(1, &stats(3, 1), &mut plans);
    assert!(host.exit_info().is_none());
    let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 };
    assert_eq!(host.on_request(&req, &plans[0]), SplitPlan::WHOLE);
    host.on_tick(2, &stats(3, 1), &mut plans);
    let exit = host.exit_info().expect("dropped");
    assert_eq!((exit.kind, exit.hook), (FaultKind::InvalidDecision, "on_tick"));
    assert!(exit.message.contains("tenant 0") && exit.message.contains("BadClass(99)"), "{}", exit.message);
    assert!(plans.iter().all(|p| *p == TenantPlan::PASSTHROUGH));

    // A tick that changes one plan (tenant 1: a cap of 3, a quantum of 1
    // request): that one is decoded, the others kept.
    let one = Wat {
        version: V1_5,
        on_tick:
            "(i32.store (i32.const 262192) (i32.const 3)) (i32.store (i32.const 262196) (i32.const 1)) (i32.const 0)"
                .into(),
        ..Wat::default()
    };
    let mut w = one.load(WasmLimits::default()).expect("loads");
    let mut plans = vec![TenantPlan { quantum_requests: 5, ..TenantPlan::PASSTHROUGH }; 4];
    w.on_tick(1, &stats(4, 1), &mut plans).expect("on_tick");
    let c = w.resident_counts().expect("resident");
    assert_eq!((c.stats_written, c.plans_written, c.plans_decoded), (4, 4, 1));
    assert_eq!(plans[1], TenantPlan { max_active_qps: 3, quantum_requests: 1, ..TenantPlan::PASSTHROUGH });
    assert!(plans.iter().enumerate().all(|(i, p)| i == 1 || p.quantum_requests == 5));
    // A module that scribbles over the stats table sees its own writes;
    // the host's copy is what it wrote, and its decisions are still checked.
    let stats_scribbler = Wat {
        version: V1_5,
        on_tick: "(i32.store (i32.const 0) (i32.const -1)) (i32.const 0)".into(),
        ..Wat::default()
    };
    let mut host = PolicyHost::wasm(stats_scribbler.load(WasmLimits::default()).expect("loads"));
    let mut plans = vec![TenantPlan::PASSTHROUGH; 2];
    for at in 0..3 {
        host.on_tick(at, &stats(2, 1), &mut plans);
    }
    assert!(host.exit_info().is_none() && plans.iter().all(|p| *p == TenantPlan::PASSTHROUGH));
}

#[test]
fn the_control_block_is_validated_and_its_declaration_kept() {
    let with = |version, control: String, on_request: &'static str, on_tick: &'static str| Wat {
        version,
        on_request,
        on_tick: on_tick.into(),
        extra: control,
        ..Wat::default()
    };
    let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 };
    let plan = TenantPlan {
        split: SplitPlan { chunk_bytes: 16384, zero_weight_per_chunk: 2 },
        split_threshold: 1024,
        ..TenantPlan::PASSTHROUGH
    };
    // A module that declares the plan rule is never called per request
    // (its `on_request` would trap), and its tick interval is read, not
    // asked.
    let m = with(V1_5, control_block(460000, 250_000, 1), "(unreachable)", "(i32.const 0)");
    let mut host = PolicyHost::wasm(m.load(WasmLimits::default()).expect("loads"));
    assert_eq!(host.request_calls(), perf_policy_sdk::RequestCalls::Plan { sends: false });
    assert_eq!(host.tick_interval_ns(), 250_000);
    assert_eq!(host.on_request(&req, &plan), plan.split);
    assert_eq!(host.on_request(&RequestInfo { op: RequestOp::Send, ..req }, &plan), SplitPlan::WHOLE);
    assert!(host.exit_info().is_none());
    assert_eq!(host.counters.plan_answers, 2);
    // The same block in a 1.4 module means nothing: every request is a call.
    let old = with(1 << 16 | 4, control_block(460000, 250_000, 1), "(unreachable)", "(i32.const 0)");
    let mut host = PolicyHost::wasm(old.load(WasmLimits::default()).expect("loads"));
    assert_eq!(host.request_calls(), perf_policy_sdk::RequestCalls::Every);
    assert_eq!(host.on_request(&req, &plan), SplitPlan::WHOLE);
    assert_eq!(host.exit_info().expect("called, and trapped").kind, FaultKind::Trap);
    // Nonsense in the block after a tick drops the module.
    let lying = with(
        V1_5,
        control_block(460000, 1_000_000, 1),
        "(i64.const 0)",
        "(i32.store (i32.const 460008) (i32.const 128)) (i32.const 0)",
    );
    dropped_by_its_tick(&lying, 2, 1, "BadRequestCalls(128)");
    // ABI 1.6: the block's last word names the zero-weight WR (0, a WAIT,
    // is what a 1.5 module's reserved word always held).
    let host = |version| {
        let m = with(
            version,
            control_block(460000, 250_000, 1),
            "(unreachable)",
            "(i32.store (i32.const 460012) (i32.const 1)) (i32.const 0)",
        );
        let mut host = PolicyHost::wasm(m.load(WasmLimits::default()).expect("loads"));
        assert_eq!(host.zero_weight_op(), ZeroWeightOp::Wait, "before its first tick");
        host.on_tick(0, &stats(1, 0), &mut [TenantPlan::PASSTHROUGH]);
        host
    };
    assert_eq!(host(V1_5 + 1).zero_weight_op(), ZeroWeightOp::Nop);
    assert_eq!(host(V1_5).zero_weight_op(), ZeroWeightOp::Wait, "reserved in a 1.5 module");
    let nonsense = with(
        V1_5 + 1,
        control_block(460000, 1_000_000, 1),
        "(i64.const 0)",
        "(i32.store (i32.const 460012) (i32.const 2)) (i32.const 0)",
    );
    dropped_by_its_tick(&nonsense, 2, 1, "BadZeroWeightOp(2)");
    // ABI 1.8: the host applies PeRF's carry (bit 3, the unit in bits
    // 8-31); a module before 1.8 with that word is refused, as a 1.7 host
    // refused it.
    let carry = 1 | 8 | 1024 << 8;
    let m = with(V1_5 + 3, control_block(460000, 250_000, carry), "(unreachable)", "(i32.const 0)");
    let host = PolicyHost::wasm(m.load(WasmLimits::default()).expect("loads"));
    let declared = perf_policy_sdk::RequestCalls::PlanWithCarry { sends: false, unit_bytes: 1024 };
    assert_eq!(host.request_calls(), declared);
    let e = with(V1_5 + 2, control_block(460000, 250_000, carry), "(unreachable)", "(i32.const 0)")
        .load(WasmLimits::default())
        .err()
        .expect("refused");
    assert!(e.to_string().contains(&format!("BadRequestCalls({carry})")), "{e}");
    // Refused at load: a zero interval, a block outside memory or misaligned.
    let e = with(V1_5, control_block(460000, 0, 0), "(i64.const 0)", "(i32.const 0)")
        .load(WasmLimits::default())
        .err()
        .expect("refused");
    assert!(e.to_string().contains("BadTickInterval(0)"), "{e}");
    for at in [0x7fff_0000u32, 460001] {
        let e = with(V1_5, control_block(at, 1000, 0), "(i64.const 0)", "(i32.const 0)")
            .load(WasmLimits::default())
            .err()
            .expect("refused");
        assert!(matches!(&e, LoadError::BadBuffer { what: "control", .. }), "{e}");
    }
}

/// ABI 1.7: the loop block is written before each tick of a module that
/// exports it (the module's tick traps unless it reads what the host
/// wrote), not for a 1.6 module, and a block of the wrong type or outside
/// memory is refused at load.
#[test]
fn the_loop_block_is_validated_and_written_before_each_tick() {
    const V1_7: u32 = 1 << 16 | 7;
    let export = |at: u32| format!("(func (export \"perf_loop_ptr\") (result i32) (i32.const {at}))");
    // Traps unless the block's `wqe_ps` (offset 4) holds `want`.
    let expecting = |want: u32| -> std::borrow::Cow<'static, str> {
        format!("(if (i32.ne (i32.load (i32.const 470004)) (i32.const {want})) (then unreachable)) (i32.const 0)")
            .into()
    };
    let info = perf_policy_sdk::LoopInfo { busy_permille: 640, wqe_ps: 19_111, cqe_ps: 99_176, link_gbps: 100 };
    let m = Wat { version: V1_7, on_tick: expecting(19_111), extra: export(470000), ..Wat::default() };
    let mut host = PolicyHost::wasm(m.load(WasmLimits::default()).expect("loads"));
    host.on_loop(&info);
    host.on_tick(0, &stats(1, 0), &mut [TenantPlan::PASSTHROUGH]);
    assert!(host.exit_info().is_none(), "{:?}", host.exit_info());
    host.on_loop(&perf_policy_sdk::LoopInfo { wqe_ps: 5, ..info });
    host.on_tick(1_000_000, &stats(1, 0), &mut [TenantPlan::PASSTHROUGH]);
    assert_eq!(host.exit_info().expect("its tick saw the new block and trapped").kind, FaultKind::Trap);
    // A 1.6 module's export is not one: nothing is written.
    let old = Wat { version: 1 << 16 | 6, on_tick: expecting(0), extra: export(470000), ..Wat::default() };
    let mut host = PolicyHost::wasm(old.load(WasmLimits::default()).expect("loads"));
    host.on_loop(&info);
    host.on_tick(0, &stats(1, 0), &mut [TenantPlan::PASSTHROUGH]);
    assert!(host.exit_info().is_none(), "{:?}", host.exit_info());
    refused_at_load(V1_7, "perf_loop_ptr", export(524_280), "loop");
}

/// A module of `version` whose optional pointer export `name` is refused at
/// load: placed by `outside` past its memory (a `BadBuffer` naming `what`),
/// and of the wrong type (taking a parameter).
fn refused_at_load(version: u32, name: &str, outside: String, what: &str) {
    let e = Wat { version, extra: outside, ..Wat::default() }.load(WasmLimits::default()).err().expect("refused");
    assert!(matches!(e, LoadError::BadBuffer { what: w, .. } if w == what), "{e}");
    let typed = format!("(func (export \"{name}\") (param i32) (result i32) (i32.const 8))");
    let e = Wat { version, extra: typed, ..Wat::default() }.load(WasmLimits::default()).err().expect("refused");
    assert!(matches!(e, LoadError::WrongType { .. }), "{e}");
}

/// The changed list (ABI 1.9): validated at load, and written before each
/// tick with the tenants whose record or plan the host wrote (every one at
/// the first tick, none when nothing changed); a 1.8 module's export is
/// not one, and nothing is written.
#[test]
fn the_changed_list_is_validated_and_written_before_each_tick() {
    const V1_9: u32 = 1 << 16 | 9;
    // The list at 480000, its count pre-filled with 7, which no tick writes.
    let export = |at: u32| {
        format!("(func (export \"perf_changed_ptr\") (result i32) (i32.const {at})) (data (i32.const 480000) \"\\07\")")
    };
    // The module copies the count and the first index it was given into
    // tenant 0's plan (`split_threshold`, `quantum_bytes`), which the host
    // decodes: what each tick listed, seen from the host.
    let recorder = "(i32.store (i32.const 262176) (i32.load (i32.const 480000))) \
                    (i32.store (i32.const 262152) (i32.load (i32.const 480004))) (i32.const 0)";
    let m = Wat { version: V1_9, on_tick: recorder.into(), extra: export(480000), ..Wat::default() };
    let mut host = PolicyHost::wasm(m.load(WasmLimits::default()).expect("loads"));
    let mut s = stats(3, 0);
    let mut plans = [TenantPlan::PASSTHROUGH; 3];
    let mut seen = Vec::new();
    for step in 0..4u64 {
        if step == 2 {
            s[1].bytes += 1;
        }
        host.on_tick(step * 1_000_000, &s, &mut plans);
        seen.push((plans[0].split_threshold, plans[0].quantum_bytes));
    }
    assert!(host.exit_info().is_none(), "{:?}", host.exit_info());
    // Every tenant first; then none (the plan the module left is the one
    // the host holds); then the one whose record changed; then none.
    assert_eq!(seen.iter().map(|x| x.0).collect::<Vec<_>>(), [3, 0, 1, 0]);
    assert_eq!((seen[0].1, seen[2].1), (0, 1), "the first index listed");
    // A 1.8 module's export is not one: nothing is written.
    let old = Wat { version: 1 << 16 | 8, on_tick: recorder.into(), extra: export(480000), ..Wat::default() };
    let mut host = PolicyHost::wasm(old.load(WasmLimits::default()).expect("loads"));
    let mut plans = [TenantPlan::PASSTHROUGH; 3];
    host.on_tick(0, &stats(3, 0), &mut plans);
    assert_eq!(plans[0].split_threshold, 7, "the pre-filled count, untouched");
    refused_at_load(V1_9, "perf_changed_ptr", export(520_000), "changed");
}

/// `perf` as it was before ABI 1.9: every tick is the whole tick (the
/// default `Policy::on_tick_changed`).
struct WholeTick(Perf);

impl Policy for WholeTick {
    fn name(&self) -> &str {
        "perf-whole-tick"
    }
    fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        self.0.on_tick(now_ns, stats, plans)
    }
    fn on_pacing(&mut self, now_ns: u64, pacing: &mut [perf_policy_sdk::Pacing]) {
        self.0.on_pacing(now_ns, pacing)
    }
}

/// `perf`, recording the length of each changed list the host gives it.
struct Listed(Perf, std::sync::Arc<std::sync::Mutex<Vec<usize>>>);

impl Policy for Listed {
    fn name(&self) -> &str {
        "perf-listed"
    }
    fn on_tick_changed(&mut self, now_ns: u64, stats: &[TenantStats], changed: &[u32], plans: &mut [TenantPlan]) {
        assert!(changed.windows(2).all(|w| w[0] < w[1]), "in increasing order: {changed:?}");
        self.1.lock().expect("lengths").push(changed.len());
        self.0.on_tick_changed(now_ns, stats, changed, plans)
    }
    fn tick_changes(&self) -> bool {
        true
    }
    fn on_pacing(&mut self, now_ns: u64, pacing: &mut [perf_policy_sdk::Pacing]) {
        self.0.on_pacing(now_ns, pacing)
    }
}

/// The changed list (ABI 1.9) through the host: `perf`'s incremental tick,
/// native and as its module, decides exactly as the whole tick over ticks
/// whose records change in part, not at all, or entirely, while tenants
/// come and go, across classification and allowed-set periods, with plans
/// the host replaced (a removed tenant's, an invalid one's) and a time
/// slice that moves on. The host lists every tenant at the first tick and
/// whenever every record changed, the two replaced plans, and none when
/// nothing changed.
#[test]
fn the_changed_list_lets_perf_tick_incrementally_and_decide_the_same() {
    let limits = WasmLimits { interruption: Interruption::Fuel(u64::MAX / 2), ..WasmLimits::default() };
    let mut whole = PolicyHost::new(Box::new(WholeTick(Perf::default())));
    let lengths = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut native = PolicyHost::new(Box::new(Listed(Perf::default(), lengths.clone())));
    let mut wasm = PolicyHost::load_with("wasm:perf", limits).expect("embedded").0;
    let mut hosts = [&mut whole, &mut native, &mut wasm];
    let mut plans = vec![vec![TenantPlan::PASSTHROUGH; 64]; 3];
    let mut pacing = vec![vec![perf_policy_sdk::Pacing::UNLIMITED; 64]; 3];
    // Bulk tenants and one message-rate tenant: more than four bandwidth
    // tenants beside a sensitive one, so `perf` slices the NIC.
    let bulk = |t: u32| TenantStats {
        tenant: t,
        qps: 2,
        backlogged_qps: 2,
        max_depth: 128,
        ewma_msg_bytes: 1048576.0,
        max_msg_bytes: 1 << 20,
        completed: 4,
        bytes: 4 << 20,
        weight: 1,
        ..TenantStats::default()
    };
    let mut s: Vec<TenantStats> = (0..64).map(bulk).collect();
    s[7] = TenantStats { max_msg_bytes: 16, ewma_msg_bytes: 16.0, max_depth: 128, ..s[7] };
    for round in 0..400u64 {
        // 250 us ticks over 100 ms: periods of 5 and 10 ms, slices of 100 ms.
        let at = round * 250_000;
        let n = if round % 97 < 90 { 64 } else { 40 };
        match round % 7 {
            0 => s = stats(64, round),
            1 | 2 => {
                let fresh = stats(64, round);
                for i in (round as usize % 5..64).step_by(9) {
                    s[i] = fresh[i];
                }
            }
            3 => {
                // The host replaces plans: a removed tenant's, an invalid one.
                for p in &mut plans {
                    p[11] = TenantPlan::PASSTHROUGH;
                    p[12] = TenantPlan { split: SplitPlan { chunk_bytes: 0, zero_weight_per_chunk: 0 }, ..p[12] };
                }
            }
            _ => {}
        }
        for (k, h) in hosts.iter_mut().enumerate() {
            h.on_tick(at, &s[..n], &mut plans[k][..n]);
            h.on_pacing(at, &mut pacing[k][..n]);
        }
        assert!(hosts[2].is_wasm(), "{:?}", hosts[2].exit_info());
        for k in 1..3 {
            let t = (0..n).find(|&t| plans[0][t] != plans[k][t] || pacing[0][t] != pacing[k][t]);
            assert_eq!(t, None, "host {k} (1 native, 2 wasm) decided otherwise, round {round}");
        }
        let listed = lengths.lock().expect("lengths").last().copied();
        // Where the tenant count changed, the tenants back are listed too.
        let same_n = round % 97 != 0 && round % 97 != 90;
        let want = match round % 7 {
            _ if round == 0 => Some(n),
            0 if same_n => Some(n),
            3 if same_n => Some(2),
            5 | 6 if same_n => Some(0),
            _ => None,
        };
        if want.is_some() {
            assert_eq!(listed, want, "round {round}");
        }
    }
    assert!(pacing[0][..40].iter().any(|p| p.paused != 0), "the test slices the NIC");
}

#[test]
fn a_module_path_that_is_no_regular_file_or_too_large_is_refused_before_reading() {
    let dir = std::env::temp_dir().join(format!("perf-module-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("f.wasm");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo");
    // A sparse file far over the cap: refused from its size, not read.
    let big = dir.join("big.wasm");
    std::fs::File::create(&big).expect("create").set_len(1 << 30).expect("set_len");
    let t0 = Instant::now();
    for (path, want) in [("/dev/zero", "character device"), (fifo.to_str().expect("utf-8"), "FIFO")] {
        let e = PolicyHost::load(path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want) && e.contains("not a regular file"), "{path}: {e}");
    }
    let e = PolicyHost::load(big.to_str().expect("utf-8")).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("more than the") && e.contains("cap"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "refused at once, not after reading: {:?}", t0.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}
