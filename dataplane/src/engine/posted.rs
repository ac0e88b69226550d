//! A QP's posted WQEs not yet retired, in sequence order, with what each
//! means to the dataplane and what it holds of its tenant's windows. A run
//! of consecutive hidden WQEs that hold the same (zero-weight WRs, control
//! WQEs, a message's equal chunks) is kept as one entry of 16 bytes with a
//! count, and a message's completion record apart: under PeRF a 16 KiB
//! chunk is followed by 16 zero-weight WRs, and a QP's send queue holds
//! up to 2048 WQEs, which one entry each would hold at 56 bytes.

use std::collections::VecDeque;

use super::qp::{Meta, WindowCharge};

/// What a run's WQEs mean (a [`Meta`] without its message record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hidden,
    Release,
    App,
}

/// One entry: `count` consecutive WQEs of one kind, each holding `charge`
/// (a count above 1 only for hidden WQEs).
#[derive(Debug, Clone, Copy)]
struct Run {
    count: u32,
    kind: Kind,
    charge: WindowCharge,
}

/// A message's completion record (a [`Meta::App`]'s fields).
#[derive(Debug, Clone, Copy)]
struct AppRecord {
    wr_id: u64,
    len: u32,
    posted_ns: u64,
}

impl AppRecord {
    fn meta(self) -> Meta {
        Meta::App { wr_id: self.wr_id, len: self.len, posted_ns: self.posted_ns }
    }
}

/// The ledger (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Posted {
    runs: VecDeque<Run>,
    /// The records of the [`Kind::App`] WQEs, in order.
    apps: VecDeque<AppRecord>,
    /// The oldest WQE's sequence number (the runs' WQEs follow it).
    front: u64,
    /// WQEs in all runs.
    wqes: u64,
}

impl Posted {
    /// WQEs posted and not retired.
    pub(crate) fn len(&self) -> u64 {
        self.wqes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.wqes == 0
    }

    /// The oldest WQE's sequence number.
    pub(crate) fn front_seq(&self) -> Option<u64> {
        (self.wqes > 0).then_some(self.front)
    }

    /// Records WQE `seq`, the next after the last recorded (the first
    /// after an empty ledger may start anywhere).
    #[inline]
    pub(crate) fn push(&mut self, seq: u64, meta: Meta, charge: WindowCharge) {
        if self.wqes == 0 {
            self.front = seq;
        }
        debug_assert_eq!(seq, self.front + self.wqes, "WQEs are recorded in sequence");
        self.wqes += 1;
        let kind = match meta {
            Meta::Hidden => Kind::Hidden,
            Meta::Release => Kind::Release,
            Meta::App { wr_id, len, posted_ns } => {
                self.apps.push_back(AppRecord { wr_id, len, posted_ns });
                Kind::App
            }
        };
        if let Some(last) = self.runs.back_mut() {
            if kind == Kind::Hidden && last.kind == Kind::Hidden && last.charge == charge && last.count < u32::MAX {
                last.count += 1;
                return;
            }
        }
        self.runs.push_back(Run { count: 1, kind, charge });
    }

    /// Retires the oldest WQE: its sequence number, meaning and charge.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<(u64, Meta, WindowCharge)> {
        let run = self.runs.front_mut()?;
        let (kind, charge) = (run.kind, run.charge);
        run.count -= 1;
        if run.count == 0 {
            self.runs.pop_front();
        }
        let seq = self.front;
        self.front += 1;
        self.wqes -= 1;
        Some((seq, self.meta(kind), charge))
    }

    /// Retires at once the hidden WQEs at the front that come before the
    /// WQE whose sequence number is `seq_low` in `mask`'s bits (one run at
    /// most): how many, and what they held of the windows together.
    #[inline]
    pub(crate) fn retire_hidden_before(&mut self, seq_low: u64, mask: u64) -> (u64, [u64; 2]) {
        let Some(run) = self.runs.front_mut() else { return (0, [0; 2]) };
        if run.kind != Kind::Hidden {
            return (0, [0; 2]);
        }
        let before = (seq_low.wrapping_sub(self.front) & mask).min(run.count as u64);
        let n = before as u32;
        let held = run.charge.held.map(|b| b as u64 * before);
        run.count -= n;
        if run.count == 0 {
            self.runs.pop_front();
        }
        self.front += before;
        self.wqes -= before;
        (before, held)
    }

    /// The [`Meta`] of a WQE of `kind` being retired (its record taken).
    #[inline]
    fn meta(&mut self, kind: Kind) -> Meta {
        match kind {
            Kind::Hidden => Meta::Hidden,
            Kind::Release => Meta::Release,
            Kind::App => self.apps.pop_front().map_or(Meta::Hidden, AppRecord::meta),
        }
    }

    /// Whether a release (SEND_ENABLE) is posted, and how many.
    pub(crate) fn releases(&self) -> u32 {
        self.runs.iter().filter(|r| r.kind == Kind::Release).map(|r| r.count).sum()
    }

    /// Whether a message's last WQE is posted.
    pub(crate) fn has_app(&self) -> bool {
        !self.apps.is_empty()
    }

    /// Retires everything: what the WQEs held of the windows together, and
    /// the messages' meanings, in order.
    pub(crate) fn drain(&mut self) -> ([u64; 2], impl Iterator<Item = Meta> + '_) {
        let mut released = [0u64; 2];
        for r in self.runs.drain(..) {
            for (k, &b) in r.charge.held.iter().enumerate() {
                released[k] += b as u64 * r.count as u64;
            }
        }
        self.front += self.wqes;
        self.wqes = 0;
        (released, self.apps.drain(..).map(AppRecord::meta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(wr_id: u64) -> Meta {
        Meta::App { wr_id, len: 16, posted_ns: 0 }
    }

    #[test]
    fn runs_of_hidden_wqes_that_hold_the_same_are_one_entry() {
        let mut p = Posted::default();
        let held = WindowCharge { read: false, held: [4096, 0] };
        // A chunk holding window bytes, 16 zero-weight WRs, the last chunk.
        p.push(10, Meta::Hidden, held);
        for s in 11..27 {
            p.push(s, Meta::Hidden, WindowCharge::default());
        }
        p.push(27, app(1), held);
        p.push(28, Meta::Release, WindowCharge::default());
        p.push(29, Meta::Hidden, WindowCharge::default());
        assert_eq!((p.len(), p.runs.len(), p.releases()), (20, 5, 1));
        assert!(p.has_app());
        assert_eq!(p.front_seq(), Some(10));
        // Retired one by one, in order, each with what it held.
        let mut seqs = Vec::new();
        while let Some((seq, meta, charge)) = p.pop_front() {
            let want = match seq {
                10 => held,
                27 => held,
                _ => WindowCharge::default(),
            };
            assert_eq!(charge, want, "seq {seq}");
            assert_eq!(matches!(meta, Meta::App { .. }), seq == 27);
            assert_eq!(matches!(meta, Meta::Release), seq == 28);
            seqs.push(seq);
        }
        assert_eq!(seqs, (10..30).collect::<Vec<_>>());
        assert!(p.is_empty() && p.front_seq().is_none());
    }

    #[test]
    fn hidden_runs_before_the_completed_wqe_retire_at_once() {
        let mut p = Posted::default();
        let chunk = WindowCharge { read: false, held: [100, 0] };
        for s in 0..10 {
            p.push(s, Meta::Hidden, chunk);
        }
        p.push(10, app(1), chunk);
        // The completion of WQE 4: WQEs 0 to 3 go at once, then 4 alone.
        assert_eq!(p.retire_hidden_before(4, u64::MAX), (4, [400, 0]));
        assert_eq!(p.retire_hidden_before(4, u64::MAX), (0, [0, 0]));
        assert_eq!(p.pop_front().map(|x| x.0), Some(4));
        // The completion of the message: the rest of the run, then it.
        assert_eq!(p.retire_hidden_before(10, u64::MAX), (5, [500, 0]));
        assert_eq!(p.retire_hidden_before(10, u64::MAX), (0, [0, 0]), "an App WQE is not hidden");
        assert!(matches!(p.pop_front(), Some((10, Meta::App { wr_id: 1, .. }, _))));
        assert!(p.is_empty());
    }

    #[test]
    fn equal_chunks_merge_and_drain_sums_what_they_held() {
        let mut p = Posted::default();
        let chunk = WindowCharge { read: false, held: [4182, 0] };
        for s in 0..63 {
            p.push(100 + s, Meta::Hidden, chunk);
        }
        p.push(163, app(9), chunk);
        assert_eq!((p.len(), p.runs.len()), (64, 2));
        assert_eq!(p.pop_front().map(|x| x.0), Some(100));
        let (released, apps) = p.drain();
        let apps: Vec<Meta> = apps.collect();
        assert_eq!(released, [63 * 4182, 0]);
        assert!(matches!(apps[..], [Meta::App { wr_id: 9, .. }]));
        assert!(p.is_empty() && p.front_seq().is_none());
        // The next WQE may start anywhere once the ledger is empty.
        p.push(7, Meta::Hidden, WindowCharge::default());
        assert_eq!(p.front_seq(), Some(7));
    }
}
