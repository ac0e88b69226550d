//! `perf-runner matrix`: every cell of the victim x attacker grid
//! ([`super::cells`]) under every policy and hardware baseline, each tenant
//! judged against its entitlement ([`super::entitlement`]): a tenant
//! passes when its throughput is at least 0.85 x its entitlement, or, if it
//! is latency-bound (a ping-pong, or a sparse open-loop tenant), when its
//! p99 latency is at most 1.5 x its p99 alone. A cell passes when all its
//! tenants do. Work conservation is measured beside it: the NIC's busiest
//! bottleneck over the window, against passthrough's in the same cell.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use perf_dataplane::rnic::sim::RnicProfile;
use serde::Serialize;

use super::cells::{cells, Cell};
use super::contract::{entitlements, judge, Verdict, LATENCY_CEILING, THROUGHPUT_FLOOR};
use super::entitlement::{Costs, NIC_BOTTLENECKS};
use super::random::random_cells;
use crate::compare_cmd::{split_hw, split_policies};
use crate::loop_cost::LoopChoice;
use crate::report::{Report, TenantReport};
use crate::run_cmd::{parse_hw, run_scenario_with, RunOptions};
use crate::scenario::Scenario;

/// Utilization a policy must keep, as a fraction of passthrough's, in a
/// cell where the tenants' demands exceed a bottleneck.
pub const WORK_CONSERVATION_FLOOR: f64 = 0.95;

/// Flags of `matrix`.
#[derive(clap::Args)]
pub struct Args {
    /// Policies to judge (comma-separated, with parameters as in `run`).
    #[arg(long, num_args = 1.., default_value = "passthrough,perf,justitia,fairshare")]
    policies: Vec<String>,
    /// Hardware baselines (passthrough on the NIC's traffic classes, the
    /// victim in class 1): `sp`, `ets:W0,W1`; `none` for none.
    #[arg(long, num_args = 1.., default_value = "sp,ets:1,1")]
    hw: Vec<String>,
    /// RNIC profile of every cell.
    #[arg(long, default_value = "cx6-100g")]
    profile: String,
    /// Length of each run, ms of virtual time. A tenant's goodput counts
    /// completed messages, so a message still in flight when the window
    /// closes is not counted: under a fair split, 16 QPs of 1 MB messages
    /// take 2.7 ms per message, and the window has to be long beside that
    /// (20 ms by default; at 3 ms such tenants read 0.6 of what they sent,
    /// and at 10 ms a weight-1 tenant of 16 such QPs, held to a quarter of
    /// the wire, 0.74 of its share).
    #[arg(long, default_value_t = 22.0)]
    duration_ms: f64,
    /// Warm-up of each run, ms (figures count from here).
    #[arg(long, default_value_t = 2.0)]
    warmup_ms: f64,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only the CI subset of cells (every victim and attacker at least once).
    #[arg(long)]
    quick: bool,
    /// Only cells whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Instead of the fixed grid, N cells drawn at random from the whole
    /// space of tenant shapes (operation, kind, size, QPs, depth, post
    /// list, weight; one victim and one to three attackers each), so that
    /// a policy is judged on mixes it was not tuned for
    /// (docs/isolation.md#random-mixes).
    #[arg(long, value_name = "N", conflicts_with = "quick", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    random: Option<u32>,
    /// The seed the random cells are drawn from (with --random; the runs
    /// themselves use --seed).
    #[arg(long, value_name = "SEED", default_value_t = 1, requires = "random")]
    mix_seed: u64,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Print every tenant's figures under each cell.
    #[arg(long, short)]
    verbose: bool,
    /// Write the whole result as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the policy x cell heatmap as SVG.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Exit non-zero unless this policy passes at least this fraction of
    /// the cells, as `POLICY=FRACTION` (e.g. `fairshare=0.95`).
    #[arg(long, value_name = "POLICY=FRACTION")]
    require: Vec<String>,
    /// What the dataplane loop's work costs in virtual time, in every run
    /// and alone run: `zero` (a free loop, the default here, so that the
    /// cells judge the policies' mechanisms alone), `measured` (the
    /// reference machine's figures, docs/loop-cost.md) or a file
    /// `perf-runner calibrate-loop` wrote. Charged, the loop is a
    /// bottleneck of the contract beside the NIC's.
    #[arg(long = "loop-cost", value_name = "zero|measured|FILE", default_value = "zero")]
    loop_cost: String,
}

/// One tenant of one row, judged.
#[derive(Debug, Clone, Serialize)]
pub struct TenantVerdict {
    /// Tenant name (`V:` victim, `A:`/`B:` attackers).
    pub name: String,
    /// Achieved, millions of messages per second.
    pub mpps: f64,
    /// Achieved payload goodput, Gb/s.
    pub gbps: f64,
    /// p99 latency, us.
    pub p99_us: f64,
    /// p99 latency alone, us.
    pub alone_p99_us: f64,
    /// Its entitlement and verdict.
    pub verdict: Verdict,
}

/// One configuration in one cell.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Policy or hardware mode.
    pub config: String,
    /// Every tenant passed.
    pub pass: bool,
    /// Utilization of host 0's wire, host 1's wire and host 0's
    /// scheduler over the window.
    pub utilization: [f64; 3],
    /// The busiest of them over passthrough's busiest in this cell.
    pub vs_passthrough: f64,
    /// Per tenant.
    pub tenants: Vec<TenantVerdict>,
}

/// One cell's results.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// Cell name.
    pub cell: String,
    /// The tenants' demands exceed some bottleneck (someone is backlogged).
    pub backlogged: bool,
    /// One row per configuration.
    pub rows: Vec<Row>,
}

/// A configuration's line of the summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Policy or hardware mode.
    pub config: String,
    /// Cells passed.
    pub passed: usize,
    /// Cells run.
    pub cells: usize,
    /// Median utilization (busiest bottleneck) over backlogged cells.
    pub median_utilization: f64,
    /// Minimum of it.
    pub min_utilization: f64,
    /// Backlogged cells below the work-conservation floor (vs passthrough).
    pub not_work_conserving: usize,
}

/// The whole matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    /// RNIC profile.
    pub profile: String,
    /// The loop's cost model every run was charged (`zero`: a free loop).
    pub loop_cost: String,
    /// Run length and warm-up, ms.
    pub duration_ms: f64,
    /// Warm-up, ms.
    pub warmup_ms: f64,
    /// Per configuration.
    pub summary: Vec<Summary>,
    /// Per cell.
    pub cells: Vec<CellResult>,
}

enum Job {
    Alone(String),
    Run(usize, usize),
}

/// Runs the command.
pub fn run(a: Args) -> anyhow::Result<()> {
    let profile = RnicProfile::by_name(&a.profile).with_context(|| {
        format!("--profile {:?}: unknown RNIC profile (known: {})", a.profile, RnicProfile::NAMES.join(", "))
    })?;
    anyhow::ensure!(
        a.warmup_ms >= 0.0 && a.duration_ms > a.warmup_ms,
        "--duration-ms must exceed --warmup-ms (got {} and {})",
        a.duration_ms,
        a.warmup_ms
    );
    let mut grid = match a.random {
        Some(n) => random_cells(&a.profile, a.duration_ms, a.warmup_ms, a.seed, a.mix_seed, n as usize),
        None => cells(&a.profile, a.duration_ms, a.warmup_ms, a.seed, a.quick),
    };
    if let Some(f) = &a.filter {
        grid.retain(|c| c.name.contains(f.as_str()));
    }
    anyhow::ensure!(!grid.is_empty(), "no cell matches --filter {:?}", a.filter.as_deref().unwrap_or(""));
    let mut configs: Vec<(String, String, String)> = vec![("passthrough".into(), "passthrough".into(), "rr".into())];
    for p in split_policies(&a.policies) {
        perf_dataplane::policy::PolicyHost::load(&p).with_context(|| format!("--policies: {p:?}"))?;
        if !configs.iter().any(|c| c.0 == p) {
            configs.push((p.clone(), p, "rr".into()));
        }
    }
    for hw in split_hw(&a.hw).into_iter().filter(|h| h != "none") {
        parse_hw(&hw)?;
        configs.push((hw.clone(), "passthrough".into(), hw));
    }
    let requires = a.require.iter().map(|r| parse_require(r, &configs)).collect::<anyhow::Result<Vec<_>>>()?;
    let loop_cost = LoopChoice::parse(&a.loop_cost).context("--loop-cost")?;
    let m = run_matrix(&grid, &configs, &profile, &loop_cost, a.threads)?;
    print!("{}", table(&m, a.verbose));
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&m)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.svg {
        std::fs::write(path, heatmap(&m)).with_context(|| format!("writing {}", path.display()))?;
    }
    for (config, floor) in requires {
        let s = m.summary.iter().find(|s| s.config == config).context("required policy missing from the summary")?;
        let got = s.passed as f64 / s.cells.max(1) as f64;
        anyhow::ensure!(
            got >= floor,
            "{config} passed {}/{} cells ({got:.3}), below --require {floor}",
            s.passed,
            s.cells
        );
    }
    Ok(())
}

fn parse_require(r: &str, configs: &[(String, String, String)]) -> anyhow::Result<(String, f64)> {
    let (p, f) = r.rsplit_once('=').with_context(|| format!("--require {r:?}: expected POLICY=FRACTION"))?;
    let f: f64 = f.parse().with_context(|| format!("--require {r:?}: {f:?} is not a fraction"))?;
    anyhow::ensure!((0.0..=1.0).contains(&f), "--require {r:?}: the fraction must be 0 to 1");
    anyhow::ensure!(configs.iter().any(|c| c.0 == p), "--require {r:?}: {p:?} is not among the configurations run");
    Ok((p.to_string(), f))
}

/// Runs every cell under every configuration (`(row name, policy, hw)`)
/// on `threads` workers and judges them.
pub fn run_matrix(
    grid: &[Cell],
    configs: &[(String, String, String)],
    profile: &RnicProfile,
    loop_cost: &LoopChoice,
    threads: Option<usize>,
) -> anyhow::Result<Matrix> {
    // Alone runs, one per distinct tenant (a tenant keeps its name across cells).
    let mut alone_specs: HashMap<String, Scenario> = HashMap::new();
    for c in grid {
        for i in 0..c.scenario.tenants.len() {
            alone_specs.entry(c.scenario.tenants[i].name.clone()).or_insert_with(|| c.scenario.alone(i));
        }
    }
    let mut jobs: Vec<Job> = alone_specs.keys().cloned().map(Job::Alone).collect();
    // Longest first: the many-QP cells.
    let mut runs: Vec<(usize, usize)> = (0..grid.len()).flat_map(|c| (0..configs.len()).map(move |k| (c, k))).collect();
    runs.sort_by_key(|&(c, _)| std::cmp::Reverse(grid[c].scenario.tenants.iter().map(|t| t.qps).sum::<u32>()));
    jobs.extend(runs.into_iter().map(|(c, k)| Job::Run(c, k)));
    let alone: Mutex<HashMap<String, TenantReport>> = Mutex::new(HashMap::new());
    let reports: Mutex<HashMap<(usize, usize), Report>> = Mutex::new(HashMap::new());
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let workers = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    let done = AtomicUsize::new(0);
    let verbose_progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let result = match job {
                    Job::Alone(name) => run_one(&alone_specs[name], "passthrough", "rr", loop_cost).map(|r| {
                        if let Some(t) = r.tenants.into_iter().next() {
                            lock(&alone).insert(name.clone(), t);
                        }
                    }),
                    Job::Run(c, k) => {
                        let (_, policy, hw) = &configs[*k];
                        run_one(&grid[*c].scenario, policy, hw, loop_cost)
                            .with_context(|| format!("cell {:?} under {}", grid[*c].name, configs[*k].0))
                            .map(|r| {
                                lock(&reports).insert((*c, *k), r);
                            })
                    }
                };
                if let Err(e) = result {
                    lock(&failure).get_or_insert(e);
                    next.store(jobs.len(), Ordering::Relaxed);
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if verbose_progress && n.is_multiple_of(16) {
                    eprint!("\r{n}/{} runs", jobs.len());
                }
            });
        }
    });
    if verbose_progress {
        eprint!("\r");
    }
    if let Some(e) = lock(&failure).take() {
        return Err(e);
    }
    let alone = alone.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut reports = reports.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut cells_out = Vec::new();
    for (c, cell) in grid.iter().enumerate() {
        let sc = &cell.scenario;
        let entitled = entitlements(profile, &loop_cost.cost, &sc.tenants, &alone);
        let costs: Vec<Costs> = sc.tenants.iter().map(|t| Costs::of(profile, t, &loop_cost.cost)).collect();
        let backlogged = (0..NIC_BOTTLENECKS)
            .any(|r| costs.iter().zip(&entitled).map(|(c, e)| e.demand_mpps * 1e6 * c.per_msg[r]).sum::<f64>() > 0.9);
        let window = ((sc.warmup_ms * 1e6) as u64, (sc.duration_ms * 1e6) as u64);
        let mut rows = Vec::new();
        let mut base = 0.0;
        for (k, (config, _, _)) in configs.iter().enumerate() {
            let Some(r) = reports.remove(&(c, k)) else { continue };
            let utilization = r.nic_timeline.window_mean(window.0, window.1);
            let busiest = utilization.iter().copied().fold(0.0, f64::max);
            if k == 0 {
                base = busiest;
            }
            let tenants: Vec<TenantVerdict> = sc
                .tenants
                .iter()
                .zip(&entitled)
                .map(|(spec, e)| {
                    let got = r.tenants.iter().find(|t| t.name == spec.name);
                    let solo = alone.get(&spec.name);
                    TenantVerdict {
                        name: spec.name.clone(),
                        mpps: got.map_or(0.0, |t| t.mpps),
                        gbps: got.map_or(0.0, |t| t.gbps),
                        p99_us: got.map_or(0.0, |t| t.latency_us.p99),
                        alone_p99_us: solo.map_or(0.0, |t| t.latency_us.p99),
                        verdict: judge(spec.kind, e, got, solo),
                    }
                })
                .collect();
            rows.push(Row {
                config: config.clone(),
                pass: tenants.iter().all(|t| t.verdict.pass),
                utilization,
                vs_passthrough: if base > 0.0 { busiest / base } else { 1.0 },
                tenants,
            });
        }
        cells_out.push(CellResult { cell: cell.name.clone(), backlogged, rows });
    }
    let summary = configs.iter().map(|(config, _, _)| summarize(config, &cells_out)).collect();
    // Every cell of a grid runs for the same time.
    let (duration_ms, warmup_ms) = grid.first().map_or((0.0, 0.0), |c| (c.scenario.duration_ms, c.scenario.warmup_ms));
    Ok(Matrix {
        profile: profile.name.to_string(),
        loop_cost: loop_cost.source.clone(),
        duration_ms,
        warmup_ms,
        summary,
        cells: cells_out,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn run_one(sc: &Scenario, policy: &str, hw: &str, loop_cost: &LoopChoice) -> anyhow::Result<Report> {
    run_scenario_with(sc, policy, &parse_hw(hw)?, &RunOptions { loop_cost: loop_cost.clone(), ..RunOptions::default() })
}

fn summarize(config: &str, cells: &[CellResult]) -> Summary {
    let rows: Vec<(&CellResult, &Row)> =
        cells.iter().filter_map(|c| c.rows.iter().find(|r| r.config == config).map(|r| (c, r))).collect();
    let mut util: Vec<f64> = rows
        .iter()
        .filter(|(c, _)| c.backlogged)
        .map(|(_, r)| r.utilization.iter().copied().fold(0.0, f64::max))
        .collect();
    util.sort_by(f64::total_cmp);
    Summary {
        config: config.to_string(),
        passed: rows.iter().filter(|(_, r)| r.pass).count(),
        cells: rows.len(),
        median_utilization: util.get(util.len() / 2).copied().unwrap_or(0.0),
        min_utilization: util.first().copied().unwrap_or(0.0),
        not_work_conserving: rows
            .iter()
            .filter(|(c, r)| c.backlogged && r.vs_passthrough < WORK_CONSERVATION_FLOOR)
            .count(),
    }
}

/// The worst tenant of a row, as a short mark: `ok`, `0.41` (throughput
/// ratio) or `x2.3` (p99 over alone).
fn mark(r: &Row) -> String {
    if r.pass {
        return "ok".into();
    }
    let worst = r.tenants.iter().map(|t| &t.verdict).filter(|v| !v.pass).map(|v| {
        if v.latency_bound {
            let x = if v.p99_over_alone > 0.0 && v.p99_over_alone.is_finite() { v.p99_over_alone } else { 999.0 };
            (1.0 / x.max(1e-9), format!("x{:.1}", x.min(999.0)))
        } else {
            (v.ratio, format!("{:.2}", v.ratio))
        }
    });
    worst.min_by(|a, b| a.0.total_cmp(&b.0)).map_or_else(|| "fail".into(), |w| w.1)
}

/// The printed form: one line per cell (a mark per configuration), then
/// the summary.
pub fn table(m: &Matrix, verbose: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let configs: Vec<&str> = m.summary.iter().map(|x| x.config.as_str()).collect();
    let w = m.cells.iter().map(|c| c.cell.len()).max().unwrap_or(4).max(4) + 1;
    let cw = configs.iter().map(|c| c.len()).max().unwrap_or(6).max(6) + 1;
    let _ = writeln!(
        s,
        "matrix: {} cells, profile {}, loop cost {}, {} ms runs ({} ms warm-up); per tenant: pass if Gb/s & Mmsg/s >= {THROUGHPUT_FLOOR} x entitlement,",
        m.cells.len(),
        m.profile,
        m.loop_cost,
        m.duration_ms,
        m.warmup_ms
    );
    let _ = writeln!(
        s,
        "or p99 <= {LATENCY_CEILING} x alone if latency-bound; cell mark: ok, worst throughput ratio (0.41) or worst p99 over alone (x2.3); * = backlogged"
    );
    let mut head = format!("{:<w$}", "cell");
    for c in &configs {
        let _ = write!(head, " {c:>cw$}");
    }
    let _ = writeln!(s, "{head}");
    for c in &m.cells {
        let name = if c.backlogged { format!("{}*", c.cell) } else { c.cell.clone() };
        let mut line = format!("{name:<w$}");
        for cfg in &configs {
            let mk = c.rows.iter().find(|r| r.config == *cfg).map_or("-".into(), mark);
            let _ = write!(line, " {mk:>cw$}");
        }
        let _ = writeln!(s, "{line}");
        if verbose {
            for r in &c.rows {
                for t in &r.tenants {
                    let _ = writeln!(
                        s,
                        "    {:<12} {:<30} entitled {:>8.3} Mmsg/s {:>7.2} Gb/s ({:<14}) got {:>8.3} {:>7.2} ratio {:>5.2} p99 {:>8.2} us alone {:>7.2}{}",
                        r.config,
                        t.name,
                        t.verdict.entitled.mpps,
                        t.verdict.entitled.gbps,
                        t.verdict.entitled.bound_by,
                        t.mpps,
                        t.gbps,
                        t.verdict.ratio,
                        t.p99_us,
                        t.alone_p99_us,
                        if t.verdict.pass { "" } else { "  FAIL" }
                    );
                }
                let _ = writeln!(
                    s,
                    "    {:<12} utilization wire {:.3} responder {:.3} wqe {:.3} (vs passthrough {:.3})",
                    r.config, r.utilization[0], r.utilization[1], r.utilization[2], r.vs_passthrough
                );
            }
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<cw$} {:>7} {:>7} {:>9} {:>9} {:>8}",
        "config", "passed", "cells", "util p50", "util min", "not-wc"
    );
    for x in &m.summary {
        let _ = writeln!(
            s,
            "{:<cw$} {:>7} {:>7} {:>9.3} {:>9.3} {:>8}",
            x.config, x.passed, x.cells, x.median_utilization, x.min_utilization, x.not_work_conserving
        );
    }
    let _ = writeln!(
        s,
        "(util: the busiest NIC bottleneck over the window in backlogged cells; not-wc: backlogged cells below {WORK_CONSERVATION_FLOOR} x passthrough's)"
    );
    s
}

/// The policy x cell heatmap as a self-contained SVG: green where a cell
/// passed, shades of red by how far its worst tenant fell short.
pub fn heatmap(m: &Matrix) -> String {
    use std::fmt::Write;
    let (cell_w, cell_h, left, top) = (14usize, 22usize, 120usize, 28usize);
    let configs: Vec<&str> = m.summary.iter().map(|x| x.config.as_str()).collect();
    let width = left + cell_w * m.cells.len() + 20;
    let height = top + cell_h * configs.len() + 40;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="4" y="16">isolation matrix, profile {}: green = every tenant within its entitlement; red = worst shortfall (darker = worse); columns are cells (see the table)</text>"#,
        m.profile
    );
    for (k, cfg) in configs.iter().enumerate() {
        let y = top + k * cell_h;
        let sm = &m.summary[k];
        let _ = writeln!(s, r#"<text x="4" y="{}">{} {}/{}</text>"#, y + 15, cfg, sm.passed, sm.cells);
        for (i, c) in m.cells.iter().enumerate() {
            let Some(r) = c.rows.iter().find(|r| r.config == *cfg) else { continue };
            let severity = r
                .tenants
                .iter()
                .map(|t| {
                    let v = &t.verdict;
                    if v.pass {
                        0.0
                    } else if v.latency_bound {
                        (1.0 - LATENCY_CEILING / v.p99_over_alone.max(1e-9)).clamp(0.2, 1.0)
                    } else {
                        (1.0 - v.ratio / THROUGHPUT_FLOOR).clamp(0.2, 1.0)
                    }
                })
                .fold(0.0, f64::max);
            let color = if r.pass {
                "#3a9a4a".to_string()
            } else {
                let g = (200.0 * (1.0 - severity)) as u8;
                format!("#d8{g:02x}{g:02x}")
            };
            let _ = writeln!(
                s,
                r#"<rect x="{}" y="{y}" width="{}" height="{}" fill="{color}"><title>{} / {}: {}</title></rect>"#,
                left + i * cell_w,
                cell_w - 1,
                cell_h - 2,
                c.cell,
                cfg,
                mark(r)
            );
        }
    }
    let _ = writeln!(s, "</svg>");
    s
}
