//! The daemon's part of the flock leases that the engine cannot do itself
//! (`uipc::locks::flockfast`, ARCHITECTURE.md "flock leases"): naming each description a lock
//! call goes through by the daemon's own descriptor of it (the descriptions table's copy,
//! which a client compares its descriptor with by `kcmp`); `lockserve::area` hands out the
//! area's memfd.
//!
//! A call names its description after the table entered it and unnames it before the table
//! may let it go, so a name never outlives the descriptor it points at while a grant can use
//! it; a granted lease keeps the entry (the engine's `owns_any` counts it).

use uipc::locks::{LockManager, OfdId};

use crate::descriptions::Descriptions;

/// Names `ofd` for the call that just entered it in `descriptions`.
pub fn name(locks: &LockManager, descriptions: &Descriptions, ofd: OfdId) {
    let Some(slots) = locks.flock_slots() else {
        return;
    };
    if let Some(fd) = descriptions.copy_of(ofd) {
        slots.name(ofd, fd);
    }
}

/// Ends the naming of [`name`] (harmless where nothing was named).
pub fn unname(locks: &LockManager, ofd: OfdId) {
    if let Some(slots) = locks.flock_slots() {
        slots.unname(ofd);
    }
}
