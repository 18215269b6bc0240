//! The timer table's stripe lock: a test-and-test-and-set spin lock, as Linux's timer hash
//! bucket locks are spin locks.
//!
//! Why not std's `Mutex`: its release is an atomic swap, because it must learn whether a thread
//! sleeps on the lock and needs waking; this lock's release is a plain store. The table's
//! critical sections are a short probe and an `Arc` clone (tens of nanoseconds), where that
//! second atomic instruction cost 15-20% of a lookup (`uipc bench timers --runs 3`, 100k
//! timers, 2026-11-23, module doc of `table`). No crate was found with both a plain-store
//! release and a waiter that yields when its holder is preempted (`spin`'s mutexes relax
//! without state, so they either never yield or always do), so it stays by hand.
//!
//! Waiting: a waiter reads the flag until it looks free and only then retries the
//! compare-exchange, with a CPU hint per round and a yield every 64 rounds
//! (`sync::spin_wait`), so a waiter whose holder was preempted hands its CPU over instead of
//! burning its time slice. Holders must keep the section short, never block, take another lock
//! or call out to code that might; the table's sections only probe, copy and allocate.
//!
//! No poisoning: a panic while locked (none is possible in the table's sections short of
//! allocation failure, which aborts) would release the lock on unwinding.
//!
//! Built with `--cfg loom`, the table's stripes use loom's (blocking) mutex instead
//! ([`StripeLock`] is an alias): a spinning waiter multiplies the interleavings loom explores
//! until the table's models (tests/loom_timers.rs) do not finish. The spin lock is modelled on
//! its own: under loom its flag is a loom atomic and its data a loom `UnsafeCell`, and the
//! `loom_models` below check that two threads never reach the data at once.

use crate::sync::{spin_wait, AtomicBool, Ordering};
use std::ops::{Deref, DerefMut};

#[cfg(loom)]
use loom::cell::UnsafeCell;
#[cfg(not(loom))]
use std::cell::UnsafeCell;

/// The lock the table's stripes use: the spin lock, or loom's mutex in loom builds.
#[cfg(not(loom))]
pub(crate) type StripeLock<T> = SpinLock<T>;
#[cfg(loom)]
pub(crate) use loom_mutex::StripeLock;

/// A spin lock around `T`. See the module doc.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: `lock` gives one thread at a time access to `data` (the flag's acquire/release pair
// orders each holder's accesses after the previous holder's), so sharing the lock is sound
// whenever `T` may be sent between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Access to the data while the lock is held; releases it when dropped.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    #[cfg(loom)]
    data: loom::cell::MutPtr<T>,
}

#[cfg_attr(loom, allow(dead_code))]
impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            data: UnsafeCell::new(value),
        }
    }

    /// Waits until the lock is free and takes it.
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut round = 0;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                spin_wait(&mut round);
            }
        }
        SpinGuard {
            lock: self,
            #[cfg(loom)]
            data: self.data.get_mut(),
        }
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        #[cfg(not(loom))]
        // SAFETY: the guard exists only while this thread holds the lock, so no other thread
        // accesses the data; the reference lives no longer than the guard.
        unsafe {
            &*self.lock.data.get()
        }
        #[cfg(loom)]
        // SAFETY: as above; loom's pointer additionally checks the claim.
        unsafe {
            &*self.data.deref()
        }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        // SAFETY: as in `deref`; `&mut self` keeps this the only reference through the guard.
        unsafe {
            &mut *self.lock.data.get()
        }
        #[cfg(loom)]
        // SAFETY: as above.
        unsafe {
            self.data.deref()
        }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(loom)]
mod loom_mutex {
    use crate::sync::{self, Mutex, MutexGuard};

    /// Loom builds: the stripes' lock is loom's mutex behind the spin lock's interface.
    pub(crate) struct StripeLock<T>(Mutex<T>);

    impl<T> StripeLock<T> {
        pub(crate) fn new(value: T) -> StripeLock<T> {
            StripeLock(Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            sync::lock(&self.0)
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn two_threads_never_hold_the_spin_lock_at_once() {
        loom::model(|| {
            let lock = Arc::new(SpinLock::new(0u32));
            let other = {
                let lock = lock.clone();
                loom::thread::spawn(move || {
                    let mut n = lock.lock();
                    *n += 1;
                })
            };
            {
                // A read then a write: loom's cell reports any access that overlaps another
                // thread's, and a lost update shows in the count.
                let mut n = lock.lock();
                let seen = *n;
                *n = seen + 1;
            }
            other.join().unwrap();
            assert_eq!(*lock.lock(), 2);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_incrementing_under_the_lock_lose_no_update() {
        let lock = Arc::new(SpinLock::new(0u64));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..50_000 {
                        let mut n = lock.lock();
                        // A read, a pause and a write: lost updates show if exclusion fails.
                        let v = *n;
                        std::hint::spin_loop();
                        *n = v + 1;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(*lock.lock(), 200_000);
    }
}
