//! The shared timer table: `(process, id) -> timer`, one table for every process.
//!
//! Lock layout from seed 004 ("posix-timers: Improve hash table performance", Linux 6.15):
//! `roundup_pow_of_two(512 * CPUs)` stripes, each with its own lock, chosen by a hash of the
//! owning process and the id. Lookups and inserts take only their stripe's lock, so
//! `timer_getoverrun` in one process waits on a create in another only if both hash to the same
//! stripe, and nothing ever takes a table-wide lock.
//!
//! What differs from Linux: behind each lock sits a small open-addressing hash map rather than
//! a list. Linux's chains lengthen with the number of timers (about 100 per bucket at 100k
//! timers on 2 CPUs, which the seed's own numbers show as the gap between its hash and the
//! xarray on lookups); a map finds its key in one probe whatever the count. An empty map
//! allocates nothing and a map grows with its entries, so memory still follows the number of
//! live timers, never the largest id: this keeps what the seed chose the hash for.
//!
//! Why not a per-process dense array ("xarray")? It costs memory for the largest id:
//! checkpoint/restore (§8.2) can place 2048 timers 512 ids apart, over 1 MB (the seed; 16 MB
//! with 8-byte slots in `compare::XarrayTable`). The two older designs, and seed 004's chains,
//! live in `compare` so `uipc bench timers` measures the difference; the timing run in
//! `tests/timers_tables.rs` prints the seed's scenarios for all four.
//!
//! Reservation ("not yet valid"): `timer_create` first reserves an id (a slot without a value),
//! so that no concurrent create can take the same id, and publishes the timer only once every
//! check has passed. Lookups never return a reserved slot, as Linux's lookup skips a timer whose
//! `it_signal` still has its low bit set.
//!
//! Locks: each stripe's mutex is a leaf lock; no other lock is taken while one is held, and
//! values are cloned (`Arc`) out before it is released. On entry and exit of every method no
//! stripe lock is held. Built with `--cfg loom` the mutexes and `Arc` are loom's
//! (tests/loom_timers.rs).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::sync::{self, Arc, Mutex};

/// `(owner, id)` packed, already mixed: the map's hasher passes it through.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key(u64);

fn mix(owner: i32, id: i32) -> u64 {
    // SplitMix64's finaliser: every input bit reaches every output bit, so consecutive ids of
    // one process spread over stripes (high bits) and over map slots (low and top bits).
    let mut h = ((owner as u32 as u64) << 32) | id as u32 as u64;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Passes the pre-mixed key through (the map needs no second hash).
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The slot value: `None` while reserved. `mix` is a bijection (xor-shifts and odd
/// multiplications invert), so the key alone identifies `(owner, id)`.
type Map<T> = HashMap<Key, Option<Arc<T>>, BuildHasherDefault<PassThrough>>;

/// A stripe, aligned so that two stripes' locks never share a cache line.
#[repr(align(64))]
struct Stripe<T> {
    map: Mutex<Map<T>>,
}

/// The lock-striped hash of `(owner process, id)` keys. See the module doc.
pub struct TimerTable<T> {
    stripes: Box<[Stripe<T>]>,
    mask: u64,
}

/// `roundup_pow_of_two(512 * cpus)`, the bucket count Linux picks at boot.
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
                map: Mutex::new(Map::default()),
            })
            .collect();
        TimerTable {
            stripes,
            mask: n as u64 - 1,
        }
    }

    /// How many stripes (locks) the table has.
    pub fn bucket_count(&self) -> usize {
        self.stripes.len()
    }

    fn stripe(&self, key: Key) -> &Stripe<T> {
        &self.stripes[((key.0 >> 32) & self.mask) as usize]
    }

    /// Reserves `(owner, id)` if no slot holds it yet. Returns whether it did.
    pub fn try_reserve(&self, owner: i32, id: i32) -> bool {
        let key = Key(mix(owner, id));
        let mut map = sync::lock(&self.stripe(key).map);
        match map.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(None);
                true
            }
        }
    }

    /// Makes a reserved `(owner, id)` visible with `value`. Returns false if the reservation is
    /// gone (removed by a racing process exit) or already published.
    pub fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool {
        let key = Key(mix(owner, id));
        let mut map = sync::lock(&self.stripe(key).map);
        match map.get_mut(&key) {
            Some(slot @ None) => {
                *slot = Some(value);
                true
            }
            _ => false,
        }
    }

    /// The published value of `(owner, id)`, if any. Takes one stripe lock.
    pub fn lookup(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let key = Key(mix(owner, id));
        let map = sync::lock(&self.stripe(key).map);
        map.get(&key).and_then(|slot| slot.clone())
    }

    /// Removes `(owner, id)`, reserved or published. Returns the published value, if any.
    pub fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let key = Key(mix(owner, id));
        let mut map = sync::lock(&self.stripe(key).map);
        let value = map.remove(&key)?;
        // Give memory back once a stripe is mostly empty, so it follows the live timers.
        if map.capacity() > 16 && map.len() * 4 < map.capacity() {
            let keep = map.len() * 2;
            map.shrink_to(keep);
        }
        value
    }

    /// Whether `(owner, id)` holds a slot, reserved or published.
    pub fn contains(&self, owner: i32, id: i32) -> bool {
        let key = Key(mix(owner, id));
        sync::lock(&self.stripe(key).map).contains_key(&key)
    }

    /// Bytes of table structure allocated: the stripe array and each map's slots (an estimate
    /// of the map's layout: one entry plus one control byte per slot). Takes each stripe lock in
    /// turn, never two at once.
    pub fn memory_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Key, Option<Arc<T>>)>() + 1;
        let maps: usize = self
            .stripes
            .iter()
            .map(|s| sync::lock(&s.map).capacity() * slot)
            .sum();
        self.stripes.len() * std::mem::size_of::<Stripe<T>>() + maps
    }

    /// The fullest stripe and the number of slots: for benchmarks and tests.
    pub fn chain_stats(&self) -> (usize, usize) {
        let (mut fullest, mut total) = (0, 0);
        for s in self.stripes.iter() {
            let n = sync::lock(&s.map).len();
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

    #[test]
    fn reserved_slots_block_the_id_but_stay_invisible_until_published() {
        let t: TimerTable<u32> = TimerTable::with_buckets(4);
        assert!(t.try_reserve(10, 0));
        assert!(!t.try_reserve(10, 0));
        assert!(t.try_reserve(11, 0), "another process may use the same id");
        assert_eq!(t.lookup(10, 0), None);
        assert!(t.publish(10, 0, Arc::new(7)));
        assert!(!t.publish(10, 0, Arc::new(9)), "published once");
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
    fn default_size_is_512_stripes_per_cpu_rounded_to_a_power_of_two() {
        let t: TimerTable<()> = TimerTable::new();
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert!(t.bucket_count().is_power_of_two());
        assert!(t.bucket_count() >= 512 * cpus && t.bucket_count() < 1024 * cpus);
    }

    #[test]
    fn linear_ids_spread_over_the_stripes() {
        let t: TimerTable<()> = TimerTable::with_buckets(1024);
        for id in 0..20_000 {
            assert!(t.try_reserve(1234, id));
        }
        let (fullest, total) = t.chain_stats();
        assert_eq!(total, 20_000);
        assert!(fullest < 60, "fullest stripe {fullest} for ~20 per stripe");
    }

    #[test]
    fn memory_follows_live_timers_back_down_after_deletes() {
        let t: TimerTable<u32> = TimerTable::with_buckets(8);
        let empty = t.memory_bytes();
        for id in 0..10_000 {
            assert!(t.try_reserve(1, id * 512));
        }
        let full = t.memory_bytes();
        assert!(full > empty + 10_000 * 16);
        for id in 0..10_000 {
            t.remove(1, id * 512);
        }
        assert!(
            t.memory_bytes() < empty + 8 * 1024,
            "{} bytes",
            t.memory_bytes()
        );
    }
}
