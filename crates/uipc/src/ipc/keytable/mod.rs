//! The key table: what opening an existing key checks, published by the daemon in memory its
//! clients map, so that semget, msgget and shmget of an existing key complete in the caller's
//! process.
//!
//! ARCHITECTURE.md ("The key table") has the design, the memory-ordering argument and the
//! trust argument. This module is the layout, the seqlock's two sides for one entry
//! (`write_entry`, `read_entry`), the reader's lookup ([`TableView`]) and the decision in
//! Linux's order ([`decide`]); [`writer`] is the daemon's side (which entry holds which key).
//!
//! Layout ([`TABLE_WORDS`] `AtomicU64`s): [`HEADER_WORDS`] header words (`LIVE`, `SEMMSL`), then
//! [`REGIONS`] regions (one per [`Kind`]) of entries of [`ENTRY_WORDS`] words: `SEQ`, `KEY_ID`,
//! `MODE`, `UID_GID`, `CUID_CGID`, `INFO`. A key's entry is one of the [`WINDOW`] entries from
//! its hash on.
//!
//! Invariants: only the daemon writes, one writer per region at a time (the registry's writer
//! lock); an entry's fields change only while its `SEQ` is odd. Nothing read here is trusted
//! beyond the answer it gives (clients can write the memory): indices are always bounded.

pub mod writer;

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, not(loom)))]
mod tests;

use super::consts::{IPC_CREAT, IPC_EXCL};
use super::sem::fast::Fast;
use crate::errno::Errno;
use crate::sync::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Header words.
pub const HEADER_WORDS: usize = 8;
/// Words of one entry (one cache line).
pub const ENTRY_WORDS: usize = 8;
/// Entries of one region in the daemon's table.
pub const ENTRIES: usize = 65536;
/// How many entries from its hash on a key may live in.
pub const WINDOW: usize = 8;
/// Regions: semaphores, queues, segments.
pub const REGIONS: usize = 3;
/// Words of a whole table of [`ENTRIES`] entries per region.
pub const TABLE_WORDS: usize = words_for(ENTRIES);
/// Bytes of a whole table.
pub const TABLE_BYTES: usize = TABLE_WORDS * 8;
/// Where the table starts in the fast path's memfd: right after the semaphore arena.
pub const OFFSET: usize = super::sem::fast::ARENA_BYTES;
/// Where the key table ends: the message queue region follows (`msg::fast::OFFSET`, whose
/// `MAPPING_BYTES` is the whole memfd).
pub const END: usize = OFFSET + TABLE_BYTES;

/// Header: 1 while the namespace lives.
pub(crate) const LIVE: usize = 0;
/// Header: the namespace's semmsl (an i32's bits).
pub(crate) const SEMMSL: usize = 1;
/// Header: the daemon's user namespace (its inode; 0: unknown, no caller is served).
pub(crate) const USERNS: usize = 2;
/// Entry: even when stable, odd while the daemon writes the entry.
pub(crate) const SEQ: usize = 0;
/// Entry: key (bits 0-31, 0 for an empty entry), id (bits 32-63).
pub(crate) const KEY_ID: usize = 1;
/// Entry: the low 9 mode bits.
pub(crate) const MODE: usize = 2;
/// Entry: uid (bits 0-31), gid (bits 32-63).
pub(crate) const UID_GID: usize = 3;
/// Entry: cuid, cgid.
pub(crate) const CUID_CGID: usize = 4;
/// Entry: nsems (semaphores), size (segments), 0 (queues).
pub(crate) const INFO: usize = 5;

/// The words of a table of `entries` entries per region.
pub const fn words_for(entries: usize) -> usize {
    HEADER_WORDS + REGIONS * entries * ENTRY_WORDS
}

/// The object type a region holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Semaphore sets.
    Sem = 0,
    /// Message queues.
    Msg = 1,
    /// Shared memory segments.
    Shm = 2,
}

/// What one entry says: what opening its key checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key (never IPC_PRIVATE).
    pub key: i32,
    /// The object's id.
    pub id: i32,
    /// The low 9 mode bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Owner's group.
    pub gid: u32,
    /// Creator.
    pub cuid: u32,
    /// Creator's group.
    pub cgid: u32,
    /// nsems, the segment size, or 0.
    pub info: u64,
}

const fn pair(lo: u32, hi: u32) -> u64 {
    lo as u64 | (hi as u64) << 32
}

/// The first entry of `key`'s window in a region of `entries` entries (a power of two).
pub(crate) fn window_start(key: i32, entries: usize) -> usize {
    (key as u32).wrapping_mul(0x9e37_79b1) as usize & (entries - 1)
}

/// Writes the fields of `v` (`None`: an empty entry) with Release stores. Only between the
/// two `SEQ` stores of [`write_entry`]; the loom model calls it alone as a broken writer.
pub(crate) fn store_fields(e: &[AtomicU64], v: Option<&Entry>) {
    let Some(v) = v else {
        e[KEY_ID].store(0, Release);
        return;
    };
    e[MODE].store(u64::from(v.mode), Release);
    e[UID_GID].store(pair(v.uid, v.gid), Release);
    e[CUID_CGID].store(pair(v.cuid, v.cgid), Release);
    e[INFO].store(v.info, Release);
    e[KEY_ID].store(pair(v.key as u32, v.id as u32), Release);
}

/// The writer's side of the seqlock: `SEQ` odd, the fields, `SEQ` even again. The caller is
/// the only writer of the entry (the registry's writer lock).
pub(crate) fn write_entry(e: &[AtomicU64], v: Option<&Entry>) {
    // Odd whatever a client may have left there.
    let odd = e[SEQ].load(Relaxed) | 1;
    e[SEQ].store(odd, Relaxed);
    // Each field store is Release: a reader that sees any of them sees the odd SEQ too.
    store_fields(e, v);
    e[SEQ].store(odd.wrapping_add(1), Release);
}

/// The reader's side: the entry if a consistent, non-empty version was read.
pub(crate) fn read_entry(e: &[AtomicU64]) -> Option<Entry> {
    let s1 = e[SEQ].load(Acquire);
    if s1 & 1 != 0 {
        return None;
    }
    // Acquire loads: the SEQ load below cannot move before them.
    let key_id = e[KEY_ID].load(Acquire);
    let mode = e[MODE].load(Acquire);
    let ids = e[UID_GID].load(Acquire);
    let cids = e[CUID_CGID].load(Acquire);
    let info = e[INFO].load(Acquire);
    if e[SEQ].load(Relaxed) != s1 || key_id as u32 == 0 {
        return None;
    }
    Some(Entry {
        key: key_id as u32 as i32,
        id: (key_id >> 32) as u32 as i32,
        mode: mode as u32 & 0o777,
        uid: ids as u32,
        gid: (ids >> 32) as u32,
        cuid: cids as u32,
        cgid: (cids >> 32) as u32,
        info,
    })
}

/// A reader's view of a table (a client's mapping, or the daemon's own for tests).
pub struct TableView<'a> {
    words: &'a [AtomicU64],
    entries: usize,
}

impl<'a> TableView<'a> {
    /// A view of `words`: a table of [`ENTRIES`] entries per region, or a smaller one of a
    /// power-of-two size (tests and models).
    pub fn new(words: &'a [AtomicU64]) -> TableView<'a> {
        let n = words.len().saturating_sub(HEADER_WORDS) / (REGIONS * ENTRY_WORDS);
        // The largest power of two that fits, so a short slice is never read past its end.
        let entries = if n == 0 { 0 } else { 1 << n.ilog2() };
        TableView { words, entries }
    }

    /// Whether the namespace behind the table lives.
    pub fn live(&self) -> bool {
        self.words.get(LIVE).is_some_and(|w| w.load(Acquire) == 1)
    }

    /// The daemon's user namespace as its embedder published it (0: unknown).
    pub fn user_ns(&self) -> u64 {
        self.words.get(USERNS).map_or(0, |w| w.load(Acquire))
    }

    /// The namespace's semmsl as last published.
    pub fn semmsl(&self) -> i32 {
        self.words
            .get(SEMMSL)
            .map_or(0, |w| w.load(Acquire) as u32 as i32)
    }

    fn entry(&self, kind: Kind, i: usize) -> Option<&'a [AtomicU64]> {
        let at = HEADER_WORDS + ((kind as usize) * self.entries + i) * ENTRY_WORDS;
        self.words.get(at..at + ENTRY_WORDS)
    }

    /// `key`'s entry in `kind`'s region, read consistently (an inconsistent read is tried
    /// once more); `None` if the table does not have it now or could not be read.
    pub fn lookup(&self, kind: Kind, key: i32) -> Option<Entry> {
        if self.entries < WINDOW || key == 0 || !self.live() {
            return None;
        }
        let start = window_start(key, self.entries);
        for i in 0..WINDOW {
            let e = self.entry(kind, (start + i) & (self.entries - 1))?;
            if e[KEY_ID].load(Relaxed) as u32 != key as u32 {
                continue;
            }
            for _ in 0..2 {
                if let Some(v) = read_entry(e).filter(|v| v.key == key) {
                    return Some(v);
                }
            }
            return None;
        }
        None
    }
}

/// What the decision needs of the caller, read from the kernel when asked (each at most once
/// per call): `None` where the caller cannot tell, which sends the call to the daemon.
pub trait Who {
    /// The caller's user namespace (its inode), if known: the ids it sees are the daemon's
    /// only in the daemon's user namespace.
    fn user_ns(&self) -> Option<u64>;
    /// The effective uid.
    fn euid(&self) -> u32;
    /// Whether the effective gid or a supplementary group is `a` or `b`.
    fn in_group(&self, a: u32, b: u32) -> Option<bool>;
    /// Whether CAP_IPC_OWNER is in the effective set (whether it counts in the namespace's
    /// user namespace is the daemon's to say).
    fn has_ipc_owner(&self) -> Option<bool>;
}

/// A `*get` call: which type, with its size argument.
#[derive(Clone, Copy, Debug)]
pub enum Get {
    /// semget's nsems.
    Sem(i32),
    /// msgget.
    Msg,
    /// shmget's size.
    Shm(u64),
}

/// `ipcget` for a non-private key, from the table: Linux's order (linux-semantics.md §1.6).
/// `Slow` whenever the daemon must answer.
pub fn decide(view: &TableView<'_>, get: Get, key: i32, flag: i32, who: &dyn Who) -> Fast<i32> {
    if key == 0 || !view.live() {
        return Fast::Slow;
    }
    // In another user namespace the caller's ids are numbered otherwise (the daemon sees
    // them translated by the kernel) and its capabilities do not count: the daemon decides.
    let ns = view.user_ns();
    if ns == 0 || who.user_ns() != Some(ns) {
        return Fast::Slow;
    }
    let kind = match get {
        Get::Sem(nsems) => {
            // Before the lookup, whatever the key.
            if nsems < 0 || nsems > view.semmsl() {
                return Fast::Done(Err(Errno::EINVAL));
            }
            Kind::Sem
        }
        Get::Msg => Kind::Msg,
        Get::Shm(_) => Kind::Shm,
    };
    let Some(e) = view.lookup(kind, key) else {
        return Fast::Slow;
    };
    if flag & IPC_CREAT != 0 && flag & IPC_EXCL != 0 {
        return Fast::Done(Err(Errno::EEXIST));
    }
    let too_big = match get {
        Get::Sem(nsems) => nsems as u64 > e.info,
        Get::Shm(size) => size > e.info,
        Get::Msg => false,
    };
    if too_big {
        return Fast::Done(Err(Errno::EINVAL));
    }
    match ipcperms(&e, flag, who) {
        Some(true) => Fast::Done(Ok(e.id)),
        Some(false) => Fast::Done(Err(Errno::EACCES)),
        None => Fast::Slow,
    }
}

/// Linux's `ipcperms` on an entry: `Some(granted)`, or `None` if the daemon must decide.
fn ipcperms(e: &Entry, flag: i32, who: &dyn Who) -> Option<bool> {
    let requested = ((flag >> 6) | (flag >> 3) | flag) as u32 & 7;
    if requested == 0 {
        return Some(true);
    }
    let grants = |bits: u32| requested & !bits & 7 == 0;
    let euid = who.euid();
    let granted = if euid == e.uid || euid == e.cuid {
        grants(e.mode >> 6)
    } else {
        let (group, other) = (grants(e.mode >> 3), grants(e.mode));
        // The groups are read only when the class matters.
        if group == other || who.in_group(e.gid, e.cgid)? {
            group
        } else {
            other
        }
    };
    if granted {
        return Some(true);
    }
    // A capability that may count is the daemon's to judge; none at all is EACCES.
    match who.has_ipc_owner()? {
        false => Some(false),
        true => None,
    }
}
