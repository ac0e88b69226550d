//! `justitia`: the Justitia design (Zhang et al., NSDI '22) as a software
//! baseline (`docs/policies.md#justitia`). It isolates by withholding
//! posts, never by preempting inside the NIC:
//!
//! - **Chunking**: throughput tenants' messages go as `chunk_bytes`
//!   (1,000,000 B) sub-requests, `latency_chunk_bytes` (5000 B) while a
//!   latency-sensitive tenant is active; no zero-weight WRs, no QP caps.
//! - **Pacer**: a virtual link capacity, shared round-robin by the
//!   throughput tenants (bandwidth and message-sensitive): each is paced
//!   by a token bucket (the dataplane's [`Pacing`]) at `capacity / n`, a
//!   burst of `tokens / n` chunks (Justitia keeps at most 5 tokens
//!   outstanding). A message-sensitive tenant gets `ops_per_token` (1800)
//!   messages per chunk-sized token. Latency tenants bypass the pacer.
//! - **AIMD**: every tick (`tick_interval_ns`, 200 us, Justitia's ping
//!   period) the reference latency, an EWMA (0.5) of the delay-sensitive
//!   tenants' mean post-to-completion latency, is compared with
//!   `target_ns` (2 us): above it the capacity is halved, down to
//!   `line x n/(n+1)` for `n` bandwidth tenants; otherwise it grows by
//!   `increase_bytes_per_s` (1 MB/s) up to the line rate.
//!
//! Approximation: Justitia measures a dedicated 10 B reference ping; here
//! the delay-sensitive tenants' own small WRITEs are the ping (the same
//! signal, post to completion of a small message through the same NIC,
//! without an extra QP). With no delay-sensitive tenant there is no
//! signal and the capacity climbs back to the line rate.
#![cfg_attr(target_arch = "wasm32", no_std)]

use perf_policy_common::preemption::active;
use perf_policy_common::Perf;
use perf_policy_sdk::abi::MAX_TENANTS;
use perf_policy_sdk::{
    export_policy, parse_param, parse_param_min, Pacing, ParamError, Policy, SplitPlan, TenantClass, TenantPlan,
    TenantStats,
};

/// Justitia's parameters; [`Default`] is its code's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JustitiaParams {
    /// Chunk of throughput tenants' messages (1,000,000 B).
    pub chunk_bytes: u32,
    /// Chunk while a latency-sensitive tenant is active (5000 B).
    pub latency_chunk_bytes: u32,
    /// Line rate, payload bytes/s (100 Gb/s).
    pub line_rate_bytes_per_s: u64,
    /// Reference latency target (2 us), ns.
    pub target_ns: u64,
    /// Additive increase per tick (1 MB/s), bytes/s.
    pub increase_bytes_per_s: u64,
    /// Tokens outstanding at most (5): the pacer's burst, in chunks.
    pub max_tokens: u32,
    /// Messages a message-sensitive tenant may post per token (1800).
    pub ops_per_token: u32,
    /// Tick (ping) period (200 us), ns.
    pub tick_interval_ns: u64,
}

impl Default for JustitiaParams {
    fn default() -> Self {
        JustitiaParams {
            chunk_bytes: 1_000_000,
            latency_chunk_bytes: 5000,
            line_rate_bytes_per_s: 12_500_000_000,
            target_ns: 2000,
            increase_bytes_per_s: 1_000_000,
            max_tokens: 5,
            ops_per_token: 1800,
            tick_interval_ns: 200_000,
        }
    }
}

impl JustitiaParams {
    /// The run-time parameter names [`JustitiaParams::set`] takes (the
    /// field names).
    pub const KEYS: &'static [&'static str] = &[
        "chunk_bytes",
        "latency_chunk_bytes",
        "line_rate_bytes_per_s",
        "target_ns",
        "increase_bytes_per_s",
        "max_tokens",
        "ops_per_token",
        "tick_interval_ns",
    ];

    /// Sets the parameter `key` (one of [`JustitiaParams::KEYS`]) from its
    /// text `value` (chunks within the host's bounds, rates and counts
    /// positive, a tick of at least 10 us).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        use perf_policy_sdk::limits;
        let chunk = |v: &str| {
            parse_param_min(v, limits::MIN_CHUNK).and_then(|c| {
                if c <= limits::MAX_CHUNK {
                    Ok(c)
                } else {
                    Err(ParamError::BadValue)
                }
            })
        };
        match key {
            "chunk_bytes" => self.chunk_bytes = chunk(value)?,
            "latency_chunk_bytes" => self.latency_chunk_bytes = chunk(value)?,
            "line_rate_bytes_per_s" => self.line_rate_bytes_per_s = parse_param_min(value, 1)?,
            "target_ns" => self.target_ns = parse_param_min(value, 1)?,
            "increase_bytes_per_s" => self.increase_bytes_per_s = parse_param(value)?,
            "max_tokens" => self.max_tokens = parse_param_min(value, 1)?,
            "ops_per_token" => self.ops_per_token = parse_param_min(value, 1)?,
            "tick_interval_ns" => self.tick_interval_ns = parse_param_min(value, 10_000)?,
            _ => return Err(ParamError::UnknownKey),
        }
        Ok(())
    }
}

/// The Justitia policy.
#[derive(Debug, Clone)]
pub struct Justitia {
    /// Parameters.
    pub params: JustitiaParams,
    /// The classifier (PeRF's, with its defaults).
    classifier: Perf,
    /// The virtual link capacity, bytes/s.
    capacity: u64,
    /// EWMA of the reference latency, ns (0 = no sample yet).
    reference_ns: f64,
    pacing: [Pacing; MAX_TENANTS],
}

perf_policy_common::default_from_params!(Justitia, JustitiaParams);

impl Justitia {
    /// Justitia with `params`.
    pub fn new(params: JustitiaParams) -> Self {
        Justitia {
            params,
            classifier: Perf::default(),
            capacity: params.line_rate_bytes_per_s,
            reference_ns: 0.0,
            pacing: [Pacing::UNLIMITED; MAX_TENANTS],
        }
    }

    /// The virtual link capacity now, bytes/s.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// One AIMD step on the reference latency `sample_ns` with `bulk`
    /// bandwidth tenants.
    pub fn aimd(&mut self, sample_ns: Option<u64>, bulk: u64) {
        let p = &self.params;
        if let Some(x) = sample_ns {
            self.reference_ns =
                if self.reference_ns == 0.0 { x as f64 } else { 0.5 * self.reference_ns + 0.5 * x as f64 };
        }
        let floor = p.line_rate_bytes_per_s / (bulk + 1) * bulk.max(1);
        if sample_ns.is_some() && self.reference_ns > p.target_ns as f64 {
            self.capacity = (self.capacity / 2).max(floor);
        } else {
            self.capacity = (self.capacity + p.increase_bytes_per_s).min(p.line_rate_bytes_per_s);
        }
    }
}

impl Policy for Justitia {
    fn name(&self) -> &str {
        "justitia"
    }

    fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        // The classifier's plans are not used, only its classes.
        self.classifier.on_tick(now_ns, stats, plans);
        let latency = self.classifier.delay_active(stats);
        let (mut lat_sum, mut lat_n) = (0u64, 0u64);
        for (i, s) in stats.iter().enumerate() {
            if self.classifier.class_of(i, s) == TenantClass::DelaySensitive && s.completed > 0 {
                lat_sum += s.mean_latency_ns * s.completed;
                lat_n += s.completed;
            }
        }
        let throughput = |c: TenantClass| matches!(c, TenantClass::Bandwidth | TenantClass::MessageSensitive);
        let flows =
            stats.iter().enumerate().filter(|(i, s)| throughput(self.classifier.class_of(*i, s)) && active(s)).count();
        let bulk = stats.iter().enumerate().filter(|(i, s)| self.classifier.bandwidth_backlogged(*i, s)).count();
        self.aimd(lat_sum.checked_div(lat_n), bulk as u64);
        let p = self.params;
        let chunk = if latency { p.latency_chunk_bytes } else { p.chunk_bytes };
        let share = self.capacity / flows.max(1) as u64;
        for (i, s) in stats.iter().enumerate() {
            let class = self.classifier.class_of(i, s);
            let bucket = match class {
                // Bulk flows: one chunk-sized token per `chunk / share` seconds.
                TenantClass::Bandwidth => Pacing::rate(
                    share.max(1),
                    (p.max_tokens as u64 * chunk as u64 / flows.max(1) as u64).max(chunk as u64),
                ),
                // Small-message flows: `ops_per_token` messages per token.
                TenantClass::MessageSensitive => {
                    let per_token = p.ops_per_token as u64 * (s.ewma_msg_bytes as u64).max(1);
                    let tokens_per_s = share / chunk as u64;
                    Pacing::rate(
                        (tokens_per_s * per_token).clamp(1, perf_policy_sdk::limits::MAX_RATE),
                        per_token.max(perf_policy_sdk::limits::MIN_BURST),
                    )
                }
                _ => Pacing::UNLIMITED,
            };
            let bucket = if flows >= 2 || latency { bucket } else { Pacing::UNLIMITED };
            if let Some(slot) = self.pacing.get_mut(i) {
                *slot = bucket;
            }
            plans[i] = TenantPlan {
                split: SplitPlan { chunk_bytes: chunk, zero_weight_per_chunk: 0 },
                split_threshold: if class == TenantClass::Bandwidth {
                    self.classifier.params.split_threshold
                } else {
                    0
                },
                class,
                ..TenantPlan::PASSTHROUGH
            };
        }
    }

    fn on_pacing(&mut self, _now_ns: u64, pacing: &mut [Pacing]) {
        for (out, p) in pacing.iter_mut().zip(self.pacing.iter()) {
            *out = *p;
        }
    }

    fn tick_interval_ns(&self) -> u64 {
        self.params.tick_interval_ns
    }

    perf_policy_common::plan_rule_request_calls!();

    perf_policy_common::restart_on_set_param! {
        /// [`JustitiaParams::KEYS`]; the policy restarts from the new
        /// parameters (capacity at the line rate).
        Justitia
    }
}

export_policy!(Justitia);

#[cfg(test)]
mod tests {
    use super::*;
    use perf_policy_common::fixtures::{self, ping};

    fn bulk(tenant: u32) -> TenantStats {
        fixtures::bulk(tenant, 1, 1)
    }

    #[test]
    fn aimd_halves_to_the_floor_and_climbs_back() {
        let mut j = Justitia::default();
        let line = j.params.line_rate_bytes_per_s;
        j.aimd(Some(5000), 1);
        assert_eq!(j.capacity(), line / 2);
        j.aimd(Some(5000), 1);
        assert_eq!(j.capacity(), line / 2, "floor: line x 1/2 with one bulk tenant");
        // The EWMA (5000 -> 3000 -> 2000 ns) needs two good samples to
        // reach the target.
        j.aimd(Some(1000), 1);
        assert_eq!(j.capacity(), line / 2);
        j.aimd(Some(1000), 1);
        assert_eq!(j.capacity(), line / 2 + j.params.increase_bytes_per_s);
        j.aimd(None, 1);
        assert_eq!(j.capacity(), line / 2 + 2 * j.params.increase_bytes_per_s);
    }

    #[test]
    fn small_chunks_and_pacing_while_a_latency_tenant_runs() {
        let mut j = Justitia::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        let mut pacing = [Pacing::UNLIMITED; 2];
        j.on_tick(0, &[bulk(0), ping(1, 8000)], &mut plans);
        j.on_pacing(0, &mut pacing);
        assert_eq!(plans[0].split, SplitPlan { chunk_bytes: 5000, zero_weight_per_chunk: 0 });
        assert_eq!(plans[0].max_active_qps, 0, "no QP caps: Justitia withholds posts");
        assert_eq!(plans[1].split_threshold, 0);
        assert_eq!(pacing[0].rate_bytes_per_s, j.params.line_rate_bytes_per_s / 2);
        assert_eq!(pacing[1], Pacing::UNLIMITED, "latency tenants bypass the pacer");
        assert!(pacing.iter().all(|p| p.validate().is_ok()));
    }

    #[test]
    fn bulk_tenants_share_the_capacity_round_robin() {
        let mut j = Justitia::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 3];
        let mut pacing = [Pacing::UNLIMITED; 3];
        j.on_tick(0, &[bulk(0), bulk(1), bulk(2)], &mut plans);
        j.on_pacing(0, &mut pacing);
        assert_eq!(plans[0].split.chunk_bytes, 1_000_000);
        let rates: Vec<u64> = pacing.iter().map(|p| p.rate_bytes_per_s).collect();
        assert!(rates.iter().all(|&r| r == j.capacity() / 3), "{rates:?}");
    }
}
