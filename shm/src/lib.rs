//! The ABI between the PeRF-rs daemon (`perf-runner serve`) and the
//! processes it serves, shared by both sides: the layout of a client's
//! shared segment ([`abi`]), its request and completion rings ([`ring`]),
//! memory shared as sealed memfds ([`region`]), and the setup protocol on
//! the Unix socket ([`proto`]). `docs/shm-abi.md` describes the layout,
//! the protocol, versioning and what the daemon validates. All `unsafe`
//! is in one private module (`sys`), with its invariants.

pub mod abi;
pub mod proto;
pub mod region;
pub mod ring;
// The shared mapping and fd passing: the only unsafe code of the crate.
#[allow(unsafe_code, reason = "the shared mapping and fd passing")]
mod sys;

pub use abi::{CompletionEntry, Layout, Opcode, RequestEntry, SegmentStatus, Status};
pub use region::SharedRegion;
pub use ring::{ClientEnd, DaemonEnd, RingFault};

/// What went wrong with shared memory or the setup protocol.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("{0}")]
    Io(&'static str, #[source] std::io::Error),
    /// Creating or sealing a memfd failed.
    #[error("memfd")]
    Memfd(#[source] memfd::Error),
    /// A region handed over is not usable as shared memory.
    #[error("shared region: {0}")]
    Region(String),
    /// A ring size that is not a power of two within bounds.
    #[error("{ring} ring of {entries} entries (a power of two up to {max} expected)", max = abi::MAX_RING_ENTRIES)]
    RingSize {
        /// Which ring.
        ring: &'static str,
        /// The size asked for.
        entries: u32,
    },
    /// The segment does not start with the magic number.
    #[error("not a PeRF segment (magic {0:#x})")]
    BadMagic(u64),
    /// The segment is of another major version.
    #[error("segment layout version {major}.{minor}, this side reads {}.x", abi::VERSION_MAJOR)]
    Version {
        /// Its major version.
        major: u16,
        /// Its minor version.
        minor: u16,
    },
    /// The header does not describe this version's layout.
    #[error("segment header: {0}")]
    Header(String),
    /// The segment is shorter than its header says.
    #[error("segment of {have} B, its header says {need} B")]
    TooShort {
        /// What the header says.
        need: u64,
        /// What the file has.
        have: u64,
    },
    /// A malformed or unexpected setup message.
    #[error("setup protocol: {0}")]
    Protocol(String),
    /// A setup message that does not encode or decode as JSON (serde's
    /// reason is the source).
    #[error("setup protocol: {0}")]
    Json(&'static str, #[source] serde_json::Error),
}
