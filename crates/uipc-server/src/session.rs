//! One client connection, served on its own thread.
//!
//! The first frame must be a Hello of our [`VERSION`]; then each frame is decoded, checked to
//! carry kernel-verified credentials, served inside the sender process's [`ProcGuard`] and
//! answered, in order. A frame that fails to decode gets an EBADMSG reply and the connection
//! is closed; a frame without credentials, or from a process that is gone, closes it.
//!
//! Blocking calls: a call that may sleep is first made with IPC_NOWAIT, which is the same call
//! when it can proceed at once (Linux, too, first tries the operation and sleeps only if it
//! cannot proceed) and fails without side effects otherwise. Only then is it made again as
//! asked, while the [`Poller`] watches the socket: anything readable (the client's Cancel, or
//! its hang-up) raises the session's interrupt and the engine call ends with EINTR unless it
//! already completed. The Cancel frame is then read as the next
//! frame and ignored, as is a Cancel that arrives after its call was answered.
//!
//! The guard is held until the reply is sent, so a process's exit rules (which wait for its
//! requests in flight) never run between an attach and the sending of its memfd.

use crate::dispatch::{self, Ctx};
use crate::procs::ProcGuard;
use crate::Shared;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use uipc::{Errno, Interrupt};
use uipc_proto::transport::{recv_frame, send_frame, PeerCred};
use uipc_proto::{Request, Response, VERSION};

fn reply(fd: RawFd, resp: &Response, pass: Option<RawFd>) -> bool {
    send_frame(fd, &resp.encode(), false, pass).is_ok()
}

fn set_passcred(fd: RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: sets an int option from a live c_int.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// The parent pid of `pid` from `/proc/PID/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

/// Serves one connection until it closes.
pub fn run(shared: Arc<Shared>, stream: UnixStream, session: u64) {
    let fd = stream.as_raw_fd();
    set_passcred(fd);
    let irq = Interrupt::new();
    let Ok(first) = recv_frame(fd, false) else {
        return;
    };
    let (Some(peer), Ok(Request::Hello { version, new_image })) =
        (first.cred, Request::decode(&first.payload))
    else {
        reply(fd, &Response::Error(libc::EPROTO), None);
        return;
    };
    if version != VERSION {
        reply(fd, &Response::Error(libc::EPROTO), None);
        return;
    }
    shared.procs.reap_ready(0, &|pid| shared.process_exit(pid));
    let known = shared.procs.get(peer.pid).is_some();
    let Ok(guard) = shared.procs.enter(peer.pid, session, &irq) else {
        return;
    };
    if new_image && known {
        // The process ran execve since its last session: Linux drops its attachments, and
        // its close-on-exec descriptors are closed.
        shared.ns.process_exec(peer.pid);
        crate::lockserve::sweep(&shared.locks, &shared.descriptions);
    }
    drop(guard);
    if !reply(fd, &Response::Hello { version: VERSION }, None) {
        return;
    }
    loop {
        let Ok(frame) = recv_frame(fd, false) else {
            return;
        };
        let Some(peer) = frame.cred else {
            return;
        };
        let req = match Request::decode(&frame.payload) {
            Ok(r) => r,
            Err(_) => {
                reply(fd, &Response::Error(libc::EBADMSG), None);
                return;
            }
        };
        match req {
            Request::Cancel => continue,
            Request::Hello { .. } => {
                if !reply(fd, &Response::Hello { version: VERSION }, None) {
                    return;
                }
                continue;
            }
            _ => {}
        }
        irq.clear();
        shared.procs.reap_ready(0, &|pid| shared.process_exit(pid));
        let Ok(guard) = shared.procs.enter(peer.pid, session, &irq) else {
            return;
        };
        if !serve_one(&shared, fd, peer, &guard, &irq, session, (req, frame.fd)) {
            return;
        }
    }
}

fn serve_one(
    shared: &Shared,
    fd: RawFd,
    peer: PeerCred,
    guard: &ProcGuard,
    irq: &Interrupt,
    session: u64,
    (req, passed): (Request, Option<std::os::fd::OwnedFd>),
) -> bool {
    let cred = guard.proc().cred(peer);
    if let Request::ForkChild { child } = req {
        let resp = if parent_of(child) != Some(peer.pid) {
            Response::Error(Errno::EPERM.raw())
        } else {
            match shared.procs.enter(child, session, irq) {
                Ok(_child_guard) => {
                    shared.ns.process_fork(peer.pid, child);
                    Response::Ret(0)
                }
                Err(e) => Response::Error(e.raw()),
            }
        };
        return reply(fd, &resp, None);
    }
    let cx = Ctx {
        ns: &shared.ns,
        locks: &shared.locks,
        descriptions: &shared.descriptions,
        hints: shared.hints.as_ref(),
        passed: passed.as_ref(),
        backing: &shared.backing,
        cred: &cred,
        irq,
    };
    // A call that may sleep is first tried without sleeping; only if it would sleep is the
    // socket watched for a Cancel (arming the watcher costs two wake-ups of its thread).
    let attempt = req
        .may_block()
        .then(|| dispatch::without_sleeping(&req))
        .flatten();
    let first = attempt.map(|(quick, would_block)| {
        let (resp, pass) = dispatch::serve(&cx, quick);
        (resp, pass, would_block)
    });
    let (resp, pass) = match first {
        Some((Response::Error(e), _, would_block)) if e == would_block => {
            let i = irq.clone();
            let watch = shared.poller.watch(fd, move || i.raise());
            let out = dispatch::serve(&cx, req);
            shared.poller.unwatch(watch);
            out
        }
        Some((resp, pass, _)) => (resp, pass),
        None => dispatch::serve(&cx, req),
    };
    reply(fd, &resp, pass.as_ref().map(|p| p.as_raw_fd()))
}
