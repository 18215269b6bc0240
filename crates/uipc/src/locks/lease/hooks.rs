//! The lock manager's calls into its leases: every engine call on a file enters it first
//! (revoking its lease, whose locks come back into the engine) and leaves it after (where a
//! lease may be granted). See `book` and ARCHITECTURE.md "File lock leases".

use super::{Leases, Piece, LEASE_RANGES};
use crate::locks::file::Request;
use crate::locks::types::{FileId, LockKind, LockType, Owner};
use crate::locks::LockManager;

impl LockManager {
    /// Gives the manager a lease area: from now on a process that alone locks a file may be
    /// granted its lease.
    pub fn with_leases(mut self, leases: Leases) -> LockManager {
        self.leases = Some(leases);
        self
    }

    /// The lease area, if any.
    pub fn leases(&self) -> Option<&Leases> {
        self.leases.as_ref()
    }

    /// Puts `pieces` into the engine as `pid`'s POSIX locks on `file` (nobody else has locks
    /// there: nothing conflicts).
    fn import(&self, file: FileId, pid: i32, pieces: &[Piece]) {
        if pieces.is_empty() {
            return;
        }
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
    pub(crate) fn lease_enter(&self, file: FileId, by: i32, keep_others: bool) {
        if let Some(l) = &self.leases {
            l.enter(file, by, keep_others, |pid, pieces| {
                self.import(file, pid, pieces)
            });
        }
    }

    /// The call ends; `grant`: the process of a successful POSIX set command.
    pub(crate) fn lease_leave(&self, file: FileId, grant: Option<i32>) {
        let Some(l) = &self.leases else { return };
        l.leave(file, grant, |pid| {
            let taken = self
                .files
                .with(file, false, |_, mut st| {
                    let owner = Owner::Process(pid);
                    let alone = st.flocks.is_empty()
                        && st.blocked.is_empty()
                        && st.posix.len() <= LEASE_RANGES
                        && st.posix.iter().all(|h| h.owner == owner);
                    if !alone {
                        return None;
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
                    Some(pieces)
                })
                // No context: no lock at all on the file.
                .unwrap_or(Some(Vec::new()));
            if taken.is_some() {
                self.files.remove_if_idle(file);
            }
            taken
        });
    }

    /// Takes every lease back into the engine (before a listing of all locks).
    pub(crate) fn leases_revoke_all(&self) {
        if let Some(l) = &self.leases {
            l.revoke_all(|file, pid, pieces| self.import(file, pid, pieces));
        }
    }
}
