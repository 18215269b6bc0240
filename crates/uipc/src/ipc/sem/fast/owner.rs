//! The daemon's side of the fast path: an arena, and taking sets back from it and publishing
//! them again around every engine call that touches a set.
//!
//! [`SemArena`] keeps, per slot, whether a set is published there (its id and size), the
//! slot's epoch and how many engine calls are inside it, under one mutex per slot (made when
//! the slot is first used, in chunks of [`CHUNK`]; lock order: a slot's mutex, then the
//! registry and the set's locks; it is taken by engine entry points with no lock held, and no
//! call holds two slots' mutexes), so calls on sets at different indexes never wait for each
//! other here.
//!
//! `take_back` makes a published set's words SLOW and returns their values; with
//! `take_back_adjustments` it also returns the SEM_UNDO adjustments of the process that owns
//! them; `publish` writes a set (and the one owner's adjustments, if any) into a slot. The
//! engine calls around them are in `inside`. The word protocol is in the parent module's doc
//! and ARCHITECTURE.md.

use super::undo::{adj_of, intent_epoch, intent_sem, INTENT_SET};
use super::{
    epoch_of, pid_of, value_of, word, ArenaView, ADJ_WORDS, CAPACITY, CUID_CGID, EPOCH_MASK,
    EPOCH_SHIFT, HEADER_WORDS, IDENT, INTENT, LOCKED, MODE_NSEMS, OTIME, OTIME_MASK, OWNED,
    PID_MASK, PUBLISHED, SLOTS, SLOT_WORDS, SLOW, UID_GID, UNDO, WAITED,
};
use crate::ipc::consts::SEMVMX;
use crate::ipc::perm::IpcPerm;
use crate::ipc::sem::undo::UndoEntry;
use crate::ipc::sem::SemSet;
use crate::ipc::shared_words::{SharedWords, Slots};
use crate::sync::{lock, AtomicU64, Mutex, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};
use std::sync::Arc;
use std::sync::OnceLock;

/// Slots whose states are made together.
pub const CHUNK: usize = 256;

/// What the daemon knows of one slot.
#[derive(Default)]
pub(super) struct SlotState {
    /// The published set's id and size.
    pub(super) published: Option<(i32, usize)>,
    /// The epoch of the last publish.
    pub(super) epoch: u64,
    /// Engine calls inside the slot.
    pub(super) inside: u32,
    /// The operation adopted from the slot's sleeper, until the sleeper read its result.
    pub(super) adopted: Option<super::adopt::Adopted>,
}

/// [`CHUNK`] slots' states.
type Chunk = Box<[Mutex<SlotState>]>;

/// The daemon's states of an arena's slots, made a chunk at a time when first used.
struct States(Box<[OnceLock<Chunk>]>);

impl States {
    fn new(slots: usize) -> States {
        States(
            (0..slots.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
        )
    }

    /// Slot `idx`'s state, or `None` past the arena.
    fn get(&self, idx: usize) -> Option<&Mutex<SlotState>> {
        let chunk = self.0.get(idx / CHUNK)?;
        let chunk = chunk.get_or_init(|| {
            (0..CHUNK)
                .map(|_| Mutex::new(SlotState::default()))
                .collect()
        });
        chunk.get(idx % CHUNK)
    }
}

/// A namespace's arena (see the module doc).
pub struct SemArena {
    mem: SharedWords,
    states: States,
    /// Bit `idx` set while a set is published in slot `idx` (changed under the slot's mutex).
    pub(super) published: Box<[AtomicU64]>,
    /// Processes whose exit is being applied: no set publishes adjustments of theirs.
    pub(super) exiting: Mutex<std::collections::HashSet<i32>>,
    /// (pid, slot) of every adopted operation kept in a slot's state (an exit withdraws them).
    pub(super) sleepers: Mutex<Vec<(i32, u32)>>,
}

fn bitmap(slots: usize) -> Box<[AtomicU64]> {
    (0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
}

impl SemArena {
    /// An arena in the process's own memory, of `slots` slots (tests, models).
    pub fn owned(slots: usize) -> SemArena {
        SemArena {
            mem: SharedWords::owned(slots * SLOT_WORDS),
            states: States::new(slots),
            published: bitmap(slots),
            exiting: Mutex::new(Default::default()),
            sleepers: Mutex::new(Vec::new()),
        }
    }

    /// An arena over `len` bytes at `ptr` (a whole number of slots), zeroed, kept mapped as
    /// long as `keep` lives.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned, valid for reads and writes of `len` bytes for as long as
    /// `keep` lives, and used by others (clients) only as atomics.
    #[cfg(not(loom))]
    pub unsafe fn from_raw(
        ptr: *mut u8,
        len: usize,
        keep: Box<dyn std::any::Any + Send + Sync>,
    ) -> SemArena {
        let slots = len / 8 / SLOT_WORDS;
        SemArena {
            // SAFETY: this function's contract, for the whole slots in `len` bytes.
            mem: unsafe { SharedWords::mapped(ptr, slots * SLOT_WORDS, keep) },
            states: States::new(slots),
            published: bitmap(slots),
            exiting: Mutex::new(Default::default()),
            sleepers: Mutex::new(Vec::new()),
        }
    }

    /// The arena's words.
    pub fn words(&self) -> &[AtomicU64] {
        self.mem.words()
    }

    /// What the embedder kept with the memory (`from_raw`'s `keep`).
    pub fn keeper(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.mem.keeper()
    }

    /// A client's view of this arena (tests; clients map the memory themselves).
    pub fn view(&self) -> ArenaView<'_> {
        ArenaView::new(self.words())
    }

    /// Slot `idx`'s words and the daemon's state of it; `None` for an index the clients
    /// cannot reach (at or past [`SLOTS`]: they look a set up at its id modulo `SLOTS`) or past
    /// the arena.
    pub(super) fn slot(&self, idx: u32) -> Option<(&[AtomicU64], &Mutex<SlotState>)> {
        let i = idx as usize;
        if i >= SLOTS {
            return None;
        }
        let words = Slots::<SLOT_WORDS>::new(self.words()).get(i)?;
        Some((words, self.states.get(i)?))
    }
}

/// What a takeover found: (value, sempid) per semaphore, OTIME, a bit per word that was
/// LOCKED (an owner's SEM_UNDO operation that now never happens) and a bit per word that was
/// WAITED (the slot's armed sleeper waits on it).
pub(crate) type Taken = (Vec<(i32, i32)>, i64, u64, u64);

/// Sets SLOW on words `0..nsems` of `slot` and returns their values and sempids, with OTIME.
/// After it no client can change or read these words. A LOCKED word holds the value and
/// sempid before the owner's operation, which can no longer complete.
pub(crate) fn take_back(slot: &[AtomicU64], nsems: usize) -> Taken {
    let mut locked = 0;
    let mut waited = 0;
    let vals = slot[HEADER_WORDS..HEADER_WORDS + nsems]
        .iter()
        .enumerate()
        .map(|(k, w)| {
            // AcqRel: reads the last client CAS (and what the client wrote before it), and is
            // ordered before everything the daemon does with the set afterwards.
            let old = w.fetch_or(SLOW, AcqRel);
            if old & LOCKED != 0 {
                locked |= 1 << k;
            }
            if old & WAITED != 0 {
                waited |= 1 << k;
            }
            let v = (value_of(old) as i32).min(SEMVMX);
            (v, pid_of(old) as i32)
        })
        .collect();
    // A client raises OTIME after its CAS: one that has not yet is either dead or will find
    // the epoch changed once the set is published again, and its time is not counted.
    let otime = slot[OTIME].load(Acquire) & OTIME_MASK;
    (vals, otime as i64, locked, waited)
}

/// After [`take_back`] (with its `locked` bits) of a slot published with `epoch`: the owner's
/// pid and its adjustment of each semaphore, if a process owns the set's adjustments. A
/// LOCKED word's operation never completes, and INTENT (of this epoch, naming it) holds its
/// adjustment before it: the owner keeps INTENT from before it locks until after it unlocks
/// (ARCHITECTURE.md, "SEM_UNDO on the fast path").
pub(crate) fn take_back_adjustments(
    slot: &[AtomicU64],
    nsems: usize,
    epoch: u64,
    locked: u64,
) -> Option<(i32, Vec<i32>)> {
    let owner = slot[UNDO].load(Acquire);
    if owner & OWNED == 0 {
        return None;
    }
    let intent = slot[INTENT].load(Acquire);
    let mut adj: Vec<i32> = slot[ADJ_WORDS..ADJ_WORDS + nsems]
        .iter()
        .map(|a| {
            let a = a.load(Acquire);
            if epoch_of(a) == epoch & EPOCH_MASK {
                adj_of(a)
            } else {
                0
            }
        })
        .collect();
    let k = intent_sem(intent);
    let current = intent_epoch(intent) == epoch & EPOCH_MASK;
    if intent & INTENT_SET != 0 && current && k < nsems && locked & (1 << k) != 0 {
        adj[k] = adj_of(intent);
    }
    Some((owner as u32 as i32, adj))
}

/// What a set published in a slot looks like.
pub(crate) struct Published<'a> {
    pub(crate) id: i32,
    pub(crate) perm: IpcPerm,
    pub(crate) otime: i64,
    pub(crate) vals: &'a [(i32, i32)],
    /// The one process whose adjustments the set holds, and them.
    pub(crate) undo: Option<(i32, &'a [i32])>,
}

/// Publishes a set in `slot` with words of epoch `epoch`: every word it will use is made SLOW
/// first, then the header is written, then the words (SLOW clear).
pub(crate) fn publish(slot: &[AtomicU64], set: &Published<'_>, epoch: u64) {
    let n = set.vals.len();
    for w in &slot[HEADER_WORDS..HEADER_WORDS + n] {
        w.fetch_or(SLOW, AcqRel);
    }
    let p = &set.perm;
    slot[MODE_NSEMS].store(u64::from(p.mode) | (n as u64) << 32, Release);
    slot[UID_GID].store(u64::from(p.uid) | u64::from(p.gid) << 32, Release);
    slot[CUID_CGID].store(u64::from(p.cuid) | u64::from(p.cgid) << 32, Release);
    let otime = (set.otime.max(0) as u64).min(OTIME_MASK);
    slot[OTIME].store(otime | (epoch & EPOCH_MASK) << EPOCH_SHIFT, Release);
    super::undo::reset(slot, n, epoch, set.undo);
    slot[IDENT].store(PUBLISHED | u64::from(set.id as u32), Release);
    for (w, &(v, pid)) in slot[HEADER_WORDS..].iter().zip(set.vals) {
        w.store(word(v as u64, pid as u64, epoch, false), Release);
    }
}

/// What a set publishes: its permissions, (value, sempid) per semaphore, otime, and the one
/// process's undo entry it has, if any.
pub(super) type Export = (IpcPerm, Vec<(i32, i32)>, i64, Option<Arc<UndoEntry>>);

impl SemSet {
    /// The set as it would be published: `None` if it is removed, has a sleeping operation,
    /// undo entries of more than one process, more than [`CAPACITY`] semaphores or a sempid out
    /// of the word's range.
    pub(super) fn export_quiet(&self) -> Option<Export> {
        if self.nsems() > CAPACITY {
            return None;
        }
        let g = self.lock_global();
        if g.arr.deleted || !g.arr.complex.is_empty() {
            return None;
        }
        let owner = match self.undos.get() {
            Some(list) => lock(list).sole_entry().ok()?,
            None => None,
        };
        let mut vals = Vec::with_capacity(self.nsems());
        let mut otime = 0;
        for s in self.sems() {
            let s = lock(s);
            if !s.pending.is_empty() || s.pid < 0 || s.pid as u64 > PID_MASK {
                return None;
            }
            vals.push((s.val, s.pid));
            otime = otime.max(s.otime);
        }
        Some((self.perm.get(), vals, otime, owner))
    }

    /// Takes values and sempids (and a later otime) from the arena: nobody waits on a
    /// published set, so nobody is woken, and no time changes but otime.
    pub(super) fn import_quiet(&self, vals: &[(i32, i32)], otime: i64) {
        let g = self.lock_global();
        if g.arr.deleted {
            return;
        }
        let mut latest = 0;
        for (s, &(v, pid)) in self.sems().iter().zip(vals) {
            let mut s = lock(s);
            s.val = v;
            s.pid = pid;
            latest = latest.max(s.otime);
        }
        if otime > latest {
            lock(&self.sems()[0]).otime = otime;
        }
        drop(g);
    }
}
