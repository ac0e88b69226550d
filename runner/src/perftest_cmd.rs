//! perftest-style microbenchmarks on the simulated NIC: `write-bw`,
//! `write-lat`, `send-bw`, `send-lat`, `read-bw`, `read-lat`, with
//! perftest's flags and column layout, so scripts that parse `ib_write_bw`
//! output parse ours.
//!
//! Alone, the test runs perftest's own generators (`perftest::bw`,
//! `perftest::lat`) straight on the NIC, as `ib_*` tools do. With
//! `--with SCENARIO` the test becomes one more tenant of that scenario,
//! run through the dataplane under `--policy`, beside the scenario's
//! tenants (the co-runners).

use std::path::PathBuf;

use anyhow::Context;
use perf_dataplane::perftest::bw::{BwClient, BwConfig, BwServer};
use perf_dataplane::perftest::calibrate::LatStats;
use perf_dataplane::perftest::lat::{LatClient, LatConfig, LatServer};
use perf_dataplane::perftest::{run_virtual, App, Side, TestOp};
use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric};

use crate::report::TenantReport;
use crate::run_cmd::{parse_hw, run_scenario_with, RunOptions};
use crate::scenario::{Kind, Scenario, TenantSpec};

/// perftest's separator line.
pub const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";
/// perftest's bandwidth header with `--report_gbits`.
pub const BW_HEADER_GBITS: &str = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// perftest's bandwidth header (MB/s = 2^20 bytes/s).
pub const BW_HEADER_MB: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
/// perftest's latency header.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Bandwidth or latency test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `ib_*_bw`.
    Bw,
    /// `ib_*_lat`.
    Lat,
}

/// perftest's flags (those that make sense on the simulator).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Message size in bytes (`-s`); default 65536 for bw, 2 for lat.
    #[arg(short = 's', long = "size")]
    size: Option<u32>,
    /// Number of QPs (`-q`, bw only).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// WRs per post list / doorbell (`-l`, bw only).
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    post_list: u32,
    /// Messages outstanding per QP (`-t`, bw only).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Signal one completion every this many WRs (`--cq-mod`, bw only).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    cq_mod: u32,
    /// Messages up to this size are posted inline (`-I`).
    #[arg(short = 'I', long = "inline_size", default_value_t = 220)]
    inline: u32,
    /// Iterations to measure (`-n`); default 5000 for bw, 1000 for lat.
    /// Not with `--with` (that run lasts its scenario's window or `-D`).
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Measure for this many seconds of virtual time instead of `-n`
    /// iterations (`-D`; fractions allowed, e.g. `-D 0.02`).
    #[arg(short = 'D', long = "duration")]
    duration: Option<f64>,
    /// All sizes from 2 B to 8 MiB, powers of two (`-a`).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Bandwidth in Gb/s (10^9 bit/s) instead of MB/s (`--report_gbits`).
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Policy of the dataplane when running beside `--with`.
    #[arg(long, default_value = "passthrough")]
    policy: String,
    /// Run as one more tenant of this scenario (its tenants are the
    /// co-runners), through the dataplane under `--policy`.
    #[arg(long = "with", value_name = "SCENARIO.toml")]
    with: Option<PathBuf>,
    /// Hardware traffic-class scheduling (`rr`, `sp`, `ets:W0,W1,...`).
    #[arg(long, default_value = "rr")]
    hw: String,
    /// Traffic class of the test's QPs (for `--hw sp` / `ets`).
    #[arg(long, default_value_t = 0)]
    tc: u8,
    /// Random seed of the simulator (alone).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// One bandwidth row.
struct BwRow {
    bytes: u32,
    iterations: u64,
    peak_bps: f64,
    avg_bps: f64,
    mpps: f64,
}

/// Warm-up before measuring, ns of virtual time.
const WARMUP_NS: u64 = 1_000_000;
/// Step of the alone run (checks of `-n`, samples for the peak), ns.
const STEP_NS: u64 = 100_000;

/// The highest rate over any stretch of at least `span` of a cumulative
/// series of `(t, count)` samples: perftest's BW peak, over a tenth of
/// the measurement window here.
fn peak(samples: &[(u64, u64)], span: u64) -> f64 {
    let mut best = 0.0f64;
    let mut j = 0;
    for i in 0..samples.len() {
        while j < samples.len() && samples[j].0 < samples[i].0 + span.max(1) {
            j += 1;
        }
        if j == samples.len() {
            break;
        }
        let (t0, c0) = samples[i];
        let (t1, c1) = samples[j];
        best = best.max((c1 - c0) as f64 / (t1 - t0) as f64);
    }
    best
}

impl Args {
    fn sizes(&self, test: Test) -> Vec<u32> {
        if self.all {
            (1..=23).map(|k| 1u32 << k).collect()
        } else {
            vec![self.size.unwrap_or(if test == Test::Bw { 65536 } else { 2 })]
        }
    }

    fn iters(&self, test: Test) -> u64 {
        self.iters.unwrap_or(if test == Test::Bw { 5000 } else { 1000 })
    }

    /// The run's end: `-D` if given, else a bound that `-n` stops before.
    fn end_ns(&self) -> u64 {
        match self.duration {
            Some(d) => WARMUP_NS + (d * 1e9) as u64,
            None => WARMUP_NS + 60_000_000_000,
        }
    }

    fn bw_alone(&self, op: TestOp, size: u32) -> anyhow::Result<BwRow> {
        let f = SimFabric::new(RnicProfile::cx6_100g(), 2, self.seed, ClockMode::Virtual);
        let hw = parse_hw(&self.hw)?;
        f.set_tc_scheduler(0, hw.clone());
        f.set_tc_scheduler(1, hw);
        let qps = self.qps as usize;
        let buf = size.max(64) as usize;
        let mut a = Side::new(f.nic(0), qps, buf, self.tc, self.tx_depth)?;
        let mut b = Side::new(f.nic(1), qps, buf, self.tc, self.tx_depth)?;
        a.connect(&mut b)?;
        let remote = b.mr.remote(0);
        let cfg = BwConfig {
            op,
            size,
            tx_depth: self.tx_depth,
            post_list: self.post_list,
            cq_mod: self.cq_mod,
            inline_max: self.inline,
        };
        let end = self.end_ns();
        let mut client = BwClient::new(a, remote, cfg, WARMUP_NS, end);
        let mut server = (op == TestOp::Send).then(|| BwServer::new(b, size, self.tx_depth));
        let want = self.duration.is_none().then(|| self.iters(Test::Bw));
        let mut samples = Vec::new();
        let mut t = 0;
        while t < end {
            t = (t + STEP_NS).min(end);
            let mut apps: Vec<&mut dyn App> = vec![&mut client];
            if let Some(s) = server.as_mut() {
                apps.push(s);
            }
            run_virtual(&f, &mut apps, t).context("simulation failed")?;
            let r = client.result();
            samples.push((r.window_ns, r.messages));
            if want.is_some_and(|n| r.messages >= n) {
                break;
            }
        }
        let r = client.result();
        let msg_rate = peak(&samples, r.window_ns / 10);
        Ok(BwRow {
            bytes: size,
            iterations: r.messages,
            peak_bps: msg_rate * size as f64 * 8e9,
            avg_bps: r.gbps() * 1e9,
            mpps: r.mpps(),
        })
    }

    fn lat_alone(&self, op: TestOp, size: u32) -> anyhow::Result<LatStats> {
        let f = SimFabric::new(RnicProfile::cx6_100g(), 2, self.seed, ClockMode::Virtual);
        let hw = parse_hw(&self.hw)?;
        f.set_tc_scheduler(0, hw.clone());
        f.set_tc_scheduler(1, hw);
        let cfg = LatConfig { op, size, inline_max: self.inline };
        let buf = 2 * size as usize;
        let mut a = Side::new(f.nic(0), 1, buf, self.tc, 16)?;
        let mut b = Side::new(f.nic(1), 1, buf, self.tc, 16)?;
        a.connect(&mut b)?;
        let (ra, rb) = (a.mr.remote(size as usize), b.mr.remote(size as usize));
        let end = self.end_ns();
        let mut client = LatClient::new(a, rb, cfg, WARMUP_NS, end);
        let mut server = LatServer::new(b, ra, cfg);
        let want = self.duration.is_none().then(|| self.iters(Test::Lat));
        let mut t = 0;
        while t < end {
            t = (t + STEP_NS).min(end);
            run_virtual(&f, &mut [&mut client, &mut server], t).context("simulation failed")?;
            if want.is_some_and(|n| client.histogram().len() >= n) {
                break;
            }
        }
        Ok(LatStats::from_histogram(client.histogram()))
    }

    /// The test as one more tenant of the `--with` scenario; returns the
    /// victim's report and the co-runners'.
    fn beside(&self, test: Test, op: TestOp, size: u32) -> anyhow::Result<(TenantReport, Vec<TenantReport>)> {
        let path = self.with.as_ref().context("no --with scenario")?;
        let mut sc = Scenario::load(path)?;
        if let Some(d) = self.duration {
            sc.duration_ms = sc.warmup_ms + d * 1e3;
        }
        let kind = if test == Test::Bw { Kind::Bw } else { Kind::Lat };
        let mut victim = TenantSpec::new("victim", kind, op, size);
        if test == Test::Bw {
            victim.qps = self.qps;
            victim.depth = self.tx_depth;
            victim.post_list = self.post_list.min(self.tx_depth);
        }
        victim.tc = self.tc;
        sc.tenants.push(victim);
        let mut r = run_scenario_with(&sc, &self.policy, &parse_hw(&self.hw)?, &RunOptions::default())?;
        let v = r.tenants.pop().context("the victim has no report")?;
        Ok((v, r.tenants))
    }
}

fn op_name(op: TestOp) -> &'static str {
    match op {
        TestOp::Write => "RDMA_Write",
        TestOp::Send => "Send",
        TestOp::Read => "RDMA_Read",
    }
}

/// Runs one microbenchmark.
pub fn run(a: Args, test: Test, op: TestOp) -> anyhow::Result<()> {
    anyhow::ensure!(a.size != Some(0), "-s: the message size must be at least 1 byte");
    anyhow::ensure!(a.qps >= 1 && a.qps <= 4096, "-q: 1 to 4096 QPs");
    anyhow::ensure!(a.tx_depth >= 1 && a.tx_depth <= 4096, "-t: tx depth 1 to 4096");
    anyhow::ensure!(a.post_list >= 1 && a.post_list <= a.tx_depth, "-l: post list 1 to the tx depth (-t)");
    anyhow::ensure!(a.duration.is_none_or(|d| d > 0.0 && d <= 3600.0), "-D: 0 to 3600 seconds");
    anyhow::ensure!(a.iters.is_none_or(|n| n >= 1), "-n: at least one iteration");
    anyhow::ensure!(
        !(a.with.is_some() && a.iters.is_some()),
        "-n: beside a scenario (--with) the test runs for the scenario's window or -D seconds"
    );
    let kind = if test == Test::Bw { "BW" } else { "Latency" };
    println!("{RESULT_LINE}");
    println!("                    {} {kind} Test (simulated cx6-100g, virtual time)", op_name(op));
    println!(" Number of qps   : {}\t\tTransport type : IB", if test == Test::Bw { a.qps } else { 1 });
    if test == Test::Bw {
        println!(" TX depth        : {}\t\tPost List      : {}", a.tx_depth, a.post_list);
    }
    match &a.with {
        Some(p) => println!(" Beside          : {}\t\tPolicy         : {}", p.display(), a.policy),
        None => println!(" Alone on the NIC (no dataplane)"),
    }
    println!("{RESULT_LINE}");
    match test {
        Test::Bw => println!("{}", if a.report_gbits { BW_HEADER_GBITS } else { BW_HEADER_MB }),
        Test::Lat => println!("{LAT_HEADER}"),
    }
    let mut beside = Vec::new();
    for size in a.sizes(test) {
        match test {
            Test::Bw => {
                let row = if a.with.is_some() {
                    let (v, others) = a.beside(test, op, size)?;
                    beside.push((size, others));
                    let tl = &v.timeline;
                    let mut cum = Vec::with_capacity(tl.bytes.len());
                    let mut acc = 0u64;
                    for (i, b) in tl.bytes.iter().enumerate() {
                        acc += b;
                        cum.push(((i as u64 + 1) * tl.bucket_ns, acc));
                    }
                    let span = cum.last().map_or(0, |c| c.0) / 10;
                    BwRow {
                        bytes: size,
                        iterations: v.completed,
                        peak_bps: peak(&cum, span) * 8e9,
                        avg_bps: v.gbps * 1e9,
                        mpps: v.mpps,
                    }
                } else {
                    a.bw_alone(op, size)?
                };
                let unit = |bps: f64| if a.report_gbits { bps / 1e9 } else { bps / 8.0 / 1048576.0 };
                println!(
                    " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                    row.bytes,
                    row.iterations,
                    unit(row.peak_bps),
                    unit(row.avg_bps),
                    row.mpps
                );
            }
            Test::Lat => {
                let s = if a.with.is_some() {
                    let (v, others) = a.beside(test, op, size)?;
                    beside.push((size, others));
                    v.hist.as_ref().map(LatStats::from_histogram).context("the victim has no histogram")?
                } else {
                    a.lat_alone(op, size)?
                };
                println!(
                    " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
                    size, s.count, s.min_us, s.max_us, s.p50_us, s.mean_us, s.stdev_us, s.p99_us, s.p999_us
                );
            }
        }
    }
    println!("{RESULT_LINE}");
    for (size, others) in beside {
        for t in others {
            println!(
                " co-runner at {size} B: {:<12} {:.2} Gb/s  {:.3} Mmsg/s  mean {:.2} us  p99 {:.2} us",
                t.name, t.gbps, t.mpps, t.latency_us.mean, t.latency_us.p99
            );
        }
    }
    Ok(())
}
