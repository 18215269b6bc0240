//! Sleeping on the message fast path, the client's side: a msgrcv that finds nothing it can
//! take sleeps on a futex in its queue's slot, and a fast msgsnd whose message it matches hands
//! the message straight to it (Linux's `pipelined_send`: never queued). ARCHITECTURE.md
//! "Sleeping on the message fast path" has the design and the ordering argument; the daemon's
//! side (adopting an armed sleeper into the engine at a takeover) is `msg::fast_sleep`.
//!
//! A slot has [`RECORDS`] sleeper records after its ring; at most one is *armed* at a time: the
//! slot's `LOCK` has [`WAITED`] and [`WHICH`] names it. The other may still hold a result its
//! sleeper has not read. A record: the record word (state in bits 0-2, sequence number in bits
//! 3-31, pid in bits 32-63; the futex is its low 32 bits), the receive's msgtyp, its buffer
//! size, its flags and thread id, then two mailboxes of [`MBOX_WORDS`] words (code, type,
//! length, text): the *client mailbox*, written by a sender that holds the slot while the
//! record is armed, and the *daemon mailbox*, written only by the daemon while it fills an
//! adopted record ([`FILLING`]).
//!
//! Who writes the record word: the sleeper claims a FREE record (WAITING, next sequence number)
//! under the slot's lock, gives it back (FREE, same number) when its arming fails or its
//! cancel wins, and frees it (FREE, next number) when it has read its result; a sender that
//! handed off marks it HANDED; the daemon adopts it (ADOPTED), fills it (FILLING, FINISHED)
//! and frees the record of an exited process; the sleeper asks for a cancel (ADOPTED to
//! CANCELLING).

use super::{Held, MsgView, LOCK, LOCKED, SLOT_HEADER, SLOW};
use crate::errno::Errno;
use crate::ipc::consts::{MSG_EXCEPT, MSG_NOERROR};
use crate::ipc::msg::store::Selector;
use crate::ipc::sem::fast::Caller;
use crate::sync::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed};
use crate::IpcId;

/// `LOCK`: a sleeper is armed on the slot (record [`WHICH`] names).
pub const WAITED: u64 = 1 << 3;
/// `LOCK`: which record is armed (set: record 1).
pub const WHICH: u64 = 1 << 4;

/// Sleeper records of a slot.
pub const RECORDS: usize = 2;
/// Text words of a mailbox.
#[cfg(not(loom))]
pub const MBOX_TEXT: usize = 1024;
#[cfg(loom)]
pub const MBOX_TEXT: usize = 2;
/// The most bytes a mailbox carries.
pub const MBOX_BYTES: usize = MBOX_TEXT * 8;
/// Words of a mailbox: code, type, length, text.
pub const MBOX_WORDS: usize = 3 + MBOX_TEXT;
/// Record: the record word, msgtyp, buffer size, flags and tid.
pub(crate) const R_WORD: usize = 0;
pub(crate) const R_TYPE: usize = 1;
pub(crate) const R_MAX: usize = 2;
pub(crate) const R_FLAGS: usize = 3;
/// Record: the client mailbox, then the daemon's.
pub(crate) const R_CMBOX: usize = 4;
pub(crate) const R_DMBOX: usize = R_CMBOX + MBOX_WORDS;
/// Words of a record.
pub const RECORD_WORDS: usize = R_DMBOX + MBOX_WORDS;
/// Where the records start in a slot (after the ring).
pub(crate) const SLEEP_AT: usize = SLOT_HEADER + super::DATA_WORDS;

/// `R_FLAGS` bits.
const F_EXCEPT: u64 = 1;
const F_NOERROR: u64 = 2;

/// Record states.
pub(crate) const FREE: u64 = 0;
pub(crate) const WAITING: u64 = 1;
pub(crate) const HANDED: u64 = 2;
pub(crate) const ADOPTED: u64 = 3;
pub(crate) const CANCELLING: u64 = 4;
pub(crate) const FILLING: u64 = 5;
pub(crate) const FINISHED: u64 = 6;

/// Mailbox codes besides 0 (a message) and an errno.
pub(crate) const RETRY: u64 = 0x7ffe;
pub(crate) const WITHDRAWN: u64 = 0x7fff;

const SEQ_MASK: u64 = (1 << 29) - 1;

/// A record word from its parts.
pub(crate) const fn record(state: u64, seq: u64, pid: u32) -> u64 {
    state | (seq & SEQ_MASK) << 3 | (pid as u64) << 32
}
pub(crate) const fn state_of(r: u64) -> u64 {
    r & 7
}
pub(crate) const fn seq_of(r: u64) -> u64 {
    (r >> 3) & SEQ_MASK
}
pub(crate) const fn pid_of(r: u64) -> u32 {
    (r >> 32) as u32
}
pub(crate) const fn free(seq: u64) -> u64 {
    record(FREE, seq, 0)
}

/// Record `j` of `slot`.
pub(crate) fn rec(slot: &[AtomicU64], j: usize) -> &[AtomicU64] {
    let at = SLEEP_AT + j * RECORD_WORDS;
    &slot[at..at + RECORD_WORDS]
}

/// The armed record under `LOCK` value `l`.
pub(crate) fn armed(l: u64) -> Option<usize> {
    (l & WAITED != 0).then_some(usize::from(l & WHICH != 0))
}

/// An armed sleeper's receive: what it selects, its buffer (`i64::MAX` with MSG_NOERROR, as
/// the engine's sleeping receivers) and its thread id.
pub(crate) struct Wanted {
    pub(crate) selector: Selector,
    pub(crate) max_size: i64,
    /// The buffer's size (a message is cut to it with MSG_NOERROR).
    pub(crate) buf: i64,
    pub(crate) tid: i32,
}

/// The receive record `r` waits for.
pub(crate) fn wanted(r: &[AtomicU64]) -> Wanted {
    let flags = r[R_FLAGS].load(Relaxed);
    let msgtyp = r[R_TYPE].load(Relaxed) as i64;
    Wanted {
        selector: Selector::from_call(msgtyp, false, flags & F_EXCEPT != 0),
        max_size: if flags & F_NOERROR != 0 {
            i64::MAX
        } else {
            r[R_MAX].load(Relaxed) as i64
        },
        buf: r[R_MAX].load(Relaxed) as i64,
        tid: (flags >> 32) as i32,
    }
}

/// Writes a mailbox: `code`, and with code 0 the type and `text`'s first `n` bytes.
pub(crate) fn post(mbox: &[AtomicU64], code: u64, mtype: i64, text: &[u8]) {
    let n = text.len().min(MBOX_BYTES);
    mbox[0].store(code, Relaxed);
    mbox[1].store(mtype as u64, Relaxed);
    mbox[2].store(n as u64, Relaxed);
    super::store_text(&mbox[3..3 + n.div_ceil(8)], &[], &text[..n]);
}

/// A sleeper's own record: which queue and record, its sequence number and pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub(crate) msqid: IpcId,
    pub(crate) j: usize,
    pub(crate) seq: u64,
    pub(crate) pid: u32,
}

/// What a msgrcv that may sleep came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recv {
    /// Done here; the bytes delivered.
    Done(Result<usize, Errno>),
    /// The daemon must serve the call.
    Slow,
    /// Armed: sleep on [`super::MsgView::sleeper_word`] while [`super::MsgView::wait_state`]
    /// says so, then [`super::MsgView::collect`].
    Armed(Ticket),
}

/// A sleeper's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Still waiting: FUTEX_WAIT on the record with this value.
    Sleep(u32),
    /// A result waits: collect it.
    Ready,
}

/// What a sleeper's cancel (a signal handler ran) came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Withdrawn: EINTR.
    Cancelled,
    /// A result came first: collect it.
    Ready,
    /// The daemon holds the receive: make a daemon call on the queue, then cancel again.
    AskDaemon,
    /// The daemon is taking the queue back or filling the record: wait a little, try again.
    Retry,
}

/// What a collected result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    /// The call's result: bytes delivered, or the errno.
    Done(Result<usize, Errno>),
    /// Look again: make the call anew (IPC_SET woke the receiver, as Linux's
    /// `expunge_all(-EAGAIN)`, or its message did not fit a mailbox).
    Again,
}

/// Claims a free record and arms it for a receive of `msgtyp`, `maxsize`, `flags` by `who`
/// (thread `tid`), on the held slot in which nothing matched: `Armed`, or `Slow` (another
/// sleeper is armed, no record is free, or the daemon took the queue back).
pub(super) fn arm(
    held: Held<'_>,
    msqid: IpcId,
    (msgtyp, maxsize, flags): (i64, i64, i32),
    who: &dyn Caller,
    tid: u32,
) -> Recv {
    let slot = held.slot;
    if held.before & WAITED != 0 {
        held.release();
        return Recv::Slow;
    }
    let pid = who.pid();
    for j in 0..RECORDS {
        let r = rec(slot, j);
        let w = r[R_WORD].load(Acquire);
        if state_of(w) != FREE {
            continue;
        }
        let t = (seq_of(w) + 1) & SEQ_MASK;
        if r[R_WORD]
            .compare_exchange(w, record(WAITING, t, pid), AcqRel, Acquire)
            .is_err()
        {
            continue;
        }
        let mut f = u64::from(tid) << 32;
        if flags & MSG_EXCEPT != 0 {
            f |= F_EXCEPT;
        }
        if flags & MSG_NOERROR != 0 {
            f |= F_NOERROR;
        }
        r[R_TYPE].store(msgtyp as u64, Relaxed);
        r[R_MAX].store(maxsize as u64, Relaxed);
        r[R_FLAGS].store(f, Relaxed);
        let which = if j == 1 { WHICH } else { 0 };
        // AcqRel: the record and its receive, written before, are the armed sleeper's for
        // every sender that takes the slot after this.
        let armed = held.before | WAITED | which;
        if slot[LOCK]
            .compare_exchange(held.locked, armed, AcqRel, Relaxed)
            .is_ok()
        {
            return Recv::Armed(Ticket {
                msqid,
                j,
                seq: t,
                pid,
            });
        }
        // The daemon took the queue back: nobody read the record, which is still ours.
        r[R_WORD].store(free(t), crate::sync::Ordering::Release);
        slot[LOCK].fetch_and(!LOCKED, AcqRel);
        return Recv::Slow;
    }
    held.release();
    Recv::Slow
}

/// A sender's offer of its message to the slot's armed sleeper.
pub(super) enum Offer {
    /// Nobody armed, or the sleeper does not match: queue the message.
    Queue,
    /// The sleeper matches but its buffer is too small: E2BIG to record `j` (whose record
    /// word was `word`), queue the message.
    TooBig { j: usize, word: u64 },
    /// Hand `n` bytes (the text, cut to the buffer with MSG_NOERROR) to record `j` (whose
    /// record word was `word`), thread `tid` of process `pid`.
    Deliver {
        j: usize,
        word: u64,
        n: usize,
        tid: i32,
        pid: u32,
    },
}

/// What the holder of a slot whose `LOCK` value before it was `before` does with a message of
/// type `mtype` and `len` bytes.
pub(super) fn offer(slot: &[AtomicU64], before: u64, mtype: i64, len: usize) -> Option<Offer> {
    let Some(j) = armed(before) else {
        return Some(Offer::Queue);
    };
    let r = rec(slot, j);
    let w = r[R_WORD].load(Acquire);
    if state_of(w) != WAITING {
        return None; // a record armed is WAITING: not so, the daemon decides
    }
    let want = wanted(r);
    if !want.selector.matches(mtype) {
        return Some(Offer::Queue);
    }
    if want.max_size < len as i64 {
        return Some(Offer::TooBig { j, word: w });
    }
    let n = len.min(usize::try_from(want.buf).unwrap_or(usize::MAX));
    Some(Offer::Deliver {
        j,
        word: w,
        n,
        tid: want.tid,
        pid: pid_of(w),
    })
}

/// After the commit that disarmed record `j` (the hand-off to the arming whose record word
/// was `armed`): marks it HANDED unless its sleeper already read it, and wakes the sleeper.
///
/// Only from that very word: once the commit disarmed the record, its sleeper may read the
/// result, free the record and arm it again (a new sequence number, WAITING) before this
/// runs, and that new arming has no result.
pub(super) fn handed(slot: &[AtomicU64], j: usize, armed: u64, who: &dyn Caller) {
    let word = &rec(slot, j)[R_WORD];
    let done = record(HANDED, seq_of(armed), pid_of(armed));
    let _ = word.compare_exchange(armed, done, AcqRel, Acquire);
    who.wake(word);
}

/// Whether record `t` is still armed in `LOCK` value `l`.
pub(super) fn still_armed(l: u64, t: &Ticket) -> bool {
    armed(l) == Some(t.j)
}

/// Reads the result of `t` from mailbox `mbox` and hands a message to `deliver`.
pub(super) fn read_mbox(mbox: &[AtomicU64], deliver: &mut super::Deliver<'_>) -> Got {
    match mbox[0].load(Relaxed) {
        0 => {
            let mtype = mbox[1].load(Relaxed) as i64;
            let n = (mbox[2].load(Relaxed) as usize).min(MBOX_BYTES);
            let words = &mbox[3..3 + n.div_ceil(8)];
            Got::Done(deliver(mtype, n, words, &[]).map(|()| n))
        }
        RETRY => Got::Again,
        WITHDRAWN => Got::Done(Err(Errno::EINTR)),
        e => Got::Done(Err(Errno::from_raw(e as i32))),
    }
}

impl MsgView<'_> {
    fn record_of(&self, t: &Ticket) -> &[AtomicU64] {
        rec(self.slot(t.msqid).expect("a ticket names a slot"), t.j)
    }

    /// The record word of `t` (the futex).
    pub fn sleeper_word(&self, t: &Ticket) -> &AtomicU64 {
        &self.record_of(t)[R_WORD]
    }

    /// Where sleeper `t` stands.
    pub fn wait_state(&self, t: &Ticket) -> Wait {
        let Some(slot) = self.slot(t.msqid) else {
            return Wait::Ready;
        };
        let w = rec(slot, t.j)[R_WORD].load(Acquire);
        if seq_of(w) != t.seq || pid_of(w) != t.pid {
            return Wait::Ready;
        }
        match state_of(w) {
            // Armed until a hand-off's commit disarms it (the sender marks it HANDED after).
            WAITING if still_armed(slot[LOCK].load(Acquire), t) => Wait::Sleep(w as u32),
            ADOPTED | CANCELLING | FILLING => Wait::Sleep(w as u32),
            _ => Wait::Ready,
        }
    }

    /// Ends sleeper `t`'s wait (a signal handler ran): exactly one of this and a hand-off (or
    /// the engine's completion, once adopted) wins.
    pub fn cancel(&self, t: &Ticket) -> Cancel {
        let Some(slot) = self.slot(t.msqid) else {
            return Cancel::Ready;
        };
        let word = &rec(slot, t.j)[R_WORD];
        let w = word.load(Acquire);
        if seq_of(w) != t.seq || pid_of(w) != t.pid {
            return Cancel::Ready;
        }
        match state_of(w) {
            WAITING => {
                let l = slot[LOCK].load(Acquire);
                if !still_armed(l, t) {
                    return Cancel::Ready;
                }
                if l & SLOW != 0 {
                    return Cancel::Retry; // the daemon adopts it
                }
                // Also from a held value: the holder's commit then fails and it asks the
                // daemon; a hand-off to us can only commit by this same word.
                if slot[LOCK]
                    .compare_exchange(l, l & !(WAITED | WHICH), AcqRel, Acquire)
                    .is_err()
                {
                    return Cancel::Retry;
                }
                word.store(free(t.seq), crate::sync::Ordering::Release);
                Cancel::Cancelled
            }
            ADOPTED => {
                let asked = record(CANCELLING, t.seq, t.pid);
                match word.compare_exchange(w, asked, AcqRel, Acquire) {
                    Ok(_) => Cancel::AskDaemon,
                    Err(_) => Cancel::Retry,
                }
            }
            CANCELLING => Cancel::AskDaemon,
            FILLING => Cancel::Retry,
            _ => Cancel::Ready,
        }
    }

    /// Reads sleeper `t`'s result (once [`MsgView::wait_state`] or [`MsgView::cancel`] said
    /// it is ready): a message goes to `deliver`; then frees the record.
    pub fn collect(&self, t: &Ticket, deliver: &mut super::Deliver<'_>) -> Got {
        let Some(slot) = self.slot(t.msqid) else {
            return Got::Again;
        };
        let r = rec(slot, t.j);
        let mut w = r[R_WORD].load(Acquire);
        let got = match state_of(w) {
            _ if seq_of(w) != t.seq || pid_of(w) != t.pid => return Got::Again,
            WAITING | HANDED => read_mbox(&r[R_CMBOX..R_DMBOX], deliver),
            FINISHED => read_mbox(&r[R_DMBOX..], deliver),
            _ => return Got::Again,
        };
        while seq_of(w) == t.seq && matches!(state_of(w), WAITING | HANDED | FINISHED) {
            match r[R_WORD].compare_exchange(w, free(t.seq + 1), AcqRel, Acquire) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        got
    }
}
