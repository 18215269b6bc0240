//! sem operations for `uipc conform ipc`. Keys: `ctx.key(0, n)`. Not built yet.

use super::Ctx;

/// Draws one sem operation, applies it to the host and the engine, and compares.
pub fn step(_ctx: &mut Ctx) {}
