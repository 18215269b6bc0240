//! The engine's calls and the message fast path: entering a queue's slot before an engine
//! call (taking a published queue back into the engine), leaving it afterwards (publishing
//! the queue again when the last call leaves and it is quiet: not removed, nobody asleep on
//! it, its messages fit in the ring, no client holding the slot), and a holder that will
//! never write again (its process exited or executed a new image).
//!
//! Lock order: a slot's mutex, then the engine's locks (the registry, then the queue's).

use super::fast::owner::{clear_dead_holder, fits, held_by, publish, Published, Snapshot};
use super::fast::{LOCK, LOCKED, MSG_SLOTS};
use crate::ipc::msg::store::Message;
use crate::ipc::msg::MsgQueue;
use crate::ipc::namespace::IpcNamespace;
use crate::sync::{lock, Ordering::Acquire};
use crate::{IpcId, IpcIdx};

/// An engine call inside a slot; dropping it leaves the slot.
pub(crate) struct MsgInside<'a> {
    ns: &'a IpcNamespace,
    /// The slot's index and the queue to publish there at the leave: an id, or `None` for
    /// whichever queue has the index `idx` (MSG_STAT).
    at: Option<(u32, Option<i32>)>,
}

impl IpcNamespace {
    /// The message fast path's region, if the namespace has one.
    pub fn msg_arena(&self) -> Option<&std::sync::Arc<super::fast::owner::MsgArena>> {
        self.msg.arena.as_ref()
    }

    /// The queue index of `id`.
    fn msg_idx(&self, id: i32) -> u32 {
        self.msg.registry.layout().idx(IpcId::new(id)).get()
    }

    /// Enters the slot of queue `id` (the call's id; it is published there again at the
    /// leave if it can be). Entry: no lock held.
    pub(crate) fn msg_fast_enter(&self, id: i32) -> MsgInside<'_> {
        if id < 0 {
            return MsgInside { ns: self, at: None };
        }
        self.msg_fast_enter_at(self.msg_idx(id), Some(id))
    }

    /// Enters the slot of queue index `idx` (MSG_STAT).
    pub(crate) fn msg_fast_enter_index(&self, idx: u32) -> MsgInside<'_> {
        self.msg_fast_enter_at(idx, None)
    }

    /// Enters every slot with a queue published in it (MSG_INFO's totals, the /proc listing).
    pub(crate) fn msg_fast_enter_all(&self) -> Vec<MsgInside<'_>> {
        let Some(arena) = self.msg.arena.as_deref() else {
            return Vec::new();
        };
        let mut all = Vec::new();
        for i in 0..MSG_SLOTS as u32 {
            let published = lock(&arena.states[i as usize]).published;
            if let Some(id) = published {
                all.push(self.msg_fast_enter_at(self.msg_idx(id), Some(id)));
            }
        }
        all
    }

    fn msg_fast_enter_at(&self, idx: u32, id: Option<i32>) -> MsgInside<'_> {
        let Some(arena) = self.msg.arena.as_ref() else {
            return MsgInside { ns: self, at: None };
        };
        let (_, state) = arena.slot(idx);
        let mut st = lock(state);
        self.msg_fast_resolve(arena, idx, &mut st);
        if let Some(was) = st.published.take() {
            self.msg_fast_take(arena, idx, &mut st, was);
        }
        st.inside += 1;
        MsgInside {
            ns: self,
            at: Some((idx, id)),
        }
    }

    /// Puts what the region held back into the engine's queue (which holds no message while
    /// published). Nobody sleeps on a published queue, so nobody is woken.
    pub(super) fn msg_fast_import(&self, q: &MsgQueue, snap: Snapshot) {
        let mut st = q.lock();
        if st.deleted {
            return;
        }
        let (mut n, mut bytes) = (0i64, 0i64);
        for (mtype, text) in snap.messages {
            n += 1;
            bytes += text.len() as i64;
            st.cbytes += text.len() as u64;
            st.messages.push(Message { mtype, text });
        }
        st.lspid = snap.lspid;
        st.lrpid = snap.lrpid;
        st.stime = snap.stime;
        st.rtime = snap.rtime;
        drop(st);
        self.msg.account(n, bytes);
    }

    /// Process `pid` will never write the region again (it exited, or a new image replaced
    /// it): a slot it held is taken back, let go, and published again if it can be.
    pub(crate) fn msg_fast_holder_gone(&self, pid: i32) {
        let Some(arena) = self.msg.arena.as_ref() else {
            return;
        };
        for i in arena.used_slots() {
            let (slot, state) = arena.slot(i);
            if !held_by(slot, pid) {
                continue;
            }
            let mut st = lock(state);
            self.msg_fast_resolve(arena, i, &mut st);
            let was = st.published.take();
            if let Some(id) = was {
                self.msg_fast_take(arena, i, &mut st, id);
            }
            // SLOW now (taken back, or since an earlier takeover): no client takes the slot.
            if held_by(slot, pid) {
                clear_dead_holder(slot);
            }
            st.inside += 1;
            drop(st);
            drop(MsgInside {
                ns: self,
                at: was
                    .map(|id| (self.msg_idx(id), Some(id)))
                    .or(Some((i, None))),
            });
        }
    }

    /// Publishes `q` in its slot if it is quiet; slot mutex held, the slot SLOW or never used.
    fn msg_fast_publish(&self, slot: &[crate::sync::AtomicU64], q: &MsgQueue, epoch: u64) -> bool {
        if slot[LOCK].load(Acquire) & LOCKED != 0 {
            return false;
        }
        let mut st = q.lock();
        if st.deleted || !st.senders.is_empty() || !st.receivers.is_empty() {
            return false;
        }
        if !fits(st.messages.iter().map(|m| m.text.len())) {
            return false;
        }
        let messages: Vec<(i64, Vec<u8>)> = st
            .messages
            .take_all()
            .into_iter()
            .map(|m| (m.mtype, m.text))
            .collect();
        let snap = Snapshot {
            messages,
            lspid: st.lspid,
            lrpid: st.lrpid,
            stime: st.stime,
            rtime: st.rtime,
            armed: None,
        };
        let p = Published {
            id: q.header.id().get(),
            perm: &st.perm,
            qbytes: st.qbytes,
            snap: &snap,
        };
        let done = publish(slot, &p, epoch);
        let n = snap.messages.len() as i64;
        let bytes = st.cbytes as i64;
        if done {
            st.cbytes = 0;
            drop(st);
            self.msg.account(-n, -bytes);
        } else {
            for (mtype, text) in snap.messages {
                st.messages.push(Message { mtype, text });
            }
        }
        done
    }
}

impl Drop for MsgInside<'_> {
    fn drop(&mut self) {
        let (Some((idx, id)), Some(arena)) = (self.at, self.ns.msg.arena.as_deref()) else {
            return;
        };
        let (slot, state) = arena.slot(idx);
        let mut st = lock(state);
        st.inside -= 1;
        if st.inside > 0 || st.published.is_some() {
            return;
        }
        let reg = &self.ns.msg.registry;
        let q = match id {
            Some(id) => reg.lookup(IpcId::new(id)),
            None => reg.lookup_index(IpcIdx::new(idx)),
        };
        let Ok(q) = q else {
            return;
        };
        let epoch = st.epoch.wrapping_add(1);
        arena.mark_used(idx);
        if self.ns.msg_fast_publish(slot, &q, epoch) {
            st.epoch = epoch;
            st.published = Some(q.header.id().get());
        }
    }
}
