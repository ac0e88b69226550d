//! The out-of-band connection exchange, perftest style: before RC QPs can
//! be connected, the two sides swap what the other needs (LID, QP number,
//! PSN, rkey, buffer address, GID, and the limits both sides negotiate:
//! path MTU and outstanding RDMA READs) over a plain TCP connection, then
//! synchronise once both have moved their QPs to RTS.
//!
//! Wire format (ASCII, one record per line, like perftest's
//! `LID:QPN:PSN:RKEY:VADDR:GID` string plus the MTU and read depth that
//! perftest also exchanges): a header line `PERF-RS-OOB 2 <count>` and then
//! `<count>` lines of
//! `llll:qqqqqq:pppppp:rrrrrrrr:aaaaaaaaaaaaaaaa:gggg...:mmmm:dd` (hex,
//! fixed width, the GID as 32 hex digits, `mmmm` the port's active MTU in
//! bytes and `dd` the reads the QP accepts as responder, both 0 when not
//! known). Each side connects with the smaller MTU and read depth of the
//! two ([`QpEndpoint::negotiated_mtu`], [`QpEndpoint::negotiated_rd_atomic`]). The client writes first; the server reads,
//! then answers with its own records. [`OobConn::barrier`] swaps one `SYNC`
//! line each way.
//!
//! Backend-independent: compiled and tested without the `verbs` feature.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::rnic::{Gid, QpEndpoint};

/// First word of the header line.
pub const MAGIC: &str = "PERF-RS-OOB";
/// Protocol version.
pub const VERSION: u32 = 2;
/// Most records one message may carry.
pub const MAX_RECORDS: usize = 4096;
const MAX_LINE: u64 = 256;

/// What one side tells the other about one QP and its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID, QP number and starting PSN.
    pub endpoint: QpEndpoint,
    /// Remote key of the buffer the peer may access.
    pub rkey: u32,
    /// Virtual address of that buffer.
    pub addr: u64,
}

/// Which side of the exchange this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Listens, reads first.
    Server,
    /// Connects, writes first.
    Client,
}

/// A failure of the out-of-band exchange.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    /// A socket call failed.
    #[error("out-of-band exchange: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The peer sent something that is not this protocol.
    #[error("malformed out-of-band message: {0}")]
    Malformed(String),
    /// No peer within the time allowed.
    #[error("out-of-band exchange timed out: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// The socket's timeout error, when a socket call timed out (not
        /// when the exchange's own deadline passed).
        #[source]
        source: Option<std::io::Error>,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> OobError {
    let context = context.into();
    move |source| {
        if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
            OobError::Timeout { what: context, source: Some(source) }
        } else {
            OobError::Io { context, source }
        }
    }
}

fn hex_field<T>(
    field: &str,
    name: &str,
    width: usize,
    parse: fn(&str, u32) -> Result<T, std::num::ParseIntError>,
) -> Result<T, OobError> {
    if field.len() != width || !field.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(OobError::Malformed(format!("{name} must be {width} hex digits, got {field:?}")));
    }
    parse(field, 16).map_err(|e| OobError::Malformed(format!("{name} {field:?}: {e}")))
}

impl ConnInfo {
    /// The record line (without newline).
    pub fn encode(&self) -> String {
        let gid: String = self.endpoint.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:{gid}:{:04x}:{:02x}",
            self.lid,
            self.endpoint.qp_num & 0xff_ffff,
            self.endpoint.psn & 0xff_ffff,
            self.rkey,
            self.addr,
            self.endpoint.mtu.min(0xffff),
            self.endpoint.max_rd_atomic.min(0xff)
        )
    }

    /// Parses a record line.
    pub fn decode(line: &str) -> Result<ConnInfo, OobError> {
        let f: Vec<&str> = line.trim_end_matches(['\r', '\n']).split(':').collect();
        let [lid, qpn, psn, rkey, addr, gid, mtu, rd] = f[..] else {
            return Err(OobError::Malformed(format!("expected 8 ':'-separated fields, got {}: {line:?}", f.len())));
        };
        let lid = hex_field(lid, "LID", 4, u16::from_str_radix)?;
        let qp_num = hex_field(qpn, "QPN", 6, u32::from_str_radix)?;
        let psn = hex_field(psn, "PSN", 6, u32::from_str_radix)?;
        let rkey = hex_field(rkey, "rkey", 8, u32::from_str_radix)?;
        let addr = hex_field(addr, "address", 16, u64::from_str_radix)?;
        if gid.len() != 32 || !gid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(OobError::Malformed(format!("GID must be 32 hex digits, got {gid:?}")));
        }
        let mut g: Gid = [0; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = hex_field(&gid[2 * i..2 * i + 2], "GID byte", 2, u8::from_str_radix)?;
        }
        let mtu = hex_field(mtu, "MTU", 4, u32::from_str_radix)?;
        let max_rd_atomic = hex_field(rd, "read depth", 2, u32::from_str_radix)?;
        Ok(ConnInfo { lid, endpoint: QpEndpoint { gid: g, qp_num, psn, mtu, max_rd_atomic }, rkey, addr })
    }
}

/// The full message for a list of records.
pub fn encode_message(records: &[ConnInfo]) -> String {
    let mut s = format!("{MAGIC} {VERSION} {}\n", records.len());
    for r in records {
        s.push_str(&r.encode());
        s.push('\n');
    }
    s
}

fn read_line(r: &mut impl BufRead, what: &str) -> Result<String, OobError> {
    let mut line = String::new();
    let n = r.by_ref().take(MAX_LINE).read_line(&mut line).map_err(io(format!("reading {what}")))?;
    if n == 0 {
        return Err(OobError::Malformed(format!("connection closed before {what}")));
    }
    if !line.ends_with('\n') {
        return Err(OobError::Malformed(format!("{what} longer than {MAX_LINE} bytes or unterminated")));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads one message (header and records).
pub fn decode_message(r: &mut impl BufRead) -> Result<Vec<ConnInfo>, OobError> {
    let header = read_line(r, "the header")?;
    let words: Vec<&str> = header.split_whitespace().collect();
    let [magic, version, count] = words[..] else {
        return Err(OobError::Malformed(format!("bad header {header:?}")));
    };
    if magic != MAGIC {
        return Err(OobError::Malformed(format!("not a {MAGIC} peer (header {header:?})")));
    }
    if version != VERSION.to_string() {
        return Err(OobError::Malformed(format!("peer speaks version {version}, this side {VERSION}")));
    }
    let count: usize = count.parse().map_err(|_| OobError::Malformed(format!("bad record count {count:?}")))?;
    if count > MAX_RECORDS {
        return Err(OobError::Malformed(format!("{count} records exceed the limit of {MAX_RECORDS}")));
    }
    (0..count).map(|i| ConnInfo::decode(&read_line(r, &format!("record {i}"))?)).collect()
}

/// An established out-of-band connection.
pub struct OobConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    role: Role,
    peer: SocketAddr,
}

impl OobConn {
    fn new(stream: TcpStream, role: Role, timeout: Duration) -> Result<Self, OobError> {
        stream.set_nonblocking(false).map_err(io("configuring the socket"))?;
        stream.set_read_timeout(Some(timeout)).map_err(io("configuring the socket"))?;
        stream.set_write_timeout(Some(timeout)).map_err(io("configuring the socket"))?;
        stream.set_nodelay(true).map_err(io("configuring the socket"))?;
        let peer = stream.peer_addr().map_err(io("reading the peer address"))?;
        let writer = stream.try_clone().map_err(io("cloning the socket"))?;
        Ok(OobConn { reader: BufReader::new(stream), writer, role, peer })
    }

    /// Waits up to `timeout` for one client on `listener` (server role).
    pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<Self, OobError> {
        listener.set_nonblocking(true).map_err(io("configuring the listener"))?;
        let deadline = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((stream, _)) => return OobConn::new(stream, Role::Server, timeout),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let at = listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                        let what = format!("no peer connected to {at} within {timeout:?}");
                        return Err(OobError::Timeout { what, source: None });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(io("accepting")(e)),
            }
        }
    }

    /// Connects to a server (client role), retrying until `timeout` while
    /// the server is not listening yet.
    pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> Result<Self, OobError> {
        let target = addr
            .to_socket_addrs()
            .map_err(io("resolving the peer address"))?
            .next()
            .ok_or_else(|| OobError::Malformed("the peer address resolves to nothing".into()))?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let what = format!("could not connect to {target} within {timeout:?}");
                return Err(OobError::Timeout { what, source: None });
            }
            match TcpStream::connect_timeout(&target, left) {
                Ok(stream) => return OobConn::new(stream, Role::Client, timeout),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionRefused) => {
                    std::thread::sleep(Duration::from_millis(20).min(left));
                }
                Err(e) => return Err(io(format!("connecting to {target}"))(e)),
            }
        }
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's socket address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This side's socket address: the address of the interface the
    /// kernel routes to the peer (whose RoCE GID the QPs should use).
    pub fn local_addr(&self) -> Result<SocketAddr, OobError> {
        self.writer.local_addr().map_err(io("reading the local address"))
    }

    fn send(&mut self, records: &[ConnInfo]) -> Result<(), OobError> {
        self.writer.write_all(encode_message(records).as_bytes()).map_err(io("sending the local endpoints"))?;
        self.writer.flush().map_err(io("sending the local endpoints"))
    }

    /// Swaps endpoint records with the peer; returns the peer's.
    pub fn exchange(&mut self, local: &[ConnInfo]) -> Result<Vec<ConnInfo>, OobError> {
        match self.role {
            Role::Client => {
                self.send(local)?;
                decode_message(&mut self.reader)
            }
            Role::Server => {
                let remote = decode_message(&mut self.reader)?;
                self.send(local)?;
                Ok(remote)
            }
        }
    }

    /// Waits until the peer reaches the same point (both QPs in RTS, or
    /// both done with a test), like perftest's final handshake.
    pub fn barrier(&mut self) -> Result<(), OobError> {
        self.writer.write_all(b"SYNC\n").map_err(io("sending SYNC"))?;
        self.writer.flush().map_err(io("sending SYNC"))?;
        let line = read_line(&mut self.reader, "SYNC")?;
        if line == "SYNC" {
            Ok(())
        } else {
            Err(OobError::Malformed(format!("expected SYNC, got {line:?}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(n: u8) -> ConnInfo {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, n]);
        ConnInfo {
            lid: n as u16,
            endpoint: QpEndpoint { gid, qp_num: 0x00_1234 + n as u32, psn: 0xab_cdef, mtu: 4096, max_rd_atomic: 16 },
            rkey: 0xdead_beef,
            addr: 0x7f00_0000_1000 + n as u64,
        }
    }

    #[test]
    fn record_round_trip_and_format() {
        let i = info(7);
        let line = i.encode();
        assert_eq!(line, "0007:00123b:abcdef:deadbeef:00007f0000001007:00000000000000000000ffff0a000007:1000:10");
        assert_eq!(ConnInfo::decode(&line).expect("decode"), i);
        assert_eq!(ConnInfo::decode(&format!("{line}\r\n")).expect("decode with CRLF"), i);
    }

    #[test]
    fn malformed_records_are_rejected() {
        let good = info(1).encode();
        let bad = [
            String::new(),
            "1:2:3".to_string(),
            good.replacen("0001", "001", 1),
            good.replacen("0001", "zz01", 1),
            format!("{good}00"),
            good.replacen("deadbeef", "deadbeeg", 1),
        ];
        for line in &bad {
            let r = ConnInfo::decode(line);
            assert!(matches!(r, Err(OobError::Malformed(_))), "{line:?} gave {r:?}");
        }
    }

    #[test]
    fn both_sides_take_the_smaller_mtu_and_read_depth() {
        // A 4096 B / 16-read side and a 1024 B / 4-read peer (rxe on a
        // 1500 B interface) connect at 1024 B with 4 reads in flight, on
        // both sides, whoever is client.
        let mut big = info(1);
        let mut small = info(2);
        small.endpoint.mtu = 1024;
        small.endpoint.max_rd_atomic = 4;
        let wire = |c: &ConnInfo| ConnInfo::decode(&c.encode()).expect("decode");
        let (from_small, from_big) = (wire(&small).endpoint, wire(&big).endpoint);
        assert_eq!(from_small.negotiated_mtu(4096), 1024);
        assert_eq!(from_big.negotiated_mtu(1024), 1024);
        assert_eq!(from_small.negotiated_rd_atomic(16), 4, "the big side issues no more reads than the peer accepts");
        assert_eq!(from_big.negotiated_rd_atomic(4), 4, "nor more than its own device can issue");
        big.endpoint.mtu = 0;
        big.endpoint.max_rd_atomic = 0;
        let unknown = wire(&big).endpoint;
        assert_eq!(
            (unknown.negotiated_mtu(1024), unknown.negotiated_rd_atomic(8)),
            (1024, 8),
            "0: use the local value"
        );
        assert_eq!(unknown.negotiated_rd_atomic(0), 1, "at least one read");
    }

    #[test]
    fn message_round_trip() {
        let records = vec![info(1), info(2), info(3)];
        let text = encode_message(&records);
        assert!(text.starts_with("PERF-RS-OOB 2 3\n"));
        let got = decode_message(&mut text.as_bytes()).expect("decode");
        assert_eq!(got, records);
        let empty = decode_message(&mut encode_message(&[]).as_bytes()).expect("empty");
        assert!(empty.is_empty());
    }

    #[test]
    fn bad_headers_are_rejected() {
        for text in [
            "HELLO 1 1\n",
            "PERF-RS-OOB 1 1\n",
            "PERF-RS-OOB 2 many\n",
            "PERF-RS-OOB 2 99999\n",
            "PERF-RS-OOB 2 2\n0001:000001:000000:00000000:0000000000000000:00000000000000000000000000000000:0400:04\n",
            "PERF-RS-OOB 2 1\n0001:000001:000000:00000000:0000000000000000:00000000000000000000000000000000\n",
            "",
        ] {
            let r = decode_message(&mut text.as_bytes());
            assert!(matches!(r, Err(OobError::Malformed(_))), "{text:?} gave {r:?}");
        }
        let long = format!("PERF-RS-OOB 2 1\n{}\n", "0".repeat(1000));
        assert!(matches!(decode_message(&mut long.as_bytes()), Err(OobError::Malformed(m)) if m.contains("longer")));
    }

    #[test]
    fn tcp_exchange_both_roles_on_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let server_side = vec![info(10), info(11)];
        let client_side = vec![info(20), info(21)];
        let srv = {
            let mine = server_side.clone();
            std::thread::spawn(move || -> Result<Vec<ConnInfo>, OobError> {
                let mut c = OobConn::accept(&listener, Duration::from_secs(10))?;
                assert_eq!(c.role(), Role::Server);
                let got = c.exchange(&mine)?;
                c.barrier()?;
                Ok(got)
            })
        };
        let mut c = OobConn::connect(addr, Duration::from_secs(10)).expect("connect");
        assert_eq!(c.role(), Role::Client);
        assert_eq!(c.peer(), addr);
        let from_server = c.exchange(&client_side).expect("client exchange");
        c.barrier().expect("client barrier");
        let from_client = srv.join().expect("server thread").expect("server exchange");
        assert_eq!(from_server, server_side);
        assert_eq!(from_client, client_side);
    }

    #[test]
    fn server_rejects_a_foreign_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("write");
        });
        let mut c = OobConn::accept(&listener, Duration::from_secs(10)).expect("accept");
        let r = c.exchange(&[info(1)]);
        assert!(matches!(r, Err(OobError::Malformed(_))), "{r:?}");
        t.join().expect("client thread");
    }

    #[test]
    fn timeouts_are_reported() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let r = OobConn::accept(&listener, Duration::from_millis(50));
        assert!(matches!(r, Err(OobError::Timeout { ref what, .. }) if what.contains("no peer")), "{:?}", r.err());
        // A port nobody listens on: refused until the deadline.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let r = OobConn::connect(("127.0.0.1", port), Duration::from_millis(100));
        assert!(matches!(r, Err(OobError::Timeout { .. })), "{:?}", r.err());
    }
}
