//! `perf-runner calibrate`: the simulator's calibration table.

use std::path::PathBuf;

use anyhow::Context;
use perf_dataplane::rnic::sim::RnicProfile;
use perf_dataplane::traffic::calibrate::{self, Durations};

/// Flags of `calibrate`.
#[derive(clap::Args)]
pub struct Args {
    /// RNIC profile to calibrate.
    #[arg(long, default_value = "cx6-100g")]
    profile: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measurement window per case, in ms of virtual time.
    #[arg(long, default_value_t = 20)]
    window_ms: u64,
}

/// Runs the suite and prints it.
pub fn run(a: Args) -> anyhow::Result<()> {
    let profile = RnicProfile::by_name(&a.profile)
        .with_context(|| format!("unknown RNIC profile {:?} (known: {})", a.profile, RnicProfile::NAMES.join(", ")))?;
    let d = Durations { window_ns: a.window_ms * 1_000_000, ..Durations::default() };
    let cal = calibrate::run(&profile, d).context("calibration run failed")?;
    print!("{}", cal.table());
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&cal)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if cal.cases.iter().any(|c| !c.pass) {
        anyhow::bail!("some calibration cases are outside their accepted range");
    }
    Ok(())
}
