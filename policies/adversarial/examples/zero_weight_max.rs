//! The `ZERO_WEIGHT_MAX` hostile policy as a wasm module (see the crate's docs).
#![cfg_attr(target_arch = "wasm32", no_std)]

perf_policy_sdk::export_policy!(
    perf_policy_adversarial::Hostile<{ perf_policy_adversarial::ZERO_WEIGHT_MAX }>,
    perf_policy_adversarial::Hostile::<{ perf_policy_adversarial::ZERO_WEIGHT_MAX }>::new
);
