//! SEM_UNDO lists (`ipc/sem.c`: `find_alloc_undo`, `exit_sem`, `freeary`).
//!
//! Each process (tgid) has a map `semid -> UndoEntry`, where an entry holds one semadj per
//! semaphore of the set. Threads of a process share it; a forked child starts without one
//! (nothing to do at fork), and execve keeps it (nothing to do at exec). At process exit every
//! adjustment is added to its semaphore, clamped to `[0, SEMVMX]`, and waiters are woken.
//!
//! Where things live and who guards them:
//! - the per-process maps are sharded by tgid (`UndoMaps`, one mutex per shard), so processes
//!   do not contend with each other; a shard lock is never held while taking a set lock;
//! - each set keeps the list of its entries (`SetUndos`, a leaf lock) for SETVAL/SETALL resets
//!   and for RMID, which closes the list and then unlinks the entries from their processes;
//! - `adj[n]` is written only by the owner of semaphore n (its lock in per-semaphore mode, or
//!   the array lock in global mode), so relaxed atomics suffice.

use super::lock::Locked;
use super::SemSet;
use crate::errno::Errno;
use crate::ipc::consts::SEMVMX;
use crate::ipc::namespace::IpcNamespace;
use crate::sync::{lock, AtomicI32, Mutex, Ordering::Relaxed, ShardedMap};
use crate::{IpcId, Result, Tgid};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// One process's adjustments for one set (`struct sem_undo`).
pub(crate) struct UndoEntry {
    pub(crate) tgid: Tgid,
    pub(crate) semid: IpcId,
    pub(crate) set: Weak<SemSet>,
    pub(crate) adj: Box<[AtomicI32]>,
}

/// A set's entries (`sma->list_id`). Closed by RMID: no entry can be added afterwards.
#[derive(Default)]
pub(crate) struct SetUndos {
    closed: bool,
    entries: Vec<Arc<UndoEntry>>,
}

impl SetUndos {
    /// The entry of the one process that has one (`None` if no process has), or `Err` if
    /// more than one has or the list is closed (the set was removed).
    pub(crate) fn sole_entry(&self) -> std::result::Result<Option<Arc<UndoEntry>>, ()> {
        match self.entries.as_slice() {
            _ if self.closed => Err(()),
            [] => Ok(None),
            [e] => Ok(Some(e.clone())),
            _ => Err(()),
        }
    }

    /// Removes `e` (its adjustments move to the fast path's arena).
    pub(crate) fn remove(&mut self, e: &Arc<UndoEntry>) {
        self.entries.retain(|x| !Arc::ptr_eq(x, e));
    }
}

type ProcUndo = HashMap<IpcId, Arc<UndoEntry>>;

/// The per-process undo maps of a namespace.
#[derive(Default)]
pub(crate) struct UndoMaps {
    shards: ShardedMap<Tgid, ProcUndo>,
}

impl UndoMaps {
    /// `find_alloc_undo`: the process's entry for `set`, made if missing. EIDRM if the set
    /// was removed. Entry: no set lock held.
    pub(crate) fn find_alloc(&self, tgid: Tgid, set: &Arc<SemSet>) -> Result<Arc<UndoEntry>> {
        let mut shard = self.shards.shard(tgid);
        let proc_map = shard.entry(tgid).or_default();
        let semid = set.header.id();
        if let Some(e) = proc_map.get(&semid) {
            if e.set.upgrade().is_some_and(|s| Arc::ptr_eq(&s, set)) {
                return Ok(e.clone());
            }
        }
        let e = Arc::new(UndoEntry {
            tgid,
            semid,
            set: Arc::downgrade(set),
            adj: (0..set.nsems()).map(|_| AtomicI32::new(0)).collect(),
        });
        {
            let mut su = lock(set.undo_list());
            if su.closed {
                if proc_map.is_empty() {
                    shard.remove(&tgid);
                }
                return Err(Errno::EIDRM);
            }
            su.entries.push(e.clone());
        }
        proc_map.insert(semid, e.clone());
        Ok(e)
    }

    /// Removes `e` from its process's map (RMID, or its adjustments moving to the fast path's
    /// arena). Entry: no set lock held.
    pub(crate) fn forget(&self, e: &Arc<UndoEntry>) {
        let mut shard = self.shards.shard(e.tgid);
        if let Some(m) = shard.get_mut(&e.tgid) {
            if m.get(&e.semid).is_some_and(|x| Arc::ptr_eq(x, e)) {
                m.remove(&e.semid);
            }
            if m.is_empty() {
                shard.remove(&e.tgid);
            }
        }
    }

    fn take_process(&self, tgid: Tgid) -> Vec<Arc<UndoEntry>> {
        self.shards
            .shard(tgid)
            .remove(&tgid)
            .map(|m| m.into_values().collect())
            .unwrap_or_default()
    }

    /// How many entries process `tgid` holds (for tests and listings).
    pub(crate) fn count(&self, tgid: Tgid) -> usize {
        self.shards.shard(tgid).get(&tgid).map_or(0, |m| m.len())
    }
}

impl SemSet {
    /// The set's undo list, made empty and open if no one needed it before.
    pub(crate) fn undo_list(&self) -> &Mutex<SetUndos> {
        self.undos.get_or_init(Default::default)
    }

    /// Zeroes semadj of semaphore `n` (SETVAL), or of all (SETALL), in every process.
    /// Entry: global mode (the array lock).
    pub(crate) fn reset_undo(&self, n: Option<usize>) {
        let Some(list) = self.undos.get() else {
            return;
        };
        for e in lock(list).entries.iter() {
            match n {
                Some(n) => e.adj[n].store(0, Relaxed),
                None => e.adj.iter().for_each(|a| a.store(0, Relaxed)),
            }
        }
    }

    /// Closes the set's undo list and returns its entries (RMID, in global mode). A set that
    /// never had one gets a closed one, so that no SEM_UNDO operation racing with RMID can
    /// add an entry afterwards.
    pub(crate) fn close_undo(&self) -> Vec<Arc<UndoEntry>> {
        let mut su = lock(self.undo_list());
        su.closed = true;
        std::mem::take(&mut su.entries)
    }
}

impl IpcNamespace {
    /// After RMID, with no set lock held: unlinks the removed set's entries from their
    /// processes.
    pub(crate) fn sem_forget_undos(&self, entries: Vec<Arc<UndoEntry>>) {
        for e in &entries {
            self.sem.undo.forget(e);
        }
    }

    /// `exit_sem`: applies and drops the SEM_UNDO list of process `tgid` (its last thread
    /// exited). Each adjustment is added and clamped to `[0, SEMVMX]`; never fails or sleeps.
    pub(crate) fn sem_process_exit(&self, tgid: Tgid) {
        let now = self.now();
        for e in self.sem.undo.take_process(tgid) {
            let Some(set) = e.set.upgrade() else { continue };
            let g = set.lock_global();
            if g.arr.deleted {
                continue;
            }
            if let Some(list) = set.undos.get() {
                lock(list).entries.retain(|x| !Arc::ptr_eq(x, &e));
            }
            let mut locked = Locked::Global(g);
            let mut changed = Vec::new();
            for (n, a) in e.adj.iter().enumerate() {
                let a = a.load(Relaxed);
                if a != 0 {
                    let mut s = locked.slot(n);
                    s.val = (s.val + a).clamp(0, SEMVMX);
                    s.pid = tgid.get();
                    changed.push(n);
                }
            }
            locked.update(changed);
            // Linux's exit_sem always stamps otime (on semaphore 0).
            locked.slot(0).otime = now;
        }
    }

    /// How many sets process `tgid` has undo entries for.
    pub fn sem_undo_entries(&self, tgid: i32) -> usize {
        self.sem.undo.count(Tgid::new(tgid))
    }
}
