//! The uncontended request: what a lock or unlock costs when nobody waits on the file and
//! nothing held conflicts with it (seed 001's posix02 and flock02, every task on its own file).
//!
//! [`FileState::uncontended`] runs first, under the file's mutex, in every request that is not
//! a woken waiter's retry. It finishes the request only when the general path
//! ([`super::LockManager`]'s `try_request`) would reach the same result without waking,
//! queueing or recording anything:
//! - no request is blocked on the file, or every one left asleep is behind a woken request
//!   that has not retried yet (`FileState::quiet`, Linux mode only): either way no release can
//!   wake anyone and no blocker needs recording (the general path's `after_change` would
//!   return at once). With 128 tasks on one file this is the common case: a woken waiter
//!   waits for a core while the running tasks lock and unlock past it, as on Linux;
//! - no held lock conflicts with the request: an unlock never conflicts; a POSIX/OFD lock is
//!   checked against the list in one pass (an empty list, or one holding only the caller's own
//!   locks, passes at once); a flock request against the other descriptions' flock locks.
//!
//! Otherwise it returns `None`, having changed nothing, and the general path runs in the same
//! critical section. The results, list orders and errors (ENOLCK) are those of the general
//! path: flock's conversion drops the description's old lock and appends the new one, as
//! `try_request` followed by `FileState::set` does.
//!
//! Entry: the file's mutex held. Nothing here allocates except a list growing.

use super::file::{conflicts, FileState, Request};
use super::types::LockKind;
use crate::{Errno, Result};

impl FileState {
    /// Finishes `req` if nobody waits on the file and nothing conflicts (see the module doc);
    /// `None`, with nothing changed, if the general path must run.
    #[inline]
    pub fn uncontended(
        &mut self,
        req: &Request,
        flock_conversion: bool,
        limit: usize,
    ) -> Option<Result<()>> {
        if !self.blocked.is_empty() && !self.quiet {
            return None;
        }
        if req.kind == LockKind::Flock {
            return self.uncontended_flock(req, flock_conversion, limit);
        }
        if req.ty.is_some() && self.posix.iter().any(|h| conflicts(req, h)) {
            return None;
        }
        // With nobody blocked, whether bytes were released does not matter.
        Some(self.apply_posix(req, limit).map(|_released| ()))
    }

    /// The flock part of [`FileState::uncontended`].
    #[inline]
    fn uncontended_flock(
        &mut self,
        req: &Request,
        flock_conversion: bool,
        limit: usize,
    ) -> Option<Result<()>> {
        let mut own = None;
        for (i, h) in self.flocks.iter().enumerate() {
            if h.owner == req.owner {
                own = Some(i);
            } else if conflicts(req, h) {
                return None;
            }
        }
        if let Some(i) = own {
            if !flock_conversion {
                return None;
            }
            if Some(self.flocks[i].ty) == req.ty {
                return Some(Ok(()));
            }
            if i + 1 == self.flocks.len() {
                self.flocks.pop();
            } else {
                self.flocks.remove(i);
            }
        }
        let Some(ty) = req.ty else {
            return Some(Ok(()));
        };
        if self.flocks.len() >= limit {
            return Some(Err(Errno::ENOLCK));
        }
        self.flocks.push(req.held(ty));
        Some(Ok(()))
    }
}
