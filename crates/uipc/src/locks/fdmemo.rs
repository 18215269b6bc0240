//! What a process remembers about its own descriptors between lock calls, so that a call
//! through a descriptor it used before asks the kernel nothing: a table of [`ENTRIES`]
//! entries, a descriptor's at its number modulo the size, each holding `W` words the caller
//! chose (the library's: a flock lease proof, `flockfast::proofs`; a descriptor's file and
//! access mode for the lease path). The caller keeps in those words what tells it whether they
//! still hold (the count of close-family calls it read before learning them, say).
//!
//! Each entry is a sequence lock over its words, so that neither another thread nor a signal
//! handler that interrupted the caller reads half of one memo and half of another: a writer
//! turns the sequence odd with a CAS (and gives up, remembering nothing, if it is odd already:
//! another writer is at it, maybe the very code the handler interrupted), stores the words,
//! and makes it even again; a reader takes the words only if the sequence was even before and
//! unchanged after. No lock is taken and nothing waits, so a lock call stays
//! async-signal-safe. (The `seqlock` crate's writer takes a mutex: a handler interrupting a
//! writer would deadlock, which is why this one is written here.)
//!
//! Cost: BENCHMARKS.md, "Remembered descriptors" (`bench shim`'s lock pairs and lockperf's
//! posix01 and flock01 through the daemon, with and without the table).

use crate::sync::{fence, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Entries of an [`FdMemo`].
pub const ENTRIES: usize = 64;

struct Entry<const W: usize> {
    seq: AtomicU64,
    /// The descriptor number plus one; 0: empty.
    key: AtomicU64,
    words: [AtomicU64; W],
}

impl<const W: usize> Entry<W> {
    #[cfg(not(loom))]
    #[allow(clippy::declare_interior_mutable_const)] // copied into the array, never used alone
    const EMPTY: Entry<W> = Entry {
        seq: AtomicU64::new(0),
        key: AtomicU64::new(0),
        words: [const { AtomicU64::new(0) }; W],
    };

    #[cfg(loom)]
    fn empty() -> Entry<W> {
        Entry {
            seq: AtomicU64::new(0),
            key: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A process's memos of its descriptors, `W` words each (see the module doc).
pub struct FdMemo<const W: usize> {
    entries: [Entry<W>; ENTRIES],
}

impl<const W: usize> Default for FdMemo<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize> FdMemo<W> {
    /// An empty table (a `static`'s initialiser).
    #[cfg(not(loom))]
    pub const fn new() -> FdMemo<W> {
        FdMemo {
            entries: [Entry::EMPTY; ENTRIES],
        }
    }

    /// An empty table.
    #[cfg(loom)]
    pub fn new() -> FdMemo<W> {
        FdMemo {
            entries: std::array::from_fn(|_| Entry::empty()),
        }
    }

    fn entry(&self, fd: i32) -> &Entry<W> {
        &self.entries[fd as u32 as usize % ENTRIES]
    }

    /// The words last remembered for descriptor `fd`, read whole, if there are some.
    pub fn get(&self, fd: i32) -> Option<[u64; W]> {
        if fd < 0 {
            return None;
        }
        let e = self.entry(fd);
        let before = e.seq.load(Acquire);
        if before & 1 == 1 {
            return None;
        }
        let key = e.key.load(Relaxed);
        let words = std::array::from_fn(|i| e.words[i].load(Relaxed));
        fence(Acquire);
        (e.seq.load(Relaxed) == before && key == fd as u64 + 1).then_some(words)
    }

    /// Remembers `words` for descriptor `fd`, unless another writer holds the entry now.
    pub fn remember(&self, fd: i32, words: [u64; W]) {
        if fd < 0 {
            return;
        }
        let e = self.entry(fd);
        let s = e.seq.load(Relaxed);
        // Acquire: the previous writer's words come before ours (its closing Release store
        // is what this reads), so no word of its memo lands after one of ours.
        if s & 1 == 1 || e.seq.compare_exchange(s, s + 1, Acquire, Relaxed).is_err() {
            return;
        }
        fence(Release);
        e.key.store(fd as u64 + 1, Relaxed);
        for (w, v) in e.words.iter().zip(words) {
            w.store(v, Relaxed);
        }
        e.seq.store(s + 2, Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_memo_is_read_back_only_for_its_own_descriptor() {
        let t = FdMemo::<2>::new();
        assert_eq!(t.get(3), None);
        t.remember(3, [7, 8]);
        assert_eq!(t.get(3), Some([7, 8]));
        // Descriptor 67 shares the entry, but the memo is descriptor 3's.
        let other = 3 + ENTRIES as i32;
        assert_eq!(t.get(other), None);
        t.remember(other, [9, 10]);
        assert_eq!(t.get(3), None);
        assert_eq!(t.get(other), Some([9, 10]));
        t.remember(-1, [1, 1]);
        assert_eq!(t.get(-1), None);
    }

    #[test]
    fn an_entry_being_written_reads_as_empty_and_takes_no_second_writer() {
        let t = FdMemo::<1>::new();
        t.remember(5, [1]);
        // A writer interrupted halfway (what a signal handler would find).
        t.entry(5).seq.fetch_add(1, Relaxed);
        assert_eq!(t.get(5), None);
        t.remember(5, [2]);
        t.entry(5).seq.fetch_add(1, Relaxed);
        assert_eq!(t.get(5), Some([1]));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::model;
    use std::sync::Arc;

    #[test]
    fn a_memo_is_read_whole_or_not_at_all() {
        model(|| {
            let t = Arc::new(FdMemo::<3>::new());
            let writers: Vec<_> = [1, 2]
                .into_iter()
                .map(|n| {
                    let t = t.clone();
                    loom::thread::spawn(move || t.remember(3, [n; 3]))
                })
                .collect();
            let seen = t.get(3);
            assert!(
                matches!(seen, None | Some([1, 1, 1]) | Some([2, 2, 2])),
                "{seen:?}"
            );
            for w in writers {
                w.join().unwrap();
            }
            // One of the two writers always gets the entry.
            let last = t.get(3);
            assert!(
                matches!(last, Some([1, 1, 1]) | Some([2, 2, 2])),
                "{last:?}"
            );
        });
    }
}
