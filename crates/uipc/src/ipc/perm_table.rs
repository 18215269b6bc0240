//! Interned permissions for a registry's key map.
//!
//! Opening a key checks the object's owner, creator and mode (20 bytes), and the key map
//! keeps them beside the key so that a `*get` reads no object (see `registry`). Objects
//! almost always share a handful of distinct permissions (one program, one user, one mode),
//! so the map keeps a 4-byte [`PermId`] into this table instead of a copy: a key entry
//! shrinks from 32 to 16 bytes (semaphores, message queues; 24 for segments), which halves
//! the key map's memory and the bytes a create writes and a lookup reads there.
//!
//! Each distinct value is stored once with a count of the entries that name it; the last
//! release frees its place for reuse. Interning looks at the most recently interned value
//! first (a loop of creations by one caller hits it every time), then at a hash index.
//!
//! Not synchronized: it lives in the registry's writer-locked state; readers under the shared
//! lock only call [`PermTable::get`].
//!
//! Kept by hand rather than replaced by a crate: no interning crate keeps counted, reusable
//! 4-byte references without a lock of its own (its index is a std map hashed by `foldhash`).
//! The measurement it stands on: cachegrind on 31900 `semget` creates (BENCHMARKS.md,
//! "ipc-keys", the comparison of commit `8c5763b`, 2026-11-23), where 16-byte key entries
//! instead of 32, together with the 128-byte semaphore set (`sem::lock::SemSlots`), took a
//! create from 930 to 773 instructions and 41% fewer last-level write misses, and 31900
//! creates about a fifth less time (`uipc bench ipc-keys --runs 3`, 3 x 9 runs each way).
//! `uipc bench ipc-keys` on a loaded machine cannot tell the table from a plain copy per entry
//! (its deviations are larger than the difference), so that comparison was not redone alone.

use super::perm::IpcPerm;
use foldhash::fast::FixedState;
use std::collections::HashMap;

/// A place in a [`PermTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PermId(u32);

struct Slot {
    perm: IpcPerm,
    /// Key entries naming this slot; 0 when the slot is free.
    refs: u32,
}

/// Distinct permissions, each with a reference count.
#[derive(Default)]
pub(crate) struct PermTable {
    slots: Vec<Slot>,
    index: HashMap<IpcPerm, u32, FixedState>,
    free: Vec<u32>,
    /// The slot `intern` filled or found last.
    last: u32,
}

impl PermTable {
    /// A reference to `perm`'s slot, made if no entry names that value yet.
    pub(crate) fn intern(&mut self, perm: &IpcPerm) -> PermId {
        if let Some(s) = self.slots.get_mut(self.last as usize) {
            if s.refs > 0 && s.perm == *perm {
                s.refs += 1;
                return PermId(self.last);
            }
        }
        let at = match self.index.get(perm) {
            Some(&at) => {
                self.slots[at as usize].refs += 1;
                at
            }
            None => {
                let slot = Slot {
                    perm: perm.clone(),
                    refs: 1,
                };
                let at = match self.free.pop() {
                    Some(at) => {
                        self.slots[at as usize] = slot;
                        at
                    }
                    None => {
                        self.slots.push(slot);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.index.insert(perm.clone(), at);
                at
            }
        };
        self.last = at;
        PermId(at)
    }

    /// Drops one reference; the last one frees the slot.
    pub(crate) fn release(&mut self, id: PermId) {
        let s = &mut self.slots[id.0 as usize];
        debug_assert!(s.refs > 0, "released a free permission slot");
        s.refs -= 1;
        if s.refs == 0 {
            self.index.remove(&s.perm);
            self.free.push(id.0);
        }
    }

    /// The permissions `id` names (it must hold a reference).
    pub(crate) fn get(&self, id: PermId) -> &IpcPerm {
        &self.slots[id.0 as usize].perm
    }

    /// Distinct values held.
    #[cfg(test)]
    fn distinct(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn perm(uid: u32, mode: u32) -> IpcPerm {
        IpcPerm {
            uid,
            gid: 7,
            cuid: uid,
            cgid: 7,
            mode,
        }
    }

    #[test]
    fn equal_values_share_a_slot_until_the_last_release() {
        let mut t = PermTable::default();
        let a = t.intern(&perm(1, 0o600));
        let b = t.intern(&perm(2, 0o600));
        let a2 = t.intern(&perm(1, 0o600));
        assert_eq!(a, a2);
        assert_ne!(a, b);
        assert_eq!(t.distinct(), 2);
        t.release(a);
        assert_eq!(t.get(a2), &perm(1, 0o600), "one reference is left");
        t.release(a2);
        assert_eq!(t.distinct(), 1);
        let c = t.intern(&perm(3, 0o644));
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(t.get(c), &perm(3, 0o644));
        assert_eq!(t.get(b), &perm(2, 0o600));
    }

    proptest! {
        /// Against a model that keeps every entry's own copy: each reference always reads the
        /// value it was made for, and the table holds exactly the values still referenced.
        #[test]
        fn every_reference_reads_its_own_value(
            ops in proptest::collection::vec((any::<bool>(), 0u32..4, 0u32..3, any::<prop::sample::Index>()), 1..300)
        ) {
            let mut t = PermTable::default();
            let mut live: Vec<(PermId, IpcPerm)> = Vec::new();
            for (add, uid, mode, pick) in ops {
                if add || live.is_empty() {
                    let p = perm(uid, 0o600 + mode);
                    live.push((t.intern(&p), p));
                } else {
                    let (id, _) = live.swap_remove(pick.index(live.len()));
                    t.release(id);
                }
                for (id, p) in &live {
                    prop_assert_eq!(t.get(*id), p);
                }
                let mut distinct: Vec<_> = live.iter().map(|(_, p)| (p.uid, p.mode)).collect();
                distinct.sort_unstable();
                distinct.dedup();
                prop_assert_eq!(t.distinct(), distinct.len());
            }
        }
    }
}
