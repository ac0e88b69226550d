//! What a run writes besides its table: CSV, HdrHistogram interval logs,
//! plots; and the terminal options (`--quiet`, the progress bar).
//! `run` and `compare` share these flags.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::Report;
use crate::run_cmd::RunOptions;
use crate::scenario::Scenario;

/// Output flags of `run` and `compare`.
#[derive(clap::Args, Default)]
pub struct OutputArgs {
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per configuration and tenant to this file (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write each tenant's latency as an HdrHistogram interval log (V2,
    /// compressed; values in ns; tag `CONFIG/TENANT`), which
    /// HistogramLogProcessor and the hdrhistogram crates read.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Interval of the HdrHistogram log, ms of virtual time (default: a
    /// twentieth of the scenario).
    #[arg(long, value_name = "MS")]
    pub hdr_interval_ms: Option<f64>,
    /// Write SVG plots to this directory: latency CDF per tenant,
    /// throughput per tenant over time, NIC utilization over time.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Print no table (files are still written) and no progress bar.
    #[arg(long, short = 'Q')]
    pub quiet: bool,
}

impl OutputArgs {
    /// Run options for `runs` runs of `sc`: interval histograms if a log
    /// is wanted, and a progress bar when stdout is a terminal, the output
    /// is not quiet and the runs are long enough to wait for.
    pub fn run_options(&self, sc: &Scenario, runs: usize) -> RunOptions {
        let hdr_interval_ns = self.hdr_log.as_ref().map(|_| match self.hdr_interval_ms {
            Some(ms) => ((ms * 1e6) as u64).max(1000),
            None => ((sc.duration_ms * 1e6) as u64 / 20).max(1000),
        });
        // Work estimate: tenants x virtual ms (a few ms of 1 MB traffic
        // take a fraction of a second; this is only for the bar).
        let long = runs as f64 * sc.duration_ms * sc.tenants.len() as f64 > 200.0;
        let progress = (!self.quiet && long && std::io::stdout().is_terminal()).then(|| {
            // One run at a time: the bar restarts with each (`run_scenario_with`
            // moves it through the run's virtual ms).
            let total = sc.duration_ms as u64 + 1;
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {msg} ({eta} left)") {
                bar.set_style(style);
            }
            bar
        });
        RunOptions { hdr_interval_ns, progress, swaps: Vec::new(), loop_cost: Default::default() }
    }

    /// Checks the flags and every output path before a run, so that a
    /// run is not spent on files it cannot write ([`check_writable`]).
    pub fn check(&self) -> anyhow::Result<()> {
        if let Some(ms) = self.hdr_interval_ms {
            anyhow::ensure!(self.hdr_log.is_some(), "--hdr-interval-ms: only with --hdr-log");
            anyhow::ensure!(
                ms.is_finite() && ms >= 0.001,
                "--hdr-interval-ms {ms}: at least 0.001 ms (one interval histogram per microsecond)"
            );
        }
        for p in [&self.json, &self.hdr_log].into_iter().flatten() {
            check_writable(p)?;
        }
        if let Some(p) = self.csv.as_ref().filter(|p| p.as_path() != Path::new("-")) {
            check_writable(p)?;
        }
        if let Some(dir) = &self.plot {
            check_plot_dir(dir)?;
        }
        Ok(())
    }

    /// Writes the JSON (`json`), CSV, HdrHistogram log and plots asked
    /// for: all of them or none ([`write_all`]).
    pub fn write_files(
        &self,
        runs: &[Report],
        scenario: Option<&str>,
        json: &impl serde::Serialize,
    ) -> anyhow::Result<()> {
        let mut files = Vec::new();
        if let Some(path) = &self.json {
            files.push((path.clone(), serde_json::to_string_pretty(json)?.into_bytes()));
        }
        let mut stdout = None;
        if let Some(path) = &self.csv {
            let text = csv(runs)?;
            if path == Path::new("-") {
                stdout = Some(text);
            } else {
                files.push((path.clone(), text.into_bytes()));
            }
        }
        if let Some(path) = &self.hdr_log {
            let mut buf = Vec::new();
            hdr_log(runs, &mut buf)?;
            files.push((path.clone(), buf));
        }
        if let Some(dir) = &self.plot {
            let plots = crate::plot::plot_all(runs, scenario.unwrap_or(""), dir)?;
            tracing::info!(files = plots.len(), dir = %dir.display(), "plots drawn");
            files.extend(plots);
        }
        write_all(&files)?;
        if let Some(text) = stdout {
            print!("{text}");
        }
        Ok(())
    }
}

/// The nearest ancestor of `path` that exists (`.` for a relative path
/// none of whose parents exist).
fn existing_ancestor(path: &Path) -> &Path {
    path.ancestors().skip(1).find(|p| p.as_os_str().is_empty() || p.exists()).map_or(Path::new("."), |p| {
        if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        }
    })
}

/// Checks that `path` can be written before anything is: it is not a
/// directory, and its nearest existing ancestor is one (missing
/// directories between are created, and said so, when the files are
/// written: [`write_all`]).
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(!path.is_dir(), "{}: is a directory, not a file", path.display());
    let above = existing_ancestor(path);
    anyhow::ensure!(above.is_dir(), "{}: {} is not a directory", path.display(), above.display());
    Ok(())
}

/// Checks a `--plot` directory: a directory if it exists, else its nearest
/// existing ancestor is one.
fn check_plot_dir(dir: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(!dir.exists() || dir.is_dir(), "--plot {}: exists and is not a directory", dir.display());
    let above = existing_ancestor(dir);
    anyhow::ensure!(above.is_dir(), "--plot {}: {} is not a directory", dir.display(), above.display());
    Ok(())
}

/// Creates `dir` with its missing parents, saying so on stderr (a
/// directory that appears is never a surprise).
fn create_dirs(dir: &Path) -> anyhow::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let first_missing = dir.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).last();
    std::fs::create_dir_all(dir).with_context(|| format!("creating the directory {}", dir.display()))?;
    if let Some(p) = first_missing {
        eprintln!("created the directory {}", p.display());
    }
    Ok(())
}

/// Writes every `(path, bytes)`, all or none: each regular (or new) file
/// goes to a temporary name beside it and is renamed only when every file
/// has been written; a device or pipe (`/dev/stdout`) is written last
/// before the renames, in place. On a failure no target is changed (but a
/// device already written to) and the temporary files are removed.
pub fn write_all(files: &[(PathBuf, Vec<u8>)]) -> anyhow::Result<()> {
    let mut staged: Vec<(PathBuf, &Path)> = Vec::new();
    let mut in_place = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for (path, _) in files {
            if let Some(dir) = path.parent() {
                create_dirs(dir)?;
            }
        }
        for (path, bytes) in files {
            let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir());
            if special {
                in_place.push((path.as_path(), bytes));
                continue;
            }
            let name = path.file_name().map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
            let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
            staged.push((tmp.clone(), path.as_path()));
            std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", path.display()))?;
        }
        for (path, bytes) in &in_place {
            std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (tmp, _) in &staged {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    for (tmp, path) in &staged {
        std::fs::rename(tmp, path)
            .with_context(|| format!("writing {} (renaming {})", path.display(), tmp.display()))?;
    }
    Ok(())
}

/// The CSV columns, in order.
pub const CSV_HEADER: &[&str] = &[
    "config",
    "policy",
    "hw",
    "tenant",
    "gbps",
    "mpps",
    "completed",
    "errors",
    "dropped",
    "mean_us",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
    "nic_utilization",
    "wire_payload_gbps",
    "wqes_per_msg",
    "policy_calls_per_msg",
];

/// One row per run and tenant (`alone` figures are their own runs in
/// `compare`; in `run --alone` they follow as `alone:TENANT` rows).
pub fn csv(runs: &[Report]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER)?;
    for r in runs {
        for t in &r.tenants {
            let mut rows = vec![(r.config.clone(), t, true)];
            if let Some(a) = &t.alone {
                rows.push((format!("alone:{}", t.name), a.as_ref(), false));
            }
            // The NIC and cost columns are the run's; an alone figure of
            // `run --alone` leaves them empty (it was its own run).
            for (config, t, own) in rows {
                let run_col = |x: f64| if own { format!("{x:.4}") } else { String::new() };
                let l = &t.latency_us;
                let rec: Vec<String> = vec![
                    config,
                    r.policy.clone(),
                    r.hw.clone(),
                    t.name.clone(),
                    format!("{:.4}", t.gbps),
                    format!("{:.6}", t.mpps),
                    t.completed.to_string(),
                    t.errors.to_string(),
                    t.dropped.to_string(),
                    format!("{:.4}", l.mean),
                    format!("{:.4}", l.p50),
                    format!("{:.4}", l.p99),
                    format!("{:.4}", l.p999),
                    format!("{:.4}", l.max),
                    run_col(r.rnic.utilization),
                    run_col(r.rnic.wire_payload_gbps),
                    run_col(r.cost.wqes_per_msg),
                    run_col(r.cost.policy_calls_per_msg),
                ];
                w.write_record(&rec)?;
            }
        }
    }
    Ok(String::from_utf8(w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?)?)
}

/// A tag the log format accepts (no spaces or commas).
fn tag_text(s: &str) -> String {
    s.chars().map(|c| if c == ' ' || c == ',' || c == '\r' || c == '\n' { '_' } else { c }).collect()
}

/// Writes every tenant's interval histograms of every run, in time order,
/// as an HdrHistogram V2 interval log (timestamps in virtual seconds from
/// the run's start, values in ns).
pub fn hdr_log(runs: &[Report], out: &mut Vec<u8>) -> anyhow::Result<()> {
    let mut entries = Vec::new();
    for r in runs {
        for t in &r.tenants {
            if let Some(iv) = &t.intervals {
                for (start, h) in &iv.hists {
                    entries.push((*start, iv.interval_ns, tag_text(&format!("{}/{}", r.config, t.name)), h));
                }
            }
        }
    }
    entries.sort_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment("perf-runner latency log: values in ns of virtual time; tag CONFIG/TENANT")
        .with_start_time(UNIX_EPOCH)
        .with_base_time(UNIX_EPOCH)
        .with_max_value_divisor(1000.0);
    let mut w = builder.begin_log_with(out, &mut serializer)?;
    for (start, len, tag, h) in entries {
        w.write_histogram(h, Duration::from_nanos(start), Duration::from_nanos(len), Tag::new(&tag))
            .map_err(|e| anyhow::anyhow!("writing the HdrHistogram log: {e}"))?;
    }
    Ok(())
}
