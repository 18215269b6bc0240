//! SEM_UNDO on the fast path, the client's side: a single-sop semop with SEM_UNDO by the one
//! process that holds the set's fast adjustments (ARCHITECTURE.md, "SEM_UNDO on the fast
//! path", has the design and the argument; the daemon's side is `owner::take_back_adjustments`).
//!
//! Words (of the slot): `UNDO` (0, or `OWNED` and the owner's pid), `INTENT` (0, or
//! [`INTENT_SET`] with the operation in flight: the publish's epoch in bits 38-61, `k` in bits
//! 32-37, `sem_op` in bits 16-31, the adjustment before it in bits 0-15) and one adjustment
//! word per semaphore at `ADJ_WORDS + k` (semadj in bits 0-15, the publish's epoch in bits
//! 40-63).
//!
//! The steps, each a CAS: claim UNDO (if 0), claim INTENT (one operation per set at a time),
//! lock the semaphore's word (set [`LOCKED`]: value, sempid and epoch stay those before the
//! operation), write the adjustment, unlock the word with the new value and our pid, clear
//! INTENT. The adjustment changes only while the word is LOCKED by us, and INTENT stays ours
//! from before the lock until after the unlock, so the daemon, after it made every word SLOW,
//! can tell from (word LOCKED, INTENT of this epoch names it) that the operation did not
//! happen and which adjustment it had before: whatever instruction a SIGKILL stops us at, the
//! value and the adjustment it keeps match. A step that fails after the lock can only be the
//! daemon's takeover: we leave INTENT and the adjustment as they are (the daemon goes by
//! INTENT; publishing resets both) and let the daemon serve the call.

use super::{
    epoch_of, word, ArenaView, Caller, Fast, Step, ADJ_WORDS, CAPACITY, EPOCH_MASK, EPOCH_SHIFT,
    HEADER_WORDS, INTENT, LOCKED, OWNED, RETRIES, UNDO, WAITED,
};
use crate::ipc::sem::Sembuf;
use crate::sync::{
    AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use crate::IpcId;

/// INTENT's "an operation is in flight" bit.
pub(crate) const INTENT_SET: u64 = 1 << 63;

/// An adjustment word: `adj` with the publish's `epoch`.
pub(crate) const fn adj_word(adj: i32, epoch: u64) -> u64 {
    (adj as i16 as u16 as u64) | (epoch & EPOCH_MASK) << EPOCH_SHIFT
}

/// An adjustment word's (or INTENT's) adjustment.
pub(crate) const fn adj_of(a: u64) -> i32 {
    a as u16 as i16 as i32
}

const INTENT_EPOCH_SHIFT: u32 = 38;

/// INTENT for semaphore `k`, `sem_op`, adjustment `before`, on the publish of `epoch`.
const fn intent(epoch: u64, k: usize, sem_op: i16, before: i32) -> u64 {
    INTENT_SET
        | (epoch & EPOCH_MASK) << INTENT_EPOCH_SHIFT
        | (k as u64 & 63) << 32
        | (sem_op as u16 as u64) << 16
        | before as i16 as u16 as u64
}

/// INTENT's epoch.
pub(crate) const fn intent_epoch(i: u64) -> u64 {
    (i >> INTENT_EPOCH_SHIFT) & EPOCH_MASK
}

/// INTENT's semaphore.
pub(crate) const fn intent_sem(i: u64) -> usize {
    ((i >> 32) & 63) as usize
}

impl ArenaView<'_> {
    /// A single-sop semop with SEM_UNDO. As Linux makes the caller's undo entry before it
    /// looks at the operation, the adjustments become the caller's (UNDO) as soon as the set
    /// and the permission are checked; `sem_op` 0 then is a plain operation.
    pub(super) fn semop_undo(&self, id: IpcId, sop: Sembuf, who: &dyn Caller) -> Fast<()> {
        let k = usize::from(sop.sem_num);
        let Some(slot) = self.slot(id).filter(|_| k < CAPACITY) else {
            return Fast::Slow;
        };
        let (cell, adj_cell) = (&slot[HEADER_WORDS + k], &slot[ADJ_WORDS + k]);
        let me = OWNED | u64::from(who.pid());
        for _ in 0..RETRIES {
            let perm = if sop.sem_op != 0 { 2 } else { 4 };
            let Some(w) = Self::look(slot, cell, id, k, perm, who) else {
                return Fast::Slow;
            };
            // The adjustments must be ours (look let through only 0 or us).
            if slot[UNDO].load(Acquire) != me
                && (!who.proceed() || slot[UNDO].compare_exchange(0, me, AcqRel, Acquire).is_err())
            {
                return Fast::Slow;
            }
            if sop.sem_op == 0 {
                return self.semop_plain(id, sop, who);
            }
            // A sleeper waits on the word: the daemon adopts it and serves this call.
            if w & WAITED != 0 {
                return Fast::Slow;
            }
            let result = match Self::outcome(cell, w, sop) {
                Step::Proceed(result) => result,
                Step::Give(done) => return done,
                Step::Block => return Fast::Slow,
            };
            let a = adj_cell.load(Acquire);
            if epoch_of(a) != epoch_of(w) {
                return Fast::Slow;
            }
            let before = adj_of(a);
            let after = before - i32::from(sop.sem_op);
            if !(-32768..=32767).contains(&after) {
                return Fast::Slow; // ERANGE, the daemon's to give
            }
            let mine = intent(epoch_of(w), k, sop.sem_op, before);
            if !who.proceed()
                || slot[INTENT]
                    .compare_exchange(0, mine, AcqRel, Acquire)
                    .is_err()
            {
                return Fast::Slow;
            }
            let clear = || {
                let _ = slot[INTENT].compare_exchange(mine, 0, Release, Relaxed);
            };
            if !who.proceed() {
                return Fast::Slow;
            }
            if cell
                .compare_exchange(w, w | LOCKED, AcqRel, Acquire)
                .is_err()
            {
                if !who.proceed() {
                    return Fast::Slow;
                }
                clear();
                continue;
            }
            let a2 = adj_word(after, epoch_of(w));
            if !who.proceed() {
                return Fast::Slow;
            }
            if adj_cell.compare_exchange(a, a2, AcqRel, Acquire).is_err() {
                // The daemon took the set: the operation did not happen; INTENT says so.
                return Fast::Slow;
            }
            let now = who.now();
            let new = word(result, u64::from(who.pid()), epoch_of(w), false);
            if !who.proceed() {
                return Fast::Slow;
            }
            if cell
                .compare_exchange(w | LOCKED, new, AcqRel, Acquire)
                .is_err()
            {
                // SLOW came first: the operation did not happen; INTENT says so.
                return Fast::Slow;
            }
            if !who.proceed() {
                return Fast::Slow;
            }
            clear();
            Self::raise_otime(slot, new, now);
            return Fast::Done(Ok(()));
        }
        Fast::Slow
    }
}

/// The SEM_UNDO words as a publish leaves them: nothing in flight, the owner and its
/// adjustments of `epoch` if `undo` names one, else no owner and every adjustment 0. Only
/// while the slot's words are SLOW.
pub(crate) fn reset(slot: &[AtomicU64], nsems: usize, epoch: u64, undo: Option<(i32, &[i32])>) {
    let owner = undo.map_or(0, |(pid, _)| OWNED | u64::from(pid as u32));
    slot[UNDO].store(owner, Release);
    slot[INTENT].store(0, Release);
    for (k, a) in slot[ADJ_WORDS..ADJ_WORDS + nsems].iter().enumerate() {
        let adj = undo.and_then(|(_, adj)| adj.get(k)).copied().unwrap_or(0);
        a.store(adj_word(adj, epoch), Release);
    }
}
