//! The per-tick tail latency of a tenant: a log-linear histogram of the
//! tick's completion latencies (8 buckets per octave, exact below 8 ns),
//! from which [`TailHist::p99_ns`] reads the 99th percentile for the
//! policy's tick statistics ([`TenantStats::p99_latency_ns`]). Fixed size,
//! O(1) per completion, no allocation.
//!
//! [`TenantStats::p99_latency_ns`]: perf_policy_sdk::TenantStats::p99_latency_ns

/// Sub-buckets per octave (a bucket spans at most 1/8 of its value).
const SUB: u32 = 8;
/// Buckets: 8 exact ones, then 8 per octave from 8 ns to 2^32 ns.
const BUCKETS: usize = (SUB + (32 - 3) * SUB) as usize;

/// A histogram of one tick's latencies. It keeps the range of buckets it
/// has touched, so that reading the p99 and clearing for the next tick
/// cost the range, not the whole kilobyte (a tick visits every tenant).
#[derive(Clone, Copy)]
pub(super) struct TailHist {
    counts: [u32; BUCKETS],
    n: u32,
    /// Lowest and highest bucket counted since the last clear (`lo > hi`
    /// when none).
    lo: u16,
    hi: u16,
}

impl Default for TailHist {
    fn default() -> Self {
        TailHist { counts: [0; BUCKETS], n: 0, lo: BUCKETS as u16, hi: 0 }
    }
}

fn bucket(ns: u64) -> usize {
    let v = ns.min(u32::MAX as u64) as u32;
    if v < SUB {
        return v as usize;
    }
    let octave = 31 - v.leading_zeros();
    let sub = (v >> (octave - 3)) & (SUB - 1);
    (SUB + (octave - 3) * SUB + sub) as usize
}

/// The middle of bucket `i`, ns.
fn middle(i: usize) -> u32 {
    let i = i as u32;
    if i < SUB {
        return i;
    }
    let (octave, sub) = ((i - SUB) / SUB + 3, (i - SUB) % SUB);
    let shift = octave - 3;
    let low = (SUB + sub) as u64;
    ((low << shift) + ((1u64 << shift) >> 1)).min(u32::MAX as u64) as u32
}

impl TailHist {
    /// Counts one completion of `ns`.
    #[inline]
    pub(super) fn record(&mut self, ns: u64) {
        let b = bucket(ns);
        self.counts[b] += 1;
        self.n += 1;
        self.lo = self.lo.min(b as u16);
        self.hi = self.hi.max(b as u16);
    }

    /// The 99th percentile of what was recorded, ns (the middle of its
    /// bucket: within 1/16 of the value), saturating at `u32::MAX`; 0 if
    /// nothing was. Read from the top, where the 99th percentile lies.
    pub(super) fn p99_ns(&self) -> u32 {
        if self.n == 0 {
            return 0;
        }
        let rank = (self.n as u64 * 99).div_ceil(100).max(1);
        // The p99 is the bucket where the count from the top first
        // exceeds the `n - rank` samples above the rank.
        let above = self.n as u64 - rank;
        let mut seen = 0u64;
        for i in (self.lo as usize..=self.hi as usize).rev() {
            seen += self.counts[i] as u64;
            if seen > above {
                return middle(i);
            }
        }
        middle(self.lo as usize)
    }

    /// Forgets what was recorded, touching only the buckets that were.
    pub(super) fn clear(&mut self) {
        if self.lo <= self.hi {
            self.counts[self.lo as usize..=self.hi as usize].fill(0);
        }
        (self.n, self.lo, self.hi) = (0, BUCKETS as u16, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_is_within_a_sixteenth_of_the_true_one() {
        let mut h = TailHist::default();
        assert_eq!(h.p99_ns(), 0);
        // 990 completions of 1 us and 10 of 5 us: the p99 is 1 us.
        (0..990).for_each(|_| h.record(1000));
        (0..10).for_each(|_| h.record(5000));
        assert!((h.p99_ns() as f64 - 1000.0).abs() <= 1000.0 / 16.0, "{}", h.p99_ns());
        // Eleven slow ones: the p99 moves to them.
        h.record(5000);
        assert!((h.p99_ns() as f64 - 5000.0).abs() <= 5000.0 / 16.0, "{}", h.p99_ns());
        for v in [0u64, 7, 8, 9, 15, 16, 1023, 1024, 123_456, 1 << 31, u64::MAX] {
            let m = middle(bucket(v)) as f64;
            let t = v.min(u32::MAX as u64) as f64;
            assert!((m - t).abs() <= (t / 16.0).max(0.5), "{v}: {m}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn read_from_the_top_it_agrees_with_a_sorted_list_and_clears() {
        let mut h = TailHist::default();
        for n in [1u64, 2, 99, 100, 101, 1000, 4321] {
            h.clear();
            // A spread of latencies, every value distinct in its bucket's
            // middle: the p99 is the bucket of the rank-th smallest.
            let mut v: Vec<u64> = (0..n).map(|k| 100 + (k * 7919) % 100_000).collect();
            v.iter().for_each(|&x| h.record(x));
            v.sort_unstable();
            let rank = (n * 99).div_ceil(100).max(1) as usize;
            assert_eq!(h.p99_ns(), middle(bucket(v[rank - 1])), "n = {n}");
        }
        h.clear();
        assert_eq!(h.n, 0);
        assert_eq!(h.p99_ns(), 0);
        assert!(h.counts.iter().all(|&c| c == 0), "cleared buckets");
        h.record(5000);
        assert_eq!(h.p99_ns(), middle(bucket(5000)));
    }
}
