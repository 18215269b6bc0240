//! Results and how they are shown: tables laid out like the seeds' (rows of sizes, columns of
//! implementations, the seed's unit), ratio columns against the host kernel and the "before"
//! design, and the JSON form.

use serde::Serialize;

/// One measured cell: the median over runs and the spread.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Which of the seed's tables the row belongs to.
    pub table: String,
    /// The row's size (KEYS, timers, index pair, ...).
    pub param: String,
    /// The implementation ("uipc", "before", "kernel", "dashmap", ...).
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Median total microseconds over the runs (the seeds report totals).
    pub micros: f64,
    /// Standard deviation of the totals over the runs.
    pub stddev_micros: f64,
    /// How many runs the median is over.
    pub runs: usize,
    /// Each run's total, in the order the runs were made (cells of one table measured side by
    /// side share the run index).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub samples_micros: Vec<f64>,
    /// Anything a reader must know about this cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A whole table as printed.
#[derive(Clone, Debug)]
pub struct Table {
    /// Its title (the seed's table name).
    pub title: String,
    /// The row header ("keys", "timers", ...).
    pub param_name: String,
    /// The unit of the cells, as the seed gives it.
    pub unit: String,
    /// Implementations, in column order.
    pub columns: Vec<String>,
    /// Row parameters, in order.
    pub params: Vec<String>,
    /// Cells.
    pub rows: Vec<Row>,
    /// Why a column has no value, shown under the table.
    pub absent: Vec<String>,
    /// Whether to print the kernel/uipc and before/uipc columns (off for tables of ratios).
    pub ratios: bool,
    /// Print one uipc/kernel column instead (how many times the kernel's cost uipc pays, or
    /// for throughputs the share of the kernel's that uipc reaches).
    pub uipc_over: bool,
}

/// Median of `xs` (not empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Population standard deviation of `xs`.
pub fn stddev(xs: &[f64]) -> f64 {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt()
}

fn fmt_micros(v: f64) -> String {
    if v >= 100.0 {
        format!("{:.0}", v)
    } else if v >= 1.0 {
        format!("{:.1}", v)
    } else {
        format!("{:.3}", v)
    }
}

/// A ratio with one decimal, or two significant digits below 0.1 (so that a large loss shows as
/// `0.0046x`, not `0.0x`).
fn fmt_ratio(r: f64) -> String {
    if r >= 0.1 || r <= 0.0 {
        format!("{r:.1}x")
    } else {
        let decimals = (1.0 - r.log10().floor()) as usize;
        format!("{r:.decimals$}x")
    }
}

impl Table {
    /// A table with no cells yet.
    pub fn new(title: &str, param_name: &str, unit: &str, columns: &[&str]) -> Table {
        Table {
            title: title.into(),
            param_name: param_name.into(),
            unit: unit.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            params: Vec::new(),
            rows: Vec::new(),
            absent: Vec::new(),
            ratios: true,
            uipc_over: false,
        }
    }

    /// The same table without ratio columns.
    pub fn without_ratios(mut self) -> Table {
        self.ratios = false;
        self
    }

    /// The same table with one uipc/kernel ratio column instead of kernel/uipc.
    pub fn uipc_over_kernel(mut self) -> Table {
        self.uipc_over = true;
        self
    }

    /// Records the totals of every run of one cell.
    pub fn add(&mut self, param: &str, implementation: &str, totals_micros: &[f64]) {
        if !self.params.iter().any(|p| p == param) {
            self.params.push(param.into());
        }
        self.rows.push(Row {
            table: self.title.clone(),
            param: param.into(),
            implementation: implementation.into(),
            micros: median(totals_micros),
            stddev_micros: stddev(totals_micros),
            runs: totals_micros.len(),
            samples_micros: totals_micros.to_vec(),
            note: None,
        });
    }

    /// Cells the table promises (every column for every row) but does not have. A table may
    /// leave a cell empty only when one of its notes says why.
    pub fn missing_cells(&self) -> Vec<String> {
        let mut missing = Vec::new();
        for p in &self.params {
            for c in &self.columns {
                if self.get(p, c).is_none() {
                    missing.push(format!("{}: {} / {}", self.title, p, c));
                }
            }
        }
        missing
    }

    /// Whether every missing cell is explained by a note.
    pub fn complete_or_explained(&self) -> bool {
        self.missing_cells().is_empty() || !self.absent.is_empty()
    }

    /// The median of a cell, if measured.
    pub fn get(&self, param: &str, implementation: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.param == param && r.implementation == implementation)
            .map(|r| r.micros)
    }

    /// The table as text: one column per implementation (median, then ± stddev), then how many
    /// times uipc is faster than the kernel and than the "before" design.
    pub fn render(&self) -> String {
        let mut header = vec![self.param_name.clone()];
        for c in &self.columns {
            header.push(format!("{c} ({})", self.unit));
        }
        let ratios: Vec<&str> = ["kernel", "before", "mainline"]
            .into_iter()
            .filter(|b| self.columns.iter().any(|c| c == b))
            .filter(|b| !self.uipc_over || *b == "kernel")
            .collect();
        let has_uipc = self.ratios && self.columns.iter().any(|c| c == "uipc");
        if has_uipc {
            for b in &ratios {
                header.push(if self.uipc_over {
                    format!("uipc/{b}")
                } else {
                    format!("{b}/uipc")
                });
            }
        }
        let mut lines = vec![header];
        for p in &self.params {
            let mut line = vec![p.clone()];
            for c in &self.columns {
                let cell = self
                    .rows
                    .iter()
                    .find(|r| &r.param == p && &r.implementation == c);
                line.push(match cell {
                    Some(r) if r.runs > 1 => {
                        format!("{} ±{}", fmt_micros(r.micros), fmt_micros(r.stddev_micros))
                    }
                    Some(r) => fmt_micros(r.micros),
                    None => "-".into(),
                });
            }
            if has_uipc {
                for b in &ratios {
                    line.push(match (self.get(p, b), self.get(p, "uipc")) {
                        (Some(x), Some(u)) if self.uipc_over && x > 0.0 => fmt_ratio(u / x),
                        (Some(x), Some(u)) if !self.uipc_over && u > 0.0 => fmt_ratio(x / u),
                        _ => "-".into(),
                    });
                }
            }
            lines.push(line);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|i| {
                lines
                    .iter()
                    .map(|l| l[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = format!("{}\n", self.title);
        for l in &lines {
            let cells: Vec<String> = l
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:>w$}"))
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        for a in &self.absent {
            out.push_str(&format!("  note: {a}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_stddev() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(stddev(&[2.0, 2.0]), 0.0);
        assert!((stddev(&[1.0, 3.0]) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        let cases = [
            (20.0, "20.0x"),
            (0.8, "0.8x"),
            (0.0046, "0.0046x"),
            (0.05, "0.050x"),
        ];
        for (ratio, shown) in cases {
            assert_eq!(fmt_ratio(ratio), shown);
        }
    }

    #[test]
    fn uipc_over_kernel_shows_one_inverse_ratio() {
        let mut t = Table::new("calls", "call", "ns", &["kernel", "uipc"]).uipc_over_kernel();
        t.add("semop", "kernel", &[200.0]);
        t.add("semop", "uipc", &[5000.0]);
        let s = t.render();
        assert!(
            s.contains("uipc/kernel") && s.contains("25.0x") && !s.contains("kernel/uipc"),
            "{s}"
        );
    }

    #[test]
    fn renders_every_column_and_the_ratios() {
        let mut t = Table::new("create loop", "keys", "µs", &["uipc", "before", "kernel"]);
        t.add("10", "uipc", &[1.0, 1.0]);
        t.add("10", "before", &[50.0]);
        t.add("10", "kernel", &[20.0]);
        let s = t.render();
        assert!(
            s.contains("kernel/uipc") && s.contains("20.0x") && s.contains("50.0x"),
            "{s}"
        );
    }
}
