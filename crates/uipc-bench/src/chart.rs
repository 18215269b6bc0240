//! Tables drawn as SVG charts, read at a glance:
//! - a table whose rows are sizes (every row parameter a number) is a line chart, one line per
//!   implementation, the x axis on a log scale when the sizes span two decades or more
//!   (1..31900 keys), else the sizes at evenly spaced positions (2, 16, 63 threads);
//! - a table whose rows are categories (lockperf's posix01/posix02/flock01/flock02, id pairs,
//!   designs) is a grouped bar chart: one group per row, one bar per implementation;
//! - the y axis is logarithmic when the values span more than two decades. Ticks of a time
//!   unit (a unit that starts with ns, µs, ms or s) are shown in the unit the axis's range
//!   calls for: on a linear axis one unit chosen by the largest value, named in the axis
//!   title; on a log axis each tick in its own ("100 ns", "10 ms"). Every tick is written with
//!   at most three significant digits and no trailing ".0" (other units: k and M suffixes).
//!   uipc, before and kernel have the same color in every chart.

use crate::report::Table;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(60, 60, 60),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

/// A number with at most three significant digits, no trailing zeros after the point.
pub fn short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    let s = format!("{v:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// The seconds in one unit of a time unit string ("µs total" -> 1e-6), and the rest of it.
fn time_unit(unit: &str) -> Option<(f64, &str)> {
    let (scale, n) = [
        ("ns", 1e-9),
        ("µs", 1e-6),
        ("us", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
    ]
    .iter()
    .find(|(p, _)| {
        unit.strip_prefix(p)
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', ',']))
    })
    .map(|(p, s)| (*s, p.len()))?;
    Some((scale, &unit[n..]))
}

/// How an axis shows values given in `unit` whose largest is `hi`: the axis title and each
/// tick's label. A time axis on a log scale names the unit in each tick ("100 ns", "10 ms"),
/// one on a linear scale in its title, chosen by the largest value.
pub struct Ticks {
    pub title: String,
    /// Seconds per value unit, for a time unit.
    seconds: Option<f64>,
    /// The display unit of a linear time axis: its name and seconds.
    fixed: Option<(&'static str, f64)>,
}

/// The time unit a value of `s` seconds reads best in.
fn unit_for(s: f64) -> (&'static str, f64) {
    let s = s.abs();
    if s >= 1.0 {
        ("s", 1.0)
    } else if s >= 1e-3 {
        ("ms", 1e-3)
    } else if s >= 1e-6 {
        ("µs", 1e-6)
    } else {
        ("ns", 1e-9)
    }
}

impl Ticks {
    pub fn new(unit: &str, hi: f64, log: bool) -> Ticks {
        match time_unit(unit) {
            Some((scale, rest)) if log => {
                let rest = rest.trim_start_matches([',', ' ']);
                Ticks {
                    title: if rest.is_empty() { "time" } else { rest }.to_string(),
                    seconds: Some(scale),
                    fixed: None,
                }
            }
            Some((scale, rest)) => {
                let fixed = unit_for(hi * scale);
                Ticks {
                    title: format!("{}{rest}", fixed.0),
                    seconds: Some(scale),
                    fixed: Some(fixed),
                }
            }
            None => Ticks {
                title: unit.to_string(),
                seconds: None,
                fixed: None,
            },
        }
    }

    pub fn label(&self, v: f64) -> String {
        match (self.seconds, self.fixed) {
            (Some(scale), Some((_, per))) => short(v * scale / per),
            (Some(scale), None) => {
                let (name, per) = unit_for(v * scale);
                format!("{} {name}", short(v * scale / per))
            }
            _ if v.abs() >= 1e6 => format!("{}M", short(v / 1e6)),
            _ if v.abs() >= 1e3 => format!("{}k", short(v / 1e3)),
            _ => short(v),
        }
    }
}

/// The color of an implementation: the same in every chart for uipc, before and kernel.
fn color_of(implementation: &str, index: usize) -> RGBColor {
    match implementation {
        "uipc" => COLORS[0],
        "before" => COLORS[1],
        "kernel" => COLORS[2],
        _ => COLORS[3 + index % (COLORS.len() - 3)],
    }
}

/// `scenario-title` with everything but letters, digits and `+` turned into single dashes.
pub fn file_stem(scenario: &str, title: &str) -> String {
    let raw = format!("{scenario}-{title}");
    let mut stem = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || c == '+' {
            stem.push(c.to_ascii_lowercase());
        } else if !stem.ends_with('-') {
            stem.push('-');
        }
    }
    stem.trim_end_matches('-').to_string()
}

/// The row parameters as numbers, if every one is one.
fn numeric(params: &[String]) -> Option<Vec<f64>> {
    params
        .iter()
        .map(|p| p.trim().parse::<f64>().ok())
        .collect()
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The frame of a chart on `root`: caption, margins, axes, ticks and their titles (`x_mesh`:
/// vertical grid lines, off for bars).
macro_rules! frame {
    ($root:expr, $caption:expr, $x:expr, $y:expr, $table:expr, $ticks:expr, $x_labels:expr,
     $x_fmt:expr, $y_fmt:expr, $x_mesh:expr) => {{
        let mut chart = ChartBuilder::on($root)
            .caption($caption, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d($x, $y)
            .map_err(err)?;
        let mut mesh = chart.configure_mesh();
        if !$x_mesh {
            mesh.disable_x_mesh();
        }
        mesh.x_labels($x_labels)
            .y_labels(8)
            .x_label_formatter($x_fmt)
            .y_label_formatter($y_fmt)
            .x_desc($table.param_name.clone())
            .y_desc($ticks.title.clone())
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        chart
    }};
}

/// The implementations' legend, in the upper left corner.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// Writes `table` to `dir/<file_stem>.svg`.
pub fn draw(table: &Table, dir: &Path, file_stem: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{file_stem}.svg"));
    let values: Vec<f64> = table
        .rows
        .iter()
        .map(|r| r.micros)
        .filter(|v| *v > 0.0)
        .collect();
    if values.is_empty() || table.params.is_empty() {
        return Ok(());
    }
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let root = SVGBackend::new(&path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let y_log = hi / lo > 100.0;
    let ticks = Ticks::new(&table.unit, hi, y_log);
    // A long title loses its parenthesis (the table in the text has it all).
    let caption = match table.title.split_once(" (") {
        Some((head, _)) if table.title.len() > 70 => head.to_string(),
        _ => table.title.clone(),
    };
    let sizes = numeric(&table.params).filter(|xs| xs.iter().all(|x| *x > 0.0));
    match sizes {
        Some(xs) => lines(table, &root, &caption, &ticks, &xs, (lo, hi, y_log)),
        None => {
            // Bars on a linear axis go below zero for negative cells (a speed-up in "% slower").
            let below = table.rows.iter().map(|r| r.micros).fold(0.0, f64::min);
            bars(table, &root, &caption, &ticks, (lo, hi, y_log), below)
        }
    }?;
    root.present().map_err(err)?;
    Ok(())
}

type Root<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// A line per implementation over numeric sizes.
fn lines(
    table: &Table,
    root: &Root<'_>,
    caption: &str,
    ticks: &Ticks,
    xs: &[f64],
    (lo, hi, y_log): (f64, f64, bool),
) -> Result<(), String> {
    let (x_lo, x_hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    // Sizes over two decades or more on a log axis; fewer, at evenly spaced positions named by
    // the sizes themselves (a log axis over 2..63 would show a single tick).
    let x_log = x_hi / x_lo >= 100.0;
    let mut ranked: Vec<f64> = xs.to_vec();
    ranked.sort_by(f64::total_cmp);
    let rank = |x: f64| ranked.iter().position(|&r| r == x).unwrap_or(0) as f64;
    let xs: Vec<f64> = if x_log {
        xs.to_vec()
    } else {
        xs.iter().map(|&x| rank(x)).collect()
    };
    let xs = &xs[..];
    let size_label = Ticks::new("", 0.0, false);
    let x_label = |x: &f64| {
        if x_log {
            return size_label.label(*x);
        }
        let i = x.round();
        match ranked.get(i as usize) {
            Some(&v) if (x - i).abs() < 0.01 && i >= 0.0 => size_label.label(v),
            _ => String::new(),
        }
    };
    let y_label = |y: &f64| ticks.label(*y);
    macro_rules! plot {
        ($x:expr, $y:expr) => {{
            let x_labels = if x_log { 8 } else { ranked.len() + 1 };
            let mut chart =
                frame!(root, caption, $x, $y, table, ticks, x_labels, &x_label, &y_label, true);
            for (i, col) in table.columns.iter().enumerate() {
                let mut pts: Vec<(f64, f64)> = table
                    .params
                    .iter()
                    .zip(xs)
                    .filter_map(|(p, &x)| table.get(p, col).filter(|v| *v > 0.0).map(|v| (x, v)))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let color = color_of(col, i);
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(col.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(err)?;
            }
            legend(&mut chart)?;
        }};
    }
    let xr = x_lo / 1.3..x_hi * 1.3;
    let xl = -0.2..(ranked.len() as f64 - 0.8);
    match (x_log, y_log) {
        (true, true) => plot!(xr.log_scale(), (lo / 2.0..hi * 2.0).log_scale()),
        (true, false) => plot!(xr.log_scale(), 0.0..hi * 1.1),
        (false, true) => plot!(xl, (lo / 2.0..hi * 2.0).log_scale()),
        (false, false) => plot!(xl, 0.0..hi * 1.1),
    }
    Ok(())
}

/// A group of bars per row, a bar per implementation.
fn bars(
    table: &Table,
    root: &Root<'_>,
    caption: &str,
    ticks: &Ticks,
    (lo, hi, y_log): (f64, f64, bool),
    below: f64,
) -> Result<(), String> {
    let n = table.params.len();
    let k = table.columns.len().max(1);
    let x_label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 0.01 && i >= 0.0 {
            table.params.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let y_label = |y: &f64| ticks.label(*y);
    let width = 0.8 / k as f64;
    macro_rules! plot {
        ($y:expr, $base:expr) => {{
            let mut chart = frame!(
                root,
                caption,
                -0.5f64..(n as f64 - 0.5),
                $y,
                table,
                ticks,
                n + 1,
                &x_label,
                &y_label,
                false
            );
            for (c, col) in table.columns.iter().enumerate() {
                let color = color_of(col, c);
                let rects: Vec<_> = table
                    .params
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| {
                        let v = table
                            .get(p, col)
                            .filter(|v| v.is_finite() && (*v > 0.0 || !y_log))?;
                        let x0 = i as f64 - 0.4 + c as f64 * width;
                        Some(Rectangle::new(
                            [(x0 + 0.01, $base), (x0 + width - 0.01, v)],
                            color.filled(),
                        ))
                    })
                    .collect();
                chart
                    .draw_series(rects)
                    .map_err(err)?
                    .label(col.clone())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            legend(&mut chart)?;
        }};
    }
    if y_log {
        plot!((lo / 2.0..hi * 10.0).log_scale(), lo / 2.0)
    } else {
        plot!(below * 1.35..hi * 1.35, 0.0)
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_short_and_in_the_unit_the_range_calls_for() {
        for (v, shown) in [
            (3000000.0, "3000000"),
            (2.0, "2"),
            (0.25, "0.25"),
            (12.5, "12.5"),
        ] {
            assert_eq!(short(v), shown);
        }
        // Linear: one unit, by the largest value, in the title.
        let t = Ticks::new("µs total", 3_000_000.0, false);
        assert_eq!(t.title, "s total");
        assert_eq!(t.label(3_000_000.0), "3");
        assert_eq!(t.label(500_000.0), "0.5");
        let t = Ticks::new("µs, sum of tasks", 20_000.0, false);
        assert_eq!(t.title, "ms, sum of tasks");
        assert_eq!(t.label(20_000.0), "20");
        assert_eq!(Ticks::new("ns per call", 900.0, false).title, "ns per call");
        // Log: each tick in its own unit.
        let t = Ticks::new("µs total", 3_000_000.0, true);
        assert_eq!(t.title, "total");
        assert_eq!(t.label(0.1), "100 ns");
        assert_eq!(t.label(10_000.0), "10 ms");
        assert_eq!(t.label(3_000_000.0), "3 s");
        assert_eq!(
            Ticks::new("µs, sum of tasks", 1.0, true).title,
            "sum of tasks"
        );
        let t = Ticks::new("pairs", 16_777_215.0, false);
        assert_eq!(t.title, "pairs");
        assert_eq!(t.label(16_000_000.0), "16M");
        assert_eq!(t.label(20_000.0), "20k");
        assert_eq!(t.label(100.0), "100");
        assert_eq!(t.label(1000.0), "1k");
    }

    #[test]
    fn sizes_are_numbers_and_categories_are_not() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(numeric(&p(&["1", "10", "31900"])).is_some());
        assert!(numeric(&p(&["posix01", "flock01"])).is_none());
        assert!(numeric(&p(&["1 & 2", "1 & 40"])).is_none());
    }
}
