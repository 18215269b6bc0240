//! `uipc conform ipc`: not built yet.

use crate::{Options, Report};

/// Runs the ipc differential. Not built yet: reports no operations.
pub fn run(_opts: &Options) -> Result<Report, String> {
    Err("uipc conform ipc is not implemented yet".into())
}
