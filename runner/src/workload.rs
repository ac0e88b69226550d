//! Tenant traffic generators that run through the dataplane (the client
//! side, on host 0) and the peer-side applications on host 1 that answer
//! them, built from a scenario's tenants.

use hdrhistogram::Histogram;
use perf_dataplane::engine::{CompletionKind, RequestOp, TenantHandle, WorkRequest};
use perf_dataplane::perftest::bw::BwServer;
use perf_dataplane::perftest::lat::{new_histogram, LatConfig, LatServer};
use perf_dataplane::perftest::{App, AppError, Side, TestOp};
use perf_dataplane::rnic::sim::SimRnic;
use perf_dataplane::rnic::{Mr, RemoteAddr, Rnic};

use crate::scenario::{Kind, TenantSpec};

/// What a tenant measured.
pub struct TenantResult {
    /// Messages completed inside the window.
    pub messages: u64,
    /// Payload bytes completed inside the window.
    pub bytes: u64,
    /// Latency samples in ps (half round trip for lat WRITE/SEND).
    pub hist: Histogram<u64>,
    /// Completions with an error status.
    pub errors: u64,
}

/// A tenant application on host 0.
pub struct TenantApp {
    spec: TenantSpec,
    handle: TenantHandle,
    mr: Mr,
    remotes: Vec<RemoteAddr>,
    nic: SimRnic,
    window: (u64, u64),
    outstanding: Vec<u32>,
    next_wr: u64,
    waiting: bool,
    t0_ns: u64,
    iter: u64,
    recv_posted: bool,
    failed: bool,
    result: TenantResult,
}

impl TenantApp {
    /// A tenant over `handle` with buffer `mr` (at least twice `size`),
    /// writing to `remotes[qp]` at the peer; it measures between `window`
    /// ns and posts nothing after its end.
    pub fn new(
        spec: TenantSpec,
        handle: TenantHandle,
        mr: Mr,
        remotes: Vec<RemoteAddr>,
        nic: SimRnic,
        window: (u64, u64),
    ) -> Self {
        let n = spec.qps as usize;
        TenantApp {
            spec,
            handle,
            mr,
            remotes,
            nic,
            window,
            outstanding: vec![0; n],
            next_wr: 0,
            waiting: false,
            t0_ns: 0,
            iter: 0,
            recv_posted: false,
            failed: false,
            result: TenantResult { messages: 0, bytes: 0, hist: new_histogram(), errors: 0 },
        }
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Results so far.
    pub fn result(&self) -> &TenantResult {
        &self.result
    }

    fn now(&self) -> u64 {
        self.nic.clock_ns()
    }

    fn in_window(&self, t: u64) -> bool {
        t >= self.window.0 && t < self.window.1
    }

    fn op(&self, qp: usize) -> RequestOp {
        let remote = self.remotes[qp];
        match self.spec.op {
            TestOp::Write => RequestOp::Write { remote },
            TestOp::Send => RequestOp::Send,
            TestOp::Read => RequestOp::Read { remote },
        }
    }

    fn request(&mut self, qp: usize, op: RequestOp, offset: u64) -> WorkRequest {
        self.next_wr += 1;
        WorkRequest {
            wr_id: self.next_wr,
            qp: qp as u32,
            op,
            mr: self.mr,
            offset,
            len: self.spec.size,
            posted_ns: self.now(),
        }
    }

    fn record(&mut self, lat_ps: u64, bytes: u64, at: u64) {
        if self.in_window(at) {
            self.result.messages += 1;
            self.result.bytes += bytes;
            // Clamped into the histogram's range, so recording cannot fail.
            let _ = self.result.hist.record(lat_ps.clamp(1, 100_000_000_000));
        }
    }

    fn poll_bw(&mut self) -> Result<bool, AppError> {
        let mut did = false;
        while let Some(c) = self.handle.poll() {
            did = true;
            if !c.status.is_ok() {
                self.result.errors += 1;
                self.failed = true;
            }
            self.outstanding[c.qp as usize] = self.outstanding[c.qp as usize].saturating_sub(1);
            self.record((c.completed_ns - c.posted_ns) * 1000, c.byte_len as u64, c.completed_ns);
        }
        // A tenant stops at its first error, as perftest does.
        if self.now() >= self.window.1 || self.failed {
            return Ok(did);
        }
        'qps: for qp in 0..self.spec.qps as usize {
            while self.outstanding[qp] + self.spec.post_list <= self.spec.depth {
                for _ in 0..self.spec.post_list {
                    let op = self.op(qp);
                    let wr = self.request(qp, op, 0);
                    if self.handle.post(wr).is_err() {
                        break 'qps;
                    }
                    self.outstanding[qp] += 1;
                    did = true;
                }
            }
        }
        Ok(did)
    }

    fn tag(&self) -> u8 {
        (self.iter % 255) as u8 + 1
    }

    fn poll_lat(&mut self) -> Result<bool, AppError> {
        let size = self.spec.size as usize;
        let mut did = false;
        let mut replied = false;
        while let Some(c) = self.handle.poll() {
            did = true;
            if !c.status.is_ok() {
                self.result.errors += 1;
                self.failed = true;
            }
            match (self.spec.op, c.kind) {
                (TestOp::Read, CompletionKind::Send) => replied = true,
                (TestOp::Send, CompletionKind::Recv) => {
                    replied = true;
                    self.recv_posted = false;
                }
                _ => {}
            }
        }
        if self.spec.op == TestOp::Send && !self.recv_posted {
            let wr = self.request(0, RequestOp::Recv, size as u64);
            if self.handle.post(wr).is_ok() {
                self.recv_posted = true;
            }
        }
        if self.waiting {
            if self.spec.op == TestOp::Write {
                let mut last = [0u8];
                self.nic.read_mr(self.mr.handle, 2 * size - 1, &mut last)?;
                replied = last[0] == self.tag();
            }
            if replied {
                let now = self.now();
                let rtt = (now - self.t0_ns) * 1000;
                let lat = if self.spec.op == TestOp::Read { rtt } else { rtt / 2 };
                self.record(lat, size as u64, now);
                self.iter += 1;
                self.waiting = false;
                did = true;
            }
        }
        if !self.waiting
            && !self.failed
            && self.now() < self.window.1
            && (self.spec.op != TestOp::Send || self.recv_posted)
        {
            let mut payload = vec![0u8; size];
            payload[size - 1] = self.tag();
            self.nic.write_mr(self.mr.handle, 0, &payload)?;
            let op = self.op(0);
            let wr = self.request(0, op, 0);
            if self.handle.post(wr).is_ok() {
                self.t0_ns = self.now();
                self.waiting = true;
                did = true;
            }
        }
        Ok(did)
    }
}

impl App for TenantApp {
    fn poll(&mut self) -> Result<bool, AppError> {
        match self.spec.kind {
            Kind::Bw => self.poll_bw(),
            Kind::Lat => self.poll_lat(),
        }
    }
}

/// The peer-side application of a tenant.
pub enum PeerApp {
    /// RDMA WRITE / READ targets need no software; the side is held so its
    /// target buffer and QPs stay registered.
    Passive(#[allow(dead_code)] Side<SimRnic>),
    /// SEND bandwidth: keeps RECVs posted.
    Receiver(BwServer<SimRnic>),
    /// Ping-pong: answers each message.
    Reflector(LatServer<SimRnic>),
}

impl PeerApp {
    /// The peer app for `spec` over its connected `side`; `client` is the
    /// tenant's receive half (where replies land).
    pub fn new(spec: &TenantSpec, side: Side<SimRnic>, client: RemoteAddr) -> Self {
        match (spec.kind, spec.op) {
            (Kind::Lat, op) if op != TestOp::Read => {
                PeerApp::Reflector(LatServer::new(side, client, LatConfig { op, size: spec.size, inline_max: 220 }))
            }
            (Kind::Bw, TestOp::Send) => PeerApp::Receiver(BwServer::new(side, spec.size, spec.depth.min(1024))),
            _ => PeerApp::Passive(side),
        }
    }
}

impl App for PeerApp {
    fn poll(&mut self) -> Result<bool, AppError> {
        match self {
            PeerApp::Passive(_) => Ok(false),
            PeerApp::Receiver(r) => r.poll(),
            PeerApp::Reflector(r) => r.poll(),
        }
    }
}
