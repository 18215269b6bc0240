//! flock leases: a file's flock state kept in memory the daemon shares with its clients, with
//! the descriptions that may act on it there (its members), so that flock through a member
//! (in any process that holds it) completes, or sleeps on a futex, without asking the daemon.
//!
//! ARCHITECTURE.md ("flock leases") has the design and the ordering argument; this module is
//! the layout and the caller's operation ([`FlockView`]), `book` the daemon's side (names,
//! grant, registration, revoke) that [`super::LockManager`] runs around its own calls
//! (`hooks`).
//!
//! Layout: [`FLOCK_SLOTS`] slots of [`SLOT_WORDS`] `AtomicU64`s: `STATE` (owner member + 1 in
//! bits 0-7, [`SH`], [`MULTI`], [`HELD`], [`SLOW`], waiter count in bits 12-23, epoch in bits
//! 24-63; its low 32 bits are the futex), `DEV`, `INO`, `DPID` (the daemon's pid), `SETTER`,
//! then a token per member (the pid it was named with in bits 32-53, the daemon's descriptor
//! number in bits 0-31; 0 past the last; `GONE` for a member dropped at its process's exit).
//! A file's slots are the [`GROUP`] slots of [`group_of`]'s group.
//!
//! Invariants the caller relies on (kept by `book`): `DEV`, `INO`, `DPID` and the tokens are
//! written before the Release store of a grant's `STATE` (a new epoch); within an epoch a token
//! only goes from 0 to a member, to another pid of the same description, or to `GONE` (and
//! stays so) before the daemon closes the descriptor it numbered; a member's only
//! writes are CASes of owner, `SH` and the waiter count on a HELD word without SLOW of its
//! epoch, and `SETTER` (listings only). Nothing a caller writes is trusted by the daemon.

mod book;
mod hooks;
mod proofs;

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, not(loom)))]
mod tests;

pub use book::FlockSlots;
pub use proofs::{Proof, Proofs};

use super::types::FileId;
use crate::ipc::shared_words::Slots;
use crate::sync::{
    AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::SeqCst,
};

/// Slots of a flock lease area.
pub const FLOCK_SLOTS: usize = 4096;
/// Slots a file may use (one group).
pub const GROUP: usize = 4;
/// Words of one slot.
pub const SLOT_WORDS: usize = 144;
/// Descriptions one slot names (its members).
pub const MEMBERS: usize = SLOT_WORDS - TOKEN0;
/// Bytes of a whole area.
pub const FLOCK_BYTES: usize = FLOCK_SLOTS * SLOT_WORDS * 8;

pub(crate) const STATE: usize = 0;
pub(crate) const DEV: usize = 1;
pub(crate) const INO: usize = 2;
/// The daemon's pid (the process whose descriptors the members' tokens number).
pub(crate) const DPID: usize = 3;
/// The pid that set the current lock (listings only).
pub(crate) const SETTER: usize = 4;
/// Member `i`'s token is word `TOKEN0 + i`: the pid that was named with it (bits 32-53) and
/// the daemon's descriptor number (bits 0-31); 0 past the last member.
pub(crate) const TOKEN0: usize = 5;

/// The member holding the lock, plus one (0: nobody).
pub(crate) const OWNER_MASK: u64 = 0xff;
/// The owner holds LOCK_SH (only while not [`MULTI`]).
pub const SH: u64 = 1 << 8;
/// The slot has more than one member: LOCK_SH is the daemon's.
pub const MULTI: u64 = 1 << 9;
/// A lease is granted here.
pub const HELD: u64 = 1 << 10;
/// The daemon took the lease back.
pub const SLOW: u64 = 1 << 11;
/// One sleeper, in the waiter count (bits 12-23).
pub(crate) const WAITER: u64 = 1 << 12;
pub(crate) const WAITERS_MASK: u64 = 0xfff << 12;
pub(crate) const EPOCH_SHIFT: u32 = 24;
pub(crate) const PID_MASK: u64 = (1 << 22) - 1;
/// The token of a member dropped at its process's exit: pid 0 names no caller, and it is not
/// 0, so a search for the caller goes on past it.
pub(crate) const GONE: u64 = u32::MAX as u64;

/// The bit a client adds to flock's `cmd` when it can redo the call on the slot: the daemon
/// may then name its description in the file's slot and answer [`REDO`] instead of serving it.
pub const FLOCK_MAY_REDO: i32 = 1 << 30;
/// The daemon's answer "your description is a member now: redo the call on the slot" (never
/// one of flock's errnos).
pub const REDO: crate::Errno = crate::Errno::from_raw(libc::EINPROGRESS);

/// CAS attempts before the daemon.
const CAS_TRIES: u32 = 16;

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

/// Where the daemon keeps its descriptor of a member description: `kcmp` against it tells a
/// caller whether its own descriptor refers to the same description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    /// The daemon's pid.
    pub pid: i32,
    /// The daemon's descriptor number.
    pub fd: i32,
}

/// The futex calls a sleeping caller makes (the library's; the models' stand-ins).
pub trait Futex {
    /// FUTEX_WAIT, untimed, on `word`'s low 32 bits while they are `expect`: whether a signal
    /// handler without SA_RESTART ended it (EINTR).
    fn wait(&self, word: &AtomicU64, expect: u32) -> bool;
    /// FUTEX_WAKE of one sleeper on `word`.
    fn wake_one(&self, word: &AtomicU64);
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

/// The epoch of a `STATE` word.
pub(crate) fn epoch_of(s: u64) -> u64 {
    s >> EPOCH_SHIFT
}

/// A `STATE` word `s` read as the word of the lease granted at `epoch` (of which the word
/// keeps the low 40 bits): `None` if it is not one (not HELD, SLOW, another epoch), else the
/// member index of the lock's owner (`None`: nobody holds it). The one reading of the word
/// that the daemon's books and the callers' operation share.
pub(crate) fn owner_in(s: u64, epoch: u64) -> Option<Option<usize>> {
    if s & (HELD | SLOW) != HELD || epoch_of(s) != epoch & (u64::MAX >> EPOCH_SHIFT) {
        return None;
    }
    Some(((s & OWNER_MASK) as usize).checked_sub(1))
}

/// A member's token word.
pub(crate) fn token_word(pid: i32, fd: i32) -> u64 {
    ((pid as u64 & PID_MASK) << 32) | u64::from(fd as u32)
}

/// The epoch of `slot`'s `STATE`, loaded now, if a member may act on it (HELD, not SLOW).
fn live_epoch(slot: &[AtomicU64]) -> Option<u64> {
    let s = slot[STATE].load(Acquire);
    owner_in(s, epoch_of(s)).map(|_| epoch_of(s))
}

/// Whether token word `t` of member `i` of `slot` (loaded after the `STATE` a proof stands on)
/// names the caller: the member was named with `pid`, `same` finds the caller's descriptor to
/// be the daemon's one the token numbers, and the token is still `t` after that comparison.
/// The daemon turns a dropped member's token into [`GONE`] before it closes its descriptor, so
/// a comparison with a descriptor number the daemon reused since proves nothing.
fn names(
    slot: &[AtomicU64],
    (i, t): (usize, u64),
    pid: i32,
    same: impl FnOnce(Token) -> bool,
) -> bool {
    if !names_pid(t, pid) {
        return false;
    }
    same(Token {
        pid: slot[DPID].load(Acquire) as i32,
        fd: t as u32 as i32,
    }) && slot[TOKEN0 + i].load(SeqCst) == t
}

/// Whether token word `t` was named with `pid`.
fn names_pid(t: u64, pid: i32) -> bool {
    (t >> 32) & PID_MASK == pid as u64 & PID_MASK
}

/// The result of a caller's operation.
#[derive(Debug, PartialEq, Eq)]
pub enum Flocked {
    /// Done here.
    Done,
    /// Not this description's slot (or given up): the daemon must serve the call.
    Slow,
    /// LOCK_NB and another description holds the lock: EWOULDBLOCK.
    WouldBlock,
    /// A signal handler without SA_RESTART ended the wait: EINTR.
    Interrupted,
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
        Slots::<SLOT_WORDS>::new(self.words).get(k)
    }

    /// The slots that lease `file` now (at most one, but a caller cannot know which a grant
    /// racing the search used).
    pub fn candidates(&self, file: FileId) -> impl Iterator<Item = usize> + 'a {
        let slots = Slots::<SLOT_WORDS>::new(self.words);
        (0..GROUP)
            .map(move |i| group_of(file) * GROUP + i)
            .filter(move |&k| {
                let Some(slot) = slots.get(k) else {
                    return false;
                };
                live_epoch(slot).is_some()
                    && slot[DEV].load(Acquire) == file.dev
                    && slot[INO].load(Acquire) == file.ino
            })
    }

    /// Proves that the caller (`pid`, whose descriptor `same` compares with a token) is
    /// member `i` of slot `k` now: the epoch it is that member in, and the token word compared.
    pub fn prove(
        &self,
        k: usize,
        i: usize,
        pid: i32,
        mut same: impl FnMut(Token) -> bool,
    ) -> Option<(u64, u64)> {
        let (slot, e, t) = self.member_now(k, i)?;
        (t != 0 && names(slot, (i, t), pid, &mut same)).then_some((e, t))
    }

    /// Slot `k`, its live epoch and member `i`'s token word, read in that order (the token
    /// after the `STATE` a proof stands on).
    fn member_now(&self, k: usize, i: usize) -> Option<(&'a [AtomicU64], u64, u64)> {
        let slot = self.slot(k).filter(|_| i < MEMBERS)?;
        let e = live_epoch(slot)?;
        Some((slot, e, slot[TOKEN0 + i].load(Acquire)))
    }

    /// The member the caller is in slot `k` (the members named with its pid, compared by
    /// `same`), with the epoch and the token word compared.
    pub fn find(
        &self,
        k: usize,
        pid: i32,
        mut same: impl FnMut(Token) -> bool,
    ) -> Option<(usize, u64, u64)> {
        let slot = self.slot(k)?;
        let e = live_epoch(slot)?;
        for i in 0..MEMBERS {
            let t = slot[TOKEN0 + i].load(Acquire);
            if t == 0 {
                return None;
            }
            if names(slot, (i, t), pid, &mut same) {
                return Some((i, e, t));
            }
        }
        None
    }

    /// flock to `want` (LOCK_NB: `nb`) by process `pid` as member `i` of slot `k`, proven in
    /// `epoch`; a conflicting LOCK_EX without LOCK_NB sleeps on the slot through `futex`.
    #[allow(clippy::too_many_arguments)]
    pub fn flock(
        &self,
        (k, i, epoch): (usize, usize, u64),
        pid: i32,
        want: Mode,
        nb: bool,
        futex: &impl Futex,
    ) -> Flocked {
        let Some(slot) = self.slot(k) else {
            return Flocked::Slow;
        };
        if pid <= 0 || pid as u64 > PID_MASK || i >= MEMBERS {
            return Flocked::Slow;
        }
        let me = i as u64 + 1;
        let word = &slot[STATE];
        let mut tries = 0;
        loop {
            let s = word.load(Acquire);
            let Some(owner) = owner_in(s, epoch) else {
                return Flocked::Slow;
            };
            let (mine, free) = (owner == Some(i), owner.is_none());
            let shared = s & SH != 0;
            let next = match want {
                Mode::Unlocked if !mine => return Flocked::Done,
                Mode::Unlocked => s & !(OWNER_MASK | SH),
                Mode::Shared if s & MULTI != 0 => return Flocked::Slow,
                Mode::Shared if mine && shared => return Flocked::Done,
                Mode::Shared if free || mine => (s & !OWNER_MASK) | me | SH,
                Mode::Shared => return Flocked::Slow,
                Mode::Exclusive if mine && !shared => return Flocked::Done,
                Mode::Exclusive if free || mine => (s & !(OWNER_MASK | SH)) | me,
                Mode::Exclusive if nb => return Flocked::WouldBlock,
                Mode::Exclusive => match self.sleep(word, s, epoch, futex) {
                    Some(r) => return r,
                    None => continue,
                },
            };
            match word.compare_exchange(s, next, AcqRel, Acquire) {
                Ok(_) => {
                    if want != Mode::Unlocked {
                        slot[SETTER].store(pid as u64, Relaxed);
                    } else if s & WAITERS_MASK != 0 {
                        futex.wake_one(word);
                    }
                    return Flocked::Done;
                }
                Err(_) => {
                    tries += 1;
                    if tries > CAS_TRIES {
                        return Flocked::Slow;
                    }
                }
            }
        }
    }

    /// One sleep of a blocked LOCK_EX on `word` seen as `s`: counts itself a waiter, waits for
    /// the word to change, and leaves the count. `None`: look again; else the call's result.
    fn sleep(&self, word: &AtomicU64, s: u64, epoch: u64, futex: &impl Futex) -> Option<Flocked> {
        if s & WAITERS_MASK == WAITERS_MASK {
            return Some(Flocked::Slow);
        }
        let armed = s + WAITER;
        if word.compare_exchange(s, armed, AcqRel, Acquire).is_err() {
            return None;
        }
        let interrupted = futex.wait(word, armed as u32);
        loop {
            let v = word.load(Acquire);
            if owner_in(v, epoch).is_none() {
                // Taken back: the daemon serves the call (or it ends with EINTR).
                return Some(if interrupted {
                    Flocked::Interrupted
                } else {
                    Flocked::Slow
                });
            }
            if word
                .compare_exchange(v, v - WAITER, AcqRel, Acquire)
                .is_ok()
            {
                break;
            }
        }
        interrupted.then_some(Flocked::Interrupted)
    }
}
