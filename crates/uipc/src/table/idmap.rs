//! A lock-free map from a `u32` key (an IPC index) to an `Arc<T>`.
//!
//! This is uipc's stand-in for the kernel's RCU-protected IDR lookup: `get` takes no lock,
//! costs the same for key 1 and key 15777204 (one hash, a short linear probe), and memory
//! follows the number of live entries, not the largest key.
//!
//! Layout:
//! - An open-addressing index (`IndexArray`): each cell is one `AtomicU64` holding
//!   `(key + 1) << 32 | slot`, or 0 when empty. Linear probing, load at most 3/4, and removal by
//!   backward shift, so there are no tombstones and the index never needs rebuilding for churn.
//! - A slab of slots in chunks of doubling size that never move: a slot holds the entry's
//!   `Arc<T>` (as a raw pointer) and a count of readers inside it.
//!
//! Readers (`get`), lock-free:
//! 1. read the removal sequence `mods` (a seqlock; odd while a removal shifts cells), load the
//!    current index array and probe it;
//! 2. on a hit, enter the slot: `readers += 1`, load the pointer, take a strong count, leave;
//! 3. on a miss, the answer stands only if `mods` did not move (a backward shift may have moved
//!    the wanted cell past the probe); otherwise probe again.
//!
//! Writers (`insert`, `remove`) are serialized by whoever owns the map's one [`IdMapWriter`]
//! (made with the map, not clonable, passed as `&mut`): the IPC registry keeps it in its
//! writer-locked state, so a creation takes no lock beyond the registry's own. A writer that
//! grows the index publishes a new array and keeps the old one until the map is dropped.
//! Growth quadruples (`GROWTH`): filling the map re-places each entry a third of a time on
//! average instead of once (doubling), the retired arrays together stay smaller than the live
//! one, and the live one is at most 16/3 cells per entry right after a growth (at most 8/3
//! when doubling). The IPC registries' maps hold at most 32000 entries by default (semmni).
//! A map told that its keys stay below a bound ([`IdMap::with_key_bound`], IPCMNI for a
//! registry) stops growing at the bound's power of two: keys below the array's size each sit
//! at their own cell (see `IndexArray::home`), so the array is then a direct table that any
//! load up to one free cell leaves at one probe per lookup. (A registry of 31900 sets so keeps
//! 32768 cells, 256 KiB, not 65536.) It grows past the bound only rather than fill its last
//! empty cell, which the probe loops need.
//!
//! A removal clears the slot's pointer, waits until no reader is inside the slot (readers stay
//! there for a few instructions), and only then hands the `Arc` back, so no reader can take a
//! count on a freed object. A hit on a slot that was emptied or reused returns the slot's current occupant (or
//! none); callers that need an exact match check the object's own id, as the IPC registry does
//! with the sequence number.
//!
//! Locks: none of its own on the paths above (`retired`, a list of replaced index arrays, is
//! locked only by growth, `memory_bytes` and drop); readers take no lock.

use super::hash::span_preserving;
use crate::sync::{
    lock, spin_wait, AtomicPtr, AtomicU64, AtomicUsize, Mutex,
    Ordering::{Relaxed, Release, SeqCst},
};
use std::sync::Arc;

const BASE_SLOTS: u32 = 16;
const CHUNKS: usize = 28;
const MIN_CELLS: usize = 16;
/// How much the index grows when it passes 3/4 full (see the module doc).
const GROWTH: usize = 4;

struct IndexArray {
    mask: usize,
    /// `cells.len() == 1 << bits`.
    bits: u32,
    cells: Box<[AtomicU64]>,
}

impl IndexArray {
    fn new(cells: usize) -> Box<IndexArray> {
        debug_assert!(cells.is_power_of_two());
        Box::new(IndexArray {
            mask: cells - 1,
            bits: cells.trailing_zeros(),
            cells: (0..cells).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Keys below the array's size sit at their own cell, and larger ones are spread by their
    /// high bits ([`span_preserving`]): the indices an IPC registry holds are small and dense
    /// (the cyclic allocator keeps them under about 1.5 times the live count, and the array
    /// has at least 4/3 cells per entry), so they rarely collide, an insert mostly probes one
    /// cell, and a loop over consecutive ids reads consecutive cells. (Runs of 8 placed at
    /// random, the layout before, made 31900 sequential inserts probe 6.6 cells each.)
    fn home(&self, key: u32) -> usize {
        span_preserving(u64::from(key), self.bits) as usize
    }
}

fn cell(key: u32, slot: u32) -> u64 {
    (u64::from(key) + 1) << 32 | u64::from(slot)
}
fn cell_key(c: u64) -> u32 {
    ((c >> 32) - 1) as u32
}
fn cell_slot(c: u64) -> u32 {
    c as u32
}

struct Slot<T> {
    ptr: AtomicPtr<T>,
    readers: AtomicUsize,
    /// Under loom, the last pointer a removal handed back, so a model can catch a reader taking
    /// a count on it afterwards.
    #[cfg(loom)]
    retired: AtomicPtr<T>,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            readers: AtomicUsize::new(0),
            #[cfg(loom)]
            retired: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

/// The right to change one [`IdMap`]: made with it by [`IdMap::new`], passed as `&mut` to
/// `insert` and `remove`, so writers are serialized by whoever owns it.
pub struct IdMapWriter {
    /// The map this writer belongs to ([`IdMap::owner`]).
    owner: u64,
    len: usize,
    next_slot: u32,
    free_slots: Vec<u32>,
}

impl IdMapWriter {
    /// How many entries the map holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A lock-free `u32 -> Arc<T>` map with serialized writers.
pub struct IdMap<T> {
    index: AtomicPtr<IndexArray>,
    mods: AtomicU64,
    chunks: Box<[AtomicPtr<Slot<T>>]>,
    /// Index arrays replaced by growth: readers may still be probing them, so they live as
    /// long as the map.
    retired: Mutex<Vec<*mut IndexArray>>,
    /// Tells this map's writer from others' (a process-wide counter).
    owner: u64,
    /// Index size at which every key sits at its own cell (see `with_key_bound`).
    direct_cells: u64,
}

// SAFETY: the map hands out `Arc<T>` clones across threads and drops `T` on whichever thread
// removes it, exactly what `Arc<T>: Send + Sync` needs; the raw pointers inside are owned by the
// map and only dereferenced under the protocol in the module doc.
unsafe impl<T: Send + Sync> Send for IdMap<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for IdMap<T> {}

fn chunk_of(slot: u32) -> (usize, usize) {
    let v = slot / BASE_SLOTS + 1;
    let k = 31 - v.leading_zeros();
    (k as usize, (slot - BASE_SLOTS * ((1 << k) - 1)) as usize)
}

fn chunk_len(k: usize) -> usize {
    (BASE_SLOTS as usize) << k
}

impl<T> IdMap<T> {
    /// An empty map and the one writer that may change it.
    pub fn new() -> (IdMap<T>, IdMapWriter) {
        Self::with_key_bound(u32::MAX)
    }

    /// An empty map whose keys all stay below `bound`, and its writer: the index grows only
    /// up to `bound`'s power of two (see the module doc). Inserting a larger key is allowed and
    /// only costs probes.
    pub fn with_key_bound(bound: u32) -> (IdMap<T>, IdMapWriter) {
        // Not a loom atomic: which number a map gets is not part of any interleaving.
        static OWNERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let owner = OWNERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let map = IdMap {
            index: AtomicPtr::new(Box::into_raw(IndexArray::new(MIN_CELLS))),
            mods: AtomicU64::new(0),
            chunks: (0..CHUNKS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            retired: Mutex::new(Vec::new()),
            owner,
            direct_cells: u64::from(bound).next_power_of_two(),
        };
        let writer = IdMapWriter {
            owner,
            len: 0,
            next_slot: 0,
            free_slots: Vec::new(),
        };
        (map, writer)
    }

    /// Panics unless `w` is this map's writer: another map's would name slots this map never
    /// allocated.
    fn check_writer(&self, w: &IdMapWriter) {
        assert_eq!(
            w.owner, self.owner,
            "an IdMap changed through another map's writer"
        );
    }

    fn slot(&self, slot: u32) -> &Slot<T> {
        let (k, off) = chunk_of(slot);
        let chunk = self.chunks[k].load(SeqCst);
        debug_assert!(!chunk.is_null());
        // SAFETY: a slot number is only published in the index after its chunk was allocated
        // and stored (SeqCst), chunks are never freed before the map, and `off < chunk_len(k)`.
        unsafe { &*chunk.add(off) }
    }

    /// The entry for `key`, without taking any lock.
    pub fn get(&self, key: u32) -> Option<Arc<T>> {
        let mut round = 0;
        loop {
            let before = self.mods.load(SeqCst);
            if before & 1 == 1 {
                spin_wait(&mut round);
                continue;
            }
            // SAFETY: index arrays are freed only when the map is dropped.
            let arr = unsafe { &*self.index.load(SeqCst) };
            let mut i = arr.home(key);
            loop {
                let c = arr.cells[i].load(SeqCst);
                if c == 0 {
                    break;
                }
                if cell_key(c) == key {
                    return self.read_slot(cell_slot(c));
                }
                i = (i + 1) & arr.mask;
            }
            if self.mods.load(SeqCst) == before {
                return None;
            }
        }
    }

    /// How many index cells a lookup of `key` inspects (no concurrent writers): the cost of
    /// `get` apart from the slot handshake.
    #[cfg(all(test, not(loom)))]
    fn cells_probed(&self, key: u32) -> usize {
        // SAFETY: index arrays are freed only when the map is dropped.
        let arr = unsafe { &*self.index.load(SeqCst) };
        let mut i = arr.home(key);
        let mut probed = 1;
        loop {
            let c = arr.cells[i].load(SeqCst);
            if c == 0 || cell_key(c) == key {
                return probed;
            }
            i = (i + 1) & arr.mask;
            probed += 1;
        }
    }

    fn read_slot(&self, slot_no: u32) -> Option<Arc<T>> {
        let slot = self.slot(slot_no);
        slot.readers.fetch_add(1, SeqCst);
        // Read the pointer with a read-modify-write so it sees the latest value in the
        // pointer's modification order: paired with the remover's RMW read of `readers`, this
        // makes the handshake hold under acquire/release alone (no store->load SeqCst reliance,
        // which loom cannot model either).
        let p = match slot.ptr.compare_exchange(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            SeqCst,
            SeqCst,
        ) {
            Ok(null) => null,
            Err(current) => current,
        };
        let found = (!p.is_null()).then(|| {
            #[cfg(loom)]
            assert_ne!(
                slot.retired.load(SeqCst),
                p,
                "a reader took a count on a removed entry"
            );
            // SAFETY: `p` came from `Arc::into_raw` and the removal that would release it waits
            // for `readers` to drop to zero after clearing `ptr`; we are counted in `readers`
            // and saw `ptr` still set, so the map's own strong count is alive.
            unsafe {
                Arc::increment_strong_count(p);
                Arc::from_raw(p)
            }
        });
        slot.readers.fetch_sub(1, SeqCst);
        found
    }

    /// Adds `key -> value`. The key must not be present (the allocator guarantees it).
    pub fn insert(&self, w: &mut IdMapWriter, key: u32, value: Arc<T>) {
        assert!(key < u32::MAX, "key u32::MAX is reserved");
        self.check_writer(w);
        debug_assert!(self.find_cell(key).is_none(), "key {key} inserted twice");
        let slot_no = match w.free_slots.pop() {
            Some(s) => s,
            None => {
                let s = w.next_slot;
                let (k, off) = chunk_of(s);
                if off == 0 {
                    let chunk: Box<[Slot<T>]> = (0..chunk_len(k)).map(|_| Slot::new()).collect();
                    self.chunks[k].store(Box::into_raw(chunk) as *mut Slot<T>, Release);
                }
                w.next_slot += 1;
                s
            }
        };
        // Publication: the pointer, the chunk and the grown index are written before the cell
        // that names the slot, and the cell is stored with Release; a reader reaches the slot
        // only through that cell (loaded SeqCst, so at least Acquire), so it sees them all.
        // The removal handshake (module doc) does not involve these stores. (The loom models
        // check interleavings; their readers load SeqCst, which loom always answers with the
        // latest store, so they cannot catch a too-weak ordering here: this is the plain
        // Release/Acquire publication pattern.)
        self.slot(slot_no)
            .ptr
            .store(Arc::into_raw(value) as *mut T, Release);
        // SAFETY: only writers (serialized by `w`) replace the index.
        let mut arr = unsafe { &*self.index.load(SeqCst) };
        if let Some(cells) = self.grown_size(w.len + 1, arr.cells.len()) {
            let bigger = IndexArray::new(cells);
            // Nobody sees `bigger` before the swap below, which publishes its cells.
            for c in arr
                .cells
                .iter()
                .map(|c| c.load(Relaxed))
                .filter(|&c| c != 0)
            {
                Self::place(&bigger, c, Relaxed);
            }
            let old = self.index.swap(Box::into_raw(bigger), SeqCst);
            lock(&self.retired).push(old);
            // SAFETY: just published; freed only on drop.
            arr = unsafe { &*self.index.load(SeqCst) };
        }
        Self::place(arr, cell(key, slot_no), Release);
        w.len += 1;
    }

    /// The index size to grow to before holding `len` entries in `cells`, if it must grow:
    /// past 3/4 full, fourfold but not past the direct size; at the direct size, only to keep
    /// one cell empty (then twofold).
    fn grown_size(&self, len: usize, cells: usize) -> Option<usize> {
        let direct = usize::try_from(self.direct_cells).unwrap_or(usize::MAX);
        if cells >= direct {
            return (len >= cells).then_some(cells * 2);
        }
        (len * 4 > cells * 3).then(|| (cells * GROWTH).min(direct))
    }

    /// Stores `c` in the first empty cell from its home. Only writers store cells, so the
    /// probe reads them Relaxed.
    fn place(arr: &IndexArray, c: u64, order: crate::sync::Ordering) {
        let mut i = arr.home(cell_key(c));
        while arr.cells[i].load(Relaxed) != 0 {
            i = (i + 1) & arr.mask;
        }
        arr.cells[i].store(c, order);
    }

    fn find_cell(&self, key: u32) -> Option<(usize, u64)> {
        // SAFETY: called by the writer, so the array is current and alive.
        let arr = unsafe { &*self.index.load(SeqCst) };
        let mut i = arr.home(key);
        loop {
            let c = arr.cells[i].load(SeqCst);
            if c == 0 {
                return None;
            }
            if cell_key(c) == key {
                return Some((i, c));
            }
            i = (i + 1) & arr.mask;
        }
    }

    /// Removes `key`, returning its value once no reader can still reach it.
    pub fn remove(&self, w: &mut IdMapWriter, key: u32) -> Option<Arc<T>> {
        self.check_writer(w);
        let (mut hole, c) = self.find_cell(key)?;
        // SAFETY: we are the writer, so this is the current, live array.
        let arr = unsafe { &*self.index.load(SeqCst) };
        self.mods.fetch_add(1, SeqCst);
        let mut j = hole;
        loop {
            j = (j + 1) & arr.mask;
            let next = arr.cells[j].load(SeqCst);
            if next == 0 {
                arr.cells[hole].store(0, SeqCst);
                break;
            }
            let home = arr.home(cell_key(next));
            // `next` may move into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                arr.cells[hole].store(next, SeqCst);
                hole = j;
            }
        }
        self.mods.fetch_add(1, SeqCst);
        let slot_no = cell_slot(c);
        let slot = self.slot(slot_no);
        let p = slot.ptr.swap(std::ptr::null_mut(), SeqCst);
        let mut round = 0;
        // An RMW read (see `read_slot`): either a reader's increment is visible here and we wait
        // for it to leave, or that reader's later pointer read sees the null stored above.
        while slot.readers.fetch_add(0, SeqCst) != 0 {
            spin_wait(&mut round);
        }
        #[cfg(loom)]
        slot.retired.store(p, SeqCst);
        w.free_slots.push(slot_no);
        w.len -= 1;
        // SAFETY: `p` was stored by `insert` from `Arc::into_raw`; the slot no longer holds it
        // and no reader is inside the slot, so the map's strong count is ours to hand back.
        Some(unsafe { Arc::from_raw(p) })
    }

    /// Bytes held by the index and the slab (for memory comparisons in benchmarks).
    pub fn memory_bytes(&self) -> usize {
        let retired = lock(&self.retired);
        // SAFETY: index arrays are freed only when the map is dropped.
        let arr = unsafe { &*self.index.load(SeqCst) };
        let mut bytes = arr.cells.len() * 8;
        for &old in retired.iter() {
            // SAFETY: retired arrays live until drop.
            bytes += unsafe { &*old }.cells.len() * 8;
        }
        let slot_chunks = (0..CHUNKS).take_while(|&k| !self.chunks[k].load(SeqCst).is_null());
        bytes
            + slot_chunks
                .map(|k| chunk_len(k) * std::mem::size_of::<Slot<T>>())
                .sum::<usize>()
    }
}

impl<T> Drop for IdMap<T> {
    fn drop(&mut self) {
        let retired = self.retired.get_mut().unwrap_or_else(|e| e.into_inner());
        for &old in retired.iter() {
            // SAFETY: retired arrays came from `Box::into_raw` and no reader can exist now.
            drop(unsafe { Box::from_raw(old) });
        }
        // SAFETY: as above, for the current array.
        drop(unsafe { Box::from_raw(self.index.load(SeqCst)) });
        for k in 0..CHUNKS {
            let chunk = self.chunks[k].load(SeqCst);
            if chunk.is_null() {
                break;
            }
            let len = chunk_len(k);
            // SAFETY: the chunk came from a boxed slice of exactly `len` slots.
            let chunk = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(chunk, len)) };
            for slot in chunk.iter() {
                let p = slot.ptr.load(SeqCst);
                if !p.is_null() {
                    // SAFETY: a set pointer is the map's own strong count from `Arc::into_raw`.
                    drop(unsafe { Arc::from_raw(p) });
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
