//! The designs the seeds replaced, kept only to benchmark against. Nothing else uses them.

pub mod global_locks;
pub mod linear_keys;
