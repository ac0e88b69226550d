//! An `ib_write_bw`-style generator: each QP keeps `tx_depth` messages
//! outstanding, posted in post lists of `post_list` (one doorbell each),
//! signaling every `cq_mod`-th; goodput and message rate are counted over a
//! measurement window, and the peak as perftest finds it.
//!
//! Every figure is the rate over an interval that provably holds the
//! messages counted, so none can exceed the wire:
//!
//! - **Iterations** ([`BwConfig::iters`], perftest's `-n`): each QP sends
//!   exactly that many messages, the last one signaled; the average runs
//!   from the first post to the last completion (perftest's `BW average`).
//! - **Window** (no `iters`, perftest's `-D`): messages completed between a
//!   QP's first and last signaled completion inside the window, summed over
//!   the QPs, over the span from the earliest of those first completions to
//!   the latest of those last ones. A QP sends in order, so what it
//!   completed after a signaled completion went on the wire after it.
//!   (Counting all completions after the window's first one, as before,
//!   also counted other QPs' batches sent before it: above the wire.)
//! - **Peak** ([`BwClient::peak`], perftest's `BW peak`): the best rate of
//!   "messages posted at or after post instant `p` and known complete at
//!   completion instant `c`" over `(c - p)`, over the recorded instants
//!   (thinned to a few thousand each, which can only lower it), and never
//!   below the average (itself such an interval).

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
    /// Messages each QP sends (perftest `-n`), measured from the first
    /// post to the last completion; `None`: post until the window closes
    /// and measure the window (perftest `-D`).
    pub iters: Option<u64>,
}

impl BwConfig {
    /// About how long each QP takes between two signaled completions when
    /// `qps` QPs share the wire of `profile`, ns: over a window (no
    /// `iters`) only whole signaled batches count, so a window of `k` of
    /// these is measured to within about `1/k`.
    pub fn batch_ns(&self, qps: u32, profile: &crate::rnic::sim::RnicProfile) -> f64 {
        let cq_mod = self.cq_mod.clamp(1, (self.tx_depth / 2).max(1)) as f64;
        let wire_ns = self.size as f64 * 8.0 / profile.goodput_gbps(self.size);
        // A QP moves at most about one small message per 80 ns (12.4 Mmsg/s, `calibrate`).
        qps as f64 * cq_mod * wire_ns.max(80.0)
    }

    /// `ib_write_bw -s SIZE` defaults: depth 128, post list 1, cq_mod 100
    /// (capped at half the depth), inline up to 220 B; measured over a window.
    pub fn write(size: u32) -> Self {
        BwConfig { op: TestOp::Write, size, tx_depth: 128, post_list: 1, cq_mod: 64, inline_max: 220, iters: None }
    }
}

/// Counts over an interval that holds every message counted (see the
/// module comment).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BwResult {
    /// Messages counted.
    pub messages: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// The interval that holds them, ns.
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

    /// Whether `self` is the higher rate (`messages / window_ns`).
    fn faster_than(&self, other: &BwResult) -> bool {
        self.window_ns > 0
            && (other.window_ns == 0
                || self.messages as u128 * other.window_ns as u128 > other.messages as u128 * self.window_ns as u128)
    }
}

/// `(time ns, count)` instants, thinned to at most [`Instants::CAP`] by
/// keeping every other one whenever full (so a long run stays bounded).
#[derive(Debug, Clone, Default)]
struct Instants {
    kept: Vec<(u64, u64)>,
    stride: u64,
    seen: u64,
}

impl Instants {
    const CAP: usize = 4096;

    fn push(&mut self, t: u64, count: u64) {
        let stride = self.stride.max(1);
        if self.seen.is_multiple_of(stride) {
            if self.kept.len() == Self::CAP {
                let mut i = 0;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = stride * 2;
            }
            if self.seen.is_multiple_of(self.stride.max(1)) {
                self.kept.push((t, count));
            }
        }
        self.seen += 1;
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
    /// Per QP: its first and last signaled completion in the window, as
    /// (time, that QP's completed count).
    first: Vec<Option<(u64, u64)>>,
    last: Vec<Option<(u64, u64)>>,
    /// Iterations: the first post and the last completion instants.
    began: Option<u64>,
    ended: Option<u64>,
    /// Post instants (time, messages posted before) and completion
    /// instants (time, messages completed), in the measurement.
    posts: Instants,
    completions: Instants,
    wcs: Vec<Wc>,
}

impl<R: Rnic> BwClient<R> {
    /// A client over connected `side`, writing to `remote`. Over a window
    /// (`cfg.iters` is `None`) it posts from the start, measures
    /// completions between `start_ns` and `end_ns` and posts nothing after
    /// `end_ns`; with `cfg.iters` it posts from `start_ns` until each QP
    /// has posted that many (nothing after `end_ns` either).
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
            first: vec![None; n],
            last: vec![None; n],
            began: None,
            ended: None,
            posts: Instants::default(),
            completions: Instants::default(),
            wcs: vec![Wc::EMPTY; 64],
        }
    }

    /// Whether every QP has completed its [`BwConfig::iters`] messages
    /// (never, over a window).
    pub fn done(&self) -> bool {
        self.cfg.iters.is_some_and(|n| self.completed.iter().all(|&c| c >= n))
    }

    /// The average so far (see the module comment for the interval).
    pub fn result(&self) -> BwResult {
        let size = self.cfg.size as u64;
        if self.cfg.iters.is_some() {
            return match (self.began, self.ended) {
                (Some(t0), Some(t1)) if t1 > t0 => {
                    let m: u64 = self.completed.iter().sum();
                    BwResult { messages: m, bytes: m * size, window_ns: t1 - t0 }
                }
                _ => BwResult::default(),
            };
        }
        let mut messages = 0;
        let (mut t0, mut t1) = (u64::MAX, 0);
        for (f, l) in self.first.iter().zip(&self.last) {
            if let (Some((ta, ca)), Some((tb, cb))) = (f, l) {
                messages += cb - ca;
                t0 = t0.min(*ta);
                t1 = t1.max(*tb);
            }
        }
        if t1 <= t0 || messages == 0 {
            return BwResult::default();
        }
        BwResult { messages, bytes: messages * size, window_ns: t1 - t0 }
    }

    /// perftest's peak (see the module comment): the fastest interval
    /// from a post to a completion, at least the average.
    pub fn peak(&self) -> BwResult {
        let mut best = self.result();
        let posts = &self.posts.kept;
        for &(tc, done) in &self.completions.kept {
            for &(tp, before) in posts {
                if tp >= tc {
                    break;
                }
                if done > before {
                    let m = done - before;
                    let r = BwResult { messages: m, bytes: m * self.cfg.size as u64, window_ns: tc - tp };
                    if r.faster_than(&best) {
                        best = r;
                    }
                }
            }
        }
        best
    }

    /// The QP handles (for counters).
    pub fn side(&self) -> &Side<R> {
        &self.side
    }

    fn post(&mut self, qi: usize, now: u64) -> Result<bool, AppError> {
        let cfg = self.cfg;
        let mut did = false;
        loop {
            let room = cfg.tx_depth as u64 - (self.posted[qi] - self.completed[qi]).min(cfg.tx_depth as u64);
            let left = cfg.iters.map_or(u64::MAX, |n| n - self.posted[qi].min(n));
            let count = (cfg.post_list as u64).min(left);
            // A short post list only for the last one of `iters`.
            if count == 0 || room < count {
                break;
            }
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
            let wrs: Vec<SendWr<'_>> = (0..count)
                .map(|k| {
                    let seq = base + k;
                    SendWr {
                        wr_id: ((qi as u64) << 48) | seq,
                        opcode,
                        payload,
                        // The last of `iters` is signaled, so that its completion is seen.
                        signaled: (seq + 1).is_multiple_of(cfg.cq_mod as u64) || Some(seq + 1) == cfg.iters,
                    }
                })
                .collect();
            let qp = self.side.qps[qi].handle;
            self.side.nic.post_send(qp, &wrs)?;
            if self.measuring(now) {
                self.began.get_or_insert(now);
                self.posts.push(now, self.posted.iter().sum());
            }
            self.posted[qi] += count;
            did = true;
        }
        Ok(did)
    }

    /// Whether `now` is inside the measurement.
    fn measuring(&self, now: u64) -> bool {
        now >= self.window.0 && (self.cfg.iters.is_some() || now < self.window.1)
    }
}

impl<R: Rnic> App for BwClient<R> {
    fn poll(&mut self) -> Result<bool, AppError> {
        let now = self.side.nic.clock_ns();
        let mut did = false;
        loop {
            let n = self.side.nic.poll_cq(self.side.cq, &mut self.wcs)?;
            let measuring = self.measuring(now);
            for wc in &self.wcs[..n] {
                check(wc)?;
                let qi = (wc.wr_id >> 48) as usize;
                let upto = (wc.wr_id & ((1 << 48) - 1)) + 1;
                let Some(c) = self.completed.get_mut(qi) else { continue };
                *c = (*c).max(upto);
                if measuring {
                    let mark = Some((now, *c));
                    self.first[qi] = self.first[qi].or(mark);
                    self.last[qi] = mark;
                }
            }
            if n > 0 && measuring {
                self.ended = Some(now);
                self.completions.push(now, self.completed.iter().sum());
            }
            did |= n > 0;
            if n < self.wcs.len() {
                break;
            }
        }
        let may_post = now < self.window.1 && (self.cfg.iters.is_none() || now >= self.window.0);
        if may_post {
            for qi in 0..self.side.qps.len() {
                did |= self.post(qi, now)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::sim::{ClockMode, RnicProfile, SimFabric};
    use crate::traffic::run_virtual;

    /// One alone run; returns the average and the peak.
    fn measure(op: TestOp, size: u32, qps: usize, post_list: u32, iters: Option<u64>) -> (BwResult, BwResult) {
        let profile = RnicProfile::cx6_100g();
        let f = SimFabric::new(profile.clone(), 2, 7, ClockMode::Virtual);
        let buf = size.max(64) as usize;
        let mut a = Side::new(f.nic(0), qps, buf, 0, 128).expect("side a");
        let mut b = Side::new(f.nic(1), qps, buf, 0, 128).expect("side b");
        a.connect(&mut b).expect("connect");
        let remote = b.mr.remote(0);
        let cfg = BwConfig { op, post_list, iters, ..BwConfig::write(size) };
        // A window of at least 12 signaled batches per QP (see `batch_ns`).
        let window = (12.0 * cfg.batch_ns(qps as u32, &profile)).max(2e6) as u64;
        let (start, end) = if iters.is_some() { (0, 10_000_000_000) } else { (300_000, 300_000 + window) };
        let mut c = BwClient::new(a, remote, cfg, start, end);
        let mut t = 0;
        while t < end && !c.done() {
            t += 200_000;
            run_virtual(&f, &mut [&mut c], t).expect("runs");
        }
        if iters.is_some() {
            assert!(c.done(), "{op:?} {size} B x {qps} QPs: not done");
        }
        (c.result(), c.peak())
    }

    /// No size, QP count, post list or measurement (iterations or a
    /// window) reports an average or a peak above the wire's goodput for
    /// that size; the peak is never below the average; `-n` counts exactly.
    #[test]
    fn no_figure_exceeds_the_wire() {
        let profile = RnicProfile::cx6_100g();
        for (op, size) in [(TestOp::Write, 64), (TestOp::Write, 4096), (TestOp::Write, 65536), (TestOp::Read, 65536)]
            .into_iter()
            .chain([(TestOp::Write, 1 << 20)])
        {
            for qps in [1usize, 2, 16] {
                for post_list in [1u32, 8] {
                    let n = if size >= 1 << 20 { 8 } else { 64 };
                    // 16 QPs of 1 MB need a second-long window (kept to -n here).
                    let window = (size < 1 << 20 || qps < 16).then_some(None);
                    for iters in [Some(Some(n)), Some(Some(1)), window].into_iter().flatten() {
                        let (avg, peak) = measure(op, size, qps, post_list, iters);
                        let limit = profile.goodput_gbps(size);
                        let what = format!("{op:?} {size} B, {qps} QPs, post list {post_list}, iters {iters:?}");
                        assert!(avg.messages > 0, "{what}: nothing measured");
                        assert!(avg.gbps() <= limit, "{what}: average {} > {limit}", avg.gbps());
                        assert!(peak.gbps() <= limit, "{what}: peak {} > {limit}", peak.gbps());
                        assert!(peak.gbps() >= avg.gbps(), "{what}: peak {} < average {}", peak.gbps(), avg.gbps());
                        if let Some(n) = iters {
                            assert_eq!(avg.messages, n * qps as u64, "{what}");
                        }
                    }
                }
            }
        }
    }

    /// The fix does not cost accuracy where the wire is the limit: 64 KB
    /// WRITEs on two QPs reach within 2% of it (the case printed
    /// 99.16 and 109.95 Gb/s against a 97.9 Gb/s wire).
    #[test]
    fn two_qps_reach_the_wire_without_passing_it() {
        let limit = RnicProfile::cx6_100g().goodput_gbps(65536);
        for iters in [Some(2500), None] {
            let (avg, peak) = measure(TestOp::Write, 65536, 2, 1, iters);
            assert!(avg.gbps() > 0.98 * limit && avg.gbps() <= limit, "{iters:?}: average {}", avg.gbps());
            assert!(peak.gbps() <= limit, "{iters:?}: peak {}", peak.gbps());
        }
    }
}
