//! docs/bench.png: throughput (left) and p99 latency (right) against concurrency, one
//! line per path, both on log scales (the paths span an order of magnitude); the
//! product's paths thick, Spin's floors dashed, the variants thin; the legend in a strip
//! below. Under them the storm (f): units sold and MySQL connections open against time,
//! one line per setting.

use std::path::Path as FilePath;

use anyhow::{anyhow, Context, Result};
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::results::{Kind, Measurement, Path, Results, StormResult};

/// Where Debian's fonts-dejavu-core puts its sans font (scripts/bench.sh installs it).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

pub fn draw(results: &Results, file: &FilePath) -> Result<()> {
    let font = std::fs::read(FONT)
        .with_context(|| format!("{FONT} (apt-get install fonts-dejavu-core)"))?;
    // plotters keeps registered fonts for the life of the process.
    register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| anyhow!("{FONT} is not a font plotters can read"))?;

    let root = BitMapBackend::new(file, (1600, 1260)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(50);
    let (body, rest) = rest.split_vertically(660);
    let (legend_strip, storm_row) = rest.split_vertically(130);
    title.titled(
        "seckill: throughput and p99 latency against concurrency (one run, loopback, 2 cores)",
        ("sans-serif", 24),
    )?;
    let (left, right) = body.split_horizontally(800);
    panel(&left, results, "answers / s (log)", |m| m.throughput())?;
    panel(&right, results, "p99 latency, ms (log)", |m| {
        m.latency.p99_us as f64 / 1000.0
    })?;
    legend(&legend_strip)?;
    let (sold, threads) = storm_row.split_horizontally(800);
    storm_panel(&sold, results, "(f) units sold", Legend::Below, |storm| {
        storm
            .sold_at
            .iter()
            .enumerate()
            .map(|(i, &at)| (at, (i + 1) as f64))
            .collect()
    })?;
    let threads_label = "(f) MySQL connections of the component";
    storm_panel(&threads, results, threads_label, Legend::Above, |storm| {
        storm
            .threads
            .iter()
            .map(|&(at, n)| (at, n as f64))
            .collect()
    })?;
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

/// Where a storm panel's legend goes: below rising lines, or above busy ones (with room
/// made for it above the highest point).
enum Legend {
    Below,
    Above,
}

/// One line per storm against seconds after the release, with its own legend.
fn storm_panel(
    area: &Area,
    results: &Results,
    y_label: &str,
    legend: Legend,
    series: impl Fn(&StormResult) -> Vec<(f64, f64)>,
) -> Result<()> {
    let lines: Vec<(&StormResult, Vec<(f64, f64)>)> =
        results.storms.iter().map(|s| (s, series(s))).collect();
    let points = lines.iter().flat_map(|(_, points)| points);
    let right = points.clone().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let (headroom, position) = match legend {
        Legend::Below => (1.1, SeriesLabelPosition::LowerRight),
        Legend::Above => (1.6, SeriesLabelPosition::UpperRight),
    };
    let top = points.map(|p| p.1).fold(1.0, f64::max) * headroom;
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..right, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds after the release")
        .y_desc(y_label)
        .x_label_formatter(&|s| format!("{s:.0}"))
        .y_label_formatter(&|n| format!("{n:.0}"))
        .light_line_style(WHITE)
        .label_style(("sans-serif", 16))
        .draw()?;
    let colors = [
        RGBColor(20, 90, 200),
        RGBColor(200, 30, 30),
        RGBColor(120, 170, 240),
        RGBColor(240, 130, 130),
    ];
    for ((storm, points), color) in lines.into_iter().zip(colors) {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(storm.setting.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 30, y)], color));
    }
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE)
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    Ok(())
}

/// Five rows of line samples and labels, column by column.
fn legend(area: &Area) -> Result<()> {
    for (i, path) in Path::ALL.into_iter().enumerate() {
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
        Path::MysqlFloorTcp => RGBColor(140, 200, 120),
        Path::FloorVariables => RGBColor(90, 90, 200),
        Path::Unrouted => RGBColor(170, 170, 170),
        Path::Malformed => RGBColor(240, 200, 90),
        Path::Forged => RGBColor(200, 120, 60),
        Path::SoldOut => RGBColor(200, 30, 30),
        Path::Duplicate => RGBColor(150, 60, 200),
        Path::Purchase => RGBColor(20, 90, 200),
        Path::PurchaseTcp => RGBColor(120, 170, 240),
        Path::Polling => RGBColor(0, 160, 160),
    };
    color.stroke_width(match path.kind() {
        Kind::Floor => 2,
        Kind::Variant => 1,
        Kind::Product => 3,
    })
}
