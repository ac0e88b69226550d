//! `perf`: PeRF as published, every constant a parameter with the paper's
//! default. The mechanism lives in `perf-policy-common` ([`Perf`],
//! [`PerfParams`]; `docs/policies.md#perf`), shared with the policies built
//! on it; this crate is the policy itself.
//!
//! One crate, two uses: the dataplane links it natively (its built-in
//! `perf`), and built for `wasm32-unknown-unknown` it is the `perf.wasm`
//! policy module ([`export_policy!`]); both run the same code. `no_std` on
//! wasm32 (the macro supplies the panic handler); the native cdylib links
//! std.
#![cfg_attr(target_arch = "wasm32", no_std)]

pub use perf_policy_common::{Perf, PerfParams, QpCap, QpDaemon, QpFormula};
use perf_policy_sdk::export_policy;

export_policy!(Perf);
