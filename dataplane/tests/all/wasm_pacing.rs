//! ABI 1.1 pacing through the wasm host: a module's pacing buffer (the
//! optional `perf_pacing_ptr` export) is read after each tick, validated,
//! and ignored for a 1.0 module; a bad export or an invalid record is
//! refused or contained (fallback to passthrough, reason recorded).

use perf_dataplane::policy::wasm::{FaultKind, LoadError, WasmLimits};
use perf_dataplane::policy::PolicyHost;
use perf_policy_sdk::{Pacing, TenantPlan, TenantStats};

use crate::common::wat::Wat;

/// Where the test modules keep their pacing buffer (after the request slot).
const PACING_AT: u32 = 466_944;

/// A WAT module with every export of the ABI; its `perf_on_tick` writes
/// tenant 0's pacing record (`rate`, `burst`, `paused`) and it exports
/// `perf_pacing_ptr` as `pacing_export` (empty: none).
fn module(version: (u16, u16), rate: u64, burst: u64, paused: u32, pacing_export: &str) -> Vec<u8> {
    let on_tick = format!(
        "(i64.store (i32.const {p}) (i64.const {rate})) (i64.store (i32.const {b}) (i64.const {burst})) \
         (i32.store (i32.const {q}) (i32.const {paused})) (i32.const 0)",
        p = PACING_AT,
        b = PACING_AT + 8,
        q = PACING_AT + 16
    );
    Wat {
        version: (version.0 as u32) << 16 | version.1 as u32,
        on_tick: on_tick.into(),
        memory_pages: 10,
        extra: pacing_export.to_string(),
        ..Wat::default()
    }
    .bytes()
}

const EXPORT: &str = r#"(func (export "perf_pacing_ptr") (result i32) (i32.const 466944))"#;

/// Ticks `h` once for one tenant and returns its pacing.
fn tick(h: &mut PolicyHost) -> Pacing {
    let stats = [TenantStats::ZERO];
    let mut plans = [TenantPlan::PASSTHROUGH];
    let mut pacing = [Pacing::UNLIMITED];
    h.on_tick(1_000, &stats, &mut plans);
    h.on_pacing(1_000, &mut pacing);
    pacing[0]
}

#[test]
fn a_1_1_module_paces_and_a_1_0_module_is_never_paced() {
    let want = Pacing::rate(1_250_000_000, 4 << 20);
    let bytes = module((1, 1), want.rate_bytes_per_s, want.burst_bytes, 0, EXPORT);
    let mut h = PolicyHost::from_wasm_bytes(&bytes, WasmLimits::default()).expect("1.1 module loads");
    assert_eq!(h.wasm_abi_version(), Some((1, 1)));
    assert_eq!(tick(&mut h), want);
    // The same module built for 1.0: its pacing export is not read.
    let bytes = module((1, 0), want.rate_bytes_per_s, want.burst_bytes, 0, EXPORT);
    let mut h = PolicyHost::from_wasm_bytes(&bytes, WasmLimits::default()).expect("1.0 module loads");
    assert_eq!(tick(&mut h), Pacing::UNLIMITED);
    assert!(h.exit_info().is_none());
}

#[test]
fn an_invalid_pacing_record_drops_the_module() {
    for (rate, burst, paused) in [(1_000_000, 4096, 2), (1_000_000, 0, 0), (u64::MAX, 4096, 0)] {
        let bytes = module((1, 1), rate, burst, paused, EXPORT);
        let mut h = PolicyHost::from_wasm_bytes(&bytes, WasmLimits::default()).expect("loads");
        assert_eq!(tick(&mut h), Pacing::UNLIMITED, "rate {rate} burst {burst} paused {paused}");
        let exit = h.exit_info().expect("fell back");
        assert_eq!((exit.kind, exit.hook), (FaultKind::InvalidDecision, "on_pacing"));
        assert!(exit.message.contains("pacing of tenant 0"), "{}", exit.message);
        assert_eq!(h.name(), "passthrough");
        assert_eq!(h.counters.fallbacks, 1);
        // Passthrough from then on: unlimited.
        assert_eq!(tick(&mut h), Pacing::UNLIMITED);
    }
}

#[test]
fn a_bad_pacing_export_is_refused_at_load() {
    let wrong = r#"(func (export "perf_pacing_ptr") (result i64) (i64.const 0))"#;
    match PolicyHost::from_wasm_bytes(&module((1, 1), 0, 0, 0, wrong), WasmLimits::default()) {
        Err(LoadError::WrongType { name, .. }) => assert_eq!(name, "perf_pacing_ptr"),
        other => panic!("wanted a wrong-type error, got {:?}", other.err().map(|e| e.to_string())),
    }
    let outside = r#"(func (export "perf_pacing_ptr") (result i32) (i32.const 600000))"#;
    match PolicyHost::from_wasm_bytes(&module((1, 1), 0, 0, 0, outside), WasmLimits::default()) {
        Err(LoadError::BadBuffer { what, .. }) => assert_eq!(what, "pacing"),
        other => panic!("wanted a bad-buffer error, got {:?}", other.err().map(|e| e.to_string())),
    }
}

#[test]
fn embedded_suite_modules_speak_1_1() {
    for name in ["justitia", "weighted", "slo", "perf"] {
        let h = PolicyHost::load(&format!("wasm:{name}")).expect("embedded module loads");
        assert_eq!(h.name(), name);
        assert_eq!(h.wasm_abi_version(), Some(perf_policy_sdk::ABI_VERSION));
    }
}
