//! The engine's calls and the fast path: entering a set's slot before an engine call (taking a
//! published set back, with its owner's SEM_UNDO adjustments), leaving it afterwards
//! (publishing the set again when the last call leaves and it is quiet, with the adjustments
//! of the one process that has an undo entry moved back to the arena), and a process's exit.
//!
//! Lock order: a slot's mutex, then `SemArena::exiting`, then the engine's locks (the undo
//! shards, then the registry and the set's locks). A publish that moves a process's
//! adjustments to the arena holds `exiting` from its check that the process is not exiting
//! until the slot is marked published, and an exit adds its process to `exiting` before it
//! looks for the slots whose adjustments it owns: so either the exit finds the slot, or the
//! publish leaves the adjustments in the engine, where the exit applies them.

use super::owner::{publish, take_back, take_back_adjustments, Published};
use super::sleep::{pid_of as sleep_pid, state_of, FREE, SLEEPER};
use super::{OWNED, UNDO};
use crate::ipc::consts::SEMVMX;
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::sem::SemSet;
use crate::sync::{futex_wake_all, lock, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use crate::{IpcId, IpcIdx, Tgid};
use std::sync::Arc;

/// An engine call inside a slot; dropping it leaves the slot ([`IpcNamespace::sem_fast_enter`]).
pub(crate) struct Inside<'a> {
    ns: &'a IpcNamespace,
    idx: Option<u32>,
}

/// A process's exit in progress: the slots it took back; dropping it publishes them again and
/// ends the exit ([`IpcNamespace::sem_fast_exit`]).
pub(crate) struct Exiting<'a> {
    ns: &'a IpcNamespace,
    tgid: Tgid,
    guards: Vec<Inside<'a>>,
}

impl IpcNamespace {
    /// The fast path's arena, if the namespace has one.
    pub fn sem_arena(&self) -> Option<&std::sync::Arc<super::owner::SemArena>> {
        self.sem.arena.as_ref()
    }

    /// Enters the slot of `id` (or of an index, given as an id, for SEM_STAT): takes its set
    /// back from the arena if it is published there. Entry: no lock held.
    pub(crate) fn sem_fast_enter(&self, id: IpcId) -> Inside<'_> {
        let idx = self.sem.registry.layout().idx(id).get();
        self.sem_fast_enter_slot((id.get() >= 0).then_some(idx))
    }

    /// Enters slot `idx` (see [`Self::sem_fast_enter`]).
    fn sem_fast_enter_slot(&self, idx: Option<u32>) -> Inside<'_> {
        let outside = Inside {
            ns: self,
            idx: None,
        };
        let Some(arena) = self.sem.arena.as_deref() else {
            return outside;
        };
        let Some((idx, (slot, state))) = idx.and_then(|i| Some((i, arena.slot(i)?))) else {
            return outside;
        };
        let mut st = lock(state);
        let mut taken = None;
        if let Some((id, nsems)) = st.published.take() {
            arena.published[idx as usize / 64].fetch_and(!(1 << (idx % 64)), Relaxed);
            let (vals, otime, locked, waited) = take_back(slot, nsems);
            let adjs = take_back_adjustments(slot, nsems, st.epoch, locked);
            let set = self.sem.registry.lookup(IpcId::new(id)).ok();
            if let Some(set) = &set {
                set.import_quiet(&vals, otime);
                if let Some((pid, adj)) = adjs {
                    self.sem_fast_adopt_undo(set, Tgid::new(pid), &adj);
                }
            }
            taken = Some((set, waited));
        }
        let arena_arc = self.sem.arena.as_ref().expect("checked above");
        let taken = taken.as_ref().map(|(set, waited)| (set.as_ref(), *waited));
        self.sem_fast_sleeper(arena_arc, idx, &mut st, taken);
        st.inside += 1;
        Inside {
            ns: self,
            idx: Some(idx),
        }
    }

    /// Puts a fast owner's adjustments into its undo entry of `set`, made if missing even when
    /// they are all 0: the owner made a SEM_UNDO call, which makes the entry on Linux (its
    /// exit then stamps sem_otime). Entry: no lock held; the set was published, so no engine
    /// call is inside it.
    fn sem_fast_adopt_undo(&self, set: &Arc<SemSet>, tgid: Tgid, adj: &[i32]) {
        let Ok(entry) = self.sem.undo.find_alloc(tgid, set) else {
            return; // removed meanwhile: RMID drops adjustments
        };
        let g = set.lock_global();
        if !g.arr.deleted {
            for (e, &a) in entry.adj.iter().zip(adj) {
                let sum = (e.load(Relaxed) + a).clamp(-(SEMVMX + 1), SEMVMX);
                e.store(sum, Relaxed);
            }
        }
        drop(g);
    }

    /// Before process `tgid`'s undo list is applied (exit, or leaving the namespace): takes
    /// back every published set whose fast adjustments it owns, so that they are in its list,
    /// and keeps any set from giving its adjustments to the arena until the value returned is
    /// dropped (after the list was applied), which publishes the sets again.
    pub(crate) fn sem_fast_exit(&self, tgid: Tgid) -> Exiting<'_> {
        let mut exit = Exiting {
            ns: self,
            tgid,
            guards: Vec::new(),
        };
        let Some(arena) = self.sem.arena.as_deref() else {
            return exit;
        };
        lock(&arena.exiting).insert(tgid.get());
        let me = OWNED | u64::from(tgid.get() as u32);
        let mut slots: Vec<u32> = lock(&arena.sleepers)
            .iter()
            .filter(|&&(p, _)| p == tgid.get())
            .map(|&(_, i)| i)
            .collect();
        for (i, bits) in arena.published.iter().enumerate() {
            let mut b = bits.load(Acquire);
            while b != 0 {
                let idx = (i * 64) as u32 + b.trailing_zeros();
                b &= b - 1;
                let Some((slot, _)) = arena.slot(idx) else {
                    continue;
                };
                let r = slot[SLEEPER].load(Acquire);
                if state_of(r) != FREE {
                    // A waker that died between its hand-off and its wake leaves a sleeper
                    // asleep: it looks again (a spurious wake costs a reload).
                    futex_wake_all(&slot[SLEEPER]);
                }
                let sleeps = state_of(r) != FREE && sleep_pid(r) == tgid.get() as u32;
                if slot[UNDO].load(Acquire) == me || sleeps {
                    slots.push(idx);
                }
            }
        }
        slots.sort_unstable();
        slots.dedup();
        for idx in slots {
            exit.guards.push(self.sem_fast_enter_slot(Some(idx)));
        }
        exit
    }
}

impl Drop for Exiting<'_> {
    fn drop(&mut self) {
        self.guards.clear();
        if let Some(arena) = self.ns.sem.arena.as_deref() {
            lock(&arena.exiting).remove(&self.tgid.get());
        }
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let (Some(idx), Some(arena)) = (self.idx, self.ns.sem.arena.as_deref()) else {
            return;
        };
        let Some((slot, state)) = arena.slot(idx) else {
            return;
        };
        let mut st = lock(state);
        st.inside -= 1;
        if st.inside > 0 {
            return;
        }
        let Ok(set) = self.ns.sem.registry.lookup_index(IpcIdx::new(idx)) else {
            return;
        };
        let Some((perm, vals, otime, owner)) = set.export_quiet() else {
            return;
        };
        // The one process with an undo entry: its adjustments move to the arena, unless its
        // exit is being applied (see the module doc).
        let exiting = owner.as_ref().map(|_| lock(&arena.exiting));
        let mut adj = Vec::new();
        if let (Some(e), Some(exiting)) = (&owner, &exiting) {
            if exiting.contains(&e.tgid.get()) {
                return;
            }
            if let Some(list) = set.undos.get() {
                lock(list).remove(e);
            }
            self.ns.sem.undo.forget(e);
            adj = e.adj.iter().map(|a| a.load(Relaxed)).collect();
        }
        let id = set.header.id().get();
        st.epoch = (st.epoch + 1) & super::EPOCH_MASK;
        let p = Published {
            id,
            perm,
            otime,
            vals: &vals,
            undo: owner.as_ref().map(|e| (e.tgid.get(), &adj[..])),
        };
        // Marked before the words show it published: an owner's claim of UNDO comes after
        // the mark, so the exit of the owner finds the slot.
        arena.published[idx as usize / 64].fetch_or(1 << (idx % 64), Release);
        publish(slot, &p, st.epoch);
        st.published = Some((id, vals.len()));
        drop(exiting);
    }
}
