//! SysV semaphores (`ipc/sem.c`; semget(2), semop(2), semctl(2)).
//!
//! A [`SemSet`] is an array of semaphores. Each semaphore has its own lock (`SemSlot`: value,
//! sempid, otime and the queue of sleeping single-sop operations on it); the array has one more
//! lock (`ArrayState`: ctime, the removed mark, the queue of sleeping multi-sop operations).
//!
//! # Locking (Linux's scheme since "ipc,sem: fine grained locking for semtimedop", 2013)
//!
//! - A single-sop semop runs in *per-semaphore mode*: it takes only that semaphore's lock, then
//!   re-reads the set's `global` flag; if it is clear, nothing else can touch that semaphore or
//!   its queue (no multi-sop operation is sleeping or running, the set is not removed).
//! - Everything else (multi-sop semop, every semctl, undo at exit, RMID) takes the array lock and
//!   enters *global mode*: it sets `global` and, if it was clear, takes and drops every
//!   semaphore lock once, so that single-sop operations already inside finish first. While
//!   `global` is set, single-sop operations take the array lock too. The flag is cleared again
//!   by an array-lock holder only when no multi-sop operation sleeps and
//!   `HYSTERESIS` global-mode unlocks in a row happened (Linux's `use_global_lock`); it is
//!   never cleared once the set is removed.
//! - So a semaphore's data is owned either by the holder of its own lock who saw `global`
//!   clear, or by the holder of the array lock (who still locks the semaphore's mutex for each
//!   access; that lock is then only ever held briefly by per-semaphore attempts that back off).
//!
//! Lock order: registry state (rwsem) -> array lock -> semaphore lock -> undo list of the set
//! -> waiter state. The per-process undo maps (module `undo`) are taken before any set lock, never
//! while holding one. Permissions are atomics read without a lock (Linux reads them under RCU
//! only), written under the array lock by IPC_SET.
//!
//! # Queues and wakeups
//!
//! A sleeping single-sop operation waits in its semaphore's queue, a multi-sop one in the
//! array's queue; every one carries a set-wide arrival number. After any change the waker
//! completes every waiting operation that can now proceed (see module `op`): first all
//! wait-for-zero ones, then the earliest (by arrival) altering one that can proceed, again and
//! again until none can. Waiters are completed only when their operation succeeded (or failed
//! for good: ERANGE, or EAGAIN from an IPC_NOWAIT sop reached on a retry, as on Linux).
//!
//! # Not supported
//! - `CLONE_SYSVSEM` sharing of undo lists between processes: a list belongs to one tgid.
//! - Undo lists are not charged against SEMMNU/SEMUME (Linux does not enforce them either).
//! - EFAULT from unreadable user memory: arguments are typed Rust values. The only EFAULTs
//!   left are a SETALL buffer shorter than nsems and a command given the wrong
//!   [`SemctlArg`] variant.
//! - IPC_64 in semctl's `cmd` is not stripped: the x86-64 kernel does not parse it (the host
//!   gives EINVAL for `IPC_STAT | IPC_64`), and glibc never sets it there. The old (IPC_OLD)
//!   layouts of 32-bit callers are not offered.

mod ctl;
pub mod fast;
mod lock;
#[cfg(all(test, loom))]
mod loom_models;
pub(crate) mod op;
mod parked;
mod types;
pub(crate) mod undo;

use super::namespace::{HasRegistry, IpcNamespace};
use super::perm::{IpcPerm, IpcPermStat};
#[cfg(not(loom))]
use super::registry::spare::SparePool;
use super::registry::{IpcHeader, IpcObject, Registry};
use crate::sync::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Mutex, Ordering::Relaxed};
use crate::table::IdLayout;
use crate::{IpcId, IpcKey};
use lock::{ArrayState, SemSlot, SemSlots, HYSTERESIS};
use once_cell::race::OnceBox;
use std::fmt::Write as _;

pub use parked::ParkedSemop;
pub use types::{SemInfo, Sembuf, SemctlArg, SemctlOut, SemidDs, Timespec};

/// One semaphore set (`struct sem_array`).
///
/// A one-semaphore set is 104 bytes, so with the `Arc`'s two counts it fills one 128-byte
/// malloc chunk: two cache lines for a `semget` to write (it was 160 bytes, a 192-byte chunk).
/// Field order is the memory order (`repr(C)`): the two one-byte flags fill the padding after
/// the permissions.
#[repr(C)]
pub struct SemSet {
    header: IpcHeader,
    perm: PermCell,
    /// Global mode (Linux's `use_global_lock > 0`): see the module doc.
    global: AtomicBool,
    /// Which kind `sems` holds: a boxed array (more than one semaphore) or one inline. Fixed
    /// at creation.
    many: bool,
    array: Mutex<ArrayState>,
    sems: SemSlots,
    /// The processes' SEM_UNDO entries for this set, made by the first SEM_UNDO operation
    /// (or RMID): most sets never have one, and an 8-byte pointer takes the place of the
    /// 40-byte list.
    undos: OnceBox<Mutex<undo::SetUndos>>,
}

impl Drop for SemSet {
    fn drop(&mut self) {
        // SAFETY: `many` came from `SemSlots::new` with `sems` and never changes; the set is
        // being dropped, so `sems` is not used again.
        unsafe { self.sems.drop_with(self.many) }
    }
}

impl IpcObject for SemSet {
    /// The number of semaphores (`sem_more_checks`).
    type KeyInfo = u32;
    fn header(&self) -> &IpcHeader {
        &self.header
    }
    fn key_info_word(nsems: u32) -> u64 {
        u64::from(nsems)
    }
    /// Sets are kept for reuse when a namespace goes (`registry::spare`): the seed's loop
    /// creates them in new namespaces one after another.
    #[cfg(not(loom))]
    fn spare_pool() -> Option<&'static SparePool<SemSet>> {
        static SPARE_SETS: SparePool<SemSet> = SparePool::new();
        Some(&SPARE_SETS)
    }
}

impl SemSet {
    fn new(id: IpcId, key: IpcKey, perm: &IpcPerm, nsems: usize, now: i64) -> SemSet {
        let (sems, many) = SemSlots::new(nsems);
        SemSet {
            header: IpcHeader::new(id, key),
            perm: PermCell::new(perm),
            global: AtomicBool::new(false),
            many,
            array: Mutex::new(ArrayState {
                ctime: now,
                deleted: false,
                complex: Default::default(),
                hysteresis: HYSTERESIS,
            }),
            sems,
            undos: OnceBox::new(),
        }
    }

    /// The number of semaphores.
    pub fn nsems(&self) -> usize {
        self.sems().len()
    }

    /// The semaphores, each with its own lock (see the module doc for who may take which).
    pub(crate) fn sems(&self) -> &[Mutex<SemSlot>] {
        // SAFETY: `many` came from `SemSlots::new` with `sems` and never changes.
        unsafe { self.sems.get(self.many) }
    }
}

/// The owner/mode part of a set, readable without a lock (ids stored as their bit patterns).
/// Written only under the array lock.
struct PermCell {
    uid: AtomicI32,
    gid: AtomicI32,
    mode: AtomicI32,
    cuid: u32,
    cgid: u32,
}

impl PermCell {
    fn new(p: &IpcPerm) -> PermCell {
        PermCell {
            uid: AtomicI32::new(p.uid as i32),
            gid: AtomicI32::new(p.gid as i32),
            mode: AtomicI32::new(p.mode as i32),
            cuid: p.cuid,
            cgid: p.cgid,
        }
    }
    fn get(&self) -> IpcPerm {
        IpcPerm {
            uid: self.uid.load(Relaxed) as u32,
            gid: self.gid.load(Relaxed) as u32,
            cuid: self.cuid,
            cgid: self.cgid,
            mode: self.mode.load(Relaxed) as u32,
        }
    }
    fn store(&self, p: &IpcPerm) {
        self.uid.store(p.uid as i32, Relaxed);
        self.gid.store(p.gid as i32, Relaxed);
        self.mode.store(p.mode as i32, Relaxed);
    }
    fn stat(&self, key: i32, seq: u32) -> IpcPermStat {
        self.get().stat(key, seq)
    }
}

/// The namespace's semaphore sets.
pub struct SemIds {
    registry: Registry<SemSet>,
    /// Semaphores in all sets (`used_sems`); changed only under the registry's writer lock.
    used_sems: AtomicI64,
    /// Arrival numbers of sleeping operations, for all sets: a set's waker serves its waiters
    /// in the order of these numbers, and one counter for the namespace orders each set's
    /// sleepers as well as a counter per set would (sleeping is the slow path; the set so
    /// carries no counter of its own).
    arrivals: AtomicU64,
    undo: undo::UndoMaps,
    /// The fast path's arena, if the embedder gave one (`fast`).
    arena: Option<std::sync::Arc<fast::owner::SemArena>>,
}

impl SemIds {
    pub(crate) fn new(
        layout: IdLayout,
        arena: Option<std::sync::Arc<fast::owner::SemArena>>,
    ) -> SemIds {
        SemIds {
            registry: Registry::new(layout),
            used_sems: AtomicI64::new(0),
            arrivals: AtomicU64::new(0),
            undo: undo::UndoMaps::default(),
            arena,
        }
    }
}

impl HasRegistry<SemSet> for SemIds {
    fn registry(&self) -> &Registry<SemSet> {
        &self.registry
    }
}

impl IpcNamespace {
    /// `/proc/sysvipc/sem`: header, then one row per set in index order. otime is the latest
    /// of the semaphores' otimes, as Linux's `get_semotime`.
    pub fn proc_sysvipc_sem(&self) -> String {
        let mut out = String::from(
            "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n",
        );
        for set in self.sem.registry.snapshot() {
            // A published set's otime is the arena's: take it back for the row.
            let _inside = self.sem_fast_enter(set.header.id());
            let (ctime, otime) = {
                let arr = crate::sync::lock(&set.array);
                (arr.ctime, set.otime())
            };
            let p = set.perm.get();
            let _ = writeln!(
                out,
                "{:10} {:10}  {:4o} {:10} {:5} {:5} {:5} {:5} {:10} {:10}",
                set.header.key(),
                set.header.id(),
                p.mode,
                set.nsems(),
                p.uid,
                p.gid,
                p.cuid,
                p.cgid,
                otime,
                ctime
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    /// A one-semaphore set is one allocation of the `Arc` (two counts) and the set; at most
    /// 120 bytes keeps it in malloc's 128-byte chunks (8 bytes of each are malloc's): two
    /// cache lines a `semget` writes.
    #[test]
    #[cfg(not(loom))]
    fn a_one_semaphore_set_fits_a_128_byte_chunk() {
        assert!(std::mem::size_of::<super::SemSet>() + 16 <= 120);
    }
}
