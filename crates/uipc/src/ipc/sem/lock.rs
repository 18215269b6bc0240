//! The two lock modes of a set: per-semaphore and global (see the parent module doc).
//!
//! [`SemSet::lock_sem`] gives a [`Locked`] that owns one semaphore (its lock, `global` seen
//! clear) or the whole set (the array lock in global mode); [`SemSet::lock_global`] always
//! gives the latter. Dropping a [`GlobalGuard`] is Linux's `complexmode_tryleave`.

use super::op::Pending;
use super::SemSet;
use crate::sync::{lock, Mutex, MutexGuard, Ordering::Acquire, Ordering::Release};
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Global-mode unlocks, without a sleeping multi-sop operation, before per-semaphore mode comes
/// back (Linux's USE_GLOBAL_LOCK_HYSTERESIS). One under loom, so that a model's few operations
/// see global mode end as well as begin.
pub(crate) const HYSTERESIS: u32 = if cfg!(loom) { 1 } else { 10 };

/// Sleeping operations in arrival order. Most sets never have one, so the queue is a pointer
/// until its first sleeper (8 bytes, not a `VecDeque`'s 32: a one-semaphore set has two
/// queues, and 48 bytes less are much of what keeps the set in one 128-byte allocation, see
/// [`SemSet`]). The first sleeper pays the allocation; the last one leaving frees it.
#[derive(Default)]
#[allow(clippy::box_collection)] // the box is the point: an 8-byte field until the first sleeper
pub(crate) struct SleepQueue(Option<Box<VecDeque<Arc<Pending>>>>);

impl SleepQueue {
    pub(crate) fn push_back(&mut self, q: Arc<Pending>) {
        self.0.get_or_insert_with(Default::default).push_back(q);
    }

    /// Every sleeper, in arrival order, leaving the queue empty.
    pub(crate) fn take_all(&mut self) -> VecDeque<Arc<Pending>> {
        self.0.take().map(|q| *q).unwrap_or_default()
    }

    pub(crate) fn retain(&mut self, keep: impl FnMut(&Arc<Pending>) -> bool) {
        if let Some(q) = &mut self.0 {
            q.retain(keep);
            if q.is_empty() {
                self.0 = None;
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Pending>> {
        self.0.iter().flat_map(|q| q.iter())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|q| q.is_empty())
    }
}

/// One semaphore (`struct sem`) and its sleeping single-sop operations, in arrival order.
#[derive(Default)]
pub(crate) struct SemSlot {
    pub(crate) val: i32,
    pub(crate) pid: i32,
    pub(crate) otime: i64,
    pub(crate) pending: SleepQueue,
}

/// A set's semaphores. A one-semaphore set (the common case: most programs ask for one) keeps
/// it inline, so creating the set is a single allocation; larger sets keep a boxed array.
///
/// Which of the two a value holds is kept by its owner ([`SemSet`]'s `many`, in padding after
/// the permissions), not here: an enum's tag would have taken 8 bytes more (40 instead of 32
/// on x86-64), and a one-semaphore set with the `Arc`'s counts (120 bytes) would grow past
/// malloc's 128-byte chunks to 144. Kept by hand (no crate stores the tag outside the value):
/// the 128-byte set is one of the create-path changes of commit `8c5763b` (BENCHMARKS.md,
/// "ipc-keys", 2026-11-23: cachegrind on 31900 `semget` creates, two cache lines written per
/// create instead of three; with the interned permissions 773 instructions per create instead
/// of 930 and 31900 creates about a fifth faster in `uipc bench ipc-keys --runs 3`).
pub(crate) union SemSlots {
    one: ManuallyDrop<Mutex<SemSlot>>,
    many: ManuallyDrop<Box<[Mutex<SemSlot>]>>,
}

impl SemSlots {
    /// `n` (at least 1) fresh semaphores (value 0, no sempid, never operated on), and whether
    /// they are the boxed kind (`many`, for [`SemSlots::get`] and [`SemSlots::drop_with`]).
    pub(crate) fn new(n: usize) -> (SemSlots, bool) {
        debug_assert!(n >= 1);
        if n == 1 {
            let one = ManuallyDrop::new(Mutex::new(SemSlot::default()));
            (SemSlots { one }, false)
        } else {
            let many = (0..n).map(|_| Mutex::new(SemSlot::default())).collect();
            let many = ManuallyDrop::new(many);
            (SemSlots { many }, true)
        }
    }

    /// The semaphores.
    ///
    /// # Safety
    /// `many` must be the flag [`SemSlots::new`] returned with this value.
    pub(crate) unsafe fn get(&self, many: bool) -> &[Mutex<SemSlot>] {
        if many {
            // SAFETY: the caller vouches that `new` stored the boxed array.
            unsafe { &self.many }
        } else {
            // SAFETY: the caller vouches that `new` stored one inline semaphore.
            std::slice::from_ref(unsafe { &*self.one })
        }
    }

    /// Drops the semaphores.
    ///
    /// # Safety
    /// As [`SemSlots::get`]; and the value must not be used again (its owner is being dropped).
    pub(crate) unsafe fn drop_with(&mut self, many: bool) {
        if many {
            // SAFETY: `many` holds the boxed array (caller), dropped only here, once.
            unsafe { ManuallyDrop::drop(&mut self.many) }
        } else {
            // SAFETY: as above, for the inline semaphore.
            unsafe { ManuallyDrop::drop(&mut self.one) }
        }
    }
}

/// The array lock's data.
pub(crate) struct ArrayState {
    pub(crate) ctime: i64,
    /// Set by IPC_RMID; the set then stays in global mode for good.
    pub(crate) deleted: bool,
    /// Sleeping multi-sop operations in arrival order (`complex_count` is its length).
    pub(crate) complex: SleepQueue,
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
            for s in self.sems().iter() {
                drop(lock(s));
            }
        }
    }

    /// Locks for a single-sop operation on semaphore `n` (`sem_lock` with nsops 1): only that
    /// semaphore's lock in per-semaphore mode, else the array lock (without renewing the
    /// hysteresis, as Linux).
    pub(crate) fn lock_sem(&self, n: usize) -> Locked<'_> {
        if !self.global.load(Acquire) {
            let slot = lock(&self.sems()[n]);
            if !self.global.load(Acquire) {
                return Locked::Sem { n, slot };
            }
        }
        let arr = lock(&self.array);
        if !self.global.load(Acquire) {
            // Global mode ended while we waited: nobody can re-enter it while we hold the
            // array lock, and whoever does later drains this semaphore's lock.
            let slot = lock(&self.sems()[n]);
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
            Locked::Global(g) => SlotRef::Own(lock(&g.set.sems()[k])),
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::HYSTERESIS;
    use crate::ipc::consts::{IPC_NOWAIT, IPC_PRIVATE, IPC_RMID};
    use crate::ipc::sem::{SemSet, Sembuf, SemctlArg};
    use crate::ipc::IpcNamespace;
    use crate::sync::{lock, Ordering::Relaxed};
    use crate::{Cred, IpcId, WaitCtx};
    use std::sync::Arc;
    use std::time::Duration;

    fn setup(n: i32) -> (Arc<IpcNamespace>, i32, Arc<SemSet>) {
        let ns = Arc::new(IpcNamespace::new());
        let id = ns.semget(&Cred::root(1), IPC_PRIVATE, n, 0o600).unwrap();
        let set = ns.sem.registry.lookup(IpcId::new(id)).unwrap();
        (ns, id, set)
    }

    fn op(ns: &IpcNamespace, id: i32, sops: &[Sembuf]) {
        ns.semop(&Cred::root(1), id, sops, &WaitCtx::FOREVER)
            .unwrap();
    }

    #[test]
    fn single_sop_ops_never_touch_the_array_lock_in_per_semaphore_mode() {
        let (ns, id, set) = setup(2);
        let held = lock(&set.array);
        let (tx, rx) = std::sync::mpsc::channel();
        let ns2 = ns.clone();
        std::thread::spawn(move || {
            op(&ns2, id, &[Sembuf::new(0, 1, 0)]);
            op(&ns2, id, &[Sembuf::new(0, -1, 0)]);
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(5))
            .expect("single-sop ops completed while the array lock was held");
        drop(held);
    }

    #[test]
    fn complex_ops_switch_to_global_mode_until_the_hysteresis_runs_out() {
        let (ns, id, set) = setup(2);
        assert!(!set.global.load(Relaxed));
        op(&ns, id, &[Sembuf::new(0, 1, 0)]);
        assert!(!set.global.load(Relaxed), "simple ops stay per-semaphore");
        op(&ns, id, &[Sembuf::new(0, 1, 0), Sembuf::new(1, 1, 0)]);
        assert!(
            set.global.load(Relaxed),
            "a multi-sop op enters global mode"
        );
        // As Linux's counter: the complex op's own unlock counts as the first of the ten.
        for _ in 0..HYSTERESIS - 2 {
            op(&ns, id, &[Sembuf::new(0, 1, 0)]);
            assert!(set.global.load(Relaxed));
        }
        op(&ns, id, &[Sembuf::new(0, 1, 0)]);
        assert!(!set.global.load(Relaxed), "back to per-semaphore mode");
    }

    #[test]
    fn a_sleeping_complex_op_keeps_global_mode_and_rmid_makes_it_permanent() {
        let (ns, id, set) = setup(2);
        let ns2 = ns.clone();
        let t = std::thread::spawn(move || {
            let sops = [Sembuf::new(0, -1, 0), Sembuf::new(1, -1, 0)];
            ns2.semop(&Cred::root(2), id, &sops, &WaitCtx::FOREVER)
        });
        while lock(&set.array).complex.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..3 * HYSTERESIS {
            op(&ns, id, &[Sembuf::new(0, 0, IPC_NOWAIT as i16)]);
        }
        assert!(set.global.load(Relaxed), "held while a complex op sleeps");
        ns.semctl(&Cred::root(1), id, 0, IPC_RMID, SemctlArg::None)
            .unwrap();
        assert_eq!(t.join().unwrap(), Err(crate::Errno::EIDRM));
        assert!(set.global.load(Relaxed), "a removed set stays global");
    }
}
