//! `fairshare`: every tenant gets its weighted max-min fair share of the
//! NIC, whatever its message sizes, QP count, operation or post lists,
//! with the NIC kept busy (`docs/policies.md#fairshare`,
//! `docs/isolation.md`).
//!
//! The NIC round-robins the QPs that have work in it, one turn each, on
//! both hosts (a READ's response takes turns of the responder QP). So what a tenant gets, and what a small message
//! waits behind, is decided by what each tenant has *in* the NIC. This
//! policy decides that, with two mechanisms of the dataplane and no
//! classification:
//!
//! - **Fair admission under a shared in-flight budget** (ABI 1.3 windows,
//!   the dataplane's `engine/admission.rs`): the bytes all tenants have
//!   posted and not completed stay under a budget per direction (WRITE /
//!   SEND on the requester's wire, READ responses on the responder's),
//!   large enough to cover the NIC's pipeline (so the wire does not wait
//!   for the host) and small enough that what queues in the NIC ahead of a
//!   new message is short. The room completions free goes to the tenants
//!   in weighted deficit round robin, in bytes, so a tenant's QP count,
//!   message size and round-trip time do not change its share; a tenant
//!   with nothing in flight (a ping-pong, a sparse sender) posts at once.
//!   The budget shrinks while a latency-bound tenant's latency rises
//!   above its best, and grows back otherwise.
//! - **Sub-requests, and a zero-weight WR per chunk of bytes**: every
//!   WRITE larger than one chunk is split into chunks (every tenant alike:
//!   there is no size below which a tenant escapes), with a zero-weight WR
//!   after each; whole messages get one after the message that brings its
//!   QP's bytes since the last to a chunk. A zero-weight WR ends the QP's
//!   NIC turn, so no turn of any QP carries much more than a chunk,
//!   whatever the message sizes and post lists, and a small message waits
//!   for at most about a chunk of each QP in the NIC. A READ is split into
//!   chunks of half that size without zero-weight WRs (its request carries
//!   no payload; the responder sends each chunk's response in a turn of its
//!   own, and its QP rejoins the responder's ring at once with the next
//!   response ready, so a message there can wait for two of them). A SEND
//!   consumes one RECV: one larger than a chunk is split too where the
//!   receiver's dataplane advertised its RECV (SEND rendezvous: the bytes
//!   after the first chunk go as WRITE chunks into the RECV's buffer, the
//!   first chunk as the SEND), and goes whole otherwise, with a zero-weight
//!   WR after it; small SENDs are whole messages like small WRITEs. The
//!   zero-weight WRs are NOPs (the NIC fetches the next chunk while a NOP
//!   waits for its turn, so one QP streams 2 KiB chunks at line rate), and
//!   the chunk is as small as the loop can afford: 2 KiB, or more where
//!   the loop's cost per WQE (ABI 1.7, [`LoopInfo`]) would make its chunks
//!   take more than `loop_share_permille` of the loop's time.
//!
//! Work conservation follows from the budget covering the pipeline: a
//! tenant alone gets all of it, and tenants without work hold none.
//!
//! One crate, two uses: the dataplane's built-in `fairshare` and, through
//! [`export_policy!`], the `fairshare.wasm` module (`--policy wasm:fairshare`).
#![cfg_attr(target_arch = "wasm32", no_std)]

use perf_policy_sdk::{
    export_policy, limits, parse_param_min, LoopInfo, ParamError, Policy, RequestInfo, RequestOp, SplitPlan,
    TenantPlan, TenantStats, ZeroWeightOp,
};

/// Most tenants the policy tracks (the wasm ABI's limit).
const MAX_TENANTS: usize = perf_policy_sdk::abi::MAX_TENANTS;

/// Entries of the per-QP table of bytes posted since the QP's last
/// zero-weight WR (direct-mapped on tenant and QP; a collision only moves
/// one zero-weight WR).
const QP_SLOTS: usize = 1 << 14;

/// Parameters (run-time: `--policy fairshare:window_kib=64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairShareParams {
    /// In-flight budget of WRITE and SEND bytes shared by all tenants, KiB.
    pub window_kib: u32,
    /// In-flight budget of READ response bytes, KiB.
    pub read_window_kib: u32,
    /// Chunk of a split WRITE, bytes.
    pub chunk_bytes: u32,
    /// Chunk of a split READ, bytes. Half a WRITE chunk: a responder QP's
    /// next response is ready when its turn ends (no WQE to fetch, and no
    /// zero-weight WR can be posted there), so the QP rejoins its host's
    /// ring at once and a message there (a ping-pong's reply) may wait for
    /// the response on the wire and the next one. (`perf-runner matrix`:
    /// a ping-pong beside a 16-QP 1 MB READ tenant saw x1.5 to x1.8 its
    /// p99 alone with 8 KiB READ chunks, x1.3 beside 8 KiB WRITE chunks.)
    pub read_chunk_bytes: u32,
    /// Zero-weight WRs after each chunk.
    pub zero_weight: u32,
    /// What they are: WAITs as PeRF posts them (the default; the NIC
    /// processes nothing of a QP past a WAIT before it executes, so each
    /// chunk's fetch waits for the WAIT's turn: one QP's 4 KiB chunks
    /// carry 58 Gb/s alone) or NOPs (the next chunk is fetched while the
    /// NOP waits for its turn: a QP's chunks stream at line rate down to
    /// 2 KiB). `zero_weight_op=wait|nop`; `docs/isolation.md` has what
    /// each measured.
    pub zero_weight_op: ZeroWeightOp,
    /// The most of the dataplane loop's time the WQEs of a line-rate
    /// stream's chunks may take (per mille): where the loop's cost per WQE
    /// is known (ABI 1.7, [`LoopInfo`]), a chunk grows past `chunk_bytes`
    /// until its WQEs (the chunk and its zero-weight WRs) cost the loop at
    /// most this share of the chunk's time on the link. A free loop keeps
    /// `chunk_bytes`.
    pub loop_share_permille: u32,
    /// Tick interval, ns.
    pub tick_ns: u64,
    /// Smallest budget the latency feedback may shrink to, as a fraction
    /// of the budget (per mille). The wire's own floor is the dataplane's:
    /// it never lets a budget fall below the bandwidth-delay product of
    /// the NIC's pipeline, measured (`engine/pipeline.rs`), however many
    /// tenants share it.
    pub floor_permille: u32,
    /// A watched tenant (see `watched_tenant_hurt`) is hurt when its mean
    /// latency in a tick exceeds its lowest seen by this factor (per
    /// mille).
    pub hurt_permille: u32,
    /// The budget grows back by its size over this many ticks while no
    /// watched tenant is hurt (it shrinks by 1/8 per tick while one is):
    /// growing slower than it shrinks keeps it mostly below the size at
    /// which a watched tenant starts to wait.
    pub grow_ticks: u32,
}

impl Default for FairShareParams {
    fn default() -> Self {
        FairShareParams {
            window_kib: 44,
            read_window_kib: 48,
            chunk_bytes: 2048,
            read_chunk_bytes: 4096,
            zero_weight: 1,
            zero_weight_op: ZeroWeightOp::Nop,
            loop_share_permille: 100,
            tick_ns: 50_000,
            floor_permille: 400,
            hurt_permille: 1050,
            grow_ticks: 32,
        }
    }
}

/// The `fairshare` policy.
#[derive(Debug, Clone)]
pub struct FairShare {
    /// Its parameters.
    pub params: FairShareParams,
    /// Per tenant: its lowest mean latency in a tick, ns (0: none yet).
    base_latency: [u64; MAX_TENANTS],
    /// The budgets in force, bytes (WRITE / SEND, READ).
    budget: [u64; 2],
    /// The loop as the last tick's loop block gave it.
    loop_info: LoopInfo,
    /// The chunk in force, bytes: [`FairShare::chunk_for`] the loop and the
    /// parameters, kept so that each request need not recompute it.
    chunk: u32,
    /// Per QP (direct-mapped): bytes of whole messages posted since its
    /// last zero-weight WR.
    since_zero_weight: [u32; QP_SLOTS],
    /// When the last tick ran, ns (`None` before this module's first tick:
    /// a module swapped in mid-run counts its first tick as one interval,
    /// the span its first statistics cover, not the time since 0).
    last_tick_ns: Option<u64>,
}

perf_policy_common::default_from_params!(FairShare, FairShareParams);

impl FairShare {
    /// The policy with `params`.
    pub fn new(params: FairShareParams) -> Self {
        FairShare {
            params,
            base_latency: [0; MAX_TENANTS],
            budget: [0; 2],
            loop_info: LoopInfo::UNKNOWN,
            chunk: params.chunk_bytes,
            since_zero_weight: [0; QP_SLOTS],
            last_tick_ns: None,
        }
    }

    fn qp_slot(req: &RequestInfo) -> usize {
        (req.tenant as usize).wrapping_mul(0x9E37_79B1).wrapping_add(req.qp as usize) % QP_SLOTS
    }

    /// Whether some watched tenant saw a mean latency this tick (`span_ns`
    /// long) above its lowest by more than `hurt_permille`; records the
    /// lowest. A tenant is watched when its rate is what its latency
    /// allows, so that what queues in the NIC ahead of its messages costs
    /// it its rate:
    ///
    /// - it keeps at most two chunks in flight (a ping-pong, a sparse
    ///   open-loop sender), or
    /// - it moved less this tick than its weighted share of the link among
    ///   the tenants with work (its payload plus each message's headers
    ///   and each 4 KiB packet's), and, where the loop's work is charged,
    ///   took less than its weighted share of the loop (a message-rate
    ///   tenant bound by the loop waits for the loop, which a smaller
    ///   budget does not help: it makes completions free room a chunk at
    ///   a time, more work for the loop). Such a tenant is entitled to all
    ///   it asks (the contract's demand: no weighted max-min share is below
    ///   the equal one), so its rate is set by its round trip, however many
    ///   messages it keeps outstanding; a stream 11 deep on 4 QPs of 16 B
    ///   WRITEs beside a 130 KB stream read 0.78 of its rate alone while
    ///   only the first kind was watched (random mix #11 of seed 3).
    ///
    /// A tenant at or above its share is bound by fair admission's deficit
    /// round robin, not by its latency, and is not watched.
    fn watched_tenant_hurt(&mut self, span_ns: u64, stats: &[TenantStats], n: usize) -> bool {
        let active = |s: &&TenantStats| s.backlogged_qps > 0 || s.completed > 0;
        let weights: u64 = stats.iter().take(n).filter(active).map(|s| s.weight.max(1) as u64).sum();
        let link_bytes = span_ns as u128 * self.loop_info.link_gbps as u128 / 8;
        let loop_ps = span_ns as u128 * 1000;
        let mut hurt = false;
        for (i, s) in stats.iter().enumerate().take(n) {
            let (w, all) = (s.weight.max(1) as u128, weights as u128);
            let below_share = weights > 0
                && (Self::wire_bytes(s) as u128) * all < link_bytes * w
                && (self.loop_ps(s) as u128) * all < loop_ps * w;
            let watched = below_share || Self::demand(s) <= 2 * self.chunk as u64;
            if !watched || s.completed < 4 || s.mean_latency_ns == 0 {
                continue;
            }
            let base = &mut self.base_latency[i];
            if *base == 0 || s.mean_latency_ns < *base {
                *base = s.mean_latency_ns;
            }
            hurt |= s.mean_latency_ns * 1000 > *base * self.params.hurt_permille as u64;
        }
        hurt
    }

    /// What a tenant's completions of the tick cost a charged dataplane
    /// loop, ps (0 for a free loop): a WQE per message and per chunk of
    /// its bytes with its zero-weight WRs, and a CQE per message, at the
    /// loop block's costs.
    fn loop_ps(&self, s: &TenantStats) -> u64 {
        let (info, p) = (&self.loop_info, &self.params);
        let chunks = s.bytes / self.chunk.max(1) as u64;
        let wqes = s.completed.saturating_add(chunks.saturating_mul(1 + p.zero_weight as u64));
        wqes.saturating_mul(info.wqe_ps as u64).saturating_add(s.completed.saturating_mul(info.cqe_ps as u64))
    }

    /// What a tenant's completions of the tick took of the link, bytes:
    /// their payload, the headers (and RETH) of each message, and those of
    /// each further 4 KiB packet.
    fn wire_bytes(s: &TenantStats) -> u64 {
        let per_packet = limits::PACKET_OVERHEAD_BYTES + limits::RETH_BYTES;
        s.bytes.saturating_add(s.completed.saturating_add(s.bytes / 4096).saturating_mul(per_packet))
    }

    /// The chunk for a loop of `info`'s costs: the smallest at least
    /// `chunk_bytes`, in KiB, whose WQEs (the chunk and its zero-weight
    /// WRs) cost the loop at most `loop_share_permille` of the chunk's time
    /// on the link: `(1 + zw) x wqe_ps <= share x chunk x 8 / link`. On the
    /// measured loop (19 ns a WQE) at 100 Gb/s and 10%: 5 KiB.
    fn chunk_for(&self, info: &LoopInfo) -> u32 {
        let p = &self.params;
        let wqes = 1 + p.zero_weight as u64;
        let need =
            (wqes * info.wqe_ps as u64 * info.link_gbps as u64).div_ceil(8 * p.loop_share_permille.max(1) as u64);
        let need = need.div_ceil(1024).saturating_mul(1024).min(limits::MAX_CHUNK as u64) as u32;
        need.max(p.chunk_bytes)
    }

    /// What a tenant would put in flight unconstrained, bytes: its QPs with
    /// work times their depth times its message size (plus the per-packet
    /// overhead the windows count), at least one message.
    fn demand(s: &TenantStats) -> u64 {
        let msg = (s.ewma_msg_bytes as u64).max(1);
        let per = msg + msg.div_ceil(4096).max(1) * limits::PACKET_OVERHEAD_BYTES;
        per.saturating_mul(s.backlogged_qps.max(1) as u64).saturating_mul(s.max_depth.max(1) as u64)
    }
}

impl Policy for FairShare {
    fn name(&self) -> &str {
        "fairshare"
    }

    fn on_request(&mut self, req: &RequestInfo, _plan: &TenantPlan) -> SplitPlan {
        let chunk = self.chunk;
        match req.op {
            // A READ request carries no payload on the requester's wire:
            // its QP's turn need not end after it. Its response is sent in
            // turns of one chunk each by the responder.
            RequestOp::Read if req.len > self.params.read_chunk_bytes as u64 => {
                SplitPlan { chunk_bytes: self.params.read_chunk_bytes, zero_weight_per_chunk: 0 }
            }
            RequestOp::Read => SplitPlan::WHOLE,
            // WRITEs and SENDs alike (ABI 1.4: a SEND larger than a chunk
            // goes by rendezvous where the receiver's dataplane advertised
            // its RECV, and whole, with its zero-weight WR, otherwise).
            _ if req.len > chunk as u64 => {
                self.since_zero_weight[Self::qp_slot(req)] = 0;
                SplitPlan { chunk_bytes: chunk, zero_weight_per_chunk: self.params.zero_weight }
            }
            // Whole messages: a zero-weight WR after the one that brings
            // the QP's bytes since its last to a chunk, so that no NIC turn
            // of any QP carries much more than a chunk, whatever the
            // message size and post list.
            _ => {
                let slot = &mut self.since_zero_weight[Self::qp_slot(req)];
                *slot = slot.saturating_add(req.len as u32);
                if *slot >= chunk {
                    *slot = 0;
                    SplitPlan { chunk_bytes: chunk, zero_weight_per_chunk: self.params.zero_weight }
                } else {
                    SplitPlan::WHOLE
                }
            }
        }
    }

    fn on_tick(&mut self, now_ns: u64, stats: &[TenantStats], plans: &mut [TenantPlan]) {
        let n = stats.len().min(plans.len()).min(MAX_TENANTS);
        let span = match self.last_tick_ns.replace(now_ns) {
            Some(last) => now_ns.saturating_sub(last),
            None => self.params.tick_ns,
        };
        let hurt = self.watched_tenant_hurt(span, stats, n);
        let mut kib = [0u16; 2];
        for (dir, budget_kib) in [self.params.window_kib, self.params.read_window_kib].into_iter().enumerate() {
            // The budget: as large as configured while no watched tenant
            // waits longer than it did at its best; shrunk by 1/8 per tick
            // while one does (down to the floor), grown back over
            // `grow_ticks` ticks.
            let max = budget_kib as u64 * 1024;
            let floor = max * self.params.floor_permille as u64 / 1000;
            let b = &mut self.budget[dir];
            if *b == 0 {
                *b = floor;
            }
            let grow = (max / self.params.grow_ticks as u64).max(1);
            *b = if hurt { (*b * 7 / 8).max(floor) } else { (*b + grow).min(max) };
            kib[dir] = b.div_ceil(1024).clamp(1, u16::MAX as u64) as u16;
        }
        for p in plans.iter_mut().take(n) {
            *p = TenantPlan {
                split: SplitPlan { chunk_bytes: self.chunk, zero_weight_per_chunk: self.params.zero_weight },
                split_threshold: self.chunk as u64 + 1,
                window_kib: kib[0],
                read_window_kib: kib[1],
                ..TenantPlan::PASSTHROUGH
            };
        }
    }

    fn on_loop(&mut self, info: &LoopInfo) {
        self.loop_info = *info;
        self.chunk = self.chunk_for(info);
    }

    fn tick_interval_ns(&self) -> u64 {
        self.params.tick_ns
    }

    fn zero_weight_op(&self) -> ZeroWeightOp {
        self.params.zero_weight_op
    }

    fn set_param(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        let p = &mut self.params;
        match key {
            "window_kib" => p.window_kib = parse_param_min(value, 1u32)?.min(u16::MAX as u32),
            "read_window_kib" => p.read_window_kib = parse_param_min(value, 1u32)?.min(u16::MAX as u32),
            "chunk_bytes" | "read_chunk_bytes" => {
                let v: u32 = parse_param_min(value, limits::MIN_CHUNK)?;
                if v > limits::MAX_CHUNK || !v.is_multiple_of(64) {
                    return Err(ParamError::BadValue);
                }
                if key == "chunk_bytes" {
                    p.chunk_bytes = v;
                } else {
                    p.read_chunk_bytes = v;
                }
            }
            "zero_weight" => {
                p.zero_weight = parse_param_min(value, 0u32)?;
                if p.zero_weight > limits::MAX_ZERO_WEIGHT {
                    return Err(ParamError::BadValue);
                }
            }
            "zero_weight_op" => {
                p.zero_weight_op = match value.trim() {
                    "nop" => ZeroWeightOp::Nop,
                    "wait" => ZeroWeightOp::Wait,
                    _ => return Err(ParamError::BadValue),
                }
            }
            "loop_share_permille" => p.loop_share_permille = parse_param_min(value, 1u32)?.min(1000),
            "tick_ns" => p.tick_ns = parse_param_min(value, 10_000u64)?,
            "floor_permille" => p.floor_permille = parse_param_min(value, 1u32)?.min(1000),
            "hurt_permille" => p.hurt_permille = parse_param_min(value, 1000u32)?,
            "grow_ticks" => p.grow_ticks = parse_param_min(value, 1u32)?,
            _ => return Err(ParamError::UnknownKey),
        }
        self.chunk = self.chunk_for(&self.loop_info);
        Ok(())
    }
}

export_policy!(FairShare);

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse(latency_ns: u64) -> TenantStats {
        TenantStats {
            qps: 1,
            backlogged_qps: 1,
            max_depth: 1,
            ewma_msg_bytes: 16.0,
            completed: 100,
            mean_latency_ns: latency_ns,
            weight: 1,
            ..TenantStats::ZERO
        }
    }

    #[test]
    fn the_budget_shrinks_while_a_sparse_tenant_waits_and_grows_back() {
        let mut p = FairShare::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 1];
        p.on_tick(0, &[sparse(1000)], &mut plans);
        let first = plans[0].window_kib;
        for _ in 0..20 {
            p.on_tick(0, &[sparse(1000)], &mut plans);
        }
        assert_eq!(plans[0].window_kib as u32, p.params.window_kib);
        assert!(first < plans[0].window_kib);
        for _ in 0..20 {
            p.on_tick(0, &[sparse(2000)], &mut plans);
        }
        let floor = p.params.window_kib * p.params.floor_permille / 1000;
        assert!(plans[0].window_kib as u32 <= floor + 1, "{}", plans[0].window_kib);
    }

    #[test]
    fn many_bulk_tenants_do_not_hold_the_budget_up_while_a_sparse_tenant_waits() {
        // Twenty bulk tenants beside a ping-pong: the budget still shrinks
        // to its floor (the wire's floor is the dataplane's pipeline
        // product, whatever the tenant count).
        let mut p = FairShare::default();
        let bulk = TenantStats { ewma_msg_bytes: 262144.0, mean_latency_ns: 0, completed: 0, ..sparse(0) };
        let mut stats = vec![bulk; 21];
        stats[0] = sparse(1000);
        let mut plans = vec![TenantPlan::PASSTHROUGH; 21];
        p.on_tick(0, &stats, &mut plans);
        stats[0] = sparse(5000);
        for _ in 0..40 {
            p.on_tick(0, &stats, &mut plans);
        }
        let floor = |kib: u32| (kib * p.params.floor_permille).div_ceil(1000);
        assert_eq!(plans[0].window_kib as u32, floor(p.params.window_kib));
        assert_eq!(plans[0].read_window_kib as u32, floor(p.params.read_window_kib));
        assert!(plans.iter().all(|q| q.window_kib == plans[0].window_kib), "one budget for all");
    }

    #[test]
    fn a_deep_tenant_below_its_share_is_watched_and_one_at_its_share_is_not() {
        // 50 us ticks on a 100 Gb/s link: 625 KB of the link per tick, so
        // 312 KB each for two tenants of weight 1.
        let tick = 50_000u64;
        let link = LoopInfo { link_gbps: 100, ..LoopInfo::UNKNOWN };
        // 16 B WRITEs 32 deep on 4 QPs (more than two chunks in flight,
        // even the 5 KiB ones of a charged loop), 1000 messages a tick:
        // about 100 KB of the link.
        let deep_small = |latency_ns| TenantStats {
            backlogged_qps: 4,
            max_depth: 32,
            completed: 1000,
            bytes: 16_000,
            ..sparse(latency_ns)
        };
        // A stream that moved 500 KB of payload in the tick.
        let bulk = |latency_ns| TenantStats {
            ewma_msg_bytes: 131_072.0,
            max_depth: 1,
            completed: 4,
            bytes: 500_000,
            ..sparse(latency_ns)
        };
        let run_on = |link: LoopInfo, tenants: &dyn Fn(u64) -> [TenantStats; 2]| {
            let mut p = FairShare::default();
            p.on_loop(&link);
            let mut plans = [TenantPlan::PASSTHROUGH; 2];
            let mut now = 0;
            for latency in [1650; 40].into_iter().chain([2100; 40]) {
                now += tick;
                p.on_tick(now, &tenants(latency), &mut plans);
            }
            plans[0].window_kib as u32
        };
        let run = |tenants: &dyn Fn(u64) -> [TenantStats; 2]| run_on(link, tenants);
        let floor = (FairShareParams::default().window_kib * FairShareParams::default().floor_permille).div_ceil(1000);
        // The deep small stream's latency rises: it is below its share,
        // so the budget shrinks to its floor.
        assert_eq!(run(&|l| [deep_small(l), bulk(60_000)]), floor);
        // The stream's own latency rises: it is above its share (bound by
        // fair admission, not by its latency), so the budget stays.
        assert_eq!(run(&|l| [deep_small(1650), bulk(l * 40)]), FairShareParams::default().window_kib);
        // With the loop's work charged (19.1 ns a WQE, 99.2 ns a CQE), its
        // 1000 messages take 118 us of the loop a tick: more than its
        // share of the loop, which its latency then waits for, and which a
        // smaller budget does not help. It is not watched.
        let charged = LoopInfo { wqe_ps: 19_111, cqe_ps: 99_176, ..link };
        assert_eq!(run_on(charged, &|l| [deep_small(l), bulk(60_000)]), FairShareParams::default().window_kib);
    }

    #[test]
    fn a_module_swapped_in_mid_run_counts_its_first_tick_as_one_interval() {
        // Two streams, each above its half of the link in a tick (400 KB of
        // the 625 KB a 50 us tick carries at 100 Gb/s), with more than two
        // chunks in flight: neither is watched. A module loaded 10 s into
        // the run must judge its first tick's statistics over one tick, not
        // over the 10 s since time 0 (where both would read as far below
        // their share, and be watched).
        let mut p = FairShare::new(FairShareParams { tick_ns: 50_000, ..FairShareParams::default() });
        p.on_loop(&LoopInfo { link_gbps: 100, ..LoopInfo::UNKNOWN });
        let stream =
            TenantStats { ewma_msg_bytes: 50_000.0, max_depth: 4, completed: 8, bytes: 400_000, ..sparse(60_000) };
        let mut plans = [TenantPlan::PASSTHROUGH; 2];
        p.on_tick(10_000_000_000, &[stream, stream], &mut plans);
        assert_eq!(p.base_latency[..2], [0, 0], "neither stream is watched on the first tick");
    }

    #[test]
    fn every_tenant_is_split_into_chunks_alike() {
        let mut p = FairShare::default();
        let plan = TenantPlan::PASSTHROUGH;
        let req = |qp, len, op| RequestInfo { tenant: 0, qp, len, op, depth: 1 };
        let big = p.on_request(&req(0, 1 << 20, RequestOp::Write), &plan);
        assert_eq!(big, SplitPlan { chunk_bytes: p.params.chunk_bytes, zero_weight_per_chunk: 1 });
        // A READ's chunks need no zero-weight WR (the request carries no payload).
        let read = p.on_request(&req(0, 1 << 20, RequestOp::Read), &plan);
        assert_eq!(read, SplitPlan { chunk_bytes: p.params.read_chunk_bytes, zero_weight_per_chunk: 0 });
        // A large SEND is split like a WRITE (by rendezvous, where the
        // receiver allows); small ones earn zero-weight WRs per chunk of
        // bytes on their QP, as small WRITEs do.
        let send = p.on_request(&req(0, 1 << 20, RequestOp::Send), &plan);
        assert_eq!(send, SplitPlan { chunk_bytes: p.params.chunk_bytes, zero_weight_per_chunk: 1 });
        let small = p.on_request(&req(1, 16, RequestOp::Send), &plan);
        assert_eq!(small, SplitPlan::WHOLE);
    }

    #[test]
    fn whole_messages_get_a_zero_weight_wr_per_chunk_of_bytes_on_their_qp() {
        let mut p = FairShare::default();
        let plan = TenantPlan::PASSTHROUGH;
        let req = |qp| RequestInfo { tenant: 3, qp, len: 1000, op: RequestOp::Write, depth: 1 };
        let per_chunk = p.params.chunk_bytes.div_ceil(1000) as usize;
        let plans: Vec<SplitPlan> = (0..2 * per_chunk).map(|_| p.on_request(&req(0), &plan)).collect();
        let zero_weight_at: Vec<usize> =
            plans.iter().enumerate().filter(|(_, s)| s.zero_weight_per_chunk > 0).map(|(i, _)| i + 1).collect();
        assert_eq!(zero_weight_at, vec![per_chunk, 2 * per_chunk]);
        // Another QP of the tenant counts its own bytes.
        assert_eq!(p.on_request(&req(1), &plan), SplitPlan::WHOLE);
    }

    #[test]
    fn zero_weight_wrs_are_nops_unless_asked_for_waits() {
        let mut p = FairShare::default();
        assert_eq!(p.zero_weight_op(), ZeroWeightOp::Nop);
        assert_eq!(p.set_param("zero_weight_op", " wait "), Ok(()));
        assert_eq!(p.zero_weight_op(), ZeroWeightOp::Wait);
        assert_eq!(p.set_param("zero_weight_op", "nop"), Ok(()));
        assert_eq!(p.zero_weight_op(), ZeroWeightOp::Nop);
        assert_eq!(p.set_param("zero_weight_op", "send_enable"), Err(ParamError::BadValue));
    }

    #[test]
    fn the_chunk_grows_to_what_the_loop_can_post() {
        let mut p = FairShare::default();
        let mut plans = [TenantPlan::PASSTHROUGH; 1];
        let chunk_after = |p: &mut FairShare, info: LoopInfo, plans: &mut [TenantPlan]| {
            p.on_loop(&info);
            p.on_tick(0, &[sparse(1000)], plans);
            plans[0].split.chunk_bytes
        };
        // A free loop: the configured chunk.
        assert_eq!(chunk_after(&mut p, LoopInfo::UNKNOWN, &mut plans), 2048);
        // The measured loop, 19.1 ns a WQE at 100 Gb/s: a chunk and its NOP
        // cost 38.2 ns, 10% of 382 ns on the link, 4.8 KB: 5 KiB.
        let measured = LoopInfo { busy_permille: 500, wqe_ps: 19_111, cqe_ps: 99_176, link_gbps: 100 };
        assert_eq!(chunk_after(&mut p, measured, &mut plans), 5 * 1024);
        assert_eq!(plans[0].split_threshold, 5 * 1024 + 1);
        // Messages are split, and whole ones earn zero-weight WRs, by it.
        let req = RequestInfo { tenant: 0, qp: 0, len: 1 << 20, op: RequestOp::Write, depth: 1 };
        assert_eq!(p.on_request(&req, &plans[0]).chunk_bytes, 5 * 1024);
        // Half the share: twice the chunk.
        assert_eq!(p.set_param("loop_share_permille", "50"), Ok(()));
        assert_eq!(chunk_after(&mut p, measured, &mut plans), 10 * 1024);
        // Never below the configured chunk.
        assert_eq!(p.set_param("chunk_bytes", "16384"), Ok(()));
        assert_eq!(chunk_after(&mut p, measured, &mut plans), 16384);
    }
}
