//! The bytes both sides agree on: the segment header, where the ring
//! indices and entries sit, the request and completion entries, opcodes
//! and status codes. Everything here is plain `#[repr(C)]` integers, so
//! any bit pattern a client leaves in shared memory is a value the daemon
//! can read and then reject (see `docs/shm-abi.md`).

/// `"PERFSHM\0"`, little-endian: the first 8 bytes of every segment.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PERFSHM\0");
/// Major version of the layout: a client of another major is refused.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version: additions a client of an older minor can ignore.
pub const VERSION_MINOR: u16 = 0;
/// The cache line every index sits alone on.
pub const CACHE_LINE: usize = 64;

/// Offset of the request ring's tail (written by the client).
pub const REQ_TAIL_OFFSET: usize = CACHE_LINE;
/// Offset of the request ring's head (written by the daemon).
pub const REQ_HEAD_OFFSET: usize = 2 * CACHE_LINE;
/// Offset of the completion ring's tail (written by the daemon).
pub const CPL_TAIL_OFFSET: usize = 3 * CACHE_LINE;
/// Offset of the completion ring's head (written by the client).
pub const CPL_HEAD_OFFSET: usize = 4 * CACHE_LINE;
/// Offset of the daemon's status word ([`SegmentStatus`]).
pub const STATUS_OFFSET: usize = 5 * CACHE_LINE;
/// Offset of the first request entry.
pub const ENTRIES_OFFSET: usize = 6 * CACHE_LINE;

/// The most entries a ring may have.
pub const MAX_RING_ENTRIES: u32 = 1 << 20;

/// The segment's first cache line: written once by the daemon, checked by
/// the client; the daemon never reads it back.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION_MAJOR`] of the daemon that made the segment.
    pub version_major: u16,
    /// [`VERSION_MINOR`] of the daemon that made the segment.
    pub version_minor: u16,
    /// `size_of::<SegmentHeader>()`.
    pub header_bytes: u32,
    /// Request ring entries (a power of two).
    pub req_entries: u32,
    /// Completion ring entries (a power of two).
    pub cpl_entries: u32,
    /// `size_of::<RequestEntry>()`.
    pub req_entry_bytes: u32,
    /// `size_of::<CompletionEntry>()`.
    pub cpl_entry_bytes: u32,
    /// Offset of the first request entry.
    pub req_offset: u64,
    /// Offset of the first completion entry.
    pub cpl_offset: u64,
    /// Length of the whole segment.
    pub total_bytes: u64,
}

/// What a [`RequestEntry`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// RDMA WRITE of the local buffer to `remote_addr` / `rkey`.
    Write = 1,
    /// RDMA WRITE with immediate data `imm`.
    WriteImm = 2,
    /// SEND of the local buffer into the peer's next RECV.
    Send = 3,
    /// RECV into the local buffer.
    Recv = 4,
    /// RDMA READ of `remote_addr` / `rkey` into the local buffer.
    Read = 5,
}

impl Opcode {
    /// The opcode with this code, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Opcode::Write,
            2 => Opcode::WriteImm,
            3 => Opcode::Send,
            4 => Opcode::Recv,
            5 => Opcode::Read,
            _ => return None,
        })
    }
}

/// One work request in the request ring (64 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestEntry {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Offset of the local buffer into region `mr`.
    pub local_offset: u64,
    /// Remote address (WRITE, WRITE_WITH_IMM, READ).
    pub remote_addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The client's QP index (from `create_qp`).
    pub qp: u32,
    /// The client's region index (from `reg_mr`).
    pub mr: u32,
    /// Remote key (WRITE, WRITE_WITH_IMM, READ).
    pub rkey: u32,
    /// Immediate data (WRITE_WITH_IMM).
    pub imm: u32,
    /// An [`Opcode`] code.
    pub opcode: u8,
    /// Zero.
    pub pad: [u8; 3],
    /// Zero (room for later minors).
    pub reserved: [u64; 2],
}

/// Completion status codes (`enum ibv_wc_status`'s meanings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// The request completed.
    Success = 0,
    /// A receive buffer was too small.
    LocLenErr = 1,
    /// A local QP error: no such QP, or an unknown opcode.
    LocQpOpErr = 2,
    /// The local buffer failed the region, bounds or ownership check.
    LocProtErr = 3,
    /// Flushed: the QP is in error.
    WrFlushErr = 4,
    /// The responder rejected the request as invalid.
    RemInvReqErr = 5,
    /// The responder rejected the rkey, bounds or rights.
    RemAccessErr = 6,
    /// The responder failed the operation.
    RemOpErr = 7,
    /// Transport retries exhausted.
    RetryExcErr = 8,
    /// Receiver-not-ready retries exhausted.
    RnrRetryExcErr = 9,
}

impl Status {
    /// The status with this code, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        use Status::*;
        [
            Success,
            LocLenErr,
            LocQpOpErr,
            LocProtErr,
            WrFlushErr,
            RemInvReqErr,
            RemAccessErr,
            RemOpErr,
            RetryExcErr,
            RnrRetryExcErr,
        ]
        .get(code as usize)
        .copied()
    }
}

/// [`CompletionEntry::kind`] of a send-side request.
pub const KIND_SEND: u8 = 0;
/// [`CompletionEntry::kind`] of a RECV.
pub const KIND_RECV: u8 = 1;
/// [`CompletionEntry::flags`]: `imm` is valid.
pub const FLAG_IMM: u8 = 1;

/// One completion in the completion ring (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompletionEntry {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// The client's QP index.
    pub qp: u32,
    /// Bytes of the message.
    pub byte_len: u32,
    /// Immediate data, if [`FLAG_IMM`].
    pub imm: u32,
    /// A [`Status`] code.
    pub status: u8,
    /// [`KIND_SEND`] or [`KIND_RECV`].
    pub kind: u8,
    /// [`FLAG_IMM`] or 0.
    pub flags: u8,
    /// Zero.
    pub pad: u8,
    /// From the daemon taking the request to its completion, ns.
    pub latency_ns: u64,
}

/// The daemon's status word: what it thinks of the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SegmentStatus {
    /// Serving.
    Running = 0,
    /// Shutting down: no new requests are taken; what was taken completes.
    Draining = 1,
    /// The client broke the ring protocol (an index out of range or moved
    /// backwards): the daemon stopped reading it; its QPs are flushed.
    Broken = 2,
}

impl SegmentStatus {
    /// The status with this code, if any.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => SegmentStatus::Running,
            1 => SegmentStatus::Draining,
            2 => SegmentStatus::Broken,
            _ => return None,
        })
    }
}

const _: () = {
    assert!(std::mem::size_of::<SegmentHeader>() <= CACHE_LINE);
    assert!(std::mem::size_of::<RequestEntry>() == 64);
    assert!(std::mem::size_of::<CompletionEntry>() == 32);
};

/// Where everything sits in a segment with these ring sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Request ring entries (a power of two).
    pub req_entries: u32,
    /// Completion ring entries (a power of two).
    pub cpl_entries: u32,
}

impl Layout {
    /// A layout, if both sizes are powers of two within
    /// [`MAX_RING_ENTRIES`].
    pub fn new(req_entries: u32, cpl_entries: u32) -> Result<Self, crate::ShmError> {
        for (what, n) in [("request", req_entries), ("completion", cpl_entries)] {
            if !n.is_power_of_two() || n > MAX_RING_ENTRIES {
                return Err(crate::ShmError::RingSize { ring: what, entries: n });
            }
        }
        Ok(Layout { req_entries, cpl_entries })
    }

    /// Offset of request entry 0.
    pub fn req_offset(&self) -> usize {
        ENTRIES_OFFSET
    }

    /// Offset of completion entry 0.
    pub fn cpl_offset(&self) -> usize {
        ENTRIES_OFFSET + self.req_entries as usize * std::mem::size_of::<RequestEntry>()
    }

    /// Length of the segment.
    pub fn total_bytes(&self) -> usize {
        self.cpl_offset() + self.cpl_entries as usize * std::mem::size_of::<CompletionEntry>()
    }

    /// The header describing this layout.
    pub fn header(&self) -> SegmentHeader {
        SegmentHeader {
            magic: MAGIC,
            version_major: VERSION_MAJOR,
            version_minor: VERSION_MINOR,
            header_bytes: std::mem::size_of::<SegmentHeader>() as u32,
            req_entries: self.req_entries,
            cpl_entries: self.cpl_entries,
            req_entry_bytes: std::mem::size_of::<RequestEntry>() as u32,
            cpl_entry_bytes: std::mem::size_of::<CompletionEntry>() as u32,
            req_offset: self.req_offset() as u64,
            cpl_offset: self.cpl_offset() as u64,
            total_bytes: self.total_bytes() as u64,
        }
    }

    /// The layout a header describes, if it is one this version reads and
    /// it fits in `file_len` bytes.
    pub fn from_header(h: &SegmentHeader, file_len: u64) -> Result<Self, crate::ShmError> {
        if h.magic != MAGIC {
            return Err(crate::ShmError::BadMagic(h.magic));
        }
        if h.version_major != VERSION_MAJOR {
            return Err(crate::ShmError::Version { major: h.version_major, minor: h.version_minor });
        }
        let layout = Layout::new(h.req_entries, h.cpl_entries)?;
        if h.header_bytes as usize != std::mem::size_of::<SegmentHeader>()
            || h.req_entry_bytes as usize != std::mem::size_of::<RequestEntry>()
            || h.cpl_entry_bytes as usize != std::mem::size_of::<CompletionEntry>()
            || h.req_offset != layout.req_offset() as u64
            || h.cpl_offset != layout.cpl_offset() as u64
            || h.total_bytes != layout.total_bytes() as u64
        {
            return Err(crate::ShmError::Header(format!("{h:?} does not match the layout of version 1")));
        }
        if file_len < h.total_bytes {
            return Err(crate::ShmError::TooShort { need: h.total_bytes, have: file_len });
        }
        Ok(layout)
    }
}
