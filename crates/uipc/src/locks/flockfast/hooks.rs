//! The lock manager's calls into its flock leases: every engine call on a file enters it first
//! (revoking its lease, whose lock comes back into the engine) and leaves it after (where a
//! lease may be granted). See `book` and ARCHITECTURE.md "flock leases".

use super::book::Taken;
use super::{FlockSlots, Mode};
use crate::locks::file::{Blocked, Held};
use crate::locks::parked::LockCall;
use crate::locks::types::{FileId, LockKind, LockType, OfdId, Owner, OFFSET_MAX};
use crate::locks::LockManager;
use crate::wait::Waiter;
use crate::Tgid;
use std::sync::Arc;

impl LockManager {
    /// Gives the manager a flock lease area: from now on a description that alone locks a
    /// file with flock may be granted its lease.
    pub fn with_flock_slots(mut self, slots: FlockSlots) -> LockManager {
        self.flock_slots = Some(slots);
        self
    }

    /// The flock lease area, if any.
    pub fn flock_slots(&self) -> Option<&FlockSlots> {
        self.flock_slots.as_ref()
    }

    /// Puts a revoked lease's lock into the engine as its description's flock lock (nothing
    /// else is on the file: nothing conflicts).
    fn import_flock(&self, file: FileId, (ofd, ty, pid): Taken) {
        let Some(ty) = ty else { return };
        self.files.with(file, true, |_, mut st| {
            let owner = Owner::Description(ofd);
            if !st.flocks.iter().any(|h| h.owner == owner) {
                st.flocks.push(Held {
                    kind: LockKind::Flock,
                    owner,
                    pid,
                    ty,
                    start: 0,
                    end: OFFSET_MAX,
                });
            }
        });
    }

    /// A call on `file` through description `by` (an OFD or flock call) begins.
    pub(crate) fn flock_enter(&self, file: FileId, by: Option<OfdId>) {
        if let Some(l) = &self.flock_slots {
            l.enter(file, by, |taken| self.import_flock(file, taken));
        }
    }

    /// The call ends; `grant`: the description and pid of a successful flock call. The file
    /// is leased to that description if no other lock is on it and every blocked request is
    /// a LOCK_EX whose client can redo it on the slot: those are woken, and each retry joins
    /// the slot as a member and is answered REDO (`flock_redo_woken`), so a file contended in
    /// the engine from its first calls on still gets a lease.
    pub(crate) fn flock_leave(&self, file: FileId, grant: Option<(OfdId, Tgid)>) {
        let Some(l) = &self.flock_slots else { return };
        l.leave(file, grant, |ofd| {
            let owner = Owner::Description(ofd);
            let taken = self
                .files
                .with(file, false, |_, mut st| {
                    let redoable = |b: &Blocked| {
                        b.may_redo
                            && b.req.kind == LockKind::Flock
                            && b.req.ty == Some(LockType::Write)
                    };
                    let alone = st.posix.is_empty()
                        && st.blocked.iter().all(redoable)
                        && st.flocks.iter().all(|h| h.owner == owner);
                    if !alone {
                        return None;
                    }
                    let held = st.flocks.first().map(|h| (h.ty, h.pid));
                    st.flocks.clear();
                    st.wake_all_to_retry(&self.graph);
                    Some(held)
                })
                // No context: no lock at all on the file.
                .unwrap_or(Some(None));
            if taken.is_some() {
                self.files.remove_if_idle(file);
            }
            taken
        });
    }

    /// A flock of description `ofd` (process `pid`, asking for `want`) by a client that can
    /// redo it on the file's slot: whether the description is a member of the slot now, and
    /// the call the client's to redo there.
    pub(crate) fn flock_register(&self, file: FileId, ofd: OfdId, pid: Tgid, want: Mode) -> bool {
        self.flock_slots
            .as_ref()
            .is_some_and(|l| l.register(file, ofd, pid, want))
    }

    /// A parked LOCK_EX woken to retry whose client can redo it on the slot: if the file is
    /// leased and takes its description as a member, it leaves the engine's queue and is
    /// answered REDO; `None` for the engine.
    pub(crate) fn flock_redo_woken(
        &self,
        call: &LockCall,
        woken: &Arc<Waiter<()>>,
    ) -> Option<crate::Result<()>> {
        let (LockKind::Flock, Owner::Description(o), Some(LockType::Write)) =
            (call.req.kind, call.req.owner, call.req.ty)
        else {
            return None;
        };
        if !self.flock_register(call.file, o, call.req.pid, Mode::Exclusive) {
            return None;
        }
        self.files
            .with(call.file, false, |_, mut st| st.dequeue(woken, &self.graph));
        Some(Err(super::REDO))
    }

    /// After process `tgid`'s exit: wakes the slots' sleepers and drops the process's members
    /// that hold no lock (see [`FlockSlots::exit`]).
    pub(crate) fn flock_exit(&self, tgid: Tgid) {
        if let Some(l) = &self.flock_slots {
            l.exit(tgid);
        }
    }

    /// Whether description `ofd` may hold `file`'s flock lock through its lease (see
    /// [`FlockSlots::may_hold`]).
    pub(crate) fn flock_may_hold(&self, file: FileId, ofd: OfdId) -> bool {
        self.flock_slots
            .as_ref()
            .is_some_and(|l| l.may_hold(file, ofd))
    }

    /// Whether description `ofd` holds `file`'s flock lease (it then owns a lock as far as
    /// its embedder's bookkeeping goes).
    pub(crate) fn flock_leased(&self, file: FileId, ofd: OfdId) -> bool {
        self.flock_slots
            .as_ref()
            .is_some_and(|l| l.holds(file, ofd))
    }

    /// Takes every flock lease back into the engine (before a listing of all locks).
    pub(crate) fn flock_revoke_all(&self) {
        if let Some(l) = &self.flock_slots {
            l.revoke_all(|file, taken| self.import_flock(file, taken));
        }
    }
}
