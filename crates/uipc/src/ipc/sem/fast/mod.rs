//! The semaphore fast path: sets published in memory shared with the clients.
//!
//! ARCHITECTURE.md ("The semaphore fast path") has the design and the ordering argument; this
//! module is its layout and the client's operations ([`ArenaView`]), [`owner`] the daemon's
//! side (taking a set back before the engine touches it, publishing it again afterwards).
//!
//! Layout: [`SLOTS`] slots, one per IPC index, of [`SLOT_WORDS`] `AtomicU64`s: [`HEADER_WORDS`]
//! header words (`IDENT`, `MODE_NSEMS`, `UID_GID`, `CUID_CGID`, `OTIME`, `UNDO`, `INTENT`),
//! then one word per semaphore (at most [`CAPACITY`]): value in bits 0-14, [`LOCKED`] in bit
//! 15, [`SLOW`] in bit 16, sempid in bits 17-38, [`WAITED`] in bit 39, epoch in bits 40-63; then
//! one adjustment word per semaphore (SEM_UNDO, module `undo`). `OTIME` holds the set's
//! sem_otime in bits 0-39 and the epoch of the publish it belongs to in bits 40-63. Header word
//! 7 is the slot's sleeper record (module `sleep`; the daemon's side in `adopt`).
//!
//! Invariants the client relies on (kept by [`owner`]): the header and the words change only
//! while every word of the published set has [`SLOW`] set, except for a client's CAS on a word
//! without it and a client's raise of `OTIME` after a successful CAS (only while `OTIME`'s
//! epoch is the word's), and the SEM_UNDO words as `undo` says; a word loses [`SLOW`] only by
//! a publish, which gives it a new epoch. A client reads a word with [`LOCKED`] set only to
//! wait a little for it. Nothing the client reads is trusted by the daemon: values it takes back are
//! clamped to SEMVMX.

mod adopt;
mod inside;
pub mod owner;
mod sleep;
mod undo;

pub use sleep::{Cancel, Sleep, Ticket, Wait};

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, loom))]
mod loom_sleep;
#[cfg(all(test, not(loom)))]
mod tests;
#[cfg(all(test, not(loom)))]
mod tests_sleep;

use super::Sembuf;
use crate::errno::Errno;
use crate::ipc::consts::{GETNCNT, GETPID, GETVAL, GETZCNT, IPC_NOWAIT, SEMVMX, SEM_UNDO};
use crate::ipc::shared_words::Slots;
use crate::sync::{
    load_while, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed,
    Ordering::Release,
};
use crate::IpcId;

/// Slots: one per IPC index below Linux's default IPCMNI.
pub const SLOTS: usize = 32768;
/// Header words of a slot.
pub const HEADER_WORDS: usize = 8;
/// The largest set that is published.
pub const CAPACITY: usize = 64;
/// Where a slot's adjustment words start.
pub(crate) const ADJ_WORDS: usize = HEADER_WORDS + CAPACITY;
/// Words of one slot.
pub const SLOT_WORDS: usize = HEADER_WORDS + 2 * CAPACITY;
/// Bytes of a whole arena.
pub const ARENA_BYTES: usize = SLOTS * SLOT_WORDS * 8;

/// Header: bit 32 and the id in bits 0-31 while a set is published, else 0.
pub(crate) const IDENT: usize = 0;
/// Header: mode (bits 0-31), nsems (bits 32-63).
pub(crate) const MODE_NSEMS: usize = 1;
/// Header: uid, gid.
pub(crate) const UID_GID: usize = 2;
/// Header: cuid, cgid.
pub(crate) const CUID_CGID: usize = 3;
/// Header: the set's sem_otime (bits 0-39) and the publish's epoch (bits 40-63).
pub(crate) const OTIME: usize = 4;
/// `OTIME`'s time bits.
pub(crate) const OTIME_MASK: u64 = (1 << EPOCH_SHIFT) - 1;
/// Header: 0, or [`OWNED`] and the pid of the one process with fast adjustments on the set.
pub(crate) const UNDO: usize = 5;
/// Header: 0, or [`undo::INTENT_SET`] and the SEM_UNDO operation in flight.
pub(crate) const INTENT: usize = 6;
/// UNDO's "owned" bit.
pub(crate) const OWNED: u64 = 1 << 32;
/// IDENT's "published" bit.
pub(crate) const PUBLISHED: u64 = 1 << 32;

/// A word's value bits.
pub const VALUE_MASK: u64 = 0x7fff;
/// The owner of the set's adjustments is changing the word and its adjustment (SEM_UNDO).
pub const LOCKED: u64 = 1 << 15;
/// The daemon holds the set: no client may change or read the word's value.
pub const SLOW: u64 = 1 << 16;
const PID_SHIFT: u32 = 17;
/// sempid's bits (pid_max is at most 2^22).
pub const PID_MASK: u64 = (1 << 22) - 1;
/// The slot's sleeper waits on this semaphore (module `sleep`).
pub const WAITED: u64 = 1 << 39;
pub(crate) const EPOCH_SHIFT: u32 = 40;
/// The epoch's bits.
pub const EPOCH_MASK: u64 = (1 << 24) - 1;

/// Maps the whole arena memfd `fd`, `len` bytes (`msg::fast::MAPPING_BYTES`: the arena's
/// [`ARENA_BYTES`], the key table, the message queue region), shared and read-write, at an
/// address of the kernel's choice: the daemon's mapping and each client's. `None` if the
/// kernel refuses. The caller owns the mapping (`munmap` of `len` bytes ends it).
#[cfg(not(loom))]
pub fn map_arena(fd: std::os::fd::RawFd, len: usize) -> Option<std::ptr::NonNull<AtomicU64>> {
    crate::ipc::shared_words::map_words(fd, len)
}

/// How many times a client retries a CAS that lost to another client before it asks the daemon.
const RETRIES: usize = 3;
/// How many times a client reloads a LOCKED word before it asks the daemon.
#[cfg(not(loom))]
const LOCKED_SPINS: usize = 64;
#[cfg(loom)]
const LOCKED_SPINS: usize = 1;

/// A word from its parts.
pub(crate) const fn word(value: u64, pid: u64, epoch: u64, slow: bool) -> u64 {
    (value & VALUE_MASK)
        | ((pid & PID_MASK) << PID_SHIFT)
        | ((epoch & EPOCH_MASK) << EPOCH_SHIFT)
        | if slow { SLOW } else { 0 }
}

/// A word's value.
pub(crate) const fn value_of(w: u64) -> u64 {
    w & VALUE_MASK
}

/// A word's sempid.
pub(crate) const fn pid_of(w: u64) -> u64 {
    (w >> PID_SHIFT) & PID_MASK
}

/// A word's epoch.
pub(crate) const fn epoch_of(w: u64) -> u64 {
    (w >> EPOCH_SHIFT) & EPOCH_MASK
}

/// What a fast call came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast<T> {
    /// Done here: the call's result.
    Done(Result<T, Errno>),
    /// The daemon must serve the call.
    Slow,
}

/// [`ArenaView::outcome`]: the new value, an operation that must wait, or the call's end.
enum Step {
    Proceed(u64),
    Block,
    Give(Fast<()>),
}

/// Who calls, as the fast path needs it: its pid as the daemon numbers it, its effective uid
/// (asked for only when the mode does not grant the access to everyone) and the time.
pub trait Caller {
    /// The caller's pid as the daemon sees it.
    fn pid(&self) -> u32;
    /// The caller's effective uid now.
    fn euid(&self) -> u32;
    /// CLOCK_REALTIME in seconds.
    fn now(&self) -> i64;
    /// Whether to go on to the next step of a SEM_UNDO operation (models stop there, as a
    /// SIGKILL would).
    fn proceed(&self) -> bool {
        true
    }
    /// Whether process `pid` (as the daemon numbers it) has not exited: a waker hands its
    /// operation to a sleeper only then.
    fn alive(&self, _pid: u32) -> bool {
        true
    }
    /// FUTEX_WAKE on the low 32 bits of `word` (a sleeper's record).
    fn wake(&self, _word: &AtomicU64) {}
}

/// The caller of the fast paths' tests and loom models: root with pid `.0`, at
/// [`TestCaller::NOW`].
#[cfg(test)]
pub(crate) struct TestCaller(pub u32);

#[cfg(test)]
impl TestCaller {
    /// The CLOCK_REALTIME seconds every test call reports.
    pub(crate) const NOW: i64 = 1_700_000_000;
}

#[cfg(test)]
impl Caller for TestCaller {
    fn pid(&self) -> u32 {
        self.0
    }
    fn euid(&self) -> u32 {
        0
    }
    fn now(&self) -> i64 {
        Self::NOW
    }
}

/// Whether a published object's `mode` grants `perm` (4 read, 2 write or alter) to the caller
/// without the daemon's help: to everyone, or to the owner or creator (`uid_gid`, `cuid_cgid`:
/// the id in bits 0-31) by the owner bits, by Linux's `ipcperms` (the owner class decides for
/// them, whatever the groups). `false`: the daemon judges (groups, others, CAP_IPC_OWNER). The
/// euid is asked for only when the mode does not grant everyone. The message fast path uses
/// it too.
pub(crate) fn grants(
    mode: u32,
    perm: u32,
    uid_gid: &AtomicU64,
    cuid_cgid: &AtomicU64,
    who: &dyn Caller,
) -> bool {
    let everyone = perm | perm << 3 | perm << 6;
    if mode & everyone == everyone {
        return true;
    }
    if (mode >> 6) & perm != perm {
        return false;
    }
    let euid = u64::from(who.euid());
    euid == uid_gid.load(Acquire) & 0xffff_ffff || euid == cuid_cgid.load(Acquire) & 0xffff_ffff
}

/// A client's view of an arena: the words of every slot.
pub struct ArenaView<'a> {
    slots: Slots<'a, SLOT_WORDS>,
}

impl<'a> ArenaView<'a> {
    /// A view of `words` (a whole number of slots).
    pub fn new(words: &'a [AtomicU64]) -> ArenaView<'a> {
        ArenaView {
            slots: Slots::new(words),
        }
    }

    /// The slot a set of id `id` is published in, if the arena reaches it.
    fn slot(&self, id: IpcId) -> Option<&'a [AtomicU64]> {
        let id = usize::try_from(id.get()).ok()?;
        self.slots.get(id % SLOTS)
    }

    /// Loads semaphore `k`'s word `cell` (again only while it is LOCKED, a few times) and
    /// checks, against the header read after it, that it is published for `id`, that `k`
    /// is in the set, that no other process holds fast adjustments on it and that `perm` (4
    /// read, 2 alter) is granted without the daemon's help: the word, or `None` if the daemon
    /// decides.
    fn look(
        slot: &[AtomicU64],
        cell: &AtomicU64,
        id: IpcId,
        k: usize,
        perm: u32,
        who: &dyn Caller,
    ) -> Option<u64> {
        let w = load_while(cell, |w| w & LOCKED != 0 && w & SLOW == 0, LOCKED_SPINS, 0);
        if w & (SLOW | LOCKED) != 0 {
            return None;
        }
        if slot[IDENT].load(Acquire) != PUBLISHED | u64::from(id.get() as u32) {
            return None;
        }
        // Another process's adjustments: its exit may be pending, and the daemon applies
        // pending exits before it serves a call.
        let undo = slot[UNDO].load(Acquire);
        if undo != 0 && undo != OWNED | u64::from(who.pid()) {
            return None;
        }
        let mode_nsems = slot[MODE_NSEMS].load(Acquire);
        if k as u64 >= mode_nsems >> 32 {
            return None;
        }
        if !grants(
            mode_nsems as u32,
            perm,
            &slot[UID_GID],
            &slot[CUID_CGID],
            who,
        ) {
            return None;
        }
        Some(w)
    }

    /// Linux's `perform_atomic_semop` for one operation on word `w` (loaded from `cell`): the
    /// new value, or what the call comes to here: EAGAIN if `cell` still holds `w` (so the
    /// header checked with it still holds), [`Step::Block`] for an operation that would wait,
    /// the daemon for one that would give ERANGE.
    fn outcome(cell: &AtomicU64, w: u64, sop: Sembuf) -> Step {
        let value = value_of(w) as i64;
        let result = value + i64::from(sop.sem_op);
        let proceeds = if sop.sem_op == 0 {
            value == 0
        } else {
            result >= 0
        };
        if !proceeds {
            if i32::from(sop.sem_flg) & IPC_NOWAIT == 0 {
                return Step::Block;
            }
            return Step::Give(if cell.load(Acquire) == w {
                Fast::Done(Err(Errno::EAGAIN))
            } else {
                Fast::Slow
            });
        }
        if result > i64::from(SEMVMX) {
            return Step::Give(Fast::Slow);
        }
        Step::Proceed(result as u64)
    }

    /// Raises `OTIME` to `now` after a successful CAS that made word `new`, unless a takeover
    /// has published the slot again since (another epoch: the daemon took the set back first,
    /// and the raise would belong to whatever is published now).
    fn raise_otime(slot: &[AtomicU64], new: u64, now: i64) {
        let epoch = epoch_of(new) << EPOCH_SHIFT;
        let want = (now.max(0) as u64 & OTIME_MASK) | epoch;
        let mut cur = slot[OTIME].load(Relaxed);
        while cur & !OTIME_MASK == epoch && cur < want {
            match slot[OTIME].compare_exchange_weak(cur, want, Release, Relaxed) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// semop / semtimedop with one operation (the timeout, if any, already found valid).
    pub fn semop(&self, semid: i32, sop: Sembuf, who: &dyn Caller) -> Fast<()> {
        let id = IpcId::new(semid);
        if sop.sem_flg & SEM_UNDO != 0 {
            return self.semop_undo(id, sop, who);
        }
        self.semop_plain(id, sop, who)
    }

    /// semop without SEM_UNDO (or with it once the adjustments are the caller's, for
    /// `sem_op` 0).
    fn semop_plain(&self, id: IpcId, sop: Sembuf, who: &dyn Caller) -> Fast<()> {
        match self.plain(id, sop, who, false) {
            Sleep::Done(r) => Fast::Done(r),
            _ => Fast::Slow,
        }
    }

    /// [`Self::semop_plain`], arming a sleeper (`may_arm`) when the operation must wait.
    fn plain(&self, id: IpcId, sop: Sembuf, who: &dyn Caller, may_arm: bool) -> Sleep {
        let Some(slot) = self.slot(id) else {
            return Sleep::Slow;
        };
        let k = usize::from(sop.sem_num);
        let perm = if sop.sem_op != 0 { 2 } else { 4 };
        let Some(cell) = slot.get(HEADER_WORDS + k).filter(|_| k < CAPACITY) else {
            return Sleep::Slow;
        };
        for _ in 0..RETRIES {
            let Some(w) = Self::look(slot, cell, id, k, perm, who) else {
                return Sleep::Slow;
            };
            let result = match Self::outcome(cell, w, sop) {
                Step::Proceed(result) => result,
                Step::Give(Fast::Done(r)) => return Sleep::Done(r),
                Step::Give(Fast::Slow) => return Sleep::Slow,
                Step::Block if !may_arm => return Sleep::Slow,
                Step::Block => match Self::arm(slot, id, k, w, sop, who) {
                    Some(Ok(t)) => return Sleep::Armed(t),
                    Some(Err(())) => continue,
                    None => return Sleep::Slow,
                },
            };
            let now = who.now();
            let (new, handed) = if w & WAITED != 0 {
                match Self::handoff(slot, k, w, result, sop, who) {
                    Some(h) => h,
                    // The sleeper cancelled meanwhile (the word moved): look again.
                    None if cell.load(Acquire) != w => continue,
                    None => return Sleep::Slow,
                }
            } else {
                (word(result, u64::from(who.pid()), epoch_of(w), false), None)
            };
            // AcqRel: the daemon's fetch_or that takes this word reads this value.
            match cell.compare_exchange(w, new, AcqRel, Acquire) {
                Ok(_) => {
                    if let Some(r) = handed {
                        Self::handed(slot, r, who);
                    }
                    // Only a successful operation moves sem_otime.
                    Self::raise_otime(slot, new, now);
                    return Sleep::Done(Ok(()));
                }
                Err(now) if now & SLOW != 0 => return Sleep::Slow,
                Err(_) => continue,
            }
        }
        Sleep::Slow
    }

    /// semctl's GETVAL, GETPID, GETNCNT and GETZCNT; `Slow` for every other command.
    pub fn semctl_get(&self, semid: i32, semnum: i32, cmd: i32, who: &dyn Caller) -> Fast<i32> {
        if !matches!(cmd, GETVAL | GETPID | GETNCNT | GETZCNT) || semnum < 0 {
            return Fast::Slow;
        }
        let id = IpcId::new(semid);
        let Some(slot) = self.slot(id) else {
            return Fast::Slow;
        };
        let k = semnum as usize;
        let Some(cell) = slot.get(HEADER_WORDS + k).filter(|_| k < CAPACITY) else {
            return Fast::Slow;
        };
        let Some(w) = Self::look(slot, cell, id, k, 4, who) else {
            return Fast::Slow;
        };
        // The header read above was the one in force while the word did not move.
        if cell.load(Acquire) != w {
            return Fast::Slow;
        }
        let count = |zero| Self::sleeper_count(slot, k, w, zero);
        let r = match cmd {
            GETVAL => value_of(w) as i32,
            GETPID => pid_of(w) as i32,
            // A published set's only sleeper is the slot's (read while the word held `w`).
            GETNCNT => count(false),
            _ => count(true),
        };
        if cell.load(Acquire) != w {
            return Fast::Slow;
        }
        Fast::Done(Ok(r))
    }
}
