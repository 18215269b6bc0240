//! msgsnd and msgrcv waiting without a sleeping thread: their parked forms.
//!
//! [`IpcNamespace::msgsnd_start`] and [`IpcNamespace::msgrcv_start`] queue the caller as a
//! sleeper would and hand back a parked call. The two differ as their sleepers do on Linux:
//!
//! - A sender is woken to RETRY ("there may be room"): [`ParkedMsgsnd::poll`], after the
//!   waker completed it, takes the queue's lock, leaves the sender list and runs the whole
//!   attempt again (permission, removal, room), which may queue it again (still parked). An
//!   interrupt seen after waking wins (EINTR), as Linux checks `signal_pending` first.
//! - A receiver is completed by the waker: a sender hands it the message itself (or E2BIG),
//!   removal gives EIDRM, and only IPC_SET asks it to look again (Linux's
//!   `expunge_all(-EAGAIN)`). A delivered result wins over a racing interruption.
//!
//! `cancel(reason)` is what a sleeper does after an interrupt or a deadline (both EINTR:
//! Linux's msgsnd and msgrcv have no timeout, a deadline is a signal arriving then): take the
//! queue's lock, abort the waiter, leave the list; a receiver's completion that raced it stands.
//! The synchronous calls are the same start followed by `wait`, which sleeps and finishes with
//! the same code.
//!
//! Entry and exit: no lock held; each step takes the queue's lock, then a waiter's state.

use super::ops::{RecvArgs, RecvStep, SendStep};
use super::{MsgQueue, RecvWake};
use crate::ipc::namespace::IpcNamespace;
use crate::wait::{ParkCtx, Progress, Registration, WaitCtx, WakeReason};
use crate::{Cred, Errno, Result};
use std::sync::Arc;

/// A msgsnd waiting for room in its queue. Made by [`IpcNamespace::msgsnd_start`].
///
/// Finish it with [`ParkedMsgsnd::poll`] after each notification, or [`ParkedMsgsnd::cancel`];
/// dropping it unfinished leaves the sender queued until the next wake-up of senders.
#[must_use = "a parked msgsnd stays queued until polled to completion or cancelled"]
pub struct ParkedMsgsnd {
    q: Arc<MsgQueue>,
    waiter: Arc<crate::Waiter<()>>,
    registration: Registration,
    park: ParkCtx,
    cred: Cred,
    mtype: i64,
    text: Vec<u8>,
    flags: i32,
}

impl ParkedMsgsnd {
    pub(super) fn new(
        q: Arc<MsgQueue>,
        waiter: Arc<crate::Waiter<()>>,
        park: &ParkCtx,
        (cred, mtype, text, flags): (Cred, i64, Vec<u8>, i32),
    ) -> ParkedMsgsnd {
        ParkedMsgsnd {
            registration: Registration::new(&waiter, park),
            q,
            waiter,
            park: park.clone(),
            cred,
            mtype,
            text,
            flags,
        }
    }

    /// After a notification (or at any time), on the namespace that started the call: if the
    /// sender was woken, tries again (sent, an error, or parked again with a new waiter); if
    /// the interrupt is raised, EINTR as [`ParkedMsgsnd::cancel`]; else still parked.
    pub fn poll(self, ns: &IpcNamespace) -> Progress<(), ParkedMsgsnd> {
        if self.waiter.take_done().is_some() {
            let interrupted = self.registration.interrupted();
            return self.retry(ns, interrupted);
        }
        if self.registration.interrupted() {
            return Progress::Done(self.cancel(WakeReason::Interrupted));
        }
        Progress::Parked(self)
    }

    /// Ends the wait as an interrupted sleeper does: leaves the sender list, EINTR (for either
    /// reason; msgsnd has no timeout of its own).
    pub fn cancel(self, _reason: WakeReason) -> Result<()> {
        let mut st = self.q.lock();
        self.waiter.abort();
        st.senders.retain(|s| !Arc::ptr_eq(&s.waiter, &self.waiter));
        Err(Errno::EINTR)
    }

    /// Woken: leave the list (the waker took this sender out already, unless it raced an
    /// abort) and, unless `interrupted`, run the attempt again under the same lock.
    fn retry(self, ns: &IpcNamespace, interrupted: bool) -> Progress<(), ParkedMsgsnd> {
        // The queue may have been published since the waker took this sender out.
        let _inside = ns.msg_fast_enter(self.q.header.id().get());
        let mut st = self.q.lock();
        st.senders.retain(|s| !Arc::ptr_eq(&s.waiter, &self.waiter));
        if interrupted {
            return Progress::Done(Err(Errno::EINTR));
        }
        let step = ns.msgsnd_locked(
            st, &self.cred, self.mtype, &self.text, self.flags, &self.park,
        );
        match step {
            Ok(SendStep::Sent) => Progress::Done(Ok(())),
            Ok(SendStep::Queued(waiter)) => Progress::Parked(ParkedMsgsnd::new(
                self.q.clone(),
                waiter,
                &self.park,
                (self.cred, self.mtype, self.text, self.flags),
            )),
            Err(e) => Progress::Done(Err(e)),
        }
    }

    /// Sleeps on the calling thread, retrying after each wake-up, until sent or ended by
    /// `ctx` (EINTR).
    pub(super) fn wait(mut self, ns: &IpcNamespace, ctx: &WaitCtx<'_>) -> Result<()> {
        loop {
            match self.waiter.sleep(ctx) {
                Ok(()) => match self.retry(ns, ctx.interrupted()) {
                    Progress::Done(r) => return r,
                    Progress::Parked(p) => self = p,
                },
                Err(reason) => return self.cancel(reason),
            }
        }
    }
}

/// A msgrcv waiting for a matching message. Made by [`IpcNamespace::msgrcv_start`].
///
/// Finish it with [`ParkedMsgrcv::poll`] after each notification, or [`ParkedMsgrcv::cancel`];
/// dropping it unfinished leaves the receiver queued (a later sender would hand it a message
/// that nobody collects).
#[must_use = "a parked msgrcv stays queued until polled to completion or cancelled"]
pub struct ParkedMsgrcv {
    q: Arc<MsgQueue>,
    waiter: Arc<crate::Waiter<RecvWake>>,
    registration: Registration,
    park: ParkCtx,
    cred: Cred,
    args: RecvArgs,
}

impl ParkedMsgrcv {
    pub(super) fn new(
        q: Arc<MsgQueue>,
        waiter: Arc<crate::Waiter<RecvWake>>,
        park: &ParkCtx,
        cred: Cred,
        args: RecvArgs,
    ) -> ParkedMsgrcv {
        ParkedMsgrcv {
            registration: Registration::new(&waiter, park),
            q,
            waiter,
            park: park.clone(),
            cred,
            args,
        }
    }

    /// After a notification (or at any time), on the namespace that started the call: the
    /// message (or error) a waker delivered; after IPC_SET's "look again", a new attempt
    /// (possibly parked again); if the interrupt is raised, EINTR as
    /// [`ParkedMsgrcv::cancel`]; else still parked.
    pub fn poll(self, ns: &IpcNamespace) -> Progress<(i64, Vec<u8>), ParkedMsgrcv> {
        if let Some(wake) = self.waiter.take_done() {
            let interrupted = self.registration.interrupted();
            return self.after_wake(ns, Some(wake), interrupted);
        }
        if self.registration.interrupted() {
            return Progress::Done(self.cancel(WakeReason::Interrupted));
        }
        Progress::Parked(self)
    }

    /// Ends the wait as an interrupted sleeper does: leaves the receiver list; a delivery
    /// that raced it stands, anything else is EINTR (for either reason).
    pub fn cancel(self, _reason: WakeReason) -> Result<(i64, Vec<u8>)> {
        let late = {
            let mut st = self.q.lock();
            let late = self.waiter.abort();
            st.receivers
                .retain(|r| !Arc::ptr_eq(&r.waiter, &self.waiter));
            late
        };
        let args = self.args;
        match late {
            Some(RecvWake::Message(mtype, text)) => Ok(args.truncate((mtype, text))),
            Some(RecvWake::Fail(e)) => Err(e),
            Some(RecvWake::Retry) | None => Err(Errno::EINTR),
        }
    }

    /// Finishes after a wake-up `wake`; `stop` (interrupted, or past a deadline) turns a
    /// "look again" into EINTR.
    fn after_wake(
        self,
        ns: &IpcNamespace,
        wake: Option<RecvWake>,
        stop: bool,
    ) -> Progress<(i64, Vec<u8>), ParkedMsgrcv> {
        match wake {
            Some(RecvWake::Message(mtype, text)) => {
                Progress::Done(Ok(self.args.truncate((mtype, text))))
            }
            Some(RecvWake::Fail(e)) => Progress::Done(Err(e)),
            Some(RecvWake::Retry) | None if stop || wake.is_none() => {
                Progress::Done(Err(Errno::EINTR))
            }
            Some(RecvWake::Retry) | None => {
                let _inside = ns.msg_fast_enter(self.q.header.id().get());
                match ns.msgrcv_once(&self.q, &self.cred, &self.args, &self.park) {
                    Ok(RecvStep::Got(m)) => Progress::Done(Ok(m)),
                    Ok(RecvStep::Queued(w)) => Progress::Parked(ParkedMsgrcv::new(
                        self.q.clone(),
                        w,
                        &self.park,
                        self.cred,
                        self.args,
                    )),
                    Err(e) => Progress::Done(Err(e)),
                }
            }
        }
    }

    /// Sleeps on the calling thread until a delivery, an error, or `ctx` ends it (EINTR),
    /// looking again after each IPC_SET.
    pub(super) fn wait(mut self, ns: &IpcNamespace, ctx: &WaitCtx<'_>) -> Result<(i64, Vec<u8>)> {
        loop {
            match self.waiter.sleep(ctx) {
                Ok(wake) => {
                    let stop = ctx.interrupted() || deadline_passed(ctx);
                    match self.after_wake(ns, Some(wake), stop) {
                        Progress::Done(r) => return r,
                        Progress::Parked(p) => self = p,
                    }
                }
                Err(reason) => return self.cancel(reason),
            }
        }
    }
}

fn deadline_passed(ctx: &WaitCtx<'_>) -> bool {
    ctx.deadline.is_some_and(|d| std::time::Instant::now() >= d)
}
