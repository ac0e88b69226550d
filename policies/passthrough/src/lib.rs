//! `passthrough`: no isolation. Every request goes to the NIC whole, no
//! QP is held back: the NIC's own round-robin decides. Equal to direct
//! mode, through the dataplane.
//!
//! One crate, two uses: the dataplane links it natively (its built-in
//! `passthrough`), and built for `wasm32-unknown-unknown` it is the
//! `passthrough.wasm` policy module ([`export_policy!`]). `no_std` on wasm32
//! (the macro supplies the panic handler); the native cdylib links std.
#![cfg_attr(target_arch = "wasm32", no_std)]

use perf_policy_sdk::{export_policy, Policy};

/// The no-isolation policy.
#[derive(Debug, Default, Clone, Copy)]
pub struct Passthrough;

impl Policy for Passthrough {
    fn name(&self) -> &str {
        "passthrough"
    }

    /// Plans are passthrough's (no split threshold): every message goes
    /// whole without a call (ABI 1.5).
    fn request_calls(&self) -> perf_policy_sdk::RequestCalls {
        perf_policy_sdk::RequestCalls::Plan { sends: false }
    }
}

export_policy!(Passthrough);
