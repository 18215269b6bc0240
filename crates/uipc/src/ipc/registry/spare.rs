//! Spare objects: the allocations of a dropped namespace's objects, kept for the next
//! creations of their type (Linux's sets come from a slab cache the same way).
//!
//! When a registry whose type has a [`SparePool`] is dropped, every object it held the only
//! reference to (no other `Arc`, no `Weak`) is dropped in place and its allocation kept, as an
//! `Arc<MaybeUninit<T>>` of the same size and alignment, in the pool (up to
//! [`SparePool::CAP`] of them; the rest are freed). A registry takes spares from the pool in
//! batches of [`BATCH`] into its own list, which lives in its writer-locked state, and a
//! creation writes the new object into a spare instead of asking malloc for a fresh one:
//! reusing the memory costs a pop from a vector, no atomic operation; one pool lock per batch.
//! Objects removed from a live registry are not kept: their remover still holds a reference
//! when the registry lets go of its own, so the remover frees them.
//!
//! Locks: the pool's mutex is a leaf, taken under a registry's writer lock (a refill) or with
//! no lock held (a registry's drop). A spare is never shared: its `Arc` is the only reference
//! to its allocation from `recycle` until `SpareList::fill` makes it an object again.
//!
//! Why by hand: no allocator crate hands out `Arc` allocations, and std's `Arc` takes no
//! allocator on stable Rust. The measurement: 31900 `semget` creates in a new namespace after
//! a dropped one (`crates/uipc/examples/keys_loop.rs` pinned to one core, BENCHMARKS.md,
//! "ipc-keys"), 2.0 ms with spares against 2.8 ms with malloc (2.5 against 3.45 when the core
//! ran slower), which carves each 128-byte set from the heap's top once the last namespace's
//! frees are merged (cachegrind: 476 instructions per create against 652).

use crate::sync::{lock, AtomicUsize, Mutex, Ordering};
use std::mem::MaybeUninit;
use std::sync::Arc;

/// How many spares a registry takes from its pool at a time.
pub const BATCH: usize = 1024;

/// Where a type's spare allocations wait between namespaces (a `static` per type).
pub struct SparePool<T> {
    spares: Mutex<Vec<Arc<MaybeUninit<T>>>>,
    /// The length of `spares`, kept under its lock and read without it, so that a registry
    /// whose own list is empty does not take the lock to find the pool empty too.
    len: AtomicUsize,
}

impl<T> SparePool<T> {
    /// At most this many spares are kept (IPCMNI of the default layout: as many as one
    /// namespace can hold).
    pub const CAP: usize = 32768;

    /// An empty pool. Not under loom: loom's locks are not `const`, and no type keeps a pool
    /// in a model (`IpcObject::spare_pool` is `None` there).
    #[cfg(not(loom))]
    pub const fn new() -> SparePool<T> {
        SparePool {
            spares: Mutex::new(Vec::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Keeps `more` (up to [`Self::CAP`] in all) and frees the rest, after the lock.
    fn give(&self, mut more: Vec<Arc<MaybeUninit<T>>>) {
        if more.is_empty() {
            return;
        }
        let mut spares = lock(&self.spares);
        let room = Self::CAP.saturating_sub(spares.len());
        let kept = more.len().min(room);
        spares.extend(more.drain(..kept));
        self.len.store(spares.len(), Ordering::Relaxed);
        drop(spares);
        drop(more);
    }

    /// Spares kept now (a racy count, for tests and reports).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no spare is kept now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(not(loom))]
impl<T> Default for SparePool<T> {
    fn default() -> Self {
        SparePool::new()
    }
}

/// A registry's own spares, in its writer-locked state.
pub(crate) struct SpareList<T> {
    list: Vec<Arc<MaybeUninit<T>>>,
}

impl<T> Default for SpareList<T> {
    fn default() -> Self {
        SpareList { list: Vec::new() }
    }
}

impl<T> SpareList<T> {
    /// `value` in an `Arc`: in a spare of this list, else one from `pool` (taking a batch),
    /// else a fresh allocation.
    pub(crate) fn fill(&mut self, pool: Option<&SparePool<T>>, value: T) -> Arc<T> {
        if self.list.is_empty() {
            if let Some(pool) = pool.filter(|p| !p.is_empty()) {
                let mut spares = lock(&pool.spares);
                let from = spares.len().saturating_sub(BATCH);
                self.list.extend(spares.drain(from..));
                pool.len.store(spares.len(), Ordering::Relaxed);
            }
        }
        let Some(spare) = self.list.pop() else {
            return Arc::new(value);
        };
        let at = Arc::into_raw(spare).cast_mut();
        // SAFETY: `at` is the allocation of a spare, whose `Arc` was its only reference (made
        // so by `recycle`, never cloned since): nothing else reads or writes it while we write
        // the value. `into_raw`'s pointer is derived from the allocation's own (std's
        // `Arc::get_mut_unchecked` writes through the same pointer), so it may write.
        unsafe { (*at).write(value) };
        // SAFETY: `at` came from `Arc::<MaybeUninit<T>>::into_raw`, and `MaybeUninit<T>` has
        // `T`'s size and alignment (what `Arc::from_raw` asks of a pointer from another type's
        // `Arc`); the value is initialised (just written), and its one reference is this one.
        unsafe { Arc::from_raw(at.cast::<T>().cast_const()) }
    }

    /// Keeps `obj`'s allocation if `obj` is its only reference (after dropping the object).
    pub(crate) fn recycle(&mut self, obj: Arc<T>) {
        if let Some(spare) = recycle(obj) {
            self.list.push(spare);
        }
    }

    /// Gives every spare of this list to `pool` (a registry's drop).
    pub(crate) fn give_back(&mut self, pool: &SparePool<T>) {
        pool.give(std::mem::take(&mut self.list));
    }
}

/// `obj`'s allocation, its object dropped, if `obj` is its only reference and no `Weak`
/// exists; else `obj` is dropped as usual.
fn recycle<T>(mut obj: Arc<T>) -> Option<Arc<MaybeUninit<T>>> {
    Arc::get_mut(&mut obj)?;
    let at = Arc::into_raw(obj).cast_mut();
    // SAFETY: `get_mut` found `obj` the only strong reference and no weak one, and we own it:
    // nobody else can reach the value, which is dropped here once and never read again.
    unsafe { std::ptr::drop_in_place(at) };
    // SAFETY: `at` came from `Arc::<T>::into_raw`, and `MaybeUninit<T>` has `T`'s size and
    // alignment; the `Arc<MaybeUninit<T>>` does not drop the (already dropped) value.
    Some(unsafe { Arc::from_raw(at.cast::<MaybeUninit<T>>().cast_const()) })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as Count;

    /// Counts its drops in the counter it points to.
    struct Counted(&'static Count, u64);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn only_a_sole_reference_is_recycled_and_its_object_is_dropped_once() {
        static DROPS: Count = Count::new(0);
        let pool = SparePool::new();
        let mut list = SpareList::default();
        let shared = Arc::new(Counted(&DROPS, 1));
        let other = Arc::clone(&shared);
        list.recycle(shared);
        assert_eq!(list.list.len(), 0, "a shared object is not kept");
        assert_eq!(other.1, 1);
        let weak = Arc::downgrade(&other);
        list.recycle(other);
        assert_eq!(list.list.len(), 0, "nor one with a Weak");
        assert!(weak.upgrade().is_none());
        assert_eq!(DROPS.load(Ordering::Relaxed), 1);
        let sole = Arc::new(Counted(&DROPS, 2));
        let at = Arc::as_ptr(&sole) as usize;
        list.recycle(sole);
        assert_eq!(list.list.len(), 1);
        assert_eq!(DROPS.load(Ordering::Relaxed), 2, "dropped when kept");
        list.give_back(&pool);
        assert_eq!((pool.len(), list.list.len()), (1, 0));
        let again = list.fill(Some(&pool), Counted(&DROPS, 3));
        assert_eq!(Arc::as_ptr(&again) as usize, at, "the kept allocation");
        assert_eq!((again.1, Arc::strong_count(&again)), (3, 1));
        assert!(pool.is_empty());
        drop(again);
        assert_eq!(DROPS.load(Ordering::Relaxed), 3);
        let fresh = list.fill(Some(&pool), Counted(&DROPS, 4));
        assert_eq!(fresh.1, 4);
        drop(fresh);
        assert_eq!(
            DROPS.load(Ordering::Relaxed),
            4,
            "a spare never drops its old value"
        );
    }

    #[test]
    fn the_pool_keeps_at_most_its_cap_and_gives_batches() {
        let pool = SparePool::<u64>::new();
        let mut list = SpareList::default();
        for _ in 0..2 {
            (0..SparePool::<u64>::CAP / 2 + 7).for_each(|i| list.recycle(Arc::new(i as u64)));
            list.give_back(&pool);
        }
        assert_eq!(pool.len(), SparePool::<u64>::CAP);
        let first = list.fill(Some(&pool), 5);
        assert_eq!(*first, 5);
        assert_eq!(list.list.len(), BATCH - 1);
        assert_eq!(pool.len(), SparePool::<u64>::CAP - BATCH);
    }
}
