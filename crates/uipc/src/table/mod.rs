//! The scalable tables the seeds are about, each usable and tested on its own.
//!
//! - [`bitmap::SparseBitmap`]: used indices, memory proportional to what is set.
//! - [`cyclic::CyclicIdAllocator`]: seed 002's cyclic ids with sequence numbers.
//! - [`idmap::IdMap`]: lock-free index -> object lookup (the kernel's RCU IDR lookup).

pub mod bitmap;
pub mod cyclic;
pub mod hash;
pub mod idmap;

pub use bitmap::SparseBitmap;
pub use cyclic::{CyclicIdAllocator, IdLayout};
pub use idmap::{IdMap, IdMapWriter};
