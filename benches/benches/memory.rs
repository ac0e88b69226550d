//! Memory: heap bytes the dataplane holds per tenant and per QP, from a
//! counting global allocator in this binary: the live heap after building
//! the loop with N tenants (one QP each) or 50 tenants with Q QPs each,
//! over the null RNIC, after 20 ms of traffic (so that buffers that grow
//! on first use have grown); the slope of a least-squares line through the
//! points is the cost of one more tenant / QP. Default `DataplaneConfig`
//! (2048-slot send queues, 8192-entry request and completion channels per
//! tenant).
//!
//! Counted: everything the dataplane, its policy host and the tenants'
//! handles allocate on the Rust heap. Not counted: a wasm policy's linear
//! memory and code (wasmtime maps them itself; their resident size is
//! reported apart, from /proc/self/statm), and what a real NIC's verbs
//! library allocates for queues (the null RNIC's own objects, its CQ
//! entries above all, are taken out: `NullRnic::heap_bytes`).
//!
//! `cargo bench -p perf-benches --bench memory` (quick mode is the same:
//! it is fast).

use std::time::Duration;

use perf_benches::alloc::{slope, CountingAlloc};
use perf_benches::load::{Load, LoadShape, Sensitive};
use perf_benches::null_rnic::NullRnic;
use perf_benches::results::Recorder;
use perf_dataplane::policy::PolicyHost;

#[global_allocator]
static HEAP: CountingAlloc = CountingAlloc::new();

/// Live heap bytes held by a loaded dataplane of `shape` under `policy`,
/// above what was live before it was built, less what the null RNIC holds
/// for its objects (a real NIC's rings, outside the host's heap).
fn held(policy: &str, shape: LoadShape) -> f64 {
    let before = HEAP.live_bytes();
    let host = PolicyHost::load(policy).expect("policy");
    let mut load = Load::new(NullRnic::new(), host, shape).expect("load");
    load.drive(Duration::from_millis(5), Duration::from_millis(20)).expect("drive");
    let after = HEAP.live_bytes().saturating_sub(load.dp.nic().heap_bytes());
    drop(load);
    after.saturating_sub(before) as f64
}

/// Resident set size of this process, in bytes (0 where /proc is missing).
fn rss_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0.0);
    pages * 4096.0
}

fn main() {
    let mut rec = Recorder::new("memory");
    let shape = |tenants, qps| LoadShape {
        tenants,
        qps,
        depth: 2,
        msg: 1 << 20,
        sensitive: Sensitive::None,
        sq_depth: None,
        post_list: 1,
    };
    println!("memory: live heap of the dataplane over the null RNIC (counting allocator), default config");
    for (label, policy) in [("passthrough", "passthrough"), ("perf-native", "perf"), ("perf-wasm", "wasm:perf")] {
        let base = held(policy, shape(0, 0));
        let per_tenant: Vec<(f64, f64)> =
            [50u32, 100, 200, 400].iter().map(|&n| (n as f64, held(policy, shape(n, 1)))).collect();
        let per_qp: Vec<(f64, f64)> =
            [1u32, 2, 4, 8].iter().map(|&q| ((50 * q) as f64, held(policy, shape(50, q)))).collect();
        let (t, q) = (slope(&per_tenant), slope(&per_qp));
        let at = |n: f64| per_tenant.iter().find(|p| p.0 == n).map_or(0.0, |p| p.1);
        println!(
            "  {label:<12} base {:.1} KB, {:.1} KB per tenant (with its QP), {:.1} KB per extra QP; 400 tenants: {:.2} MB",
            base / 1e3,
            t / 1e3,
            q / 1e3,
            at(400.0) / 1e6
        );
        rec.figure(&format!("memory/{label}/base_bytes"), base, "B");
        rec.figure(&format!("memory/{label}/bytes_per_tenant"), t, "B");
        rec.figure(&format!("memory/{label}/bytes_per_qp"), q, "B");
    }
    if let (Some(w), Some(n)) =
        (rec.value("memory/perf-wasm/bytes_per_qp"), rec.value("memory/passthrough/bytes_per_qp"))
    {
        rec.ratio("memory/bytes_per_qp_perf_wasm_over_passthrough", w / n.max(1.0));
    }
    // The wasm instance's own memory, outside the heap.
    let rss0 = rss_bytes();
    let host = PolicyHost::load("wasm:perf").expect("wasm:perf");
    let rss1 = rss_bytes();
    drop(host);
    println!("  wasm perf instance: {:.2} MB resident outside the heap (RSS delta of one load)", (rss1 - rss0) / 1e6);
    rec.figure("memory/perf-wasm/instance_rss_bytes", rss1 - rss0, "B");
    rec.save();
}
