//! flock leases: the flock state of an open file description that alone locks a file, kept in
//! memory the daemon shares with its clients, so that flock through that description (in any
//! process that holds it) completes without asking the daemon.
//!
//! ARCHITECTURE.md ("flock leases") has the design and the ordering argument; this module is
//! the layout and the caller's operation ([`FlockView`]), `book` the daemon's side (names,
//! grant, revoke) that [`super::LockManager`] runs around its own calls (`hooks`).
//!
//! Layout: [`FLOCK_SLOTS`] slots of [`SLOT_WORDS`] `AtomicU64`s: `STATE` (setter pid in bits
//! 0-21, mode in bits 22-23, [`HELD`], [`SLOW`], epoch in bits 32-63), `DEV`, `INO`, `TOKEN`
//! (the daemon's pid in bits 32-63 and the number of its descriptor of the description in bits
//! 0-31). A file's slots are the [`GROUP`] slots of [`group_of`]'s group.
//!
//! Invariants the caller relies on (kept by `book`): `DEV`, `INO` and `TOKEN` change only
//! while the slot is not HELD, and a slot becomes HELD only by a Release store with a new
//! epoch; a caller's only write is one CAS that changes the mode and pid bits of a HELD word
//! without SLOW. Nothing a caller writes is trusted by the daemon.

mod book;
mod hooks;

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, not(loom)))]
mod tests;

pub use book::FlockSlots;

use super::types::FileId;
use crate::sync::{AtomicU64, Ordering::AcqRel, Ordering::Acquire};

/// Slots of a flock lease area.
pub const FLOCK_SLOTS: usize = 4096;
/// Slots a file may use (one group).
pub const GROUP: usize = 4;
/// Words of one slot (one cache line).
pub const SLOT_WORDS: usize = 8;
/// Bytes of a whole area.
pub const FLOCK_BYTES: usize = FLOCK_SLOTS * SLOT_WORDS * 8;

pub(crate) const STATE: usize = 0;
pub(crate) const DEV: usize = 1;
pub(crate) const INO: usize = 2;
pub(crate) const TOKEN: usize = 3;

pub(crate) const PID_MASK: u64 = (1 << 22) - 1;
const MODE_SHIFT: u32 = 22;
const MODE_MASK: u64 = 3 << MODE_SHIFT;
/// A lease is granted here.
pub const HELD: u64 = 1 << 24;
/// The daemon took the lease back.
pub const SLOW: u64 = 1 << 25;
pub(crate) const EPOCH_SHIFT: u32 = 32;

/// CAS attempts before the daemon.
const CAS_TRIES: u32 = 8;

/// A description's flock state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No lock.
    Unlocked = 0,
    /// LOCK_SH.
    Shared = 1,
    /// LOCK_EX.
    Exclusive = 2,
}

impl Mode {
    /// The mode of a `STATE` word (`None`: an invalid value, which only a stray write makes).
    pub(crate) fn of(s: u64) -> Option<Mode> {
        match (s & MODE_MASK) >> MODE_SHIFT {
            0 => Some(Mode::Unlocked),
            1 => Some(Mode::Shared),
            2 => Some(Mode::Exclusive),
            _ => None,
        }
    }

    /// The mode flock's `cmd` asks for: LOCK_SH, LOCK_EX or LOCK_UN, with or without
    /// LOCK_NB; `None` for anything else (LOCK_MAND, EINVAL: the daemon's).
    pub fn of_cmd(cmd: i32) -> Option<Mode> {
        match cmd & !super::LOCK_NB {
            super::LOCK_SH => Some(Mode::Shared),
            super::LOCK_EX => Some(Mode::Exclusive),
            super::LOCK_UN => Some(Mode::Unlocked),
            _ => None,
        }
    }
}

/// Where the daemon keeps its descriptor of a leased description: `kcmp` against it tells a
/// caller whether its own descriptor refers to the same description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    /// The daemon's pid.
    pub pid: i32,
    /// The daemon's descriptor number.
    pub fd: i32,
}

impl Token {
    pub(crate) fn word(self) -> u64 {
        (u64::from(self.pid as u32) << 32) | u64::from(self.fd as u32)
    }

    fn of(w: u64) -> Token {
        Token {
            pid: (w >> 32) as u32 as i32,
            fd: w as u32 as i32,
        }
    }
}

/// Maps a flock lease area's memfd `fd` whole, shared and writable; `None` if the kernel
/// refuses. The mapping lives until unmapped ([`FLOCK_BYTES`]).
#[cfg(not(loom))]
pub fn map_flock_slots(fd: std::os::fd::RawFd) -> Option<std::ptr::NonNull<AtomicU64>> {
    crate::ipc::shared_words::map_words(fd, FLOCK_BYTES)
}

/// The group of `file`'s slots.
pub fn group_of(file: FileId) -> usize {
    let h = (file.dev.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ file.ino.rotate_left(17))
        .wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (h >> 40) as usize % (FLOCK_SLOTS / GROUP)
}

/// A slot's `STATE` for a lease at `epoch` holding `mode` set by `pid`.
pub(crate) fn held_state(mode: Mode, pid: i32, epoch: u32) -> u64 {
    (u64::from(epoch) << EPOCH_SHIFT)
        | HELD
        | ((mode as u64) << MODE_SHIFT)
        | (pid as u64 & PID_MASK)
}

/// The result of a caller's operation.
#[derive(Debug, PartialEq, Eq)]
pub enum Flocked {
    /// Done here.
    Done,
    /// Not this description's lease (or given up): the daemon must serve the call.
    Slow,
}

/// The caller's side of a flock lease area.
pub struct FlockView<'a> {
    words: &'a [AtomicU64],
}

impl<'a> FlockView<'a> {
    /// A view of `words` (a whole number of slots; a shorter area than [`FLOCK_SLOTS`] slots
    /// simply never matches the groups past its end).
    pub fn new(words: &'a [AtomicU64]) -> FlockView<'a> {
        FlockView { words }
    }

    fn slot(&self, k: usize) -> Option<&'a [AtomicU64]> {
        self.words.get(k * SLOT_WORDS..(k + 1) * SLOT_WORDS)
    }

    /// The slots that lease `file` now (at most one, but a caller cannot know which a grant
    /// racing the search used).
    pub fn candidates(&self, file: FileId) -> impl Iterator<Item = usize> + 'a {
        let words = self.words;
        (0..GROUP)
            .map(move |i| group_of(file) * GROUP + i)
            .filter(move |&k| {
                let Some(slot) = words.get(k * SLOT_WORDS..(k + 1) * SLOT_WORDS) else {
                    return false;
                };
                slot[STATE].load(Acquire) & (HELD | SLOW) == HELD
                    && slot[DEV].load(Acquire) == file.dev
                    && slot[INO].load(Acquire) == file.ino
            })
    }

    /// flock to `want` through a descriptor that `same` says refers to the description named by
    /// a token (a `kcmp`), by process `pid`, on slot `k`: `Done` if the slot leases that
    /// description now and the call completed here.
    pub fn flock(
        &self,
        k: usize,
        pid: i32,
        want: Mode,
        same: impl FnOnce(Token) -> bool,
    ) -> Flocked {
        self.flock_steps(k, pid, want, same, usize::MAX)
    }

    /// [`FlockView::flock`] stopped before step `stop` of ARCHITECTURE.md's four (the loom
    /// models' kill; `usize::MAX` runs it whole). A stopped call returns `Slow`.
    pub(crate) fn flock_steps(
        &self,
        k: usize,
        pid: i32,
        want: Mode,
        same: impl FnOnce(Token) -> bool,
        stop: usize,
    ) -> Flocked {
        let Some(slot) = self.slot(k) else {
            return Flocked::Slow;
        };
        if pid <= 0 || pid as u64 > PID_MASK {
            return Flocked::Slow;
        }
        // (1)
        let mut s = slot[STATE].load(Acquire);
        if s & (HELD | SLOW) != HELD {
            return Flocked::Slow;
        }
        let token = Token::of(slot[TOKEN].load(Acquire));
        // (2)
        if stop < 2 || !same(token) {
            return Flocked::Slow;
        }
        for _ in 0..CAS_TRIES {
            // (3)
            let held = Mode::of(s);
            if held == Some(want) {
                return Flocked::Done;
            }
            if held.is_none() || stop < 4 {
                return Flocked::Slow;
            }
            // (4)
            let new = (s & !(MODE_MASK | PID_MASK)) | ((want as u64) << MODE_SHIFT) | pid as u64;
            match slot[STATE].compare_exchange(s, new, AcqRel, Acquire) {
                Ok(_) => return Flocked::Done,
                Err(v) => {
                    // Another process of the description moved it (same epoch: the same
                    // lease, the same token), or the daemon took it back.
                    if v & (HELD | SLOW) != HELD || v >> EPOCH_SHIFT != s >> EPOCH_SHIFT {
                        return Flocked::Slow;
                    }
                    s = v;
                }
            }
        }
        Flocked::Slow
    }
}
