//! The message queue fast path: queues published in memory shared with the clients.
//!
//! ARCHITECTURE.md ("The message queue fast path") has the design and the ordering argument;
//! this module is the layout and the client's operations ([`MsgView`]), [`owner`] the daemon's
//! side (taking a queue back before the engine touches it, publishing it again afterwards).
//!
//! Layout ([`REGION_WORDS`] `AtomicU64`s, after the key table in the fast path's memfd):
//! [`REGION_HEADER`] words (`MSGMAX`), then [`MSG_SLOTS`] slots of [`SLOT_WORDS`] words, the
//! queue of index `i` in slot `i % MSG_SLOTS`. A slot: `LOCK`, `IDENT`, `MODE`, `UID_GID`,
//! `CUID_CGID`, `QBYTES`, two copies of the queue's counters (`META`: a word per field of
//! `Meta`, `head`, `tail`, `qnum`, `cbytes`, `lspid`, `lrpid`, `stime`, `rtime`; `LOCK`'s
//! [`CUR`] bit says which one is in force), then [`DATA_WORDS`] words of ring. A message in the ring is a record of words at
//! ring positions `p, p+1, ...` (modulo `DATA_WORDS`): its type, its length in bytes, then its
//! text. `head` and `tail` count words from the publish on; the records lie between them.
//!
//! The lock protocol: a client takes `LOCK` by one CAS from a value without [`LOCKED`] or
//! [`SLOW`] to one with `LOCKED` and its pid, works on the ring and the copy of the counters
//! not in force, and commits by one CAS that flips `CUR` and clears `LOCKED` (or gives the
//! lock back unchanged). The daemon takes a queue back with `fetch_or(SLOW)`: the copy `CUR`
//! named then is the queue, and a holder's commit fails from then on. The daemon never waits
//! for a holder and never writes a slot whose `LOCK` has `LOCKED` set (a holder may still
//! write its ring and spare counters); a holder that fails to commit clears `LOCKED` itself,
//! a dead holder's `LOCKED` is cleared by the daemon at its exit or exec. Nothing a client
//! wrote is trusted: every position and length the daemon reads is bounded.

pub mod owner;
mod ring;
pub(crate) mod sleep;
pub use ring::DATA_WORDS;
pub use sleep::{Cancel, Got, Recv, Ticket, Wait, WAITED, WHICH};

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, loom))]
mod loom_sleep;
#[cfg(all(test, not(loom)))]
mod tests;
#[cfg(all(test, not(loom)))]
mod tests_sleep;

use super::store::Selector;
use crate::errno::Errno;
use crate::ipc::consts::{IPC_NOWAIT, MSG_COPY, MSG_EXCEPT, MSG_NOERROR};
use crate::ipc::sem::fast::{grants, Caller, Fast};
use crate::ipc::shared_words::Slots;
use crate::sync::{load_while, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed};
use crate::IpcId;
use ring::select;
pub(crate) use ring::{load_text, records, store_text, Meta};
pub(crate) use ring::{pieces, record_words};
use sleep::Offer;

/// Slots of the region: a queue of index `i` may be published in slot `i % MSG_SLOTS`.
#[cfg(not(loom))]
pub const MSG_SLOTS: usize = 256;
/// One small slot under the model checker.
#[cfg(loom)]
pub const MSG_SLOTS: usize = 1;
/// Region header words (`MSGMAX`).
pub const REGION_HEADER: usize = 8;
/// Header and counter words of a slot.
pub const SLOT_HEADER: usize = 32;
/// Words of one slot: header and counters, ring, sleeper records.
pub const SLOT_WORDS: usize = SLOT_HEADER + DATA_WORDS + sleep::RECORDS * sleep::RECORD_WORDS;
/// Words of the whole region.
pub const REGION_WORDS: usize = REGION_HEADER + MSG_SLOTS * SLOT_WORDS;
/// Bytes of the whole region.
pub const REGION_BYTES: usize = REGION_WORDS * 8;
/// Where the region starts in the fast path's memfd: right after the key table.
pub const OFFSET: usize = crate::ipc::keytable::END;
/// The length of the fast path's memfd: the semaphore arena, the key table, then this region.
pub const MAPPING_BYTES: usize = OFFSET + REGION_BYTES;

/// Region header: the namespace's msgmax.
pub(crate) const MSGMAX: usize = 0;

/// Slot: the lock word ([`CUR`], [`LOCKED`], [`SLOW`], holder pid, epoch).
pub(crate) const LOCK: usize = 0;
/// Slot: [`PUBLISHED`] and the queue's id while published.
pub(crate) const IDENT: usize = 1;
/// Slot: the queue's mode.
pub(crate) const MODE: usize = 2;
/// Slot: uid (bits 0-31), gid (bits 32-63).
pub(crate) const UID_GID: usize = 3;
/// Slot: cuid, cgid.
pub(crate) const CUID_CGID: usize = 4;
/// Slot: msg_qbytes.
pub(crate) const QBYTES: usize = 5;
/// `LOCK`: which copy of the counters is in force.
pub const CUR: u64 = 1;
/// `LOCK`: a client holds the slot.
pub const LOCKED: u64 = 1 << 1;
/// `LOCK`: the daemon holds the queue; no client may take the slot.
pub const SLOW: u64 = 1 << 2;
const HOLDER_SHIFT: u32 = 8;
const HOLDER_MASK: u64 = (1 << 24) - 1;
pub(crate) const EPOCH_SHIFT: u32 = 32;
/// `IDENT`'s "published" bit.
pub(crate) const PUBLISHED: u64 = 1 << 32;

/// How many times a client retries a lost CAS on `LOCK` before it asks the daemon.
const RETRIES: usize = 3;
/// How many times a client reloads a held `LOCK` before it asks the daemon.
#[cfg(not(loom))]
const LOCKED_SPINS: usize = 200;
#[cfg(loom)]
const LOCKED_SPINS: usize = 1;

/// The holder pid in a `LOCK` value.
pub(crate) const fn holder_of(l: u64) -> u64 {
    (l >> HOLDER_SHIFT) & HOLDER_MASK
}

/// A client's view of the region.
pub struct MsgView<'a> {
    words: &'a [AtomicU64],
}

/// Where a held slot came from: the `LOCK` value before the client took it.
struct Held<'a> {
    slot: &'a [AtomicU64],
    before: u64,
    locked: u64,
}

impl Held<'_> {
    /// Gives the slot back unchanged (nothing happened).
    fn release(self) {
        // AcqRel: the daemon's next publish or takeover reads after our writes.
        if self.slot[LOCK]
            .compare_exchange(self.locked, self.before, AcqRel, Relaxed)
            .is_err()
        {
            self.slot[LOCK].fetch_and(!LOCKED, AcqRel);
        }
    }

    /// Makes the spare counters `m` the queue's: `true` if committed; else the daemon took
    /// the queue back meanwhile, nothing happened, and the slot is let go.
    fn commit(self, m: &Meta) -> bool {
        self.commit_clearing(m, 0)
    }

    /// [`Held::commit`] that also clears `clear` (the armed sleeper a hand-off served).
    fn commit_clearing(self, m: &Meta, clear: u64) -> bool {
        m.store(self.slot, spare(self.before));
        // AcqRel: the ring, the spare counters and a mailbox written before it are the
        // commit's.
        let next = (self.before ^ CUR) & !clear;
        if self.slot[LOCK]
            .compare_exchange(self.locked, next, AcqRel, Relaxed)
            .is_ok()
        {
            return true;
        }
        self.slot[LOCK].fetch_and(!LOCKED, AcqRel);
        false
    }
}

/// Slot `i`'s words in the region `words`, `None` if the region ends before it does.
pub(crate) fn slot_words(words: &[AtomicU64], i: usize) -> Option<&[AtomicU64]> {
    Slots::<SLOT_WORDS>::new(words.get(REGION_HEADER..)?).get(i)
}

/// The copy of the counters not in force under `LOCK` value `l`.
fn spare(l: u64) -> usize {
    ((l & CUR) ^ 1) as usize
}

/// What [`MsgView::msgrcv`] hands the caller's copy: the type, the bytes to copy (the
/// message's length, or less with MSG_NOERROR) and the ring words holding the text, in two
/// pieces.
pub type Deliver<'f> = dyn FnMut(i64, usize, &[AtomicU64], &[AtomicU64]) -> Result<(), Errno> + 'f;

/// What [`MsgView::msgsnd`] asks the caller to write: the text into these ring words.
pub type Fill<'f> = dyn FnMut(&[AtomicU64], &[AtomicU64]) -> bool + 'f;

impl<'a> MsgView<'a> {
    /// A view of `words` (a whole region).
    pub fn new(words: &'a [AtomicU64]) -> MsgView<'a> {
        MsgView { words }
    }

    /// The slot a queue of id `id` is published in, if the region reaches it.
    pub(crate) fn slot(&self, id: IpcId) -> Option<&'a [AtomicU64]> {
        let id = usize::try_from(id.get()).ok()?;
        // The queue's index is its id's low 15 bits (the layout without ipcmni_extend; an
        // extended id lands in a slot whose IDENT names another id, and goes to the daemon).
        slot_words(self.words, (id & 0x7fff) % MSG_SLOTS)
    }

    /// Takes `id`'s slot if the queue is published there and `perm` (4 read, 2 write) is
    /// granted without the daemon's help; `None` if the daemon decides.
    fn acquire(&self, id: IpcId, perm: u32, who: &dyn Caller) -> Option<Held<'a>> {
        let slot = self.slot(id)?;
        for _ in 0..RETRIES {
            let busy = |l: u64| l & LOCKED != 0 && l & SLOW == 0;
            let l = load_while(&slot[LOCK], busy, LOCKED_SPINS, 16);
            if l & (SLOW | LOCKED) != 0 {
                return None;
            }
            if slot[IDENT].load(Acquire) != PUBLISHED | u64::from(id.get() as u32) {
                return None;
            }
            let mode = slot[MODE].load(Acquire) as u32;
            if !grants(mode, perm, &slot[UID_GID], &slot[CUID_CGID], who) {
                return None;
            }
            let locked = l | LOCKED | (u64::from(who.pid()) & HOLDER_MASK) << HOLDER_SHIFT;
            // AcqRel: reads the last commit (its counters and ring), and the header checked
            // above is the one in force at this CAS (the daemon's fetch_or(SLOW) comes before
            // any header change).
            if slot[LOCK]
                .compare_exchange(l, locked, AcqRel, Relaxed)
                .is_ok()
            {
                return Some(Held {
                    slot,
                    before: l,
                    locked,
                });
            }
        }
        None
    }

    /// msgsnd(2) of a message of type `mtype` and `len` bytes whose text `fill` writes: done
    /// here when the queue is published, has room and the caller may write it; EAGAIN with
    /// IPC_NOWAIT when it has no room. `Slow` for everything else (errors the daemon gives in
    /// Linux's order, a sender that would sleep, a text `fill` could not read).
    pub fn msgsnd(
        &self,
        msqid: i32,
        mtype: i64,
        len: usize,
        flags: i32,
        who: &dyn Caller,
        fill: &mut Fill<'_>,
    ) -> Fast<()> {
        let msgmax = self.words[MSGMAX].load(Relaxed);
        if mtype < 1 || len as u64 > msgmax || record_words(len) > DATA_WORDS {
            return Fast::Slow;
        }
        let Some(held) = self.acquire(IpcId::new(msqid), 2, who) else {
            return Fast::Slow;
        };
        let slot = held.slot;
        let m = Meta::load(slot, (held.before & CUR) as usize);
        let qbytes = slot[QBYTES].load(Relaxed);
        if !m.sane() {
            held.release();
            return Fast::Slow;
        }
        // msg_fits_inqueue: bytes and the count are both capped by qbytes.
        let fits = m.cbytes.saturating_add(len as u64) <= qbytes && m.qnum < qbytes;
        if !fits {
            held.release();
            return if flags & IPC_NOWAIT != 0 {
                Fast::Done(Err(Errno::EAGAIN))
            } else {
                Fast::Slow
            };
        }
        let now = who.now().max(0) as u64;
        let Some(offer) = sleep::offer(slot, held.before, mtype, len) else {
            held.release();
            return Fast::Slow;
        };
        if let Offer::Deliver {
            j,
            word,
            n,
            tid,
            pid,
        } = offer
        {
            // pipelined_send: straight to the sleeper, never queued. A sleeper that exited
            // must not take it: the daemon applies its exit first.
            if n > sleep::MBOX_BYTES || !who.alive(pid) {
                held.release();
                return Fast::Slow;
            }
            let mbox = &sleep::rec(slot, j)[sleep::R_CMBOX..sleep::R_DMBOX];
            if !fill(&mbox[3..3 + n.div_ceil(8)], &[]) {
                held.release();
                return Fast::Slow;
            }
            mbox[0].store(0, Relaxed);
            mbox[1].store(mtype as u64, Relaxed);
            mbox[2].store(n as u64, Relaxed);
            let next = Meta {
                lspid: u64::from(who.pid()),
                stime: now,
                lrpid: tid.max(0) as u64,
                rtime: now,
                ..m
            };
            if !held.commit_clearing(&next, WAITED | WHICH) {
                return Fast::Slow;
            }
            sleep::handed(slot, j, word, who);
            return Fast::Done(Ok(()));
        }
        let need = record_words(len);
        if (m.tail - m.head) as usize + need > DATA_WORDS {
            held.release();
            return Fast::Slow;
        }
        let data = &slot[SLOT_HEADER..];
        let (a, b) = pieces(data, m.tail + 2, need - 2);
        if !fill(a, b) {
            held.release();
            return Fast::Slow;
        }
        let (a, b) = pieces(data, m.tail, 2);
        let mut hdr = a.iter().chain(b);
        if let (Some(t), Some(l)) = (hdr.next(), hdr.next()) {
            t.store(mtype as u64, Relaxed);
            l.store(len as u64, Relaxed);
        }
        let next = Meta {
            tail: m.tail + need as u64,
            qnum: m.qnum + 1,
            cbytes: m.cbytes + len as u64,
            lspid: u64::from(who.pid()),
            stime: now,
            ..m
        };
        // A sleeper whose buffer is too small is woken with E2BIG; the message is queued.
        let clear = match offer {
            Offer::TooBig { j, word } => {
                let mbox = &sleep::rec(slot, j)[sleep::R_CMBOX..sleep::R_DMBOX];
                mbox[0].store(Errno::E2BIG.raw() as u64, Relaxed);
                Some((j, word))
            }
            _ => None,
        };
        let bits = if clear.is_some() { WAITED | WHICH } else { 0 };
        if !held.commit_clearing(&next, bits) {
            return Fast::Slow;
        }
        if let Some((j, word)) = clear {
            sleep::handed(slot, j, word, who);
        }
        Fast::Done(Ok(()))
    }

    /// msgrcv(2): done here when the queue is published, the caller may read it and the
    /// message selected is the first one (`deliver` copies it out before the commit; its
    /// error, EFAULT, is the call's after the message was taken, as Linux); E2BIG (the
    /// message stays) and, with IPC_NOWAIT, ENOMSG. `Slow` for the rest: MSG_COPY, a message
    /// that is not the first, a receiver that would sleep, errors the daemon gives.
    /// Returns the bytes delivered.
    pub fn msgrcv(
        &self,
        msqid: i32,
        maxsize: i64,
        msgtyp: i64,
        flags: i32,
        who: &dyn Caller,
        deliver: &mut Deliver<'_>,
    ) -> Fast<usize> {
        let args = (msgtyp, maxsize, flags);
        match self.msgrcv_sleep(msqid, args, who, None, deliver) {
            Recv::Done(r) => Fast::Done(r),
            Recv::Slow | Recv::Armed(_) => Fast::Slow,
        }
    }

    /// [`MsgView::msgrcv`] of (`msgtyp`, `maxsize`, `flags`) that, with `sleeper` (which
    /// gives the caller's thread id), arms a sleeper record when nothing matches and
    /// IPC_NOWAIT is clear (`sleep`).
    pub fn msgrcv_sleep(
        &self,
        msqid: i32,
        (msgtyp, maxsize, flags): (i64, i64, i32),
        who: &dyn Caller,
        sleeper: Option<&dyn Fn() -> u32>,
        deliver: &mut Deliver<'_>,
    ) -> Recv {
        if maxsize < 0 || flags & MSG_COPY != 0 {
            return Recv::Slow;
        }
        let sel = Selector::from_call(msgtyp, false, flags & MSG_EXCEPT != 0);
        let id = IpcId::new(msqid);
        let Some(held) = self.acquire(id, 4, who) else {
            return Recv::Slow;
        };
        let slot = held.slot;
        let m = Meta::load(slot, (held.before & CUR) as usize);
        if !m.sane() {
            held.release();
            return Recv::Slow;
        }
        let data = &slot[SLOT_HEADER..];
        let Some(pick) = select(data, &m, sel) else {
            held.release();
            return Recv::Slow;
        };
        let Some(r) = pick else {
            if flags & IPC_NOWAIT != 0 {
                held.release();
                return Recv::Done(Err(Errno::ENOMSG));
            }
            return match sleeper {
                Some(tid) => sleep::arm(held, id, (msgtyp, maxsize, flags), who, tid()),
                None => {
                    held.release();
                    Recv::Slow
                }
            };
        };
        if r.pos != m.head {
            held.release();
            return Recv::Slow;
        }
        if maxsize < r.len as i64 && flags & MSG_NOERROR == 0 {
            held.release();
            return Recv::Done(Err(Errno::E2BIG));
        }
        let n = r.len.min(usize::try_from(maxsize).unwrap_or(usize::MAX));
        let words = record_words(r.len);
        let (a, b) = pieces(data, r.pos + 2, words - 2);
        let copied = deliver(r.mtype, n, a, b);
        let now = who.now().max(0) as u64;
        let next = Meta {
            head: m.head + words as u64,
            qnum: m.qnum - 1,
            cbytes: m.cbytes.saturating_sub(r.len as u64),
            lrpid: u64::from(who.pid()),
            rtime: now,
            ..m
        };
        if !held.commit(&next) {
            return Recv::Slow;
        }
        Recv::Done(copied.map(|()| n))
    }
}
