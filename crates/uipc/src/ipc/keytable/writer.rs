//! The daemon's side of the key table: its memory, which entry holds which key, and the
//! changes the registry makes under its writer lock (`KeyRegion::put`, `KeyRegion::remove`).
//!
//! Which entry holds a key is kept here, in the daemon's memory (`Book`), never read back from
//! the shared words, which clients can write. A region's book has a mutex only so that the
//! table can be shared; it is taken under the registry's writer lock, so never contended (lock
//! order: registry, then a book). Dropping the table marks it dead (`LIVE = 0`).

use super::{
    window_start, write_entry, Entry, Kind, ENTRY_WORDS, HEADER_WORDS, LIVE, REGIONS, SEMMSL,
    USERNS, WINDOW,
};
use crate::ipc::perm::IpcPerm;
use crate::ipc::shared_words::SharedWords;
use crate::sync::{lock, AtomicU64, Mutex, Ordering::Release};
use crate::{IpcId, IpcKey};
use std::collections::HashMap;
use std::sync::Arc;

/// Which entry of a region holds which key (the daemon's own record).
#[derive(Default)]
struct Book {
    /// key -> entry index.
    at: HashMap<IpcKey, usize>,
    /// Entries in use, one bit each.
    used: Vec<u64>,
}

/// A namespace's key table (see the module doc).
pub struct KeyTable {
    mem: SharedWords,
    entries: usize,
    books: [Mutex<Book>; REGIONS],
}

impl KeyTable {
    fn with_mem(mem: SharedWords, entries: usize) -> KeyTable {
        let book = || {
            Mutex::new(Book {
                at: HashMap::new(),
                used: vec![0; entries.div_ceil(64)],
            })
        };
        let t = KeyTable {
            mem,
            entries,
            books: [book(), book(), book()],
        };
        t.words()[LIVE].store(1, Release);
        t
    }

    /// A table in the process's own memory with `entries` entries per region (a power of two
    /// of at least [`WINDOW`]; tests and models).
    pub fn owned(entries: usize) -> KeyTable {
        assert!(entries.is_power_of_two() && entries >= WINDOW);
        KeyTable::with_mem(SharedWords::owned(super::words_for(entries)), entries)
    }

    /// A table of [`super::ENTRIES`] entries per region over [`super::TABLE_BYTES`] zeroed
    /// bytes at `ptr`, kept mapped as long as `keep` lives.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned, valid for reads and writes of [`super::TABLE_BYTES`] bytes
    /// for as long as `keep` lives, and used by others (clients) only as atomics.
    #[cfg(not(loom))]
    pub unsafe fn from_raw(ptr: *mut u8, keep: Box<dyn std::any::Any + Send + Sync>) -> KeyTable {
        // SAFETY: this function's contract, for TABLE_WORDS words.
        let mem = unsafe { SharedWords::mapped(ptr, super::TABLE_WORDS, keep) };
        KeyTable::with_mem(mem, super::ENTRIES)
    }

    /// The table's words.
    pub fn words(&self) -> &[AtomicU64] {
        self.mem.words()
    }

    /// A reader's view of this table (tests; clients map the memory themselves).
    pub fn view(&self) -> super::TableView<'_> {
        super::TableView::new(self.words())
    }

    /// Publishes the namespace's semmsl (after each write of `kernel/sem`).
    pub(crate) fn set_semmsl(&self, semmsl: i32) {
        self.words()[SEMMSL].store(u64::from(semmsl as u32), Release);
    }

    /// Publishes the daemon's user namespace (the inode of `/proc/self/ns/user`): only
    /// callers in it are answered from the table.
    pub fn set_user_ns(&self, ino: u64) {
        self.words()[USERNS].store(ino, Release);
    }

    fn entry(&self, kind: Kind, i: usize) -> &[AtomicU64] {
        let at = HEADER_WORDS + ((kind as usize) * self.entries + i) * ENTRY_WORDS;
        &self.words()[at..at + ENTRY_WORDS]
    }
}

impl Drop for KeyTable {
    fn drop(&mut self) {
        // Teardown: readers that still map the memory ask the daemon from now on.
        self.words()[LIVE].store(0, Release);
    }
}

/// One region of a table: what a registry publishes its keys through.
#[derive(Clone)]
pub struct KeyRegion {
    table: Arc<KeyTable>,
    kind: Kind,
}

impl KeyRegion {
    /// `kind`'s region of `table`.
    pub fn new(table: Arc<KeyTable>, kind: Kind) -> KeyRegion {
        KeyRegion { table, kind }
    }

    /// Publishes `key` as object `id` with `perm` and `info` (nsems, size or 0): rewrites the
    /// key's entry if it has one, else takes the first free entry of its window; with none
    /// free the key is not published (its opens go to the daemon). Caller: the registry's
    /// writer lock held.
    pub(crate) fn put(&self, key: IpcKey, id: IpcId, perm: &IpcPerm, info: u64) {
        if key.is_private() {
            return;
        }
        let t = &*self.table;
        let mut book = lock(&t.books[self.kind as usize]);
        let i = match book.at.get(&key) {
            Some(&i) => i,
            None => {
                let start = window_start(key.get(), t.entries);
                let free = (0..WINDOW)
                    .map(|k| (start + k) & (t.entries - 1))
                    .find(|&i| book.used[i / 64] & (1 << (i % 64)) == 0);
                let Some(i) = free else { return };
                book.used[i / 64] |= 1 << (i % 64);
                book.at.insert(key, i);
                i
            }
        };
        let v = Entry {
            key: key.get(),
            id: id.get(),
            mode: perm.mode & 0o777,
            uid: perm.uid,
            gid: perm.gid,
            cuid: perm.cuid,
            cgid: perm.cgid,
            info,
        };
        write_entry(t.entry(self.kind, i), Some(&v));
    }

    /// Unpublishes `key` (IPC_RMID, or a segment's key made private). Caller: the registry's
    /// writer lock held.
    pub(crate) fn remove(&self, key: IpcKey) {
        let t = &*self.table;
        let mut book = lock(&t.books[self.kind as usize]);
        if let Some(i) = book.at.remove(&key) {
            book.used[i / 64] &= !(1 << (i % 64));
            write_entry(t.entry(self.kind, i), None);
        }
    }
}
