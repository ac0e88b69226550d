//! The real-NIC side of the boundary: the ibverbs backend `VerbsRnic`
//! (cargo feature `verbs`) and what it is built from, which compiles
//! without the feature too, so that its logic is tested and benched on any
//! machine and `perf-runner devices` / `doctor` can report on one without
//! libibverbs:
//!
//! - [`host_gate`]: the cross-channel semantics (WAIT, SEND_ENABLE,
//!   managed QPs) kept in host memory, for NICs without them;
//! - [`ibv_abi`]: the trait's work requests and completions in ibverbs'
//!   terms, and GIDs;
//! - [`probe`] and [`sysfs`]: what a machine's RDMA devices are and can do;
//! - [`open`]: opening a device by name in any build;
//! - [`oob`]: the out-of-band exchange of QP endpoints between two hosts;
//! - [`port_counters`]: the port's traffic counters, sampled beside the
//!   loop.

pub mod host_gate;
pub mod ibv_abi;
pub mod oob;
pub mod open;
pub mod port_counters;
pub mod probe;
pub mod sysfs;

#[cfg(feature = "verbs")]
mod backend;
// The FFI boundary: the only unsafe code of the dataplane.
#[cfg(feature = "verbs")]
#[allow(unsafe_code, reason = "the FFI boundary to libibverbs")]
mod sys;

#[cfg(feature = "verbs")]
pub use backend::*;
