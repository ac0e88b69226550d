//! An `ib_write_bw`-style generator: each QP keeps `tx_depth` messages
//! outstanding, posted in post lists of `post_list` (one doorbell each),
//! signaling every `cq_mod`-th; goodput and message rate are counted over a
//! measurement window.

use super::{check, App, AppError, Side, TestOp};
use crate::rnic::{Payload, RecvWr, RemoteAddr, Rnic, SendWr, Wc, WrOpcode};

/// Shape of a bandwidth test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwConfig {
    /// Operation.
    pub op: TestOp,
    /// Message size in bytes.
    pub size: u32,
    /// Messages outstanding per QP (perftest `-t`).
    pub tx_depth: u32,
    /// WRs per doorbell (perftest `-l`).
    pub post_list: u32,
    /// Signal every this many WRs (perftest `--cq-mod`).
    pub cq_mod: u32,
    /// Messages up to this size are posted inline (perftest `-I`).
    pub inline_max: u32,
}

impl BwConfig {
    /// `ib_write_bw -s SIZE` defaults: depth 128, post list 1, cq_mod 100
    /// (capped at half the depth), inline up to 220 B.
    pub fn write(size: u32) -> Self {
        BwConfig { op: TestOp::Write, size, tx_depth: 128, post_list: 1, cq_mod: 64, inline_max: 220 }
    }
}

/// Counts over the measurement window: from the first completion seen
/// after the window opens to the last one seen before it closes (so
/// completions signaled for a batch are not split across the boundary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BwResult {
    /// Messages completed between the two completion instants.
    pub messages: u64,
    /// Payload bytes completed between them.
    pub bytes: u64,
    /// Time between them, in ns.
    pub window_ns: u64,
}

impl BwResult {
    /// Goodput in Gb/s (10^9 bit/s of payload).
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.window_ns.max(1) as f64
    }

    /// Message rate in millions of messages per second.
    pub fn mpps(&self) -> f64 {
        self.messages as f64 * 1e3 / self.window_ns.max(1) as f64
    }
}

/// The sending side of a bandwidth test.
pub struct BwClient<R: Rnic> {
    side: Side<R>,
    cfg: BwConfig,
    remote: RemoteAddr,
    posted: Vec<u64>,
    completed: Vec<u64>,
    window: (u64, u64),
    first: Option<(u64, u64)>,
    last: Option<(u64, u64)>,
    wcs: Vec<Wc>,
}

impl<R: Rnic> BwClient<R> {
    /// A client over connected `side`, writing to `remote`, measuring
    /// completions between `start_ns` and `end_ns`; it posts nothing after
    /// `end_ns`.
    pub fn new(side: Side<R>, remote: RemoteAddr, cfg: BwConfig, start_ns: u64, end_ns: u64) -> Self {
        let n = side.qps.len();
        let mut cfg = cfg;
        cfg.cq_mod = cfg.cq_mod.clamp(1, (cfg.tx_depth / 2).max(1));
        BwClient {
            side,
            cfg,
            remote,
            posted: vec![0; n],
            completed: vec![0; n],
            window: (start_ns, end_ns),
            first: None,
            last: None,
            wcs: vec![Wc::EMPTY; 64],
        }
    }

    /// The counts so far.
    pub fn result(&self) -> BwResult {
        match (self.first, self.last) {
            (Some((t0, c0)), Some((t1, c1))) if t1 > t0 => {
                BwResult { messages: c1 - c0, bytes: (c1 - c0) * self.cfg.size as u64, window_ns: t1 - t0 }
            }
            _ => BwResult::default(),
        }
    }

    /// The QP handles (for counters).
    pub fn side(&self) -> &Side<R> {
        &self.side
    }

    fn post(&mut self, qi: usize) -> Result<bool, AppError> {
        let cfg = self.cfg;
        let mut did = false;
        while self.posted[qi] - self.completed[qi] + cfg.post_list as u64 <= cfg.tx_depth as u64 {
            let size = cfg.size;
            let data = vec![0xabu8; if size <= cfg.inline_max { size as usize } else { 0 }];
            let sge = [self.side.mr.sge(0, size)];
            let payload = if size == 0 {
                Payload::None
            } else if size <= cfg.inline_max && cfg.op != TestOp::Read {
                Payload::Inline(&data)
            } else {
                Payload::Sges(&sge)
            };
            let opcode = match cfg.op {
                TestOp::Write => WrOpcode::Write { remote: self.remote },
                TestOp::Send => WrOpcode::Send,
                TestOp::Read => WrOpcode::Read { remote: self.remote },
            };
            let base = self.posted[qi];
            let wrs: Vec<SendWr<'_>> = (0..cfg.post_list as u64)
                .map(|k| {
                    let seq = base + k;
                    SendWr {
                        wr_id: ((qi as u64) << 48) | seq,
                        opcode,
                        payload,
                        signaled: (seq + 1).is_multiple_of(cfg.cq_mod as u64),
                    }
                })
                .collect();
            let qp = self.side.qps[qi].handle;
            self.side.nic.post_send(qp, &wrs)?;
            self.posted[qi] += cfg.post_list as u64;
            did = true;
        }
        Ok(did)
    }
}

impl<R: Rnic> App for BwClient<R> {
    fn poll(&mut self) -> Result<bool, AppError> {
        let now = self.side.nic.clock_ns();
        let mut did = false;
        loop {
            let n = self.side.nic.poll_cq(self.side.cq, &mut self.wcs)?;
            for wc in &self.wcs[..n] {
                check(wc)?;
                let qi = (wc.wr_id >> 48) as usize;
                let upto = (wc.wr_id & ((1 << 48) - 1)) + 1;
                self.completed[qi] = self.completed[qi].max(upto);
            }
            if n > 0 && now >= self.window.0 && now < self.window.1 {
                let total: u64 = self.completed.iter().sum();
                if self.first.is_none() {
                    self.first = Some((now, total));
                }
                self.last = Some((now, total));
            }
            did |= n > 0;
            if n < self.wcs.len() {
                break;
            }
        }
        if now < self.window.1 {
            for qi in 0..self.side.qps.len() {
                did |= self.post(qi)?;
            }
        }
        Ok(did)
    }
}

/// The receiving side of a SEND bandwidth test: keeps RECVs posted.
pub struct BwServer<R: Rnic> {
    side: Side<R>,
    size: u32,
    wcs: Vec<Wc>,
    primed: bool,
    depth: u32,
}

impl<R: Rnic> BwServer<R> {
    /// A server over connected `side` that keeps `depth` RECVs of `size`
    /// bytes posted on each QP.
    pub fn new(side: Side<R>, size: u32, depth: u32) -> Self {
        BwServer { side, size, wcs: vec![Wc::EMPTY; 64], primed: false, depth }
    }

    fn post_recvs(&mut self, qi: usize, n: u32) -> Result<(), AppError> {
        let sge = [self.side.mr.sge(0, self.size.max(1))];
        let wrs: Vec<RecvWr<'_>> = (0..n).map(|_| RecvWr { wr_id: qi as u64, sgl: &sge }).collect();
        let qp = self.side.qps[qi].handle;
        self.side.nic.post_recv(qp, &wrs)?;
        Ok(())
    }
}

impl<R: Rnic> App for BwServer<R> {
    fn poll(&mut self) -> Result<bool, AppError> {
        if !self.primed {
            self.primed = true;
            for qi in 0..self.side.qps.len() {
                self.post_recvs(qi, self.depth)?;
            }
        }
        let n = self.side.nic.poll_cq(self.side.cq, &mut self.wcs)?;
        let done: Vec<Wc> = self.wcs[..n].to_vec();
        for wc in &done {
            check(wc)?;
            self.post_recvs(wc.wr_id as usize, 1)?;
        }
        Ok(n > 0)
    }
}
