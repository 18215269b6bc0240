//! Sleeping on the fast path, the client's side: one sleeper per slot, published in the
//! slot's record (`SLEEPER`, header word 7) and armed by [`WAITED`] on its semaphore's word;
//! a waker whose operation makes the sleeper's possible performs both in one CAS (Linux's
//! hand-off in `update_queue`). ARCHITECTURE.md, "Sleeping on the fast path", has the design
//! and the ordering argument; the daemon's side (adopting an armed sleeper into the engine
//! when it takes the set back) is `adopt`.
//!
//! The record: state in bits 0-2 ([`FREE`], [`WAITING`], [`ADOPTED`], [`CANCELLING`],
//! [`FINISHED`]), pid in bits 3-24, a sequence number in bits 25-42, the semaphore in bits
//! 43-48, and in bits 49-63 the amount the sleeper takes (0: it waits for zero) or, once
//! FINISHED, its errno (0: success; [`WITHDRAWN`]: cancelled at the sleeper's request). The
//! futex is the record's low 32 bits.
//!
//! Who writes it: the sleeper claims a FREE record (WAITING with the next sequence number),
//! gives it back (FREE, same number) when its arming or its cancel wins, and frees a FINISHED
//! one (FREE, next number) when it reads it; a waker that handed off frees it (FREE, next
//! number); the daemon adopts it (ADOPTED), finishes it (FINISHED) and frees the record of an
//! exited process; the sleeper asks for a cancel (ADOPTED to CANCELLING). So a live sleeper
//! that finds another sequence number than its own was handed off.

use super::{epoch_of, word, ArenaView, Caller, Fast, HEADER_WORDS, SEM_UNDO, SLOW, WAITED};
use crate::errno::Errno;
use crate::ipc::sem::Sembuf;
use crate::sync::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};
use crate::IpcId;

/// Header: the slot's sleeper record.
pub(crate) const SLEEPER: usize = 7;
/// No sleeper.
pub(crate) const FREE: u64 = 0;
/// A client sleeps; armed once its semaphore's word has [`WAITED`].
pub(crate) const WAITING: u64 = 1;
/// The daemon queued the sleeper's operation in the engine.
pub(crate) const ADOPTED: u64 = 2;
/// The sleeper of an adopted operation asks the daemon to withdraw it.
pub(crate) const CANCELLING: u64 = 3;
/// The daemon's engine finished the adopted operation; the errno waits for the sleeper.
pub(crate) const FINISHED: u64 = 4;
/// FINISHED's code for an operation withdrawn at the sleeper's request.
pub(crate) const WITHDRAWN: u64 = 0x7fff;

const STATE_MASK: u64 = 7;
const PID_SHIFT: u32 = 3;
const SEQ_SHIFT: u32 = 25;
const SEQ_MASK: u64 = (1 << 18) - 1;
const K_SHIFT: u32 = 43;
const ARG_SHIFT: u32 = 49;
const ARG_MASK: u64 = (1 << 15) - 1;

/// A record from its parts.
pub(crate) const fn record(state: u64, pid: u32, seq: u64, k: usize, arg: u64) -> u64 {
    state
        | ((pid as u64) & super::PID_MASK) << PID_SHIFT
        | (seq & SEQ_MASK) << SEQ_SHIFT
        | (k as u64 & 63) << K_SHIFT
        | (arg & ARG_MASK) << ARG_SHIFT
}

/// A FREE record with sequence number `seq`.
pub(crate) const fn free(seq: u64) -> u64 {
    record(FREE, 0, seq, 0, 0)
}

pub(crate) const fn state_of(r: u64) -> u64 {
    r & STATE_MASK
}
pub(crate) const fn pid_of(r: u64) -> u32 {
    ((r >> PID_SHIFT) & super::PID_MASK) as u32
}
pub(crate) const fn seq_of(r: u64) -> u64 {
    (r >> SEQ_SHIFT) & SEQ_MASK
}
pub(crate) const fn k_of(r: u64) -> usize {
    ((r >> K_SHIFT) & 63) as usize
}
pub(crate) const fn arg_of(r: u64) -> u64 {
    (r >> ARG_SHIFT) & ARG_MASK
}

/// A sleeper's own record: which set and semaphore, its sequence number and pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    semid: IpcId,
    k: usize,
    seq: u64,
    pid: u32,
}

/// What a semop that may sleep came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sleep {
    /// Done here (including a hand-off to a sleeper).
    Done(Result<(), Errno>),
    /// The daemon must serve the call.
    Slow,
    /// Armed: sleep on [`ArenaView::sleeper_word`] while [`ArenaView::wait_state`] says so.
    Armed(Ticket),
}

/// A sleeper's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Still waiting: FUTEX_WAIT on the record with this value.
    Sleep(u32),
    /// The call's result.
    Done(Result<(), Errno>),
}

/// What a sleeper's cancel (a signal, its timeout) came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Withdrawn: the call fails with EINTR or EAGAIN, as the reason says.
    Cancelled,
    /// The operation was performed (or failed) first: this is the call's result.
    Done(Result<(), Errno>),
    /// The daemon holds the operation: make a daemon call on the set, then cancel again.
    AskDaemon,
    /// The daemon is taking the set back: wait a little on the record, then cancel again.
    Retry,
}

/// What a waker writes when the word is WAITED: the new word and the record it handed off.
pub(super) type Handoff = (u64, Option<u64>);

impl ArenaView<'_> {
    /// The record of `t`'s slot (the futex).
    pub fn sleeper_word(&self, t: &Ticket) -> &AtomicU64 {
        &self.slot(t.semid).expect("a ticket names a slot")[SLEEPER]
    }

    /// A single-sop semop that sleeps here if it must wait (no IPC_NOWAIT, no SEM_UNDO, no
    /// other waiter on the set), else as [`ArenaView::semop`].
    pub fn semop_sleep(&self, semid: i32, sop: Sembuf, who: &dyn Caller) -> Sleep {
        if sop.sem_flg & SEM_UNDO != 0 {
            return match self.semop(semid, sop, who) {
                Fast::Done(r) => Sleep::Done(r),
                Fast::Slow => Sleep::Slow,
            };
        }
        self.plain(IpcId::new(semid), sop, who, true)
    }

    /// Claims the record and arms the word `w` of semaphore `k` (whose value makes `sop`
    /// wait): `Some(Ok)` armed, `Some(Err)` the word moved (look again), `None` the daemon.
    pub(super) fn arm(
        slot: &[AtomicU64],
        semid: IpcId,
        k: usize,
        w: u64,
        sop: Sembuf,
        who: &dyn Caller,
    ) -> Option<Result<Ticket, ()>> {
        if w & WAITED != 0 || sop.sem_flg & SEM_UNDO != 0 || sop.sem_op == i16::MIN {
            return None;
        }
        let rec = &slot[SLEEPER];
        let r = rec.load(Acquire);
        if state_of(r) != FREE {
            return None;
        }
        let t = (seq_of(r) + 1) & SEQ_MASK;
        let n = (-i32::from(sop.sem_op)) as u64;
        let mine = record(WAITING, who.pid(), t, k, n);
        if rec.compare_exchange(r, mine, AcqRel, Acquire).is_err() {
            return None;
        }
        match slot[HEADER_WORDS + k].compare_exchange(w, w | WAITED, AcqRel, Acquire) {
            Ok(_) => Some(Ok(Ticket {
                semid,
                k,
                seq: t,
                pid: who.pid(),
            })),
            Err(now) => {
                // Nobody writes a WAITING record whose word is not WAITED but its sleeper.
                rec.store(free(t), Release);
                if now & SLOW != 0 {
                    None
                } else {
                    Some(Err(()))
                }
            }
        }
    }

    /// A waker's operation on a WAITED word `w` of semaphore `k`, whose own result is `result`:
    /// the word to write (the sleeper's operation performed too if the result allows it and
    /// the sleeper lives, WAITED kept otherwise) and the record handed off; `None`: the daemon.
    pub(super) fn handoff(
        slot: &[AtomicU64],
        k: usize,
        w: u64,
        result: u64,
        sop: Sembuf,
        who: &dyn Caller,
    ) -> Option<Handoff> {
        let r = slot[SLEEPER].load(Acquire);
        if state_of(r) != WAITING || k_of(r) != k {
            return None;
        }
        let mine = word(result, u64::from(who.pid()), epoch_of(w), false) | WAITED;
        if sop.sem_op == 0 {
            return Some((mine, None));
        }
        let n = arg_of(r);
        let proceeds = if n == 0 { result == 0 } else { result >= n };
        if !proceeds {
            return Some((mine, None));
        }
        if !who.alive(pid_of(r)) {
            return None; // the daemon applies the sleeper's exit first
        }
        let handed = word(result - n, u64::from(pid_of(r)), epoch_of(w), false);
        Some((handed, Some(r)))
    }

    /// After a successful hand-off CAS: frees the record (unless the sleeper did) and wakes
    /// the sleeper.
    pub(super) fn handed(slot: &[AtomicU64], r: u64, who: &dyn Caller) {
        let rec = &slot[SLEEPER];
        let _ = rec.compare_exchange(r, free(seq_of(r) + 1), AcqRel, Acquire);
        who.wake(rec);
    }

    /// GETNCNT (`zero` false) or GETZCNT of semaphore `k` whose word `w` is WAITED: the
    /// sleeper counts if it takes (or waits for zero).
    pub(super) fn sleeper_count(slot: &[AtomicU64], k: usize, w: u64, zero: bool) -> i32 {
        if w & WAITED == 0 {
            return 0;
        }
        let r = slot[SLEEPER].load(Acquire);
        if state_of(r) != WAITING || k_of(r) != k {
            return 0;
        }
        i32::from((arg_of(r) == 0) == zero)
    }

    /// Whether `r` (still WAITING and ours) was handed off: the word lost WAITED while the
    /// record, read again after it, is unchanged; then frees the record (the waker may not
    /// have yet). `None`: the record changed, look again.
    fn handed_off(&self, t: &Ticket, r: u64) -> Option<bool> {
        let slot = self.slot(t.semid)?;
        let w = slot[HEADER_WORDS + t.k].load(Acquire);
        if w & WAITED != 0 {
            return Some(false);
        }
        let rec = &slot[SLEEPER];
        if rec.load(Acquire) != r {
            return None;
        }
        let _ = rec.compare_exchange(r, free(t.seq + 1), AcqRel, Acquire);
        Some(true)
    }

    /// Reads a FINISHED record `r` of ours and frees it: the errno the daemon left.
    fn collect(&self, t: &Ticket, r: u64) -> Result<(), u64> {
        let rec = self.sleeper_word(t);
        let _ = rec.compare_exchange(r, free(t.seq + 1), AcqRel, Acquire);
        match arg_of(r) {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Where sleeper `t` stands.
    pub fn wait_state(&self, t: &Ticket) -> Wait {
        let rec = self.sleeper_word(t);
        loop {
            let r = rec.load(Acquire);
            if seq_of(r) != t.seq || pid_of(r) != t.pid {
                return Wait::Done(Ok(()));
            }
            match state_of(r) {
                WAITING => match self.handed_off(t, r) {
                    Some(true) => return Wait::Done(Ok(())),
                    Some(false) => return Wait::Sleep(r as u32),
                    None => continue,
                },
                FINISHED => {
                    return Wait::Done(self.collect(t, r).map_err(|e| match e {
                        WITHDRAWN => Errno::EINTR,
                        e => Errno::from_raw(e as i32),
                    }))
                }
                ADOPTED | CANCELLING => return Wait::Sleep(r as u32),
                _ => return Wait::Done(Ok(())),
            }
        }
    }

    /// Ends sleeper `t`'s wait early: exactly one of this and a hand-off (or the engine's
    /// completion, once adopted) wins.
    pub fn cancel(&self, t: &Ticket) -> Cancel {
        let rec = self.sleeper_word(t);
        let r = rec.load(Acquire);
        if seq_of(r) != t.seq || pid_of(r) != t.pid {
            return Cancel::Done(Ok(()));
        }
        match state_of(r) {
            WAITING => {
                let Some(slot) = self.slot(t.semid) else {
                    return Cancel::Retry;
                };
                let cell = &slot[HEADER_WORDS + t.k];
                let w = cell.load(Acquire);
                if w & WAITED == 0 {
                    return match self.handed_off(t, r) {
                        Some(true) => Cancel::Done(Ok(())),
                        _ => Cancel::Retry,
                    };
                }
                if w & SLOW != 0 {
                    return Cancel::Retry; // the daemon adopts it
                }
                if cell
                    .compare_exchange(w, w & !WAITED, AcqRel, Acquire)
                    .is_err()
                {
                    return Cancel::Retry;
                }
                rec.store(free(t.seq), Release);
                Cancel::Cancelled
            }
            ADOPTED => {
                let asked = record(CANCELLING, t.pid, t.seq, t.k, arg_of(r));
                match rec.compare_exchange(r, asked, AcqRel, Acquire) {
                    Ok(_) => Cancel::AskDaemon,
                    Err(_) => Cancel::Retry,
                }
            }
            CANCELLING => Cancel::AskDaemon,
            FINISHED => match self.collect(t, r) {
                Ok(()) => Cancel::Done(Ok(())),
                Err(WITHDRAWN) => Cancel::Cancelled,
                Err(e) => Cancel::Done(Err(Errno::from_raw(e as i32))),
            },
            _ => Cancel::Done(Ok(())),
        }
    }
}
