//! SysV shared memory (`ipc/shm.c`; shmget(2), shmat(2), shmdt(2), shmctl(2)).
//!
//! The engine keeps the books and leaves the address space to its caller:
//! - a segment ([`ShmSegment`]) holds its exact size, the pages charged for it, its memory
//!   (from a [`ShmBacking`], the heap by default) and its locked state (perms, times, pids,
//!   nattch, creator liveness, SHM_LOCK charge, removal mark);
//! - each process (by tgid) has a record of its attachments, keyed by start address, and of
//!   the segments it created (for the exit rules). `shmat` with address 0 picks a unique,
//!   page-aligned fake address in that process; with an address it records exactly there.
//!   A caller that maps the memory itself (a daemon, a preload library) either passes the
//!   address it mapped at, or attaches with 0 and then moves the record to the real address
//!   with [`IpcNamespace::shm_attach_move`], so that a later `shmdt(real address)` matches.
//!
//! Destruction follows `shm_may_destroy`: a segment goes once `nattch == 0` and SHM_DEST is
//! set or `shm_rmid_forced` is 1 (Linux applies the sysctl to every segment at its last
//! detach, whoever created it; observed on 6.18). On exit a creator's unattached segments are
//! destroyed when the sysctl is 1, and otherwise become orphans that a later write of 1
//! destroys (`IpcNamespace::sysctl_write` of `shm_rmid_forced`).
//!
//! rss (`SHM_INFO` in pages, `/proc/sysvipc/shm` in bytes) is what the backing reports as
//! resident: for the heap backing, the pages touched so far by reads or writes, as Linux's
//! shmem counts pages faulted in through a mapping. Swap is always 0 for the heap.
//!
//! Lock order: registry state (rwsem) -> one process shard -> segment state -> memlock table
//! (leaf). Destruction needs the registry write lock and the segment lock, so code that drops
//! an attachment releases its process shard first and takes the registry lock only if the
//! count reached 0 (and re-checks under both locks: exactly one caller destroys).
//!
//! ## Not supported
//! - SHM_HUGETLB and SHM_NORESERVE are accepted (after Linux's EPERM check for the former,
//!   whose privilege is CAP_IPC_LOCK or membership of group 0, the default
//!   `vm.hugetlb_shm_group`), but pages are always 4096 bytes and nothing is reserved.
//! - Mappings the engine does not know about: an explicit `shmat` address is checked for
//!   overlap against this engine's attachments only. SHM_REMAP drops whole overlapped
//!   attachments (Linux would split a partly overlapped mapping).
//! - SHM_LOCK's charge is kept per real uid within the namespace (Linux: per user across
//!   namespaces, shared with other memlock users such as memfd).
//! - The `IPC_64` flag is not stripped from commands: on x86-64 Linux rejects
//!   `IPC_STAT | IPC_64` with EINVAL (observed), and the engine follows x86-64.

mod attach;
mod backing;
mod ctl;
mod get;
mod lifecycle;
mod procfs;
mod procs;
mod segment;

pub use attach::ShmAttach;
pub use backing::{HeapBacking, HeapMemory, ShmBacking, ShmMemory};
pub use ctl::{ShmInfo, ShmSet, ShmUsage, ShmctlOut, ShmidDs};
use segment::SegState;
pub use segment::ShmSegment;

use super::namespace::{HasRegistry, IpcNamespace};
use super::registry::{Registry, RegistryState};
use crate::sync::{lock, AtomicU64, Mutex, MutexGuard, Ordering::Relaxed};
use crate::table::IdLayout;
use procs::ProcTable;
use std::collections::HashMap;
use std::sync::Arc;

/// The namespace's segments and the per-process attachment records.
pub struct ShmIds {
    registry: Registry<ShmSegment>,
    backing: Arc<dyn ShmBacking>,
    /// `shm_tot` in pages; changed only under the registry write lock.
    tot_pages: AtomicU64,
    procs: ProcTable,
    /// Pages charged by SHM_LOCK, per real uid.
    memlock: Mutex<HashMap<u32, u64>>,
}

impl ShmIds {
    pub(crate) fn new(layout: IdLayout, backing: Option<Arc<dyn ShmBacking>>) -> ShmIds {
        ShmIds {
            registry: Registry::new(layout),
            backing: backing.unwrap_or_else(|| Arc::new(HeapBacking)),
            tot_pages: AtomicU64::new(0),
            procs: ProcTable::new(),
            memlock: Mutex::new(HashMap::new()),
        }
    }
}

impl HasRegistry<ShmSegment> for ShmIds {
    fn registry(&self) -> &Registry<ShmSegment> {
        &self.registry
    }
}

impl IpcNamespace {
    /// `shm_may_destroy`, with the segment locked.
    fn shm_may_destroy(&self, s: &SegState) -> bool {
        s.nattch == 0
            && (self.limits.shm_rmid_forced() || s.perm.mode & super::consts::SHM_DEST != 0)
    }

    /// `shm_destroy`. Entry: registry write lock held (`st`), `s` is `seg`'s locked state, not
    /// yet deleted, and the caller holds no process shard. Exit: the segment is unpublished,
    /// its pages and lock charge returned, and its creator record forgets it.
    fn shm_destroy(
        &self,
        st: &mut RegistryState<ShmSegment>,
        seg: &ShmSegment,
        mut s: MutexGuard<'_, SegState>,
    ) {
        debug_assert!(!s.deleted);
        s.deleted = true;
        let creator = s.creator.take();
        let locked = s.locked_by.take();
        drop(s);
        let ids = &self.shm;
        ids.registry.remove(st, seg);
        ids.tot_pages.fetch_sub(seg.pages, Relaxed);
        if let Some(uid) = locked {
            self.shm_unlock_charge(uid, seg.pages);
        }
        if let Some(tgid) = creator {
            ids.procs.forget_created(tgid, seg.header.id());
        }
    }

    /// Charges `pages` to `uid` for SHM_LOCK (`user_shm_lock`): refused (false) when the
    /// total would pass `limit_pages` and the caller may not override.
    pub(super) fn shm_lock_charge(&self, uid: u32, pages: u64, limit: Option<u64>) -> bool {
        let mut m = lock(&self.shm.memlock);
        let cur = m.entry(uid).or_insert(0);
        let new = cur.saturating_add(pages);
        if let Some(limit) = limit {
            if new > limit || new >= i64::MAX as u64 {
                return false;
            }
        }
        *cur = new;
        true
    }

    pub(super) fn shm_unlock_charge(&self, uid: u32, pages: u64) {
        let mut m = lock(&self.shm.memlock);
        if let Some(cur) = m.get_mut(&uid) {
            *cur = cur.saturating_sub(pages);
            if *cur == 0 {
                m.remove(&uid);
            }
        }
    }
}
