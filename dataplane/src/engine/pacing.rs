//! Per-tenant pacing: the token bucket that holds a tenant's data WQEs
//! (chunks and whole messages) in software until its rate allows them,
//! as the policy's [`Pacing`] record asks (ABI 1.1).
//!
//! A data WQE may be posted while the bucket is not in debt; its bytes are
//! then taken, so the bucket can go into debt by at most one WQE, which
//! the refill pays back before the next post. The long-run rate is the
//! configured one whatever the chunk size, and a chunk larger than the
//! burst is never stuck. Tokens are kept in byte-nanoseconds per second
//! (bytes x 10^9), so refills are exact integers and the time the debt is
//! paid is exact to the nanosecond.

use perf_policy_sdk::Pacing;

const NS_PER_S: i128 = 1_000_000_000;

/// One tenant's token bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenBucket {
    limit: Pacing,
    /// Tokens x 10^9 (bytes x ns/s); negative = debt.
    tokens: i128,
    last_ns: u64,
}

impl TokenBucket {
    /// An unlimited bucket.
    pub fn new() -> Self {
        TokenBucket { limit: Pacing::UNLIMITED, tokens: 0, last_ns: 0 }
    }

    fn burst(&self) -> i128 {
        self.limit.burst_bytes as i128 * NS_PER_S
    }

    fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns) as i128;
        self.last_ns = self.last_ns.max(now_ns);
        if self.limit.rate_bytes_per_s > 0 {
            self.tokens = (self.tokens + dt * self.limit.rate_bytes_per_s as i128).min(self.burst());
        }
    }

    /// Applies a new limit at `now_ns`. A bucket that starts (from
    /// unlimited) starts full; one that changes keeps its debt, capped at
    /// the new burst, so changing the rate never forgives bytes sent.
    pub fn set(&mut self, p: Pacing, now_ns: u64) {
        if p == self.limit {
            return;
        }
        self.refill(now_ns);
        let was_unlimited = self.limit.rate_bytes_per_s == 0;
        self.limit = p;
        let burst = self.burst();
        self.tokens = if was_unlimited { burst } else { self.tokens.clamp(-burst, burst) };
    }

    /// Whether the policy paused the tenant (nothing is posted until its
    /// pacing changes).
    pub fn paused(&self) -> bool {
        self.limit.paused != 0
    }

    /// Whether a data WQE may be posted at `now_ns`.
    pub fn may_post(&mut self, now_ns: u64) -> bool {
        if self.limit.paused != 0 {
            return false;
        }
        if self.limit.rate_bytes_per_s == 0 {
            return true;
        }
        self.refill(now_ns);
        self.tokens >= 0
    }

    /// Takes `bytes` for a data WQE just posted.
    pub fn take(&mut self, bytes: u64) {
        if self.limit.rate_bytes_per_s > 0 {
            self.tokens -= bytes as i128 * NS_PER_S;
        }
    }

    /// When the debt is paid (the next post is allowed), if the bucket is
    /// in debt and not paused. A paused bucket waits for the policy.
    pub fn ready_at(&self) -> Option<u64> {
        let rate = self.limit.rate_bytes_per_s as i128;
        if self.limit.paused != 0 || rate == 0 || self.tokens >= 0 {
            return None;
        }
        let wait = (-self.tokens + rate - 1) / rate;
        Some(self.last_ns.saturating_add(wait.min(u64::MAX as i128) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_holds() {
        let mut b = TokenBucket::new();
        assert!(b.may_post(0));
        b.take(1 << 30);
        assert!(b.may_post(0));
        assert_eq!(b.ready_at(), None);
    }

    #[test]
    fn a_bucket_paces_to_its_rate_after_its_burst() {
        let mut b = TokenBucket::new();
        // 1 GB/s = 1 byte/ns, 4 KiB burst, 1 KiB WQEs.
        b.set(Pacing::rate(1_000_000_000, 4096), 0);
        let mut t = 0;
        let mut sent = 0u64;
        for _ in 0..1000 {
            if !b.may_post(t) {
                t = b.ready_at().expect("in debt");
                assert!(b.may_post(t), "ready_at is exact");
            }
            b.take(1024);
            sent += 1024;
        }
        // The burst goes at once, the rest at 1 byte/ns.
        assert_eq!(t, sent - 4096 - 1024);
    }

    #[test]
    fn a_change_keeps_the_debt_and_pause_holds() {
        let mut b = TokenBucket::new();
        b.set(Pacing::rate(1_000_000_000, 1024), 0);
        b.take(1024 * 10);
        assert!(!b.may_post(0));
        b.set(Pacing::rate(2_000_000_000, 1 << 20), 0);
        assert_eq!(b.ready_at(), Some(9 * 1024 / 2), "debt kept, paid at the new rate");
        b.set(Pacing { paused: 1, ..Pacing::rate(2_000_000_000, 1 << 20) }, 0);
        assert!(!b.may_post(1 << 40));
        assert_eq!(b.ready_at(), None, "a paused tenant waits for the policy");
    }
}
