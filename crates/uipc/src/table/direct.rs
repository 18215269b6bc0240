//! Index -> `Arc<T>` for the IPC registries: a direct table with one slot per index, in
//! chunks made on first use.
//!
//! An IPC index is below the layout's IPCMNI (32768, or 2^24 with `ipcmni_extend`), and the
//! cyclic allocator keeps the live ones within a window of about 3/2 of the live count (seed
//! 002, [`super::cyclic`]), so a slot per index is dense where the objects are. Index `i` is
//! slot `i % CHUNK` of chunk `i / CHUNK`; the directory (one pointer per chunk) is made with
//! the map, a chunk the first time one of its indices is filled, and chunks are kept until the
//! map is dropped. A lookup is the same two loads and one slot lock for every index (no hash,
//! no probe); consecutive indices sit in consecutive slots, so a run of creations writes
//! memory in order, and the table never rehashes.
//!
//! Locks: each slot has its own `RwLock<()>` (from `crate::sync`), the gate, beside an atomic
//! pointer to the object (`Arc::into_raw`, null when empty). A lookup takes its slot's gate for
//! reading, loads the pointer and adds a reference: lookups of different objects share no lock
//! (neighbouring slots may share a cache line). Writers (`insert`, `remove`) must be
//! serialized by the caller (the registry's writer lock). `remove` takes the gate for writing
//! before it takes the pointer out, so no reader is between loading the pointer and adding its
//! reference when the slot's reference is given up. `insert` into an empty slot (the case of
//! every creation, as the allocator hands out free indices) stores the pointer without the
//! gate: a reader either loads null or the new object, whose reference the slot already holds,
//! and the store's `Release` (with the reader's `Acquire` load) shows the reader the object as
//! it was built. A chunk is published once through a `OnceBox` (an atomic pointer: a reader
//! either sees no chunk, an empty index, or the whole chunk) and never replaced or freed before
//! the map.
//!
//! Why by hand: the seed's create loop (31900 `semget` creates in one namespace, pinned to a
//! core) took a fifth more time with a `dashmap` from index to object than with this table:
//! the hash scatters consecutive indices over the shards' tables, which rehash as they grow.
//! Slots holding arc-swap's `ArcSwapOption` made each create 25 ns slower (its store waits
//! for readers' debts), and taking the gate on every insert cost 14 ns of a create's 131 on
//! the AMD EPYC VM (BENCHMARKS.md, "ipc-keys", both measurements).
//!
//! Memory: the directory is IPCMNI / [`CHUNK`] pointers (256 bytes by default, 128 KiB with
//! `ipcmni_extend`); a chunk is [`CHUNK`] slots of 24 bytes (24 KiB). 31900 objects at indices
//! 0..31900 fill 32 chunks, 768 KiB. Objects placed far apart by `*_next_id` (a privileged
//! restore) each cost a chunk, at most IPCMNI / [`CHUNK`] of them.

use crate::sync::{read, write, AtomicPtr, Ordering, RwLock};
use crate::IpcIdx;
use once_cell::race::OnceBox;
use std::marker::PhantomData;
use std::sync::Arc;

/// Slots per chunk (a few under loom, whose models make registries and cannot afford a
/// thousand modelled locks each).
#[cfg(not(loom))]
pub const CHUNK: usize = 1024;
/// Slots per chunk (a few under loom, whose models make registries and cannot afford a
/// thousand modelled locks each).
#[cfg(loom)]
pub const CHUNK: usize = 16;

/// One index's place (see the module doc).
struct Slot<T> {
    /// Taken for reading to add a reference to `obj`, for writing to give the slot's up.
    gate: RwLock<()>,
    /// The slot's reference to the object (`Arc::into_raw`), or null.
    obj: AtomicPtr<T>,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot {
            gate: RwLock::new(()),
            obj: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Takes the pointer out (null if empty), with the gate held for writing.
    fn take(&self) -> Option<Arc<T>> {
        let _gate = write(&self.gate);
        let old = self.obj.swap(std::ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: a non-null `obj` is a reference made by `Arc::into_raw` in `insert`, owned by
        // the slot; swapping null in gives it to us, once.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        // A plain load (no locked swap per slot when a namespace goes): nothing else can
        // reach a slot being dropped.
        let obj = self.obj.load(Ordering::Relaxed);
        if !obj.is_null() {
            // SAFETY: the slot's own reference (see `take`), given up once, here.
            drop(unsafe { Arc::from_raw(obj) });
        }
    }
}

type Chunk<T> = [Slot<T>; CHUNK];

/// Index -> object (see the module doc).
pub struct DirectMap<T> {
    dir: Box<[OnceBox<Chunk<T>>]>,
    /// The slots own `Arc<T>`s: the map is `Send`/`Sync` only when those are.
    _owns: PhantomData<Arc<T>>,
}

impl<T> DirectMap<T> {
    /// An empty map for indices below `ipcmni`.
    pub fn new(ipcmni: u32) -> DirectMap<T> {
        let chunks = (ipcmni as usize).div_ceil(CHUNK);
        DirectMap {
            dir: (0..chunks).map(|_| OnceBox::new()).collect(),
            _owns: PhantomData,
        }
    }

    /// The slot of `idx`, if its chunk exists.
    fn slot(&self, idx: IpcIdx) -> Option<&Slot<T>> {
        let i = idx.get() as usize;
        Some(&self.dir.get(i / CHUNK)?.get()?[i % CHUNK])
    }

    /// The object at `idx`, if any.
    pub fn get(&self, idx: IpcIdx) -> Option<Arc<T>> {
        let slot = self.slot(idx)?;
        let _gate = read(&slot.gate);
        let obj = slot.obj.load(Ordering::Acquire);
        if obj.is_null() {
            return None;
        }
        // SAFETY: `obj` is the slot's reference (`Arc::into_raw` in `insert`), and the slot
        // gives it up only in `take`, under the gate's write lock, which our read lock
        // excludes: the count is at least one while we add ours.
        unsafe {
            Arc::increment_strong_count(obj);
            Some(Arc::from_raw(obj))
        }
    }

    /// Puts `obj` at `idx` (below the map's IPCMNI), returning what was there. The caller
    /// serializes writers.
    pub fn insert(&self, idx: IpcIdx, obj: Arc<T>) -> Option<Arc<T>> {
        let i = idx.get() as usize;
        let chunk = self.dir[i / CHUNK].get_or_init(|| {
            let slots: Box<[Slot<T>]> = (0..CHUNK).map(|_| Slot::new()).collect();
            slots
                .try_into()
                .unwrap_or_else(|_| unreachable!("CHUNK slots"))
        });
        let slot = &chunk[i % CHUNK];
        // Only writers store, and the caller serializes them: `obj` cannot change meanwhile.
        let old = if slot.obj.load(Ordering::Relaxed).is_null() {
            None
        } else {
            slot.take()
        };
        slot.obj
            .store(Arc::into_raw(obj).cast_mut(), Ordering::Release);
        old
    }

    /// Takes every object out, in index order, giving each to `f` (no lock: the map is the
    /// caller's alone).
    pub fn drain(&mut self, mut f: impl FnMut(Arc<T>)) {
        for chunk in self.dir.iter().filter_map(OnceBox::get) {
            for slot in chunk.iter() {
                let obj = slot.obj.load(Ordering::Relaxed);
                if !obj.is_null() {
                    slot.obj.store(std::ptr::null_mut(), Ordering::Relaxed);
                    // SAFETY: the slot's own reference (see `take`), given up once, here: the
                    // slot is empty from now on, and `&mut self` keeps every reader out.
                    f(unsafe { Arc::from_raw(obj) });
                }
            }
        }
    }

    /// Takes the object at `idx` out. The caller serializes writers, and drops the result
    /// after the slot lock is released (it is, when this returns).
    pub fn remove(&self, idx: IpcIdx) -> Option<Arc<T>> {
        self.slot(idx)?.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_across_chunks() {
        let m = DirectMap::new(1 << 15);
        assert!(m.get(IpcIdx::new(5)).is_none());
        for i in [0, 1, CHUNK as u32 - 1, CHUNK as u32, (1 << 15) - 1] {
            assert!(m.insert(IpcIdx::new(i), Arc::new(i)).is_none());
        }
        for i in [0, 1, CHUNK as u32 - 1, CHUNK as u32, (1 << 15) - 1] {
            assert_eq!(m.get(IpcIdx::new(i)).as_deref(), Some(&i));
        }
        assert!(m.get(IpcIdx::new(2)).is_none());
        assert!(m.get(IpcIdx::new(2 * CHUNK as u32)).is_none());
        assert_eq!(
            m.remove(IpcIdx::new(CHUNK as u32)).as_deref(),
            Some(&(CHUNK as u32))
        );
        assert!(m.get(IpcIdx::new(CHUNK as u32)).is_none());
        assert!(m.remove(IpcIdx::new(CHUNK as u32)).is_none());
        assert!(m.remove(IpcIdx::new(3 * CHUNK as u32)).is_none());
        let old = m.insert(IpcIdx::new(0), Arc::new(7));
        assert_eq!(old.as_deref(), Some(&0));
    }

    #[test]
    fn the_map_holds_one_reference_per_object_and_gives_each_back() {
        let objs: Vec<Arc<u32>> = (0..4).map(Arc::new).collect();
        let m = DirectMap::new(1 << 15);
        for (i, o) in objs.iter().enumerate() {
            m.insert(IpcIdx::new(i as u32 * 700), Arc::clone(o));
        }
        assert!(objs.iter().all(|o| Arc::strong_count(o) == 2));
        let got = m.get(IpcIdx::new(700)).unwrap();
        assert_eq!(Arc::strong_count(&objs[1]), 3);
        drop(got);
        let replaced = m.insert(IpcIdx::new(700), Arc::new(9)).unwrap();
        assert!(Arc::ptr_eq(&replaced, &objs[1]));
        drop(replaced);
        drop(m.remove(IpcIdx::new(0)));
        assert_eq!(Arc::strong_count(&objs[0]), 1);
        assert_eq!(Arc::strong_count(&objs[1]), 1);
        drop(m);
        assert!(objs.iter().all(|o| Arc::strong_count(o) == 1));
    }

    #[test]
    fn lookups_racing_removal_and_creation_get_the_object_or_nothing() {
        // One writer fills and empties a few indices over and over, as the registry's
        // creations and removals do; readers take references meanwhile and check them.
        let m = Arc::new(DirectMap::new(1 << 15));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let start = Arc::new(std::sync::Barrier::new(4));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (m, stop, start) = (Arc::clone(&m), Arc::clone(&stop), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for i in 0..8u32 {
                            if let Some(v) = m.get(IpcIdx::new(i)) {
                                assert_eq!(*v % 8, u64::from(i), "an object of another index");
                            }
                        }
                    }
                })
            })
            .collect();
        start.wait();
        for round in 0..20_000u64 {
            let i = (round % 8) as u32;
            assert!(m.insert(IpcIdx::new(i), Arc::new(round)).is_none());
            if round >= 4 {
                let j = ((round - 4) % 8) as u32;
                assert_eq!(m.remove(IpcIdx::new(j)).map(|v| *v), Some(round - 4));
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }
}
