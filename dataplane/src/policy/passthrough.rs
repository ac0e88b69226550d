//! `passthrough`: no isolation. Every request goes to the NIC whole, no
//! QP is held back: the NIC's own round-robin decides. Equal to direct
//! mode, through the dataplane.

use perf_policy_sdk::Policy;

/// The no-isolation policy.
#[derive(Debug, Default, Clone, Copy)]
pub struct Passthrough;

impl Policy for Passthrough {
    fn name(&self) -> &str {
        "passthrough"
    }
}
