//! Fair admission's index of the windowed tenants with data to admit
//! (`admission.rs`), kept per direction (WRITE / SEND, READ) as tenants'
//! data comes and goes, so that a round of admission costs in proportion
//! to what it admits rather than to the tenants waiting for room.
//!
//! What a round needs of the tenants with data, and where it finds it:
//! - their weights summed (the reservations are shares of the budget
//!   among them): kept as a sum;
//! - who is behind the others in bytes admitted per unit of weight,
//!   least first, and the lead: an ordered set;
//! - who may post with the budget full, within its reservation or as a
//!   sparse tenant: a set of the sparse ones, and the others ordered by
//!   what they would hold with their next WQE per unit of weight, so the
//!   round reads the prefix within the reservation;
//! - the round robin's order: a bitset walked from where the last round
//!   stopped.
//!
//! The dataplane refreshes a tenant's entry on the events that change
//! what it has to admit (the `admit` ready set: arrivals, completions,
//! activations, posts, plan changes) and after each visit that admitted
//! for it. An entry may be stale within a round (a tenant that just
//! posted its last data still counts): a visit checks the tenant itself,
//! so staleness costs a visit, never a wrong admission.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::ready::IndexSet;

/// What a refresh learns of a tenant with data to admit in one direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct DirFacts {
    /// Its bytes admitted per unit of weight there.
    pub admitted: f64,
    /// What it would hold in flight there with its next data WQE, per
    /// unit of weight; `None` beyond any reservation (it waits for room).
    pub need: Option<f64>,
    /// Nothing in flight there and at most one message waiting: it may
    /// always post.
    pub sparse: bool,
}

/// One tenant's entry in one direction: its keys, to find it again.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct DirEntry {
    member: bool,
    admitted: u64,
    need: Option<u64>,
    sparse: bool,
}

/// One tenant's entry.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The weight counted in the sums.
    weight: u64,
    /// With data to admit in either direction.
    any: bool,
    dirs: [DirEntry; 2],
}

/// The tenants with data to admit in one direction.
#[derive(Debug, Default)]
pub(super) struct DirIndex {
    /// The members, for the round robin.
    pub with_data: IndexSet,
    /// The members' weights, summed.
    pub weights: u64,
    /// The members by bytes admitted per unit of weight.
    by_admitted: BTreeSet<(u64, u32)>,
    /// The members that are not sparse and may post within a
    /// reservation, by what they would hold with their next WQE per unit
    /// of weight.
    by_need: BTreeSet<(u64, u32)>,
    /// The sparse members.
    sparse: IndexSet,
}

/// Fair admission's index (see the module comment).
#[derive(Debug, Default)]
pub(super) struct FairIndex {
    /// Per direction: 0 WRITE / SEND, 1 READ.
    pub dirs: [DirIndex; 2],
    /// The weights of the tenants with data in either direction (a READ
    /// request's reservation on the requester's side is a share among
    /// them).
    pub any_weights: u64,
    entries: Vec<Entry>,
}

/// An `f64` as a `u64` in the same order (for the ordered sets).
fn key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// The `f64` a [`key`] stands for.
fn unkey(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

impl FairIndex {
    /// Sets tenant `t`'s entry: its weight, and per direction what it has
    /// to admit there (`None`: nothing).
    pub fn set(&mut self, t: usize, weight: u64, facts: [Option<DirFacts>; 2]) {
        if t >= self.entries.len() {
            self.entries.resize(t + 1, Entry::default());
        }
        let old = self.entries[t];
        let id = t as u32;
        let any = facts.iter().any(Option::is_some);
        if old.any {
            self.any_weights -= old.weight;
        }
        if any {
            self.any_weights += weight;
        }
        let mut entry = Entry { weight, any, dirs: [DirEntry::default(); 2] };
        for (dir, f) in facts.into_iter().enumerate() {
            let d = &mut self.dirs[dir];
            let was = old.dirs[dir];
            let now = f.map_or(DirEntry::default(), |f| DirEntry {
                member: true,
                admitted: key(f.admitted),
                need: if f.sparse { None } else { f.need.map(key) },
                sparse: f.sparse,
            });
            entry.dirs[dir] = now;
            if was.member {
                d.weights -= old.weight;
            }
            if now.member {
                d.weights += weight;
            }
            if was == now {
                continue;
            }
            if was.member != now.member {
                if now.member {
                    d.with_data.insert(t);
                } else {
                    d.with_data.remove(t);
                }
            }
            if (was.member, was.admitted) != (now.member, now.admitted) {
                if was.member {
                    d.by_admitted.remove(&(was.admitted, id));
                }
                if now.member {
                    d.by_admitted.insert((now.admitted, id));
                }
            }
            if was.sparse != now.sparse {
                if now.sparse {
                    d.sparse.insert(t);
                } else {
                    d.sparse.remove(t);
                }
            }
            if was.need != now.need {
                if let Some(k) = was.need {
                    d.by_need.remove(&(k, id));
                }
                if let Some(k) = now.need {
                    d.by_need.insert((k, id));
                }
            }
        }
        self.entries[t] = entry;
    }

    /// Tenant `t`'s bytes admitted per unit of weight in `dir` are now
    /// `admitted` (nothing if it is not a member there).
    pub fn retag(&mut self, t: usize, dir: usize, admitted: f64) {
        let Some(e) = self.entries.get_mut(t).map(|e| &mut e.dirs[dir]) else { return };
        if !e.member {
            return;
        }
        let k = key(admitted);
        if k != e.admitted {
            let d = &mut self.dirs[dir];
            d.by_admitted.remove(&(e.admitted, t as u32));
            d.by_admitted.insert((k, t as u32));
            e.admitted = k;
        }
    }

    /// Whether `t` has data to admit in `dir`, as far as the index knows.
    pub fn member(&self, t: usize, dir: usize) -> bool {
        self.entries.get(t).is_some_and(|e| e.dirs[dir].member)
    }

    /// The most bytes admitted per unit of weight among the members of
    /// `dir`.
    pub fn lead(&self, dir: usize) -> Option<f64> {
        self.dirs[dir].by_admitted.last().map(|&(k, _)| unkey(k))
    }

    /// The member of `dir` with the least bytes admitted per unit of
    /// weight after `after` (a position this returned), and its position.
    pub fn next_behind(&self, dir: usize, after: Option<(u64, u32)>) -> Option<(f64, usize, (u64, u32))> {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let &(k, t) = self.dirs[dir].by_admitted.range((lower, Bound::Unbounded)).next()?;
        Some((unkey(k), t as usize, (k, t)))
    }

    /// The members of `dir` that may post within a reservation of
    /// `reserved` bytes per unit of weight, or as sparse tenants (a
    /// superset: the caller checks each), into `out`.
    pub fn may_post_unbudgeted(&self, dir: usize, reserved: f64, out: &mut Vec<usize>) {
        let d = &self.dirs[dir];
        let mut i = 0;
        while let Some(t) = d.sparse.next_from(i) {
            out.push(t);
            i = t + 1;
        }
        let limit = key(reserved + 1.0);
        out.extend(d.by_need.range(..=(limit, u32::MAX)).map(|&(_, t)| t as usize));
    }

    /// The weight the sums count for `t` in `dir` (0 if not a member).
    #[cfg(test)]
    fn weight_in(&self, t: usize, dir: usize) -> u64 {
        self.entries.get(t).filter(|e| e.dirs[dir].member).map_or(0, |e| e.weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(admitted: f64, need: f64, sparse: bool) -> Option<DirFacts> {
        Some(DirFacts { admitted, need: Some(need), sparse })
    }

    #[test]
    fn keys_keep_the_order_of_their_floats() {
        let xs = [-1e9, -3.5, -0.0, 0.0, 1e-9, 2.0, 16384.0, 1e12];
        for w in xs.windows(2) {
            assert!(key(w[0]) <= key(w[1]), "{} {}", w[0], w[1]);
            assert_eq!(unkey(key(w[0])), w[0]);
        }
    }

    #[test]
    fn the_sums_and_orders_follow_the_entries() {
        let mut ix = FairIndex::default();
        ix.set(3, 2, [facts(100.0, 9000.0, false), None]);
        ix.set(1, 1, [facts(50.0, 0.0, true), facts(7.0, 64.0, false)]);
        ix.set(7, 1, [facts(300.0, 20.0, false), None]);
        assert_eq!((ix.dirs[0].weights, ix.dirs[1].weights, ix.any_weights), (4, 1, 4));
        assert_eq!(ix.lead(0), Some(300.0));
        let first = ix.next_behind(0, None).map(|(a, t, _)| (a, t));
        assert_eq!(first, Some((50.0, 1)));
        ix.retag(1, 0, 500.0);
        let order: Vec<usize> =
            std::iter::successors(ix.next_behind(0, None), |&(_, _, at)| ix.next_behind(0, Some(at)))
                .map(|(_, t, _)| t)
                .collect();
        assert_eq!(order, vec![3, 7, 1]);
        let mut out = Vec::new();
        ix.may_post_unbudgeted(0, 100.0, &mut out);
        assert_eq!(out, vec![1, 7], "the sparse tenant, then the one within 100 B per unit of weight");
        // Leaving a direction takes the tenant out of its sums and sets.
        ix.set(1, 1, [None, facts(7.0, 64.0, false)]);
        assert_eq!((ix.dirs[0].weights, ix.weight_in(1, 0), ix.any_weights), (3, 0, 4));
        assert!(!ix.member(1, 0) && ix.member(1, 1));
        ix.set(1, 1, [None, None]);
        ix.set(3, 2, [None, None]);
        ix.set(7, 1, [None, None]);
        assert_eq!((ix.dirs[0].weights, ix.dirs[1].weights, ix.any_weights), (0, 0, 0));
        assert_eq!(ix.lead(0), None);
    }
}
