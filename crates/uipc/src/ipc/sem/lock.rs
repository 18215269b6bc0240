//! The two lock modes of a set: per-semaphore and global (see the parent module doc).
//!
//! [`SemSet::lock_sem`] gives a [`Locked`] that owns one semaphore (its lock, `global` seen
//! clear) or the whole set (the array lock in global mode); [`SemSet::lock_global`] always
//! gives the latter. Dropping a [`GlobalGuard`] is Linux's `complexmode_tryleave`.

use super::op::Pending;
use super::SemSet;
use crate::sync::{lock, MutexGuard, Ordering::Acquire, Ordering::Release};
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Global-mode unlocks, without a sleeping multi-sop operation, before per-semaphore mode comes
/// back (Linux's USE_GLOBAL_LOCK_HYSTERESIS).
pub(crate) const HYSTERESIS: u32 = 10;

/// One semaphore (`struct sem`) and its sleeping single-sop operations, in arrival order.
#[derive(Default)]
pub(crate) struct SemSlot {
    pub(crate) val: i32,
    pub(crate) pid: i32,
    pub(crate) otime: i64,
    pub(crate) pending: VecDeque<Arc<Pending>>,
}

/// The array lock's data.
pub(crate) struct ArrayState {
    pub(crate) ctime: i64,
    /// Set by IPC_RMID; the set then stays in global mode for good.
    pub(crate) deleted: bool,
    /// Sleeping multi-sop operations in arrival order (`complex_count` is its length).
    pub(crate) complex: VecDeque<Arc<Pending>>,
    pub(crate) hysteresis: u32,
}

/// The array lock, held in global mode. On drop, leaves global mode when allowed.
pub(crate) struct GlobalGuard<'a> {
    pub(crate) set: &'a SemSet,
    pub(crate) arr: MutexGuard<'a, ArrayState>,
}

impl Drop for GlobalGuard<'_> {
    fn drop(&mut self) {
        if self.arr.deleted || !self.arr.complex.is_empty() {
            return;
        }
        if self.arr.hysteresis <= 1 {
            // Everything this holder wrote went through the semaphore mutexes, so the next
            // per-semaphore holder sees it through them; Release orders the flag after it.
            self.set.global.store(false, Release);
        } else {
            self.arr.hysteresis -= 1;
        }
    }
}

/// Exclusive access to one semaphore (`Sem`) or to the whole set (`Global`).
pub(crate) enum Locked<'a> {
    Sem {
        n: usize,
        slot: MutexGuard<'a, SemSlot>,
    },
    Global(GlobalGuard<'a>),
}

/// A semaphore's data reached through a [`Locked`].
pub(crate) enum SlotRef<'b> {
    Held(&'b mut SemSlot),
    Own(MutexGuard<'b, SemSlot>),
}

impl Deref for SlotRef<'_> {
    type Target = SemSlot;
    fn deref(&self) -> &SemSlot {
        match self {
            SlotRef::Held(s) => s,
            SlotRef::Own(g) => g,
        }
    }
}

impl DerefMut for SlotRef<'_> {
    fn deref_mut(&mut self) -> &mut SemSlot {
        match self {
            SlotRef::Held(s) => s,
            SlotRef::Own(g) => g,
        }
    }
}

impl SemSet {
    /// Takes the array lock and enters global mode, waiting for per-semaphore holders to leave
    /// (`sem_lock(sma, NULL, -1)` with `complexmode_enter`). Lock held on exit: the array's.
    pub(crate) fn lock_global(&self) -> GlobalGuard<'_> {
        let mut arr = lock(&self.array);
        self.enter_global(&mut arr);
        GlobalGuard { set: self, arr }
    }

    fn enter_global(&self, arr: &mut ArrayState) {
        arr.hysteresis = HYSTERESIS;
        // Only array-lock holders write the flag, so a relaxed read under it is exact.
        if !self.global.load(crate::sync::Ordering::Relaxed) {
            self.global.store(true, crate::sync::Ordering::Relaxed);
            // Drain: a per-semaphore holder that saw the flag clear still holds its lock; each
            // lock/unlock pair here waits for it and publishes the flag to later lockers.
            for s in self.sems.iter() {
                drop(lock(s));
            }
        }
    }

    /// Locks for a single-sop operation on semaphore `n` (`sem_lock` with nsops 1): only that
    /// semaphore's lock in per-semaphore mode, else the array lock (without renewing the
    /// hysteresis, as Linux).
    pub(crate) fn lock_sem(&self, n: usize) -> Locked<'_> {
        if !self.global.load(Acquire) {
            let slot = lock(&self.sems[n]);
            if !self.global.load(Acquire) {
                return Locked::Sem { n, slot };
            }
        }
        let arr = lock(&self.array);
        if !self.global.load(Acquire) {
            // Global mode ended while we waited: nobody can re-enter it while we hold the
            // array lock, and whoever does later drains this semaphore's lock.
            let slot = lock(&self.sems[n]);
            drop(arr);
            return Locked::Sem { n, slot };
        }
        Locked::Global(GlobalGuard { set: self, arr })
    }
}

impl Locked<'_> {
    /// Semaphore `k`'s data. In per-semaphore mode only the locked semaphore may be asked for.
    pub(crate) fn slot(&mut self, k: usize) -> SlotRef<'_> {
        match self {
            Locked::Sem { n, slot, .. } => {
                assert_eq!(*n, k, "per-semaphore mode owns one semaphore");
                SlotRef::Held(slot)
            }
            Locked::Global(g) => SlotRef::Own(lock(&g.set.sems[k])),
        }
    }

    /// Whether the set was removed (never in per-semaphore mode: RMID leaves the set global).
    pub(crate) fn deleted(&self) -> bool {
        match self {
            Locked::Sem { .. } => false,
            Locked::Global(g) => g.arr.deleted,
        }
    }
}
