//! The figures a benchmark run produced, written as JSON under
//! `target/perf-bench/BENCH.json` so that `bench-guard` can compare the
//! ratios against the checked-in baseline (`benches/baseline.json`) and
//! `benches/gen-performance.sh` can quote them.
//!
//! Only ratios measured in one run are guarded: absolute times move with
//! the machine and its load, a ratio of two things measured side by side
//! much less.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One figure of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    /// The value.
    pub value: f64,
    /// Its unit (`ns`, `M WQEs/s`, `x` for a ratio, ...).
    pub unit: String,
    /// Whether this is a ratio measured within one run (guarded).
    pub ratio: bool,
}

/// The figures of one benchmark binary, by name.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BenchRecord {
    /// Figures by name.
    pub figures: BTreeMap<String, Figure>,
    /// Things a run could not measure and why (a refused setup, a missing
    /// binary), by name.
    #[serde(default)]
    pub notes: BTreeMap<String, String>,
}

/// Collects a benchmark's figures and writes them at the end.
pub struct Recorder {
    bench: String,
    record: BenchRecord,
}

/// Where the records go: `$CARGO_TARGET_DIR/perf-bench`, or the workspace's
/// `target/perf-bench`.
pub fn results_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d).join("perf-bench"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/perf-bench"),
    }
}

impl Recorder {
    /// A recorder for the benchmark `bench` (the file stem of its record).
    pub fn new(bench: &str) -> Self {
        Recorder { bench: bench.to_string(), record: BenchRecord::default() }
    }

    /// Records an absolute figure (reported, not guarded).
    pub fn figure(&mut self, name: &str, value: f64, unit: &str) {
        self.record.figures.insert(name.to_string(), Figure { value, unit: unit.to_string(), ratio: false });
    }

    /// Records a ratio measured within this run (guarded against the baseline).
    pub fn ratio(&mut self, name: &str, value: f64) {
        self.record.figures.insert(name.to_string(), Figure { value, unit: "x".to_string(), ratio: true });
    }

    /// Records why something could not be measured.
    pub fn note(&mut self, name: &str, text: &str) {
        self.record.notes.insert(name.to_string(), text.to_string());
    }

    /// A figure recorded so far.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.record.figures.get(name).map(|f| f.value)
    }

    /// Writes `target/perf-bench/BENCH.json`; a failure to write is
    /// reported on stderr and does not fail the benchmark.
    pub fn save(&self) {
        let dir = results_dir();
        let path = dir.join(format!("{}.json", self.bench));
        let res = std::fs::create_dir_all(&dir)
            .map_err(|e| e.to_string())
            .and_then(|()| serde_json::to_string_pretty(&self.record).map_err(|e| e.to_string()))
            .and_then(|json| std::fs::write(&path, json).map_err(|e| e.to_string()));
        match res {
            Ok(()) => println!("figures written to {}", path.display()),
            Err(e) => eprintln!("could not write {}: {e}", path.display()),
        }
    }
}
