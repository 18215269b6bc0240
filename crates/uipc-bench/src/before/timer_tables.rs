//! The two designs seed 004 measured against, kept only to benchmark against (`uipc bench
//! timers`): never used by the engine.
//!
//! - [`MainlineTable`]: Linux before 6.15, one 512-bucket hash behind one global lock. Every
//!   create, delete and lookup of every process serialises on that lock, and with 100k timers
//!   each bucket holds ~200 of them.
//! - [`XarrayTable`]: a per-process dense array indexed by id, the design the seed rejected.
//!   Lookup is one index, but memory follows the largest id: restored ids 512 apart cost 512
//!   slots per timer. Finding a process's array is free in Linux (`current->signal`); here it is
//!   a read-locked map lookup, which the benchmark should keep in mind.
//!
//! - [`SeedHashTable`]: seed 004 as merged (512 x CPUs buckets, a lock and a chain each), which
//!   the engine's [`TimerTable`] refines with groups of eight ids behind each lock.
//!
//! All four tables implement [`TimerIndex`] so one benchmark drives them alike. Locks: each
//! table's locks are leaves; no method holds one on exit. A poisoned lock is taken as is (a
//! panicking benchmark thread leaves the tables consistent: each update is one statement).

use std::collections::HashMap;

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use uipc::timers::TimerTable;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// What a benchmark needs from a timer table: reserve, publish, look up, remove, and a memory
/// estimate in bytes (the heap the table itself owns, not the values).
pub trait TimerIndex<T>: Send + Sync {
    /// Reserves `(owner, id)` if free.
    fn try_reserve(&self, owner: i32, id: i32) -> bool;
    /// Publishes a reserved slot.
    fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool;
    /// The published value.
    fn lookup(&self, owner: i32, id: i32) -> Option<Arc<T>>;
    /// Calls `f` on the published value under the table's lock, taking no count on it (as
    /// `timer_getoverrun` reads its timer); whether there was one.
    fn read(&self, owner: i32, id: i32, f: &mut dyn FnMut(&T)) -> bool;
    /// Removes a slot, returning the published value.
    fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>>;
    /// Bytes of table structure currently allocated.
    fn memory_bytes(&self) -> usize;
}

/// `TimerIndex` from a table's inherent methods of the trait's names and shapes, with
/// `lookup` and `read` both from the table's `with_value` (`f` of the published value under
/// the table's lock).
macro_rules! timer_index {
    ($table:ident, with_value) => {
        impl<T: Send + Sync> TimerIndex<T> for $table<T> {
            fn try_reserve(&self, owner: i32, id: i32) -> bool {
                $table::try_reserve(self, owner, id)
            }
            fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool {
                $table::publish(self, owner, id, value)
            }
            fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
                $table::remove(self, owner, id)
            }
            fn memory_bytes(&self) -> usize {
                $table::memory_bytes(self)
            }
            fn lookup(&self, owner: i32, id: i32) -> Option<Arc<T>> {
                self.with_value(owner, id, Arc::clone)
            }
            fn read(&self, owner: i32, id: i32, f: &mut dyn FnMut(&T)) -> bool {
                self.with_value(owner, id, |v| f(v)).is_some()
            }
        }
    };
}

/// The engine's table, keyed by its typed process and timer ids.
impl<T: Send + Sync> TimerIndex<T> for TimerTable<T> {
    fn try_reserve(&self, owner: i32, id: i32) -> bool {
        TimerTable::try_reserve(self, owner.into(), id.into())
    }
    fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool {
        TimerTable::publish(self, owner.into(), id.into(), value)
    }
    fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        TimerTable::remove(self, owner.into(), id.into())
    }
    fn memory_bytes(&self) -> usize {
        TimerTable::memory_bytes(self)
    }
    fn lookup(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        TimerTable::lookup(self, owner.into(), id.into())
    }
    fn read(&self, owner: i32, id: i32, f: &mut dyn FnMut(&T)) -> bool {
        TimerTable::read(self, owner.into(), id.into(), f).is_some()
    }
}

mod seed_hash;

pub use seed_hash::SeedHashTable;

timer_index!(MainlineTable, with_value);
timer_index!(XarrayTable, with_value);

type Chain<T> = Vec<(i32, i32, Option<Arc<T>>)>;

/// Linux before 6.15: 512 buckets, one lock for all of them.
pub struct MainlineTable<T> {
    buckets: Mutex<Vec<Chain<T>>>,
}

impl<T> MainlineTable<T> {
    /// An empty table of 512 buckets.
    pub fn new() -> MainlineTable<T> {
        MainlineTable {
            buckets: Mutex::new((0..512).map(|_| Vec::new()).collect()),
        }
    }

    fn bucket(owner: i32, id: i32) -> usize {
        // hash_32(hash32_ptr(sig) ^ nr, 9): a multiplicative hash's top 9 bits.
        let x = (owner as u32).wrapping_mul(0x9e37_79b9) ^ id as u32;
        (x.wrapping_mul(0x61c8_8647) >> 23) as usize
    }

    /// `f` of the published value of `(owner, id)`, if any, under the global lock.
    fn with_value<R>(&self, owner: i32, id: i32, f: impl FnOnce(&Arc<T>) -> R) -> Option<R> {
        let b = lock(&self.buckets);
        b[Self::bucket(owner, id)]
            .iter()
            .find(|s| s.0 == owner && s.1 == id)
            .and_then(|s| s.2.as_ref())
            .map(f)
    }
}

impl<T> Default for MainlineTable<T> {
    fn default() -> Self {
        MainlineTable::new()
    }
}

impl<T> MainlineTable<T> {
    fn try_reserve(&self, owner: i32, id: i32) -> bool {
        let mut b = lock(&self.buckets);
        let chain = &mut b[Self::bucket(owner, id)];
        if chain.iter().any(|s| s.0 == owner && s.1 == id) {
            return false;
        }
        chain.push((owner, id, None));
        true
    }
    fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool {
        let mut b = lock(&self.buckets);
        let chain = &mut b[Self::bucket(owner, id)];
        match chain
            .iter_mut()
            .find(|s| s.0 == owner && s.1 == id && s.2.is_none())
        {
            Some(s) => {
                s.2 = Some(value);
                true
            }
            None => false,
        }
    }
    fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let mut b = lock(&self.buckets);
        let chain = &mut b[Self::bucket(owner, id)];
        let pos = chain.iter().position(|s| s.0 == owner && s.1 == id)?;
        chain.swap_remove(pos).2
    }
    fn memory_bytes(&self) -> usize {
        let b = lock(&self.buckets);
        b.capacity() * std::mem::size_of::<Chain<T>>()
            + b.iter()
                .map(|c| c.capacity() * std::mem::size_of::<(i32, i32, Option<Arc<T>>)>())
                .sum::<usize>()
    }
}

/// One process's dense array: slot `id` is `None` (free), `Some(None)` (reserved) or
/// `Some(Some(value))`.
type DenseArray<T> = RwLock<Vec<Option<Option<Arc<T>>>>>;

/// A per-process dense array indexed by id (the rejected "xarray" design).
pub struct XarrayTable<T> {
    processes: RwLock<HashMap<i32, Arc<DenseArray<T>>>>,
}

impl<T> XarrayTable<T> {
    /// An empty table.
    pub fn new() -> XarrayTable<T> {
        XarrayTable {
            processes: RwLock::new(HashMap::new()),
        }
    }

    /// `f` of the published value of `(owner, id)`, if any, under the array's read lock.
    fn with_value<R>(&self, owner: i32, id: i32, f: impl FnOnce(&Arc<T>) -> R) -> Option<R> {
        let a = self.array(owner, false)?;
        let v = read(&a);
        v.get(id as u32 as usize)?.as_ref()?.as_ref().map(f)
    }

    fn array(&self, owner: i32, create: bool) -> Option<Arc<DenseArray<T>>> {
        if let Some(a) = read(&self.processes).get(&owner) {
            return Some(a.clone());
        }
        if !create {
            return None;
        }
        let mut w = write(&self.processes);
        Some(w.entry(owner).or_default().clone())
    }
}

impl<T> Default for XarrayTable<T> {
    fn default() -> Self {
        XarrayTable::new()
    }
}

impl<T> XarrayTable<T> {
    fn try_reserve(&self, owner: i32, id: i32) -> bool {
        let Some(a) = self.array(owner, true) else {
            return false;
        };
        let mut v = write(&a);
        let i = id as u32 as usize;
        if v.len() <= i {
            v.resize_with(i + 1, || None);
        }
        if v[i].is_some() {
            return false;
        }
        v[i] = Some(None);
        true
    }
    fn publish(&self, owner: i32, id: i32, value: Arc<T>) -> bool {
        let Some(a) = self.array(owner, false) else {
            return false;
        };
        let mut v = write(&a);
        match v.get_mut(id as u32 as usize) {
            Some(slot @ Some(None)) => {
                *slot = Some(Some(value));
                true
            }
            _ => false,
        }
    }
    fn remove(&self, owner: i32, id: i32) -> Option<Arc<T>> {
        let a = self.array(owner, false)?;
        let mut v = write(&a);
        v.get_mut(id as u32 as usize)?.take()?
    }
    fn memory_bytes(&self) -> usize {
        read(&self.processes)
            .values()
            .map(|a| read(a).capacity() * std::mem::size_of::<Option<Option<Arc<T>>>>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(t: &dyn TimerIndex<u32>) {
        assert!(t.try_reserve(1, 5));
        assert!(!t.try_reserve(1, 5));
        assert!(t.lookup(1, 5).is_none(), "reserved is invisible");
        assert!(t.publish(1, 5, Arc::new(50)));
        assert!(t.try_reserve(2, 5));
        assert_eq!(t.lookup(1, 5).as_deref(), Some(&50));
        assert_eq!(t.remove(1, 5).as_deref(), Some(&50));
        assert!(t.lookup(1, 5).is_none());
        assert!(t.try_reserve(1, 5), "free again");
    }

    #[test]
    fn mainline_table_behaves_as_a_timer_index() {
        exercise(&MainlineTable::new());
    }

    #[test]
    fn seed_hash_table_behaves_as_a_timer_index() {
        exercise(&SeedHashTable::with_buckets(4));
    }

    #[test]
    fn engine_table_behaves_as_a_timer_index() {
        exercise(&TimerTable::with_buckets(4));
    }

    #[test]
    fn xarray_table_behaves_as_a_timer_index() {
        exercise(&XarrayTable::new());
    }

    #[test]
    fn sparse_restored_ids_cost_the_xarray_memory_but_not_the_hash() {
        let hash: TimerTable<u32> = TimerTable::with_buckets(1024);
        let xarray: XarrayTable<u32> = XarrayTable::new();
        let (h0, x0) = (hash.memory_bytes(), TimerIndex::memory_bytes(&xarray));
        for n in 0..2048 {
            assert!(TimerIndex::try_reserve(&hash, 1, n * 512));
            assert!(TimerIndex::try_reserve(&xarray, 1, n * 512));
        }
        let hash_cost = hash.memory_bytes() - h0;
        let xarray_cost = TimerIndex::memory_bytes(&xarray) - x0;
        assert!(xarray_cost > 1 << 20, "xarray {xarray_cost} bytes");
        assert!(hash_cost < 256 << 10, "hash {hash_cost} bytes");
    }
}
