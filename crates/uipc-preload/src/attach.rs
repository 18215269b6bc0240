//! This process's shared-memory attachments (start address -> mapped length), as shmat,
//! shmdt and fork need them, usable from a signal handler.
//!
//! The entries are a sorted array (binary search by start) in an anonymous mapping that grows
//! by doubling (a new mapping, a copy, the old one unmapped), so no call here allocates with
//! `malloc`. One mutex guards the table; [`attached`] takes it only after blocking every
//! signal on the thread ([`SignalsBlocked`]), and the guard releases it before unblocking, so a
//! signal handler never runs on a thread that holds it (a handler's own shmat or shmdt would
//! deadlock there); other threads wait for it as for any mutex.
//!
//! Lock order: the table's mutex is a leaf except that shmat holds it across its round trips
//! to the daemon, shmdt across its one, and fork across the fork (see `shm` and `fork`); none
//! takes it again inside.
//!
//! The number of entries is also kept in an atomic, written as each guard is released, so
//! that munmap ([`maybe_attached`]) skips the lock in a process without attachments.
//!
//! The table also keeps the mapped length of the last few segments attached, which lets
//! shmat pick the address before it asks the daemon (see `shm`).
//!
//! A forked child gets a copy of the mapping, so its table is its parent's (fork holds the
//! lock across the fork so that the copy is not half-changed).

use crate::mapbuf;
use crate::sigmask::SignalsBlocked;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use uipc::Errno;

/// One attachment: where it starts and how long the mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    start: usize,
    len: usize,
}

/// The sorted entries, in a mapping of `cap` entries (none mapped while `cap` is 0), and the
/// mapped lengths of the segments attached last ([`Attachments::known_len`]).
pub struct Attachments {
    entries: *mut Entry,
    len: usize,
    cap: usize,
    lengths: [(i32, usize); KNOWN_LENGTHS],
    next_length: usize,
}

/// How many segments' lengths [`Attachments::remember_len`] keeps.
const KNOWN_LENGTHS: usize = 8;

// SAFETY: the mapping belongs to the table alone and is touched only through `&mut self` (under
// the mutex), so moving the table between threads moves sole ownership of it.
unsafe impl Send for Attachments {}

/// Entries in the first mapping (one page).
const FIRST_CAP: usize = 4096 / std::mem::size_of::<Entry>();

impl Attachments {
    /// An empty table with nothing mapped.
    pub const fn new() -> Attachments {
        Attachments {
            entries: std::ptr::null_mut(),
            len: 0,
            cap: 0,
            lengths: [(-1, 0); KNOWN_LENGTHS],
            next_length: 0,
        }
    }

    /// The mapped length of segment `shmid` when this process last attached it, if still
    /// kept: a hint only (the id may name another segment since, in another namespace too).
    pub fn known_len(&self, shmid: i32) -> Option<usize> {
        self.lengths
            .iter()
            .find(|&&(id, _)| id == shmid && shmid >= 0)
            .map(|&(_, len)| len)
    }

    /// Keeps `len` as segment `shmid`'s mapped length, replacing its old entry or the oldest.
    pub fn remember_len(&mut self, shmid: i32, len: usize) {
        if let Some(e) = self.lengths.iter_mut().find(|e| e.0 == shmid) {
            e.1 = len;
            return;
        }
        self.lengths[self.next_length] = (shmid, len);
        self.next_length = (self.next_length + 1) % KNOWN_LENGTHS;
    }

    fn slice(&self) -> &[Entry] {
        if self.cap == 0 {
            return &[];
        }
        // SAFETY: `entries` maps `cap` entries, the first `len` of them written.
        unsafe { std::slice::from_raw_parts(self.entries, self.len) }
    }

    /// Where `start` is, or would go.
    fn search(&self, start: usize) -> Result<usize, usize> {
        self.slice().binary_search_by_key(&start, |e| e.start)
    }

    /// Whether the process has no attachments.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The length of the attachment starting at `start`.
    pub fn get(&self, start: usize) -> Option<usize> {
        let i = self.search(start).ok()?;
        Some(self.slice()[i].len)
    }

    /// The attachment whose range holds `addr`, as (start, length).
    pub fn containing(&self, addr: usize) -> Option<(usize, usize)> {
        let i = match self.search(addr) {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        let e = self.slice()[i];
        (addr - e.start < e.len).then_some((e.start, e.len))
    }

    /// Changes the length of the attachment starting at `start` (a mapping resized in place).
    pub fn resize(&mut self, start: usize, len: usize) {
        if let Ok(i) = self.search(start) {
            // SAFETY: `i < self.len`: rewrites a written entry.
            unsafe { (*self.entries.add(i)).len = len };
        }
    }

    /// Forgets the attachment starting at `start`; returns its length.
    pub fn remove(&mut self, start: usize) -> Option<usize> {
        let i = self.search(start).ok()?;
        let len = self.slice()[i].len;
        // SAFETY: `i < self.len <= cap`: shifts the entries after `i` down by one, within the
        // mapping.
        unsafe {
            std::ptr::copy(
                self.entries.add(i + 1),
                self.entries.add(i),
                self.len - i - 1,
            )
        };
        self.len -= 1;
        Some(len)
    }

    /// The index of the first entry that may overlap `[start, ...)`. Entries never overlap
    /// each other, so those that overlap a range are consecutive: from the last one starting
    /// before `start` (if it reaches past it) to the last one starting before the range's end.
    fn first_from(&self, start: usize) -> usize {
        let mut i = match self.search(start) {
            Ok(i) => i,
            Err(i) => i,
        };
        if i > 0 {
            let before = self.slice()[i - 1];
            if before.start.saturating_add(before.len) > start {
                i -= 1;
            }
        }
        i
    }

    /// The start of the first attachment that overlaps `[start, end)`.
    pub fn first_overlapping(&self, start: usize, end: usize) -> Option<usize> {
        let e = *self.slice().get(self.first_from(start))?;
        (e.start < end).then_some(e.start)
    }

    /// Forgets every attachment that overlaps `[start, end)` (a new mapping replaced them).
    pub fn remove_overlapping(&mut self, start: usize, end: usize) {
        let i = self.first_from(start);
        while i < self.len && self.slice()[i].start < end {
            let e = self.slice()[i];
            self.remove(e.start);
        }
    }

    /// Makes room for one more entry, so that the next [`Attachments::insert_reserved`]
    /// cannot fail.
    pub fn reserve(&mut self) -> Result<(), Errno> {
        if self.len == self.cap {
            self.grow()?;
        }
        Ok(())
    }

    /// Records an attachment at `start` of `len` bytes (the caller removed any overlap).
    #[cfg(test)]
    fn insert(&mut self, start: usize, len: usize) -> Result<(), Errno> {
        self.reserve()?;
        self.insert_reserved(start, len);
        Ok(())
    }

    /// Records an attachment at `start` of `len` bytes (the caller removed any overlap and
    /// made room with [`Attachments::reserve`]; without room the entry is not recorded).
    pub fn insert_reserved(&mut self, start: usize, len: usize) {
        let i = match self.search(start) {
            Ok(i) => {
                // SAFETY: `i < self.len`: replaces a written entry.
                unsafe { *self.entries.add(i) = Entry { start, len } };
                return;
            }
            Err(i) => i,
        };
        if self.len == self.cap {
            return;
        }
        // SAFETY: `len < cap`: shifts entries `i..len` up by one within the mapping and
        // writes the new one at `i`.
        unsafe {
            std::ptr::copy(self.entries.add(i), self.entries.add(i + 1), self.len - i);
            *self.entries.add(i) = Entry { start, len };
        }
        self.len += 1;
    }

    fn grow(&mut self) -> Result<(), Errno> {
        let cap = if self.cap == 0 {
            FIRST_CAP
        } else {
            self.cap.checked_mul(2).ok_or(Errno::ENOMEM)?
        };
        let bytes = cap
            .checked_mul(std::mem::size_of::<Entry>())
            .ok_or(Errno::ENOMEM)?;
        let entries = mapbuf::map(bytes)?.cast::<Entry>();
        if self.cap != 0 {
            // SAFETY: copies the `len` written entries into the new, larger mapping, then
            // unmaps the old one, which nothing refers to any more.
            unsafe {
                std::ptr::copy_nonoverlapping(self.entries, entries, self.len);
                mapbuf::unmap(self.entries.cast(), self.cap * std::mem::size_of::<Entry>());
            }
        }
        self.entries = entries;
        self.cap = cap;
        Ok(())
    }
}

impl Default for Attachments {
    fn default() -> Self {
        Attachments::new()
    }
}

static TABLE: Mutex<Attachments> = Mutex::new(Attachments::new());

/// The table's number of entries as its last guard left it, read without the lock by
/// [`maybe_attached`].
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether the process may have attachments: false only if the table was empty when last
/// released (munmap's test before it takes the table, see `unmap`).
pub fn maybe_attached() -> bool {
    COUNT.load(Ordering::Acquire) != 0
}

/// The attachment table, locked, with every signal blocked on this thread until the guard
/// is dropped.
pub struct AttachGuard {
    // Dropped in this order: the lock is released before signals are unblocked.
    table: MutexGuard<'static, Attachments>,
    _signals: SignalsBlocked,
}

impl std::ops::Deref for AttachGuard {
    type Target = Attachments;
    fn deref(&self) -> &Attachments {
        &self.table
    }
}

impl Drop for AttachGuard {
    fn drop(&mut self) {
        // Before the fields: the lock is still held.
        COUNT.store(self.table.len, Ordering::Release);
    }
}

impl std::ops::DerefMut for AttachGuard {
    fn deref_mut(&mut self) -> &mut Attachments {
        &mut self.table
    }
}

/// Whether an exec by this process drops attachments: false on a vforked child's borrowed
/// memory (the attachments are its parent's), true while another thread holds the table (no
/// waiting: exec may run in a vforked child or a signal handler).
pub fn any_to_drop_at_exec() -> bool {
    if crate::vfork::on_borrowed_memory() {
        return false;
    }
    match TABLE.try_lock() {
        Ok(t) => !t.is_empty(),
        Err(std::sync::TryLockError::Poisoned(e)) => !e.into_inner().is_empty(),
        Err(std::sync::TryLockError::WouldBlock) => true,
    }
}

/// Blocks signals, then locks the table (poisoning is ignored: every change leaves it
/// consistent).
pub fn attached() -> AttachGuard {
    let signals = SignalsBlocked::new();
    AttachGuard {
        table: TABLE.lock().unwrap_or_else(|e| e.into_inner()),
        _signals: signals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(t: &Attachments) -> Vec<(usize, usize)> {
        t.slice().iter().map(|e| (e.start, e.len)).collect()
    }

    #[test]
    fn entries_stay_sorted_and_are_found_by_start() {
        let mut t = Attachments::new();
        for s in [5000usize, 1000, 3000] {
            t.insert(s, 100).unwrap();
        }
        assert_eq!(starts(&t), [(1000, 100), (3000, 100), (5000, 100)]);
        assert_eq!(t.get(3000), Some(100));
        assert_eq!(t.get(3001), None);
        assert_eq!(t.containing(3099), Some((3000, 100)));
        assert_eq!(t.containing(3100), None);
        assert_eq!(t.containing(999), None);
        t.resize(3000, 200);
        assert_eq!(t.containing(3100), Some((3000, 200)));
        t.resize(3000, 100);
        assert_eq!(t.remove(3000), Some(100));
        assert_eq!(t.remove(3000), None);
        assert_eq!(starts(&t), [(1000, 100), (5000, 100)]);
    }

    #[test]
    fn growing_past_the_first_page_keeps_every_entry() {
        let mut t = Attachments::new();
        let n = FIRST_CAP * 5 + 3;
        for k in (0..n).rev() {
            t.insert(k * 0x1000, 0x1000).unwrap();
        }
        assert_eq!(t.len, n);
        assert!(t.cap >= n);
        assert!((0..n).all(|k| t.get(k * 0x1000) == Some(0x1000)));
    }

    #[test]
    fn a_mapping_over_attachments_removes_exactly_the_ones_it_overlaps() {
        let mut t = Attachments::new();
        for s in [0x1000usize, 0x3000, 0x5000, 0x8000] {
            t.insert(s, 0x2000).unwrap();
        }
        // [0x3000, 0x6000) touches the end of the first (0x3000 is past it), overlaps the
        // second and third, and stops short of the fourth.
        assert_eq!(t.first_overlapping(0x3000, 0x6000), Some(0x3000));
        assert_eq!(t.first_overlapping(0x2fff, 0x3000), Some(0x1000));
        assert_eq!(t.first_overlapping(0x7000, 0x8000), None);
        t.remove_overlapping(0x3000, 0x6000);
        assert_eq!(starts(&t), [(0x1000, 0x2000), (0x8000, 0x2000)]);
        // A range starting inside an attachment removes it.
        t.remove_overlapping(0x2fff, 0x3000);
        assert_eq!(starts(&t), [(0x8000, 0x2000)]);
        t.remove_overlapping(0, 0x8000);
        assert_eq!(starts(&t), [(0x8000, 0x2000)]);
    }

    #[test]
    fn segment_lengths_are_kept_for_the_last_segments_attached() {
        let mut t = Attachments::new();
        assert_eq!(t.known_len(-1), None);
        assert_eq!(t.known_len(0), None);
        t.remember_len(0, 4096);
        t.remember_len(0, 8192);
        assert_eq!(t.known_len(0), Some(8192));
        for id in 1..KNOWN_LENGTHS as i32 {
            t.remember_len(id, 4096);
        }
        assert_eq!(t.known_len(0), Some(8192));
        t.remember_len(100, 4096);
        assert_eq!(t.known_len(0), None);
        assert_eq!(t.known_len(100), Some(4096));
        assert_eq!(t.known_len(1), Some(4096));
    }

    #[test]
    fn the_guard_blocks_signals_while_it_holds_the_lock() {
        let g = attached();
        let mut now = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: reads the current mask.
        let alrm_blocked = unsafe {
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), now.as_mut_ptr());
            libc::sigismember(now.as_ptr(), libc::SIGALRM) == 1
        };
        drop(g);
        assert!(alrm_blocked);
    }
}
