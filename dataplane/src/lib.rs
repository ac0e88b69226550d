//! # perf-dataplane
//!
//! The data plane of PeRF-rs, the Preemption-enabled RDMA Framework.
//!
//! - [`rnic`]: the verbs-level backend trait [`rnic::Rnic`] that everything
//!   above it speaks, and its backends: the simulated ConnectX-6-class NIC
//!   ([`rnic::sim`]) and, behind the `verbs` feature, real ibverbs.
//! - [`engine`]: the poll-mode dataplane loop (split, zero-weight WRs, QP
//!   pause/resume through control QPs) and the tenant API.
//! - [`policy`]: the policy host and the built-in native policies.
//! - [`rendezvous`]: SEND rendezvous between the dataplanes at the two
//!   ends of a QP, so a large SEND can be split like a WRITE.
//! - [`traffic`]: perftest-style traffic generators (`ib_write_bw`,
//!   `ib_write_lat`) that drive an RNIC directly, with no dataplane or policy
//!   in between, the calibration suite built from them, and the [`traffic::App`]
//!   trait and virtual-time driver that run applications on the simulator.

pub mod engine;
pub mod policy;
pub mod rendezvous;
pub mod rnic;
pub mod traffic;
