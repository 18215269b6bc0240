//! The daemon's side of the message queue fast path: the region, taking a queue back from it
//! and publishing it again around every engine call that touches a queue.
//!
//! [`MsgArena`] keeps, per slot, which queue is published there, the slot's epoch and how many
//! engine calls are inside it, under one mutex per slot (lock order: a slot's mutex, then the
//! registry and the queue's lock; no call holds two slots' mutexes). `take_back` makes a
//! published slot SLOW and reads the queue out of it; `publish` writes one in, only while
//! no client holds the slot. The engine calls around them are in `inside`.

use super::{
    load_text, pieces, record_words, records, slot_words, store_text, Meta, CUID_CGID, CUR,
    DATA_WORDS, EPOCH_SHIFT, IDENT, LOCK, LOCKED, MODE, MSGMAX, MSG_SLOTS, PUBLISHED, QBYTES,
    REGION_WORDS, SLOT_HEADER, SLOW, UID_GID,
};
use crate::ipc::perm::IpcPerm;
use crate::ipc::shared_words::SharedWords;
use crate::sync::{
    AtomicU64, Mutex, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

/// What the daemon knows of one slot.
#[derive(Default)]
pub(crate) struct SlotState {
    /// The receives adopted from the slot's sleeper records, until their sleepers read them.
    pub(crate) adopted: [Option<crate::ipc::msg::fast_sleep::Adopted>; super::sleep::RECORDS],
    /// The published queue's id.
    pub(crate) published: Option<i32>,
    /// The epoch of the last publish.
    pub(crate) epoch: u64,
    /// Engine calls inside the slot.
    pub(crate) inside: u32,
}

/// A namespace's message region (see the module doc).
pub struct MsgArena {
    mem: SharedWords,
    pub(crate) states: Box<[Mutex<SlotState>]>,
    /// Processes whose exit (or exec) the daemon is handling: their records are freed, never
    /// adopted.
    pub(crate) exiting: Mutex<std::collections::HashSet<i32>>,
    /// Slots published at least once, a bit each: only these can hold a client's lock or
    /// sleeper records, so an exit or exec walks only them. A bit is set before the slot's
    /// first publish and never cleared.
    used: [AtomicU64; USED_WORDS],
}

/// Words of [`MsgArena`]'s bitmap of used slots.
const USED_WORDS: usize = MSG_SLOTS.div_ceil(64);

impl MsgArena {
    /// A region in the process's own memory (tests, models).
    pub fn owned() -> MsgArena {
        MsgArena {
            mem: SharedWords::owned(REGION_WORDS),
            states: (0..MSG_SLOTS).map(|_| Mutex::default()).collect(),
            exiting: Mutex::default(),
            used: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// A region over [`super::REGION_BYTES`] zeroed bytes at `ptr`, kept mapped as long as
    /// `keep` lives.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned, valid for reads and writes of `REGION_BYTES` bytes for
    /// as long as `keep` lives, and used by others (clients) only as atomics.
    #[cfg(not(loom))]
    pub unsafe fn from_raw(ptr: *mut u8, keep: Box<dyn std::any::Any + Send + Sync>) -> MsgArena {
        MsgArena {
            // SAFETY: this function's contract.
            mem: unsafe { SharedWords::mapped(ptr, REGION_WORDS, keep) },
            states: (0..MSG_SLOTS).map(|_| Mutex::default()).collect(),
            exiting: Mutex::default(),
            used: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The region's words.
    pub fn words(&self) -> &[AtomicU64] {
        self.mem.words()
    }

    /// A client's view of this region (tests; clients map the memory themselves).
    pub fn view(&self) -> super::MsgView<'_> {
        super::MsgView::new(self.words())
    }

    /// Publishes the namespace's msgmax (the first check of msgsnd).
    pub fn set_msgmax(&self, msgmax: i32) {
        self.words()[MSGMAX].store(msgmax.max(0) as u64, Release);
    }

    /// The slot of queue index `idx`: its words and the daemon's state of it.
    pub(crate) fn slot(&self, idx: u32) -> (&[AtomicU64], &Mutex<SlotState>) {
        let i = idx as usize % MSG_SLOTS;
        let words = slot_words(self.words(), i).expect("the region holds MSG_SLOTS slots");
        (words, &self.states[i])
    }

    /// Marks the slot of queue index `idx` used; before its publish makes it visible.
    pub(crate) fn mark_used(&self, idx: u32) {
        let i = idx as usize % MSG_SLOTS;
        self.used[i / 64].fetch_or(1 << (i % 64), AcqRel);
    }

    /// The slots published at least once, in order.
    pub(crate) fn used_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.used.iter().enumerate().flat_map(|(w, bits)| {
            let mut b = bits.load(Acquire);
            std::iter::from_fn(move || {
                let i = (b != 0).then(|| (w * 64) as u32 + b.trailing_zeros())?;
                b &= b - 1;
                Some(i)
            })
        })
    }
}

/// A queue as the region holds it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) messages: Vec<(i64, Vec<u8>)>,
    pub(crate) lspid: i32,
    pub(crate) lrpid: i32,
    pub(crate) stime: i64,
    pub(crate) rtime: i64,
    /// The sleeper record armed at the takeover (`LOCK`'s WAITED and WHICH): the daemon adopts
    /// it (no client can hand off to it or cancel it any more).
    pub(crate) armed: Option<usize>,
}

/// Sets SLOW on a published slot and reads the queue out of it: the counters in force at the
/// `fetch_or` and the records they cover (up to the first damaged one). After it no client
/// can commit on the slot. A client holding it may still write the ring's free words and the
/// spare counters, never what is read here.
pub(crate) fn take_back(slot: &[AtomicU64]) -> Snapshot {
    // AcqRel: reads the last commit, and what its client wrote before it.
    let l = slot[LOCK].fetch_or(SLOW, AcqRel);
    let m = Meta::load(slot, (l & CUR) as usize);
    let mut snap = Snapshot {
        lspid: pid(m.lspid),
        lrpid: pid(m.lrpid),
        stime: time(m.stime),
        rtime: time(m.rtime),
        armed: super::sleep::armed(l),
        ..Snapshot::default()
    };
    if !m.sane() {
        return snap;
    }
    let data = &slot[SLOT_HEADER..];
    for r in records(data, &m) {
        let Some(r) = r else { break };
        let (a, b) = pieces(data, r.pos + 2, record_words(r.len) - 2);
        snap.messages.push((r.mtype.max(1), load_text(a, b, r.len)));
    }
    snap
}

fn pid(v: u64) -> i32 {
    i32::try_from(v).unwrap_or(0)
}

fn time(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(0)
}

/// What a queue publishes.
pub(crate) struct Published<'a> {
    pub(crate) id: i32,
    pub(crate) perm: &'a IpcPerm,
    pub(crate) qbytes: u64,
    pub(crate) snap: &'a Snapshot,
}

/// Whether messages of these lengths fit in a slot's ring.
pub(crate) fn fits(lens: impl Iterator<Item = usize>) -> bool {
    let mut words = 0usize;
    for len in lens {
        words += record_words(len);
        if words > DATA_WORDS {
            return false;
        }
    }
    true
}

/// Publishes a queue in `slot` with `epoch`: `false` (nothing written) if a client still
/// holds the slot. The slot is made SLOW first, then the header, the ring and the first copy
/// of the counters are written, then `LOCK` (Release) with the new epoch.
pub(crate) fn publish(slot: &[AtomicU64], q: &Published<'_>, epoch: u64) -> bool {
    let l = slot[LOCK].fetch_or(SLOW, AcqRel);
    if l & LOCKED != 0 {
        return false;
    }
    let p = q.perm;
    slot[MODE].store(u64::from(p.mode), Release);
    slot[UID_GID].store(u64::from(p.uid) | u64::from(p.gid) << 32, Release);
    slot[CUID_CGID].store(u64::from(p.cuid) | u64::from(p.cgid) << 32, Release);
    slot[QBYTES].store(q.qbytes, Release);
    slot[IDENT].store(PUBLISHED | u64::from(q.id as u32), Release);
    let data = &slot[SLOT_HEADER..];
    let mut pos = 0u64;
    let mut cbytes = 0u64;
    for (mtype, text) in &q.snap.messages {
        let n = record_words(text.len());
        let (a, b) = pieces(data, pos, 2);
        for (w, v) in a.iter().chain(b).zip([*mtype as u64, text.len() as u64]) {
            w.store(v, Relaxed);
        }
        let (a, b) = pieces(data, pos + 2, n - 2);
        store_text(a, b, text);
        pos += n as u64;
        cbytes += text.len() as u64;
    }
    let m = Meta {
        head: 0,
        tail: pos,
        qnum: q.snap.messages.len() as u64,
        cbytes,
        lspid: q.snap.lspid.max(0) as u64,
        lrpid: q.snap.lrpid.max(0) as u64,
        stime: q.snap.stime.max(0) as u64,
        rtime: q.snap.rtime.max(0) as u64,
    };
    m.store(slot, 0);
    // Release: the header, the ring and the counters before the slot opens.
    slot[LOCK].store((epoch & 0xffff_ffff) << EPOCH_SHIFT, Release);
    true
}

/// Whether `LOCK` of `slot` is held by `pid` (a dead or re-executed holder).
pub(crate) fn held_by(slot: &[AtomicU64], pid: i32) -> bool {
    let l = slot[LOCK].load(Acquire);
    l & LOCKED != 0 && super::holder_of(l) == (pid as u64 & ((1 << 24) - 1))
}

/// Clears `LOCKED` of a holder that will never write again (it died, or its image was
/// replaced); only once the slot is SLOW (taken back, or never published since).
pub(crate) fn clear_dead_holder(slot: &[AtomicU64]) {
    slot[LOCK].fetch_and(!LOCKED, AcqRel);
}
