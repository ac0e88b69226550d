//! The regression guard's comparison: a checked-in baseline of ratios
//! (`benches/baseline.json`), each with a tolerance, against the ratios of
//! a fresh run (`target/perf-bench/*.json`). Only ratios measured within
//! one run are guarded; absolute times move with the machine.
//!
//! A figure has moved when the fresh value leaves `[base / (1 + tol),
//! base * (1 + tol)]`: the tolerance is symmetric in ratio terms, so a
//! 2x slowdown and a 2x speed-up count alike.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::results::BenchRecord;

/// One guarded ratio.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Guarded {
    /// Its value when the baseline was taken.
    pub value: f64,
    /// Relative tolerance (0.5: within 1.5x either way); the baseline's
    /// default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// Reported, never a failure: a figure not yet shown stable enough to
    /// gate on (its verdict is printed; `bench-guard` does not fail on it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub report_only: bool,
}

/// The checked-in baseline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Baseline {
    /// What the file is, for a reader who opens it.
    #[serde(default)]
    pub about: String,
    /// Tolerance of the figures that set none.
    pub tolerance: f64,
    /// Guarded ratios by figure name.
    pub figures: BTreeMap<String, Guarded>,
}

/// How one guarded figure compares.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Within tolerance.
    Held,
    /// Outside it.
    Moved,
    /// Not in the fresh run.
    Missing,
}

/// One line of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The figure.
    pub name: String,
    /// The baseline value.
    pub base: f64,
    /// The fresh value, if the run has it.
    pub fresh: Option<f64>,
    /// The tolerance applied.
    pub tolerance: f64,
    /// The verdict.
    pub verdict: Verdict,
    /// Whether the figure is only reported ([`Guarded::report_only`]).
    pub report_only: bool,
}

impl Comparison {
    /// Fresh over baseline.
    pub fn change(&self) -> Option<f64> {
        self.fresh.map(|f| f / self.base)
    }
}

/// Compares `fresh` (figure name to value) against `base`, in the
/// baseline's order.
pub fn compare(base: &Baseline, fresh: &BTreeMap<String, f64>) -> Vec<Comparison> {
    base.figures
        .iter()
        .map(|(name, g)| {
            let tolerance = g.tolerance.unwrap_or(base.tolerance);
            let f = fresh.get(name).copied();
            let verdict = match f {
                None => Verdict::Missing,
                Some(v) if !v.is_finite() || v <= 0.0 => Verdict::Moved,
                Some(v) if v > g.value * (1.0 + tolerance) || v < g.value / (1.0 + tolerance) => Verdict::Moved,
                Some(_) => Verdict::Held,
            };
            Comparison { name: name.clone(), base: g.value, fresh: f, tolerance, verdict, report_only: g.report_only }
        })
        .collect()
}

/// A new baseline from the ratios of `records`, keeping the tolerances
/// and report-only marks `old` set per figure (and its default, `about`).
pub fn rebase(old: Option<&Baseline>, records: &BTreeMap<String, BenchRecord>) -> Baseline {
    let mut figures = BTreeMap::new();
    for rec in records.values() {
        for (name, f) in rec.figures.iter().filter(|(_, f)| f.ratio && f.value.is_finite() && f.value > 0.0) {
            let was = old.and_then(|b| b.figures.get(name));
            let (tolerance, report_only) = (was.and_then(|g| g.tolerance), was.is_some_and(|g| g.report_only));
            figures.insert(name.clone(), Guarded { value: f.value, tolerance, report_only });
        }
    }
    Baseline {
        about: old.map(|b| b.about.clone()).unwrap_or_default(),
        tolerance: old.map_or(0.5, |b| b.tolerance),
        figures,
    }
}

/// Every record under `dir` (`NAME.json` by bench name); files that are
/// not records are skipped.
pub fn read_records(dir: &Path) -> std::io::Result<BTreeMap<String, BenchRecord>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "json") {
            let text = std::fs::read_to_string(&path)?;
            if let (Ok(rec), Some(stem)) = (serde_json::from_str::<BenchRecord>(&text), path.file_stem()) {
                out.insert(stem.to_string_lossy().into_owned(), rec);
            }
        }
    }
    Ok(out)
}

/// The ratios of `records`, by figure name.
pub fn ratios(records: &BTreeMap<String, BenchRecord>) -> BTreeMap<String, f64> {
    records
        .values()
        .flat_map(|r| r.figures.iter().filter(|(_, f)| f.ratio).map(|(n, f)| (n.clone(), f.value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Figure;

    fn baseline() -> Baseline {
        let mut figures = BTreeMap::new();
        figures.insert("a".to_string(), Guarded { value: 2.0, tolerance: None, report_only: false });
        figures.insert("b".to_string(), Guarded { value: 1.0, tolerance: Some(0.1), report_only: false });
        figures.insert("c".to_string(), Guarded { value: 4.0, tolerance: None, report_only: false });
        Baseline { about: String::new(), tolerance: 0.5, figures }
    }

    fn fresh(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    fn verdicts(c: &[Comparison]) -> Vec<(&str, Verdict)> {
        c.iter().map(|c| (c.name.as_str(), c.verdict.clone())).collect()
    }

    #[test]
    fn within_tolerance_holds_either_way() {
        let c = compare(&baseline(), &fresh(&[("a", 2.9), ("b", 0.95), ("c", 2.7)]));
        assert_eq!(verdicts(&c), [("a", Verdict::Held), ("b", Verdict::Held), ("c", Verdict::Held)]);
        assert_eq!(c[0].change(), Some(1.45));
    }

    #[test]
    fn outside_tolerance_is_named_as_moved() {
        // a: 3.1 > 2 * 1.5; b: per-figure 10 % tolerance, 0.85 < 1 / 1.1; c: 2.6 < 4 / 1.5.
        let c = compare(&baseline(), &fresh(&[("a", 3.1), ("b", 0.85), ("c", 2.6)]));
        assert_eq!(verdicts(&c), [("a", Verdict::Moved), ("b", Verdict::Moved), ("c", Verdict::Moved)]);
        assert_eq!(c[1].tolerance, 0.1);
    }

    #[test]
    fn missing_and_nonsense_values() {
        let c = compare(&baseline(), &fresh(&[("a", f64::NAN), ("b", 0.0)]));
        assert_eq!(verdicts(&c), [("a", Verdict::Moved), ("b", Verdict::Moved), ("c", Verdict::Missing)]);
        assert_eq!(c[2].change(), None);
    }

    #[test]
    fn report_only_figures_are_compared_and_marked() {
        let mut base = baseline();
        base.figures.get_mut("a").expect("a").report_only = true;
        let c = compare(&base, &fresh(&[("a", 9.0), ("b", 1.0), ("c", 4.0)]));
        assert_eq!((c[0].verdict.clone(), c[0].report_only), (Verdict::Moved, true));
        assert!(!c[1].report_only);
        let text = serde_json::to_string(&base.figures["a"]).expect("json");
        assert!(text.contains("report_only"), "{text}");
        assert!(!serde_json::to_string(&base.figures["b"]).expect("json").contains("report_only"));
        let mut rec = BenchRecord::default();
        rec.figures.insert("a".into(), Figure { value: 9.0, unit: "x".into(), ratio: true });
        let records: BTreeMap<String, BenchRecord> = [("x".to_string(), rec)].into_iter().collect();
        assert!(rebase(Some(&base), &records).figures["a"].report_only, "rebase keeps the mark");
    }

    #[test]
    fn rebase_takes_ratios_only_and_keeps_tolerances() {
        let mut rec = BenchRecord::default();
        rec.figures.insert("b".into(), Figure { value: 1.2, unit: "x".into(), ratio: true });
        rec.figures.insert("d".into(), Figure { value: 3.0, unit: "x".into(), ratio: true });
        rec.figures.insert("ns".into(), Figure { value: 30.0, unit: "ns".into(), ratio: false });
        let records: BTreeMap<String, BenchRecord> = [("x".to_string(), rec)].into_iter().collect();
        let old = baseline();
        let new = rebase(Some(&old), &records);
        assert_eq!(new.tolerance, 0.5);
        assert_eq!(new.figures.len(), 2);
        assert_eq!(new.figures["b"], Guarded { value: 1.2, tolerance: Some(0.1), report_only: false });
        assert_eq!(new.figures["d"], Guarded { value: 3.0, tolerance: None, report_only: false });
        assert_eq!(ratios(&records).len(), 2);
    }
}
