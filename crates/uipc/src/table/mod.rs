//! The scalable tables the seeds are about, each usable and tested on its own.
//!
//! - [`cyclic::CyclicIdAllocator`]: seed 002's cyclic ids with sequence numbers, on a
//!   `fixedbitset` of used indices.

pub mod cyclic;

pub use cyclic::{CyclicIdAllocator, IdLayout};
