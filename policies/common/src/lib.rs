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

#[doc(hidden)]
pub use perf_policy_sdk as __sdk;

/// `impl Default for $policy`: the policy with its parameters' defaults
/// (`$policy::new($params::default())`).
#[macro_export]
macro_rules! default_from_params {
    ($policy:ident, $params:ident) => {
        impl Default for $policy {
            fn default() -> Self {
                Self::new($params::default())
            }
        }
    };
}

/// Inside `impl Policy`: `on_pacing` and `tick_interval_ns` of a policy
/// that paces and ticks as the [`Perf`] in its field `$perf` does.
#[macro_export]
macro_rules! pace_and_tick_as_perf {
    ($perf:ident) => {
        fn on_pacing(&mut self, now_ns: u64, pacing: &mut [$crate::__sdk::Pacing]) {
            self.$perf.on_pacing(now_ns, pacing);
        }

        fn tick_interval_ns(&self) -> u64 {
            self.$perf.tick_interval_ns()
        }
    };
}

/// Inside `impl Policy`: `request_calls` of a policy that keeps the
/// default `on_request` (the plan rule, SENDs whole), so that no request
/// needs a call (ABI 1.5).
#[macro_export]
macro_rules! plan_rule_request_calls {
    () => {
        fn request_calls(&self) -> $crate::__sdk::RequestCalls {
            $crate::__sdk::RequestCalls::Plan { sends: false }
        }
    };
}

/// Inside `impl Policy`: `set_param` of a policy that restarts from its
/// new parameters: the key is set on a copy of `self.params` (its `set`),
/// and on success the policy is `$policy::new` of the copy. The attributes
/// (the doc comment naming the keys) go on the method.
#[macro_export]
macro_rules! restart_on_set_param {
    ($(#[$attr:meta])* $policy:ident) => {
        $(#[$attr])*
        fn set_param(&mut self, key: &str, value: &str) -> Result<(), $crate::__sdk::ParamError> {
            let mut params = self.params;
            params.set(key, value)?;
            *self = $policy::new(params);
            Ok(())
        }
    };
}

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
