//! Sleeping on the message fast path, the daemon's side: what an entry into a slot does with
//! the slot's sleeper records (`fast::sleep`; ARCHITECTURE.md "Sleeping on the message fast
//! path").
//!
//! At a takeover, the armed record (`LOCK` had WAITED at the `fetch_or(SLOW)`: no client can
//! hand off to it or cancel it any more) is *adopted*: its record becomes ADOPTED and its
//! receive is queued in the engine as a sleeping receiver, first in line (a published queue
//! has no other). The receiver's notifier, run by whatever engine call completes it (a
//! pipelined send, E2BIG, IPC_RMID's EIDRM, IPC_SET's look-again) under the queue's lock,
//! writes the result into the record's daemon mailbox (FILLING, then FINISHED) and wakes the
//! futex. At every entry, an adopted receive whose sleeper asked for a cancel (CANCELLING) or
//! whose process is exiting is withdrawn under the queue's lock (a completion that came first
//! stands); the records of an exiting process are freed.
//!
//! Lock order: the slot's mutex (held by the caller), then `MsgArena::exiting` (a leaf), then
//! the queue's lock. The notifier runs under the waker's queue lock and takes only the waiter's
//! state (a leaf).

use super::fast::owner::{take_back, MsgArena, SlotState};
use super::fast::sleep::{
    free, pid_of, post, rec, record, seq_of, state_of, wanted, ADOPTED, CANCELLING, FILLING,
    FINISHED, FREE, HANDED, MBOX_BYTES, RECORDS, RETRY, R_DMBOX, R_WORD, WAITING, WITHDRAWN,
};
use super::{MsgQueue, RecvWake, SleepingReceiver};
use crate::ipc::namespace::IpcNamespace;
use crate::sync::{
    futex_wake_all, lock, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release,
};
use crate::wait::{Notifier, Waiter};
use crate::IpcId;
use std::sync::{Arc, OnceLock, Weak};

/// A receive adopted from a sleeper record: queued on `q` with `waiter`, for process `pid`,
/// whose record has sequence number `seq`.
pub(crate) struct Adopted {
    q: Arc<MsgQueue>,
    waiter: Arc<Waiter<RecvWake>>,
    pid: u32,
    seq: u64,
}

/// Writes `wake` into the daemon mailbox of `record` if it is still the adopted receive `seq`
/// (ADOPTED or CANCELLING), then FINISHED, and wakes its sleeper. `max` is the receive's
/// buffer (the text is cut to it: MSG_NOERROR; a longer one got E2BIG).
fn finish(record_words: &[AtomicU64], seq: u64, wake_with: Option<RecvWake>, max: i64) {
    let word = &record_words[R_WORD];
    let mut w = word.load(Acquire);
    while seq_of(w) == seq && matches!(state_of(w), ADOPTED | CANCELLING) {
        let filling = record(FILLING, seq, pid_of(w));
        match word.compare_exchange(w, filling, AcqRel, Acquire) {
            Ok(_) => {
                let mbox = &record_words[R_DMBOX..];
                match wake_with {
                    Some(RecvWake::Message(mtype, text)) => {
                        let n = text.len().min(usize::try_from(max).unwrap_or(usize::MAX));
                        post(mbox, 0, mtype, &text[..n.min(MBOX_BYTES)]);
                    }
                    Some(RecvWake::Fail(e)) => post(mbox, e.raw() as u64, 0, &[]),
                    Some(RecvWake::Retry) => post(mbox, RETRY, 0, &[]),
                    None => post(mbox, WITHDRAWN, 0, &[]),
                }
                // Release: the mailbox before the state the sleeper reads.
                word.store(record(FINISHED, seq, pid_of(w)), Release);
                futex_wake_all(word);
                return;
            }
            Err(now) => w = now,
        }
    }
}

/// Frees a record of sequence `seq` of an exited process, whatever its state but FILLING
/// (which only lasts while the filling notifier runs).
fn free_dead(word: &AtomicU64, seq: u64) {
    let mut w = word.load(Acquire);
    while seq_of(w) == seq && state_of(w) != FREE {
        if state_of(w) == FILLING {
            std::thread::yield_now();
            w = word.load(Acquire);
            continue;
        }
        match word.compare_exchange(w, free(seq + 1), AcqRel, Acquire) {
            Ok(_) => return,
            Err(now) => w = now,
        }
    }
}

impl IpcNamespace {
    /// Takes the queue `was` published in slot `idx` back into the engine and adopts the
    /// sleeper armed there. Slot mutex held (`st`).
    pub(super) fn msg_fast_take(
        &self,
        arena: &Arc<MsgArena>,
        idx: u32,
        st: &mut SlotState,
        was: i32,
    ) {
        let (slot, _) = arena.slot(idx);
        let mut snap = take_back(slot);
        let armed = snap.armed.take();
        let q = self.msg.registry.lookup(IpcId::new(was)).ok();
        if let Some(q) = &q {
            self.msg_fast_import(q, snap);
        }
        if let Some(j) = armed {
            self.msg_fast_adopt(arena, idx, st, j, q);
        }
    }

    /// Adopts armed record `j` of slot `idx` (its queue `q`, if it still exists): queued first
    /// in the engine's receivers with a notifier that fills the record; an exiting process's
    /// record is freed instead.
    fn msg_fast_adopt(
        &self,
        arena: &Arc<MsgArena>,
        idx: u32,
        st: &mut SlotState,
        j: usize,
        q: Option<Arc<MsgQueue>>,
    ) {
        let (slot, _) = arena.slot(idx);
        let r = rec(slot, j);
        let w = r[R_WORD].load(Acquire);
        if state_of(w) != WAITING {
            return;
        }
        let (seq, pid) = (seq_of(w), pid_of(w));
        if lock(&arena.exiting).contains(&(pid as i32)) {
            let _ = r[R_WORD].compare_exchange(w, free(seq + 1), AcqRel, Acquire);
            return;
        }
        if r[R_WORD]
            .compare_exchange(w, record(ADOPTED, seq, pid), AcqRel, Acquire)
            .is_err()
        {
            return;
        }
        let want = wanted(r);
        let Some(q) = q else {
            finish(r, seq, Some(RecvWake::Fail(crate::Errno::EIDRM)), 0);
            return;
        };
        let found: Arc<OnceLock<Weak<Waiter<RecvWake>>>> = Arc::default();
        let max = want.buf;
        let notifier: Notifier = {
            let (found, arena) = (found.clone(), arena.clone());
            Arc::new(move || {
                let Some(w) = found.get().and_then(Weak::upgrade) else {
                    return;
                };
                if let Some(res) = w.take_done() {
                    finish(rec(arena.slot(idx).0, j), seq, Some(res), max);
                }
            })
        };
        let waiter = Waiter::with_notifier(Some(notifier));
        {
            let mut qs = q.lock();
            if qs.deleted {
                drop(qs);
                finish(r, seq, Some(RecvWake::Fail(crate::Errno::EIDRM)), 0);
                return;
            }
            qs.receivers.push_front(SleepingReceiver {
                waiter: waiter.clone(),
                selector: want.selector,
                max_size: want.max_size,
                tid: want.tid,
                cap: MBOX_BYTES as i64,
            });
        }
        let _ = found.set(Arc::downgrade(&waiter));
        // Completed before the notifier could find its waiter.
        if let Some(res) = waiter.take_done() {
            finish(r, seq, Some(res), max);
        }
        // A sleeper cancelling meanwhile waits for the record to leave WAITING.
        futex_wake_all(&r[R_WORD]);
        st.adopted[j] = Some(Adopted {
            q,
            waiter,
            pid,
            seq,
        });
    }

    /// At every entry into slot `idx` (its mutex held: `st`): withdraws an adopted receive
    /// whose sleeper asked for it or is exiting, and forgets one whose record its sleeper has
    /// read.
    pub(super) fn msg_fast_resolve(&self, arena: &MsgArena, idx: u32, st: &mut SlotState) {
        let (slot, _) = arena.slot(idx);
        for j in 0..RECORDS {
            let Some(a) = st.adopted[j].take() else {
                continue;
            };
            let r = rec(slot, j);
            let w = r[R_WORD].load(Acquire);
            let ours = seq_of(w) == a.seq && pid_of(w) == a.pid;
            if !ours || !matches!(state_of(w), ADOPTED | CANCELLING | FILLING | FINISHED) {
                continue;
            }
            let dead = lock(&arena.exiting).contains(&(a.pid as i32));
            if !dead && state_of(w) != CANCELLING {
                st.adopted[j] = Some(a);
                continue;
            }
            {
                // Under the queue's lock, as every completion (and its notifier) runs.
                let mut qs = a.q.lock();
                let late = a.waiter.abort();
                qs.receivers.retain(|x| !Arc::ptr_eq(&x.waiter, &a.waiter));
                let max = wanted(r).buf;
                // A completion that came first stands; else withdrawn (EINTR).
                finish(r, a.seq, late, max);
            }
            if dead {
                free_dead(&r[R_WORD], a.seq);
            } else {
                st.adopted[j] = Some(a);
            }
        }
    }

    /// Process `pid` exited (or executed a new image, which ended its other threads): its
    /// sleeper records are freed and any receive adopted for it withdrawn; every record not
    /// free is woken (a sender that died between its hand-off and its wake leaves a sleeper
    /// asleep: it looks again).
    pub(crate) fn msg_fast_sleepers_gone(&self, pid: i32) {
        let Some(arena) = self.msg.arena.as_deref() else {
            return;
        };
        lock(&arena.exiting).insert(pid);
        for i in arena.used_slots() {
            let (slot, state) = arena.slot(i);
            let mut mine = false;
            for j in 0..RECORDS {
                let w = rec(slot, j)[R_WORD].load(Acquire);
                if state_of(w) != FREE {
                    futex_wake_all(&rec(slot, j)[R_WORD]);
                    mine |= pid_of(w) == pid as u32;
                }
            }
            if !mine {
                continue;
            }
            let at = {
                let st = lock(state);
                st.published.or_else(|| {
                    st.adopted
                        .iter()
                        .flatten()
                        .map(|a| a.q.header.id().get())
                        .next()
                })
            };
            // The entry takes the queue back (an armed record of ours is freed, not adopted)
            // and withdraws what was adopted for us; then the rest is freed.
            let inside = match at {
                Some(id) => self.msg_fast_enter(id),
                None => self.msg_fast_enter_index(i),
            };
            for j in 0..RECORDS {
                let word = &rec(slot, j)[R_WORD];
                let w = word.load(Acquire);
                if pid_of(w) == pid as u32 && matches!(state_of(w), WAITING | HANDED | FINISHED) {
                    free_dead(word, seq_of(w));
                }
            }
            drop(inside);
        }
        lock(&arena.exiting).remove(&pid);
    }
}
