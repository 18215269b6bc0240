//! A blocking lock request waiting without a sleeping thread: [`ParkedLock`].
//!
//! [`LockManager::fcntl_start`] and [`LockManager::flock_start`] queue a conflicting request
//! as a sleeper would (in the file's blocked list and the deadlock graph) and hand back a
//! [`ParkedLock`]. As on Linux, a release does not hand the lock over: it wakes the request to
//! RETRY. [`ParkedLock::poll`], after the notification, takes the file's lock, leaves the queue
//! and tries again: granted, an error (EDEADLK), or queued again (still parked, with a new
//! waiter). [`ParkedLock::cancel`] is what an interrupted sleeper does: under the file's
//! lock, abort the waiter and leave the queue (EINTR); if a release woke it meanwhile, it
//! retries once more first, as a sleeper whose wake-up raced its signal does. Linux has no
//! timeout for these calls: a deadline is a signal arriving then (EINTR too).
//!
//! The synchronous calls are the same start followed by [`ParkedLock::wait`], which sleeps
//! and finishes with the same steps.
//!
//! Entry and exit: no lock held; each step takes the file's lock, then the deadlock graph, then
//! a waiter's state (the order of [`super`]).

use super::file::{FileLocks, Request};
use super::types::FileId;
use super::LockManager;
use crate::sync::{lock, Arc as SyncArc};
use crate::wait::{ParkCtx, Progress, Registration, WaitCtx, Waiter, WakeReason};
use crate::{Errno, Result};
use std::sync::Arc;

/// What a blocking request retries with.
#[derive(Clone, Copy)]
pub(crate) struct LockCall {
    pub(crate) file: FileId,
    pub(crate) req: Request,
    pub(crate) flock_conversion: bool,
    /// A flock whose client can redo it on the file's flock lease slot (`FLOCK_MAY_REDO`).
    pub(crate) may_redo: bool,
}

/// A lock request queued behind a conflicting lock. Made by [`LockManager::fcntl_start`] and
/// [`LockManager::flock_start`].
///
/// Finish it with [`ParkedLock::poll`] after each notification, or [`ParkedLock::cancel`], on
/// the manager that started it; dropping it unfinished leaves the request in the file's queue
/// (and the deadlock graph) until the file's next release.
#[must_use = "a parked lock request stays queued until polled to completion or cancelled"]
pub struct ParkedLock {
    fctx: SyncArc<FileLocks>,
    waiter: Arc<Waiter<()>>,
    registration: Registration,
    park: ParkCtx,
    call: LockCall,
}

impl ParkedLock {
    pub(super) fn new(
        fctx: SyncArc<FileLocks>,
        waiter: Arc<Waiter<()>>,
        park: &ParkCtx,
        call: LockCall,
    ) -> ParkedLock {
        ParkedLock {
            registration: Registration::new(&waiter, park),
            fctx,
            waiter,
            park: park.clone(),
            call,
        }
    }

    /// After a notification (or at any time): if a release woke the request, retries it
    /// (granted, an error, or parked again; parked again with the interrupt raised ends with
    /// EINTR at once); if the interrupt is raised, EINTR as [`ParkedLock::cancel`]; else still
    /// parked.
    pub fn poll(self, locks: &LockManager) -> Progress<(), ParkedLock> {
        if self.waiter.take_done().is_some() {
            return match self.retry(locks) {
                Progress::Parked(p) if p.registration.interrupted() => {
                    Progress::Done(p.cancel(locks, WakeReason::Interrupted))
                }
                other => other,
            };
        }
        if self.registration.interrupted() {
            return Progress::Done(self.cancel(locks, WakeReason::Interrupted));
        }
        Progress::Parked(self)
    }

    /// Ends the wait with EINTR (for either reason), leaving the queue, unless a release woke
    /// the request meanwhile: then it is tried once more, and only if it would wait again does
    /// it end with EINTR.
    pub fn cancel(self, locks: &LockManager, _reason: WakeReason) -> Result<()> {
        let mut parked = self;
        loop {
            {
                let mut st = lock(&parked.fctx.state);
                if parked.waiter.abort().is_none() {
                    st.dequeue(&parked.waiter, &locks.graph);
                    return Err(Errno::EINTR);
                }
            }
            match parked.retry(locks) {
                Progress::Done(r) => return r,
                Progress::Parked(p) => parked = p,
            }
        }
    }

    /// Woken: one more attempt, leaving the queue in the same critical section.
    fn retry(self, locks: &LockManager) -> Progress<(), ParkedLock> {
        locks.request_step(self.call, true, Some(self.waiter.clone()), &self.park)
    }

    /// Sleeps on the calling thread, retrying after each wake-up, until granted, failed, or
    /// ended by `ctx` (EINTR). Out of line: the synchronous calls' uncontended path stays short.
    #[cold]
    #[inline(never)]
    pub(super) fn wait(mut self, locks: &LockManager, ctx: &WaitCtx<'_>) -> Result<()> {
        loop {
            match self.waiter.sleep(ctx) {
                Ok(()) => match self.retry(locks) {
                    Progress::Done(r) => return r,
                    Progress::Parked(p) => self = p,
                },
                Err(reason) => return self.cancel(locks, reason),
            }
        }
    }
}
