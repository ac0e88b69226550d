//! # perf-dataplane
//!
//! The data plane of PeRF-rs, the Preemption-enabled RDMA Framework.
//!
//! - [`rnic`]: the verbs-level backend trait [`rnic::Rnic`] that everything
//!   above it speaks, and its backends: the simulated ConnectX-6-class NIC
//!   ([`rnic::sim`]) and, behind the `verbs` feature, real ibverbs.
//! - [`perftest`]: perftest-style traffic generators (`ib_write_bw`,
//!   `ib_write_lat`) that drive an RNIC directly, with no dataplane or policy
//!   in between, and the calibration suite built from them.

pub mod perftest;
pub mod rnic;
