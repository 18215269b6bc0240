//! The scalable tables the seeds are about, each usable and tested on its own.
//!
//! - [`cyclic::CyclicIdAllocator`]: seed 002's cyclic ids with sequence numbers, on a
//!   `fixedbitset` of used indices.
//! - [`direct::DirectMap`]: index -> object, a slot per index in chunks made on first use.
//! - [`hash::KeyHasher`]: the key map's hasher, which keeps runs of consecutive keys together.

pub mod cyclic;
pub mod direct;
pub mod hash;
#[cfg(all(test, loom))]
mod loom_models;

pub use cyclic::{CyclicIdAllocator, IdLayout};
pub use direct::DirectMap;
