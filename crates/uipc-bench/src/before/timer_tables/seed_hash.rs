//! Seed 004 exactly as merged in Linux 6.15: `roundup_pow_of_two(512 * CPUs)` buckets, each a
//! lock and a list (here a `Vec`) of `(process, id)` slots. Kept only to benchmark against: the
//! engine's [`TimerTable`](uipc::timers::TimerTable) keeps this lock layout but puts an open-addressing map
//! of eight-id groups behind each lock, so a lookup does not scan a chain that lengthens with
//! the timer count (about 100 entries per bucket at 100k timers on 2 CPUs).
//!
//! Locks: each bucket's mutex is a leaf; none is held on entry or exit.

use super::{lock, TimerIndex};
use std::sync::{Arc, Mutex};
use uipc::timers::default_bucket_count;

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

/// Seed 004's bucket-locked chained hash. See the module doc.
pub struct SeedHashTable<T> {
    buckets: Box<[Bucket<T>]>,
    mask: u64,
}

impl<T> SeedHashTable<T> {
    /// A table sized as Linux sizes it for this machine's CPU count.
    pub fn new() -> SeedHashTable<T> {
        SeedHashTable::with_buckets(default_bucket_count())
    }

    /// A table of `buckets` buckets, rounded up to a power of two (at least 1).
    pub fn with_buckets(buckets: usize) -> SeedHashTable<T> {
        let n = buckets.max(1).next_power_of_two();
        let buckets = std::iter::repeat_with(|| Bucket {
            slots: Mutex::default(),
        });
        SeedHashTable {
            buckets: buckets.take(n).collect(),
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
        let mut slots = lock(&self.bucket(owner, id).slots);
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
        let mut slots = lock(&self.bucket(owner, id).slots);
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

    /// `f` of the published value of `(owner, id)`, if any, under the bucket lock: the table's
    /// lookup (`f` clones the `Arc`) and its count-free read.
    fn with_value<R>(&self, owner: i32, id: i32, f: impl FnOnce(&Arc<T>) -> R) -> Option<R> {
        let slots = lock(&self.bucket(owner, id).slots);
        slots
            .iter()
            .find(|s| s.owner == owner && s.id == id)
            .and_then(|s| s.value.as_ref())
            .map(f)
    }

    /// Removes `(owner, id)`, reserved or published. Returns the published value, if any.
    pub fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let mut slots = lock(&self.bucket(owner, id).slots);
        let pos = slots.iter().position(|s| s.owner == owner && s.id == id)?;
        slots.swap_remove(pos).value
    }

    /// Whether `(owner, id)` holds a slot, reserved or published.
    pub fn contains(&self, owner: i32, id: i32) -> bool {
        let slots = lock(&self.bucket(owner, id).slots);
        slots.iter().any(|s| s.owner == owner && s.id == id)
    }

    /// Bytes of table structure allocated: each bucket and its chain's capacity. Takes each
    /// bucket lock in turn, never two at once.
    pub fn memory_bytes(&self) -> usize {
        let slot = std::mem::size_of::<Slot<T>>();
        self.buckets.iter().fold(0, |bytes, b| {
            bytes + std::mem::size_of::<Bucket<T>>() + lock(&b.slots).capacity() * slot
        })
    }
}

timer_index!(SeedHashTable, with_value);

impl<T> Default for SeedHashTable<T> {
    fn default() -> Self {
        SeedHashTable::new()
    }
}
