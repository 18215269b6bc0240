//! msg operations for `uipc conform ipc`. Keys: `ctx.key(1, n)`. Not built yet.

use super::Ctx;

/// Draws one msg operation, applies it to the host and the engine, and compares.
pub fn step(_ctx: &mut Ctx) {}
