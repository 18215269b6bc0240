//! One segment and what its lock protects (the module doc of [`super`] has the lock order).

use super::ShmMemory;
use crate::ipc::perm::IpcPerm;
use crate::ipc::registry::{IpcHeader, IpcObject};
use crate::sync::{lock, Mutex, MutexGuard};
use crate::Tgid;
use std::sync::Arc;

/// One segment.
pub struct ShmSegment {
    pub(super) header: IpcHeader,
    /// `shm_segsz`: the exact size asked for.
    pub(super) size: u64,
    /// Pages charged to `shm_tot`.
    pub(super) pages: u64,
    pub(super) memory: Arc<dyn ShmMemory>,
    pub(super) state: Mutex<SegState>,
}

/// What a segment's lock protects.
pub(super) struct SegState {
    pub(super) perm: IpcPerm,
    pub(super) atime: i64,
    pub(super) dtime: i64,
    pub(super) ctime: i64,
    pub(super) cpid: i32,
    pub(super) lpid: i32,
    pub(super) nattch: u64,
    /// The creating process while it lives (Linux: on the creator's `shm_clist`).
    pub(super) creator: Option<Tgid>,
    /// The real uid charged for SHM_LOCK (Linux: `mlock_ucounts`).
    pub(super) locked_by: Option<u32>,
    /// Destroyed: lookups already fail; holders of the Arc get EIDRM.
    pub(super) deleted: bool,
}

impl IpcObject for ShmSegment {
    /// The segment's size in bytes (`shm_more_checks`).
    type KeyInfo = u64;
    fn header(&self) -> &IpcHeader {
        &self.header
    }
    fn key_info_word(size: u64) -> u64 {
        size
    }
}

impl ShmSegment {
    pub(super) fn lock(&self) -> MutexGuard<'_, SegState> {
        lock(&self.state)
    }
    /// The full id.
    pub fn id(&self) -> i32 {
        self.header.id().get()
    }
}
