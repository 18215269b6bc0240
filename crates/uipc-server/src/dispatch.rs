//! One request, served: the engine call it names, and the response.
//!
//! Arguments the client could not read arrive as `None`; the daemon answers with the errno
//! Linux gives at the point where the kernel would have copied them (see each arm). Entry and
//! exit: no lock held. The session hands blocking calls here only in their IPC_NOWAIT form
//! ([`without_sleeping`]); the form that waits is started parked ([`crate::parked`]). Were a
//! blocking call served here, it would sleep on the worker with the connection's interrupt.

use crate::memfd::MemfdBacking;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use uipc::ipc::consts::{GETPID, IPC_NOWAIT, MSG_COPY, PAGE_SIZE};
use uipc::ipc::msg::{MsgctlArg, MsgctlOut};
use uipc::ipc::sem::{SemctlArg, SemctlOut};
use uipc::ipc::shm::ShmctlOut;
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, Interrupt, WaitCtx};
use uipc_proto::{Request, Response, SemArg};

/// What a worker needs to serve a request.
pub struct Ctx<'a> {
    /// The namespace.
    pub ns: &'a IpcNamespace,
    /// The file locks.
    pub locks: &'a uipc::locks::LockManager,
    /// The descriptions that may own locks.
    pub descriptions: &'a crate::descriptions::Descriptions,
    /// The lock hints.
    pub hints: Option<&'a crate::hints::LockHints>,
    /// The descriptor that came with the request (file-lock calls).
    pub passed: Option<&'a OwnedFd>,
    /// Its segment memory.
    pub backing: &'a MemfdBacking,
    /// The caller.
    pub cred: &'a Cred,
    /// How the caller numbers pids (`None`: as the daemon does), asked only by a reply that
    /// carries pids (it reads `/proc`).
    pub pid_view: &'a dyn Fn() -> Option<crate::pidns::PidView>,
    /// The connection's interrupt: raised to end a blocking call with EINTR.
    pub irq: &'a Interrupt,
    /// Run before a step that takes a while (a lock call's `/proc` scan).
    pub before_scan: &'a dyn Fn(),
}

impl<'a> Ctx<'a> {
    /// What a file-lock call needs of it.
    pub fn lock_ctx(&self) -> crate::lockserve::LockCtx<'a> {
        crate::lockserve::LockCtx {
            locks: self.locks,
            descriptions: self.descriptions,
            hints: self.hints,
            cred: self.cred,
            pid_view: self.pid_view,
            irq: self.irq,
            fd: self.passed,
            before_scan: self.before_scan,
        }
    }
}

fn ret(r: Result<i32, Errno>) -> Response {
    match r {
        Ok(v) => Response::Ret(i64::from(v)),
        Err(e) => Response::Error(e.raw()),
    }
}

/// The response to a call that returns nothing but success or an errno.
pub(crate) fn done(r: Result<(), Errno>) -> Response {
    ret(r.map(|()| 0))
}

/// The response to msgrcv: the message, or the errno.
pub(crate) fn message(r: Result<(i64, Vec<u8>), Errno>) -> Response {
    match r {
        Ok((mtype, text)) => Response::Msg { mtype, text },
        Err(e) => err(e),
    }
}

fn err(e: Errno) -> Response {
    Response::Error(e.raw())
}

/// The same call with IPC_NOWAIT everywhere, and the errno it gives instead of sleeping
/// (`None` for calls that never sleep). Such a failure changes nothing in the namespace.
pub fn without_sleeping(req: &Request) -> Option<(Request, i32)> {
    let nowait = IPC_NOWAIT;
    let mut quick = req.clone();
    let would_block = match &mut quick {
        Request::Semtimedop {
            sops: Some(sops), ..
        } => {
            for sop in sops.iter_mut() {
                sop.sem_flg |= nowait as i16;
            }
            libc::EAGAIN
        }
        Request::Msgsnd { flags, .. } => {
            *flags |= nowait;
            libc::EAGAIN
        }
        Request::Msgrcv { flags, .. } => {
            // MSG_COPY never sleeps: without IPC_NOWAIT it is EINVAL, which adding the flag
            // would turn into a copy (or a lookup's errno).
            if *flags & MSG_COPY == 0 {
                *flags |= nowait;
            }
            libc::ENOMSG
        }
        Request::Lock(lock) => {
            *lock = lock.without_sleeping()?;
            libc::EAGAIN
        }
        _ => return None,
    };
    Some((quick, would_block))
}

/// A descriptor for the client's mapping of `memfd`: read-only attaches get a read-only open
/// of the file, so the client can neither `mprotect` its mapping writable (EACCES, as for a
/// SHM_RDONLY attach on Linux) nor write through the descriptor.
fn descriptor_for(memfd: RawFd, read_only: bool) -> Result<OwnedFd, Errno> {
    let raw = if read_only {
        let path =
            std::ffi::CString::new(format!("/proc/self/fd/{memfd}")).map_err(|_| Errno::ENOMEM)?;
        // SAFETY: opens a NUL-terminated path read-only.
        unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
    } else {
        // SAFETY: duplicates a descriptor that lives as long as the attachment.
        unsafe { libc::fcntl(memfd, libc::F_DUPFD_CLOEXEC, 0) }
    };
    if raw < 0 {
        return Err(Errno::ENOMEM);
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Serves `req` (not Hello, Cancel or ForkChild, which the session handles). Returns the
/// response and, for shmat, the descriptor to send with it.
pub fn serve(cx: &Ctx<'_>, req: Request) -> (Response, Option<OwnedFd>) {
    let Ctx { ns, cred, .. } = *cx;
    let wait = WaitCtx::FOREVER.interruptible(cx.irq);
    let resp = match req {
        Request::Semget { key, nsems, flag } => ret(ns.semget(cred, key, nsems, flag)),
        Request::Semtimedop {
            semid,
            nsops,
            sops,
            timeout,
        } => match sops {
            Some(sops) => done(ns.semtimedop(cred, semid, &sops, timeout, &wait)),
            // The kernel's order around the copy of the operations: E2BIG, EINVAL for no
            // operations, then EFAULT; a negative id is checked only after the copy
            // (`do_semtimedop`; the differential run of tests/c/diff_ops.c shows it).
            None if nsops > u64::from(ns.limits().semopm() as u32) => err(Errno::E2BIG),
            None if nsops == 0 => err(Errno::EINVAL),
            None => err(Errno::EFAULT),
        },
        // Only to size SETALL's read, with SETALL's own lookup and permission check.
        Request::SemNsems { semid } => match ns.sem_nsems_for_setall(cred, semid) {
            Ok(n) => Response::Ret(n as i64),
            Err(e) => err(e),
        },
        Request::Semctl {
            semid,
            semnum,
            cmd,
            arg,
        } => semctl(cx, semid, semnum, cmd, &arg),
        Request::Msgget { key, flag } => ret(ns.msgget(cred, key, flag)),
        Request::Msgsnd {
            msqid,
            mtype,
            text: Some(text),
            flags,
            ..
        } => done(ns.msgsnd(cred, msqid, mtype, &text, flags, &wait)),
        // Text the client could not read: the kernel's order before it copies the text is
        // size and id, then type.
        Request::Msgsnd {
            text: None,
            msqid,
            msgsz,
            ..
        } if msgsz > ns.limits().msgmax().max(0) as u64 || msqid < 0 => err(Errno::EINVAL),
        Request::Msgsnd {
            text: None, mtype, ..
        } if mtype < 1 => err(Errno::EINVAL),
        Request::Msgsnd { text: None, .. } => err(Errno::EFAULT),
        Request::Msgrcv {
            msqid,
            maxsize,
            msgtyp,
            flags,
        } => message(ns.msgrcv(cred, msqid, maxsize, msgtyp, flags, &wait)),
        Request::Msgctl { msqid, cmd, set } => {
            let arg = set.map_or(MsgctlArg::None, MsgctlArg::Set);
            match ns.msgctl(cred, msqid, cmd, arg) {
                Ok(MsgctlOut::Done) => Response::Ret(0),
                Ok(MsgctlOut::Stat { ret, mut ds }) => {
                    crate::pidns::for_caller((cx.pid_view)(), |t| {
                        ds.lspid = t(ds.lspid);
                        ds.lrpid = t(ds.lrpid);
                    });
                    Response::MsgStat { ret, ds }
                }
                Ok(MsgctlOut::Info { max_idx, info }) => Response::MsgInfo { ret: max_idx, info },
                Err(e) => err(e),
            }
        }
        Request::Shmget { key, size, flag } => ret(ns.shmget(cred, key, size, flag)),
        Request::Shmat { shmid, addr, flags } => match ns.shmat(cred, shmid, addr, flags) {
            Ok(at) => match cx
                .backing
                .fd_of(&at.memory)
                .ok_or(Errno::ENOMEM)
                .and_then(|fd| descriptor_for(fd, at.read_only))
            {
                Ok(fd) => {
                    return (
                        Response::ShmAttached {
                            shmid: at.shmid,
                            addr: at.addr,
                            size: at.size,
                            len: at.len.max(PAGE_SIZE),
                            read_only: at.read_only,
                        },
                        Some(fd),
                    )
                }
                Err(e) => {
                    let _ = ns.shmdt(cred, at.addr);
                    err(e)
                }
            },
            Err(e) => err(e),
        },
        Request::ShmMoved { from, to } => done(ns.shm_attach_move(cred.tgid.get(), from, to)),
        Request::Shmdt { addr } => done(ns.shmdt(cred, addr)),
        Request::ShmRemap { addr, last } => done(ns.shm_remap(cred, addr, last)),
        Request::Shmctl { shmid, cmd, set } => match ns.shmctl(cred, shmid, cmd, set.as_ref()) {
            Ok(ShmctlOut::Done) => Response::Ret(0),
            Ok(ShmctlOut::Stat(ret, mut ds)) => {
                crate::pidns::for_caller((cx.pid_view)(), |t| {
                    ds.cpid = t(ds.cpid);
                    ds.lpid = t(ds.lpid);
                });
                Response::ShmStat { ret, ds }
            }
            Ok(ShmctlOut::Info(ret, info)) => Response::ShmInfo { ret, info },
            Ok(ShmctlOut::Usage(ret, usage)) => Response::ShmUsage { ret, usage },
            Err(e) => err(e),
        },
        Request::SemArena => {
            let fd = ns
                .sem_arena()
                .and_then(|a| crate::arena::fd_of(a))
                .map(|fd| descriptor_for(fd, false));
            return match fd {
                Some(Ok(fd)) => (Response::Ret(i64::from(cred.tgid.get())), Some(fd)),
                Some(Err(e)) => (err(e), None),
                None => (err(Errno::ENOSYS), None),
            };
        }
        Request::Lock(lock) => return crate::lockserve::serve(&cx.lock_ctx(), lock),
        Request::Proc(p) => crate::procserve::serve(ns, cx.locks, cred, cx.pid_view, p),
        Request::Hello { .. } | Request::Cancel | Request::ForkChild { .. } => err(Errno::EINVAL),
    };
    (resp, None)
}

/// semctl: the client's argument as the engine takes it, and GETPID's pid as the caller's pid
/// namespace numbers it.
fn semctl(cx: &Ctx<'_>, semid: i32, semnum: i32, cmd: i32, arg: &SemArg) -> Response {
    let Ctx { ns, cred, .. } = *cx;
    let arg = match arg {
        SemArg::None => SemctlArg::None,
        SemArg::Val(v) => SemctlArg::Val(*v),
        SemArg::Array(a) => SemctlArg::Array(a),
        SemArg::Set { uid, gid, mode } => SemctlArg::Set {
            uid: *uid,
            gid: *gid,
            mode: *mode,
        },
    };
    match ns.semctl(cred, semid, semnum, cmd, arg) {
        Ok(SemctlOut::Ret(r)) if cmd == GETPID => {
            Response::Ret(i64::from(crate::pidns::translated((cx.pid_view)(), r)))
        }
        Ok(SemctlOut::Ret(r)) => Response::Ret(i64::from(r)),
        Ok(SemctlOut::Stat(ret, ds)) => Response::SemStat { ret, ds },
        Ok(SemctlOut::Info(ret, info)) => Response::SemInfo { ret, info },
        Ok(SemctlOut::All(v)) => Response::SemAll(v),
        Err(e) => err(e),
    }
}
