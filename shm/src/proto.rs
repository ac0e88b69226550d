//! The setup protocol on the daemon's Unix socket: one request, one
//! answer, each a frame of a 4-byte little-endian length and that many
//! bytes of JSON, with at most [`MAX_FDS`] descriptors attached to the
//! frame's first byte (`SCM_RIGHTS`). The fast path never uses the socket;
//! the socket's end (EOF) is how the daemon learns a client has gone.

use std::io::{IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

use crate::ShmError;

/// The most descriptors one frame carries.
pub const MAX_FDS: usize = 1;
/// The longest frame body accepted.
pub const MAX_FRAME: u32 = 64 * 1024;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// First message: the client's ABI version, the tenant it wants to be
    /// (one its user may be; `None`: the daemon picks), its rings' sizes.
    Hello {
        /// The client's [`crate::abi::VERSION_MAJOR`].
        abi_major: u16,
        /// The client's [`crate::abi::VERSION_MINOR`].
        abi_minor: u16,
        /// The tenant name asked for.
        tenant: Option<String>,
        /// Request ring entries (a power of two).
        req_entries: u32,
        /// Completion ring entries (a power of two).
        cpl_entries: u32,
    },
    /// Registers the memfd attached (exactly `len` bytes, sealed): all of
    /// it, or the part `window` names, at the address `window` gives.
    RegMr {
        /// Its length.
        len: u64,
        /// The part registered and its address (`None`: all of it, at an
        /// address the NIC picks).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<MrWindow>,
    },
    /// Creates a QP in hardware traffic class `tc`.
    CreateQp {
        /// Traffic class (0-7).
        tc: u8,
    },
    /// Connects the client's QP `qp` to the QP numbered `peer_qpn` on the
    /// NIC (any tenant's), as `ibv_modify_qp` to RTR names its peer.
    ConnectQpn {
        /// The client's QP index.
        qp: u32,
        /// The peer QP's number ([`Reply::QpCreated`]'s `qpn`).
        peer_qpn: u32,
    },
    /// Connects the client's QP `qp` to QP `peer_qp` of tenant `peer`.
    ConnectQp {
        /// The client's QP index.
        qp: u32,
        /// The peer tenant's name.
        peer: String,
        /// The peer's QP index.
        peer_qp: u32,
    },
}

/// The part of a registered memfd that becomes the region, and the
/// address the region is known by (what `ibv_reg_mr` on an application's
/// own buffer asks: its pages go to the daemon whole, its region is the
/// buffer, at the buffer's own address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrWindow {
    /// Offset of the region's first byte in the memfd.
    pub offset: u64,
    /// The region's length.
    pub len: u64,
    /// The region's address: remote addresses and local offsets are from it.
    pub iova: u64,
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply {
    /// Answer to `Hello`, with the ring segment attached.
    Welcome {
        /// The tenant this connection is.
        tenant: String,
        /// The segment's length.
        segment_bytes: u64,
    },
    /// A region: its index for requests, and what a peer needs to reach it.
    MrRegistered {
        /// Index for [`crate::abi::RequestEntry::mr`].
        mr: u32,
        /// Its address on the NIC (remote addresses are offsets from it).
        addr: u64,
        /// Its remote key.
        rkey: u32,
    },
    /// A QP: its index for requests.
    QpCreated {
        /// Index for [`crate::abi::RequestEntry::qp`].
        qp: u32,
        /// Its number on the NIC, unique among the daemon's QPs (below
        /// 2^24): what a peer names in [`Request::ConnectQpn`].
        #[serde(default)]
        qpn: u32,
    },
    /// The QP is connected (ready to send).
    Connected,
    /// The request failed.
    Error {
        /// Why, in one line.
        message: String,
    },
}

/// Sends `msg` with `fds` attached.
pub fn send<T: Serialize>(sock: &UnixStream, msg: &T, fds: &[BorrowedFd<'_>]) -> Result<(), ShmError> {
    let body = serde_json::to_vec(msg).map_err(|e| ShmError::Json("encoding a message", e))?;
    let len = (body.len() as u32).to_le_bytes();
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let iov = [IoSlice::new(&len), IoSlice::new(&body)];
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
    let total = len.len() + body.len();
    let mut sent = sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map_err(|e| ShmError::Io("sending on the socket", e.into()))?;
    // The rest (a short write of a large frame) goes without descriptors.
    let all: Vec<u8> = len.iter().chain(&body).copied().collect();
    while sent < total {
        let n = sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(&all[sent..])], &[], MsgFlags::MSG_NOSIGNAL, None)
            .map_err(|e| ShmError::Io("sending on the socket", e.into()))?;
        sent += n;
    }
    Ok(())
}

/// Receives one frame: `None` at a clean end of the connection.
pub fn recv<T: for<'de> Deserialize<'de>>(sock: &UnixStream) -> Result<Option<(T, Vec<OwnedFd>)>, ShmError> {
    let mut len = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut len)];
        let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
            .map_err(|e| ShmError::Io("receiving on the socket", e.into()))?;
        let mut fds = Vec::new();
        let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
        for c in msg.cmsgs().map_err(|e| ShmError::Io("reading descriptors", e.into()))? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                fds.extend(raw.into_iter().map(crate::sys::adopt_fd));
            }
        }
        if truncated {
            return Err(ShmError::Protocol(format!("more than {MAX_FDS} descriptors on one message")));
        }
        (msg.bytes, fds)
    };
    if n == 0 {
        return Ok(None);
    }
    let mut s = sock;
    s.read_exact(&mut len[n..]).map_err(|e| ShmError::Io("reading a frame's length", e))?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(ShmError::Protocol(format!("a frame of {len} B (at most {MAX_FRAME})")));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body).map_err(|e| ShmError::Io("reading a frame", e))?;
    let msg = serde_json::from_slice(&body).map_err(|e| ShmError::Json("a malformed message", e))?;
    Ok(Some((msg, fds)))
}

/// Who is at the other end of `sock` (`SO_PEERCRED`): user id and process id.
pub fn peer_credentials(sock: &UnixStream) -> Result<(u32, i32), ShmError> {
    let c = nix::sys::socket::getsockopt(sock, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| ShmError::Io("reading the peer's credentials", e.into()))?;
    Ok((c.uid(), c.pid()))
}
