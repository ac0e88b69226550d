//! SVG charts of benchmark records (`bench-report`): a log-log line chart
//! (the scale curve) and a chart of one value per named case on a log axis
//! (simulator speed), with horizontal reference lines. Text is laid out
//! without system fonts (plotters' SVG backend with no font feature).

use std::path::Path;

use plotters::prelude::*;

const SIZE: (u32, u32) = (960, 560);

/// A named line: `(x, y)` points.
pub type Series = (String, Vec<(f64, f64)>);

/// A chart builder on `root` with the title and the margins of every chart here.
fn builder<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 22)).margin(16).x_label_area_size(50).y_label_area_size(80);
    b
}

/// Draws the legend of `chart`'s labelled series at `pos`.
pub fn legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    pos: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(pos).draw()?;
    Ok(())
}

/// Lowest and highest positive value of `v`, widened for margins.
fn span(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) =
        v.filter(|x| x.is_finite() && *x > 0.0).fold((f64::INFINITY, 0.0f64), |(l, h), x| (l.min(x), h.max(x)));
    if lo.is_finite() {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.1, 10.0)
    }
}

/// Draws each series as a line in its palette colour, labelled for the
/// legend, with a dot of radius `dots` on each point if given.
pub fn lines<'a, CT>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    series: &[Series],
    dots: Option<u32>,
) -> anyhow::Result<()>
where
    CT: plotters::coord::CoordTranslate<From = (f64, f64)>,
{
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        if let Some(r) = dots {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, r, color.filled())))?;
        }
    }
    Ok(())
}

/// One line (with points) per series, both axes logarithmic.
pub fn loglog(path: &Path, title: &str, (x_desc, y_desc): (&str, &str), series: &[Series]) -> anyhow::Result<()> {
    let (xl, xh) = span(series.iter().flat_map(|s| s.1.iter().map(|p| p.0)));
    let (yl, yh) = span(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = builder(&root, title).build_cartesian_2d((xl..xh).log_scale(), (yl..yh).log_scale())?;
    chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw()?;
    lines(&mut chart, series, Some(3))?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

/// One value per case (x: the case names, in order) for each series, on a
/// logarithmic y axis; `refs` are horizontal reference lines with labels.
pub fn by_case(
    path: &Path,
    title: &str,
    y_desc: &str,
    cases: &[String],
    series: &[(String, Vec<Option<f64>>)],
    refs: &[(f64, &str)],
) -> anyhow::Result<()> {
    let values = series.iter().flat_map(|s| s.1.iter().flatten().copied()).chain(refs.iter().map(|r| r.0));
    let (yl, yh) = span(values);
    let n = cases.len().max(1);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = builder(&root, title).build_cartesian_2d(-0.5f64..n as f64 - 0.5, (yl..yh).log_scale())?;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            cases.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart.configure_mesh().x_labels(n).x_label_formatter(&label).y_desc(y_desc).disable_x_mesh().draw()?;
    for (k, (y, text)) in refs.iter().enumerate() {
        let grey = BLACK.mix(0.45);
        let dashes = (0..2 * n).map(|i| {
            let a = -0.5 + i as f64 / 2.0;
            PathElement::new(vec![(a, *y), (a + 0.25, *y)], grey)
        });
        chart.draw_series(dashes)?;
        let at = -0.45 + 0.3 * k as f64;
        chart.draw_series(std::iter::once(Text::new(text.to_string(), (at, *y * 1.1), ("sans-serif", 13))))?;
    }
    for (i, (name, vals)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = vals.iter().enumerate().filter_map(|(x, v)| v.map(|v| (x as f64, v))).collect();
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))?
            .label(name.as_str())
            .legend(move |(x, y)| Circle::new((x + 12, y), 5, color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}
