//! `perf-runner compare`: the same scenario (same seed) under several
//! policies and hardware modes, plus each tenant group alone, side by side.

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

use crate::output::OutputArgs;
use crate::report::Report;
use crate::run_cmd::{parse_hw, run_scenario_with};
use crate::scenario::Scenario;
use perf_dataplane::rnic::sim::RnicProfile;

/// Flags of `compare`.
#[derive(clap::Args)]
pub struct Args {
    /// The scenario file (TOML; see docs/scenarios.md).
    scenario: PathBuf,
    /// Policies to run, comma-separated (each on the NIC's round-robin
    /// scheduling): built-in names, `wasm:NAME` or `.wasm` files, each
    /// optionally with run-time parameters, `NAME:key=value,key=value`
    /// (`perf:max_active_qps=1,perf:max_active_qps=2` is two rows).
    #[arg(long, default_value = "passthrough,perf")]
    policies: Vec<String>,
    /// Hardware modes to run, each with the `passthrough` policy:
    /// `sp`, `ets:W0,W1,...` (traffic classes from the scenario's `tc`).
    /// Separate modes with `;` or repeat the flag, since ETS weights use
    /// commas: `--hw sp --hw ets:3,1`. A plain `--hw sp,ets:3,1` also works.
    #[arg(long)]
    hw: Vec<String>,
    /// Skip the `alone:GROUP` rows.
    #[arg(long)]
    no_alone: bool,
    /// Output files and terminal options.
    #[command(flatten)]
    out: OutputArgs,
    /// The loop's cost in virtual time.
    #[command(flatten)]
    loop_cost: crate::loop_cost::LoopCostArgs,
}

/// Splits `--hw` values into modes: `sp,ets:3,1` is `sp` and `ets:3,1`.
pub fn split_hw(values: &[String]) -> Vec<String> {
    let mut modes: Vec<String> = Vec::new();
    for v in values {
        for part in v.split([';', ',']).map(str::trim).filter(|p| !p.is_empty()) {
            let is_weight = part.chars().all(|c| c.is_ascii_digit());
            match modes.last_mut() {
                Some(last) if is_weight && last.starts_with("ets:") => {
                    last.push(',');
                    last.push_str(part);
                }
                _ => modes.push(part.to_string()),
            }
        }
    }
    modes
}

/// Splits `--policies` values into policy specs: a `key=value` part after
/// a spec that has parameters is one more of its parameters, so
/// `perf:max_active_qps=2,quantum_requests=64,passthrough` is two specs.
pub fn split_policies(values: &[String]) -> Vec<String> {
    let mut specs: Vec<String> = Vec::new();
    for v in values {
        for part in v.split([';', ',']).map(str::trim).filter(|p| !p.is_empty()) {
            let is_param = part.contains('=') && !part.contains(':');
            match specs.last_mut() {
                Some(last) if is_param && last.rsplit_once(':').is_some_and(|(_, t)| t.contains('=')) => {
                    last.push(',');
                    last.push_str(part);
                }
                _ => specs.push(part.to_string()),
            }
        }
    }
    specs
}

/// `compare --json`: the scenario and one report per configuration.
#[derive(Serialize)]
pub struct Comparison<'a> {
    /// Scenario file.
    pub scenario: &'a str,
    /// One report per row of the table (`config` names the row).
    pub runs: &'a [Report],
}

/// Runs the command.
pub fn run(a: Args) -> anyhow::Result<()> {
    a.out.check()?;
    let sc = Scenario::load(&a.scenario)?;
    let name = a.scenario.display().to_string();
    let mut configs: Vec<(String, String, String)> = Vec::new();
    for p in split_policies(&a.policies) {
        // Every policy and its parameters are checked before any row runs.
        perf_dataplane::policy::PolicyHost::load(&p).with_context(|| format!("--policies: {p:?}"))?;
        configs.push((p.clone(), p, "rr".into()));
    }
    for hw in split_hw(&a.hw) {
        configs.push((hw.clone(), "passthrough".into(), hw.clone()));
    }
    anyhow::ensure!(!configs.is_empty(), "nothing to compare: give --policies and/or --hw");
    let groups = if a.no_alone { Vec::new() } else { sc.groups() };
    let opts = crate::run_cmd::RunOptions {
        loop_cost: a.loop_cost.choice()?,
        ..a.out.run_options(&sc, configs.len() + groups.len())
    };
    let mut runs = Vec::new();
    let total = configs.len() + groups.len();
    for (i, (config, policy, hw)) in configs.iter().enumerate() {
        let hw_mode = parse_hw(hw)?;
        if let Some(p) = &opts.progress {
            p.set_message(format!("{config} ({}/{total})", i + 1));
        }
        let mut r =
            run_scenario_with(&sc, policy, &hw_mode, &opts).with_context(|| format!("configuration {config}"))?;
        r.config = config.clone();
        r.scenario = name.clone();
        runs.push(r);
    }
    for (i, (group, first)) in groups.into_iter().enumerate() {
        if let Some(p) = &opts.progress {
            p.set_message(format!("alone:{group} ({}/{total})", configs.len() + i + 1));
        }
        let mut r = run_scenario_with(&sc.alone(first), "passthrough", &parse_hw("rr")?, &opts)
            .with_context(|| format!("{group} alone"))?;
        r.config = format!("alone:{group}");
        r.scenario = name.clone();
        runs.push(r);
    }
    if let Some(p) = &opts.progress {
        p.finish_and_clear();
    }
    // Each configuration's tenants against their entitlements, the demands
    // from the alone rows.
    let group_alone: std::collections::HashMap<String, crate::report::TenantReport> = runs
        .iter()
        .filter_map(|r| r.config.strip_prefix("alone:").and_then(|g| Some((g.to_string(), r.tenants.first()?.clone()))))
        .collect();
    if let (false, Some(profile)) = (group_alone.is_empty(), RnicProfile::by_name(&sc.profile)) {
        let alone = crate::isolation::contract::alone_by_tenant(&sc.tenants, &group_alone);
        for r in runs.iter_mut().filter(|r| !r.config.starts_with("alone:")) {
            crate::isolation::contract::annotate(&profile, &opts.loop_cost.cost, &sc.tenants, &mut r.tenants, &alone);
        }
    }
    if !a.out.quiet {
        print!("{}", table(&name, &runs));
        print!("{}", contract_table(&runs));
    }
    a.out.write_files(&runs, Some(&name), &Comparison { scenario: &name, runs: &runs })?;
    Ok(())
}

/// Each group's entitlement and, per configuration, achieved / entitled
/// (or p99 over alone for a latency-bound group), with PASS / FAIL
/// (docs/isolation.md). Empty without alone rows.
pub fn contract_table(runs: &[Report]) -> String {
    let rows: Vec<&Report> = runs.iter().filter(|r| !r.config.starts_with("alone:")).collect();
    let Some(first) = rows.first() else { return String::new() };
    let groups = first.groups();
    if groups.iter().all(|g| g.contract.is_none()) {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nentitlement: weighted max-min fair share of the NIC's bottlenecks, or the demand alone (docs/isolation.md);"
    );
    let _ = writeln!(s, "pass: achieved >= 0.85 x entitled, or p99 <= 1.5 x alone for a latency-bound tenant");
    let w = rows.iter().map(|r| r.config.len() + 1).max().unwrap_or(0).max(18);
    for g in &groups {
        let Some(v) = &g.contract else { continue };
        let _ = writeln!(
            s,
            "{}: entitled {:.2} Gb/s, {:.3} Mmsg/s (bound by {}){}",
            g.group,
            v.entitled.gbps,
            v.entitled.mpps,
            v.entitled.bound_by,
            if v.latency_bound { ", latency-bound" } else { "" }
        );
        for r in &rows {
            if let Some(v) = r.groups().iter().find(|t| t.group == g.group).and_then(|t| t.contract.clone()) {
                let _ = writeln!(s, "  {:<w$} {}", r.config, crate::report::verdict_text(&v));
            }
        }
    }
    s
}

/// The side-by-side table: a row per configuration; per tenant group its
/// Gb/s, Mmsg/s, mean and p99 latency; then NIC utilization and the
/// dataplane's cost per message.
pub fn table(scenario: &str, runs: &[Report]) -> String {
    let mut groups: Vec<String> = Vec::new();
    for r in runs {
        for g in r.groups() {
            if !groups.contains(&g.group) {
                groups.push(g.group.clone());
            }
        }
    }
    let mut s = String::new();
    let _ = writeln!(s, "scenario: {scenario}   (virtual time, same seed for every row)");
    let _ = writeln!(
        s,
        "Gb/s: payload goodput; Mmsg/s: application messages; mean, p99: latency [us]; NIC: host 0 wire utilization;"
    );
    let _ = writeln!(
        s,
        "loop: the dataplane core's utilization, its work charged to virtual time; WQE/msg, call/msg: WQEs posted and"
    );
    let _ = writeln!(s, "policy hook calls per application message; alone:GROUP: that tenant group alone, passthrough");
    if let Some(r) = runs.first() {
        let _ = writeln!(s, "{}", r.loop_cost.model_line());
    }
    let cw = 36;
    // The config column fits the longest name (policies with parameters).
    let w = runs.iter().map(|r| r.config.len() + 1).max().unwrap_or(0).max(18);
    let mut head1 = format!("{:<w$}", "");
    let mut head2 = format!("{:<w$}", "config");
    for g in &groups {
        let _ = write!(head1, " {:<cw$}", g);
        let _ = write!(head2, " {:>7} {:>8} {:>9} {:>9}", "Gb/s", "Mmsg/s", "mean", "p99");
    }
    let _ = write!(head2, " {:>6} {:>6} {:>8} {:>9}", "NIC", "loop", "WQE/msg", "call/msg");
    let _ = writeln!(s, "{}", head1.trim_end());
    let _ = writeln!(s, "{head2}");
    for r in runs {
        let mut line = format!("{:<w$}", r.config);
        let gs = r.groups();
        for g in &groups {
            match gs.iter().find(|t| &t.group == g) {
                Some(t) => {
                    let _ = write!(
                        line,
                        " {:>7.2} {:>8.3} {:>9.2} {:>9.2}",
                        t.gbps, t.mpps, t.latency_us.mean, t.latency_us.p99
                    );
                }
                None => {
                    let _ = write!(line, " {:>7} {:>8} {:>9} {:>9}", "-", "-", "-", "-");
                }
            }
        }
        let _ = write!(
            line,
            " {:>6.3} {:>6.3} {:>8.2} {:>9.2}",
            r.rnic.utilization, r.loop_cost.utilization, r.cost.wqes_per_msg, r.cost.policy_calls_per_msg
        );
        let _ = writeln!(s, "{line}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hw_modes_split_on_commas_but_keep_ets_weights() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(split_hw(&v(&["sp,ets:3,1"])), v(&["sp", "ets:3,1"]));
        assert_eq!(split_hw(&v(&["ets:1,2;sp", "rr"])), v(&["ets:1,2", "sp", "rr"]));
    }

    #[test]
    fn policies_split_on_commas_but_keep_their_parameters() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            split_policies(&v(&["passthrough,perf:max_active_qps=2,quantum_requests=64,wasm:perf:chunk_bytes=8192"])),
            v(&["passthrough", "perf:max_active_qps=2,quantum_requests=64", "wasm:perf:chunk_bytes=8192"])
        );
        assert_eq!(split_policies(&v(&["wasm:slo", "perf"])), v(&["wasm:slo", "perf"]));
    }
}
