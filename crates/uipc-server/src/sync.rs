//! The daemon's one poison-ignoring mutex helper.
//!
//! A panic while a lock is held is already a bug the daemon reports; refusing every later
//! request that needs the same lock would turn that one bug into a denial of service for all
//! clients, so poisoning is ignored here as it is in the engine (`uipc`'s `sync` module).

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
