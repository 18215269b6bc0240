//! The scalable tables the seeds are about, each usable and tested on its own.
//!
//! - [`cyclic::CyclicIdAllocator`]: seed 002's cyclic ids with sequence numbers, on a
//!   `fixedbitset` of used indices.
//! - [`idmap::IdMap`]: lock-free index -> object lookup (the kernel's RCU IDR lookup).

pub mod cyclic;
pub mod hash;
pub mod idmap;

pub use cyclic::{CyclicIdAllocator, IdLayout};
pub use idmap::{IdMap, IdMapWriter};
