//! The proofs a process remembers: which member of which slot each of its descriptors was
//! last proven to be ([`FlockView::prove`]), so that the next flock through the same
//! descriptor makes no `kcmp`.
//!
//! A proof stays good while three things hold, each checked at its use:
//! - the process closed no descriptor since (the caller's close count, read before the
//!   proof's `kcmp`, is unchanged): the descriptor still refers to the description proven;
//! - the slot's lease is still the epoch of the proof ([`FlockView::still`]);
//! - the member's token is still the word the proof compared, named with the caller's pid.
//!   Within an epoch a token never comes back to a word it left (it goes to another pid of
//!   the same description or to `GONE`, and `GONE` stays), and the daemon closes the
//!   descriptor a token numbers only after the token left it; so the same word in the same
//!   epoch is the same description.
//!
//! The table: [`ENTRIES`] entries, a descriptor's at its number modulo the size. Each entry is
//! a sequence lock over four words, so that neither another thread nor a signal handler that
//! interrupted the caller reads half of one proof and half of another: a writer turns the
//! sequence odd with a CAS (and gives up, remembering nothing, if it is odd already: another
//! writer is at it, maybe the very code the handler interrupted), stores the words, and
//! makes it even again; a reader takes the words only if the sequence was even before and
//! unchanged after. No lock is taken and nothing waits, so flock stays async-signal-safe.
//! (The `seqlock` crate's writer takes a mutex: a handler interrupting a writer would
//! deadlock, which is why this one is written here.)
//!
//! Cost: `bench shim`'s flock pair through a lease (a `kcmp` per call without this table)
//! and lockperf's flock01 through the daemon (BENCHMARKS.md, "flock leases: remembered
//! proofs").

use super::{FlockView, TOKEN0};
use crate::sync::{fence, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Entries of a [`Proofs`] table.
pub const ENTRIES: usize = 64;

/// One proof: descriptor `fd` of the process was member `member` of slot `slot`, whose token
/// was `token`, in lease epoch `epoch`, when the process's close count was `closes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The descriptor.
    pub fd: i32,
    /// The slot.
    pub slot: usize,
    /// The member index in the slot.
    pub member: usize,
    /// The member's token word the proof compared.
    pub token: u64,
    /// The lease epoch the proof stood on.
    pub epoch: u64,
    /// The caller's close count, read before the proof.
    pub closes: u64,
}

struct Entry {
    seq: AtomicU64,
    /// `(fd + 1) << 32 | slot << 8 | member`; 0: empty.
    key: AtomicU64,
    token: AtomicU64,
    epoch: AtomicU64,
    closes: AtomicU64,
}

impl Entry {
    #[cfg(not(loom))]
    #[allow(clippy::declare_interior_mutable_const)] // copied into the array, never used alone
    const EMPTY: Entry = Entry {
        seq: AtomicU64::new(0),
        key: AtomicU64::new(0),
        token: AtomicU64::new(0),
        epoch: AtomicU64::new(0),
        closes: AtomicU64::new(0),
    };

    #[cfg(loom)]
    fn empty() -> Entry {
        Entry {
            seq: AtomicU64::new(0),
            key: AtomicU64::new(0),
            token: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            closes: AtomicU64::new(0),
        }
    }
}

/// A process's remembered proofs (see the module doc).
pub struct Proofs {
    entries: [Entry; ENTRIES],
}

fn key_of(fd: i32, slot: usize, member: usize) -> u64 {
    ((fd as u64 + 1) << 32) | ((slot as u64 & 0xff_ffff) << 8) | (member as u64 & 0xff)
}

impl Default for Proofs {
    fn default() -> Self {
        Self::new()
    }
}

impl Proofs {
    /// An empty table (a `static`'s initialiser).
    #[cfg(not(loom))]
    pub const fn new() -> Proofs {
        Proofs {
            entries: [Entry::EMPTY; ENTRIES],
        }
    }

    /// An empty table.
    #[cfg(loom)]
    pub fn new() -> Proofs {
        Proofs {
            entries: std::array::from_fn(|_| Entry::empty()),
        }
    }

    fn entry(&self, fd: i32) -> &Entry {
        &self.entries[fd as u32 as usize % ENTRIES]
    }

    /// The proof last remembered for descriptor `fd`, read whole, if there is one.
    pub fn get(&self, fd: i32) -> Option<Proof> {
        if fd < 0 {
            return None;
        }
        let e = self.entry(fd);
        let before = e.seq.load(Acquire);
        if before & 1 == 1 {
            return None;
        }
        let key = e.key.load(Relaxed);
        let (token, epoch, closes) = (
            e.token.load(Relaxed),
            e.epoch.load(Relaxed),
            e.closes.load(Relaxed),
        );
        fence(Acquire);
        if e.seq.load(Relaxed) != before || key >> 32 != fd as u64 + 1 {
            return None;
        }
        Some(Proof {
            fd,
            slot: (key as u32 >> 8) as usize,
            member: (key & 0xff) as usize,
            token,
            epoch,
            closes,
        })
    }

    /// Remembers `p` for its descriptor, unless another writer holds the entry now.
    pub fn remember(&self, p: Proof) {
        if p.fd < 0 {
            return;
        }
        let e = self.entry(p.fd);
        let s = e.seq.load(Relaxed);
        // Acquire: the previous writer's words come before ours (its closing Release store
        // is what this reads), so no word of its proof lands after one of ours.
        if s & 1 == 1 || e.seq.compare_exchange(s, s + 1, Acquire, Relaxed).is_err() {
            return;
        }
        fence(Release);
        e.key.store(key_of(p.fd, p.slot, p.member), Relaxed);
        e.token.store(p.token, Relaxed);
        e.epoch.store(p.epoch, Relaxed);
        e.closes.store(p.closes, Relaxed);
        e.seq.store(s + 2, Release);
    }
}

impl FlockView<'_> {
    /// Whether proof `p`, made by the caller `pid`, still stands in the slot (its epoch, and
    /// the member's token named with `pid`): the epoch to act in, else `None`. The caller
    /// checks its close count itself.
    pub fn still(&self, p: &Proof, pid: i32) -> Option<u64> {
        let slot = self.slot(p.slot).filter(|_| p.member < super::MEMBERS)?;
        let e = super::live_epoch(slot)?;
        let t = slot[TOKEN0 + p.member].load(Acquire);
        (e == p.epoch && t == p.token && super::names_pid(t, pid)).then_some(e)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn proof(fd: i32, n: u64) -> Proof {
        Proof {
            fd,
            slot: 4095,
            member: 138,
            token: n,
            epoch: n + 1,
            closes: n + 2,
        }
    }

    #[test]
    fn a_proof_is_read_back_only_for_its_own_descriptor() {
        let t = Proofs::new();
        assert_eq!(t.get(3), None);
        t.remember(proof(3, 7));
        assert_eq!(t.get(3), Some(proof(3, 7)));
        // Descriptor 67 shares the entry, but the proof is descriptor 3's.
        assert_eq!(t.get(3 + ENTRIES as i32), None);
        t.remember(proof(3 + ENTRIES as i32, 9));
        assert_eq!(t.get(3), None);
        assert_eq!(
            t.get(3 + ENTRIES as i32),
            Some(proof(3 + ENTRIES as i32, 9))
        );
        t.remember(proof(-1, 1));
        assert_eq!(t.get(-1), None);
    }

    #[test]
    fn an_entry_being_written_reads_as_empty_and_takes_no_second_writer() {
        let t = Proofs::new();
        t.remember(proof(5, 1));
        // A writer interrupted halfway (what a signal handler would find).
        t.entry(5).seq.fetch_add(1, Relaxed);
        assert_eq!(t.get(5), None);
        t.remember(proof(5, 2));
        t.entry(5).seq.fetch_add(1, Relaxed);
        assert_eq!(t.get(5), Some(proof(5, 1)));
    }
}
