//! The one place the engine imports its concurrency primitives from.
//!
//! Built normally these are std's; built with `RUSTFLAGS="--cfg loom"` they are loom's, so the
//! engine runs unchanged under the loom model checker (the `loom_models` modules and
//! `tests/loom_*.rs`; `scripts/test.sh` runs them).
//! Mutex poisoning is ignored on purpose: engine code does not panic while holding a lock, and
//! if a caller's code (a backing, a notifier) ever did, refusing every later call on the
//! namespace would turn one bug into a denial of service.
#![allow(dead_code)]

use std::collections::HashMap;
use std::hash::Hash;

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Locks `m`, ignoring poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes `l` for reading, ignoring poisoning.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Takes `l` for writing, ignoring poisoning.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Takes `l` for writing if nobody holds it, ignoring poisoning.
pub(crate) fn try_write<T>(l: &RwLock<T>) -> Option<RwLockWriteGuard<'_, T>> {
    match l.try_write() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// A hash map split over [`SHARDS`](ShardedMap::SHARDS) mutex-guarded maps by key, so that
/// callers working on different keys (processes, users) rarely share a lock. Each shard's
/// lock is a leaf of whatever order its owner documents; never two shards at once.
pub(crate) struct ShardedMap<K, V> {
    shards: Box<[Mutex<HashMap<K, V>>]>,
}

/// A key that picks its shard of a [`ShardedMap`]: any spread of its bits will do.
pub(crate) trait ShardKey: Copy + Eq + Hash {
    /// A number whose remainder by the shard count names the shard.
    fn spread(self) -> usize;
}

impl ShardKey for u32 {
    fn spread(self) -> usize {
        self as usize
    }
}

impl ShardKey for crate::Tgid {
    fn spread(self) -> usize {
        self.get() as u32 as usize
    }
}

impl<K: ShardKey, V> ShardedMap<K, V> {
    /// The shard count.
    pub(crate) const SHARDS: usize = 64;

    /// An empty map.
    pub(crate) fn new() -> ShardedMap<K, V> {
        let shards = (0..Self::SHARDS).map(|_| Mutex::new(HashMap::new()));
        ShardedMap {
            shards: shards.collect(),
        }
    }

    /// The shard that holds `key`, locked (poisoning ignored).
    pub(crate) fn shard(&self, key: K) -> MutexGuard<'_, HashMap<K, V>> {
        lock(&self.shards[key.spread() % Self::SHARDS])
    }
}

impl<K: ShardKey, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap::new()
    }
}

/// The `n`th pause of a busy-wait (counted from 1): a CPU hint, and a thread yield every
/// `yield_every`th pause (never if 0), so that a waiter never starves the thread it waits for
/// on a machine with few cores. Loom models yield at every pause (a model must let the other
/// threads run to make progress).
fn pause(n: usize, yield_every: usize) {
    #[cfg(loom)]
    {
        let _ = (n, yield_every);
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    if yield_every != 0 && n.is_multiple_of(yield_every) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// One step of a bounded busy-wait whose steps `round` counts: a [`pause`] that yields every
/// 64th time. Loom models do not count (their schedules bound the wait, not `round`).
pub(crate) fn spin_wait(round: &mut u32) {
    #[cfg(not(loom))]
    {
        *round += 1;
    }
    pause(*round as usize, 64);
}

/// Loads `word` (Acquire) again while `busy` holds of the value, at most `max` more times,
/// with a [`pause`] (yielding every `yield_every`th time, never if 0) before each load. The
/// last value loaded.
pub(crate) fn load_while(
    word: &AtomicU64,
    busy: impl Fn(u64) -> bool,
    max: usize,
    yield_every: usize,
) -> u64 {
    let mut w = word.load(Ordering::Acquire);
    let mut spins = 0;
    while busy(w) && spins < max {
        spins += 1;
        pause(spins, yield_every);
        w = word.load(Ordering::Acquire);
    }
    w
}

/// FUTEX_WAKE of every thread asleep on `word` (on its low 32 bits, the futex of a word shared
/// with clients: a fast path's sleeper record, a lock slot's owner or state word). A loom
/// model has no sleepers to wake: its stand-in futexes never sleep.
pub(crate) fn futex_wake_all(word: &AtomicU64) {
    #[cfg(not(loom))]
    // SAFETY: a futex wake on memory we map; it reads nothing and writes nothing.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0,
        );
    }
    #[cfg(loom)]
    let _ = word;
}

/// Runs a loom model with a preemption bound (3 unless `LOOM_MAX_PREEMPTIONS` sets one), so
/// that the engine-level models (a semaphore set, a lock manager) finish in seconds: bugs of
/// the kind they look for need one or two preemptions.
#[cfg(all(test, loom))]
pub(crate) fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}
