//! Fuzzing (bounded proptests) of the host's decoding and validation of
//! policy decisions: random bytes and words never make the host panic, an
//! invalid decision is rejected with its reason, and a valid one is kept
//! exactly.
//!
//! - the ABI codec (`decode_plan`, `unpack_split`) on arbitrary input;
//! - the validation rules (`SplitPlan::validate`, `TenantPlan::validate`)
//!   against their documented bounds;
//! - the policy host with a native policy returning arbitrary decisions;
//! - the policy host with a wasm module whose `perf_on_tick` writes
//!   arbitrary bytes into its plan buffer and whose `perf_on_request`
//!   returns an arbitrary word: decoded, validated, and on any fault the
//!   module is dropped for passthrough with the reason recorded.
//!
//! Fixed seeds and case counts keep a CI run to a few seconds;
//! `PROPTEST_RNG_SEED=N PROPTEST_CASES=M` explores further (see
//! docs/security.md).

use crate::common::seeded_config;
use perf_dataplane::policy::wasm::{FaultKind, WasmLimits};
use perf_dataplane::policy::PolicyHost;
use perf_policy_sdk::abi::{self, DecodeError, PLAN_SIZE};
use perf_policy_sdk::{
    limits, Policy, Rejection, RequestInfo, RequestOp, SplitPlan, TenantClass, TenantPlan, TenantStats,
};
use proptest::prelude::*;

/// The class field's offset in a plan record (`TenantPlan::class`).
const CLASS_AT: usize = 40;

/// Plan records biased towards the interesting: sometimes a valid class,
/// sometimes small chunk and zero-weight values near the bounds.
fn plan_bytes() -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(any::<u8>(), PLAN_SIZE), 0u32..6, any::<bool>(), 0u32..4).prop_map(
        |(mut b, class, near, which)| {
            if class < 5 {
                b[CLASS_AT..CLASS_AT + 4].copy_from_slice(&class.to_le_bytes());
            }
            if near {
                let chunk = [0, limits::MIN_CHUNK - 1, limits::MIN_CHUNK, 16384][which as usize];
                b[24..28].copy_from_slice(&chunk.to_le_bytes());
                let zw = [0, 16, limits::MAX_ZERO_WEIGHT, limits::MAX_ZERO_WEIGHT + 1][which as usize];
                b[28..32].copy_from_slice(&zw.to_le_bytes());
            }
            b
        },
    )
}

/// The reason a split plan must be rejected for, from its documented bounds.
fn split_reason(s: &SplitPlan) -> Option<Rejection> {
    if s.chunk_bytes != 0 && s.chunk_bytes < limits::MIN_CHUNK {
        Some(Rejection::ChunkTooSmall)
    } else if s.chunk_bytes > limits::MAX_CHUNK {
        Some(Rejection::ChunkTooLarge)
    } else if s.zero_weight_per_chunk > limits::MAX_ZERO_WEIGHT {
        Some(Rejection::TooManyZeroWeight)
    } else {
        None
    }
}

fn plan_reason(p: &TenantPlan) -> Option<Rejection> {
    split_reason(&p.split).or_else(|| {
        (p.max_active_qps > 0 && p.quantum_requests == 0 && p.quantum_bytes == 0 && p.quantum_ns == 0)
            .then_some(Rejection::ZeroQuantum)
    })
}

/// Arbitrary tenant plans: any field values, any class.
fn any_plan() -> impl Strategy<Value = TenantPlan> {
    (any::<[u32; 4]>(), any::<[u64; 3]>(), 0u32..4, any::<bool>()).prop_map(|(w, d, class, small)| TenantPlan {
        max_active_qps: if small { w[0] % 3 } else { w[0] },
        quantum_requests: if small { w[1] % 2 } else { w[1] },
        quantum_bytes: if small { d[0] % 2 } else { d[0] },
        quantum_ns: if small { d[1] % 2 } else { d[1] },
        split: abi::unpack_split(((w[3] as u64) << 32 | w[2] as u64) as i64),
        split_threshold: d[2],
        class: TenantClass::from_u32(class).unwrap_or(TenantClass::Unknown),
        window_kib: w[0] as u16,
        read_window_kib: w[1] as u16,
    })
}

proptest! {
    #![proptest_config(seeded_config(2000, 0xF022_0001))]

    /// Any byte string decodes to a plan or a named error, never a panic;
    /// a decoded plan survives re-encoding.
    #[test]
    fn decode_plan_never_panics_and_round_trips(mut b in plan_bytes(), cut in 0usize..=PLAN_SIZE + 8) {
        b.resize(cut.max(1), 0xA5);
        b.truncate(cut);
        match abi::decode_plan(&b) {
            Err(DecodeError::Short) => prop_assert!(b.len() < PLAN_SIZE),
            Err(DecodeError::BadClass(v)) => {
                prop_assert!(b.len() >= PLAN_SIZE);
                prop_assert_eq!(v, u32::from_le_bytes([b[CLASS_AT], b[CLASS_AT + 1], b[CLASS_AT + 2], b[CLASS_AT + 3]]));
                prop_assert!(TenantClass::from_u32(v).is_none());
            }
            Ok(p) => {
                prop_assert!(b.len() >= PLAN_SIZE);
                let mut again = vec![0u8; PLAN_SIZE];
                abi::encode_plan(&p, &mut again);
                prop_assert_eq!(abi::decode_plan(&again), Ok(p));
                prop_assert_eq!(p.validate().err(), plan_reason(&p));
            }
        }
    }

    /// Every `perf_on_request` word is some split plan, and the packing is
    /// a bijection; validation names the bound a plan breaks.
    #[test]
    fn unpack_split_is_total_and_validation_names_the_bound(v in any::<i64>()) {
        let s = abi::unpack_split(v);
        prop_assert_eq!(abi::pack_split(s), v);
        prop_assert_eq!(s.validate().err(), split_reason(&s));
    }
}

/// A native policy that answers with fixed, arbitrary decisions.
struct Arbitrary {
    split: SplitPlan,
    plans: Vec<TenantPlan>,
}

impl Policy for Arbitrary {
    fn name(&self) -> &str {
        "arbitrary"
    }

    fn on_request(&mut self, _req: &RequestInfo, _plan: &TenantPlan) -> SplitPlan {
        self.split
    }

    fn on_tick(&mut self, _now_ns: u64, _stats: &[TenantStats], plans: &mut [TenantPlan]) {
        for (p, want) in plans.iter_mut().zip(&self.plans) {
            *p = *want;
        }
    }
}

fn request() -> RequestInfo {
    RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 }
}

fn stats(n: usize) -> Vec<TenantStats> {
    (0..n).map(|i| TenantStats { tenant: i as u32, qps: 1, weight: 1, ..TenantStats::ZERO }).collect()
}

proptest! {
    #![proptest_config(seeded_config(500, 0xF022_0002))]

    /// The host keeps a native policy's valid decisions exactly and
    /// replaces each invalid one by the safe default, counting it.
    #[test]
    fn the_host_keeps_valid_native_decisions_and_rejects_the_rest(
        v in any::<i64>(),
        plans in prop::collection::vec(any_plan(), 1..5),
    ) {
        let split = abi::unpack_split(v);
        let mut host = PolicyHost::new(Box::new(Arbitrary { split, plans: plans.clone() }));
        let got = host.on_request(&request(), &TenantPlan::PASSTHROUGH);
        let bad_split = split_reason(&split).is_some();
        prop_assert_eq!(got, if bad_split { SplitPlan::WHOLE } else { split });
        let mut out = vec![TenantPlan::PASSTHROUGH; plans.len()];
        host.on_tick(1_000, &stats(plans.len()), &mut out);
        let bad_plans = plans.iter().filter(|p| plan_reason(p).is_some()).count();
        for (p, want) in out.iter().zip(&plans) {
            prop_assert_eq!(*p, if plan_reason(want).is_some() { TenantPlan::PASSTHROUGH } else { *want });
        }
        prop_assert_eq!(host.counters.rejections, bad_split as u64 + bad_plans as u64);
    }
}

/// A wasm module whose `perf_on_tick` copies `plans` (raw bytes) into its
/// plan buffer and whose `perf_on_request` returns `split`.
fn module(plans: &[u8], split: i64) -> Vec<u8> {
    const PLANS_AT: usize = 262_144;
    const SOURCE_AT: usize = 400_000;
    let data: String = plans.iter().map(|b| format!("\\{b:02x}")).collect();
    let text = format!(
        r#"(module
  (memory (export "memory") 8)
  (func (export "perf_abi_version") (result i32) (i32.const {version}))
  (func (export "perf_init") (result i32) (i32.const 0))
  (func (export "perf_on_tenant") (param i32 i32 i32))
  (func (export "perf_on_request") (result i64) (i64.const {split}))
  (func (export "perf_on_tick") (param i64 i32) (result i32)
    (memory.copy (i32.const {PLANS_AT}) (i32.const {SOURCE_AT}) (i32.const {len}))
    (i32.const 0))
  (func (export "perf_tick_interval_ns") (result i64) (i64.const 1000000))
  (func (export "perf_stats_ptr") (result i32) (i32.const 0))
  (func (export "perf_plans_ptr") (result i32) (i32.const {PLANS_AT}))
  (func (export "perf_request_ptr") (result i32) (i32.const 458752))
  (func (export "perf_max_tenants") (result i32) (i32.const 64))
  (func (export "perf_name_ptr") (result i32) (i32.const 459000))
  (func (export "perf_name_len") (result i32) (i32.const 4))
  (data (i32.const 459000) "fuzz")
  (data (i32.const {SOURCE_AT}) "{data}"))"#,
        version = abi::version_word(perf_policy_sdk::ABI_VERSION.0, perf_policy_sdk::ABI_VERSION.1),
        len = plans.len(),
    );
    wat::parse_str(&text).expect("the fuzz module's text parses")
}

proptest! {
    // Each case compiles a module: few cases, still a few seconds.
    #![proptest_config(seeded_config(64, 0xF022_0003))]

    /// Arbitrary plan bytes and request words from a wasm module: the host
    /// never panics; if every plan decodes and validates it is used as
    /// decoded, otherwise the module is dropped for passthrough with an
    /// `InvalidDecision` reason naming what was wrong, and every tenant is
    /// back on the passthrough plan.
    #[test]
    fn the_host_decodes_wasm_decisions_or_drops_the_module_with_a_reason(
        recs in prop::collection::vec(plan_bytes(), 1..4),
        v in any::<i64>(),
    ) {
        let bytes: Vec<u8> = recs.concat();
        let wasm = module(&bytes, v);
        let n = recs.len();
        // on_tick.
        let mut host = PolicyHost::from_wasm_bytes(&wasm, WasmLimits::default()).expect("the fuzz module loads");
        let mut out = vec![TenantPlan::PASSTHROUGH; n];
        host.on_tick(1_000, &stats(n), &mut out);
        let decoded: Vec<Result<TenantPlan, DecodeError>> = recs.iter().map(|r| abi::decode_plan(r)).collect();
        // Every record is decoded before any is validated: a record that
        // does not decode is named before one that does not validate.
        let first_bad = decoded
            .iter()
            .position(|d| d.is_err())
            .or_else(|| decoded.iter().position(|d| d.as_ref().is_ok_and(|p| p.validate().is_err())));
        match first_bad {
            None => {
                let want: Vec<TenantPlan> = decoded.into_iter().map(|d| d.expect("decoded")).collect();
                prop_assert_eq!(&out, &want);
                prop_assert!(host.is_wasm() && host.exit_info().is_none());
            }
            Some(i) => {
                prop_assert!(out.iter().all(|p| *p == TenantPlan::PASSTHROUGH), "{:?}", out);
                let exit = host.exit_info().expect("the host records why it dropped the module");
                prop_assert_eq!(exit.kind, FaultKind::InvalidDecision);
                prop_assert_eq!(exit.hook, "on_tick");
                prop_assert!(exit.message.contains(&format!("tenant {i}")), "{}", exit.message);
                prop_assert!(!host.is_wasm());
                prop_assert_eq!(host.counters.fallbacks, 1);
            }
        }
        // on_request, on a fresh host.
        let mut host = PolicyHost::from_wasm_bytes(&wasm, WasmLimits::default()).expect("the fuzz module loads");
        let split = abi::unpack_split(v);
        let got = host.on_request(&request(), &TenantPlan::PASSTHROUGH);
        match split_reason(&split) {
            None => {
                prop_assert_eq!(got, split);
                prop_assert!(host.exit_info().is_none());
            }
            Some(why) => {
                prop_assert_eq!(got, SplitPlan::WHOLE);
                let exit = host.exit_info().expect("the host records why it dropped the module");
                prop_assert_eq!(exit.kind, FaultKind::InvalidDecision);
                prop_assert!(exit.message.contains(&format!("{why:?}")), "{}", exit.message);
            }
        }
    }
}
