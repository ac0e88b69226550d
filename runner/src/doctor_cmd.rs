//! `perf-runner doctor`: what a `run --backend verbs` would hit on this
//! machine, checked before the first packet: the verbs backend in this
//! binary, the device and its active ports, the GID a QP would use, the
//! port MTU, the send-queue and CQ limits against the dataplane's depths
//! for the number of QPs given (mlx5's 64 B WQE blocks included), and the
//! locked-memory limit against what such a run pins. Each check prints as
//! `ok`, `warn` (a run works, with less) or `FAIL` (a run would fail) with
//! the fix; the exit status is 0 when nothing fails, 1 otherwise.

use std::fmt::Write as _;

use perf_dataplane::engine::DataplaneConfig;
use perf_dataplane::rnic::verbs::probe::{self, Check, CheckLevel};

/// Flags of `doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// Check only this device (default: every device libibverbs lists).
    #[arg(long, value_name = "NAME")]
    device: Option<String>,
    /// Data QPs the run would create (the sum of the scenario's `qps`).
    #[arg(long, default_value_t = 8, value_name = "N")]
    qps: usize,
    /// Bytes of buffers the run would register (the scenario's messages).
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    buffers: u64,
    /// Print the checks as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the checks and prints them; an error (exit 1) when one fails.
pub fn run(a: Args) -> anyhow::Result<()> {
    if a.qps == 0 {
        anyhow::bail!("--qps 0: a run has at least one data QP");
    }
    let cfg = DataplaneConfig::for_qps(a.qps);
    let p = probe::probe();
    let checks =
        probe::doctor(&p, a.device.as_deref(), a.qps, cfg.sq_depth, cfg.rq_depth, a.buffers, probe::memlock_limit());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        print!("{}", render(&checks));
    }
    let failed = checks.iter().filter(|c| c.level == CheckLevel::Fail).count();
    if failed > 0 {
        anyhow::bail!(
            "{failed} of {} checks failed: a run with --backend verbs would not start (see above)",
            checks.len()
        );
    }
    Ok(())
}

fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let mark = match c.level {
            CheckLevel::Ok => "ok  ",
            CheckLevel::Warn => "warn",
            CheckLevel::Fail => "FAIL",
        };
        let mut lines = c.detail.lines();
        let _ = writeln!(out, "[{mark}] {}: {}", c.name, lines.next().unwrap_or(""));
        for l in lines {
            let _ = writeln!(out, "       {l}");
        }
        if let Some(fix) = &c.fix {
            let _ = writeln!(out, "       fix: {fix}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_marks_levels_and_fixes() {
        let checks = vec![
            Check {
                name: "memlock".into(),
                level: CheckLevel::Fail,
                detail: "8.0 MiB".into(),
                fix: Some("ulimit -l".into()),
            },
            Check {
                name: "rxe0 port 1: MTU".into(),
                level: CheckLevel::Ok,
                detail: "1024 B\nsecond".into(),
                fix: None,
            },
        ];
        let text = render(&checks);
        assert!(text.contains("[FAIL] memlock: 8.0 MiB\n       fix: ulimit -l\n"), "{text}");
        assert!(text.contains("[ok  ] rxe0 port 1: MTU: 1024 B\n       second\n"), "{text}");
    }
}
