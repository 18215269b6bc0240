//! Tables drawn as SVG line charts: one line per implementation over the table's rows, on a log
//! scale when the values span more than two decades (as the seeds' numbers often do).

use crate::report::Table;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 6] = [RED, BLUE, BLACK, GREEN, MAGENTA, CYAN];

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
    if values.is_empty() {
        return Ok(());
    }
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let n = table.params.len();
    let root = SVGBackend::new(&path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let caption = format!("{} ({})", table.title, table.unit);
    let x_labels = |x: &f64| {
        table
            .params
            .get(x.round() as usize)
            .cloned()
            .unwrap_or_default()
    };
    macro_rules! plot {
        ($y:expr) => {{
            let mut chart = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(70)
                .build_cartesian_2d(-0.2f64..(n as f64 - 0.8), $y)
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_labels(n)
                .x_label_formatter(&x_labels)
                .x_desc(table.param_name.clone())
                .y_desc(table.unit.clone())
                .draw()
                .map_err(|e| e.to_string())?;
            for (i, col) in table.columns.iter().enumerate() {
                let pts: Vec<(f64, f64)> = table
                    .params
                    .iter()
                    .enumerate()
                    .filter_map(|(x, p)| {
                        table
                            .get(p, col)
                            .filter(|v| *v > 0.0)
                            .map(|v| (x as f64, v))
                    })
                    .collect();
                let color = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(col.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| e.to_string())?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
        }};
    }
    if hi / lo > 100.0 {
        plot!((lo / 2.0..hi * 2.0).log_scale());
    } else {
        plot!(0.0..hi * 1.1);
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
