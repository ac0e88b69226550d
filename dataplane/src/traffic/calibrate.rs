//! The calibration suite: perftest-like traffic straight on the simulated
//! NIC (no dataplane, no policy), compared with the ConnectX-6 reference
//! figures. `perf-runner calibrate` prints it; the tests in
//! `dataplane/tests/all/calibration.rs` assert it.

use super::bw::{BwClient, BwConfig, BwResult};
use super::lat::{LatClient, LatConfig, LatServer};
use super::{run_virtual, App, AppError, Side, TestOp};
use crate::rnic::sim::{ClockMode, RnicProfile, SimFabric, SimRnic, TcScheduler};

/// One calibration figure against its accepted range.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Case {
    /// Stable case name (`write_bw_1mb`, ...).
    pub name: &'static str,
    /// Measured value.
    pub value: f64,
    /// Unit of `value`.
    pub unit: &'static str,
    /// Lowest accepted value.
    pub low: f64,
    /// Highest accepted value.
    pub high: f64,
    /// Whether `low <= value <= high`.
    pub pass: bool,
}

impl Case {
    fn new(name: &'static str, value: f64, unit: &'static str, low: f64, high: f64) -> Self {
        Case { name, value, unit, low, high, pass: value >= low && value <= high }
    }
}

/// The whole suite's result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Calibration {
    /// Profile name.
    pub profile: String,
    /// The cases, in the order of the calibration issue.
    pub cases: Vec<Case>,
}

impl Calibration {
    /// The table `perf-runner calibrate` prints: one line per case with
    /// its value, unit, accepted range and verdict.
    pub fn table(&self) -> String {
        let mut s = format!("RNIC profile: {}\n", self.profile);
        s += &format!("{:<28} {:>10} {:<8} {:>16}  result\n", "case", "value", "unit", "accepted");
        for c in &self.cases {
            s += &format!(
                "{:<28} {:>10.3} {:<8} {:>7.2} - {:<7.2}  {}\n",
                c.name,
                c.value,
                c.unit,
                c.low,
                c.high,
                if c.pass { "pass" } else { "FAIL" }
            );
        }
        s
    }
}

/// Durations of the measurement runs, in ns of virtual time.
#[derive(Debug, Clone, Copy)]
pub struct Durations {
    /// Warm-up before measuring.
    pub warmup_ns: u64,
    /// Measurement window.
    pub window_ns: u64,
}

impl Default for Durations {
    fn default() -> Self {
        Durations { warmup_ns: 2_000_000, window_ns: 20_000_000 }
    }
}

const SEED: u64 = 42;

fn fabric(profile: &RnicProfile) -> SimFabric {
    SimFabric::new(profile.clone(), 2, SEED, ClockMode::Virtual)
}

/// A connected bandwidth pair: client on host 0, passive target on host 1.
fn bw_pair(f: &SimFabric, cfg: BwConfig, qps: usize, tc: u8, d: Durations) -> Result<BwClient<SimRnic>, AppError> {
    let buf = cfg.size.max(64) as usize;
    let mut a = Side::new(f.nic(0), qps, buf, tc, cfg.tx_depth)?;
    let mut b = Side::new(f.nic(1), qps, buf, tc, cfg.tx_depth)?;
    a.connect(&mut b)?;
    let remote = b.mr.remote(0);
    Ok(BwClient::new(a, remote, cfg, d.warmup_ns, d.warmup_ns + d.window_ns))
}

/// A connected ping-pong pair: client on host 0, server on host 1.
fn lat_pair(
    f: &SimFabric,
    cfg: LatConfig,
    tc: u8,
    d: Durations,
) -> Result<(LatClient<SimRnic>, LatServer<SimRnic>), AppError> {
    let buf = 2 * cfg.size.max(1) as usize;
    let mut a = Side::new(f.nic(0), 1, buf, tc, 16)?;
    let mut b = Side::new(f.nic(1), 1, buf, tc, 16)?;
    a.connect(&mut b)?;
    let off = cfg.size.max(1) as usize;
    let (ra, rb) = (a.mr.remote(off), b.mr.remote(off));
    let client = LatClient::new(a, rb, cfg, d.warmup_ns, d.warmup_ns + d.window_ns);
    let server = LatServer::new(b, ra, cfg);
    Ok((client, server))
}

/// Bandwidth of `qps` QPs running `cfg` alone.
pub fn bw_alone(profile: &RnicProfile, cfg: BwConfig, qps: usize, d: Durations) -> Result<BwResult, AppError> {
    let f = fabric(profile);
    let mut c = bw_pair(&f, cfg, qps, 0, d)?;
    run_virtual(&f, &mut [&mut c], d.warmup_ns + d.window_ns)?;
    Ok(c.result())
}

/// Ping-pong latency (mean, median, p99 in us) of `cfg`, alone or beside a
/// 1 MB WRITE stream (`with_bulk`), with the NIC's class scheduler `tc`
/// (the ping-pong in class 1, the stream in class 0). Also returns the
/// stream's goodput.
pub fn lat_with_bulk(
    profile: &RnicProfile,
    cfg: LatConfig,
    with_bulk: bool,
    tc: TcScheduler,
    d: Durations,
) -> Result<(LatStats, Option<BwResult>), AppError> {
    let f = fabric(profile);
    f.set_tc_scheduler(0, tc.clone());
    f.set_tc_scheduler(1, tc);
    let (mut cl, mut sv) = lat_pair(&f, cfg, 1, d)?;
    let end = d.warmup_ns + d.window_ns;
    let bw = if with_bulk {
        let mut b = bw_pair(&f, BwConfig::write(1 << 20), 1, 0, d)?;
        run_virtual(&f, &mut [&mut cl, &mut sv, &mut b as &mut dyn App], end)?;
        Some(b.result())
    } else {
        run_virtual(&f, &mut [&mut cl, &mut sv], end)?;
        None
    };
    Ok((LatStats::from_histogram(cl.histogram()), bw))
}

/// Summary of a latency histogram in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatStats {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median (perftest's t_typical).
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Minimum.
    pub min_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Standard deviation.
    pub stdev_us: f64,
}

impl LatStats {
    /// Summarises a histogram recorded in picoseconds.
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Self {
        let us = |ps: f64| ps / 1e6;
        LatStats {
            count: h.len(),
            mean_us: us(h.mean()),
            p50_us: us(h.value_at_quantile(0.5) as f64),
            p99_us: us(h.value_at_quantile(0.99) as f64),
            p999_us: us(h.value_at_quantile(0.999) as f64),
            min_us: us(h.min() as f64),
            max_us: us(h.max() as f64),
            stdev_us: us(h.stdev()),
        }
    }
}

/// Runs the five calibration cases of the simulator issue.
pub fn run(profile: &RnicProfile, d: Durations) -> Result<Calibration, AppError> {
    let mut cases = Vec::new();
    let bw = bw_alone(profile, BwConfig::write(1 << 20), 1, d)?;
    cases.push(Case::new("write_bw_1mb", bw.gbps(), "Gb/s", 95.0, 98.0));

    let lat16 = LatConfig::write(16);
    let (alone, _) = lat_with_bulk(profile, lat16, false, TcScheduler::RoundRobin, d)?;
    cases.push(Case::new("write_lat_16b", alone.p50_us, "us", 0.9, 2.0));

    let m = BwConfig { post_list: 32, ..BwConfig::write(16) };
    let one = bw_alone(profile, m, 1, d)?;
    cases.push(Case::new("msg_rate_16b_1qp", one.mpps(), "M msg/s", 11.0, 14.0));
    let sixteen = bw_alone(profile, m, 16, d)?;
    let ceiling = 1e6 / profile.sched_wqe_ps as f64;
    cases.push(Case::new("msg_rate_16b_16qp", sixteen.mpps(), "M msg/s", 0.85 * ceiling, 1.02 * ceiling));

    let (mixed, _) = lat_with_bulk(profile, lat16, true, TcScheduler::RoundRobin, d)?;
    cases.push(Case::new("lat_inflation_no_isolation", mixed.mean_us / alone.mean_us, "x", 5.0, 7.0));

    let (sp, sp_bw) = lat_with_bulk(profile, lat16, true, TcScheduler::StrictPriority, d)?;
    cases.push(Case::new("lat_inflation_sp", sp.mean_us / alone.mean_us, "x", 0.0, 1.3));
    let sp_gbps = sp_bw.map_or(0.0, |b| b.gbps());
    cases.push(Case::new("bw_under_sp", sp_gbps, "Gb/s", 90.0, 100.0));
    Ok(Calibration { profile: profile.name.to_string(), cases })
}

/// A quick look at one operation's ping-pong alone (used by the runner's
/// microbenchmarks and tests).
pub fn lat_alone(profile: &RnicProfile, op: TestOp, size: u32, d: Durations) -> Result<LatStats, AppError> {
    let cfg = LatConfig { op, size, inline_max: 220 };
    Ok(lat_with_bulk(profile, cfg, false, TcScheduler::RoundRobin, d)?.0)
}
