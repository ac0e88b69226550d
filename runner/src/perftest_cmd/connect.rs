//! The perftest tools as client processes of `perf-runner serve`
//! (`--connect SOCKET`): the test's QPs are one tenant of the daemon, its
//! requests go through the daemon's shared-memory rings and its dataplane
//! (under the daemon's policy, beside whatever other clients it serves),
//! and time is the wall clock.
//!
//! Both ends of the test live in this one process: for every QP the test
//! drives (`-q`) the client makes a second QP and connects the two in the
//! daemon's NIC, so a bandwidth test writes (sends, reads) into its own
//! region as `ib_write_bw` writes into its server's, and a latency test
//! plays both sides of the ping-pong. A WRITE's arrival is seen as its
//! completion on the completion ring (the daemon's RC completion comes
//! after the bytes landed), not by polling the buffer. Every request
//! completes once: a bandwidth run waits for its last requests before the
//! next size, and leaving the daemon flushes the RECVs still posted.
//!
//! The rows this module measures are printed by [`super::run`], the same
//! report as the in-process tests.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use perf_client::{Client, Completion, ConnectOptions, Mr, Op, Status, WorkRequest};
use perf_dataplane::traffic::calibrate::LatStats;
use perf_dataplane::traffic::lat::new_histogram;
use perf_dataplane::traffic::TestOp;

use super::{peak, Args, BwRow, Test};

/// Warm-up before a `-D` window, wall-clock.
const WARMUP: Duration = Duration::from_millis(200);
/// How long a request may take before the test gives up on the daemon.
const STALL: Duration = Duration::from_secs(30);
/// The receive queue's depth in the daemon (`DataplaneConfig::rq_depth`).
const RQ_DEPTH: u32 = 1024;
/// Shortest interval between two samples of the bandwidth series.
const SAMPLE_NS: u64 = 100_000;
/// `wr_id`s of RECVs have this bit set.
const RECV_BIT: u64 = 1 << 63;

/// One connection to the daemon with the test's QPs and region.
pub(super) struct Session {
    client: Client,
    mr: Mr,
    /// QPs that drive the test (`-q`); QP `qps + i` is QP `i`'s peer.
    qps: u32,
    /// The largest message the region holds (it holds two).
    max_size: u32,
    cpl: Vec<Completion>,
    /// RECVs kept posted on each peer QP (a SEND bandwidth test; 0 until
    /// its first size).
    recvs: u32,
}

impl Session {
    /// Connects to the daemon on `socket` as `tenant`, with `qps` pairs of
    /// connected QPs and a region for two messages of `max_size` bytes.
    pub(super) fn connect(
        socket: &Path,
        tenant: Option<String>,
        qps: u32,
        tc: u8,
        max_size: u32,
    ) -> anyhow::Result<Session> {
        let opts = ConnectOptions { tenant, ..ConnectOptions::default() };
        let mut client = Client::connect(socket, &opts)
            .with_context(|| format!("--connect {}: joining the daemon", socket.display()))?;
        let mr = client.reg_mr(2 * max_size.max(64) as usize).context("registering the test's region")?;
        for _ in 0..2 * qps {
            client.create_qp(tc).context("creating the test's QPs")?;
        }
        let me = client.tenant().to_string();
        for q in 0..qps {
            client.connect_qp(q, &me, qps + q).context("connecting the test's QPs")?;
            client.connect_qp(qps + q, &me, q).context("connecting the test's QPs")?;
        }
        Ok(Session { client, mr, qps, max_size, cpl: Vec::with_capacity(1024), recvs: 0 })
    }

    /// The tenant the daemon made of this process.
    pub(super) fn tenant(&self) -> &str {
        self.client.tenant()
    }

    /// A request of `len` bytes on QP `qp`: from the region's first half
    /// to its second (or back, from a peer QP).
    fn request(&self, op: TestOp, qp: u32, wr_id: u64, len: u32) -> WorkRequest {
        let half = self.max_size.max(64) as u64;
        let (from, to) = if qp < self.qps { (0, half) } else { (half, 0) };
        let op = match op {
            TestOp::Write => Op::Write(self.mr.remote(to)),
            TestOp::Send => Op::Send,
            TestOp::Read => Op::Read(self.mr.remote(to)),
        };
        WorkRequest { wr_id, qp, op, mr: self.mr.index, offset: from, len }
    }

    /// A RECV of the largest message on QP `qp`.
    fn recv(&self, qp: u32, wr_id: u64) -> WorkRequest {
        let half = self.max_size.max(64);
        let at = if qp < self.qps { 0 } else { half as u64 };
        WorkRequest { wr_id: wr_id | RECV_BIT, qp, op: Op::Recv, mr: self.mr.index, offset: at, len: half }
    }

    /// Posts all of `wrs` (waiting for ring room).
    fn post_all(&mut self, wrs: &[WorkRequest]) -> anyhow::Result<()> {
        let mut posted = 0;
        let since = Instant::now();
        while posted < wrs.len() {
            let n = self.client.post(&wrs[posted..]).context("posting to the daemon")?;
            posted += n;
            if n == 0 {
                anyhow::ensure!(since.elapsed() < STALL, "the daemon took no request for {STALL:?}");
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Takes the waiting completions into `self.cpl` (cleared first); an
    /// error if one failed.
    fn poll(&mut self) -> anyhow::Result<usize> {
        self.cpl.clear();
        let n = self.client.poll(&mut self.cpl, 1024);
        if let Some(bad) = self.cpl.iter().find(|c| c.status != Some(Status::Success)) {
            anyhow::bail!("a request failed in the daemon: {bad:?}");
        }
        Ok(n)
    }

    /// A bandwidth row for `size` (`-q` QPs, `-t` deep, post lists of `-l`).
    pub(super) fn bw(&mut self, a: &Args, op: TestOp, size: u32) -> anyhow::Result<BwRow> {
        let qps = self.qps as usize;
        let depth = if op == TestOp::Send { a.tx_depth.min(RQ_DEPTH) } else { a.tx_depth };
        let list = a.post_list.min(depth) as u64;
        let iters = a.duration.is_none().then(|| a.iters(Test::Bw));
        // Per QP: posted, send completions, and (send) RECV completions
        // at its peer; a SEND is posted only when its peer has a RECV.
        let mut posted = vec![0u64; qps];
        let mut done = vec![0u64; qps];
        let mut received = vec![0u64; qps];
        if op == TestOp::Send && self.recvs == 0 {
            // Every RECV completion is polled before a size ends, and
            // reposted: the next size finds `depth` RECVs on each peer.
            for q in 0..self.qps {
                let recvs: Vec<_> = (0..depth as u64).map(|k| self.recv(self.qps + q, k)).collect();
                self.post_all(&recvs)?;
            }
            self.recvs = depth;
        }
        let start = Instant::now();
        let (from, to) = match (iters, a.duration) {
            (Some(_), _) | (None, None) => (start, None),
            (None, Some(d)) => (start + WARMUP, Some(start + WARMUP + Duration::from_secs_f64(d))),
        };
        let (mut messages, mut bytes) = (0u64, 0u64);
        let mut samples = vec![(0u64, 0u64)];
        let mut last_progress = Instant::now();
        let mut wrs = Vec::with_capacity(list as usize);
        let mut window_end = None;
        loop {
            let now = Instant::now();
            let stopping = to.is_some_and(|t| now >= t);
            if stopping && window_end.is_none() {
                window_end = Some(now);
            }
            let settled = (0..qps).all(|q| posted[q] == done[q] && (op != TestOp::Send || received[q] == posted[q]));
            let finished = settled && iters.map_or(stopping, |n| done.iter().all(|&d| d >= n));
            if finished {
                break;
            }
            anyhow::ensure!(last_progress.elapsed() < STALL, "-s {size}: no completion for {STALL:?}");
            if !stopping {
                for q in 0..qps {
                    let confirmed = if op == TestOp::Send { done[q].min(received[q]) } else { done[q] };
                    let room = depth as u64 - (posted[q] - confirmed);
                    let left = iters.map_or(u64::MAX, |n| n - posted[q]);
                    let k = room.min(left).min(list);
                    if k == 0 || (k < list && left > k) {
                        continue;
                    }
                    wrs.clear();
                    wrs.extend((0..k).map(|i| self.request(op, q as u32, posted[q] + i, size)));
                    let n = self.client.post(&wrs).context("posting to the daemon")?;
                    posted[q] += n as u64;
                }
            }
            if self.poll()? == 0 {
                std::thread::yield_now();
                continue;
            }
            last_progress = Instant::now();
            let in_window = last_progress >= from && window_end.is_none();
            let mut reposts = Vec::new();
            for c in &self.cpl {
                if c.recv {
                    let q = (c.qp - self.qps) as usize;
                    received[q] += 1;
                    reposts.push(self.recv(c.qp, c.wr_id & !RECV_BIT));
                    continue;
                }
                done[c.qp as usize] += 1;
                if in_window {
                    messages += 1;
                    bytes += c.byte_len as u64;
                }
            }
            if !reposts.is_empty() {
                self.post_all(&reposts)?;
            }
            if in_window {
                let t = last_progress.duration_since(from).as_nanos() as u64;
                if t >= samples.last().map_or(0, |s| s.0) + SAMPLE_NS {
                    samples.push((t, bytes));
                }
            }
        }
        let end = window_end.unwrap_or_else(Instant::now);
        let secs = end.duration_since(from).as_secs_f64().max(1e-9);
        samples.push((end.duration_since(from).as_nanos() as u64, bytes));
        anyhow::ensure!(messages > 0, "-s {size}: no message completed inside the window; lengthen -D");
        let avg = bytes as f64 / secs / 1e9; // bytes per ns
        let span = samples.last().map_or(0, |s| s.0) / 10;
        Ok(BwRow {
            bytes: size,
            iterations: iters.unwrap_or(messages),
            peak_bps: peak(&samples, span, qps as u64 * size as u64, avg) * 8e9,
            avg_bps: bytes as f64 * 8.0 / secs,
            mpps: messages as f64 / secs / 1e6,
        })
    }

    /// Waits for the completion of `wr_id` on QP `qp` (send side), or of
    /// the next RECV on it (`recv`); other completions are counted in
    /// `stray`.
    fn wait(&mut self, qp: u32, wr_id: u64, recv: bool, stray: &mut u64) -> anyhow::Result<()> {
        let since = Instant::now();
        loop {
            if self.poll()? == 0 {
                anyhow::ensure!(since.elapsed() < STALL, "no completion for {STALL:?}");
                std::thread::yield_now();
                continue;
            }
            let mut found = false;
            for c in &self.cpl {
                if c.qp == qp && c.recv == recv && (recv || c.wr_id == wr_id) {
                    found = true;
                } else {
                    *stray += 1;
                }
            }
            if found {
                return Ok(());
            }
        }
    }

    /// Latency figures for `size`: a ping-pong between the test's two QPs
    /// (half the round trip for WRITE and SEND, the whole READ).
    pub(super) fn lat(&mut self, a: &Args, op: TestOp, size: u32) -> anyhow::Result<LatStats> {
        let (ping, pong) = (0, self.qps);
        let iters = a.duration.is_none().then(|| a.iters(Test::Lat));
        let start = Instant::now();
        let (from, to) = match a.duration {
            Some(d) => (start + WARMUP, Some(start + WARMUP + Duration::from_secs_f64(d))),
            None => (start, None),
        };
        let mut hist = new_histogram();
        // Send-side completions of a SEND ping-pong, not waited for.
        let mut stray = 0u64;
        let mut sends = 0u64;
        if op == TestOp::Send && self.recvs == 0 {
            // One RECV on each side, kept posted from size to size.
            let first = [self.recv(pong, 0), self.recv(ping, 0)];
            self.post_all(&first)?;
            self.recvs = 1;
        }
        let mut k = 0u64;
        loop {
            let now = Instant::now();
            if iters.is_some_and(|n| hist.len() >= n) || to.is_some_and(|t| now >= t) {
                break;
            }
            let t0 = Instant::now();
            match op {
                TestOp::Read => {
                    self.post_all(&[self.request(op, ping, k, size)])?;
                    self.wait(ping, k, false, &mut stray)?;
                }
                TestOp::Write => {
                    self.post_all(&[self.request(op, ping, k, size)])?;
                    self.wait(ping, k, false, &mut stray)?;
                    self.post_all(&[self.request(op, pong, k, size)])?;
                    self.wait(pong, k, false, &mut stray)?;
                }
                TestOp::Send => {
                    // The peer's RECV is posted; after it fills, the next
                    // one is posted before the answer goes back.
                    self.post_all(&[self.request(op, ping, k, size)])?;
                    self.wait(pong, k | RECV_BIT, true, &mut stray)?;
                    self.post_all(&[self.recv(pong, k + 1), self.request(op, pong, k, size)])?;
                    self.wait(ping, k | RECV_BIT, true, &mut stray)?;
                    self.post_all(&[self.recv(ping, k + 1)])?;
                    sends += 2;
                }
            }
            let took = t0.elapsed().as_nanos() as u64;
            let sample = if op == TestOp::Read { took } else { took / 2 };
            if t0 >= from {
                // A ping-pong longer than the histogram's range (the client
                // stopped, say) counts at its top, as perftest keeps its
                // figures rather than aborting the run.
                hist.saturating_record(sample.saturating_mul(1000).max(1));
            }
            k += 1;
        }
        // The SENDs' own completions, so that nothing is left in flight.
        let since = Instant::now();
        while stray < sends {
            anyhow::ensure!(since.elapsed() < STALL, "no completion for {STALL:?}");
            stray += self.poll()? as u64;
        }
        anyhow::ensure!(!hist.is_empty(), "-s {size}: no ping-pong completed inside the window; lengthen -D");
        Ok(LatStats::from_histogram(&hist))
    }
}
