//! `passthrough`: no isolation. Every request goes to the NIC whole, no
//! QP is held back: the NIC's own round-robin decides. Equal to direct
//! mode, through the dataplane. The code lives in the
//! `perf-policy-passthrough` crate (`policies/passthrough`), also compiled
//! to the `passthrough.wasm` policy module.

pub use perf_policy_passthrough::Passthrough;
