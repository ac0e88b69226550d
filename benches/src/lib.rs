//! Shared pieces of the PeRF-rs benchmarks: a null RNIC that measures the
//! dataplane loop alone ([`null_rnic`]), a synthetic multi-tenant load over
//! any RNIC ([`load`]), one bulk tenant over the simulated pair for the
//! single-tenant benches ([`bulk`]), a counting allocator for the memory
//! bench ([`alloc`]), wasmtime's interruption mechanisms alone
//! ([`interrupt`]), the loop's cost model measured for virtual time
//! ([`loop_cost`], which `perf-runner calibrate-loop` runs); the record of each run's figures ([`results`]), the
//! regression guard's comparison against the checked-in baseline of ratios
//! ([`guard`]), the charts `bench-report` draws from the records
//! ([`plot`]), and the `perf-runner` binary for the benches that run it
//! ([`runner`]).

// A `GlobalAlloc` implementation is unsafe by definition.
#[allow(unsafe_code, reason = "a GlobalAlloc implementation is unsafe by definition")]
pub mod alloc;
pub mod bulk;
pub mod guard;
pub mod interrupt;
pub mod load;
pub mod loop_cost;
pub mod null_rnic;
pub mod plot;
pub mod results;
pub mod runner;

pub use bulk::{bulk_tenant, BulkTenant};

/// Whether `PERF_BENCH_QUICK=1` asks for the CI smoke mode (each case once, short).
pub fn quick() -> bool {
    std::env::var("PERF_BENCH_QUICK").is_ok_and(|v| v == "1")
}

/// The median of `v` (sorted in place); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
