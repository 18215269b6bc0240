//! Per-process timer state (Linux keeps it in `signal_struct`) and the process registry.
//!
//! Each process has an id counter, the restore-ids switch of `prctl(PR_TIMER_CREATE_RESTORE_IDS)`
//! and the set of its timer ids, which process exit and exec walk to delete them. The registry
//! maps a tgid to that state in 64 shards, so creates in different processes rarely share a
//! lock; lookups by id (gettime, getoverrun) do not touch the registry at all.
//!
//! Id allocation (§8.1): `id = next.fetch_add(1) & mask`, taken if the table holds no slot for
//! `(process, id)`, else the next value is tried, `mask + 1` times at most, then EAGAIN. `mask`
//! is `INT_MAX` unless a test configures a smaller id space. Restore mode (§8.2) takes exactly
//! the requested id (EBUSY if held) and moves the counter to `id + 1`.
//!
//! Locks: a registry shard lock and `ProcState::ids` are leaves with respect to each other (never
//! nested). `ids` may be taken while holding nothing else, or after a table stripe lock was
//! released; never while holding a timer's state lock.

use std::collections::HashSet;

use super::lock;
use super::table::TimerTable;
use super::types::TimerId;
use crate::errno::{Errno, Result};
use crate::sync::{Arc, AtomicBool, AtomicU32, Mutex, Ordering, ShardedMap};
use crate::Tgid;

/// The timer ids a process holds, and whether it has gone (exit or exec).
#[derive(Default)]
pub(crate) struct IdSet {
    pub(crate) ids: HashSet<TimerId>,
    pub(crate) dead: bool,
}

/// One process's timer bookkeeping.
#[derive(Default)]
pub(crate) struct ProcState {
    next_id: AtomicU32,
    restore_ids: AtomicBool,
    pub(crate) ids: Mutex<IdSet>,
}

impl ProcState {
    /// Whether `prctl(PR_TIMER_CREATE_RESTORE_IDS, 1)` is in force.
    pub(crate) fn restore_ids(&self) -> bool {
        self.restore_ids.load(Ordering::Relaxed)
    }

    pub(crate) fn set_restore_ids(&self, on: bool) {
        self.restore_ids.store(on, Ordering::Relaxed);
    }

    /// The id counter's next value (kept across execve, as `signal_struct` is).
    pub(crate) fn next_id(&self) -> u32 {
        self.next_id.load(Ordering::Relaxed)
    }

    pub(crate) fn set_next_id(&self, next: u32) {
        self.next_id.store(next, Ordering::Relaxed);
    }

    /// Reserves the id of a new timer in the table: exactly `wanted` in restore mode (EBUSY if
    /// held; on success the counter moves on past it), else the next free one the counter
    /// gives within `mask` (`posix_timer_add`; EAGAIN once every id was tried).
    ///
    /// Entry/exit: no lock held; takes table stripe locks one at a time.
    pub(crate) fn reserve_id<T>(
        &self,
        table: &TimerTable<T>,
        tgid: Tgid,
        wanted: Option<TimerId>,
        mask: u32,
    ) -> Result<TimerId> {
        if let Some(id) = wanted {
            if !table.try_reserve(tgid, id) {
                return Err(Errno::EBUSY);
            }
            self.next_id
                .store((id.raw() as u32).wrapping_add(1), Ordering::Relaxed);
            return Ok(id);
        }
        for _ in 0..=mask as u64 {
            let id =
                TimerId::from_raw((self.next_id.fetch_add(1, Ordering::Relaxed) & mask) as i32);
            if table.try_reserve(tgid, id) {
                return Ok(id);
            }
        }
        Err(Errno::EAGAIN)
    }

    /// Records `id` as held. False if the process died meanwhile (the caller undoes the create).
    pub(crate) fn add(&self, id: TimerId) -> bool {
        let mut set = lock(&self.ids);
        if set.dead {
            return false;
        }
        set.ids.insert(id);
        true
    }

    pub(crate) fn forget(&self, id: TimerId) {
        lock(&self.ids).ids.remove(&id);
    }

    /// Marks the process gone and hands back the ids it held.
    pub(crate) fn kill(&self) -> Vec<TimerId> {
        let mut set = lock(&self.ids);
        set.dead = true;
        set.ids.drain().collect()
    }
}

/// tgid -> [`ProcState`], sharded.
pub(crate) struct Registry {
    shards: ShardedMap<Tgid, Arc<ProcState>>,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            shards: ShardedMap::new(),
        }
    }

    /// The state of `tgid`, created fresh (counter 0, restore off) on first use.
    pub(crate) fn get_or_create(&self, tgid: Tgid) -> Arc<ProcState> {
        self.shards.shard(tgid).entry(tgid).or_default().clone()
    }

    /// The state of `tgid`, if it ever used timers since its last exit/exec.
    pub(crate) fn get(&self, tgid: Tgid) -> Option<Arc<ProcState>> {
        self.shards.shard(tgid).get(&tgid).cloned()
    }

    /// Forgets `tgid` entirely; its next use starts from a fresh state.
    pub(crate) fn remove(&self, tgid: Tgid) -> Option<Arc<ProcState>> {
        self.shards.shard(tgid).remove(&tgid)
    }
}

/// Per-real-uid count of RLIMIT_SIGPENDING units (Linux's `ucounts`), sharded.
///
/// Every timer holds one unit from create to delete. The embedder may charge its own queued
/// signals through [`super::Timers::charge_sigpending`], since Linux counts both together.
pub(crate) struct SigpendingCounts {
    shards: ShardedMap<u32, u64>,
}

impl SigpendingCounts {
    pub(crate) fn new() -> SigpendingCounts {
        SigpendingCounts {
            shards: ShardedMap::new(),
        }
    }

    /// Takes one unit unless that would exceed `limit` (`inc_rlimit_get_ucounts`).
    pub(crate) fn try_charge(&self, uid: u32, limit: u64) -> bool {
        let mut map = self.shards.shard(uid);
        let count = map.entry(uid).or_insert(0);
        if *count >= limit {
            if *count == 0 {
                map.remove(&uid);
            }
            return false;
        }
        *count += 1;
        true
    }

    /// Gives one unit back.
    pub(crate) fn uncharge(&self, uid: u32) {
        let mut map = self.shards.shard(uid);
        if let Some(count) = map.get_mut(&uid) {
            *count -= 1;
            if *count == 0 {
                map.remove(&uid);
            }
        }
    }

    /// Units held by `uid`.
    pub(crate) fn count(&self, uid: u32) -> u64 {
        self.shards.shard(uid).get(&uid).copied().unwrap_or(0)
    }
}
