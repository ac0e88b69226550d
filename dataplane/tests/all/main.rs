//! The dataplane's integration tests, one test binary with a module per
//! area (one link of wasmtime instead of one per file). Filter by module:
//! `cargo test -p perf-dataplane --test all -- sim_props::`.

mod common;

mod calibration;
mod dataplane;
mod fair_admission;
mod faults;
mod host_handoff;
mod hostile_policies;
mod hostile_tenants;
mod loop_cost;
mod operator;
mod policy_decode_fuzz;
mod policy_suite;
mod policy_swap;
mod ready_sets;
mod send_rendezvous;
mod signaling;
mod sim_faults;
mod sim_props;
mod sim_semantics;
mod sim_traffic_classes;
mod soak;
mod tenant_removal;
mod verbs_device;
mod wasm_pacing;
mod wasm_policy;
mod zero_weight;
