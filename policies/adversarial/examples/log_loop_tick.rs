//! The `LOG_LOOP_TICK` hostile policy as a wasm module (see the crate's docs).
#![cfg_attr(target_arch = "wasm32", no_std)]

perf_policy_sdk::export_policy!(
    perf_policy_adversarial::Hostile<{ perf_policy_adversarial::LOG_LOOP_TICK }>,
    perf_policy_adversarial::Hostile::<{ perf_policy_adversarial::LOG_LOOP_TICK }>::new
);
