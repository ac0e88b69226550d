//! bench-guard: compares the ratios of the last benchmark run
//! (`target/perf-bench/*.json`) against `benches/baseline.json` and names
//! every figure that moved beyond its tolerance (exit status 1), or that
//! the run lacks (exit status 1 unless `--allow-missing`).
//! Figures the baseline marks `report_only` are compared and printed but
//! never fail the guard. `--report-only` prints the comparison and exits 0 whatever moved (for
//! noisy quick runs; a missing or unreadable record or baseline still
//! fails). `--update` rewrites the baseline from the run instead (keeping
//! the tolerances).
//!
//! `cargo bench -p perf-benches && cargo run --release -p perf-benches --bin bench-guard`

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use perf_benches::guard::{compare, ratios, read_records, rebase, Baseline, Verdict};
use perf_benches::results::results_dir;

/// The command line, for `--help` and an unknown argument.
const USAGE: &str = "usage: bench-guard [--update] [--allow-missing] [--report-only]";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\n\ncompares the ratios of the last benchmark run (target/perf-bench/*.json) against benches/baseline.json; --update rewrites the baseline from the run, --allow-missing passes ratios the run lacks, --report-only exits 0 whatever moved");
        return Ok(());
    }
    let update = args.iter().any(|a| a == "--update");
    let allow_missing = args.iter().any(|a| a == "--allow-missing");
    let report_only = args.iter().any(|a| a == "--report-only");
    if let Some(a) = args.iter().find(|a| !matches!(a.as_str(), "--update" | "--allow-missing" | "--report-only")) {
        bail!("unknown argument {a:?} ({USAGE})");
    }
    let base_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("baseline.json");
    let dir = results_dir();
    let records = read_records(&dir).with_context(|| {
        format!("reading the records of a benchmark run in {} (run `cargo bench -p perf-benches` first)", dir.display())
    })?;
    if records.is_empty() {
        bail!("no benchmark records in {} (run `cargo bench -p perf-benches` first)", dir.display());
    }
    let old: Option<Baseline> = match std::fs::read_to_string(&base_path) {
        Ok(text) => Some(serde_json::from_str(&text).with_context(|| format!("parsing {}", base_path.display()))?),
        Err(_) if update => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", base_path.display())),
    };
    if update {
        let new = rebase(old.as_ref(), &records);
        std::fs::write(&base_path, serde_json::to_string_pretty(&new)? + "\n")
            .with_context(|| format!("writing {}", base_path.display()))?;
        println!("{}: {} ratios from {}", base_path.display(), new.figures.len(), dir.display());
        return Ok(());
    }
    let base = old.context("no baseline")?;
    let result = compare(&base, &ratios(&records));
    let (mut moved, mut missing) = (0, 0);
    for c in &result {
        let fresh = c.fresh.map_or("-".to_string(), |f| format!("{f:.3}"));
        let change = c.change().map_or("-".to_string(), |x| format!("{x:.2}x"));
        let what = match (&c.verdict, c.report_only) {
            (Verdict::Held, _) => "ok",
            (Verdict::Moved, true) => "moved*",
            (Verdict::Missing, true) => "missing*",
            (Verdict::Moved, false) => {
                moved += 1;
                "MOVED"
            }
            (Verdict::Missing, false) => {
                missing += 1;
                "MISSING"
            }
        };
        println!(
            "{what:<8} {:<55} base {:>8.3} fresh {fresh:>8} ({change} of base, tolerance {:.0}%)",
            c.name,
            c.base,
            c.tolerance * 100.0
        );
    }
    let reported = result.iter().filter(|c| c.report_only).count();
    println!(
        "{} guarded ratios ({reported} of them report-only, marked * when out of tolerance): {moved} moved, {missing} missing",
        result.len()
    );
    if !report_only && (moved > 0 || (missing > 0 && !allow_missing)) {
        std::process::exit(1);
    }
    Ok(())
}
