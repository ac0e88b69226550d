//! The client side of `perf-runner serve`: a verbs-like API for a process
//! whose RDMA traffic goes through the PeRF dataplane in the daemon.
//!
//! [`Client::connect`] opens the daemon's Unix socket and maps the
//! client's ring segment; [`Client::reg_mr`] shares a sealed memfd with the
//! daemon (the simulated NIC moves these very bytes); [`Client::create_qp`]
//! and [`Client::connect_qp`] set up RC QPs to another tenant's QPs. The
//! fast path, [`Client::post`] and [`Client::poll`], only touches shared
//! memory: no system call per request. One thread drives a `Client` (the
//! rings are single-producer, single-consumer).

#[allow(non_camel_case_types, reason = "the C API's type names")]
// The C boundary: the only unsafe code of the crate.
#[allow(unsafe_code, reason = "the C API takes raw pointers")]
pub mod capi;

use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use perf_shm::abi::{self, FLAG_IMM, KIND_RECV};
pub use perf_shm::proto::MrWindow;
use perf_shm::proto::{self, Reply, Request};
use perf_shm::{ClientEnd, CompletionEntry, RequestEntry, SegmentStatus, SharedRegion, ShmError};

pub use perf_shm::Status;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Shared memory or the socket failed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// Connecting to the daemon's socket failed.
    #[error("connecting to the daemon at {path}")]
    Connect {
        /// The socket.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The daemon refused the request.
    #[error("the daemon refused: {0}")]
    Refused(String),
    /// The daemon closed the connection.
    #[error("the daemon closed the connection")]
    Closed,
    /// The daemon answered something that does not fit the request.
    #[error("unexpected answer from the daemon: {0}")]
    Unexpected(String),
    /// The daemon stopped taking requests from this client.
    #[error("the daemon stopped taking requests ({0:?})")]
    Stopped(SegmentStatus),
    /// A region index this client never registered.
    #[error("no memory region {0}")]
    NoRegion(u32),
}

/// Options of [`Client::connect`].
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The tenant to be (`None`: the one the daemon's tenants file gives
    /// this process's user, or one named after the process).
    pub tenant: Option<String>,
    /// Request ring entries (a power of two).
    pub req_entries: u32,
    /// Completion ring entries (a power of two).
    pub cpl_entries: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { tenant: None, req_entries: 4096, cpl_entries: 8192 }
    }
}

/// A registered region: its index in requests and what a peer needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Index for [`WorkRequest::mr`].
    pub index: u32,
    /// Its address on the NIC.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: usize,
}

impl Mr {
    /// The remote address of `offset` into this region, for a peer.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr { addr: self.addr + offset, rkey: self.rkey }
    }
}

/// A buffer at the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Its address on the peer's NIC.
    pub addr: u64,
    /// The peer region's remote key.
    pub rkey: u32,
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE to `remote`.
    Write(RemoteAddr),
    /// RDMA WRITE with immediate data.
    WriteImm(RemoteAddr, u32),
    /// SEND into the peer's next RECV.
    Send,
    /// RECV into the local buffer.
    Recv,
    /// RDMA READ of `remote` into the local buffer.
    Read(RemoteAddr),
}

/// One work request on one of the client's QPs: `len` bytes at `offset`
/// into region `mr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The QP (from [`Client::create_qp`]).
    pub qp: u32,
    /// The operation.
    pub op: Op,
    /// The region's index ([`Mr::index`]).
    pub mr: u32,
    /// Offset into it.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl WorkRequest {
    /// The ring entry of this request.
    pub fn entry(&self) -> RequestEntry {
        let (opcode, remote, imm) = match self.op {
            Op::Write(r) => (abi::Opcode::Write, Some(r), 0),
            Op::WriteImm(r, imm) => (abi::Opcode::WriteImm, Some(r), imm),
            Op::Send => (abi::Opcode::Send, None, 0),
            Op::Recv => (abi::Opcode::Recv, None, 0),
            Op::Read(r) => (abi::Opcode::Read, Some(r), 0),
        };
        RequestEntry {
            wr_id: self.wr_id,
            local_offset: self.offset,
            remote_addr: remote.map_or(0, |r| r.addr),
            len: self.len,
            qp: self.qp,
            mr: self.mr,
            rkey: remote.map_or(0, |r| r.rkey),
            imm,
            opcode: opcode as u8,
            ..RequestEntry::default()
        }
    }
}

/// A completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// Its QP.
    pub qp: u32,
    /// Outcome (`None`: a code this version does not know).
    pub status: Option<Status>,
    /// Whether a RECV completed (else a send-side request).
    pub recv: bool,
    /// Bytes of the message.
    pub byte_len: u32,
    /// Immediate data received, if any.
    pub imm: Option<u32>,
    /// From the daemon taking the request to its completion, ns.
    pub latency_ns: u64,
}

impl From<CompletionEntry> for Completion {
    fn from(c: CompletionEntry) -> Self {
        Completion {
            wr_id: c.wr_id,
            qp: c.qp,
            status: Status::from_code(c.status),
            recv: c.kind == KIND_RECV,
            byte_len: c.byte_len,
            imm: (c.flags & FLAG_IMM != 0).then_some(c.imm),
            latency_ns: c.latency_ns,
        }
    }
}

/// A connection to the daemon: one tenant's rings, regions and QPs.
pub struct Client {
    sock: UnixStream,
    rings: ClientEnd,
    tenant: String,
    regions: Vec<(Mr, SharedRegion)>,
    entries: Vec<RequestEntry>,
    cpl: Vec<CompletionEntry>,
}

impl Client {
    /// Connects to the daemon listening on `path`.
    pub fn connect(path: impl AsRef<Path>, opts: &ConnectOptions) -> Result<Self, ClientError> {
        let path = path.as_ref();
        let sock = UnixStream::connect(path)
            .map_err(|source| ClientError::Connect { path: path.display().to_string(), source })?;
        let hello = Request::Hello {
            abi_major: abi::VERSION_MAJOR,
            abi_minor: abi::VERSION_MINOR,
            tenant: opts.tenant.clone(),
            req_entries: opts.req_entries,
            cpl_entries: opts.cpl_entries,
        };
        let (reply, mut fds) = ask(&sock, &hello, None)?;
        let Reply::Welcome { tenant, segment_bytes } = reply else {
            return Err(ClientError::Unexpected(format!("{reply:?} to hello")));
        };
        let fd = fds.pop().ok_or_else(|| ClientError::Unexpected("no segment with the welcome".into()))?;
        let rings = ClientEnd::open(fd, segment_bytes as usize)?;
        let cap = rings.layout().cpl_entries as usize;
        Ok(Client {
            sock,
            rings,
            tenant,
            regions: Vec::new(),
            entries: Vec::new(),
            cpl: vec![CompletionEntry::default(); cap],
        })
    }

    /// The tenant this connection is.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Registers a new zeroed region of `len` bytes, shared with the daemon.
    pub fn reg_mr(&mut self, len: usize) -> Result<Mr, ClientError> {
        let region = SharedRegion::create("perf-mr", len)?;
        let (reply, _) = ask(&self.sock, &Request::RegMr { len: len as u64, window: None }, Some(region.fd()))?;
        let Reply::MrRegistered { mr, addr, rkey } = reply else {
            return Err(ClientError::Unexpected(format!("{reply:?} to reg_mr")));
        };
        let mr = Mr { index: mr, addr, rkey, len };
        self.regions.push((mr, region));
        Ok(mr)
    }

    /// Registers part of a memfd this process made and keeps mapped
    /// itself (`len` bytes, sealed against shrinking and growing): the
    /// region is `window`'s bytes, at `window.iova`. The daemon maps the
    /// whole memfd; what it moves is the window.
    pub fn reg_mr_window(&mut self, memfd: BorrowedFd<'_>, len: u64, window: MrWindow) -> Result<Mr, ClientError> {
        let (reply, _) = ask(&self.sock, &Request::RegMr { len, window: Some(window) }, Some(memfd))?;
        let Reply::MrRegistered { mr, addr, rkey } = reply else {
            return Err(ClientError::Unexpected(format!("{reply:?} to reg_mr")));
        };
        Ok(Mr { index: mr, addr, rkey, len: window.len as usize })
    }

    fn region(&mut self, mr: Mr) -> Result<&mut SharedRegion, ClientError> {
        self.regions.iter_mut().find(|(m, _)| *m == mr).map(|(_, r)| r).ok_or(ClientError::NoRegion(mr.index))
    }

    /// The bytes of region `mr` (the NIC reads and writes them).
    pub fn bytes(&mut self, mr: Mr) -> Result<&mut [u8], ClientError> {
        Ok(self.region(mr)?.bytes_mut())
    }

    /// The first byte of region `mr` (for the C API).
    pub fn region_ptr(&mut self, mr: Mr) -> Result<*mut u8, ClientError> {
        Ok(self.region(mr)?.as_mut_ptr())
    }

    /// Creates a QP in traffic class `tc`; returns its index.
    pub fn create_qp(&mut self, tc: u8) -> Result<u32, ClientError> {
        Ok(self.create_qp_numbered(tc)?.0)
    }

    /// Creates a QP in traffic class `tc`; returns its index and its
    /// number on the NIC (what a peer gives [`Client::connect_qpn`]).
    pub fn create_qp_numbered(&mut self, tc: u8) -> Result<(u32, u32), ClientError> {
        match ask(&self.sock, &Request::CreateQp { tc }, None)?.0 {
            Reply::QpCreated { qp, qpn } => Ok((qp, qpn)),
            r => Err(ClientError::Unexpected(format!("{r:?} to create_qp"))),
        }
    }

    /// Connects QP `qp` to the QP numbered `peer_qpn` on the NIC, whoever
    /// owns it (who connects its QP to this one likewise).
    pub fn connect_qpn(&mut self, qp: u32, peer_qpn: u32) -> Result<(), ClientError> {
        match ask(&self.sock, &Request::ConnectQpn { qp, peer_qpn }, None)?.0 {
            Reply::Connected => Ok(()),
            r => Err(ClientError::Unexpected(format!("{r:?} to connect_qpn"))),
        }
    }

    /// Connects QP `qp` to QP `peer_qp` of tenant `peer` (who connects its
    /// QP to this one likewise).
    pub fn connect_qp(&mut self, qp: u32, peer: &str, peer_qp: u32) -> Result<(), ClientError> {
        match ask(&self.sock, &Request::ConnectQp { qp, peer: peer.to_string(), peer_qp }, None)?.0 {
            Reply::Connected => Ok(()),
            r => Err(ClientError::Unexpected(format!("{r:?} to connect_qp"))),
        }
    }

    /// Posts as many of `wrs` as the request ring has room for, in order,
    /// as one post list; returns how many (fewer than `wrs.len()`: the
    /// ring is full, post the rest later). An error if the daemon no
    /// longer takes this client's requests.
    pub fn post(&mut self, wrs: &[WorkRequest]) -> Result<usize, ClientError> {
        match self.rings.status() {
            Some(SegmentStatus::Running) => {}
            Some(s) => return Err(ClientError::Stopped(s)),
            None => return Err(ClientError::Unexpected("an unknown segment status".into())),
        }
        self.entries.clear();
        self.entries.extend(wrs.iter().map(WorkRequest::entry));
        Ok(self.rings.post(&self.entries))
    }

    /// Takes the completions waiting (at most `max`), appending them to `out`;
    /// returns how many.
    pub fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let n = max.min(self.cpl.len());
        let got = self.rings.poll(&mut self.cpl[..n]);
        out.extend(self.cpl[..got].iter().map(|&c| Completion::from(c)));
        got
    }

    /// What the daemon says of this client's rings.
    pub fn status(&self) -> Option<SegmentStatus> {
        self.rings.status()
    }

    /// The raw rings (for tests of what the daemon does with a hostile
    /// client's ring contents).
    pub fn rings_mut(&mut self) -> &mut ClientEnd {
        &mut self.rings
    }
}

/// Sends `req` (with `region`'s descriptor) and reads the answer.
fn ask(
    sock: &UnixStream,
    req: &Request,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(Reply, Vec<std::os::fd::OwnedFd>), ClientError> {
    let fds: Vec<_> = fd.into_iter().collect();
    proto::send(sock, req, &fds)?;
    match proto::recv::<Reply>(sock)? {
        None => Err(ClientError::Closed),
        Some((Reply::Error { message }, _)) => Err(ClientError::Refused(message)),
        Some(r) => Ok(r),
    }
}
