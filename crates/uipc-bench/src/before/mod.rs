//! The designs the seeds replaced (and, for timers, seed 004 as merged in Linux), kept only to
//! benchmark against. Nothing else uses them.

pub mod global_locks;
pub mod linear_keys;
pub mod timer_tables;
