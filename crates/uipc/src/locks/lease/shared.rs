//! Shared mode of a lease slot: several processes of the `uipc run` tree take, drop, test and
//! wait for a WHOLE-FILE write lock of one file in their own processes, with a CAS on one
//! owner word and futex sleeps on it (ARCHITECTURE.md "Shared mode").
//!
//! Layout in shared mode: `STATE` is {pid bits 0, [`HELD`], [`SHARED`], epoch}; word [`OWNER`]
//! is the owner's pid (bits 0-21, 0: free), [`WAITERS`] (22: a process may sleep on it),
//! [`CLOSED`] (23: the daemon took the file back) and the grant's epoch (bits 32-63); its low
//! 32 bits are the futex. After the slots, one word per pid (`proc_word`): bits 0-31 the slot
//! the process sleeps on (`sleep_mark`, written by the process), bits 32-63 how many of its
//! requests sleep in the daemon's engine (written by the daemon).
//!
//! Deadlock detection (Linux's walk, `deadlock`): before each sleep a process publishes its
//! sleep mark, then walks "the owner of what blocks me waits for ..." through the marks and
//! owner words; a step through a process with engine sleepers sends the call to the daemon,
//! whose walk reads the same marks. Mark before walk on both sides (SeqCst), so of two calls
//! that close a cycle at once at least one sees the other.

use super::*;
use crate::ipc::shared_words::Slots;
use crate::sync::Ordering::SeqCst;

/// `STATE`: the slot is in shared mode.
pub const SHARED: u64 = 1 << 26;
/// The owner word (in the space of buffer 0, unused in shared mode).
pub const OWNER: usize = BUF;
/// Owner word: a process may sleep on it (an unlock must wake one).
pub const WAITERS: u64 = 1 << 22;
/// Owner word: the daemon took the file back; no CAS on the word succeeds any more.
pub const CLOSED: u64 = 1 << 23;
/// Where the per-process words start.
#[cfg(not(loom))]
pub const PROC_BASE: usize = LEASE_SLOTS * SLOT_WORDS;
/// Where the per-process words start: the loom models' area is one group long, then a few
/// per-process words.
#[cfg(loom)]
pub const PROC_BASE: usize = GROUP * SLOT_WORDS;
/// The errno a parked F_SETLKW of the daemon's ends with when its file went into shared mode:
/// the library retries the call on the slot (the kernel's internal ERESTARTNOINTR, which no
/// system call returns to user space).
pub const RETRY_LOCAL: i32 = 513;
/// Linux's `MAX_DEADLK_ITERATIONS`.
const MAX_STEPS: usize = 10;
/// Per-process word: one request of the process sleeps in the engine.
pub(crate) const ENGINE_ONE: u64 = 1 << 32;
const MARK_SLOT_BITS: u32 = 13;

/// The per-process word of `pid`, if the area has one.
pub(crate) fn proc_word(words: &[AtomicU64], pid: i32) -> Option<&AtomicU64> {
    if pid <= 0 || pid as u64 > PID_MASK {
        return None;
    }
    words.get(PROC_BASE + pid as usize)
}

/// The sleep mark of slot `k` granted at `epoch`.
pub(crate) fn sleep_mark(k: usize, epoch: u64) -> u64 {
    ((k as u64 + 1) & ((1 << MARK_SLOT_BITS) - 1)) | ((epoch & 0x7_FFFF) << MARK_SLOT_BITS)
}

/// Replaces the low 32 bits (the sleep mark) of a per-process word, keeping the daemon's half.
pub(crate) fn set_mark(w: &AtomicU64, mark: u64) {
    let mut v = w.load(Relaxed);
    while let Err(now) = w.compare_exchange(v, (v & !0xFFFF_FFFF) | mark, SeqCst, Relaxed) {
        v = now;
    }
}

/// The slot `k` in shared mode and its `STATE`, if it is.
fn shared_state(words: &[AtomicU64], k: usize) -> Option<(&[AtomicU64], u64)> {
    let slot = Slots::<SLOT_WORDS>::new(words).get(k)?;
    let s = slot[STATE].load(SeqCst);
    (s & (HELD | SHARED | REVOKED) == HELD | SHARED).then_some((slot, s))
}

/// The owner of the slot a per-process word `v` says its process sleeps on (0: free), if it
/// sleeps on a slot in shared mode.
pub(crate) fn sleeps_behind(words: &[AtomicU64], v: u64) -> Option<i32> {
    let mark = v & 0xFFFF_FFFF;
    let k = (mark & ((1 << MARK_SLOT_BITS) - 1)).checked_sub(1)? as usize;
    let (slot, s) = shared_state(words, k)?;
    if sleep_mark(k, s >> EPOCH_SHIFT) != mark {
        return None;
    }
    let o = slot[OWNER].load(SeqCst);
    (o & CLOSED == 0 && o >> 32 == s >> EPOCH_SHIFT).then_some((o & PID_MASK) as i32)
}

/// What a walk from a blocking owner found.
#[derive(Debug, PartialEq, Eq)]
pub enum Walk {
    /// No cycle back to the caller.
    Clear,
    /// The chain reaches the caller: EDEADLK.
    Cycle,
    /// The chain goes through a request sleeping in the daemon's engine: ask the daemon.
    Daemon,
}

/// Linux's walk from `first` (the owner blocking `pid`), through processes sleeping on slots in
/// shared mode; at most `MAX_STEPS` steps past the first, as `deadlock::linux_walk`.
pub fn walk(words: &[AtomicU64], pid: i32, first: i32) -> Walk {
    let mut current = first;
    let mut steps = 0;
    loop {
        let Some(w) = proc_word(words, current) else {
            return Walk::Clear;
        };
        let v = w.load(SeqCst);
        if v >> 32 != 0 {
            return Walk::Daemon;
        }
        let next = match sleeps_behind(words, v) {
            Some(n) if n > 0 => n,
            _ => return Walk::Clear,
        };
        if steps > MAX_STEPS {
            return Walk::Clear;
        }
        steps += 1;
        if next == pid {
            return Walk::Cycle;
        }
        current = next;
    }
}

/// The sleeping and waking a waiting lock call needs (the library's futex calls).
pub trait Futex {
    /// Sleeps while the low 32 bits of `word` are `expect`; `Err` (EINTR) if a signal handler
    /// ends the sleep (one with SA_RESTART restarts it, as F_SETLKW is restarted).
    fn wait(&mut self, word: &AtomicU64, expect: u32) -> Result<(), crate::Errno>;
    /// Wakes one sleeper of `word`.
    fn wake_one(&mut self, word: &AtomicU64);
    /// Whether process `pid` has not exited (an exited owner's lock goes when the daemon
    /// handles the exit: until then a refusal because of it is for the daemon to give).
    fn alive(&mut self, pid: i32) -> bool;
}

impl<'a> LeaseView<'a> {
    /// The slot of `file` in shared mode: its index, words and `STATE`.
    pub(crate) fn shared_slot(&self, file: FileId) -> Option<(usize, &'a [AtomicU64], u64)> {
        (0..GROUP)
            .map(|i| group_of(file) * GROUP + i)
            .find_map(|k| {
                let (slot, s) = shared_state(self.words, k)?;
                (slot[DEV].load(Acquire) == file.dev
                    && slot[INO].load(Acquire) == file.ino
                    && slot[STATE].load(Acquire) == s)
                    .then_some((k, slot, s))
            })
    }

    /// Whether `file` has a slot in shared mode.
    pub fn is_shared(&self, file: FileId) -> bool {
        self.shared_slot(file).is_some()
    }

    /// A whole-file write lock of `pid` on `file` (F_SETLK, or F_SETLKW if `wait`), if the
    /// file is in shared mode: `None` for the daemon, else the call's result (EAGAIN,
    /// EDEADLK, or the futex's EINTR).
    pub fn shared_lock(
        &self,
        file: FileId,
        pid: i32,
        wait: bool,
        fx: &mut impl Futex,
    ) -> Option<Result<(), crate::Errno>> {
        let (k, slot, s) = self.shared_slot(file)?;
        let epoch = s >> EPOCH_SHIFT;
        let owner = &slot[OWNER];
        let me = proc_word(self.words, pid)?;
        let mut marked = false;
        let r = loop {
            let o = owner.load(Acquire);
            if o & CLOSED != 0 || o >> 32 != epoch {
                break None;
            }
            let q = (o & PID_MASK) as i32;
            if q == pid {
                break Some(Ok(()));
            }
            if q == 0 {
                // A process that slept keeps WAITERS: others may sleep still.
                let new = o | pid as u64 | if marked { WAITERS } else { 0 };
                if owner.compare_exchange(o, new, AcqRel, Acquire).is_ok() {
                    break Some(Ok(()));
                }
                continue;
            }
            if !wait {
                break fx.alive(q).then_some(Err(crate::Errno::EAGAIN));
            }
            if !marked {
                set_mark(me, sleep_mark(k, epoch));
                marked = true;
            }
            let armed = o | WAITERS;
            if o != armed && owner.compare_exchange(o, armed, AcqRel, Acquire).is_err() {
                continue;
            }
            match walk(self.words, pid, q) {
                Walk::Clear => {}
                Walk::Cycle => break Some(Err(crate::Errno::EDEADLK)),
                Walk::Daemon => break None,
            }
            if let Err(e) = fx.wait(owner, armed as u32) {
                break Some(Err(e));
            }
        };
        if marked {
            set_mark(me, 0);
        }
        r
    }

    /// An unlock by `pid` of `[start, end]` of `file`, if the file is in shared mode: `Some`
    /// when done here (a process that does not own the lock has nothing to unlock), `None`
    /// for the daemon (the owner unlocking part of its lock).
    pub fn shared_unlock(
        &self,
        file: FileId,
        pid: i32,
        (start, end): (i64, i64),
        fx: &mut impl Futex,
    ) -> Option<()> {
        let (_, slot, s) = self.shared_slot(file)?;
        let owner = &slot[OWNER];
        loop {
            let o = owner.load(Acquire);
            if o & CLOSED != 0 || o >> 32 != s >> EPOCH_SHIFT {
                return None;
            }
            if (o & PID_MASK) as i32 != pid {
                return Some(());
            }
            if start != 0 || end != crate::locks::types::OFFSET_MAX {
                return None;
            }
            if owner
                .compare_exchange(o, o & !(PID_MASK | WAITERS), Release, Relaxed)
                .is_ok()
            {
                if o & WAITERS != 0 {
                    fx.wake_one(owner);
                }
                return Some(());
            }
        }
    }

    /// A close by `pid` of a descriptor of `file`: drops its whole-file lock if it owns it in
    /// shared mode. Whether it did (else the daemon is told of the close).
    pub fn shared_close(&self, file: FileId, pid: i32, fx: &mut impl Futex) -> bool {
        let Some((_, slot, s)) = self.shared_slot(file) else {
            return false;
        };
        let o = slot[OWNER].load(Acquire);
        (o & PID_MASK) as i32 == pid
            && o & CLOSED == 0
            && o >> 32 == s >> EPOCH_SHIFT
            && self
                .shared_unlock(file, pid, (0, crate::locks::types::OFFSET_MAX), fx)
                .is_some()
    }

    /// F_GETLK of `pid` on `file` in shared mode: `None` for the daemon, else the pid of the
    /// owner of the whole-file write lock that conflicts (0: none, or `pid`'s own).
    pub fn shared_owner(&self, file: FileId, pid: i32) -> Option<i32> {
        let (_, slot, s) = self.shared_slot(file)?;
        let o = slot[OWNER].load(Acquire);
        if o & CLOSED != 0 || o >> 32 != s >> EPOCH_SHIFT {
            return None;
        }
        let q = (o & PID_MASK) as i32;
        Some(if q == pid { 0 } else { q })
    }
}
