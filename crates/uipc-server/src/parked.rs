//! A call that waits on the daemon without a thread: the engine's parked request, plus what
//! the daemon must keep until it is answered.
//!
//! [`start`] turns a request that would sleep into the engine's parked form
//! (`semtimedop_start`, `msgsnd_start`, `msgrcv_start`, the lock manager's `fcntl_start` and
//! `flock_start`). Its waiter notifies the connection (a job for a worker) when a waker
//! completes it or the connection's interrupt is raised; [`ParkedCall::poll`] then yields the
//! response or leaves it parked, and [`ParkedCall::cancel`] ends it early (semtimedop's
//! deadline: EAGAIN; an exit or a hang-up: EINTR; a completion that raced it stands).
//!
//! Entry and exit: no lock held; the engine takes its object locks inside each step.

use crate::descriptions::Descriptions;
use crate::dispatch::{done, message, Ctx};
use crate::lockserve::{self, ParkedLockCall};
use crate::outcome::Outcome;
use std::time::Instant;
use uipc::ipc::msg::{ParkedMsgrcv, ParkedMsgsnd};
use uipc::ipc::sem::ParkedSemop;
use uipc::ipc::IpcNamespace;
use uipc::locks::LockManager;
use uipc::{ParkCtx, Progress, WakeReason};
use uipc_proto::{Request, Response};

/// One parked engine call.
pub enum ParkedCall {
    /// semop / semtimedop: completed by the waker.
    Semop(ParkedSemop),
    /// msgsnd: woken to retry.
    Msgsnd(ParkedMsgsnd),
    /// msgrcv: completed by the sender (or told to look again).
    Msgrcv(ParkedMsgrcv),
    /// F_SETLKW, F_OFD_SETLKW, blocking flock: woken to retry.
    Lock(ParkedLockCall),
}

/// Starts `req`, a call that may sleep, without sleeping: the response if it finished, else
/// the parked call. `None` for requests that never sleep (or whose arguments were unreadable:
/// those fail before any wait), which the caller serves as usual.
pub fn start(cx: &Ctx<'_>, req: &Request, park: &ParkCtx) -> Option<Outcome<ParkedCall>> {
    let Ctx { ns, cred, .. } = *cx;
    Some(match req {
        Request::Semtimedop {
            semid,
            sops: Some(sops),
            timeout,
            ..
        } => match ns.semtimedop_start(cred, *semid, sops, *timeout, park) {
            Progress::Done(r) => Outcome::Answer(done(r)),
            Progress::Parked(p) => Outcome::Waiting(ParkedCall::Semop(p)),
        },
        Request::Msgsnd {
            msqid,
            mtype,
            text: Some(text),
            flags,
            ..
        } => match ns.msgsnd_start(cred, *msqid, *mtype, text, *flags, park) {
            Progress::Done(r) => Outcome::Answer(done(r)),
            Progress::Parked(p) => Outcome::Waiting(ParkedCall::Msgsnd(p)),
        },
        Request::Msgrcv {
            msqid,
            maxsize,
            msgtyp,
            flags,
        } => match ns.msgrcv_start(cred, *msqid, *maxsize, *msgtyp, *flags, park) {
            Progress::Done(r) => Outcome::Answer(message(r)),
            Progress::Parked(p) => Outcome::Waiting(ParkedCall::Msgrcv(p)),
        },
        Request::Lock(lock) => lockserve::start(&cx.lock_ctx(), lock, park)?.map(ParkedCall::Lock),
        _ => return None,
    })
}

impl ParkedCall {
    /// When the call must be cancelled with [`WakeReason::TimedOut`] (semtimedop's timeout).
    pub fn deadline(&self) -> Option<Instant> {
        match self {
            ParkedCall::Semop(p) => p.deadline(),
            _ => None,
        }
    }

    /// After a notification: the response, or the call still parked. A lock call retries
    /// in `locks`, with the open file descriptions of `descriptions`; a message call in `ns`.
    pub fn poll(
        self,
        locks: &LockManager,
        descriptions: &Descriptions,
        ns: &IpcNamespace,
    ) -> Outcome<ParkedCall> {
        match self {
            ParkedCall::Semop(p) => match p.poll() {
                Progress::Done(r) => Outcome::Answer(done(r)),
                Progress::Parked(p) => Outcome::Waiting(ParkedCall::Semop(p)),
            },
            ParkedCall::Msgsnd(p) => match p.poll(ns) {
                Progress::Done(r) => Outcome::Answer(done(r)),
                Progress::Parked(p) => Outcome::Waiting(ParkedCall::Msgsnd(p)),
            },
            ParkedCall::Msgrcv(p) => match p.poll(ns) {
                Progress::Done(r) => Outcome::Answer(message(r)),
                Progress::Parked(p) => Outcome::Waiting(ParkedCall::Msgrcv(p)),
            },
            ParkedCall::Lock(p) => p.poll((locks, descriptions)).map(ParkedCall::Lock),
        }
    }

    /// Ends the call now, as a sleeper woken by `reason` would end.
    pub fn cancel(
        self,
        locks: &LockManager,
        descriptions: &Descriptions,
        reason: WakeReason,
    ) -> Response {
        match self {
            ParkedCall::Semop(p) => done(p.cancel(reason)),
            ParkedCall::Msgsnd(p) => done(p.cancel(reason)),
            ParkedCall::Msgrcv(p) => message(p.cancel(reason)),
            ParkedCall::Lock(p) => p.cancel((locks, descriptions), reason),
        }
    }
}
