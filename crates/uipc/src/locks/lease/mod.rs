//! File lock leases: a process's POSIX record locks on a file nobody else locks, kept in
//! memory the daemon shares with its clients, so that the process sets and drops them without
//! asking the daemon.
//!
//! ARCHITECTURE.md ("File lock leases") has the design and the ordering argument; this module
//! is the layout and the holder's operations ([`LeaseView`]), `book` the daemon's side (grant,
//! revoke, exit) that [`super::LockManager`] runs around its own calls, `ranges` the holder's
//! fixed-size range algebra.
//!
//! Layout: [`LEASE_SLOTS`] slots of [`SLOT_WORDS`] `AtomicU64`s: `STATE` (holder pid in bits
//! 0-21, [`HELD`], [`BUSY`], [`REVOKED`], [`CUR`], epoch in bits 32-63), `DEV`, `INO`, then
//! two buffers of a count and [`LEASE_RANGES`] pairs (start with a write lock's bit 63, end).
//! A file's slots are the [`GROUP`] slots of [`group_of`]'s group.
//!
//! Invariants the holder relies on (kept by `book`): `DEV`, `INO` and the buffers change
//! only while the slot is not HELD, except the non-current buffer, which only the holder
//! writes, only while it holds BUSY; a slot becomes HELD only by a store with a new epoch.
//! Nothing the holder writes is trusted by the daemon (`book` validates what it imports).

mod book;
mod hooks;
mod ranges;
pub mod shared;
mod shared_book;

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, loom))]
mod loom_shared;
#[cfg(all(test, not(loom)))]
mod shared_tests;
#[cfg(all(test, not(loom)))]
mod tests;

pub use book::Leases;
pub use ranges::{Piece, Pieces};

use super::types::FileId;
use crate::ipc::shared_words::Slots;
use crate::sync::Ordering::Release;
use crate::sync::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed};

/// Slots of a lease area.
pub const LEASE_SLOTS: usize = 4096;
/// Slots a file may use (one group).
pub const GROUP: usize = 4;
/// Words of one slot.
pub const SLOT_WORDS: usize = 64;
/// Words per process after the slots (pids below 2^22; their use is `shared`'s).
pub const PROC_WORDS: usize = 1 << 22;
/// Bytes of a whole area: the slots, then one word per process ([`PROC_WORDS`]).
pub const LEASE_BYTES: usize = (LEASE_SLOTS * SLOT_WORDS + PROC_WORDS) * 8;
/// Locks one lease holds; one more and the lease goes back to the daemon.
pub const LEASE_RANGES: usize = 14;

pub(crate) const STATE: usize = 0;
pub(crate) const DEV: usize = 1;
pub(crate) const INO: usize = 2;
/// Where buffer 0 starts; buffer 1 follows it.
pub(crate) const BUF: usize = 3;
pub(crate) const BUF_WORDS: usize = 1 + 2 * LEASE_RANGES;

pub(crate) const PID_MASK: u64 = (1 << 22) - 1;
/// A lease is granted here.
pub const HELD: u64 = 1 << 22;
/// A thread of the holder is inside an operation.
pub const BUSY: u64 = 1 << 23;
/// The daemon took the lease back.
pub const REVOKED: u64 = 1 << 24;
/// Buffer 1 is current (else buffer 0).
pub const CUR: u64 = 1 << 25;
pub(crate) const EPOCH_SHIFT: u32 = 32;
const WRITE_BIT: u64 = 1 << 63;

/// Spins of a thread that finds BUSY (another thread of its process, or a signal handler's
/// interrupted operation) before it asks the daemon.
const BUSY_SPINS: u32 = 128;
/// CAS attempts before the daemon.
const CAS_TRIES: u32 = 4;

/// Maps a lease area's memfd `fd` whole, shared and writable; `None` if the kernel refuses.
/// The mapping lives until unmapped ([`LEASE_BYTES`]).
#[cfg(not(loom))]
pub fn map_leases(fd: std::os::fd::RawFd) -> Option<std::ptr::NonNull<AtomicU64>> {
    crate::ipc::shared_words::map_words(fd, LEASE_BYTES)
}

/// The inclusive range `fl` asks for, for a descriptor at `offset` of a file of `size` bytes
/// (`flock_range`); `None` where Linux gives an error (the daemon then gives it).
pub fn range_of(fl: &super::types::Flock, offset: i64, size: i64) -> Option<(i64, i64)> {
    let fd = super::types::OpenFile {
        file: FileId { dev: 0, ino: 0 },
        ofd: super::types::OfdId(0),
        readable: true,
        writable: true,
        offset,
        size,
    };
    super::range::flock_range(fl, &fd).ok()
}

/// The group of `file`'s slots.
pub fn group_of(file: FileId) -> usize {
    let h = (file.dev.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ file.ino)
        .wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (h >> 40) as usize % (LEASE_SLOTS / GROUP)
}

/// A slot's `STATE` for `pid` holding it at `epoch` with buffer 0 current.
pub(crate) fn held_state(pid: i32, epoch: u32) -> u64 {
    (u64::from(epoch) << EPOCH_SHIFT) | HELD | (pid as u64 & PID_MASK)
}

/// Reads the current buffer of `slot` for a state `s` (count clamped).
pub(crate) fn read_buffer(slot: &[AtomicU64], s: u64) -> ([Piece; LEASE_RANGES], usize) {
    let base = BUF + if s & CUR != 0 { BUF_WORDS } else { 0 };
    let n = (slot[base].load(Relaxed) as usize).min(LEASE_RANGES);
    let mut out = [Piece::default(); LEASE_RANGES];
    for (k, p) in out.iter_mut().take(n).enumerate() {
        let a = slot[base + 1 + 2 * k].load(Relaxed);
        let b = slot[base + 1 + 2 * k + 1].load(Relaxed);
        *p = Piece {
            write: a & WRITE_BIT != 0,
            start: (a & !WRITE_BIT) as i64,
            end: b as i64,
        };
    }
    (out, n)
}

/// Writes `pieces` into buffer `which` (0 or 1) of `slot`.
pub(crate) fn write_buffer(slot: &[AtomicU64], which: usize, pieces: &[Piece]) {
    let base = BUF + which * BUF_WORDS;
    slot[base].store(pieces.len() as u64, Relaxed);
    for (k, p) in pieces.iter().enumerate() {
        let w = if p.write { WRITE_BIT } else { 0 };
        slot[base + 1 + 2 * k].store(p.start as u64 | w, Relaxed);
        slot[base + 1 + 2 * k + 1].store(p.end as u64, Relaxed);
    }
}

/// The result of a holder's operation.
#[derive(Debug, PartialEq, Eq)]
pub enum Leased {
    /// Done here.
    Done,
    /// Not held here (or given up): the daemon must serve the call.
    Slow,
}

/// The holder's side of a lease area.
pub struct LeaseView<'a> {
    pub(crate) words: &'a [AtomicU64],
}

impl<'a> LeaseView<'a> {
    /// A view of `words` (a whole number of slots, at least [`LEASE_SLOTS`] of them for the
    /// groups to be found; a shorter area simply never matches).
    pub fn new(words: &'a [AtomicU64]) -> LeaseView<'a> {
        LeaseView { words }
    }

    fn slot(&self, k: usize) -> Option<&'a [AtomicU64]> {
        Slots::<SLOT_WORDS>::new(self.words).get(k)
    }

    /// The slot `pid` holds `file`'s lease in, with the state read (not BUSY), waiting a little
    /// for BUSY to clear; `None` if it holds none (or BUSY stays).
    fn find(&self, file: FileId, pid: i32) -> Option<(&'a [AtomicU64], u64)> {
        let mut round = 0;
        loop {
            let mut busy = false;
            for k in 0..GROUP {
                let slot = self.slot(group_of(file) * GROUP + k)?;
                let s = slot[STATE].load(Acquire);
                if s & (HELD | REVOKED) != HELD || (s & PID_MASK) as i32 != pid {
                    continue;
                }
                if slot[DEV].load(Acquire) != file.dev || slot[INO].load(Acquire) != file.ino {
                    continue;
                }
                if s & BUSY == 0 {
                    return Some((slot, s));
                }
                busy = true;
            }
            if !busy || round >= BUSY_SPINS {
                return None;
            }
            crate::sync::spin_wait(&mut round);
        }
    }

    /// Whether `pid` holds `file`'s lease now (F_GETLK: then no other process has a lock on
    /// the file, and the answer is F_UNLCK). A reload of `STATE` equal to the first load makes
    /// `DEV` and `INO` that slot's.
    pub fn holds(&self, file: FileId, pid: i32) -> bool {
        for k in 0..GROUP {
            let Some(slot) = self.slot(group_of(file) * GROUP + k) else {
                return false;
            };
            let s = slot[STATE].load(Acquire);
            if s & (HELD | REVOKED) != HELD || (s & PID_MASK) as i32 != pid {
                continue;
            }
            if slot[DEV].load(Acquire) == file.dev
                && slot[INO].load(Acquire) == file.ino
                && slot[STATE].load(Acquire) & !(BUSY | CUR) == s & !(BUSY | CUR)
            {
                return true;
            }
        }
        false
    }

    /// Sets a lock of `write` (or unlocks, `None`) over `[start, end]` (valid, as
    /// `flock_range` gives it) among `pid`'s locks on `file`, if `pid` holds the lease.
    pub fn set(&self, file: FileId, pid: i32, write: Option<bool>, start: i64, end: i64) -> Leased {
        self.set_steps(file, pid, write, (start, end), usize::MAX)
    }

    /// Drops all of `pid`'s locks on `file` (a close), if `pid` holds the lease.
    pub fn clear(&self, file: FileId, pid: i32) -> Leased {
        self.set(file, pid, None, 0, crate::locks::types::OFFSET_MAX)
    }

    /// [`LeaseView::set`], stopping after step `stop` of ARCHITECTURE.md's five (the loom
    /// models' kill; `usize::MAX` runs it whole). A stopped operation returns `Slow`.
    pub(crate) fn set_steps(
        &self,
        file: FileId,
        pid: i32,
        write: Option<bool>,
        (start, end): (i64, i64),
        stop: usize,
    ) -> Leased {
        for _ in 0..CAS_TRIES {
            // (1)
            let Some((slot, s)) = self.find(file, pid) else {
                return Leased::Slow;
            };
            if stop < 2 {
                return Leased::Slow;
            }
            // (2)
            if slot[STATE]
                .compare_exchange(s, s | BUSY, AcqRel, Acquire)
                .is_err()
            {
                continue;
            }
            if stop < 3 {
                return Leased::Slow;
            }
            // (3)
            let (old, n) = read_buffer(slot, s);
            let next = Pieces::normal(&old[..n])
                .then(|| Pieces::apply(&old[..n], write, start, end))
                .flatten();
            let Some(next) = next else {
                if slot[STATE]
                    .compare_exchange(s | BUSY, s, Release, Relaxed)
                    .is_err()
                {
                    slot[STATE].fetch_and(!BUSY, Release);
                }
                return Leased::Slow;
            };
            // (4)
            let other = if s & CUR != 0 { 0 } else { 1 };
            write_buffer(slot, other, next.as_slice());
            if stop < 5 {
                return Leased::Slow;
            }
            // (5)
            return match slot[STATE].compare_exchange(s | BUSY, s ^ CUR, Release, Relaxed) {
                Ok(_) => Leased::Done,
                Err(_) => {
                    slot[STATE].fetch_and(!BUSY, Release);
                    Leased::Slow
                }
            };
        }
        Leased::Slow
    }
}
