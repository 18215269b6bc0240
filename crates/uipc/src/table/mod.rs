//! The scalable tables the seeds are about, each usable and tested on its own.
//!
//! - [`cyclic::CyclicIdAllocator`]: seed 002's cyclic ids with sequence numbers, on a
//!   `fixedbitset` of used indices.
//! - [`direct::DirectMap`]: index -> object, a slot per index in chunks made on first use.

pub mod cyclic;
pub mod direct;

pub use cyclic::{CyclicIdAllocator, IdLayout};
pub use direct::DirectMap;
