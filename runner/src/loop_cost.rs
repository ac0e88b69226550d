//! The loop's cost in virtual time (`perf_dataplane::engine::loop_cost`):
//! the `--loop-cost` flag of `run` and `compare`, its figures in every
//! report, and `perf-runner calibrate-loop`, which measures this machine
//! and writes a file that `--loop-cost FILE` reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use perf_dataplane::engine::LoopCost;
use serde::Serialize;

/// The `--loop-cost` flag.
#[derive(clap::Args, Clone, Debug)]
pub struct LoopCostArgs {
    /// What the dataplane loop's work costs in virtual time: `measured`
    /// (the default: the figures measured on the reference machine,
    /// docs/loop-cost.md), `zero` (a free loop, as before the cost model),
    /// or a file `perf-runner calibrate-loop` wrote. A real-time run
    /// (`--realtime`, `--backend verbs`) takes its real time and is never
    /// charged.
    #[arg(long = "loop-cost", value_name = "measured|zero|FILE")]
    pub loop_cost: Option<String>,
}

impl LoopCostArgs {
    /// The model for a virtual-time run (`measured` unless the flag says).
    pub fn choice(&self) -> anyhow::Result<LoopChoice> {
        LoopChoice::parse(self.loop_cost.as_deref().unwrap_or("measured"))
    }

    /// The model for a real-time run: none; a cost given anyway is refused.
    pub fn real_time(&self) -> anyhow::Result<LoopChoice> {
        match self.loop_cost.as_deref() {
            None | Some("zero") => Ok(LoopChoice { source: "real time (not charged)".into(), cost: LoopCost::ZERO }),
            Some(v) => anyhow::bail!(
                "--loop-cost {v}: only virtual-time runs charge the loop (a real-time loop takes its real time)"
            ),
        }
    }
}

/// A cost model and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopChoice {
    /// `measured`, `zero` or the file's path.
    pub source: String,
    /// The model.
    pub cost: LoopCost,
}

impl Default for LoopChoice {
    /// A free loop (library callers and tests; the CLI defaults to `measured`).
    fn default() -> Self {
        LoopChoice { source: "zero".into(), cost: LoopCost::ZERO }
    }
}

impl LoopChoice {
    /// The measured defaults.
    pub fn measured() -> Self {
        LoopChoice { source: "measured".into(), cost: LoopCost::MEASURED }
    }

    /// Parses `--loop-cost`: `measured`, `zero` or a file.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "measured" => Ok(Self::measured()),
            "zero" => Ok(Self::default()),
            path => Ok(LoopChoice { source: path.to_string(), cost: read_file(Path::new(path))? }),
        }
    }
}

/// Reads a cost model file (TOML, the fields of `LoopCost` in ps).
pub fn read_file(path: &Path) -> anyhow::Result<LoopCost> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--loop-cost {}: not `measured`, `zero` or a readable file", path.display()))?;
    toml::from_str(&text).with_context(|| format!("--loop-cost {}: not a loop cost file", path.display()))
}

/// The model as a file that [`read_file`] reads, with a header comment.
pub fn to_file(cost: &LoopCost, header: &str) -> anyhow::Result<String> {
    let body = toml::to_string(cost).context("serialising the loop cost")?;
    let comments: String = header.lines().map(|l| format!("# {l}\n")).collect();
    Ok(format!("{comments}{body}"))
}

/// The loop's cost model and busy time in a run's report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoopReport {
    /// Where the model came from: `measured`, `zero` or a file.
    pub source: String,
    /// The model's figures, ps.
    pub model: LoopCost,
    /// The loop's work charged to the virtual clock over the run, ns.
    pub busy_ns: f64,
    /// That busy time over the run's duration: the loop core's
    /// utilization (0 to 1; 0 with a zero cost or in real time).
    pub utilization: f64,
}

impl LoopReport {
    /// The model, in words.
    pub fn model_line(&self) -> String {
        let m = &self.model;
        let ns = |ps: u64| ps as f64 / 1000.0;
        format!(
            "loop: cost {} (round {:.1} ns, arrival step {:.1} ns, WQE {:.1} ns, chunk {:.1} ns, inline {:.1} ns, CQE {:.1} ns, completion {:.1} ns; native / wasm policy: call {:.1} / {:.1} ns, tick {:.1} / {:.1} ns + {:.1} / {:.1} ns per tenant)",
            self.source,
            ns(m.round_ps),
            ns(m.step_ps),
            ns(m.wqe_ps),
            ns(m.chunk_ps),
            ns(m.inline_ps),
            ns(m.cqe_ps),
            ns(m.completion_ps),
            ns(m.native.call_ps),
            ns(m.wasm.call_ps),
            ns(m.native.tick_ps),
            ns(m.wasm.tick_ps),
            ns(m.native.tick_tenant_ps),
            ns(m.wasm.tick_tenant_ps),
        )
    }

    /// The report's line: the model, the busy time and the utilization.
    pub fn line(&self) -> String {
        format!("{} | busy {:.3} ms, utilization {:.3}", self.model_line(), self.busy_ns / 1e6, self.utilization)
    }
}

/// Flags of `calibrate-loop`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Where to write the model (TOML; `run --loop-cost FILE` reads it).
    #[arg(long, short = 'o', value_name = "FILE", default_value = "loop-cost.toml")]
    out: PathBuf,
    /// Wall time each of the five loads runs, ms.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    load_ms: u64,
    /// Runs of each policy-hook measurement (the median is kept).
    #[arg(long, value_name = "N", default_value_t = 101)]
    runs: usize,
    /// Also write the loads, hooks and model as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Runs `calibrate-loop`.
pub fn calibrate(a: CalibrateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.load_ms >= 1, "--load-ms: at least 1");
    anyhow::ensure!(a.runs >= 1, "--runs: at least 1");
    let c = perf_benches::loop_cost::calibrate(Duration::from_millis(a.load_ms), a.runs)
        .context("measuring the loop over the null RNIC")?;
    println!(
        "loads over the null RNIC (wall time in round() less the policy's hooks and {:.1} ns of timing per round and per hook call):",
        c.timer_ns
    );
    println!(
        "{:<30} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>12} {:>12}",
        "load", "rounds", "WQEs", "chunks", "inline", "CQEs", "completions", "calls", "loop ms", "fitted ms"
    );
    for l in &c.loads {
        println!(
            "{:<30} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>12.3} {:>12.3}",
            l.name,
            l.rounds,
            l.wqes,
            l.chunks,
            l.inline,
            l.cqes,
            l.completions,
            l.calls,
            l.loop_ns / 1e6,
            l.fitted_ns / 1e6
        );
    }
    let s = &c.steps;
    println!(
        "arrival steps ({} steps, {} WQEs, {} calls): {:.3} ms in the steps, {:.1} ns per step besides its WQE",
        s.steps,
        s.wqes,
        s.calls,
        s.loop_ns / 1e6,
        s.step_ns
    );
    println!("policy hooks through the host (median ns per call):");
    for p in &c.policies {
        println!(
            "  {:<10} on_request {:.1}, on_tick over 1 tenant {:.1}, over 64 tenants {:.1}",
            p.name, p.request_ns, p.tick1_ns, p.tick64_ns
        );
    }
    let report = LoopReport { source: a.out.display().to_string(), model: c.cost, ..LoopReport::default() };
    println!("{}", report.line());
    let host = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let header = format!(
        "The dataplane loop's cost in virtual time, ps (perf-runner calibrate-loop --load-ms {} --runs {}),\nmeasured on {host}, {cores} cores. perf-runner run SCENARIO --loop-cost {} reads it.",
        a.load_ms,
        a.runs,
        a.out.display()
    );
    std::fs::write(&a.out, to_file(&c.cost, &header)?).with_context(|| format!("writing {}", a.out.display()))?;
    println!("wrote {}", a.out.display());
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_string_pretty(&c)?).with_context(|| format!("writing {}", j.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_takes_measured_zero_or_a_file_it_can_read() {
        assert_eq!(LoopChoice::parse("measured").expect("measured").cost, LoopCost::MEASURED);
        assert_eq!(LoopChoice::parse("zero").expect("zero").cost, LoopCost::ZERO);
        let e = format!("{:#}", LoopChoice::parse("/no/such/file.toml").expect_err("missing"));
        assert!(e.contains("measured") && e.contains("zero"), "{e}");
        let dir = std::env::temp_dir().join(format!("loop-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("c.toml");
        let mut cost = LoopCost::MEASURED;
        cost.wqe_ps = 12_345;
        std::fs::write(&path, to_file(&cost, "a header\nof two lines").expect("toml")).expect("write");
        let read = LoopChoice::parse(path.to_str().expect("utf-8")).expect("reads");
        assert_eq!(read.cost, cost);
        std::fs::write(&path, "wqe_ps = 1\nbogus = 2\n").expect("write");
        assert!(LoopChoice::parse(path.to_str().expect("utf-8")).is_err(), "unknown keys are refused");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
