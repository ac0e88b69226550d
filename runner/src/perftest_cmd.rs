//! perftest-style microbenchmarks on the simulated NIC: `write-bw`,
//! `write-lat`, `send-bw`, `send-lat`, `read-bw`, `read-lat`, with
//! perftest's flags and column layout, so scripts that parse `ib_write_bw`
//! output parse ours.
//!
//! Alone, the test runs perftest's own generators (`traffic::bw`,
//! `traffic::lat`) straight on the NIC, as `ib_*` tools do. With
//! `--with SCENARIO` the test becomes one more tenant of that scenario,
//! run through the dataplane under `--policy`, beside the scenario's
//! tenants (the co-runners). With `--connect SOCKET` the test is a client
//! process of `perf-runner serve` ([`connect`]): one more tenant of the
//! daemon, under its policy, in wall-clock time. The three ways share
//! this module's flags, checks and report.

mod connect;

use std::path::PathBuf;

use anyhow::Context;
use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric};
use perf_dataplane::traffic::bw::{BwClient, BwConfig, BwServer};
use perf_dataplane::traffic::calibrate::LatStats;
use perf_dataplane::traffic::lat::{LatClient, LatConfig, LatServer};
use perf_dataplane::traffic::{run_virtual, App, Side, TestOp};

use crate::report::TenantReport;
use crate::run_cmd::{parse_hw, run_scenario_with, RunOptions};
use crate::scenario::{Kind, Scenario, TenantSpec, MAX_SIZE};

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
    /// Policy of the dataplane when running beside `--with` (default
    /// passthrough); a client of the daemon (`--connect`) runs under the
    /// daemon's.
    #[arg(long)]
    policy: Option<String>,
    /// Run as one more tenant of this scenario (its tenants are the
    /// co-runners), through the dataplane under `--policy`.
    #[arg(long = "with", value_name = "SCENARIO.toml")]
    with: Option<PathBuf>,
    /// Run as a client process of `perf-runner serve` listening on this
    /// socket: the test's QPs are a tenant of the daemon, under its policy,
    /// beside its other clients; time is the wall clock (`-D` is seconds of
    /// it, after a 0.2 s warm-up).
    #[arg(long, value_name = "SOCKET", conflicts_with_all = ["with", "hw", "seed", "policy"])]
    connect: Option<PathBuf>,
    /// With `--connect`: the tenant to be (default: the one the daemon's
    /// tenants file gives this user, or one named after the process).
    #[arg(long, value_name = "NAME", requires = "connect")]
    tenant: Option<String>,
    /// Hardware traffic-class scheduling (`rr`, `sp`, `ets:W0,W1,...`).
    #[arg(long, default_value = "rr")]
    hw: String,
    /// Traffic class of the test's QPs (for `--hw sp` / `ets`).
    #[arg(long, default_value_t = 0)]
    tc: u8,
    /// Random seed of the simulator (alone).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the results as JSON with perftest's key names
    /// (`MsgSize`, `n_iterations`, `BW_peak`, `BW_average`, `MsgRate`;
    /// `t_min` ... for latency) to `--out_json_file` (default
    /// `perftest_out.json`); `results` is one object, or a list with `-a`.
    #[arg(long = "out_json")]
    out_json: bool,
    /// The file of `--out_json` (implies it).
    #[arg(long = "out_json_file", value_name = "FILE")]
    out_json_file: Option<PathBuf>,
}

/// One bandwidth row.
struct BwRow {
    bytes: u32,
    iterations: u64,
    peak_bps: f64,
    avg_bps: f64,
    mpps: f64,
}

/// Warm-up before measuring over a window (`-D`), ns of virtual time.
const WARMUP_NS: u64 = 1_000_000;
/// Step of the alone run (checks of `-n`), ns.
const STEP_NS: u64 = 100_000;
/// The longest virtual time a test may take (`-D`, or what `-n` needs).
const MAX_VIRTUAL_S: f64 = 3600.0;
/// The most wire packets one test may simulate: a few minutes of a
/// core's time (a ping-pong of 1 GiB messages moves about 150 000
/// packets a second through the simulator).
const MAX_PACKETS: f64 = 3e7;

/// The highest rate, bytes per ns, over any stretch of at least `span` of
/// a cumulative series of `(t, bytes completed)`, less `in_flight` bytes
/// (what may have been on the wire before the stretch began: one message
/// per QP), and at least `avg`.
fn peak(samples: &[(u64, u64)], span: u64, in_flight: u64, avg: f64) -> f64 {
    let mut best = avg;
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
        best = best.max((c1 - c0).saturating_sub(in_flight) as f64 / (t1 - t0) as f64);
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

    /// The run's end: `-D` after the warm-up if given, else a bound that
    /// `-n` stops before (checked up front, [`Args::check`]).
    fn end_ns(&self) -> u64 {
        match self.duration {
            Some(d) => WARMUP_NS + (d * 1e9) as u64,
            None => WARMUP_NS + (MAX_VIRTUAL_S * 1e9) as u64,
        }
    }

    /// Checks the flags against each other and the NIC before anything
    /// runs, so that a bad value is named rather than failing mid-run.
    fn check(&self, test: Test, profile: &RnicProfile) -> anyhow::Result<()> {
        anyhow::ensure!(self.size != Some(0), "-s: the message size must be at least 1 byte");
        anyhow::ensure!(
            self.size.is_none_or(|s| s <= MAX_SIZE),
            "-s {}: at most {MAX_SIZE} bytes (1 GiB)",
            self.size.unwrap_or(0)
        );
        anyhow::ensure!(self.qps >= 1 && self.qps <= 4096, "-q {}: 1 to 4096 QPs", self.qps);
        anyhow::ensure!(
            self.tx_depth >= 1 && self.tx_depth <= 4096.min(profile.max_qp_wr),
            "-t {}: tx depth 1 to 4096",
            self.tx_depth
        );
        anyhow::ensure!(
            self.post_list >= 1 && self.post_list <= self.tx_depth,
            "-l {}: post list 1 to the tx depth (-t {})",
            self.post_list,
            self.tx_depth
        );
        anyhow::ensure!(self.cq_mod >= 1, "-Q 0: signal at least every 1 WR");
        anyhow::ensure!(
            self.inline <= profile.max_inline_data,
            "-I {}: the NIC ({}) inlines at most {} bytes",
            self.inline,
            profile.name,
            profile.max_inline_data
        );
        // One CQ takes every QP's sends (perftest's layout): 2 entries per WR slot.
        let cqes = 2 * self.qps as u64 * self.tx_depth as u64;
        anyhow::ensure!(
            test == Test::Lat || cqes <= profile.max_cqe as u64,
            "-q {} -t {}: the test's CQ needs {cqes} entries, the NIC ({}) has at most {}: lower -q or -t",
            self.qps,
            self.tx_depth,
            profile.name,
            profile.max_cqe
        );
        if let Some(d) = self.duration {
            anyhow::ensure!(
                (1e-4..=MAX_VIRTUAL_S).contains(&d),
                "-D {d}: 0.0001 to {MAX_VIRTUAL_S} seconds (a shorter window sees no completion)"
            );
        }
        anyhow::ensure!(self.iters.is_none_or(|n| n >= 1), "-n 0: at least one iteration");
        // Over a window only whole signaled batches count (traffic::bw):
        // at least 10 of them per QP keep the figure within about 10%.
        if let (Some(d), Test::Bw, None, None) = (self.duration, test, &self.with, &self.connect) {
            for size in self.sizes(test) {
                let cfg = BwConfig { size, tx_depth: self.tx_depth, cq_mod: self.cq_mod, ..BwConfig::write(size) };
                let min_s = 10.0 * cfg.batch_ns(self.qps, profile) / 1e9;
                anyhow::ensure!(
                    d >= min_s,
                    "-D {d} -s {size} -q {}: each QP signals a completion every {} messages (-Q, at most half of \
                     -t), about every {:.3} ms, and a window counts whole signaled batches: -D {min_s:.4} or more \
                     (10 batches), or -n",
                    self.qps,
                    self.cq_mod.clamp(1, (self.tx_depth / 2).max(1)),
                    min_s / 10.0 * 1e3
                );
            }
        }
        anyhow::ensure!(
            !(self.with.is_some() && self.iters.is_some()),
            "-n: beside a scenario (--with) the test runs for the scenario's window or -D seconds"
        );
        // What the run asks of the simulator, up front: wire packets and
        // virtual time (a client of the daemon runs in wall-clock time).
        for size in self.sizes(test).into_iter().filter(|_| self.connect.is_none()) {
            let pkts = size.div_ceil(profile.mtu).max(1) as f64;
            let wire_s = |messages: f64| messages * size as f64 * 8.0 / (profile.goodput_gbps(size) * 1e9);
            let (packets, virtual_s, what) = match (self.duration, test) {
                (Some(d), _) => (d * profile.goodput_gbps(size) * 1e9 / 8.0 / size as f64 * pkts, d, format!("-D {d}")),
                (None, Test::Bw) => {
                    let msgs = self.iters(test) as f64 * self.qps as f64;
                    (msgs * pkts, wire_s(msgs), format!("-n {} -q {}", self.iters(test), self.qps))
                }
                // A ping-pong moves the message both ways, one at a time.
                (None, Test::Lat) => {
                    let msgs = 2.0 * self.iters(test) as f64;
                    (msgs * pkts, wire_s(msgs), format!("-n {}", self.iters(test)))
                }
            };
            anyhow::ensure!(
                packets <= MAX_PACKETS && virtual_s <= MAX_VIRTUAL_S,
                "{what} -s {size}: {packets:.3e} packets over {virtual_s:.0} s of virtual time to simulate; \
                 the limit is {MAX_PACKETS:.0e} packets and {MAX_VIRTUAL_S} s (beyond, a run takes many \
                 minutes to hours of this machine's time): lower -n, -D or -s"
            );
        }
        Ok(())
    }

    /// The dataplane's policy beside `--with`.
    fn policy(&self) -> &str {
        self.policy.as_deref().unwrap_or("passthrough")
    }

    /// The `--out_json` file, if asked for.
    fn json_path(&self) -> Option<PathBuf> {
        match (&self.out_json_file, self.out_json) {
            (Some(p), _) => Some(p.clone()),
            (None, true) => Some(PathBuf::from("perftest_out.json")),
            (None, false) => None,
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
        // -n: each QP sends exactly N from time 0 (perftest has no warm-up
        // there); -D: a warm-up, then the window.
        let iters = self.duration.is_none().then(|| self.iters(Test::Bw));
        let cfg = BwConfig {
            op,
            size,
            tx_depth: self.tx_depth,
            post_list: self.post_list,
            cq_mod: self.cq_mod,
            inline_max: self.inline,
            iters,
        };
        let (start, end) = (if iters.is_some() { 0 } else { WARMUP_NS }, self.end_ns());
        let mut client = BwClient::new(a, remote, cfg, start, end);
        let mut server = (op == TestOp::Send).then(|| BwServer::new(b, size, self.tx_depth));
        let mut t = 0;
        while t < end && !client.done() {
            t = (t + STEP_NS).min(end);
            let mut apps: Vec<&mut dyn App> = vec![&mut client];
            if let Some(s) = server.as_mut() {
                apps.push(s);
            }
            run_virtual(&f, &mut apps, t).with_context(|| format!("simulating -s {size}"))?;
        }
        let r = client.result();
        if let Some(n) = iters {
            anyhow::ensure!(client.done(), "-n {n} -s {size}: not done after {MAX_VIRTUAL_S} s of virtual time");
        } else {
            anyhow::ensure!(
                r.messages > 0,
                "-D {} -s {size}: no message completed inside the window; lengthen -D",
                self.duration.unwrap_or(0.0)
            );
        }
        Ok(BwRow {
            bytes: size,
            iterations: iters.unwrap_or(r.messages),
            peak_bps: client.peak().gbps() * 1e9,
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
        if self.duration.is_none() {
            client = client.stop_after(self.iters(Test::Lat));
        }
        let mut server = LatServer::new(b, ra, cfg);
        let mut t = 0;
        while t < end && !client.done() {
            t = (t + STEP_NS).min(end);
            run_virtual(&f, &mut [&mut client, &mut server], t).with_context(|| format!("simulating -s {size}"))?;
        }
        anyhow::ensure!(
            !client.histogram().is_empty(),
            "-D {} -s {size}: no ping-pong completed inside the window; lengthen -D",
            self.duration.unwrap_or(0.0)
        );
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
        let mut r = run_scenario_with(&sc, self.policy(), &parse_hw(&self.hw)?, &RunOptions::default())?;
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
    let profile = RnicProfile::cx6_100g();
    a.check(test, &profile)?;
    let json_path = a.json_path();
    if let Some(p) = &json_path {
        crate::output::check_writable(p)?;
    }
    let kind = if test == Test::Bw { "BW" } else { "Latency" };
    let sizes = a.sizes(test);
    let mut session = match &a.connect {
        Some(sock) => {
            let qps = if test == Test::Bw { a.qps } else { 1 };
            let largest = sizes.iter().copied().max().unwrap_or(1);
            Some(connect::Session::connect(sock, a.tenant.clone(), qps, a.tc, largest)?)
        }
        None => None,
    };
    println!("{RESULT_LINE}");
    match &session {
        Some(_) => {
            println!("                    {} {kind} Test (through perf-runner serve, wall-clock time)", op_name(op))
        }
        None => println!("                    {} {kind} Test (simulated {}, virtual time)", op_name(op), profile.name),
    }
    println!(" Number of qps   : {}\t\tTransport type : IB", if test == Test::Bw { a.qps } else { 1 });
    if test == Test::Bw {
        println!(" TX depth        : {}\t\tPost List      : {}", a.tx_depth, a.post_list);
    }
    match (&a.with, &session, &a.connect) {
        (Some(p), _, _) => println!(" Beside          : {}\t\tPolicy         : {}", p.display(), a.policy()),
        (None, Some(s), Some(sock)) => {
            println!(" Daemon          : {}\t\tTenant         : {}", sock.display(), s.tenant())
        }
        _ => println!(" Alone on the NIC (no dataplane)"),
    }
    println!("{RESULT_LINE}");
    match test {
        Test::Bw => println!("{}", if a.report_gbits { BW_HEADER_GBITS } else { BW_HEADER_MB }),
        Test::Lat => println!("{LAT_HEADER}"),
    }
    let mut beside = Vec::new();
    let mut json = Vec::new();
    for size in sizes {
        match test {
            Test::Bw => {
                let row = if let Some(s) = session.as_mut() {
                    s.bw(&a, op, size)?
                } else if a.with.is_some() {
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
                    let in_flight = a.qps as u64 * size as u64;
                    BwRow {
                        bytes: size,
                        iterations: v.completed,
                        peak_bps: peak(&cum, span, in_flight, v.gbps / 8.0) * 8e9,
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
                json.push(serde_json::json!({
                    "MsgSize": row.bytes,
                    "n_iterations": row.iterations,
                    "BW_peak": unit(row.peak_bps),
                    "BW_average": unit(row.avg_bps),
                    "MsgRate": row.mpps,
                    "BW_unit": if a.report_gbits { "Gb/sec" } else { "MB/sec" },
                }));
            }
            Test::Lat => {
                let s = if let Some(s) = session.as_mut() {
                    s.lat(&a, op, size)?
                } else if a.with.is_some() {
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
                json.push(serde_json::json!({
                    "MsgSize": size,
                    "n_iterations": s.count,
                    "t_min": s.min_us,
                    "t_max": s.max_us,
                    "t_typical": s.p50_us,
                    "t_avg": s.mean_us,
                    "t_stdev": s.stdev_us,
                    "percentile_99": s.p99_us,
                    "percentile_99.9": s.p999_us,
                    "lat_unit": "usec",
                }));
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
    if let Some(path) = json_path {
        let results = if a.all { serde_json::Value::Array(json) } else { json.into_iter().next().unwrap_or_default() };
        let doc = serde_json::json!({ "test": format!("{} {kind}", op_name(op)), "results": results });
        crate::output::write_all(&[(path, serde_json::to_string_pretty(&doc)?.into_bytes())])?;
    }
    Ok(())
}
