//! `perf`: PeRF's preemption with the paper's fixed parameters.
//!
//! - Classification each tick from the tick's statistics: a tenant whose
//!   largest message is at least 1 KB is *bandwidth*; a small-message
//!   tenant with depth < 5 and depth x average size < 1024 B is
//!   *delay-sensitive*; other small-message tenants are *message-sensitive*.
//! - Message level: bandwidth tenants' messages of 1 KB and more are split
//!   into 16 KB sub-requests. While a sensitive tenant is active, each
//!   chunk is followed by zero-weight WRs: `16 KB / 1 KB = 16` for a tenant
//!   with one active QP, so a sensitive QP gets 17 NIC turns per chunk.
//! - QP level: at most 2 active QPs per tenant; the rest are held in
//!   software and rotated in after 128 requests, 1,024,000 B or 1 ms.
//!   So that a tenant's share does not grow with its active QPs, while
//!   several bandwidth tenants compete each of its QPs sends chunks of
//!   `16 KB / active`, and every chunk is followed by at least one
//!   zero-weight WR (which ends the QP's NIC turn there): every active QP
//!   moves one chunk per NIC round, so every tenant moves 16 KB.
//!
//! One crate, two uses: the dataplane links it natively (its built-in
//! `perf`), and built for `wasm32-unknown-unknown` it is the `perf.wasm`
//! policy module ([`export_policy!`]); both run this code. It is `no_std`
//! without an allocator, so the remembered classes live in a fixed table
//! of [`MAX_TENANTS`] entries (tenants beyond it are classified from the
//! current tick alone). The crate is `no_std` on wasm32 (the macro supplies
//! the panic handler); the native cdylib links std.
#![cfg_attr(target_arch = "wasm32", no_std)]

use perf_policy_sdk::abi::MAX_TENANTS;
use perf_policy_sdk::{export_policy, Policy, SplitPlan, TenantClass, TenantPlan, TenantStats};

/// PeRF's parameters (paper defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfParams {
    /// Sub-request size (SUB_MSG_SIZE).
    pub chunk_bytes: u32,
    /// Messages at least this large are split.
    pub split_threshold: u64,
    /// Payload bytes per zero-weight WR (0_WAIT_UNIT).
    pub zero_weight_unit: u32,
    /// Active QPs per tenant.
    pub max_active_qps: u32,
    /// Rotation after this many requests.
    pub quantum_requests: u32,
    /// ... or bytes.
    pub quantum_bytes: u64,
    /// ... or ns.
    pub quantum_ns: u64,
    /// Delay-sensitive: depth below this.
    pub delay_depth: u32,
    /// Delay-sensitive: depth x average size below this.
    pub delay_bytes: f64,
}

impl Default for PerfParams {
    fn default() -> Self {
        PerfParams {
            chunk_bytes: 16 * 1024,
            split_threshold: 1024,
            zero_weight_unit: 1024,
            max_active_qps: 2,
            quantum_requests: 128,
            quantum_bytes: 1_024_000,
            quantum_ns: 1_000_000,
            delay_depth: 5,
            delay_bytes: 1024.0,
        }
    }
}

/// The PeRF policy.
#[derive(Debug, Clone)]
pub struct Perf {
    /// Parameters.
    pub params: PerfParams,
    classes: [TenantClass; MAX_TENANTS],
}

impl Default for Perf {
    fn default() -> Self {
        Perf { params: PerfParams::default(), classes: [TenantClass::Unknown; MAX_TENANTS] }
    }
}

impl Perf {
    /// Classifies a tenant from one tick of statistics.
    pub fn classify(&self, s: &TenantStats) -> Option<TenantClass> {
        if s.completed == 0 && s.max_msg_bytes == 0 {
            return None;
        }
        let p = &self.params;
        Some(if s.max_msg_bytes >= p.split_threshold {
            TenantClass::Bandwidth
        } else if s.max_depth < p.delay_depth && (s.max_depth as f64 * s.ewma_msg_bytes) < p.delay_bytes {
            TenantClass::DelaySensitive
        } else {
            TenantClass::MessageSensitive
        })
    }
}

impl Policy for Perf {
    fn name(&self) -> &str {
        "perf"
    }

    fn on_tick(&mut self, _now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        for (i, s) in stats.iter().enumerate().take(MAX_TENANTS) {
            if let Some(c) = self.classify(s) {
                self.classes[i] = c;
            }
        }
        let class_of = |this: &Self, i: usize, s: &TenantStats| match this.classes.get(i) {
            Some(c) => *c,
            None => this.classify(s).unwrap_or(TenantClass::Unknown),
        };
        let sensitive = stats.iter().enumerate().any(|(i, s)| {
            matches!(class_of(self, i, s), TenantClass::DelaySensitive | TenantClass::MessageSensitive)
                && s.backlogged_qps > 0
        });
        let bw_backlogged = stats
            .iter()
            .enumerate()
            .filter(|(i, s)| class_of(self, *i, s) == TenantClass::Bandwidth && s.backlogged_qps > 0)
            .count();
        let p = self.params;
        let base = if sensitive {
            p.chunk_bytes / p.zero_weight_unit.max(1)
        } else if bw_backlogged >= 2 {
            1
        } else {
            0
        };
        for (i, s) in stats.iter().enumerate() {
            let class = class_of(self, i, s);
            let active = s.backlogged_qps.clamp(1, p.max_active_qps.max(1));
            // Each active QP moves one chunk per NIC round; scaling the chunk
            // by 1/active gives every bandwidth tenant the same bytes per round.
            let chunk = if bw_backlogged >= 2 { (p.chunk_bytes / active).max(1024) } else { p.chunk_bytes };
            plans[i] = TenantPlan {
                max_active_qps: p.max_active_qps,
                quantum_requests: p.quantum_requests,
                quantum_bytes: p.quantum_bytes,
                quantum_ns: p.quantum_ns,
                split: SplitPlan { chunk_bytes: chunk, zero_weight_per_chunk: base },
                split_threshold: if class == TenantClass::Bandwidth { p.split_threshold } else { 0 },
                class,
            };
        }
    }

    fn tick_interval_ns(&self) -> u64 {
        1_000_000
    }
}

export_policy!(Perf);
