//! File-lock requests, served on the daemon's [`LockManager`].
//!
//! The descriptor the client acted through arrives with the request; from the daemon's copy
//! come the file (`st_dev`, `st_ino`), the access mode, the offset and the size
//! ([`open_file_of`]), and for OFD and flock calls the description's identity
//! ([`Descriptions`]). POSIX locks belong to the caller's tgid (the kernel-verified pid).
//!
//! Checks keep Linux's order: the engine gets `None` for a descriptor that was not open in the
//! client (none arrived) or is `O_PATH`, and decides EBADF/EINVAL itself; an unreadable
//! `struct flock` is EFAULT after the descriptor check (`do_fcntl` looks the descriptor up
//! first, then `fcntl_getlk`/`fcntl_setlk` copy the structure).
//!
//! Closes and exits: `close` drops the process's POSIX locks on the file, and the
//! description's OFD and flock locks if no other descriptor in any process refers to it;
//! [`sweep`] (after a process exit or exec, and when a call conflicts, F_GETLK's answer naming
//! a lock included: then for the call's file only) drops the OFD and flock locks of every
//! description nobody holds open any more (it looks only for descriptions that hold a lock
//! or wait for one: a flock lease member that does not hold the lease's lock has nothing to
//! drop). A call that conflicted is
//! made once more if the sweep dropped anything (a request already asleep is not woken by a
//! holder that goes silently; it is granted when a sweep drops that lock).
//!
//! `/proc/PID/fdinfo/FD` ([`LockRequest::FdInfo`]): the reader sends its own descriptor of
//! FD's description; the answer is the `lock:` lines of PID's POSIX locks on the file and of
//! that description's OFD and flock locks.
//!
//! An exec's close-on-exec descriptors, reported before the exec, are pending closes
//! (`execclose.rs`), resolved before every call served here.
//!
//! Blocking calls ([`start`]): the daemon first makes the call without waiting (through
//! [`serve`], so the sweep above applies); if it would wait, [`start`] queues it in the engine
//! and returns a [`ParkedLockCall`], which keeps the description entered in the table until it
//! finishes. Entry and exit: no lock held; nothing here sleeps (the synchronous [`serve`]
//! would, on the connection's interrupt, if handed a blocking call the daemon did not park).

use crate::descriptions::{open_file_of, Descriptions, Scope};
use crate::hints::LockHints;
use crate::outcome::Outcome;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use uipc::locks::{
    LockInfo, LockKind, LockManager, OfdId, OpenFile, Owner, ParkedLock, F_GETLK, F_OFD_GETLK,
    F_OFD_SETLK, F_OFD_SETLKW, F_SETLKW, LOCK_MAND, LOCK_NB,
};
use uipc::{Cred, Errno, Interrupt, ParkCtx, Progress, Tgid, WaitCtx, WakeReason};
use uipc_proto::{HelloArea, LockLine, LockRequest, LockResponse, Response, HINT_SLOTS};

/// What a lock request needs.
pub struct LockCtx<'a> {
    /// The lock manager.
    pub locks: &'a LockManager,
    /// The descriptions that may own locks.
    pub descriptions: &'a Descriptions,
    /// The lock hints, marked for every file a lock call acts on.
    pub hints: Option<&'a LockHints>,
    /// The caller.
    pub cred: &'a Cred,
    /// How the caller numbers pids (`None`: as the daemon does), asked only by a reply that
    /// carries pids (it reads `/proc`).
    pub pid_view: &'a dyn Fn() -> Option<crate::pidns::PidView>,
    /// Raised to end a blocking call with EINTR.
    pub irq: &'a Interrupt,
    /// The descriptor that came with the request.
    pub fd: Option<&'a OwnedFd>,
    /// Run before a close's or a sweep's search goes past the descriptions' witnesses (reads
    /// descriptors in `/proc`), which takes a while: the daemon lets
    /// another worker watch the sockets meanwhile. A call that scans nothing keeps its thread.
    pub before_scan: &'a dyn Fn(),
}

fn err(e: Errno) -> Response {
    Response::Error(e.raw())
}

fn line(l: &LockInfo) -> LockLine {
    LockLine {
        kind: match l.kind {
            LockKind::Posix => 0,
            LockKind::Ofd => 1,
            LockKind::Flock => 2,
        },
        l_type: l.ty.raw(),
        pid: l.pid,
        dev: l.file.dev,
        ino: l.file.ino,
        start: l.start,
        end: l.end,
        blocked_behind: l.blocked_behind.map(|b| b as u32),
    }
}

/// The request's descriptor as the engine sees it, with its description entered in the table
/// (for OFD and flock calls: `needs_description`) and the id to release after the call.
fn describe(
    cx: &LockCtx<'_>,
    needs_description: bool,
) -> Result<(Option<OpenFile>, Option<OfdId>), Errno> {
    let open = cx.fd.and_then(|fd| open_file_of(fd.as_raw_fd()));
    if let (Some(open), Some(hints)) = (&open, cx.hints) {
        hints.mark(open.file);
    }
    let (Some(mut open), Some(fd), true) = (open, cx.fd, needs_description) else {
        return Ok((open, None));
    };
    let ofd = cx.descriptions.acquire(fd, open.file, cx.cred.tgid.get())?;
    open.ofd = ofd;
    crate::flocknames::name(cx.locks, cx.descriptions, ofd);
    Ok((Some(open), Some(ofd)))
}

/// Runs `call` with the description of the request's descriptor entered in the table (for
/// OFD and flock calls), released after.
fn with_description(
    cx: &LockCtx<'_>,
    needs_description: bool,
    call: impl FnOnce(Option<&OpenFile>) -> Response,
) -> Response {
    match describe(cx, needs_description) {
        Ok((open, ofd)) => {
            let resp = call(open.as_ref());
            if let Some(ofd) = ofd {
                crate::flocknames::unname(cx.locks, ofd);
                cx.descriptions.release(ofd, cx.locks);
            }
            resp
        }
        Err(e) => err(e),
    }
}

/// A blocking lock call that waits without a thread: the engine's parked request, and the
/// description it holds entered in the table until it finishes.
pub struct ParkedLockCall {
    call: ParkedLock,
    ofd: Option<OfdId>,
}

/// The response of a finished lock call; releases its description.
fn finish_lock(
    cx: (&LockManager, &Descriptions),
    ofd: Option<OfdId>,
    r: Result<(), Errno>,
) -> Response {
    if let Some(ofd) = ofd {
        crate::flocknames::unname(cx.0, ofd);
        cx.1.release(ofd, cx.0);
    }
    match r {
        Ok(()) => Response::Ret(0),
        Err(e) => err(e),
    }
}

impl ParkedLockCall {
    /// After a notification: the response if the request finished, else still parked.
    pub fn poll(self, cx: (&LockManager, &Descriptions)) -> Outcome<Self> {
        match self.call.poll(cx.0) {
            Progress::Done(r) => Outcome::Answer(finish_lock(cx, self.ofd, r)),
            Progress::Parked(call) => Outcome::Waiting(ParkedLockCall { call, ..self }),
        }
    }

    /// Ends the wait (EINTR unless a release raced it and the retry took the lock).
    pub fn cancel(self, cx: (&LockManager, &Descriptions), reason: WakeReason) -> Response {
        let r = self.call.cancel(cx.0, reason);
        finish_lock(cx, self.ofd, r)
    }
}

/// Starts a blocking lock call (F_SETLKW, F_OFD_SETLKW, flock without LOCK_NB) without
/// sleeping: the response, or the parked call. `None` for any other request (never blocking).
pub fn start(
    cx: &LockCtx<'_>,
    req: &LockRequest,
    park: &ParkCtx,
) -> Option<Outcome<ParkedLockCall>> {
    let (needs_description, is_fcntl) = match *req {
        LockRequest::Fcntl {
            cmd: cmd @ (F_SETLKW | F_OFD_SETLKW),
            flock: Some(_),
        } => (cmd == F_OFD_SETLKW, true),
        LockRequest::Flock { cmd } if cmd & (LOCK_NB | LOCK_MAND) == 0 => (true, false),
        _ => return None,
    };
    cx.descriptions.exec.resolve(cx.locks);
    let (open, ofd) = match describe(cx, needs_description) {
        Ok(d) => d,
        Err(e) => return Some(Outcome::Answer(err(e))),
    };
    let progress = match *req {
        LockRequest::Fcntl {
            cmd,
            flock: Some(mut fl),
        } if is_fcntl => cx
            .locks
            .fcntl_start(cx.cred, open.as_ref(), cmd, &mut fl, park),
        LockRequest::Flock { cmd } => cx.locks.flock_start(cx.cred, open.as_ref(), cmd, park),
        _ => unreachable!("matched above"),
    };
    Some(match progress {
        Progress::Done(r) => Outcome::Answer(finish_lock((cx.locks, cx.descriptions), ofd, r)),
        Progress::Parked(call) => Outcome::Waiting(ParkedLockCall { call, ofd }),
    })
}

/// Serves one lock request; the lock hints' descriptor comes back with their answer.
pub fn serve(cx: &LockCtx<'_>, req: LockRequest) -> (Response, Option<OwnedFd>) {
    let wait = WaitCtx::FOREVER.interruptible(cx.irq);
    // Whatever a process closed by its exec is closed before this call.
    cx.descriptions.exec.resolve(cx.locks);
    let resp = match req {
        LockRequest::Fcntl { cmd, flock } => {
            let ofd_cmd = matches!(cmd, F_OFD_GETLK | F_OFD_SETLK | F_OFD_SETLKW);
            retry_after_sweep(cx, || {
                with_description(cx, ofd_cmd, |open| {
                    let Some(mut fl) = flock else {
                        return err(if open.is_none() {
                            Errno::EBADF
                        } else {
                            Errno::EFAULT
                        });
                    };
                    match cx.locks.fcntl(cx.cred, open, cmd, &mut fl, &wait) {
                        Ok(()) if cmd == F_GETLK || cmd == F_OFD_GETLK => {
                            crate::pidns::for_caller((cx.pid_view)(), |t| fl.l_pid = t(fl.l_pid));
                            Response::Lock(LockResponse::Flock(fl))
                        }
                        Ok(()) => Response::Ret(0),
                        Err(e) => err(e),
                    }
                })
            })
        }
        LockRequest::Flock { cmd } => retry_after_sweep(cx, || {
            with_description(cx, cmd & LOCK_MAND == 0, |open| {
                match cx.locks.flock(cx.cred, open, cmd, &wait) {
                    Ok(()) => Response::Ret(0),
                    Err(e) => err(e),
                }
            })
        }),
        LockRequest::Close { fd } => {
            close(cx, fd);
            Response::Ret(0)
        }
        LockRequest::ExecClose { fd } => {
            let copy = cx.fd.and_then(|f| f.try_clone().ok());
            if let Some((copy, open)) =
                copy.and_then(|c| open_file_of(c.as_raw_fd()).map(|o| (c, o)))
            {
                cx.descriptions
                    .exec
                    .add(cx.locks, cx.cred.tgid, fd, open.file, copy);
            }
            Response::Ret(0)
        }
        LockRequest::ExecFailed => {
            cx.descriptions.exec.forget(cx.locks, cx.cred.tgid);
            Response::Ret(0)
        }
        LockRequest::FdInfo { pid } => {
            let lines = cx.fd.and_then(|fd| {
                let open = open_file_of(fd.as_raw_fd())?;
                let tgid = if pid == 0 {
                    cx.cred.tgid
                } else {
                    Tgid::new(pid)
                };
                let ofd = cx.descriptions.find(fd.as_raw_fd());
                Some(cx.locks.fdinfo_locks(open.file, tgid, ofd))
            });
            Response::Text(lines.unwrap_or_default().into_bytes())
        }
        LockRequest::List => Response::Lock(LockResponse::List(
            cx.locks.list().iter().map(line).collect(),
        )),
        LockRequest::Leases => return area(cx.locks, cx.cred.tgid.get(), HelloArea::Leases),
        LockRequest::FlockSlots => {
            return area(cx.locks, cx.cred.tgid.get(), HelloArea::FlockSlots)
        }
        LockRequest::Hints => {
            return match cx.hints.map(LockHints::read_only_fd) {
                Some(Ok(fd)) => (Response::Ret(HINT_SLOTS as i64), Some(fd)),
                Some(Err(e)) => (err(e), None),
                None => (err(Errno::ENOSYS), None),
            }
        }
    };
    (resp, None)
}

/// A lock area for process `tgid` (`LockRequest::Leases` and `FlockSlots`, or a Hello that
/// asks for one): `Ret(tgid)` and a descriptor of the area's memfd, or ENOSYS without the
/// area.
pub fn area(locks: &LockManager, tgid: i32, which: HelloArea) -> (Response, Option<OwnedFd>) {
    let fd = match which {
        HelloArea::None => None,
        HelloArea::Leases => {
            if let Some(l) = locks.leases() {
                l.asked(tgid);
            }
            locks.leases().and_then(crate::arena::leases_fd)
        }
        HelloArea::FlockSlots => locks.flock_slots().and_then(crate::arena::flock_slots_fd),
    };
    let Some(fd) = fd else {
        return (err(Errno::ENOSYS), None);
    };
    // SAFETY: duplicates the area's memfd, which lives as long as the daemon.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return (err(Errno::ENOMEM), None);
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(dup) };
    (Response::Ret(i64::from(tgid)), Some(owned))
}

/// The client's descriptor `client_fd` (whose copy came with the request) is about to close.
fn close(cx: &LockCtx<'_>, client_fd: i32) {
    let Some(fd) = cx.fd else { return };
    let Some(open) = open_file_of(fd.as_raw_fd()) else {
        return;
    };
    let tgid = cx.cred.tgid;
    // POSIX locks go whatever the description (id 0 is never given to one).
    cx.locks.close(tgid, open.file, OfdId(0), false);
    let Some(ofd) = cx.descriptions.find(fd.as_raw_fd()) else {
        return;
    };
    let me = std::process::id() as i32;
    let held_elsewhere = cx
        .descriptions
        .referenced_then(
            Scope::One(ofd),
            &[(tgid.get(), client_fd), (me, fd.as_raw_fd())],
            &|_, _| true,
            cx.before_scan,
        )
        .first()
        .is_none_or(|&(_, _, referenced)| referenced);
    if !held_elsewhere {
        cx.locks.close(tgid, open.file, ofd, true);
        cx.descriptions.forget(ofd);
    }
}

/// Drops the OFD and flock locks of every description in `scope` no process holds open any
/// more (the kernel closed its descriptors without the daemon hearing: an exit, an exec, a
/// process the daemon never served). Returns whether any went. `before_scan` runs first if
/// the search goes past the descriptions' witnesses (reads descriptors in `/proc`).
pub fn sweep(
    locks: &LockManager,
    descriptions: &Descriptions,
    scope: Scope,
    before_scan: &dyn Fn(),
) -> bool {
    if descriptions.is_empty() {
        return false;
    }
    let mut dropped = false;
    // Only a description that may hold a lock, or waits for one, is looked for: what its last
    // close drops matters. The others (a flock lease's members that do not hold its lock) stay
    // in the table while they are members, and go with the lease (`Descriptions::prune`).
    let asked = |file, ofd| locks.holds_or_waits(file, Owner::Description(ofd));
    for (ofd, file, referenced) in descriptions.referenced_then(scope, &[], &asked, before_scan) {
        if !referenced {
            // Owner::Process(0) is nobody: only the description's locks go.
            locks.close(Tgid::new(0), file, ofd, true);
            descriptions.forget(ofd);
            dropped = true;
        }
    }
    descriptions.prune(locks);
    dropped
}

/// Runs a lock call; if it conflicts (EAGAIN) and a sweep of the file's descriptions drops
/// some unreferenced description's locks, runs it once more: a lock held by a description
/// whose last holder went silently must not block anyone.
fn retry_after_sweep(cx: &LockCtx<'_>, call: impl Fn() -> Response) -> Response {
    let resp = call();
    // A conflict: F_SETLK's or flock's EAGAIN, or F_GETLK's answer naming a lock.
    let conflict = match &resp {
        Response::Error(e) => *e == libc::EAGAIN,
        Response::Lock(LockResponse::Flock(fl)) => fl.l_type != uipc::locks::F_UNLCK,
        _ => false,
    };
    if !conflict || cx.descriptions.is_empty() {
        return resp;
    }
    let Some(open) = cx.fd.and_then(|fd| open_file_of(fd.as_raw_fd())) else {
        return resp;
    };
    if sweep(
        cx.locks,
        cx.descriptions,
        Scope::File(open.file),
        cx.before_scan,
    ) {
        return call();
    }
    resp
}
