//! shm operations for `uipc conform ipc`. Keys: `ctx.key(2, n)`. Not built yet.

use super::Ctx;

/// Draws one shm operation, applies it to the host and the engine, and compares.
pub fn step(_ctx: &mut Ctx) {}
