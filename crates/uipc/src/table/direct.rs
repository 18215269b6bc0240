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
//! Locks: each slot is its own `RwLock` (from `crate::sync`), held only to clone, put or take
//! the `Arc`: a leaf. A lookup takes its slot's lock for reading and nothing else, so lookups
//! of different objects share no lock (neighbouring slots may share a cache line). Writers
//! (`insert`, `remove`) must be serialized by the caller (the registry's writer lock). A chunk
//! is published once through a `OnceBox` (an atomic pointer: a reader either sees no chunk, an
//! empty index, or the whole chunk) and never replaced or freed before the map.
//!
//! Why by hand: the seed's create loop (31900 `semget` creates in one namespace, pinned to a
//! core at real-time priority) took a fifth more time with a `dashmap` from index to object:
//! 4.3 ms against 3.6-3.8 ms with this table (BENCHMARKS.md, "ipc-keys"). The hash scatters
//! consecutive indices over the shards' tables, which rehash as they grow.
//!
//! Memory: the directory is IPCMNI / [`CHUNK`] pointers (256 bytes by default, 128 KiB with
//! `ipcmni_extend`); a chunk is [`CHUNK`] slots of 24 bytes (24 KiB). 31900 objects at indices
//! 0..31900 fill 32 chunks, 768 KiB. Objects placed far apart by `*_next_id` (a privileged
//! restore) each cost a chunk, at most IPCMNI / [`CHUNK`] of them.

use crate::sync::{read, write, RwLock};
use crate::IpcIdx;
use once_cell::race::OnceBox;
use std::sync::Arc;

/// Slots per chunk (a few under loom, whose models make registries and cannot afford a
/// thousand modelled locks each).
#[cfg(not(loom))]
pub const CHUNK: usize = 1024;
/// Slots per chunk (a few under loom, whose models make registries and cannot afford a
/// thousand modelled locks each).
#[cfg(loom)]
pub const CHUNK: usize = 16;

type Slot<T> = RwLock<Option<Arc<T>>>;
type Chunk<T> = [Slot<T>; CHUNK];

/// Index -> object (see the module doc).
pub struct DirectMap<T> {
    dir: Box<[OnceBox<Chunk<T>>]>,
}

impl<T> DirectMap<T> {
    /// An empty map for indices below `ipcmni`.
    pub fn new(ipcmni: u32) -> DirectMap<T> {
        let chunks = (ipcmni as usize).div_ceil(CHUNK);
        DirectMap {
            dir: (0..chunks).map(|_| OnceBox::new()).collect(),
        }
    }

    /// The slot of `idx`, if its chunk exists.
    fn slot(&self, idx: IpcIdx) -> Option<&Slot<T>> {
        let i = idx.get() as usize;
        Some(&self.dir.get(i / CHUNK)?.get()?[i % CHUNK])
    }

    /// The object at `idx`, if any.
    pub fn get(&self, idx: IpcIdx) -> Option<Arc<T>> {
        read(self.slot(idx)?).clone()
    }

    /// Puts `obj` at `idx` (below the map's IPCMNI), returning what was there. The caller
    /// serializes writers.
    pub fn insert(&self, idx: IpcIdx, obj: Arc<T>) -> Option<Arc<T>> {
        let i = idx.get() as usize;
        let chunk = self.dir[i / CHUNK].get_or_init(|| {
            let slots: Box<[Slot<T>]> = (0..CHUNK).map(|_| RwLock::new(None)).collect();
            slots
                .try_into()
                .unwrap_or_else(|_| unreachable!("CHUNK slots"))
        });
        write(&chunk[i % CHUNK]).replace(obj)
    }

    /// Takes the object at `idx` out. The caller serializes writers, and drops the result
    /// after the slot lock is released (it is, when this returns).
    pub fn remove(&self, idx: IpcIdx) -> Option<Arc<T>> {
        write(self.slot(idx)?).take()
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
}
