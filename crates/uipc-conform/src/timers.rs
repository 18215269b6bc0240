//! `uipc conform timers`: not built yet.

use crate::{Options, Report};

/// Runs the timers differential. Not built yet: reports no operations.
pub fn run(_opts: &Options) -> Result<Report, String> {
    Err("uipc conform timers is not implemented yet".into())
}
