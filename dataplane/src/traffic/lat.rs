//! An `ib_write_lat`-style ping-pong. The client sends one message and
//! waits for the server's reply before the next; WRITE replies are
//! detected by polling the last byte of the buffer (as perftest does), SEND
//! replies by a receive completion. Reported latency is half the round trip
//! for WRITE and SEND and the whole operation for READ, as perftest reports
//! it.

use hdrhistogram::Histogram;

use super::{check, App, AppError, Side, TestOp};
use crate::rnic::{Payload, RecvWr, RemoteAddr, Rnic, SendWr, Wc, WcOpcode, WrOpcode};

/// Largest recorded latency: 100 ms, in ps.
const MAX_PS: u64 = 100_000_000_000;

/// Shape of a latency test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatConfig {
    /// Operation.
    pub op: TestOp,
    /// Message size in bytes (at least 1).
    pub size: u32,
    /// Messages up to this size are posted inline.
    pub inline_max: u32,
}

impl LatConfig {
    /// `ib_write_lat -s SIZE`.
    pub fn write(size: u32) -> Self {
        LatConfig { op: TestOp::Write, size, inline_max: 220 }
    }
}

/// A new latency histogram in picoseconds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_PS, 3).expect("static histogram bounds are valid")
}

/// Layout of the ping-pong buffer: the first half is what this side sends
/// from, the second half is where the peer's message lands.
fn recv_off(size: u32) -> usize {
    size as usize
}

/// Posts the receive for the next `size`-byte message (at least one byte)
/// into the receive half of `side`'s buffer, on its QP.
fn post_recv<R: Rnic>(side: &mut Side<R>, size: u32) -> Result<(), AppError> {
    let size = size.max(1);
    let sge = [side.mr.sge(recv_off(size), size)];
    let qp = side.qps[0].handle;
    side.nic.post_recv(qp, &[RecvWr { wr_id: u64::MAX, sgl: &sge }])?;
    Ok(())
}

/// The client (timing) side.
pub struct LatClient<R: Rnic> {
    side: Side<R>,
    cfg: LatConfig,
    remote: RemoteAddr,
    iter: u64,
    waiting: bool,
    t0_ps: u64,
    warmup_ns: u64,
    end_ns: u64,
    hist: Histogram<u64>,
    wcs: Vec<Wc>,
    primed: bool,
    iters: Option<u64>,
}

impl<R: Rnic> LatClient<R> {
    /// A client over connected `side` (buffer of at least `2 * size`),
    /// targeting the server's buffer `remote`; records after `warmup_ns`,
    /// starts no new iteration after `end_ns`.
    pub fn new(side: Side<R>, remote: RemoteAddr, cfg: LatConfig, warmup_ns: u64, end_ns: u64) -> Self {
        LatClient {
            side,
            cfg,
            remote,
            iter: 0,
            waiting: false,
            t0_ps: 0,
            warmup_ns,
            end_ns,
            hist: new_histogram(),
            wcs: vec![Wc::EMPTY; 16],
            primed: false,
            iters: None,
        }
    }

    /// Starts no new iteration once `iters` latencies are recorded
    /// (perftest's `-n`).
    pub fn stop_after(mut self, iters: u64) -> Self {
        self.iters = Some(iters);
        self
    }

    /// Whether the `stop_after` count is recorded.
    pub fn done(&self) -> bool {
        self.iters.is_some_and(|n| self.hist.len() >= n)
    }

    /// Latencies recorded, in picoseconds.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    fn tag(&self) -> u8 {
        (self.iter % 255) as u8 + 1
    }

    fn now_ps(&self) -> u64 {
        self.side.nic.clock_ns() * 1000
    }

    fn send(&mut self) -> Result<(), AppError> {
        let size = self.cfg.size.max(1);
        let tag = self.tag();
        let mut payload = vec![0u8; size as usize];
        payload[size as usize - 1] = tag;
        let sge_send = [self.side.mr.sge(0, size)];
        let sge_recv = [self.side.mr.sge(recv_off(size), size)];
        let inline = size <= self.cfg.inline_max;
        if !inline {
            self.side.nic.write_mr(self.side.mr.handle, 0, &payload)?;
        }
        let data = if inline { Payload::Inline(&payload) } else { Payload::Sges(&sge_send) };
        let (opcode, payload) = match self.cfg.op {
            TestOp::Write => (WrOpcode::Write { remote: self.remote }, data),
            TestOp::Send => (WrOpcode::Send, data),
            TestOp::Read => (WrOpcode::Read { remote: self.remote }, Payload::Sges(&sge_recv)),
        };
        let qp = self.side.qps[0].handle;
        self.t0_ps = self.now_ps();
        self.side.nic.post_send(qp, &[SendWr { wr_id: self.iter, opcode, payload, signaled: true }])?;
        self.waiting = true;
        Ok(())
    }

    fn finish(&mut self) {
        let rtt = self.now_ps().saturating_sub(self.t0_ps);
        let lat = if self.cfg.op == TestOp::Read { rtt } else { rtt / 2 };
        if self.side.nic.clock_ns() >= self.warmup_ns {
            // Clamped into the histogram's range, so `record` cannot fail.
            let _ = self.hist.record(lat.clamp(1, MAX_PS));
        }
        self.iter += 1;
        self.waiting = false;
    }
}

impl<R: Rnic> App for LatClient<R> {
    fn poll(&mut self) -> Result<bool, AppError> {
        if !self.primed {
            self.primed = true;
            if self.cfg.op == TestOp::Send {
                post_recv(&mut self.side, self.cfg.size)?;
            }
        }
        let mut did = false;
        let n = self.side.nic.poll_cq(self.side.cq, &mut self.wcs)?;
        let mut replied = false;
        for i in 0..n {
            let wc = self.wcs[i];
            check(&wc)?;
            match wc.opcode {
                WcOpcode::Read if self.waiting => replied = true,
                WcOpcode::Recv => replied = true,
                _ => {}
            }
        }
        did |= n > 0;
        if self.waiting {
            let size = self.cfg.size.max(1) as usize;
            if self.cfg.op == TestOp::Write {
                let mut last = [0u8];
                self.side.nic.read_mr(self.side.mr.handle, recv_off(size as u32) + size - 1, &mut last)?;
                replied = last[0] == self.tag();
            }
            if replied {
                if self.cfg.op == TestOp::Send {
                    post_recv(&mut self.side, self.cfg.size)?;
                }
                self.finish();
                did = true;
            }
        }
        if !self.waiting && self.side.nic.clock_ns() < self.end_ns && !self.done() {
            self.send()?;
            did = true;
        }
        Ok(did)
    }
}

/// The server (reflecting) side: answers each message with one of its own.
pub struct LatServer<R: Rnic> {
    side: Side<R>,
    cfg: LatConfig,
    remote: RemoteAddr,
    expect: u64,
    wcs: Vec<Wc>,
    primed: bool,
}

impl<R: Rnic> LatServer<R> {
    /// A server over connected `side`, replying into the client's buffer
    /// `remote` (the client's receive half).
    pub fn new(side: Side<R>, remote: RemoteAddr, cfg: LatConfig) -> Self {
        LatServer { side, cfg, remote, expect: 0, wcs: vec![Wc::EMPTY; 16], primed: false }
    }

    fn reply(&mut self, tag: u8) -> Result<(), AppError> {
        let size = self.cfg.size.max(1);
        let mut payload = vec![0u8; size as usize];
        payload[size as usize - 1] = tag;
        let sge = [self.side.mr.sge(0, size)];
        let inline = size <= self.cfg.inline_max;
        if !inline {
            self.side.nic.write_mr(self.side.mr.handle, 0, &payload)?;
        }
        let data = if inline { Payload::Inline(&payload) } else { Payload::Sges(&sge) };
        let opcode = match self.cfg.op {
            TestOp::Write => WrOpcode::Write { remote: self.remote },
            _ => WrOpcode::Send,
        };
        let qp = self.side.qps[0].handle;
        self.side.nic.post_send(qp, &[SendWr { wr_id: self.expect, opcode, payload: data, signaled: true }])?;
        self.expect += 1;
        Ok(())
    }
}

impl<R: Rnic> App for LatServer<R> {
    fn poll(&mut self) -> Result<bool, AppError> {
        if self.cfg.op == TestOp::Read {
            return Ok(false);
        }
        if !self.primed {
            self.primed = true;
            if self.cfg.op == TestOp::Send {
                post_recv(&mut self.side, self.cfg.size)?;
            }
        }
        let tag = (self.expect % 255) as u8 + 1;
        let n = self.side.nic.poll_cq(self.side.cq, &mut self.wcs)?;
        let mut got = false;
        for i in 0..n {
            let wc = self.wcs[i];
            check(&wc)?;
            if wc.opcode == WcOpcode::Recv {
                got = true;
            }
        }
        if self.cfg.op == TestOp::Write {
            let size = self.cfg.size.max(1) as usize;
            let mut last = [0u8];
            self.side.nic.read_mr(self.side.mr.handle, recv_off(size as u32) + size - 1, &mut last)?;
            got = last[0] == tag;
        }
        if got {
            if self.cfg.op == TestOp::Send {
                post_recv(&mut self.side, self.cfg.size)?;
            }
            self.reply(tag)?;
        }
        Ok(n > 0 || got)
    }
}
