//! # perf-policy-common
//!
//! The PeRF mechanism as a `no_std` library that the policy crates build
//! on: [`Perf`] (PeRF as published, every constant a field of
//! [`PerfParams`] with the paper's default) and the helpers the policies
//! derived from it share. It exports no wasm ABI itself: each policy crate
//! (`policies/perf`, `policies/weighted`, `policies/slo`) wraps it and
//! calls `export_policy!` once, so no two modules' exports collide.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod preemption;

pub use preemption::{Perf, PerfParams, QpCap, QpDaemon, QpFormula};

/// Rounds `bytes` down to a multiple of 64 B (the host's chunk granule),
/// at least [`perf_policy_sdk::limits::MIN_CHUNK`].
pub fn chunk_granule(bytes: u64) -> u32 {
    let b = bytes.min(perf_policy_sdk::limits::MAX_CHUNK as u64) as u32;
    (b & !63).max(perf_policy_sdk::limits::MIN_CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_to_the_granule() {
        assert_eq!(chunk_granule(16384), 16384);
        assert_eq!(chunk_granule(5461), 5440);
        assert_eq!(chunk_granule(10), 1024);
        assert_eq!(chunk_granule(u64::MAX), 1 << 30);
    }
}

/// Per-tick statistics of the paper's tenant classes, for tests and
/// examples of the policies built on this crate.
pub mod fixtures {
    use perf_policy_sdk::TenantStats;

    /// A B_App: `qps` QPs all backlogged with 1 MB WRITEs.
    pub fn bulk(tenant: u32, qps: u32, weight: u32) -> TenantStats {
        TenantStats {
            tenant,
            qps,
            backlogged_qps: qps,
            max_depth: 128,
            ewma_msg_bytes: 1048576.0,
            max_msg_bytes: 1048576,
            completed: 10,
            weight,
            ..TenantStats::ZERO
        }
    }

    /// A D_App: one 16 B WRITE at a time, 100 completions of
    /// `latency_ns` (mean and p99) this tick.
    pub fn ping(tenant: u32, latency_ns: u64) -> TenantStats {
        TenantStats {
            tenant,
            qps: 1,
            backlogged_qps: 1,
            max_depth: 1,
            ewma_msg_bytes: 16.0,
            max_msg_bytes: 16,
            completed: 100,
            mean_latency_ns: latency_ns,
            p99_latency_ns: latency_ns.min(u32::MAX as u64) as u32,
            weight: 1,
            ..TenantStats::ZERO
        }
    }
}
