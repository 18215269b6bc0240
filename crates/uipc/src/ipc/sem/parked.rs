//! A semop that waits without a sleeping thread: the parked form of semtimedop.
//!
//! [`IpcNamespace::semtimedop_start`](crate::ipc::IpcNamespace::semtimedop_start) queues the
//! operation as a sleeper would and hands back a [`ParkedSemop`]. Wakers complete it exactly as
//! they complete a sleeping one (the wakeup scan applies the operation under the set's lock and
//! completes its waiter), so a parked semop is finished by the waker; the embedder only
//! collects the result ([`ParkedSemop::poll`]) or withdraws the operation
//! ([`ParkedSemop::cancel`]: after a timeout or an interrupt, as a sleeper would). The
//! synchronous semtimedop is the same start followed by [`ParkedSemop::wait`].
//!
//! Entry and exit: no lock held. `cancel` takes the lock the operation was queued under (one
//! semaphore's for a single sop, the array lock otherwise), then the waiter's state.

use super::lock::Locked;
use super::op::Pending;
use super::SemSet;
use crate::wait::{Progress, Registration, WaitCtx, WakeReason};
use crate::{Errno, Result};
use std::sync::Arc;
use std::time::Instant;

/// A semop queued on its set, waiting for a waker to complete it (Linux's `sem_queue` whose
/// task is not asleep). Made by [`crate::ipc::IpcNamespace::semtimedop_start`].
///
/// Finish it with [`ParkedSemop::poll`] after a notification or with [`ParkedSemop::cancel`];
/// dropping it unfinished leaves the operation queued (a later waker would still apply it).
#[must_use = "a parked semop stays queued until polled to completion or cancelled"]
pub struct ParkedSemop {
    pub(super) set: Arc<SemSet>,
    pub(super) q: Arc<Pending>,
    pub(super) deadline: Option<Instant>,
    pub(super) registration: Registration,
}

impl ParkedSemop {
    /// When semtimedop's timeout ends the wait: cancel with [`WakeReason::TimedOut`] then.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// After a notification (or at any time): the result if a waker completed the operation,
    /// EINTR (as [`ParkedSemop::cancel`]) if the interrupt is raised, else still parked.
    pub fn poll(self) -> Progress<(), ParkedSemop> {
        if let Some(r) = self.q.waiter.take_done() {
            return Progress::Done(r);
        }
        if self.registration.interrupted() {
            return Progress::Done(self.cancel(WakeReason::Interrupted));
        }
        Progress::Parked(self)
    }

    /// Ends the wait as a sleeper does after its timeout (EAGAIN) or interrupt (EINTR): takes
    /// the set's lock and withdraws the operation, unless a waker completed it meanwhile
    /// (that result stands, as on Linux).
    pub fn cancel(self, reason: WakeReason) -> Result<()> {
        let mut locked = Locked::relock(&self.set, &self.q);
        match self.q.waiter.abort() {
            Some(r) => r,
            None => {
                locked.dequeue(&self.q);
                Err(match reason {
                    WakeReason::Interrupted => Errno::EINTR,
                    WakeReason::TimedOut => Errno::EAGAIN,
                })
            }
        }
    }

    /// Sleeps on the calling thread until completion or `wait`'s deadline (or the timeout's,
    /// whichever is first) or interrupt, then finishes as [`ParkedSemop::cancel`] would.
    pub(super) fn wait(self, wait: &WaitCtx<'_>) -> Result<()> {
        let mut ctx = *wait;
        if let Some(at) = self.deadline {
            ctx.deadline = Some(ctx.deadline.map_or(at, |w| w.min(at)));
        }
        match self.q.waiter.sleep(&ctx) {
            Ok(r) => r,
            Err(reason) => self.cancel(reason),
        }
    }
}
