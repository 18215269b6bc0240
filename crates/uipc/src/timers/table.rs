//! The shared timer table: `(process, id) -> timer`, one table for every process.
//!
//! Lock layout from seed 004 ("posix-timers: Improve hash table performance", Linux 6.15):
//! `roundup_pow_of_two(512 * CPUs)` stripes, each with its own lock, so `timer_getoverrun` in
//! one process waits on a create in another only if both hash to the same stripe, and nothing
//! ever takes a table-wide lock.
//!
//! What sits behind each lock differs from Linux: instead of a chain of timers, a
//! `GroupMap` (`group_map.rs`) keyed by *group*, eight consecutive ids of one process. The
//! stripe is picked from the group's mixed key, so ids `8k..8k+7` of a process share a lock, a
//! probe and (once two of them exist) a one-line leaf of values, while consecutive groups land
//! on unrelated stripes. Timer ids are handed out linearly (§8.1), so the runs the seed
//! measured touch each stripe, cell and leaf eight times in a row: one cache miss where a
//! per-timer hash takes one per timer, and one probe that does not lengthen with the count
//! (Linux's chains hold about 100 timers per bucket at 100k timers on 2 CPUs). A group with a
//! single id keeps it inline in its 24-byte cell, so memory follows the number of timers and
//! never the largest id: 2048 timers 512 ids apart cost about what seed 004's buckets cost.
//!
//! Measured on this 2-CPU machine (`uipc bench timers --runs 3`, medians, quiet moments of a
//! shared machine, 2026-11-23): at 100k timers in one process, lookups 1.2-1.4 ms against
//! "xarray" 2.3 ms, seed 004 6.8-7.7 ms and "mainline" 8.5-9.0 ms (6.2-7.2x mainline; the
//! striped per-timer hash map this replaced took 2.6 ms); creates 4.7-6.4 ms, on par with xarray
//! (5.7 ms), seed 004 13 ms; 2 threads x 100k create+delete 4.5 ms each against seed 004's
//! 6.3 ms; the sparse case 117 KiB against seed 004's 123 KiB.
//!
//! Alternatives measured (a scratch harness driving each through `TimerIndex`, 100k timers)
//! and dropped: per-timer keys with a hash that keeps a group's ids in neighbouring slots of a
//! per-stripe std hash map (lookups 2.6x slower than groups: a cell per timer); groups with std's
//! hash map per stripe (about 15% slower lookups: control bytes, then entry, two dependent
//! lines per probe); leaves always boxed, even for one id (the sparse case costs 232-263 KiB,
//! about twice seed 004's). A lock-free read path (per-slot reader counts) was not
//! adopted: a profile of the lookup puts the lock's two atomic operations at about a third of
//! its time, and the reader-count handshake that makes freeing safe without a lock also costs
//! two atomic operations per lookup. Instead the stripe lock is a spin lock whose release is a
//! plain store (`stripe_lock`): lookups about 15% faster than with std's mutex. A caller that
//! only reads (`read`: `timer_getoverrun`) takes no count on the timer either: the count's
//! increment and decrement were about 45% of a lookup's time (100k timers, 1.9 -> 1.1 ms).
//!
//! Why not a per-process dense array ("xarray")? It costs memory for the largest id:
//! checkpoint/restore (§8.2) can place 2048 timers 512 ids apart, over 1 MB (the seed; 16 MB
//! with 8-byte slots in the bench's `XarrayTable`). The two older designs, and seed 004's
//! chains, live in the bench crate (`uipc_bench::before::timer_tables`) so `uipc bench timers`
//! measures the difference; the timing run in its `tests/timers_tables.rs` prints the seed's
//! scenarios for all four.
//!
//! Reservation ("not yet valid"): `timer_create` first reserves an id (a slot without a value),
//! so that no concurrent create can take the same id, and publishes the timer only once every
//! check has passed. Lookups never return a reserved slot, as Linux's lookup skips a timer whose
//! `it_signal` still has its low bit set.
//!
//! Locks: each stripe's lock (`stripe_lock::StripeLock`, a spin lock) is a leaf lock; no other
//! lock is taken while one is held, and values are cloned (`Arc`) out before it is released.
//! Sections only probe, copy and (on growth or a group's second id) allocate. On entry and exit
//! of every method no stripe lock is held. Built with `--cfg loom` the stripe locks are loom's
//! mutexes and `Arc` is loom's (tests/loom_timers.rs; the spin lock has its own model).

use super::group_map::{group_hash, slot_index, GroupMap};
use super::stripe_lock::StripeLock;
use super::types::TimerId;
use crate::sync::Arc;
use crate::Tgid;

/// A stripe. Two share a cache line, as Linux's 16-byte buckets share theirs: the stripe of a
/// group is mixed, so neighbouring stripes serve unrelated groups.
#[repr(align(32))]
struct Stripe<T> {
    groups: StripeLock<GroupMap<T>>,
}

/// The lock-striped table of `(owner process, id)` keys. See the module doc.
pub struct TimerTable<T> {
    stripes: Box<[Stripe<T>]>,
    mask: usize,
}

/// The stripe count of a table made without one ([`TimerTable::new`], and the engine's when
/// `TimersConfig::buckets` is `None`): `roundup_pow_of_two(512 * cpus)`, the bucket count
/// Linux picks at boot.
pub fn default_bucket_count() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (512 * cpus).next_power_of_two()
}

impl<T> TimerTable<T> {
    /// A table with as many stripes as Linux has buckets on this machine.
    pub fn new() -> TimerTable<T> {
        TimerTable::with_buckets(default_bucket_count())
    }

    /// A table of `stripes` stripes, rounded up to a power of two (at least 1, at most 2^24).
    pub fn with_buckets(stripes: usize) -> TimerTable<T> {
        let n = stripes.clamp(1, 1 << 24).next_power_of_two();
        let stripes = (0..n)
            .map(|_| Stripe {
                groups: StripeLock::new(GroupMap::new()),
            })
            .collect();
        TimerTable {
            stripes,
            mask: n - 1,
        }
    }

    /// How many stripes (locks) the table has.
    pub fn bucket_count(&self) -> usize {
        self.stripes.len()
    }

    /// The stripe of `(owner, id)`'s group, the group's mixed key, and the id's index in it.
    /// The stripe comes from the top 24 bits of the key, the cell from its low bits.
    fn locate(&self, owner: Tgid, id: TimerId) -> (&StripeLock<GroupMap<T>>, u64, u8) {
        let hash = group_hash(owner.get(), id.raw());
        let stripe = &self.stripes[(hash >> 40) as usize & self.mask];
        (&stripe.groups, hash, slot_index(id.raw()))
    }

    /// Reserves `(owner, id)` if no slot holds it yet. Returns whether it did.
    pub fn try_reserve(&self, owner: Tgid, id: TimerId) -> bool {
        let (stripe, hash, index) = self.locate(owner, id);
        stripe.lock().reserve(hash, index)
    }

    /// Makes a reserved `(owner, id)` visible with `value`. Returns false if the reservation is
    /// gone (removed by a racing process exit) or already published.
    pub fn publish(&self, owner: Tgid, id: TimerId, value: Arc<T>) -> bool {
        let (stripe, hash, index) = self.locate(owner, id);
        stripe.lock().publish(hash, index, value)
    }

    /// The published value of `(owner, id)`, if any. Takes one stripe lock.
    pub fn lookup(&self, owner: Tgid, id: TimerId) -> Option<Arc<T>> {
        let (stripe, hash, index) = self.locate(owner, id);
        stripe.lock().get_with(hash, index, Arc::clone)
    }

    /// `f` of the published value of `(owner, id)`, if any, called under the stripe lock:
    /// a read that takes no count on the value, as Linux reads a timer found under RCU. `f`
    /// must not block or take a lock (the stripe lock is a leaf); reading atomics is its job.
    pub fn read<R>(&self, owner: Tgid, id: TimerId, f: impl FnOnce(&T) -> R) -> Option<R> {
        let (stripe, hash, index) = self.locate(owner, id);
        stripe.lock().get_with(hash, index, |v| f(v))
    }

    /// Removes `(owner, id)`, reserved or published. Returns the published value, if any.
    pub fn remove(&self, owner: Tgid, id: TimerId) -> Option<Arc<T>> {
        let (stripe, hash, index) = self.locate(owner, id);
        stripe.lock().remove(hash, index)
    }

    /// Whether `(owner, id)` holds a slot, reserved or published.
    pub fn contains(&self, owner: Tgid, id: TimerId) -> bool {
        let (stripe, hash, index) = self.locate(owner, id);
        stripe.lock().holds(hash, index)
    }

    /// Bytes of table structure allocated: the stripe array, each stripe's cells and leaves.
    /// Takes each stripe lock in turn, never two at once.
    pub fn memory_bytes(&self) -> usize {
        let maps: usize = self
            .stripes
            .iter()
            .map(|s| s.groups.lock().heap_bytes())
            .sum();
        self.stripes.len() * std::mem::size_of::<Stripe<T>>() + maps
    }

    /// The fullest stripe and the number of slots (ids held, reserved or published): for
    /// benchmarks and tests.
    pub fn chain_stats(&self) -> (usize, usize) {
        let (mut fullest, mut total) = (0, 0);
        for s in self.stripes.iter() {
            let n = s.groups.lock().ids();
            fullest = fullest.max(n);
            total += n;
        }
        (fullest, total)
    }
}

impl<T> Default for TimerTable<T> {
    fn default() -> Self {
        TimerTable::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn id(n: i32) -> TimerId {
        TimerId::from_raw(n)
    }

    #[test]
    fn reserved_slots_block_the_id_but_stay_invisible_until_published() {
        let t: TimerTable<u32> = TimerTable::with_buckets(4);
        assert!(t.try_reserve(Tgid::new(10), id(0)));
        assert!(!t.try_reserve(Tgid::new(10), id(0)));
        assert!(
            t.try_reserve(Tgid::new(11), id(0)),
            "another process may use the same id"
        );
        assert_eq!(t.lookup(Tgid::new(10), id(0)), None);
        assert!(t.publish(Tgid::new(10), id(0), Arc::new(7)));
        assert!(
            !t.publish(Tgid::new(10), id(0), Arc::new(9)),
            "published once"
        );
        assert_eq!(t.lookup(Tgid::new(10), id(0)).as_deref(), Some(&7));
        assert_eq!(t.lookup(Tgid::new(11), id(0)), None);
        assert_eq!(t.remove(Tgid::new(10), id(0)).as_deref(), Some(&7));
        assert_eq!(t.lookup(Tgid::new(10), id(0)), None);
        assert!(
            !t.publish(Tgid::new(10), id(0), Arc::new(8)),
            "publish needs a reservation"
        );
        assert_eq!(t.remove(Tgid::new(11), id(0)), None);
        assert!(!t.contains(Tgid::new(11), id(0)));
    }

    #[test]
    fn default_size_is_512_stripes_per_cpu_rounded_to_a_power_of_two() {
        let t: TimerTable<()> = TimerTable::new();
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert!(t.bucket_count().is_power_of_two());
        assert!(t.bucket_count() >= 512 * cpus && t.bucket_count() < 1024 * cpus);
    }

    #[test]
    fn linear_ids_spread_over_the_stripes_eight_at_a_time() {
        let t: TimerTable<()> = TimerTable::with_buckets(1024);
        for n in 0..20_000 {
            assert!(t.try_reserve(Tgid::new(1234), id(n)));
        }
        let (fullest, total) = t.chain_stats();
        assert_eq!(total, 20_000);
        // 2500 groups of 8 over 1024 stripes: about 20 ids a stripe, rarely over 10 groups.
        assert!(fullest <= 96, "fullest stripe {fullest} for ~20 per stripe");
        assert_eq!(fullest % 8, 0, "whole groups share a stripe");
    }

    #[test]
    fn consecutive_ids_share_a_stripe_only_within_their_group_of_eight() {
        let t: TimerTable<()> = TimerTable::with_buckets(1 << 16);
        let stripe = |n| t.locate(Tgid::new(9), id(n)).0 as *const _;
        assert!((0..8).all(|id| stripe(id) == stripe(0)));
        let distinct: std::collections::HashSet<_> = (0..64).map(|g| stripe(g * 8)).collect();
        assert!(
            distinct.len() > 56,
            "groups spread: {} of 64",
            distinct.len()
        );
    }

    #[test]
    fn stripes_take_32_bytes_so_the_sparse_case_stays_near_seed_004s_memory() {
        assert_eq!(std::mem::size_of::<Stripe<u64>>(), 32);
        let t: TimerTable<u64> = TimerTable::with_buckets(1024);
        let empty = t.memory_bytes();
        for n in 0..2048 {
            assert!(
                t.try_reserve(Tgid::new(1), id(n * 512))
                    && t.publish(Tgid::new(1), id(n * 512), Arc::new(0))
            );
        }
        let sparse = t.memory_bytes();
        assert_eq!(empty, 1024 * 32);
        // Inline singletons: about three 24-byte cells per stripe, no leaf.
        assert!(sparse < 150 << 10, "{sparse} bytes");
        for n in 0..2048 {
            assert!(t.try_reserve(Tgid::new(2), id(n)));
        }
        let dense = t.memory_bytes() - sparse;
        assert!(dense < 2048 * 16, "dense ids: {dense} bytes for 2048");
    }

    #[test]
    fn memory_follows_live_timers_back_down_after_deletes() {
        let t: TimerTable<u32> = TimerTable::with_buckets(8);
        let empty = t.memory_bytes();
        for n in 0..10_000 {
            assert!(t.try_reserve(Tgid::new(1), id(n * 512)));
        }
        let full = t.memory_bytes();
        assert!(full > empty + 10_000 * 16);
        for n in 0..10_000 {
            t.remove(Tgid::new(1), id(n * 512));
        }
        assert!(
            t.memory_bytes() < empty + 8 * 1024,
            "{} bytes",
            t.memory_bytes()
        );
    }
}
