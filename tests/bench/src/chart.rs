//! docs/bench.png: throughput (left) and p99 latency (right) against concurrency, one
//! line per path, both on log scales (the paths span an order of magnitude); the
//! product's paths thick, Spin's floors dashed, the variants thin; the legend in a strip
//! below.
//!
//! docs/sale-clock.png: the sale clock's (f) default shape against time from the
//! opening: answers per 100 ms by outcome; below, buyers answered and units sold so far,
//! and MySQL's open connections.

use std::path::Path as FilePath;

use anyhow::{anyhow, Context, Result};
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::results::{Kind, Measurement, Path, Results, BIN_S, FINAL};

/// Where Debian's fonts-dejavu-core puts its sans font (scripts/bench.sh installs it).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Registers the font once: plotters keeps registered fonts for the life of the process.
fn font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if REGISTERED.get().is_some() {
        return Ok(());
    }
    let font = std::fs::read(FONT)
        .with_context(|| format!("{FONT} (apt-get install fonts-dejavu-core)"))?;
    register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| anyhow!("{FONT} is not a font plotters can read"))?;
    let _ = REGISTERED.set(());
    Ok(())
}

pub fn draw(results: &Results, file: &FilePath) -> Result<()> {
    font()?;
    let root = BitMapBackend::new(file, (1600, 840)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(50);
    let (body, legend_strip) = rest.split_vertically(660);
    title.titled(
        "seckill: throughput and p99 latency against concurrency (one run, loopback, 2 cores)",
        ("sans-serif", 24),
    )?;
    let (left, right) = body.split_horizontally(800);
    panel(&left, results, "answers / s (log)", |m| m.throughput())?;
    panel(&right, results, "p99 latency, ms (log)", |m| {
        m.latency.p99_us as f64 / 1000.0
    })?;
    legend(&legend_strip, results)?;
    root.present()?;
    Ok(())
}

fn panel(
    area: &Area,
    results: &Results,
    y_label: &str,
    value: impl Fn(&Measurement) -> f64,
) -> Result<()> {
    let values: Vec<f64> = results
        .measurements
        .iter()
        .map(&value)
        .filter(|v| *v > 0.0)
        .collect();
    let top = values.iter().copied().fold(0.0, f64::max) * 2.0;
    let bottom = values.iter().copied().fold(f64::MAX, f64::min) / 2.0;
    let levels: Vec<f64> = results.levels.iter().map(|&l| l as f64).collect();
    let first = levels.first().copied().unwrap_or(1.0);
    let last = levels.last().copied().unwrap_or(1.0);
    let x: WithKeyPoints<LogCoord<f64>> = (first * 0.7..last * 1.4)
        .log_scale()
        .with_key_points(levels.clone());
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x, (bottom..top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("concurrency (wrk connections)")
        .y_desc(y_label)
        .x_label_formatter(&|level| format!("{level:.0}"))
        .y_label_formatter(&|v| format!("{v}"))
        .light_line_style(WHITE)
        .label_style(("sans-serif", 16))
        .draw()?;
    for path in Path::ALL {
        let points: Vec<(f64, f64)> = results
            .of(path)
            .map(|m| (m.concurrency as f64, value(m)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        let style = style(path);
        if path.kind() == Kind::Floor {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))?;
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style))?;
        }
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, style.filled())))?;
    }
    Ok(())
}

/// The sale clock's first (default) shape; nothing is drawn when the run had none.
pub fn draw_sale(results: &Results, file: &FilePath) -> Result<()> {
    let Some(sale) = results.sales.first() else {
        return Ok(());
    };
    font()?;
    let root = BitMapBackend::new(file, (1600, 1100)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(50);
    let (top, bottom) = rest.split_vertically(560);
    title.titled(
        &format!(
            "seckill sale clock ({}): {} units, {} buyers, {} connections, first presses \
             within {:.1} s of the opening",
            sale.shape, sale.stock, sale.buyers, sale.connections, sale.spread_s
        ),
        ("sans-serif", 24),
    )?;
    let per_bin: Vec<(String, Vec<(f64, f64)>)> = sale
        .timeline
        .iter()
        .map(|(outcome, bins)| {
            let points = bins
                .iter()
                .enumerate()
                .map(|(i, &n)| (i as f64 * BIN_S, n as f64))
                .collect();
            (outcome.clone(), points)
        })
        .collect();
    let right = sale.last_answer_s.max(sale.spread_s) * 1.05 + BIN_S;
    time_panel(
        &top,
        right,
        &format!("answers per {:.0} ms, by outcome", BIN_S * 1000.0),
        per_bin
            .iter()
            .map(|(outcome, points)| (outcome.clone(), outcome_color(outcome), points.clone()))
            .collect(),
    )?;
    let (progress, connections) = bottom.split_horizontally(800);
    let cumulative = |outcomes: &[&str]| -> Vec<(f64, f64)> {
        let bins = sale.timeline.values().map(Vec::len).max().unwrap_or(0);
        let mut total = 0.0;
        (0..bins)
            .map(|i| {
                total += outcomes
                    .iter()
                    .filter_map(|o| sale.timeline.get(*o)?.get(i))
                    .sum::<u64>() as f64;
                ((i + 1) as f64 * BIN_S, total)
            })
            .collect()
    };
    time_panel(
        &progress,
        right,
        "so far",
        vec![
            (
                "buyers with a final answer".into(),
                RGBColor(0, 0, 0),
                cumulative(&FINAL),
            ),
            (
                "units sold (201)".into(),
                outcome_color("201"),
                cumulative(&["201"]),
            ),
        ],
    )?;
    let sampled = |pick: fn(&(f64, u64, u64)) -> u64| -> Vec<(f64, f64)> {
        sale.samples
            .iter()
            .filter(|s| s.0 >= 0.0)
            .map(|s| (s.0, pick(s) as f64))
            .collect()
    };
    time_panel(
        &connections,
        right,
        "MySQL connections open",
        vec![
            (
                "the component's".into(),
                RGBColor(20, 90, 200),
                sampled(|s| s.2),
            ),
            (
                "Threads_connected (the whole server's)".into(),
                RGBColor(150, 150, 150),
                sampled(|s| s.1),
            ),
        ],
    )?;
    root.present()?;
    Ok(())
}

fn outcome_color(outcome: &str) -> RGBColor {
    match outcome {
        "201" => RGBColor(20, 90, 200),
        "sold_out" => RGBColor(200, 30, 30),
        "already_ordered" => RGBColor(150, 60, 200),
        "busy" => RGBColor(240, 150, 0),
        "throttled" => RGBColor(170, 120, 40),
        failed if failed.starts_with('5') => RGBColor(0, 0, 0),
        _ => RGBColor(120, 120, 120),
    }
}

/// A labelled line: its legend, its color, its points.
type Line = (String, RGBColor, Vec<(f64, f64)>);

/// Lines against seconds after the opening, each with its label in the legend.
fn time_panel(area: &Area, right: f64, y_label: &str, lines: Vec<Line>) -> Result<()> {
    let top = lines
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.25;
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..right, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds after the opening")
        .y_desc(y_label)
        .x_label_formatter(&|s| format!("{s:.1}"))
        .y_label_formatter(&|n| format!("{n:.0}"))
        .light_line_style(WHITE)
        .label_style(("sans-serif", 16))
        .draw()?;
    for (label, color, points) in lines {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 30, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE)
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    Ok(())
}

/// Five rows of line samples and labels, column by column: the paths measured.
fn legend(area: &Area, results: &Results) -> Result<()> {
    let measured = Path::ALL
        .into_iter()
        .filter(|&path| results.of(path).next().is_some());
    for (i, path) in measured.enumerate() {
        let (x, y) = (60 + 520 * (i as i32 / 5), 4 + 24 * (i as i32 % 5));
        let style = style(path);
        let sample = vec![(x, y + 8), (x + 50, y + 8)];
        if path.kind() == Kind::Floor {
            area.draw(&DashedPathElement::new(sample, 8, 5, style))?;
        } else {
            area.draw(&PathElement::new(sample, style))?;
        }
        area.draw(&Text::new(path.label(), (x + 60, y), ("sans-serif", 17)))?;
    }
    Ok(())
}

fn style(path: Path) -> ShapeStyle {
    let color = match path {
        Path::SpinFloor => RGBColor(110, 110, 110),
        Path::RedisFloor => RGBColor(230, 140, 0),
        Path::MysqlFloor => RGBColor(30, 150, 60),
        Path::FloorVariables => RGBColor(90, 90, 200),
        Path::Unrouted => RGBColor(170, 170, 170),
        Path::Malformed => RGBColor(240, 200, 90),
        Path::Forged => RGBColor(200, 120, 60),
        Path::SoldOut => RGBColor(200, 30, 30),
        Path::Duplicate => RGBColor(150, 60, 200),
        Path::Purchase => RGBColor(20, 90, 200),
        Path::Polling => RGBColor(0, 160, 160),
        Path::P3RedisFloor => RGBColor(120, 60, 0),
        Path::P3MysqlFloor => RGBColor(110, 200, 120),
        Path::P3MysqlKept => RGBColor(20, 90, 40),
    };
    color.stroke_width(match path.kind() {
        Kind::Floor => 2,
        Kind::Variant => 1,
        Kind::Product => 3,
    })
}
