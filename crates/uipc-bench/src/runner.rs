//! A bench run as its scenarios see it: the options, a progress bar, and the rounds that
//! alternate a row's implementations ([`Bench`]).

use crate::report::Table;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// How a bench run is set up.
#[derive(Clone, Debug)]
pub struct Options {
    /// Repetitions of each cell; the median is reported.
    pub runs: usize,
    /// Smaller sizes, for CI smoke runs.
    pub quick: bool,
}

/// What a scenario sees while it runs.
pub struct Bench {
    /// The run's options.
    pub opts: Options,
    progress: ProgressBar,
}

impl Bench {
    /// A run with a progress bar on stderr (hidden when stderr is not a terminal).
    pub fn new(opts: Options) -> Bench {
        let progress = ProgressBar::with_draw_target(
            Some(0),
            if std::io::stderr().is_terminal() {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        progress.set_style(
            ProgressStyle::with_template("{spinner} {prefix:>12} [{bar:30}] {pos}/{len} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Bench { opts, progress }
    }

    /// Announces `steps` more units of work for `scenario`.
    pub fn plan(&self, scenario: &str, steps: u64) {
        self.progress.set_prefix(scenario.to_string());
        self.progress
            .set_length(self.progress.length().unwrap_or(0) + steps);
    }

    /// One unit done; `what` says what runs now.
    pub fn step(&self, what: &str) {
        self.progress.set_message(what.to_string());
        self.progress.inc(1);
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.progress.finish_and_clear();
    }

    /// Measures several implementations side by side and adds each one's totals
    /// (microseconds) to row `row` of `t`: `opts.runs` rounds, each running every closure
    /// once in the order given. Alternating them, rather than running one column's
    /// repetitions back to back, spreads a stretch of noise on a shared machine (another
    /// tenant's burst, a cache flushed by a neighbour) over every column's runs alike, so the
    /// medians' ratios hold. A closure reports a failed run as NaN: an implementation with
    /// one is left out of the row, and its name returned.
    pub fn rounds(
        &self,
        t: &mut Table,
        row: &str,
        impls: &mut [(&str, &mut dyn FnMut() -> f64)],
    ) -> Vec<String> {
        let mut runs = vec![Vec::with_capacity(self.opts.runs); impls.len()];
        for _ in 0..self.opts.runs {
            for ((name, f), runs) in impls.iter_mut().zip(&mut runs) {
                runs.push(f());
                self.step(&format!("{}: {row} {name}", t.title));
            }
        }
        let mut failed = Vec::new();
        for ((name, _), runs) in impls.iter().zip(&runs) {
            if runs.iter().all(|v| v.is_finite()) {
                t.add(row, name, runs);
            } else {
                failed.push(name.to_string());
            }
        }
        failed
    }
}
