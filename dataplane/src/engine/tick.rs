//! The policy tick: per-tenant statistics handed to the policy, its plans
//! and rate limits applied, and lost hand-offs rescued. The tenants whose
//! plan or rate limit changed are marked for every phase of the round
//! (`ready.rs`).

use super::*;

impl<R: Rnic> Dataplane<R> {
    /// Releases hand-offs that a failed QP took with it. For a tenant that
    /// may have lost releases: if one of its healthy QPs has been blocked on
    /// a hand-off count the PCQ has not reached, with no hand-off completing
    /// for a whole tick, the loop releases one hand-off itself (per tick,
    /// at most as many as may have been lost). A slow but healthy stream can
    /// only be mistaken for a stall while such a loss is outstanding, and
    /// then costs one early hand-off, never a stranded QP.
    pub(super) fn rescue_stalls(&mut self) {
        for t in 0..self.tenants.len() {
            if self.tenants[t].lost_releases == 0 {
                continue;
            }
            let ts = &mut self.tenants[t];
            let Some(pcq) = ts.pcq.as_mut() else { continue };
            let Ok(done) = pcq.completed(&mut self.nic) else { continue };
            let blocked = ts
                .qps
                .iter()
                .filter(|&&qi| !self.qps[qi].failed)
                .filter_map(|&qi| self.qps[qi].waiting_on)
                .any(|k| k > done);
            if !blocked {
                ts.stalled_at = None;
                continue;
            }
            if ts.stalled_at != Some(done) {
                ts.stalled_at = Some(done);
                continue;
            }
            if pcq.rescue(&mut self.nic, ts.pd, self.zw_cq).is_ok() {
                ts.lost_releases -= 1;
                ts.stalled_at = None;
                self.counters.rescued_handoffs += 1;
            }
        }
    }

    pub(super) fn tick(&mut self, now: u64) {
        self.counters.ticks += 1;
        let traffic = self.nic.port_traffic();
        self.pipeline.tick(now, self.link_bytes_per_ns, traffic);
        self.rescue_stalls();
        self.next_tick_ns = now + self.policy.tick_interval_ns();
        let mut stats = std::mem::take(&mut self.scratch.stats);
        stats.clear();
        // One walk of the tenants before the policy and one after: at
        // thousands of tenants each walk brings every tenant's state in.
        for i in 0..self.tenants.len() {
            let ts = &self.tenants[i];
            let (backlogged, depth_now) = ts.qps.iter().fold((0u32, 0u32), |(n, most), &qi| {
                let d = self.qps[qi].depth();
                (n + (d > 0) as u32, most.max(d))
            });
            stats.push(TenantStats {
                tenant: i as u32,
                qps: ts.qps.len() as u32,
                backlogged_qps: backlogged,
                max_depth: ts.tick.max_depth.max(depth_now),
                ewma_msg_bytes: ts.tick.ewma,
                max_msg_bytes: ts.tick.max_msg,
                completed: ts.tick.completed,
                bytes: ts.tick.bytes,
                mean_latency_ns: ts.tick.lat_sum_ns.checked_div(ts.tick.completed).unwrap_or(0),
                weight: ts.weight,
                p99_latency_ns: ts.tick.tail.p99_ns(),
            });
            // Rotation pointers advance under the plans they ran under.
            self.settle_rr(i);
        }
        let (mut old_plans, mut old_pacing) = std::mem::take(&mut self.before);
        old_plans.clone_from(&self.plans);
        old_pacing.clone_from(&self.pacing);
        let timer = self.timed.then(std::time::Instant::now);
        let mut plans = std::mem::take(&mut self.plans);
        let info = self.loop_info(now);
        self.policy.on_loop(&info);
        self.policy.on_tick(now, &stats, &mut plans);
        self.plans = plans;
        self.scratch.stats = stats;
        self.plans_changed();
        let mut pacing = std::mem::take(&mut self.pacing);
        self.policy.on_pacing(now, &mut pacing);
        if let Some(t0) = timer {
            self.counters.policy_ns += t0.elapsed().as_nanos() as u64;
        }
        self.pacing = pacing;
        for t in 0..self.tenants.len() {
            if let Some(&p) = self.pacing.get(t) {
                let resumed = self.tenants[t].bucket.paused() && p.paused == 0;
                self.tenants[t].bucket.set(p, now);
                if resumed {
                    self.restart_quanta(t, now);
                }
                if p.rate_bytes_per_s > 0 {
                    self.rated.insert(t);
                } else {
                    self.rated.remove(t);
                }
            }
            if old_plans.get(t) != self.plans.get(t) || old_pacing.get(t) != self.pacing.get(t) {
                self.mark_tenant(t);
            }
            self.tenants[t].tick.restart();
        }
        self.before = (old_plans, old_pacing);
        self.space_ticks(now);
    }

    /// Puts the next tick off while the tick just run would take more
    /// than [`TICK_LOOP_SHARE`] of the loop's time at the policy's
    /// interval. A tick walks every tenant (its statistics in, its plan
    /// and pacing out): at a thousand tenants `fairshare`'s tick, every
    /// 50 us, took some 40 us of the loop's time on the reference machine
    /// (`benches/scale.rs`), which every tenant's traffic then waited
    /// for. The tick's cost is what the cost model charges for it when
    /// the loop is charged (so virtual time stays deterministic), and
    /// otherwise the NIC's clock across it: wall time on a NIC that runs
    /// in real time, none in free virtual time, where ticks keep the
    /// policy's interval.
    fn space_ticks(&mut self, now: u64) {
        let took_ns = if self.clock.charged {
            let tick = RoundWork {
                policy_calls: 1,
                ticks: 1,
                tick_tenants: self.tenants.len() as u64,
                wasm: self.policy.is_wasm(),
                ..RoundWork::default()
            };
            self.cfg.loop_cost.work_ps(&tick) / 1000
        } else {
            self.nic.clock_ns().saturating_sub(now)
        };
        let spaced = now.saturating_add(took_ns.saturating_mul(TICK_LOOP_SHARE));
        if spaced > self.next_tick_ns {
            self.next_tick_ns = spaced;
            self.counters.ticks_put_off += 1;
        }
    }
}

/// A tick may take at most one part in this many of the loop's time
/// ([`Dataplane::space_ticks`]): 5%.
const TICK_LOOP_SHARE: u64 = 20;
