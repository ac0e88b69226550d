//! scratch
#![allow(missing_docs)]
use perf_dataplane::policy::perf::Perf;
use perf_dataplane::policy::wasm::{embedded, Interruption, WasmLimits, WasmPolicy};
use perf_policy_sdk::abi;
use perf_policy_sdk::{Policy, TenantPlan};
use std::time::{Duration, Instant};

fn med(mut v: Vec<f64>) -> f64 { v.sort_by(|a,b| a.partial_cmp(b).unwrap()); v[v.len()/2] }

fn main() {
    let s = perf_benches::loop_cost::tenant_stats(64);
    let bytes = embedded::by_name("perf").unwrap();
    let mut w = WasmPolicy::from_bytes(bytes, WasmLimits { interruption: Interruption::Epoch(Duration::from_millis(50)), ..Default::default() }).unwrap();
    let mut nat = Perf::default();
    let mut w0 = WasmPolicy::from_bytes(bytes, WasmLimits { interruption: Interruption::Epoch(Duration::from_millis(50)), ..Default::default() }).unwrap();
    let mut plans = vec![TenantPlan::PASSTHROUGH; 64];
    let mut np = plans.clone();
    let mut buf = vec![0u8; 64 * 64];
    let mut pb = vec![0u8; 64 * 48];
    let (mut a, mut b, mut c, mut d, mut e, mut f) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for r in 0..201 {
        let t0 = Instant::now();
        for i in 0..10 { nat.on_tick(i, &s, &mut np); }
        a.push(t0.elapsed().as_nanos() as f64 / 10.0);
        let t0 = Instant::now();
        for i in 0..10 { w.on_tick(i, &s, &mut plans).unwrap(); }
        b.push(t0.elapsed().as_nanos() as f64 / 10.0);
        let t0 = Instant::now();
        for i in 0..10 { w0.on_tick(i, &s[..0], &mut plans[..0]).unwrap(); }
        c.push(t0.elapsed().as_nanos() as f64 / 10.0);
        let t0 = Instant::now();
        for _ in 0..10 { for (x, rec) in s.iter().zip(buf.chunks_exact_mut(64)) { abi::encode_stats(x, rec); } std::hint::black_box(&mut buf); }
        d.push(t0.elapsed().as_nanos() as f64 / 10.0);
        let t0 = Instant::now();
        for _ in 0..10 { for (x, rec) in plans.iter().zip(pb.chunks_exact_mut(48)) { abi::encode_plan(x, rec); } std::hint::black_box(&mut pb); }
        e.push(t0.elapsed().as_nanos() as f64 / 10.0);
        let t0 = Instant::now();
        for _ in 0..10 { for (x, rec) in plans.iter_mut().zip(pb.chunks_exact(48)) { *x = abi::decode_plan(rec).unwrap(); } std::hint::black_box(&mut plans); }
        f.push(t0.elapsed().as_nanos() as f64 / 10.0);
        let _ = r;
    }
    println!("native {:.0} wasm {:.0} wasm_n0 {:.0} enc_stats {:.0} enc_plans {:.0} dec_plans {:.0}", med(a), med(b), med(c), med(d), med(e), med(f));
}
