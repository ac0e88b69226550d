//! SVG plots of runs (`--plot DIR`): latency CDF per tenant group (one
//! line per configuration), throughput per tenant group over time (one
//! chart per configuration), and NIC utilization over time (one line per
//! configuration). Text is laid out without system fonts (plotters' SVG
//! backend with no font feature), so plotting works on any machine.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use perf_benches::plot::Series;
use perf_dataplane::engine::SwapOutcome;

use crate::report::{Report, TenantReport};

/// Most series drawn in one chart; the rest of the groups are summed.
const MAX_SERIES: usize = 8;
const SIZE: (u32, u32) = (960, 560);

/// A file-name-safe form of `s`.
pub fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// `dir/STEM.svg`, or `dir/STEM-2.svg` ... when an earlier plot of this
/// set has that name (two names that differ only where [`slug`] replaces).
fn unique(dir: &Path, stem: &str, files: &[(PathBuf, Vec<u8>)]) -> PathBuf {
    let taken = |p: &Path| files.iter().any(|(f, _)| f == p);
    let mut path = dir.join(format!("{stem}.svg"));
    let mut k = 2;
    while taken(&path) {
        path = dir.join(format!("{stem}-{k}.svg"));
        k += 1;
    }
    path
}

/// Draws all plots of `runs`; returns each file's path in `dir` and its
/// SVG text (written by the caller, with the run's other outputs).
pub fn plot_all(runs: &[Report], scenario: &str, dir: &Path) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut files = Vec::new();
    let label = Path::new(scenario).file_name().map_or(String::new(), |f| format!(" ({})", f.to_string_lossy()));
    // Latency CDF per group: one series per configuration (and per alone run).
    let mut groups: Vec<String> = Vec::new();
    for r in runs {
        for g in r.groups() {
            if !groups.contains(&g.group) {
                groups.push(g.group.clone());
            }
        }
    }
    for group in &groups {
        let mut series = Vec::new();
        for r in runs {
            for t in r.groups().into_iter().filter(|t| &t.group == group) {
                series.push((r.config.clone(), cdf(&t)));
                if let Some(a) = &t.alone {
                    series.push((format!("alone:{}", a.name), cdf(a)));
                }
            }
        }
        let path = unique(dir, &format!("latency-cdf-{}", slug(group)), &files);
        let svg = latency_cdf(&format!("Latency CDF of {group}{label}"), &series)?;
        files.push((path, svg.into_bytes()));
    }
    for r in runs {
        let path = unique(dir, &format!("throughput-{}", slug(&r.config)), &files);
        let svg = throughput(r, &format!("Throughput per tenant, {}{label}", r.config))?;
        files.push((path, svg.into_bytes()));
    }
    let path = dir.join("nic-utilization.svg");
    let series: Vec<Series> = runs
        .iter()
        .map(|r| {
            let b = r.nic_timeline.bucket_ns as f64 / 1e6;
            let pts = r.nic_timeline.utilization.iter().enumerate().map(|(i, &u)| ((i as f64 + 0.5) * b, u)).collect();
            (r.config.clone(), pts)
        })
        .collect();
    // Swap markers only when one run is drawn: runs' swaps would mix.
    let swaps = if runs.len() == 1 { swap_markers(&runs[0]) } else { Vec::new() };
    let svg = lines(
        &format!("NIC utilization over time{label}"),
        ("time [ms]", "wire utilization [fraction of time transmitting]"),
        &series,
        Some(1.05),
        &swaps,
    )?;
    files.push((path, svg.into_bytes()));
    Ok(files)
}

/// A dashed vertical marker: where (x), its label, and whether it marks a
/// policy swap (drawn in red) rather than a phase change (grey).
type Marker = (f64, String, bool);

/// One marker per policy swap of `r`: `swap: A -> B`, or `swap refused: B`.
fn swap_markers(r: &Report) -> Vec<Marker> {
    r.policy_log
        .swaps
        .iter()
        .map(|s| {
            let label = match s.outcome {
                SwapOutcome::Accepted => format!("swap: {} -> {}", s.from, s.to),
                SwapOutcome::Refused(_) => format!("swap refused: {}", s.to),
            };
            (s.at_ns as f64 / 1e6, label, true)
        })
        .collect()
}

/// `(latency us, cumulative fraction)` points of a tenant's histogram.
fn cdf(t: &TenantReport) -> Vec<(f64, f64)> {
    let Some(h) = &t.hist else { return Vec::new() };
    let total = h.len() as f64;
    if total == 0.0 {
        return Vec::new();
    }
    let mut pts = Vec::new();
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        pts.push((h.highest_equivalent(v.value_iterated_to()) as f64 / 1e6, seen as f64 / total));
    }
    let step = pts.len().div_ceil(1500).max(1);
    let last = pts.last().copied();
    let mut out: Vec<(f64, f64)> = pts.into_iter().step_by(step).collect();
    if let Some(l) = last {
        if out.last() != Some(&l) {
            out.push(l);
        }
    }
    out
}

fn latency_cdf(title: &str, series: &[Series]) -> anyhow::Result<String> {
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(0.0f64, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 { (lo * 0.8, hi * 1.25) } else { (0.1, 10.0) };
    let axes = ("latency [us] (log scale)", "fraction of messages at or below");
    let ranges = ((lo.max(1e-3)..hi).log_scale(), 0f64..1.0);
    chart(title, axes, ranges, series, SeriesLabelPosition::LowerRight, &[])
}

fn throughput(r: &Report, title: &str) -> anyhow::Result<String> {
    let mut groups = r.groups();
    groups.sort_by(|a, b| b.gbps.total_cmp(&a.gbps));
    let mut series: Vec<Series> = Vec::new();
    let points = |t: &TenantReport| -> Vec<(f64, f64)> {
        let b = t.timeline.bucket_ns as f64 / 1e6;
        t.timeline.gbps().into_iter().enumerate().map(|(i, g)| ((i as f64 + 0.5) * b, g)).collect()
    };
    for t in groups.iter().take(MAX_SERIES) {
        series.push((t.name.clone(), points(t)));
    }
    if groups.len() > MAX_SERIES {
        let rest: Vec<&TenantReport> = groups[MAX_SERIES..].iter().collect();
        let sum = TenantReport::merge("others", &rest);
        series.push((format!("{} other groups (sum)", rest.len()), points(&sum)));
    }
    // Dashed markers: where measurement starts, where tenants start and
    // stop, and policy swaps.
    let end = r.tenants.iter().map(|t| t.window_phase_ns.1 .1).max().unwrap_or(0);
    let mut markers: Vec<Marker> = Vec::new();
    if let Some(w) = r.tenants.iter().map(|t| t.window_phase_ns.0 .0).min().filter(|&w| w > 0) {
        markers.push((w as f64 / 1e6, "measurement starts".into(), false));
    }
    for t in &groups {
        let (start, stop) = t.window_phase_ns.1;
        if start > 0 {
            markers.push((start as f64 / 1e6, format!("{} starts", t.group), false));
        }
        if stop < end {
            markers.push((stop as f64 / 1e6, format!("{} stops", t.group), false));
        }
    }
    markers.extend(swap_markers(r));
    lines(title, ("time [ms]", "goodput [Gb/s]"), &series, None, &markers)
}

fn lines(
    title: &str,
    axes: (&str, &str),
    series: &[Series],
    y_max: Option<f64>,
    markers: &[Marker],
) -> anyhow::Result<String> {
    let x_hi = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(1e-3, f64::max);
    let y_hi =
        y_max.unwrap_or_else(|| series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(1e-3, f64::max) * 1.1);
    chart(title, axes, (0f64..x_hi * 1.02, 0f64..y_hi), series, SeriesLabelPosition::UpperRight, markers)
}

/// One SVG chart: title, named axes, one line per series, a legend, and
/// dashed vertical markers with their labels (for linear axes).
fn chart<X, Y>(
    title: &str,
    (x_desc, y_desc): (&str, &str),
    (x, y): (X, Y),
    series: &[Series],
    legend: SeriesLabelPosition,
    markers: &[Marker],
) -> anyhow::Result<String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)?;
        chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw()?;
        let y_top = chart.y_range().end;
        for (k, (at, label, swap)) in markers.iter().enumerate() {
            let color = if *swap { RED.mix(0.7) } else { BLACK.mix(0.45) };
            let dashes = (0..40).map(|i| {
                let (a, b) = (y_top * i as f64 / 40.0, y_top * (i as f64 + 0.5) / 40.0);
                PathElement::new(vec![(*at, a), (*at, b)], color)
            });
            chart.draw_series(dashes)?;
            let y_text = y_top * (0.96 - 0.05 * (k % 4) as f64);
            chart.draw_series(std::iter::once(Text::new(label.clone(), (*at, y_text), ("sans-serif", 13))))?;
        }
        perf_benches::plot::lines(&mut chart, series, None)?;
        perf_benches::plot::legend(&mut chart, legend)?;
        root.present()?;
    }
    Ok(svg)
}
