//! The report's SVG charts (plotters): bars per mode, the commit-latency CDF, and lines per
//! series for the simulated-flash experiments.

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::commands::bench::ModeResult;
use crate::commands::flash::FlashResult;
use crate::schemes::{Mode, DEFAULT_COLOR};

/// The chart colour of the mode called `mode`.
fn color(mode: &str) -> RGBColor {
    let (r, g, b) = Mode::by_name(mode).map_or(DEFAULT_COLOR, |m| m.scheme().chart_color());
    RGBColor(r, g, b)
}

/// The chart colour of the mode called `mode`, for charts drawn elsewhere.
pub fn mode_color(mode: &str) -> RGBColor {
    color(mode)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a chart: {e:?}")
}

/// One bar per mode.
pub fn bar_chart(
    title: &str,
    unit: &str,
    results: &[ModeResult],
    value: impl Fn(&ModeResult) -> f64,
) -> Result<String> {
    let bars: Vec<(String, f64, RGBColor)> = results
        .iter()
        .map(|r| (r.mode.to_owned(), value(r), color(r.mode)))
        .collect();
    labelled_bars(title, unit, &bars)
}

/// One bar per (label, value, colour).
pub fn labelled_bars(title: &str, unit: &str, bars: &[(String, f64, RGBColor)]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let top = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let n = bars.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0.0..top)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(unit)
            .y_label_formatter(&|v| {
                if top >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            })
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(plot_err)?;
        for (i, (_, v, c)) in bars.iter().enumerate() {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)],
                    c.filled(),
                )))
                .map_err(plot_err)?;
            let label = if *v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (SegmentValue::CenterOf(i), v + top * 0.02),
                    ("sans-serif", 13),
                )))
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// Fraction of commits done within x microseconds, per mode (log x axis).
pub fn cdf_chart(title: &str, results: &[ModeResult]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let lo = results
            .iter()
            .filter_map(|r| r.latency_sample_us.first().copied())
            .fold(f64::INFINITY, f64::min)
            .max(1.0);
        let hi = results
            .iter()
            .filter_map(|r| r.latency_sample_us.last().copied())
            .fold(0.0f64, f64::max)
            .max(lo * 10.0);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("commit latency, microseconds (log scale)")
            .y_desc("fraction of commits")
            .draw()
            .map_err(plot_err)?;
        for r in results {
            let n = r.latency_sample_us.len().max(1) as f64;
            let c = color(r.mode);
            let style = if r.mode == "onesync" {
                c.stroke_width(3)
            } else {
                c.stroke_width(1)
            };
            chart
                .draw_series(LineSeries::new(
                    r.latency_sample_us
                        .iter()
                        .enumerate()
                        .map(|(i, &us)| (us.max(lo), (i + 1) as f64 / n)),
                    style,
                ))
                .map_err(plot_err)?
                .label(r.mode)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// Points per mode, in the order the modes first appear.
pub fn series(
    results: &[FlashResult],
    value: impl Fn(&FlashResult) -> f64,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in results {
        let point = (r.param, value(r));
        match out.iter_mut().find(|(m, _)| *m == r.mode) {
            Some((_, points)) => points.push(point),
            None => out.push((r.mode.clone(), vec![point])),
        }
    }
    out
}

pub fn flash_color(mode: &str) -> RGBColor {
    match mode {
        "xftl" => RGBColor(0x1b, 0x9e, 0x77),
        "wal" | "ordered" => RGBColor(0x75, 0x70, 0xb3),
        _ => RGBColor(0xd9, 0x5f, 0x02),
    }
}

/// Lines with markers, one per series.
pub fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 340)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let points = series.iter().flat_map(|(_, p)| p.iter());
        let (x_lo, x_hi, y_hi) = points.fold(
            (f64::INFINITY, f64::NEG_INFINITY, 0.0f64),
            |(a, b, c), &(x, y)| (a.min(x), b.max(x), c.max(y)),
        );
        let (x_lo, x_hi) = if x_lo.is_finite() {
            (x_lo - 0.5, x_hi + 0.5)
        } else {
            (0.0, 1.0)
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_lo..x_hi, 0.0..(y_hi.max(1e-9) * 1.15))
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(plot_err)?;
        for (name, points) in series {
            let c = flash_color(name);
            chart
                .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
                .map_err(plot_err)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// One line per mode through (flush latency, value) points, both axes log scale: how each
/// scheme's figure moves with the device's flush latency. `points` holds (mode, x, y).
pub fn sweep_chart(title: &str, y_desc: &str, points: &[(&'static str, f64, f64)]) -> Result<String> {
    let mut lines: Vec<(&'static str, Vec<(f64, f64)>)> = Vec::new();
    for &(mode, x, y) in points {
        match lines.iter_mut().find(|(m, _)| *m == mode) {
            Some((_, line)) => line.push((x, y)),
            None => lines.push((mode, vec![(x, y)])),
        }
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let xs = points.iter().map(|p| p.1).filter(|&v| positive(v));
    let ys = points.iter().map(|p| p.2).filter(|&v| positive(v));
    let (x_lo, x_hi) = xs.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (y_lo, y_hi) = ys.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    // A log axis needs a positive, non-empty range, also for one preset or no data.
    let (x_lo, x_hi) = if x_lo.is_finite() {
        (x_lo / 2.0, x_hi * 2.0)
    } else {
        (1.0, 10.0)
    };
    let (y_lo, y_hi) = if y_lo.is_finite() {
        (y_lo / 2.0, y_hi * 2.0)
    } else {
        (1.0, 10.0)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("device flush latency, microseconds (log scale)")
            .y_desc(y_desc)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(plot_err)?;
        for (mode, line) in &lines {
            let c = color(mode);
            let width = if *mode == "onesync" { 3 } else { 2 };
            let kept: Vec<(f64, f64)> = line
                .iter()
                .copied()
                .filter(|&(x, y)| positive(x) && positive(y))
                .collect();
            chart
                .draw_series(LineSeries::new(kept.iter().copied(), c.stroke_width(width)))
                .map_err(plot_err)?
                .label(*mode)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            chart
                .draw_series(kept.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}
