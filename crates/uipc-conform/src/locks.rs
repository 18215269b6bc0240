//! `uipc conform locks`: not built yet.

use crate::{Options, Report};

/// Runs the locks differential. Not built yet: reports no operations.
pub fn run(_opts: &Options) -> Result<Report, String> {
    Err("uipc conform locks is not implemented yet".into())
}
