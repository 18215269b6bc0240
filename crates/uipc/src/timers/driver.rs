//! The expiry driver: per-clock-base min-heaps of armed timers, fired by hand or by one thread.
//!
//! Why a heap and not a timer wheel: POSIX timers are hrtimers in Linux, exact to the
//! nanosecond, while a wheel trades exactness for O(1) (Linux's own wheel serves coarse
//! timeouts). A binary heap gives the hrtimer red-black tree's O(log n) arm and O(1) peek with
//! better constants, and cancel is O(1) by lazy deletion: each entry carries the timer's
//! `arm_seq` at arming, and an entry whose sequence no longer matches is skipped when it
//! surfaces. Stale entries are compacted away (in place) once they outnumber live ones, so
//! memory stays proportional to the armed timers.
//!
//! No allocation on the arming path: `timer_settime` may run inside a signal handler of the
//! preload library's process (POSIX makes it async-signal-safe), where a malloc the handler
//! interrupted holds the allocator's lock. So `timer_create` reserves room
//! ([`Driver::reserve`]: twice the armable timers plus 66 entries, the most a heap holds
//! between compactions) in the heaps the timer may use, allocating the larger heap and freeing
//! the old one with no heap lock held; [`Driver::arm`] only pushes, and compacts in place when
//! the heap is full. Nor does anything free a timer under a heap lock: compaction keeps a
//! stale entry holding the last reference to its (deleted) timer, and the pops of
//! [`Driver::take_expired`] and [`Driver::next_deadline`] hand such entries out to be dropped
//! after the lock is released. `take_expired` fills the caller's vectors, allocated with no
//! lock held, batch by batch. A thread that holds a heap lock therefore never waits for the
//! allocator's lock, which a handler's call on another thread could otherwise wait behind.
//! (A deleted timer's entry so kept is freed when it expires; the reservation does not count
//! such entries, so many deleted timers with far expiries can still make an arm grow a heap.)
//!
//! Measured (`tests/timers_driver_cost.rs`, release, on a shared and loaded 2-CPU machine):
//! with 1,000 to 60,000 armed timers, `timer_settime` arming costs about 0.1-0.5 us per
//! timer, re-arming (lazy cancel + arm) 0.1-0.55 us and firing through `run_expired`
//! 0.15-0.6 us, growing gently with the heap's depth. No wheel was built to compare against.
//!
//! One heap per base (monotonic, boottime, realtime, TAI): absolute CLOCK_REALTIME timers live
//! on the realtime heap and fire when the wall clock reaches them, so setting the clock moves
//! them as on Linux, while relative ones live on the monotonic heap.
//!
//! Driving: [`Driver::take_expired`] pops the due entries (tests call it through
//! `Timers::run_expired` after moving a `ManualClock`). The optional thread sleeps on a condvar
//! until the earliest deadline; with nothing armed it waits without a timeout and costs nothing.
//! A push kicks it only when it is earlier than what the thread last saw as that heap's
//! earliest entry (each heap keeps that `target`, set by [`Driver::next_deadline`] under the
//! heap's lock, so a push and the thread's look are ordered): the thread wakes by the target
//! anyway and then sees the push, so re-arming a timer later than the earliest one costs no
//! wake-up (the kernel's re-arm wakes no one either). While absolute realtime/TAI timers
//! are armed it also wakes at least once per second, which bounds how late a forward jump of the
//! wall clock is noticed unless the embedder calls `Timers::clock_was_set`. Periodic timers are
//! re-armed on their original grid, so the wake-up latency never accumulates into drift.
//!
//! Locks: each heap's mutex is a leaf, taken inside a timer's state lock (arm, cancel) or alone
//! (take_expired, next_deadline); never two heaps at once. `kick` is a leaf too.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::time::Duration;

use super::lock;
use super::timer::{Base, Timer};
use crate::clock::{Clock, Nanos};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};

struct Entry {
    expires: Nanos,
    order: u64,
    arm_seq: u64,
    timer: Arc<Timer>,
}

impl Entry {
    fn is_live(&self) -> bool {
        self.timer.arm_seq.load(Ordering::Acquire) == self.arm_seq
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed, so std's max-heap pops the earliest expiry (ties: first armed first).
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.expires, other.order).cmp(&(self.expires, self.order))
    }
}

struct Queue {
    heap: BinaryHeap<Entry>,
    /// The earliest expiry the driver thread saw on this heap when it last computed its sleep
    /// (`Nanos::MAX`: none, it sleeps without waking for this heap).
    target: Nanos,
    /// Entries believed live (approximate: only steers compaction).
    live: usize,
    /// Stale entries the last compaction kept (they held their timer's last reference).
    kept: usize,
}

impl Default for Queue {
    fn default() -> Queue {
        Queue {
            heap: BinaryHeap::new(),
            target: Nanos::MAX,
            live: 0,
            kept: 0,
        }
    }
}

impl Queue {
    /// Drops stale entries in place, keeping those that hold the last reference to their
    /// (deleted) timer: dropping one would free it, and this runs under the heap lock,
    /// possibly in a signal handler's `timer_settime`. They go when they expire.
    fn compact(&mut self) {
        let (mut live, mut kept) = (0, 0);
        self.heap.retain(|e| {
            if e.is_live() {
                live += 1;
                true
            } else if Arc::strong_count(&e.timer) == 1 {
                kept += 1;
                true
            } else {
                false
            }
        });
        self.live = live;
        self.kept = kept;
    }
}

/// A due timer, with the arm sequence it was due under.
pub(crate) struct Due {
    pub(crate) timer: Arc<Timer>,
    pub(crate) arm_seq: u64,
}

/// See the module doc.
pub(crate) struct Driver {
    queues: [Mutex<Queue>; 4],
    order: AtomicU64,
    kick: Mutex<Kick>,
    wake: Condvar,
    /// Timers that may be armed on a heap (not CPU-time, not SIGEV_NONE): sizes the heaps.
    armable: AtomicUsize,
}

#[derive(Default)]
pub(crate) struct Kick {
    pub(crate) kicked: bool,
    pub(crate) shutdown: bool,
    /// What the sleeping thread waits for; `Running` while it is not in [`Driver::sleep`].
    sleep: DriverSleep,
    /// How many times [`Driver::sleep`] returned.
    wakeups: u64,
}

/// Where the driver's sleeper is (see [`DriverState`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriverSleep {
    /// Not asleep in the driver's wait (running the due timers, or no thread at all).
    #[default]
    Running,
    /// Asleep with no deadline: only a kick (an earlier expiry, a clock change) wakes it.
    Indefinitely,
    /// Asleep for at most this long (the next expiry, or a poll while CPU-time or wall-clock
    /// timers are armed).
    For(Duration),
}

/// The driver's sleeper as the engine holds it, read in one go under the driver's lock, so a
/// test can tell "asleep and nothing will wake it" from "not woken yet".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverState {
    /// Where the sleeper is.
    pub sleep: DriverSleep,
    /// A kick is pending: the sleeper wakes (or, running, does not sleep) at its next wait.
    pub kicked: bool,
    /// How many times the sleeper has woken up (each wake-up runs the due timers).
    pub wakeups: u64,
}

impl Driver {
    pub(crate) fn new() -> Driver {
        Driver {
            queues: Default::default(),
            order: AtomicU64::new(0),
            kick: Mutex::new(Kick::default()),
            wake: Condvar::new(),
            armable: AtomicUsize::new(0),
        }
    }

    /// Queues `timer` to fire at `expires` on `base`, under `arm_seq`. Allocates nothing while
    /// the heap's capacity, kept by [`Driver::reserve`], suffices; compaction is in place and
    /// frees no timer (see the module doc).
    ///
    /// Entry: the timer's state lock is held and `arm_seq` was just taken from it.
    pub(crate) fn arm(&self, timer: &Arc<Timer>, base: Base, expires: Nanos, arm_seq: u64) {
        let sooner = {
            let mut q = lock(&self.queues[base as usize]);
            let stale = q.heap.len() - q.live.min(q.heap.len());
            let full = q.heap.len() == q.heap.capacity();
            if (q.heap.len() > 64 && stale > q.live + q.kept) || (full && stale > q.kept) {
                q.compact();
            }
            q.heap.push(Entry {
                expires,
                order: self.order.fetch_add(1, Ordering::Relaxed),
                arm_seq,
                timer: timer.clone(),
            });
            q.live += 1;
            let sooner = expires < q.target;
            if sooner {
                q.target = expires;
            }
            sooner
        };
        if sooner {
            self.kick();
        }
    }

    /// A timer that may be armed on `bases` was created: each of those heaps gets room for
    /// twice the armable timers (live entries plus as many stale ones, the compaction
    /// threshold) and 66 more, so [`Driver::arm`] never grows it. The larger heap is allocated
    /// and the old one freed with no heap lock held.
    pub(crate) fn reserve(&self, bases: &[Base]) {
        let armable = self.armable.fetch_add(1, Ordering::Relaxed) + 1;
        let wanted = 2 * armable + 66;
        for &base in bases {
            let queue = &self.queues[base as usize];
            if lock(queue).heap.capacity() >= wanted {
                continue;
            }
            let mut bigger = Vec::with_capacity(2 * wanted);
            let mut old = {
                let mut q = lock(queue);
                if q.heap.capacity() >= wanted {
                    continue;
                }
                bigger.extend(q.heap.drain());
                std::mem::replace(&mut q.heap, BinaryHeap::from(bigger))
            };
            drop(std::mem::take(&mut old));
        }
    }

    /// A timer counted by [`Driver::reserve`] was deleted.
    pub(crate) fn unreserve(&self) {
        self.armable.fetch_sub(1, Ordering::Relaxed);
    }

    /// Notes that one armed entry on `base` went stale (the caller bumped `arm_seq`).
    pub(crate) fn cancelled(&self, base: Base) {
        let mut q = lock(&self.queues[base as usize]);
        q.live = q.live.saturating_sub(1);
    }

    /// Pops the entries due by now into `due` (live ones) and `dead` (stale ones holding the
    /// last reference to their timer, to be dropped by the caller with no lock held), until
    /// either is full. Other stale entries are dropped. Allocates nothing, and reads the clock
    /// of a queue only if it holds an entry. Returns true if it stopped because one was full
    /// (call again; with zero capacity it stops at the first entry due).
    pub(crate) fn take_expired(
        &self,
        clock: &dyn Clock,
        due: &mut Vec<Due>,
        dead: &mut Vec<Arc<Timer>>,
    ) -> bool {
        for base in Base::ALL {
            let mut q = lock(&self.queues[base as usize]);
            // An empty queue costs no clock read (a mask change asks this of every queue).
            if q.heap.is_empty() {
                continue;
            }
            let now = base.now(clock);
            while q.heap.peek().is_some_and(|e| e.expires <= now) {
                if due.len() == due.capacity() || dead.len() == dead.capacity() {
                    return true;
                }
                let e = q.heap.pop().expect("peeked");
                if e.is_live() {
                    q.live = q.live.saturating_sub(1);
                    due.push(Due {
                        timer: e.timer,
                        arm_seq: e.arm_seq,
                    });
                } else if Arc::strong_count(&e.timer) == 1 {
                    q.kept = q.kept.saturating_sub(1);
                    dead.push(e.timer);
                }
            }
        }
        false
    }

    /// How long until the earliest live entry is due (zero if overdue), or `None` with nothing
    /// armed. Capped at one second while wall-clock-based timers are armed (see module doc).
    pub(crate) fn next_deadline(&self, clock: &dyn Clock) -> Option<Duration> {
        let mut best: Option<Nanos> = None;
        for base in Base::ALL {
            let mut q = lock(&self.queues[base as usize]);
            let mut last_reference = None;
            while q.heap.peek().is_some_and(|e| !e.is_live()) {
                let e = q.heap.pop().expect("peeked");
                if Arc::strong_count(&e.timer) == 1 {
                    // Freed below, with no lock held; the next look continues.
                    q.kept = q.kept.saturating_sub(1);
                    last_reference = Some(e);
                    break;
                }
            }
            if last_reference.is_some() {
                drop(q);
                drop(last_reference);
                return self.next_deadline(clock);
            }
            q.target = q.heap.peek().map_or(Nanos::MAX, |e| e.expires);
            if let Some(e) = q.heap.peek() {
                let mut delta = e.expires.saturating_sub(base.now(clock)).max(0);
                if matches!(base, Base::Realtime | Base::Tai) {
                    delta = delta.min(1_000_000_000);
                }
                best = Some(best.map_or(delta, |b| b.min(delta)));
            }
        }
        best.map(|n| Duration::from_nanos(n as u64))
    }

    /// Wakes the driver thread so it recomputes its deadline.
    pub(crate) fn kick(&self) {
        lock(&self.kick).kicked = true;
        self.wake.notify_one();
    }

    /// Stops the driver thread.
    pub(crate) fn shutdown(&self) {
        lock(&self.kick).shutdown = true;
        self.wake.notify_one();
    }

    /// Sleeps until kicked or `timeout` passes. Returns false once shut down.
    pub(crate) fn sleep(&self, timeout: Option<Duration>) -> bool {
        let mut k = lock(&self.kick);
        if !k.kicked && !k.shutdown {
            k.sleep = timeout.map_or(DriverSleep::Indefinitely, DriverSleep::For);
            k = match timeout {
                Some(t) => {
                    self.wake
                        .wait_timeout(k, t)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.wake.wait(k).unwrap_or_else(|e| e.into_inner()),
            };
        }
        k.sleep = DriverSleep::Running;
        k.kicked = false;
        k.wakeups += 1;
        !k.shutdown
    }

    /// The sleeper's state, read under the lock it sleeps with.
    pub(crate) fn state(&self) -> DriverState {
        let k = lock(&self.kick);
        DriverState {
            sleep: k.sleep,
            kicked: k.kicked,
            wakeups: k.wakeups,
        }
    }

    /// The heaps' capacities, summed: for tests that arming never grows them.
    pub(crate) fn capacity(&self) -> usize {
        self.queues.iter().map(|q| lock(q).heap.capacity()).sum()
    }

    /// Entries in all heaps, stale ones included: for tests of the compaction.
    pub(crate) fn queued_entries(&self) -> usize {
        self.queues.iter().map(|q| lock(q).heap.len()).sum()
    }
}
