//! What one client of `perf-runner serve` may take: connections at once,
//! time to say hello, and per connection (one tenant) QPs, regions and
//! bytes of registered memory. A client past a limit gets a clear refusal
//! naming the limit and its flag; the daemon and the other clients go on.
//!
//! Each connection's thread counts what it got itself (every QP and
//! region of a tenant is set up through its one connection), so a quota
//! costs the loop nothing. Connections at once are counted in
//! [`crate::conn_slots`].

use std::time::Duration;

/// The limits, from `serve`'s flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once (`--max-clients`).
    pub max_clients: usize,
    /// How long a new connection may take to send its hello
    /// (`--hello-timeout-ms`).
    pub hello_timeout: Duration,
    /// QPs per connection (`--max-qps`).
    pub max_qps: u32,
    /// Registered regions per connection (`--max-mrs`).
    pub max_mrs: u32,
    /// Bytes of registered regions per connection (`--max-mr-bytes`).
    pub max_mr_bytes: u64,
}

impl Limits {
    /// What a connection that holds `qps` QPs may create next.
    pub fn check_qp(&self, qps: u32) -> Result<(), String> {
        if qps >= self.max_qps {
            return Err(format!("quota: this client has {qps} QPs, the most it may have (--max-qps {})", self.max_qps));
        }
        Ok(())
    }

    /// What a connection that holds `mrs` regions of `bytes` in all may
    /// register next, `len` bytes more.
    pub fn check_mr(&self, mrs: u32, bytes: u64, len: u64) -> Result<(), String> {
        if mrs >= self.max_mrs {
            return Err(format!(
                "quota: this client has {mrs} regions, the most it may have (--max-mrs {})",
                self.max_mrs
            ));
        }
        if bytes.saturating_add(len) > self.max_mr_bytes {
            return Err(format!(
                "quota: a region of {len} B beside this client's {bytes} B is over its {} B (--max-mr-bytes)",
                self.max_mr_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { max_clients: 2, hello_timeout: Duration::from_secs(1), max_qps: 3, max_mrs: 2, max_mr_bytes: 1000 }
    }

    #[test]
    fn quotas_refuse_past_the_limit_and_name_the_flag() {
        let l = limits();
        assert!(l.check_qp(2).is_ok());
        let e = l.check_qp(3).expect_err("the fourth QP");
        assert!(e.contains("3 QPs") && e.contains("--max-qps 3"), "{e}");
        assert!(l.check_mr(1, 400, 600).is_ok());
        let e = l.check_mr(1, 400, 601).expect_err("over the bytes");
        assert!(e.contains("--max-mr-bytes"), "{e}");
        let e = l.check_mr(2, 0, 1).expect_err("the third region");
        assert!(e.contains("--max-mrs 2"), "{e}");
        // A length near u64::MAX does not wrap past the check.
        assert!(l.check_mr(0, 10, u64::MAX).is_err());
    }
}
