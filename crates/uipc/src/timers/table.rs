//! The shared timer table: `(process, id) -> timer`, one table for every process.
//!
//! This is the design of seed 004 ("posix-timers: Improve hash table performance", Linux 6.15):
//! `roundup_pow_of_two(512 * CPUs)` buckets, each a lock and a short list, chosen by a hash of
//! the owning process and the id. Lookups and inserts take only their bucket's lock, so
//! `timer_getoverrun` in one process never waits on a create in another unless both hash to the
//! same bucket, and memory is one bucket array plus one slot per live timer, whatever the ids.
//!
//! Why not a per-process dense array ("xarray")? It looks up faster, but it costs memory for
//! the largest id rather than the number of timers: checkpoint/restore (§8.2) can place 2048
//! timers 512 ids apart, which the seed measured at over 1 MB per process. With 512 buckets per
//! CPU the chains stay short (a few entries up to ~100k timers on 2 CPUs), so the lookup is a
//! bucket lock plus a scan of a handful of entries. `compare` keeps both older designs so
//! `uipc bench timers` can measure the difference rather than assume it.
//!
//! Reservation ("not yet valid"): `timer_create` first reserves an id (a slot without a value),
//! so that no concurrent create can take the same id, and publishes the timer only once every
//! check has passed. Lookups never return a reserved slot, as Linux's lookup skips a timer whose
//! `it_signal` still has its low bit set.
//!
//! Locks: each bucket's mutex is a leaf lock; no other lock is taken while one is held, and
//! values are cloned (`Arc`) out before it is released. On entry and exit of every method no
//! bucket lock is held. Built with `--cfg loom` the mutexes and `Arc` are loom's (tests/loom_timers.rs).

use crate::sync::{self, Arc, Mutex};

/// One bucket slot: the key, and the value once published.
struct Slot<T> {
    owner: i32,
    id: i32,
    value: Option<Arc<T>>,
}

/// A bucket, aligned so that two buckets' locks never share a cache line.
#[repr(align(64))]
struct Bucket<T> {
    slots: Mutex<Vec<Slot<T>>>,
}

/// The bucket-locked hash of `(owner process, id)` keys. See the module doc.
pub struct TimerTable<T> {
    buckets: Box<[Bucket<T>]>,
    mask: u64,
}

/// `roundup_pow_of_two(512 * cpus)`, the size Linux picks at boot.
pub fn default_bucket_count() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (512 * cpus).next_power_of_two()
}

impl<T> TimerTable<T> {
    /// A table sized as Linux sizes it for this machine's CPU count.
    pub fn new() -> TimerTable<T> {
        TimerTable::with_buckets(default_bucket_count())
    }

    /// A table of `buckets` buckets, rounded up to a power of two (at least 1).
    pub fn with_buckets(buckets: usize) -> TimerTable<T> {
        let n = buckets.max(1).next_power_of_two();
        let buckets = (0..n)
            .map(|_| Bucket {
                slots: Mutex::new(Vec::new()),
            })
            .collect();
        TimerTable {
            buckets,
            mask: n as u64 - 1,
        }
    }

    /// How many buckets the table has.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    fn bucket(&self, owner: i32, id: i32) -> &Bucket<T> {
        // A multiplicative mix of both halves: consecutive ids of one process land in
        // consecutive-looking but well spread buckets, and equal ids of different processes
        // do not collide (the role jhash2 plays in Linux).
        let key = ((owner as u32 as u64) << 32) | id as u32 as u64;
        let mut h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 32;
        &self.buckets[(h & self.mask) as usize]
    }

    /// Reserves `(owner, id)` if no slot holds it yet. Returns whether it did.
    pub fn try_reserve(&self, owner: i32, id: i32) -> bool {
        let mut slots = sync::lock(&self.bucket(owner, id).slots);
        if slots.iter().any(|s| s.owner == owner && s.id == id) {
            return false;
        }
        slots.push(Slot {
            owner,
            id,
            value: None,
        });
        true
    }

    /// Makes a reserved `(owner, id)` visible with `value`. Returns false (dropping nothing but
    /// the caller's chance) if the reservation is gone, removed by a racing process exit.
    pub fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool {
        let mut slots = sync::lock(&self.bucket(owner, id).slots);
        match slots
            .iter_mut()
            .find(|s| s.owner == owner && s.id == id && s.value.is_none())
        {
            Some(slot) => {
                slot.value = Some(value);
                true
            }
            None => false,
        }
    }

    /// The published value of `(owner, id)`, if any. Takes one bucket lock.
    pub fn lookup(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let slots = sync::lock(&self.bucket(owner, id).slots);
        slots
            .iter()
            .find(|s| s.owner == owner && s.id == id)
            .and_then(|s| s.value.clone())
    }

    /// Removes `(owner, id)`, reserved or published. Returns the published value, if any.
    pub fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let mut slots = sync::lock(&self.bucket(owner, id).slots);
        let pos = slots.iter().position(|s| s.owner == owner && s.id == id)?;
        slots.swap_remove(pos).value
    }

    /// Whether `(owner, id)` holds a slot, reserved or published.
    pub fn contains(&self, owner: i32, id: i32) -> bool {
        let slots = sync::lock(&self.bucket(owner, id).slots);
        slots.iter().any(|s| s.owner == owner && s.id == id)
    }

    /// The longest bucket chain and the number of slots: for benchmarks and tests. Takes each
    /// bucket lock in turn, never two at once.
    pub fn chain_stats(&self) -> (usize, usize) {
        let (mut longest, mut total) = (0, 0);
        for b in self.buckets.iter() {
            let n = sync::lock(&b.slots).len();
            longest = longest.max(n);
            total += n;
        }
        (longest, total)
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

    #[test]
    fn reserved_slots_block_the_id_but_stay_invisible_until_published() {
        let t: TimerTable<u32> = TimerTable::with_buckets(4);
        assert!(t.try_reserve(10, 0));
        assert!(!t.try_reserve(10, 0));
        assert!(t.try_reserve(11, 0), "another process may use the same id");
        assert_eq!(t.lookup(10, 0), None);
        assert!(t.publish(10, 0, Arc::new(7)));
        assert_eq!(t.lookup(10, 0).as_deref(), Some(&7));
        assert_eq!(t.lookup(11, 0), None);
        assert_eq!(t.remove(10, 0).as_deref(), Some(&7));
        assert_eq!(t.lookup(10, 0), None);
        assert!(
            !t.publish(10, 0, Arc::new(8)),
            "publish needs a reservation"
        );
        assert_eq!(t.remove(11, 0), None);
        assert!(!t.contains(11, 0));
    }

    #[test]
    fn default_size_is_512_buckets_per_cpu_rounded_to_a_power_of_two() {
        let t: TimerTable<()> = TimerTable::new();
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert!(t.bucket_count().is_power_of_two());
        assert!(t.bucket_count() >= 512 * cpus && t.bucket_count() < 1024 * cpus);
    }

    #[test]
    fn linear_ids_spread_over_the_buckets() {
        let t: TimerTable<()> = TimerTable::with_buckets(1024);
        for id in 0..20_000 {
            assert!(t.try_reserve(1234, id));
        }
        let (longest, total) = t.chain_stats();
        assert_eq!(total, 20_000);
        assert!(longest < 60, "longest chain {longest} for ~20 per bucket");
    }
}
