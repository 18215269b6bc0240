//! The lock manager's calls into its leases: every engine call on a file enters it first
//! (revoking its lease, whose locks come back into the engine) and leaves it after (where a
//! lease may be granted). See `book` and ARCHITECTURE.md "File lock leases".

use super::book::NotTaken;
use super::shared_book::SharedCall;
use super::{Leases, Piece, LEASE_RANGES};
use crate::locks::file::Request;
use crate::locks::parked::LockCall;
use crate::locks::types::{FileId, LockKind, LockType, Owner, OFFSET_MAX};
use crate::locks::LockManager;
use crate::wait::Waiter;
use crate::Tgid;
use std::sync::Arc;

impl LockManager {
    /// Gives the manager a lease area: from now on a process that alone locks a file may be
    /// granted its lease.
    pub fn with_leases(mut self, leases: Leases) -> LockManager {
        let leases = std::sync::Arc::new(leases);
        self.graph.set_leases(leases.clone());
        self.leases = Some(leases);
        self
    }

    /// The lease area, if any.
    pub fn leases(&self) -> Option<&Leases> {
        self.leases.as_deref()
    }

    /// A POSIX call that a file in shared mode serves on its slot (`Leases::shared_call`); a
    /// parked request retried (`woken`) leaves the engine's queue then.
    pub(crate) fn shared_step(
        &self,
        call: &LockCall,
        wait: bool,
        woken: Option<&Arc<Waiter<()>>>,
    ) -> Option<crate::Result<()>> {
        let l = self.leases.as_ref()?;
        let req = &call.req;
        if req.kind != LockKind::Posix || call.flock_conversion {
            return None;
        }
        let write = match req.ty {
            Some(LockType::Write) => true,
            None => false,
            Some(LockType::Read) => return None,
        };
        let span = (req.start, req.end);
        match l.shared_call(call.file, req.pid.get(), write, span, wait, woken.is_some()) {
            SharedCall::Engine => None,
            SharedCall::Done(r) => {
                if let Some(w) = woken {
                    self.files
                        .with(call.file, false, |_, mut st| st.dequeue(w, &self.graph));
                }
                Some(r)
            }
        }
    }

    /// For a contended `file` going into shared mode: if its locks fit (no flock or OFD lock,
    /// at most one POSIX lock and that a whole-file write lock, every sleeping request a
    /// whole-file POSIX write lock of a process that can sleep on the slot), the owner of that
    /// lock (0: none), which leaves the engine, and every sleeping request is woken to retry
    /// (on the slot). `None` if they do not fit.
    fn take_shared(&self, l: &Leases, file: FileId) -> Option<i32> {
        let whole_write = |owner: Owner, ty: Option<LockType>, start: i64, end: i64| match owner {
            Owner::Process(p) if ty == Some(LockType::Write) && start == 0 && end == OFFSET_MAX => {
                Some(p.get())
            }
            _ => None,
        };
        self.files
            .with(file, false, |_, mut st| {
                if !st.flocks.is_empty() || st.posix.len() > 1 {
                    return None;
                }
                let owner = match st.posix.first() {
                    None => 0,
                    Some(h) => whole_write(h.owner, Some(h.ty), h.start, h.end)?,
                };
                let sleepers_fit = st.blocked.iter().all(|b| {
                    b.req.kind == LockKind::Posix
                        && whole_write(b.req.owner, b.req.ty, b.req.start, b.req.end)
                            .is_some_and(|p| l.has_asked(p))
                });
                if !sleepers_fit {
                    return None;
                }
                st.posix.clear();
                st.wake_all_to_retry(&self.graph);
                Some(owner)
            })
            .unwrap_or(Some(0))
    }

    /// Puts `pieces` into the engine as `pid`'s POSIX locks on `file` (nobody else has locks
    /// there: nothing conflicts).
    fn import(&self, file: FileId, pid: i32, pieces: &[Piece]) {
        if pieces.is_empty() {
            return;
        }
        let pid = Tgid::new(pid);
        let limit = self.config.max_locks_per_file;
        self.files.with(file, true, |_, mut st| {
            for p in pieces {
                let req = Request {
                    kind: LockKind::Posix,
                    owner: Owner::Process(pid),
                    pid,
                    ty: Some(if p.write {
                        LockType::Write
                    } else {
                        LockType::Read
                    }),
                    start: p.start,
                    end: p.end,
                };
                let _ = st.apply_posix(&req, limit);
            }
        });
    }

    /// A call on `file` by process `by` begins (see [`Leases::enter`]).
    pub(crate) fn lease_enter(&self, file: FileId, by: Tgid, keep_others: bool) {
        if let Some(l) = &self.leases {
            l.enter(file, by.get(), keep_others, |pid, pieces| {
                self.import(file, pid, pieces)
            });
        }
    }

    /// The call ends; `grant`: the process of a successful POSIX set command.
    pub(crate) fn lease_leave(&self, file: FileId, grant: Option<Tgid>) {
        let Some(l) = &self.leases else { return };
        l.leave(
            file,
            grant.map(Tgid::get),
            |pid| {
                let taken = self
                    .files
                    .with(file, false, |_, mut st| {
                        let owner = Owner::Process(Tgid::new(pid));
                        if !st.blocked.is_empty() || st.posix.iter().any(|h| h.owner != owner) {
                            return Err(NotTaken::Contended);
                        }
                        if !st.flocks.is_empty() || st.posix.len() > LEASE_RANGES {
                            return Err(NotTaken::Unfit);
                        }
                        let pieces = st
                            .posix
                            .iter()
                            .map(|h| Piece {
                                write: h.ty == LockType::Write,
                                start: h.start,
                                end: h.end,
                            })
                            .collect();
                        st.posix.clear();
                        Ok(pieces)
                    })
                    // No context: no lock at all on the file.
                    .unwrap_or(Ok(Vec::new()));
                if taken.is_ok() {
                    self.files.remove_if_idle(file);
                }
                taken
            },
            || self.take_shared(l, file),
        );
    }

    /// Takes every lease back into the engine (before a listing of all locks).
    pub(crate) fn leases_revoke_all(&self) {
        if let Some(l) = &self.leases {
            l.revoke_all(|file, pid, pieces| self.import(file, pid, pieces));
        }
    }
}
