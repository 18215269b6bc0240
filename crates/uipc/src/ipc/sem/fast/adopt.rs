//! Sleeping on the fast path, the daemon's side: what every entry into a slot does with the
//! slot's sleeper record (`sleep`; ARCHITECTURE.md "Sleeping on the fast path").
//!
//! At a takeover, an armed sleeper (its word had WAITED when the daemon made it SLOW: no
//! client can hand off to it or cancel it any more) is *adopted*: its record becomes ADOPTED
//! and its operation is queued in the engine as that process's sleeping semop, first in line
//! (a published set has no other waiter). The waiter's notifier, run by whatever engine call
//! completes it (a semop, SETVAL, SETALL, IPC_RMID, an exit's undo), writes FINISHED with the
//! errno and wakes the futex. At every entry, an adopted operation whose sleeper asked for a
//! cancel (CANCELLING) or whose process is exiting is withdrawn as a sleeper's would be
//! (a completion that came first stands); a record of an exiting process is freed.
//!
//! Lock order: the slot's mutex (held by the caller), then `SemArena::exiting` or
//! `SemArena::sleepers` (leaves), then the set's locks. The notifier runs under the waker's set
//! lock and takes only the waiter's state (a leaf).

use super::owner::{SemArena, SlotState};
use super::sleep::{
    arg_of, free, k_of, pid_of, record, seq_of, state_of, ADOPTED, CANCELLING, FINISHED, SLEEPER,
    WAITING, WITHDRAWN,
};
use crate::errno::Errno;
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::sem::lock::Locked;
use crate::ipc::sem::op::Pending;
use crate::ipc::sem::{SemSet, Sembuf};
use crate::sync::{
    futex_wake_all, lock, AtomicU64, AtomicUsize, Ordering::AcqRel, Ordering::Acquire,
};
use crate::wait::{Notifier, Waiter};
use std::sync::{Arc, OnceLock, Weak};

/// An operation adopted from a slot's sleeper: queued on `set` as `q`, for process `pid`,
/// whose record has sequence number `seq`.
pub(crate) struct Adopted {
    set: Arc<SemSet>,
    q: Arc<Pending>,
    pid: i32,
    seq: u64,
}

fn code(r: &crate::Result<()>) -> u64 {
    match r {
        Ok(()) => 0,
        Err(e) => e.raw() as u64,
    }
}

/// Writes FINISHED with `code` into the record if it is still the adopted operation `seq`
/// (ADOPTED or CANCELLING), and wakes its sleeper.
pub(super) fn finish(slot: &[AtomicU64], seq: u64, code: u64) {
    let rec = &slot[SLEEPER];
    let mut r = rec.load(Acquire);
    while seq_of(r) == seq && matches!(state_of(r), ADOPTED | CANCELLING) {
        let done = record(FINISHED, pid_of(r), seq, k_of(r), code);
        match rec.compare_exchange(r, done, AcqRel, Acquire) {
            Ok(_) => {
                futex_wake_all(rec);
                return;
            }
            Err(now) => r = now,
        }
    }
}

impl IpcNamespace {
    /// Under slot `idx`'s mutex, at every entry: withdraws an adopted operation whose sleeper
    /// asked for it or is exiting, and forgets one whose record its sleeper has read; then,
    /// after a takeover (`taken`: the set, if it still exists, and the WAITED bits the takeover
    /// found), adopts an armed sleeper or frees an exiting process's record.
    pub(super) fn sem_fast_sleeper(
        &self,
        arena: &Arc<SemArena>,
        idx: u32,
        st: &mut SlotState,
        taken: Option<(Option<&Arc<SemSet>>, u64)>,
    ) {
        let Some((slot, _)) = arena.slot(idx) else {
            return;
        };
        if let Some(a) = st.adopted.take() {
            st.adopted = Self::sem_fast_withdraw(arena, idx, slot, a);
        }
        let Some((set, waited)) = taken else {
            return;
        };
        let rec = &slot[SLEEPER];
        let r = rec.load(Acquire);
        if state_of(r) != WAITING {
            return;
        }
        if lock(&arena.exiting).contains(&(pid_of(r) as i32)) {
            let _ = rec.compare_exchange(r, free(seq_of(r) + 1), AcqRel, Acquire);
        } else if waited & (1 << k_of(r)) != 0 {
            let adopted = record(ADOPTED, pid_of(r), seq_of(r), k_of(r), arg_of(r));
            if rec.compare_exchange(r, adopted, AcqRel, Acquire).is_ok() {
                match set {
                    Some(set) => self.sem_fast_adopt(arena, idx, set, r, st),
                    None => finish(slot, seq_of(r), Errno::EIDRM.raw() as u64),
                }
            }
        }
    }

    /// An adopted operation at an entry into its slot: withdrawn if its sleeper asked for it
    /// (FINISHED written) or is exiting (the record freed); kept (returned) until its sleeper
    /// has read the record.
    fn sem_fast_withdraw(
        arena: &SemArena,
        idx: u32,
        slot: &[AtomicU64],
        a: Adopted,
    ) -> Option<Adopted> {
        let rec = &slot[SLEEPER];
        let r = rec.load(Acquire);
        let ours = seq_of(r) == a.seq && pid_of(r) == a.pid as u32;
        let forget = || lock(&arena.sleepers).retain(|&(p, i)| (p, i) != (a.pid, idx));
        if !ours || !matches!(state_of(r), ADOPTED | CANCELLING | FINISHED) {
            forget();
            return None;
        }
        let dead = lock(&arena.exiting).contains(&a.pid);
        if !dead && state_of(r) != CANCELLING {
            return Some(a);
        }
        // Withdrawn as a sleeper's operation after an interrupt: a completion stands.
        let done = {
            let mut locked = Locked::relock(&a.set, &a.q);
            let done = a.q.waiter.abort();
            if done.is_none() {
                locked.dequeue(&a.q);
            }
            done
        };
        if dead {
            let mut r = r;
            while seq_of(r) == a.seq && pid_of(r) == a.pid as u32 {
                match rec.compare_exchange(r, free(a.seq + 1), AcqRel, Acquire) {
                    Ok(_) => break,
                    Err(now) => r = now,
                }
            }
            forget();
            return None;
        }
        finish(slot, a.seq, done.as_ref().map_or(WITHDRAWN, code));
        Some(a)
    }

    /// Queues armed sleeper `r`'s operation on `set` (first: a published set has no other
    /// waiter), with a notifier that finishes the record when an engine call completes it.
    fn sem_fast_adopt(
        &self,
        arena: &Arc<SemArena>,
        idx: u32,
        set: &Arc<SemSet>,
        r: u64,
        st: &mut SlotState,
    ) {
        let Some((slot, _)) = arena.slot(idx) else {
            return;
        };
        let (k, n, seq, pid) = (k_of(r), arg_of(r), seq_of(r), pid_of(r) as i32);
        if k >= set.nsems() {
            finish(slot, seq, Errno::EFBIG.raw() as u64);
            return;
        }
        let found: Arc<OnceLock<Weak<Waiter<crate::Result<()>>>>> = Arc::default();
        let notifier: Notifier = {
            let (found, arena) = (found.clone(), arena.clone());
            Arc::new(move || {
                let Some(w) = found.get().and_then(Weak::upgrade) else {
                    return;
                };
                if let (Some(res), Some((slot, _))) = (w.take_done(), arena.slot(idx)) {
                    finish(slot, seq, code(&res));
                }
            })
        };
        let waiter = Waiter::with_notifier(Some(notifier));
        let sop = Sembuf {
            sem_num: k as u16,
            sem_op: -(n as i16),
            sem_flg: 0,
        };
        let q = Arc::new(Pending {
            seq: self
                .sem
                .arrivals
                .fetch_add(1, crate::sync::Ordering::Relaxed),
            sops: Box::new([sop]),
            tgid: crate::Tgid::new(pid),
            undo: None,
            alter: n != 0,
            blocking: AtomicUsize::new(0),
            waiter: waiter.clone(),
        });
        let mut locked = set.lock_sem(k);
        if locked.deleted() {
            drop(locked);
            finish(slot, seq, Errno::EIDRM.raw() as u64);
            return;
        }
        locked.enqueue(q.clone());
        drop(locked);
        let _ = found.set(Arc::downgrade(&waiter));
        // Completed before the notifier could find its waiter.
        if let Some(res) = waiter.take_done() {
            finish(slot, seq, code(&res));
        }
        // A sleeper cancelling meanwhile waits for the record to leave WAITING.
        futex_wake_all(&slot[SLEEPER]);
        lock(&arena.sleepers).push((pid, idx));
        st.adopted = Some(Adopted {
            set: set.clone(),
            q,
            pid,
            seq,
        });
    }
}
