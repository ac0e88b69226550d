//! The `perf-runner` binary, for the benchmarks that run it: where it is
//! (built first if need be) and scenarios cut to other lengths.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::results::results_dir;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `perf-runner` binary: `$PERF_RUNNER`, or built with cargo into the
/// workspace's release directory.
pub fn runner_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PERF_RUNNER") {
        return Ok(PathBuf::from(p));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "perf-runner"])
        .current_dir(workspace())
        .status()
        .map_err(|e| format!("cargo build -p perf-runner: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build -p perf-runner: {status}"));
    }
    Ok(results_dir().join("../release/perf-runner"))
}

/// `src` with its `duration_ms` and `warmup_ms` replaced, written next to
/// the records as `name`.
pub fn cut_scenario(src: &Path, name: &str, duration_ms: u64, warmup_ms: u64) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let cut: Vec<String> = text
        .lines()
        .map(|l| match l.split('=').next().map(str::trim) {
            Some("duration_ms") => format!("duration_ms = {duration_ms}"),
            Some("warmup_ms") => format!("warmup_ms = {warmup_ms}"),
            _ => l.to_string(),
        })
        .collect();
    let dir = results_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, cut.join("\n")).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}
