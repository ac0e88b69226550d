//! `perf`'s incremental tick (ABI 1.9, `Policy::on_tick_changed`): at a
//! tick that is not a classification or allowed-set period, a tenant's
//! decisions follow from its own record, its own state and three things
//! every tenant shares (whether a sensitive tenant is active, the
//! backlogged bandwidth tenants, the time slice). So the tick visits only
//! the tenants whose record or plan changed and those whose classification
//! count started again at the last tick, provided none of them changes
//! what they count for in those shared things and the slice stays; then
//! every other tenant's plan and pacing are what the whole tick would
//! write again. Otherwise it runs the whole tick. Either way the plans,
//! the pacing and the policy's state come out as [`Policy::on_tick`]'s
//! (`tests` below compare the two on random ticks).

use super::*;

/// A set of tenant indices below [`MAX_TENANTS`], as bits.
#[derive(Debug, Clone)]
pub(super) struct TenantSet([u64; MAX_TENANTS / 64]);

impl TenantSet {
    const EMPTY: TenantSet = TenantSet([0; MAX_TENANTS / 64]);

    /// The words that hold tenants below `n`.
    fn words(n: usize) -> usize {
        n.div_ceil(64).min(MAX_TENANTS / 64)
    }

    /// Empties the set, which holds no tenant from `n` on.
    pub(super) fn clear_below(&mut self, n: usize) {
        self.0[..Self::words(n)].fill(0);
    }

    pub(super) fn insert(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    /// The members below `n`, in increasing order.
    fn iter_below(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        self.0[..Self::words(n)].iter().enumerate().flat_map(|(k, &w)| {
            let mut w = w;
            core::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    k * 64 + b
                })
            })
        })
    }
}

/// What a tenant counts for in the decisions every tenant shares.
const SENSITIVE: u8 = 1;
const BANDWIDTH: u8 = 2;
const ACTIVE: u8 = 4;

/// What the last tick decided from.
#[derive(Debug, Clone)]
pub(super) struct LastTick {
    /// The tenants whose classification count the last tick started again
    /// (their next record is news to it, changed or not).
    pub(super) fresh: TenantSet,
    /// Per tenant, what it counted for ([`SENSITIVE`], [`BANDWIDTH`],
    /// [`ACTIVE`]), kept as the whole tick decides it.
    pub(super) flags: [u8; MAX_TENANTS],
    /// Whether a sensitive tenant was active, and the backlogged
    /// bandwidth tenants.
    sensitive: bool,
    bandwidth: usize,
    /// Tenants in the tick.
    tenants: usize,
    /// The time slice and its owner, where slicing applied.
    slice: Option<usize>,
    owner: Option<usize>,
    /// The parameters it ran under (`None`: no tick yet).
    params: Option<PerfParams>,
    /// The tenants the incremental tick visits (kept: it is large).
    visit: TenantSet,
}

impl LastTick {
    pub(super) const fn new() -> Self {
        LastTick {
            fresh: TenantSet::EMPTY,
            flags: [0; MAX_TENANTS],
            sensitive: false,
            bandwidth: 0,
            tenants: 0,
            slice: None,
            owner: None,
            params: None,
            visit: TenantSet::EMPTY,
        }
    }
}

/// What tenant `s` of class `class` counts for.
pub(super) fn flags_of(class: TenantClass, s: &TenantStats) -> u8 {
    let mut f = 0;
    if is_sensitive(class) && active(s) {
        f |= SENSITIVE;
    }
    if class == TenantClass::Bandwidth && s.backlogged_qps > 0 {
        f |= BANDWIDTH;
    }
    if active(s) {
        f |= ACTIVE;
    }
    f
}

impl Perf {
    /// The time slice, where slicing applies (see `slice_owner`).
    pub(super) fn slice_index(&self, now_ns: u64, sensitive: bool, bw: usize) -> Option<usize> {
        let p = &self.params;
        if !sensitive || bw as u64 <= p.slice_above as u64 || p.slice_ns == 0 {
            return None;
        }
        Some((now_ns / p.slice_ns) as usize % bw)
    }

    /// After a whole tick over `tenants` tenants: what it decided from
    /// (each tenant's flags were kept as it was decided).
    pub(super) fn remember(&mut self, now_ns: u64, tenants: usize, sensitive: bool, bw: usize, owner: Option<usize>) {
        self.last.sensitive = sensitive;
        self.last.bandwidth = bw;
        self.last.tenants = tenants;
        self.last.slice = self.slice_index(now_ns, sensitive, bw);
        self.last.owner = owner;
        self.last.params = Some(self.params);
    }

    /// The class tenant `i` (below [`MAX_TENANTS`]) would have after
    /// taking `s` in at a tick that is not a classification period.
    fn class_after(&self, i: usize, s: &TenantStats) -> TenantClass {
        match self.classes[i] {
            TenantClass::Unknown => {
                let mut seen = self.seen[i];
                seen.add(s);
                self.classify_seen(&seen).unwrap_or(TenantClass::Unknown)
            }
            c => c,
        }
    }

    /// The incremental tick; `false` (nothing done) where it would not
    /// decide what the whole tick decides.
    pub(super) fn tick_changed(
        &mut self,
        now_ns: u64,
        stats: &[TenantStats],
        changed: &[u32],
        plans: &mut [TenantPlan],
    ) -> bool {
        let n = stats.len();
        let periodic = now_ns >= self.next_classify_ns || now_ns >= self.next_allowed_ns;
        if !self.ticked || periodic || self.last.params != Some(self.params) || n != self.last.tenants {
            return false;
        }
        if n > MAX_TENANTS || plans.len() < n || changed.iter().any(|&i| i as usize >= n) {
            return false;
        }
        // Most tenants listed: the whole tick costs less than visiting
        // them with the check first, and decides the same.
        if changed.len() * 2 > n {
            return false;
        }
        // The tenants to visit: those listed, and those whose count started
        // again (a record it has not taken in yet, changed or not).
        let words = TenantSet::words(n);
        for k in 0..words {
            self.last.visit.0[k] = self.last.fresh.0[k];
        }
        changed.iter().for_each(|&i| self.last.visit.insert(i as usize));
        // Nobody may change what it counts for, nor the slice move on.
        let same = self
            .last
            .visit
            .iter_below(n)
            .all(|i| flags_of(self.class_after(i, &stats[i]), &stats[i]) == self.last.flags[i]);
        let sensitive = self.last.sensitive;
        if !same || self.slice_index(now_ns, sensitive, self.last.bandwidth) != self.last.slice {
            return false;
        }
        // As `classify_all` and `on_tick` would for these tenants; the
        // others' records are ones their counts already took in.
        self.last.fresh.clear_below(n);
        let owner = self.last.owner;
        let zero_weight = self.zero_weight_per_chunk(sensitive);
        for k in 0..words {
            let mut w = self.last.visit.0[k];
            while w != 0 {
                let i = k * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                self.seen[i].add(&stats[i]);
                if self.classes[i] == TenantClass::Unknown {
                    self.reclassify(i);
                }
                self.decide(i, &stats[i], zero_weight, owner, plans);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    /// Tenant `t`'s record of one of four kinds (bulk, ping-pong,
    /// message-rate, idle), with a counter `k` that changes it.
    fn record(t: u32, kind: u8, k: u64) -> TenantStats {
        match kind % 4 {
            0 => TenantStats { completed: k, ..fixtures::bulk(t, 1 + (k % 3) as u32, 1) },
            1 => TenantStats { completed: k, ..fixtures::ping(t, 0) },
            2 => TenantStats { max_depth: 64, qps: 2, backlogged_qps: 2, completed: k, ..fixtures::ping(t, 0) },
            _ => TenantStats { tenant: t, ..TenantStats::default() },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// On random ticks (tenants that change or not, change kind, ticks
        /// that cross classification and allowed-set periods, plans the
        /// host replaced), the incremental tick decides exactly what the
        /// whole tick decides, and keeps the same state.
        #[test]
        fn the_incremental_tick_decides_as_the_whole_tick(
            kinds in proptest::collection::vec(0u8..4, 1..12),
            steps in proptest::collection::vec((0u64..3_000_000, proptest::collection::vec((0usize..12, 0u8..8), 0..4)), 1..40),
        ) {
            let n = kinds.len();
            let mut kinds = kinds;
            let mut counts = vec![0u64; n];
            let (mut whole, mut part) = (Perf::default(), Perf::default());
            let (mut pw, mut pp) = (vec![TenantPlan::PASSTHROUGH; n], vec![TenantPlan::PASSTHROUGH; n]);
            let mut last: Option<(Vec<TenantStats>, Vec<TenantPlan>)> = None;
            let mut now = 0;
            for (dt, edits) in steps {
                now += dt;
                for (t, e) in edits {
                    let t = t % n;
                    match e {
                        0..=3 => kinds[t] = e,
                        4 => pp[t] = TenantPlan::PASSTHROUGH,
                        _ => counts[t] += 1,
                    }
                    pw[t] = pp[t];
                }
                let stats: Vec<TenantStats> = (0..n).map(|t| record(t as u32, kinds[t], counts[t])).collect();
                let changed: Vec<u32> = (0..n)
                    .filter(|&t| last.as_ref().is_none_or(|(s, p)| s[t] != stats[t] || p[t] != pp[t]))
                    .map(|t| t as u32)
                    .collect();
                whole.on_tick(now, &stats, &mut pw);
                part.on_tick_changed(now, &stats, &changed, &mut pp);
                prop_assert_eq!(&pw, &pp, "plans at {} ns", now);
                let (mut aw, mut ap) = (vec![Pacing::UNLIMITED; n], vec![Pacing::UNLIMITED; n]);
                whole.on_pacing(now, &mut aw);
                part.on_pacing(now, &mut ap);
                prop_assert_eq!(aw, ap, "pacing at {} ns", now);
                prop_assert_eq!(whole.classes[..n].to_vec(), part.classes[..n].to_vec());
                for t in 0..n {
                    let (a, b) = (whole.seen[t], part.seen[t]);
                    prop_assert_eq!((a.max_depth, a.max_msg, a.ewma.to_bits()), (b.max_depth, b.max_msg, b.ewma.to_bits()));
                }
                last = Some((stats, pp.clone()));
            }
        }
    }

    #[test]
    fn an_unchanged_tick_visits_nobody_and_a_change_of_class_runs_the_whole_tick() {
        let mut p = Perf::default();
        let mut stats: Vec<TenantStats> = (0..6).map(|t| fixtures::bulk(t, 1, 1)).collect();
        stats.push(fixtures::ping(6, 0));
        let mut plans = vec![TenantPlan::PASSTHROUGH; 7];
        p.on_tick(0, &stats, &mut plans);
        // The next tick: the fresh tenants (classified at the first) are
        // looked at again; then nothing changed and nobody is.
        assert!(p.tick_changed(1_000_000, &stats, &[], &mut plans));
        assert!(p.tick_changed(2_000_000, &stats, &[], &mut plans));
        assert_eq!(p.last.visit.iter_below(7).count(), 0, "nobody changed, nobody visited");
        // The ping-pong goes idle: it no longer counts as active and
        // sensitive, which every bandwidth tenant's plan follows.
        stats[6] = TenantStats { tenant: 6, ..TenantStats::default() };
        assert!(!p.tick_changed(3_000_000, &stats, &[6], &mut plans));
    }
}
