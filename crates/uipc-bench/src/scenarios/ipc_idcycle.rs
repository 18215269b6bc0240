//! Seed 002: not built yet.

use crate::report::Table;
use crate::Bench;

/// Runs the scenario.
pub fn run(_b: &Bench) -> Vec<Table> {
    Vec::new()
}
