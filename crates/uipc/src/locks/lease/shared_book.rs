//! The daemon's side of shared mode (ARCHITECTURE.md "Shared mode"): granting a contended
//! file's slot in shared mode, serving a whole-file call that reaches the daemon on it, taking it
//! back, and a process's exit. Runs under the shard mutex of the file's slot group (the lock
//! order of `book`); the owner word is read and changed only with atomics, and what it says
//! is validated (a pid in range, the slot's epoch).

use super::book::{Shard, SlotBook};
use super::shared::{
    proc_word, set_mark, Walk, CLOSED, ENGINE_ONE, OWNER, RETRY_LOCAL, SHARED, WAITERS,
};
use super::*;
use crate::locks::types::OFFSET_MAX;
use crate::sync::lock;
use std::collections::HashMap;

/// What the daemon did with a POSIX call on a file in shared mode.
pub(crate) enum SharedCall {
    /// Served on the slot, with this result.
    Done(crate::Result<()>),
    /// Not for the slot: the file is taken back and the call runs in the engine.
    Engine,
}

/// Wakes every sleeper of the owner word.
fn wake_all(owner: &AtomicU64) {
    crate::sync::futex_wake_all(owner);
}

impl Leases {
    /// Process `pid` asked for the area (it can retry a call on a slot in shared mode).
    pub fn asked(&self, pid: i32) {
        lock(&self.askers).insert(pid);
    }

    /// Whether `pid` asked for the area.
    pub(crate) fn has_asked(&self, pid: i32) -> bool {
        lock(&self.askers).contains(&pid)
    }

    /// Forgets an exited process: not an asker any more, no sleep mark.
    pub(super) fn forget_process(&self, pid: i32) {
        lock(&self.askers).remove(&pid);
        if let Some(w) = proc_word(self.words(), pid) {
            set_mark(w, 0);
        }
    }

    /// Puts slot `k` in shared mode for `file` with `owner` (0: none) holding the whole-file
    /// write lock: every word before the `STATE` store (Release) that makes it visible.
    pub(super) fn grant_shared(
        &self,
        slots: &mut HashMap<usize, SlotBook>,
        k: usize,
        file: FileId,
        owner: i32,
    ) {
        self.grant(slots, k, file, 0, &[]);
        let Some(slot) = self.slot(k) else { return };
        let epoch = u64::from(slots[&k].epoch);
        slot[STATE].store(0, Release);
        slot[OWNER].store((epoch << 32) | (owner as u64 & PID_MASK), Release);
        slot[STATE].store(held_state(0, epoch as u32) | SHARED, Release);
    }

    /// Takes slot `slot` in shared mode (epoch `epoch`) back: no CAS on its owner word
    /// succeeds after the `fetch_or`, its sleepers wake and go to the daemon. The owner and
    /// its lock, if any.
    pub(super) fn revoke_shared(&self, slot: &[AtomicU64], epoch: u32) -> (i32, Vec<Piece>) {
        let o = slot[OWNER].fetch_or(CLOSED, AcqRel);
        slot[STATE].fetch_or(REVOKED, AcqRel);
        wake_all(&slot[OWNER]);
        let pid = (o & PID_MASK) as i32;
        if o >> 32 != u64::from(epoch) || o & CLOSED != 0 || pid == 0 {
            return (0, Vec::new());
        }
        let whole = Piece {
            write: true,
            start: 0,
            end: OFFSET_MAX,
        };
        (pid, vec![whole])
    }

    /// Process `pid` no longer holds slot `k`'s lock (a close of one of its descriptors, or its
    /// exit); sleepers are woken to try again.
    pub(super) fn release_shared(&self, k: usize, pid: i32) {
        let Some(slot) = self.slot(k) else { return };
        let owner = &slot[OWNER];
        let mut o = owner.load(Acquire);
        while o & CLOSED == 0 && (o & PID_MASK) as i32 == pid {
            match owner.compare_exchange(o, o & !(PID_MASK | WAITERS), AcqRel, Acquire) {
                Ok(_) => {
                    if o & WAITERS != 0 {
                        wake_all(owner);
                    }
                    return;
                }
                Err(now) => o = now,
            }
        }
    }

    /// An exit: `pid`'s lock on every slot in shared mode of this shard goes, and every such
    /// slot's sleepers wake (a wake the dead process took, or one it owed after its unlock,
    /// reaches the others).
    pub(super) fn exit_shared(&self, sh: &mut Shard<SlotBook>, pid: i32) {
        for (&k, b) in sh.slots.iter() {
            if matches!(b.holder, Some((_, 0))) {
                self.release_shared(k, pid);
                if let Some(slot) = self.slot(k) {
                    wake_all(&slot[OWNER]);
                }
            }
        }
    }

    /// A POSIX call of `pid` on `file`: a write lock (`write`) or an unlock of `[start, end]`,
    /// blocking if `wait`, a parked F_SETLKW retried if `retried`. Served on the slot if the file
    /// is in shared mode and the call fits it: a whole-file write lock taken, or refused with
    /// EAGAIN (non-blocking) or [`RETRY_LOCAL`] (blocking: the library sleeps on the slot, if
    /// [`Leases::may_sleep_on_slot`]);
    /// an unlock of the owner's whole lock, or of a process that owns nothing.
    pub(crate) fn shared_call(
        &self,
        file: FileId,
        pid: i32,
        write: bool,
        (start, end): (i64, i64),
        wait: bool,
        retried: bool,
    ) -> SharedCall {
        let sh = self.shard(file);
        let Some(k) = sh.files.get(&file).and_then(|b| b.lease) else {
            return SharedCall::Engine;
        };
        if !matches!(sh.slots.get(&k).and_then(|b| b.holder), Some((_, 0))) {
            return SharedCall::Engine;
        }
        let Some(slot) = self.slot(k) else {
            return SharedCall::Engine;
        };
        let whole = start == 0 && end == OFFSET_MAX;
        let owner = &slot[OWNER];
        loop {
            let o = owner.load(Acquire);
            if o & CLOSED != 0 {
                return SharedCall::Engine;
            }
            let q = (o & PID_MASK) as i32;
            if !write {
                if q != pid {
                    return SharedCall::Done(Ok(()));
                }
                if !whole {
                    return SharedCall::Engine;
                }
                drop(sh);
                self.release_shared(k, pid);
                return SharedCall::Done(Ok(()));
            }
            if !whole {
                return SharedCall::Engine;
            }
            if q == pid {
                return SharedCall::Done(Ok(()));
            }
            if q == 0 {
                if owner
                    .compare_exchange(o, o | pid as u64, AcqRel, Acquire)
                    .is_ok()
                {
                    return SharedCall::Done(Ok(()));
                }
                continue;
            }
            return if !wait {
                SharedCall::Done(Err(crate::Errno::EAGAIN))
            } else if self.may_sleep_on_slot(pid, q, retried) {
                SharedCall::Done(Err(crate::Errno::from_raw(RETRY_LOCAL)))
            } else {
                SharedCall::Engine
            };
        }
    }

    /// Whether a conflicting F_SETLKW of `pid`, blocked by `owner`, goes back to the library
    /// to sleep on the slot ([`RETRY_LOCAL`]) rather than into the engine, which would take the
    /// file out of shared mode: `pid` has the area and a per-process word to mark its sleep
    /// in, and, for a fresh call (not a parked one the grant woke), the library's own walk
    /// from `owner` would let it sleep there. A fresh call is one the library could not serve
    /// on the slot (a process's first call, sent before it had the area, or one whose walk
    /// went through a request asleep in the engine): the walk is the same function on the
    /// same words, so a call that the library sends back finds the same answer here, unless
    /// another process changed the words between the two, and goes into the engine.
    fn may_sleep_on_slot(&self, pid: i32, owner: i32, retried: bool) -> bool {
        self.has_asked(pid)
            && proc_word(self.words(), pid).is_some()
            && (retried || super::shared::walk(self.words(), pid, owner) == Walk::Clear)
    }

    /// The daemon's engine records (`up`) or forgets a sleeping request of process `pid`: the
    /// count in its per-process word, which a walk in a library reads.
    pub(crate) fn engine_sleeper(&self, pid: i32, up: bool) {
        if let Some(w) = proc_word(self.words(), pid) {
            if up {
                w.fetch_add(ENGINE_ONE, crate::sync::Ordering::SeqCst);
            } else {
                w.fetch_sub(ENGINE_ONE, crate::sync::Ordering::SeqCst);
            }
        }
    }
}

impl Leases {
    /// The owner of the slot process `pid` sleeps on in shared mode, if it does and the slot
    /// is owned (the daemon's deadlock walk).
    pub(crate) fn sleeps_behind(&self, pid: i32) -> Option<i32> {
        let v = proc_word(self.words(), pid)?.load(crate::sync::Ordering::SeqCst);
        super::shared::sleeps_behind(self.words(), v).filter(|&o| o > 0)
    }
}
