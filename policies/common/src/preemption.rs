//! PeRF's preemption mechanism (the `perf` policy and those built on it)
//! as published (the ATC '24 paper and the authors' code; `docs/policies.md#perf`),
//! every constant a [`PerfParams`] field with the paper's default:
//!
//! - **Classifier**, every `classify_interval_ns` (5 ms), from the largest
//!   per-QP send-queue depth and the EWMA (weight 0.5, kept by the host)
//!   of message size seen over the interval: a tenant whose largest
//!   message is at least `large_msg_bytes` (1 KB) is *bandwidth*; a
//!   small-message tenant with depth < `delay_depth` (5) and depth x
//!   average size < `delay_bytes` (1024 B) is *delay-sensitive*; other
//!   small-message tenants are *message-sensitive*. A tenant not yet
//!   classified is classified at the first tick that sees its traffic.
//! - **Message level**: messages of `split_threshold` (1 KB) and more go
//!   as `chunk_bytes` (16 KB) sub-requests; while a delay- or
//!   message-sensitive tenant is active, one zero-weight WR per
//!   `zero_weight_unit` (1 KB) of payload: `chunk / unit` (16) after each
//!   chunk, and for a message shorter than a chunk its bytes' worth, the
//!   remainder carried to the tenant's next message (`perf.c` counts the
//!   bytes a QP sent and posts the WRs per chunk's worth). No zero-weight
//!   WR while only bandwidth tenants are active.
//! - **QP level** ([`QpCap::Daemon`], the default, after `perf_main.c`
//!   and `perf.c`): every `allowed_set_interval_ns` (10 ms), and when a
//!   tenant starts or stops, the limit
//!   `max_qps_limit = min(QPS_CAPA, fu)` is computed from the largest
//!   average message size of the active tenants that are not
//!   delay-sensitive; if more than one tenant is active and their active
//!   QPs exceed the limit, every tenant that is not delay-sensitive may
//!   keep `MAX_ALLOWED_QP_NUM` (2) QPs active plus its share of the spare
//!   `limit - active tenants`, handed round-robin to the tenants with
//!   more than one active QP; otherwise nobody is capped. The rest are
//!   held in software and rotated in by in-NIC hand-off after
//!   `quantum_requests` (128) / `quantum_bytes` (1,024,000) / `quantum_ns`
//!   (1000 us). A tenant's share of the NIC therefore still grows with
//!   its active QPs, as in PeRF (the RNIC round-robins over QPs);
//!   [`Perf::equalize_bandwidth`] is the extension that evens it out, for
//!   the policies built on this one.
//! - **Time slicing**: when more than `slice_above` (4) bandwidth tenants
//!   share the NIC with an active sensitive one, one bandwidth tenant runs
//!   at a time (the others are paused), rotating every `slice_ns` (100 ms).
//! - **Token bucket** (optional, off by default): each bandwidth tenant
//!   paced at `rate_bytes_per_s` x its weight, burst `burst_bytes` (4 MB).
//!
//! `no_std` and without an allocator: the per-tenant state lives in
//! fixed tables of [`MAX_TENANTS`] entries (a tenant beyond them is
//! classified from the current tick alone and never paced).

mod changed;

use perf_policy_sdk::abi::MAX_TENANTS;
use perf_policy_sdk::{
    parse_param, parse_param_min, Pacing, ParamError, Policy, RequestCalls, RequestInfo, SplitPlan, TenantClass,
    TenantPlan, TenantStats,
};

/// How many QPs of a tenant may be active at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QpCap {
    /// PeRF's rule (the default): caps only while the NIC is over its QP
    /// limit, 2 per tenant plus the spare capacity (see [`QpDaemon`]).
    Daemon(QpDaemon),
    /// A fixed cap for every tenant, always.
    Fixed(u32),
    /// PeRF's `max_qps_limit = min(QPS_CAPA, fu)`, per tenant from its
    /// average message size (see [`QpFormula::limit`]).
    Formula(QpFormula),
}

/// PeRF's active-QP rule, split between its control daemon
/// (`perf_main.c`: the limit and the spare QPs each multi-QP tenant gets)
/// and its library (`perf.c`, `perf_check_paused`: a tenant that is not
/// delay-sensitive keeps `MAX_ALLOWED_QP_NUM` plus its spare QPs active
/// while more than one tenant is active and the active QPs exceed the
/// limit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpDaemon {
    /// MAX_ALLOWED_QP_NUM (`perf.h`: 2).
    pub base: u32,
    /// The `max_qps_limit` formula.
    pub formula: QpFormula,
}

impl Default for QpDaemon {
    fn default() -> Self {
        QpDaemon { base: 2, formula: QpFormula::default() }
    }
}

impl QpDaemon {
    /// Active-QP caps for one daemon period: `caps[i]` for tenant `i` of
    /// `tenants`, each given as (active QPs, average message bytes,
    /// delay-sensitive); 0 means uncapped. `start` is where the round-robin
    /// hand-out of spare QPs begins (PeRF resumes after the last tenant
    /// served). Returns where the next period's hand-out begins.
    pub fn caps(&self, tenants: &[(u32, f64, bool)], start: usize, caps: &mut [u32]) -> usize {
        let n = tenants.len().min(caps.len());
        let active = |i: usize| tenants[i].0 > 0;
        let count = (0..n).filter(|&i| active(i)).count() as u32;
        let qps: u64 = (0..n).map(|i| tenants[i].0 as u64).sum();
        let max_msg = (0..n).filter(|&i| active(i) && !tenants[i].2).map(|i| tenants[i].1).fold(0.0, f64::max);
        let limit = self.formula.limit(max_msg);
        caps[..n].fill(0);
        if count <= 1 || qps <= limit as u64 {
            return start;
        }
        let mut extra = [0u32; MAX_TENANTS];
        let mut spare = limit.saturating_sub(count);
        let mut next = start;
        while spare > 0 {
            let mut granted = false;
            for k in 0..n {
                let i = (start + k) % n;
                if spare > 0 && i < MAX_TENANTS && tenants[i].0 > 1 + extra[i] {
                    extra[i] += 1;
                    spare -= 1;
                    next = i + 1;
                    granted = true;
                }
            }
            if !granted {
                break;
            }
        }
        for i in 0..n {
            if active(i) && !tenants[i].2 {
                caps[i] = self.base.max(1) + extra.get(i).copied().unwrap_or(0);
            }
        }
        next % n.max(1)
    }
}

/// The constants of PeRF's `max_qps_limit` formula (ConnectX-6 values
/// from the authors' README).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpFormula {
    /// LINK_BW, Mb/s.
    pub link_mbps: f64,
    /// The share of the link the formula aims at (0.7).
    pub utilization: f64,
    /// MSG_RATE, thousand messages/s one QP sustains.
    pub msg_rate_kpps: f64,
    /// QPS_CAPA, the QPs that saturate the NIC (the README's 9; the
    /// daemon's built-in default is 8).
    pub qps_capa: u32,
}

impl Default for QpFormula {
    fn default() -> Self {
        QpFormula { link_mbps: 100_000.0, utilization: 0.7, msg_rate_kpps: 12_400.0, qps_capa: 9 }
    }
}

impl QpFormula {
    /// `min(QPS_CAPA, fu)` with `fu = (LINK_BW * 0.7 / (avg_msg * 8)) /
    /// (MSG_RATE / 1000)`, at least 1: the QPs a tenant of messages of
    /// `avg_msg_bytes` needs to reach the formula's share of the link.
    pub fn limit(&self, avg_msg_bytes: f64) -> u32 {
        if avg_msg_bytes <= 0.0 || self.msg_rate_kpps <= 0.0 {
            return self.qps_capa.max(1);
        }
        let fu = (self.link_mbps * self.utilization / (avg_msg_bytes * 8.0)) / (self.msg_rate_kpps / 1000.0);
        // `as` truncates toward zero, which is floor for fu >= 0.
        let fu = if fu >= self.qps_capa as f64 { self.qps_capa } else { fu as u32 };
        fu.clamp(1, self.qps_capa.max(1))
    }
}

/// PeRF's parameters; [`Default`] is the paper's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfParams {
    /// How often the host ticks the policy (plans follow the active
    /// tenants at this pace), ns.
    pub tick_interval_ns: u64,
    /// How often tenants are reclassified (5 ms), ns.
    pub classify_interval_ns: u64,
    /// A message at least this large marks a bandwidth tenant (1 KB).
    pub large_msg_bytes: u64,
    /// Delay-sensitive: depth below this (5).
    pub delay_depth: u32,
    /// Delay-sensitive: depth x average size below this (1024 B).
    pub delay_bytes: f64,
    /// Messages at least this large are split (1 KB).
    pub split_threshold: u64,
    /// Sub-request size, SUB_MSG_SIZE (the README's 16 KB; `perf.c`
    /// defaults to 8 KB when `PERF_CHUNK_SIZE` is not set).
    pub chunk_bytes: u32,
    /// Payload bytes per zero-weight WR, 0_WAIT_UNIT (the README's 1 KB,
    /// `PERF_DUMMY_FACTOR`).
    pub zero_weight_unit: u32,
    /// Active QPs per tenant.
    pub qp_cap: QpCap,
    /// How often the active-QP caps (the allowed sets) are recomputed
    /// (10 ms), ns.
    pub allowed_set_interval_ns: u64,
    /// Rotation after this many requests (128).
    pub quantum_requests: u32,
    /// ... or bytes (1,024,000).
    pub quantum_bytes: u64,
    /// ... or ns active (1000 us).
    pub quantum_ns: u64,
    /// Time-slice bandwidth tenants when more than this many share the
    /// NIC with an active sensitive tenant (4); `u32::MAX` never slices.
    pub slice_above: u32,
    /// Length of a time slice (100 ms), ns.
    pub slice_ns: u64,
    /// Token bucket rate per unit of weight for bandwidth tenants,
    /// bytes/s; 0 = no bucket (the default).
    pub rate_bytes_per_s: u64,
    /// Token bucket burst (4 MB).
    pub burst_bytes: u64,
}

impl Default for PerfParams {
    fn default() -> Self {
        PerfParams {
            tick_interval_ns: 1_000_000,
            classify_interval_ns: 5_000_000,
            large_msg_bytes: 1024,
            delay_depth: 5,
            delay_bytes: 1024.0,
            split_threshold: 1024,
            chunk_bytes: 16 * 1024,
            zero_weight_unit: 1024,
            qp_cap: QpCap::Daemon(QpDaemon { base: 2, formula: QpFormula::default() }),
            allowed_set_interval_ns: 10_000_000,
            quantum_requests: 128,
            quantum_bytes: 1_024_000,
            quantum_ns: 1_000_000,
            slice_above: 4,
            slice_ns: 100_000_000,
            rate_bytes_per_s: 0,
            burst_bytes: 4 << 20,
        }
    }
}

impl PerfParams {
    /// The run-time parameter names [`PerfParams::set`] takes (the field
    /// names; `max_active_qps` is [`PerfParams::qp_cap`]: `daemon`, a number
    /// or `formula`, and `formula_*` are the formula's constants).
    pub const KEYS: &'static [&'static str] = &[
        "tick_interval_ns",
        "classify_interval_ns",
        "large_msg_bytes",
        "delay_depth",
        "delay_bytes",
        "split_threshold",
        "chunk_bytes",
        "zero_weight_unit",
        "max_active_qps",
        "formula_link_mbps",
        "formula_utilization",
        "formula_msg_rate_kpps",
        "formula_qps_capa",
        "allowed_set_interval_ns",
        "quantum_requests",
        "quantum_bytes",
        "quantum_ns",
        "slice_above",
        "slice_ns",
        "rate_bytes_per_s",
        "burst_bytes",
    ];

    /// Sets the parameter `key` (one of [`PerfParams::KEYS`]) from its text
    /// `value`. Values are checked against what the host accepts (a chunk
    /// of 1 KiB to 1 GiB in 64 B granules, a tick of at least 10 us, a
    /// burst of 1 KiB to 1 TiB, ...); `formula_*` needs
    /// `max_active_qps=daemon` (the default) or `formula`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        use perf_policy_sdk::limits;
        let positive = |v: f64| if v.is_finite() && v > 0.0 { Ok(v) } else { Err(ParamError::BadValue) };
        match key {
            "tick_interval_ns" => self.tick_interval_ns = parse_param_min(value, 10_000)?,
            "classify_interval_ns" => self.classify_interval_ns = parse_param(value)?,
            "large_msg_bytes" => self.large_msg_bytes = parse_param_min(value, 1)?,
            "delay_depth" => self.delay_depth = parse_param(value)?,
            "delay_bytes" => self.delay_bytes = positive(parse_param(value)?)?,
            "split_threshold" => self.split_threshold = parse_param(value)?,
            "chunk_bytes" => {
                let c: u32 = parse_param_min(value, limits::MIN_CHUNK)?;
                if c > limits::MAX_CHUNK || !c.is_multiple_of(64) {
                    return Err(ParamError::BadValue);
                }
                self.chunk_bytes = c;
            }
            "zero_weight_unit" => self.zero_weight_unit = parse_param_min(value, 1)?,
            "max_active_qps" if value.trim() == "formula" => self.qp_cap = QpCap::Formula(QpFormula::default()),
            "max_active_qps" if value.trim() == "daemon" => self.qp_cap = QpCap::Daemon(QpDaemon::default()),
            "max_active_qps" => self.qp_cap = QpCap::Fixed(parse_param_min(value, 1)?),
            "formula_link_mbps" | "formula_utilization" | "formula_msg_rate_kpps" | "formula_qps_capa" => {
                let f = match &mut self.qp_cap {
                    QpCap::Formula(f) | QpCap::Daemon(QpDaemon { formula: f, .. }) => f,
                    QpCap::Fixed(_) => return Err(ParamError::BadValue),
                };
                match key {
                    "formula_link_mbps" => f.link_mbps = positive(parse_param(value)?)?,
                    "formula_utilization" => f.utilization = positive(parse_param(value)?)?,
                    "formula_msg_rate_kpps" => f.msg_rate_kpps = positive(parse_param(value)?)?,
                    _ => f.qps_capa = parse_param_min(value, 1)?,
                }
            }
            "allowed_set_interval_ns" => self.allowed_set_interval_ns = parse_param(value)?,
            "quantum_requests" => self.quantum_requests = parse_param(value)?,
            "quantum_bytes" => self.quantum_bytes = parse_param(value)?,
            "quantum_ns" => self.quantum_ns = parse_param(value)?,
            "slice_above" => self.slice_above = parse_param(value)?,
            "slice_ns" => self.slice_ns = parse_param(value)?,
            "rate_bytes_per_s" => {
                let r = parse_param(value)?;
                if r > limits::MAX_RATE {
                    return Err(ParamError::BadValue);
                }
                self.rate_bytes_per_s = r;
            }
            "burst_bytes" => {
                let b = parse_param_min(value, limits::MIN_BURST)?;
                if b > limits::MAX_BURST {
                    return Err(ParamError::BadValue);
                }
                self.burst_bytes = b;
            }
            _ => return Err(ParamError::UnknownKey),
        }
        if self.quantum_requests == 0 && self.quantum_bytes == 0 && self.quantum_ns == 0 {
            // A capped QP that never rotates would starve its siblings.
            return Err(ParamError::BadValue);
        }
        Ok(())
    }
}

/// What the classifier has seen of a tenant since its last decision.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Seen {
    max_depth: u32,
    max_msg: u64,
    ewma: f64,
}

impl Seen {
    const ZERO: Seen = Seen { max_depth: 0, max_msg: 0, ewma: 0.0 };

    /// Takes one tick's record in. Adding the same record again changes
    /// nothing, which the incremental tick relies on (`changed.rs`).
    fn add(&mut self, s: &TenantStats) {
        self.max_depth = self.max_depth.max(s.max_depth);
        self.max_msg = self.max_msg.max(s.max_msg_bytes);
        self.ewma = s.ewma_msg_bytes;
    }
}

/// The PeRF policy (see the module documentation).
#[derive(Debug, Clone)]
pub struct Perf {
    /// Parameters.
    pub params: PerfParams,
    classes: [TenantClass; MAX_TENANTS],
    seen: [Seen; MAX_TENANTS],
    caps: [u32; MAX_TENANTS],
    pacing: [Pacing; MAX_TENANTS],
    /// Payload bytes short of the next zero-weight WR, per tenant (for
    /// messages shorter than a chunk).
    carry: [u64; MAX_TENANTS],
    /// Where the daemon's next hand-out of spare QPs begins.
    next_grant: usize,
    /// The active tenants (bit = tenant, the first 64) at the last tick.
    active_set: u64,
    next_classify_ns: u64,
    next_allowed_ns: u64,
    ticked: bool,
    /// What the last tick decided from, for the incremental tick
    /// (`changed.rs`).
    last: changed::LastTick,
}

crate::default_from_params!(Perf, PerfParams);

impl Perf {
    /// PeRF with `params`.
    pub fn new(params: PerfParams) -> Self {
        Perf {
            params,
            classes: [TenantClass::Unknown; MAX_TENANTS],
            seen: [Seen::ZERO; MAX_TENANTS],
            caps: [0; MAX_TENANTS],
            pacing: [Pacing::UNLIMITED; MAX_TENANTS],
            carry: [0; MAX_TENANTS],
            next_grant: 0,
            active_set: 0,
            next_classify_ns: 0,
            next_allowed_ns: 0,
            ticked: false,
            last: changed::LastTick::new(),
        }
    }

    /// Classifies a tenant from one tick of statistics (`None`: no request
    /// taken, nothing to go on).
    pub fn classify(&self, s: &TenantStats) -> Option<TenantClass> {
        let seen = Seen { max_depth: s.max_depth, max_msg: s.max_msg_bytes, ewma: s.ewma_msg_bytes };
        self.classify_seen(&seen)
    }

    fn classify_seen(&self, s: &Seen) -> Option<TenantClass> {
        // No request taken: no evidence of the tenant's message sizes (a
        // bandwidth tenant whose queues are full shows only completions),
        // so its class stays.
        if s.max_msg == 0 {
            return None;
        }
        let p = &self.params;
        Some(if s.max_msg >= p.large_msg_bytes {
            TenantClass::Bandwidth
        } else if s.max_depth < p.delay_depth && (s.max_depth as f64 * s.ewma) < p.delay_bytes {
            TenantClass::DelaySensitive
        } else {
            TenantClass::MessageSensitive
        })
    }

    /// The class of tenant `i` as last decided (from `s` alone beyond the
    /// table).
    pub fn class_of(&self, i: usize, s: &TenantStats) -> TenantClass {
        match self.classes.get(i) {
            Some(c) => *c,
            None => self.classify(s).unwrap_or(TenantClass::Unknown),
        }
    }

    /// Whether a delay- or message-sensitive tenant was active in the
    /// last tick (see [`active`]).
    pub fn sensitive_active(&self, stats: &[TenantStats]) -> bool {
        stats.iter().enumerate().any(|(i, s)| is_sensitive(self.class_of(i, s)) && active(s))
    }

    /// Whether a delay-sensitive tenant was active in the last tick.
    pub fn delay_active(&self, stats: &[TenantStats]) -> bool {
        stats.iter().enumerate().any(|(i, s)| self.class_of(i, s) == TenantClass::DelaySensitive && active(s))
    }

    /// Whether a message-sensitive tenant was active in the last tick.
    pub fn message_active(&self, stats: &[TenantStats]) -> bool {
        stats.iter().enumerate().any(|(i, s)| self.class_of(i, s) == TenantClass::MessageSensitive && active(s))
    }

    /// Whether tenant `i` is a bandwidth tenant with work.
    pub fn bandwidth_backlogged(&self, i: usize, s: &TenantStats) -> bool {
        self.class_of(i, s) == TenantClass::Bandwidth && s.backlogged_qps > 0
    }

    /// How many bandwidth tenants have work.
    pub fn bandwidth_count(&self, stats: &[TenantStats]) -> usize {
        stats.iter().enumerate().filter(|(i, s)| self.bandwidth_backlogged(*i, s)).count()
    }

    /// Tenant `i`'s active-QP cap as last computed (0: uncapped).
    pub fn cap_of(&self, i: usize) -> u32 {
        match (self.caps.get(i), self.params.qp_cap) {
            (Some(&c), _) => c,
            (None, QpCap::Daemon(d)) => d.base.max(1),
            (None, QpCap::Fixed(n)) => n.max(1),
            (None, QpCap::Formula(f)) => f.qps_capa.max(1),
        }
    }

    /// The active QPs a backlogged tenant runs: its backlogged QPs, within
    /// its cap.
    pub fn active_qps(&self, i: usize, s: &TenantStats) -> u32 {
        match self.cap_of(i) {
            0 => s.backlogged_qps.max(1),
            cap => s.backlogged_qps.clamp(1, cap),
        }
    }

    /// The extension of the policies built on PeRF (not PeRF's): while two
    /// or more bandwidth tenants have work, each active QP of a backlogged
    /// bandwidth tenant sends chunks of `chunk_bytes / active`, each
    /// followed by at least one zero-weight WR (which ends the QP's NIC
    /// turn there), so that every tenant moves `chunk_bytes` per NIC round
    /// whatever its QP count. Call after [`Policy::on_tick`].
    pub fn equalize_bandwidth(&self, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        if self.bandwidth_count(stats) < 2 {
            return;
        }
        for (i, (s, plan)) in stats.iter().zip(plans.iter_mut()).enumerate() {
            if self.bandwidth_backlogged(i, s) {
                let active = self.active_qps(i, s);
                plan.split.chunk_bytes = crate::chunk_granule((self.params.chunk_bytes / active) as u64);
                plan.split.zero_weight_per_chunk = plan.split.zero_weight_per_chunk.max(1);
            }
        }
    }

    fn classify_all(&mut self, now_ns: u64, stats: &[TenantStats]) {
        let period = !self.ticked || now_ns >= self.next_classify_ns;
        self.last.fresh.clear_below(MAX_TENANTS);
        for (i, s) in stats.iter().enumerate().take(MAX_TENANTS) {
            self.seen[i].add(s);
            // A new tenant is classified as soon as it shows traffic.
            if period || self.classes[i] == TenantClass::Unknown {
                self.reclassify(i);
            }
        }
        if period {
            self.next_classify_ns = now_ns.saturating_add(self.params.classify_interval_ns);
        }
    }

    /// Classifies tenant `i` from what it showed since the last time and
    /// starts counting again.
    fn reclassify(&mut self, i: usize) {
        if let Some(c) = self.classify_seen(&self.seen[i]) {
            self.classes[i] = c;
        }
        self.seen[i] = Seen::ZERO;
        self.last.fresh.insert(i);
    }

    fn recompute_caps(&mut self, now_ns: u64, stats: &[TenantStats]) {
        // A tenant that starts or stops is seen at once (PeRF's daemon sees
        // it at its next 10 ms pass), the rest every period.
        let mut active_set = 0u64;
        for (i, s) in stats.iter().enumerate().take(64) {
            active_set |= (active(s) as u64) << i;
        }
        let changed = active_set != self.active_set;
        self.active_set = active_set;
        if self.ticked && now_ns < self.next_allowed_ns && !changed {
            return;
        }
        self.next_allowed_ns = now_ns.saturating_add(self.params.allowed_set_interval_ns);
        match self.params.qp_cap {
            QpCap::Daemon(d) => {
                let mut tenants = [(0u32, 0.0f64, false); MAX_TENANTS];
                for (i, s) in stats.iter().enumerate().take(MAX_TENANTS) {
                    // PeRF counts the QPs that posted in the last period; a
                    // ping-pong between two requests has one.
                    let qps = if active(s) { s.backlogged_qps.max(1) } else { 0 };
                    tenants[i] = (qps, s.ewma_msg_bytes, self.classes[i] == TenantClass::DelaySensitive);
                }
                let n = stats.len().min(MAX_TENANTS);
                self.next_grant = d.caps(&tenants[..n], self.next_grant, &mut self.caps[..n]);
            }
            QpCap::Fixed(n) => {
                for c in self.caps.iter_mut().take(stats.len()) {
                    *c = n.max(1);
                }
            }
            QpCap::Formula(f) => {
                for (i, s) in stats.iter().enumerate().take(MAX_TENANTS) {
                    self.caps[i] = f.limit(s.ewma_msg_bytes);
                }
            }
        }
    }

    /// The zero-weight WRs after each chunk: a chunk's worth while a
    /// sensitive tenant is active, none otherwise.
    fn zero_weight_per_chunk(&self, sensitive: bool) -> u32 {
        let p = &self.params;
        if sensitive {
            p.chunk_bytes / p.zero_weight_unit.max(1)
        } else {
            0
        }
    }

    /// Tenant `i`'s plan and pacing, given the zero-weight WRs per chunk
    /// and which bandwidth tenant holds the NIC's time slice; and what it
    /// counts for in those (for the incremental tick).
    #[inline(always)]
    fn decide(&mut self, i: usize, s: &TenantStats, zero_weight: u32, owner: Option<usize>, plans: &mut [TenantPlan]) {
        let p = &self.params;
        let class = self.class_of(i, s);
        if let Some(f) = self.last.flags.get_mut(i) {
            *f = changed::flags_of(class, s);
        }
        plans[i] = TenantPlan {
            max_active_qps: self.cap_of(i),
            quantum_requests: p.quantum_requests,
            quantum_bytes: p.quantum_bytes,
            quantum_ns: p.quantum_ns,
            split: SplitPlan { chunk_bytes: p.chunk_bytes, zero_weight_per_chunk: zero_weight },
            // PeRF splits every message of PERF_LARGE_FLOW and more,
            // whoever sends it (such a message makes its tenant a
            // bandwidth tenant at the next classification).
            split_threshold: p.split_threshold,
            class,
            ..TenantPlan::PASSTHROUGH
        };
        let bucket = if class == TenantClass::Bandwidth && p.rate_bytes_per_s > 0 {
            Pacing::rate(p.rate_bytes_per_s.saturating_mul(s.weight.max(1) as u64), p.burst_bytes)
        } else {
            Pacing::UNLIMITED
        };
        if let Some(slot) = self.pacing.get_mut(i) {
            let paused = owner.is_some_and(|o| o != i) && class == TenantClass::Bandwidth;
            *slot = Pacing { paused: paused as u32, ..bucket };
        }
    }

    /// The bandwidth tenant that holds the NIC in this time slice, if
    /// slicing applies: the `k`-th backlogged bandwidth tenant, `k`
    /// advancing every `slice_ns`.
    fn slice_owner(&self, now_ns: u64, stats: &[TenantStats], sensitive: bool, bw: usize) -> Option<usize> {
        let k = self.slice_index(now_ns, sensitive, bw)?;
        stats.iter().enumerate().filter(|(i, s)| self.bandwidth_backlogged(*i, s)).nth(k).map(|(i, _)| i)
    }
}

/// Whether a tenant was active in the last tick: it has work now, or it
/// completed or posted something during the tick. (A ping-pong tenant has
/// nothing in flight between its completion and its next request, so its
/// depth at the tick instant alone would miss it part of the time.)
pub fn active(s: &TenantStats) -> bool {
    s.backlogged_qps > 0 || s.completed > 0 || s.max_depth > 0
}

/// Whether a class is one PeRF isolates others from (delay- or
/// message-sensitive).
pub fn is_sensitive(c: TenantClass) -> bool {
    matches!(c, TenantClass::DelaySensitive | TenantClass::MessageSensitive)
}

impl Policy for Perf {
    fn name(&self) -> &str {
        "perf"
    }

    fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        self.classify_all(now_ns, stats);
        self.recompute_caps(now_ns, stats);
        self.ticked = true;
        let sensitive = self.sensitive_active(stats);
        let bw = self.bandwidth_count(stats);
        let owner = self.slice_owner(now_ns, stats, sensitive, bw);
        let zero_weight = self.zero_weight_per_chunk(sensitive);
        for (i, s) in stats.iter().enumerate() {
            self.decide(i, s, zero_weight, owner, plans);
        }
        self.remember(now_ns, stats.len(), sensitive, bw, owner);
    }

    /// [`Policy::on_tick`], working only on the tenants that changed and
    /// those it must look at again, where that decides the same
    /// (`changed.rs`); the whole tick otherwise.
    fn on_tick_changed(&mut self, now_ns: u64, stats: &[TenantStats], changed: &[u32], plans: &mut [TenantPlan]) {
        if !self.tick_changed(now_ns, stats, changed, plans) {
            self.on_tick(now_ns, stats, plans);
        }
    }

    fn tick_changes(&self) -> bool {
        true
    }

    fn on_request(&mut self, req: &RequestInfo, plan: &TenantPlan) -> SplitPlan {
        // A SEND is split like a WRITE, as the authors' code does with the
        // receiver splitting its RECVs (here by rendezvous, ABI 1.4).
        if plan.split_threshold == 0 || req.len < plan.split_threshold {
            return SplitPlan::WHOLE;
        }
        let mut split = plan.split;
        if split.zero_weight_per_chunk > 0 && req.len < split.chunk_bytes as u64 {
            // One zero-weight WR per `zero_weight_unit` of payload: a
            // message shorter than a chunk earns its bytes' worth.
            let unit = self.params.zero_weight_unit.max(1) as u64;
            let carry = self.carry.get(req.tenant as usize).copied().unwrap_or(0);
            let bytes = carry + req.len;
            split.zero_weight_per_chunk = (bytes / unit).min(split.zero_weight_per_chunk as u64) as u32;
            if let Some(c) = self.carry.get_mut(req.tenant as usize) {
                *c = bytes % unit;
            }
        }
        split
    }

    fn on_pacing(&mut self, _now_ns: u64, pacing: &mut [Pacing]) {
        for (out, p) in pacing.iter_mut().zip(self.pacing.iter()) {
            *out = *p;
        }
    }

    fn tick_interval_ns(&self) -> u64 {
        self.params.tick_interval_ns
    }

    fn set_param(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        self.params.set(key, value)
    }

    /// [`Policy::on_request`] above is the plan rule with SENDs split and,
    /// for a message shorter than a chunk that earns zero-weight WRs,
    /// PeRF's carry per tenant: the host applies both (ABI 1.8), and no
    /// request is a call. A unit too large for the declaration's wire
    /// value leaves those messages calls, natively as in wasm.
    fn request_calls(&self) -> RequestCalls {
        match self.params.zero_weight_unit.max(1) {
            unit if unit > RequestCalls::MAX_UNIT_BYTES => RequestCalls::PlanExceptShort { sends: true },
            unit => RequestCalls::PlanWithCarry { sends: true, unit_bytes: unit },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use std::vec::Vec;

    fn bulk(tenant: u32, weight: u32) -> TenantStats {
        fixtures::bulk(tenant, 1, weight)
    }

    fn ping(tenant: u32) -> TenantStats {
        fixtures::ping(tenant, 0)
    }

    fn tick(p: &mut Perf, now: u64, stats: &[TenantStats]) -> ([TenantPlan; 8], [Pacing; 8]) {
        let mut plans = [TenantPlan::PASSTHROUGH; 8];
        let mut pacing = [Pacing::UNLIMITED; 8];
        p.on_tick(now, stats, &mut plans[..stats.len()]);
        p.on_pacing(now, &mut pacing[..stats.len()]);
        (plans, pacing)
    }

    #[test]
    fn the_max_qps_limit_formula() {
        let f = QpFormula::default();
        assert_eq!(f.limit(16.0), 9, "small messages: QPS_CAPA");
        assert_eq!(f.limit(128.0), 5, "70000 / 1024 / 12.4 = 5.5");
        assert_eq!(f.limit(1048576.0), 1, "at least one");
        let mut p = Perf::new(PerfParams { qp_cap: QpCap::Formula(f), ..PerfParams::default() });
        let (plans, _) = tick(&mut p, 0, &[bulk(0, 1), TenantStats { qps: 8, ewma_msg_bytes: 128.0, ..ping(1) }]);
        assert_eq!((plans[0].max_active_qps, plans[1].max_active_qps), (1, 5));
        // The caps (allowed sets) are recomputed every 10 ms only.
        let (plans, _) = tick(&mut p, 5_000_000, &[bulk(0, 1), TenantStats { ewma_msg_bytes: 16.0, ..ping(1) }]);
        assert_eq!(plans[1].max_active_qps, 5);
        let (plans, _) = tick(&mut p, 10_000_000, &[bulk(0, 1), TenantStats { ewma_msg_bytes: 16.0, ..ping(1) }]);
        assert_eq!(plans[1].max_active_qps, 9);
    }

    #[test]
    fn the_daemon_caps_only_while_the_nic_is_over_its_qp_limit() {
        let m = |t, qps| TenantStats { qps, backlogged_qps: qps, max_depth: 128, ..ping(t) };
        // Experiment 4: M (10 QPs of 16 B) beside D. Limit min(9, fu(16 B)
        // = 44) = 9 < 11 active QPs: M keeps 2 + the spare 9 - 2 tenants.
        let (plans, _) = tick(&mut Perf::default(), 0, &[m(0, 10), ping(1)]);
        assert_eq!((plans[0].class, plans[1].class), (TenantClass::MessageSensitive, TenantClass::DelaySensitive));
        assert_eq!((plans[0].max_active_qps, plans[1].max_active_qps), (9, 0), "D is never capped");
        // Experiments 3 and 5: a 1 MB tenant makes the limit 1 QP, so no
        // spare: every multi-QP tenant keeps 2.
        let (plans, _) = tick(&mut Perf::default(), 0, &[bulk(0, 1), fixtures::bulk(1, 5, 1)]);
        assert_eq!(plans[1].max_active_qps, 2);
        let (plans, _) = tick(&mut Perf::default(), 0, &[bulk(0, 1), m(1, 10)]);
        assert_eq!(plans[1].max_active_qps, 2);
        // A tenant alone, or few QPs in all: nobody capped.
        let (plans, _) = tick(&mut Perf::default(), 0, &[m(0, 10)]);
        assert_eq!(plans[0].max_active_qps, 0);
        let (plans, _) = tick(&mut Perf::default(), 0, &[m(0, 4), m(1, 4)]);
        assert_eq!((plans[0].max_active_qps, plans[1].max_active_qps), (0, 0), "8 QPs <= 9");
        // Spare QPs go round-robin to the multi-QP tenants: 9 - 3 tenants = 6.
        let (plans, _) = tick(&mut Perf::default(), 0, &[m(0, 10), m(1, 10), ping(2)]);
        assert_eq!((plans[0].max_active_qps, plans[1].max_active_qps), (5, 5));
    }

    #[test]
    fn a_message_shorter_than_a_chunk_earns_its_bytes_worth_of_zero_weight_wrs() {
        let mut p = Perf::default();
        let (plans, _) = tick(&mut p, 0, &[bulk(0, 1), ping(1)]);
        let req = |len| RequestInfo { tenant: 0, qp: 0, len, op: perf_policy_sdk::RequestOp::Write, depth: 1 };
        assert_eq!(p.on_request(&req(1 << 20), &plans[0]).zero_weight_per_chunk, 16);
        // 1.5 KB, then 1.5 KB: one WR, then two (the half carried).
        assert_eq!(p.on_request(&req(1536), &plans[0]).zero_weight_per_chunk, 1);
        assert_eq!(p.on_request(&req(1536), &plans[0]).zero_weight_per_chunk, 2);
        assert_eq!(p.on_request(&req(4096), &plans[0]).zero_weight_per_chunk, 4);
        assert_eq!(p.on_request(&req(512), &plans[0]), SplitPlan::WHOLE, "under PERF_LARGE_FLOW");
    }

    #[test]
    fn reclassified_every_classify_interval() {
        let mut p = Perf::default();
        let (plans, _) = tick(&mut p, 0, &[bulk(0, 1)]);
        assert_eq!(plans[0].class, TenantClass::Bandwidth);
        // Small messages now: the class holds until the 5 ms period ends,
        // then follows what the whole period showed.
        let (plans, _) = tick(&mut p, 1_000_000, &[ping(0)]);
        assert_eq!(plans[0].class, TenantClass::Bandwidth);
        let (plans, _) = tick(&mut p, 5_000_000, &[ping(0)]);
        assert_eq!(plans[0].class, TenantClass::DelaySensitive);
    }

    #[test]
    fn a_period_with_completions_but_no_new_request_keeps_the_class() {
        let mut p = Perf::default();
        let (plans, _) = tick(&mut p, 0, &[bulk(0, 1)]);
        assert_eq!(plans[0].class, TenantClass::Bandwidth);
        // Its queues full, the flooder has no request taken for a whole
        // period, only completions: no evidence, so it stays a bandwidth
        // tenant (and its next messages are split).
        let full = TenantStats { max_msg_bytes: 0, completed: 40, max_depth: 256, ..bulk(0, 1) };
        let (plans, _) = tick(&mut p, 5_000_000, &[full]);
        assert_eq!(plans[0].class, TenantClass::Bandwidth);
        let (plans, _) = tick(&mut p, 10_000_000, &[full]);
        assert_eq!(plans[0].class, TenantClass::Bandwidth);
    }

    #[test]
    fn time_slices_more_than_four_bandwidth_tenants_beside_a_sensitive_one() {
        let mut p = Perf::default();
        let mut stats: Vec<TenantStats> = (0..6).map(|t| bulk(t, 1)).collect();
        stats.push(ping(6));
        let (_, pacing) = tick(&mut p, 0, &stats);
        let running: Vec<usize> = (0..6).filter(|&i| pacing[i].paused == 0).collect();
        assert_eq!(running, [0], "one bandwidth tenant at a time");
        assert_eq!(pacing[6].paused, 0, "the sensitive tenant runs");
        let (_, pacing) = tick(&mut p, 100_000_000, &stats);
        assert_eq!((0..6).filter(|&i| pacing[i].paused == 0).collect::<Vec<_>>(), [1], "rotates every 100 ms");
        // Four bandwidth tenants, or no sensitive one: nobody paused.
        let (_, pacing) = tick(&mut Perf::default(), 0, &stats[2..]);
        assert!(pacing[..5].iter().all(|x| x.paused == 0));
        let (_, pacing) = tick(&mut Perf::default(), 0, &stats[..6]);
        assert!(pacing[..6].iter().all(|x| x.paused == 0));
    }

    #[test]
    fn parameters_are_set_by_name_and_checked() {
        let mut p = Perf::default();
        assert_eq!(p.set_param("max_active_qps", "4"), Ok(()));
        assert_eq!(p.params.qp_cap, QpCap::Fixed(4));
        assert_eq!(p.set_param("quantum_bytes", "2_048_000"), Ok(()));
        assert_eq!(p.params.quantum_bytes, 2_048_000);
        assert_eq!(p.set_param("max_active_qps", "0"), Err(ParamError::BadValue));
        assert_eq!(p.set_param("chunk_bytes", "1000"), Err(ParamError::BadValue), "not a 64 B granule");
        assert_eq!(p.set_param("chunk_bytes", "lots"), Err(ParamError::BadValue));
        assert_eq!(p.set_param("formula_qps_capa", "4"), Err(ParamError::BadValue), "needs the formula first");
        assert_eq!(p.set_param("max_active_qps", "formula"), Ok(()));
        assert_eq!(p.set_param("formula_qps_capa", "4"), Ok(()));
        assert!(matches!(p.params.qp_cap, QpCap::Formula(f) if f.qps_capa == 4));
        assert_eq!(p.set_param("max_active_qps", "daemon"), Ok(()));
        assert_eq!(p.params.qp_cap, PerfParams::default().qp_cap, "PeRF's rule is the default");
        assert_eq!(p.set_param("formula_qps_capa", "8"), Ok(()), "the daemon's limit uses the formula");
        assert_eq!(p.set_param("no_such_knob", "1"), Err(ParamError::UnknownKey));
        p.params.quantum_requests = 0;
        p.params.quantum_ns = 0;
        assert_eq!(p.set_param("quantum_bytes", "0"), Err(ParamError::BadValue), "a cap that never rotates");
        let mut q = PerfParams::default();
        for key in PerfParams::KEYS.iter().filter(|k| !k.starts_with("formula_")) {
            assert_ne!(q.set(key, "x"), Err(ParamError::UnknownKey), "{key} is listed but not handled");
        }
    }

    #[test]
    fn the_optional_token_bucket_paces_bandwidth_tenants_by_weight() {
        let (_, pacing) = tick(&mut Perf::default(), 0, &[bulk(0, 2), ping(1)]);
        assert_eq!(pacing[0], Pacing::UNLIMITED, "off by default");
        let rate = 1_000_000_000;
        let mut p = Perf::new(PerfParams { rate_bytes_per_s: rate, ..PerfParams::default() });
        let (_, pacing) = tick(&mut p, 0, &[bulk(0, 2), ping(1)]);
        assert_eq!(pacing[0], Pacing::rate(2 * rate, 4 << 20));
        assert_eq!(pacing[1], Pacing::UNLIMITED, "sensitive tenants are not paced");
        assert!(pacing.iter().all(|x| x.validate().is_ok()));
    }
}
