//! Serving a connection's frames on the workers, and its parked calls.
//!
//! The first frame must be a Hello of our [`VERSION`] (one that asks for a lock area gets its
//! memfd with the reply, as `lockserve::area` grants it); then each frame is decoded, checked to
//! carry kernel-verified credentials, served inside the sender process's [`ProcGuard`] and
//! answered, in order (a connection has one call in flight, [`crate::conn`]). A frame that
//! fails to decode gets an EBADMSG reply and the connection is closed; a frame without
//! credentials, or from a process that is gone, closes it.
//!
//! Blocking calls: a call that may sleep is first made with IPC_NOWAIT, which is the same call
//! when it can proceed at once (Linux, too, first tries the operation and sleeps only if it
//! cannot proceed) and fails without side effects otherwise. Only then is it started in its
//! parked form ([`crate::parked`]): no thread waits. The parked call sits in the connection's
//! call slot with its guard; its waiter's notifier queues a [`Job::Resume`] when a waker
//! completes it or the connection's interrupt is raised (the client's Cancel or any other
//! frame, its hang-up), and `resume` polls it: answered, or parked again. semtimedop's
//! deadline comes back as a [`Job::Deadline`] and cancels it (EAGAIN). The process's exit
//! cancels it through the canceller registered with its guard ([`crate::procs`]), run by
//! whoever handles the exit.
//!
//! The guard is held until the reply is sent, so a process's exit rules (which wait for its
//! requests in flight) never run between an attach and the sending of its memfd, nor while a
//! call of the process is parked.
//!
//! Locks: exits are reaped ([`crate::procs::Procs::reap_ready`]) before the connection's call
//! slot is taken (an exit may need to cancel a parked call of another connection, taking its
//! slot); the slot is held across the engine call that may park, so a notification that comes
//! at once waits for the call to be stored.

use crate::admission::parent_of;
use crate::conn::Job;
use crate::conn::{CallSlot, Conn, Parked};
use crate::dispatch::{self, Ctx};
use crate::outcome::Outcome;
use crate::parked::{self, ParkedCall};
use crate::procs::ProcGuard;
use crate::shared::Shared;
use crate::sync::lock;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use uipc::{Errno, WakeReason};
use uipc_proto::transport::{PeerCred, Received};
use uipc_proto::{HelloArea, Request, Response, VERSION};

/// Runs one job from the pool.
pub fn run_job(shared: &Arc<Shared>, job: Job) {
    match job {
        Job::Frame(conn, frame) => serve_frame(shared, &conn, frame),
        Job::Resume(conn) => resume(shared, &conn, None),
        Job::Deadline(conn) => resume(shared, &conn, Some((WakeReason::TimedOut, None))),
    }
}

fn close(shared: &Shared, conn: &Conn) {
    conn.shut();
    shared.reactor.remove(conn);
}

fn finish(shared: &Shared, conn: &Arc<Conn>) {
    if conn.finish(&shared.jobs) {
        shared.reactor.remove(conn);
    }
}

fn reap_exits(shared: &Shared) {
    shared
        .procs
        .reap_ready(0, &|| shared.jobs.promote(), &|pid| {
            shared.process_exit(pid)
        });
}

fn hello(shared: &Shared, conn: &Arc<Conn>, frame: Received) {
    let (
        Some(peer),
        Ok(Request::Hello {
            version,
            new_image,
            area,
        }),
    ) = (frame.cred, Request::decode(&frame.payload))
    else {
        conn.reply(&Response::Error(libc::EPROTO), None, &shared.jobs);
        return close(shared, conn);
    };
    if version != VERSION {
        conn.reply(&Response::Error(libc::EPROTO), None, &shared.jobs);
        return close(shared, conn);
    }
    reap_exits(shared);
    let known = shared.procs.get(peer.pid).is_some();
    let guard = match shared
        .procs
        .enter(peer.pid, Some(peer.uid), conn.id, &conn.irq)
    {
        Ok(guard) => guard,
        Err(e) => {
            conn.reply(&Response::Error(e.raw()), None, &shared.jobs);
            return close(shared, conn);
        }
    };
    // The kernel IPC namespace the process is in now decides the namespace served.
    let ns = conn.ns.get_or_init(|| {
        let id = crate::namespaces::ns_of_pidfd(guard.proc().pidfd());
        shared.namespaces.join(peer.pid, id)
    });
    let _ = conn.greeter.set(peer.pid);
    if new_image && known {
        // The process ran execve since its last session: Linux drops its attachments, and
        // its close-on-exec descriptors are closed.
        ns.process_exec(peer.pid);
        // The sweep may scan /proc: let another worker watch the sockets meanwhile.
        shared.jobs.promote();
        shared.descriptions.exec.resolve(&shared.locks);
        crate::lockserve::sweep(
            &shared.locks,
            &shared.descriptions,
            crate::descriptions::Scope::All,
            &|| {},
        );
    }
    // A lock area asked for along: its grant, as its own request would have made it.
    let (area, area_fd) = match HelloArea::of(area) {
        HelloArea::None => (0, None),
        which => match crate::lockserve::area(&shared.locks, peer.pid, which) {
            (Response::Ret(_), Some(fd)) => (0, Some(fd)),
            (Response::Error(e), _) => (e, None),
            _ => (libc::EIO, None),
        },
    };
    drop(guard);
    lock(&conn.call).greeted = true;
    shared.reactor.greeted(conn);
    let greeting = Response::Hello {
        version: VERSION,
        pid: peer.pid,
        area,
    };
    if !conn.reply(
        &greeting,
        area_fd.as_ref().map(|f| f.as_raw_fd()),
        &shared.jobs,
    ) {
        return close(shared, conn);
    }
    finish(shared, conn);
}

fn serve_frame(shared: &Arc<Shared>, conn: &Arc<Conn>, frame: Received) {
    if !lock(&conn.call).greeted {
        return hello(shared, conn, frame);
    }
    let Some(peer) = frame.cred else {
        return close(shared, conn);
    };
    let req = match Request::decode(&frame.payload) {
        Ok(r) => r,
        Err(_) => {
            conn.reply(&Response::Error(libc::EBADMSG), None, &shared.jobs);
            return close(shared, conn);
        }
    };
    match req {
        // A Cancel for a call already answered.
        Request::Cancel => return finish(shared, conn),
        Request::Hello { area, .. } => {
            // A session says Hello once; a lock area is not granted again here.
            let greeting = Response::Hello {
                version: VERSION,
                pid: peer.pid,
                area: if area == 0 { 0 } else { libc::EINVAL },
            };
            if !conn.reply(&greeting, None, &shared.jobs) {
                return close(shared, conn);
            }
            return finish(shared, conn);
        }
        _ => {}
    }
    shared
        .exits
        .reap_if_pending(&shared.procs, &|| shared.jobs.promote(), &|pid| {
            shared.process_exit(pid)
        });
    let Ok(guard) = shared
        .procs
        .enter(peer.pid, Some(peer.uid), conn.id, &conn.irq)
    else {
        return close(shared, conn);
    };
    let mut slot = lock(&conn.call);
    match serve_one(shared, conn, peer, (req, frame.fd)) {
        Served::Reply(resp, pass) => {
            let sent = conn.reply(&resp, pass.as_ref().map(|p| p.as_raw_fd()), &shared.jobs);
            drop(guard);
            drop(slot);
            if !sent {
                return close(shared, conn);
            }
            finish(shared, conn);
        }
        Served::Parked(call) => park(shared, conn, &mut slot, call, guard),
    }
}

/// Stores a parked call: its deadline with the event loop, its canceller with its process.
fn park(
    shared: &Arc<Shared>,
    conn: &Arc<Conn>,
    slot: &mut CallSlot,
    call: ParkedCall,
    guard: ProcGuard,
) {
    if let Some(at) = call.deadline() {
        shared.reactor.add_deadline(at, conn.id);
    }
    let serial = slot.next_serial;
    slot.next_serial += 1;
    let (s, c) = (Arc::downgrade(shared), Arc::downgrade(conn));
    guard.set_canceller(Arc::new(move || {
        if let (Some(s), Some(c)) = (s.upgrade(), c.upgrade()) {
            resume(&s, &c, Some((WakeReason::Interrupted, Some(serial))));
        }
    }));
    slot.parked = Some(Parked {
        call,
        guard,
        serial,
    });
    shared.parked.fetch_add(1, Ordering::Relaxed);
}

/// Polls the connection's parked call (`force: None`), or ends it: `TimedOut` if its deadline
/// passed (else it stays parked), `Interrupted` unconditionally (only the call with the given
/// serial, if one is given). Answers it if it finished.
fn resume(shared: &Shared, conn: &Arc<Conn>, force: Option<(WakeReason, Option<u64>)>) {
    let mut slot = lock(&conn.call);
    let Some(Parked {
        call,
        guard,
        serial,
    }) = slot.parked.take()
    else {
        return;
    };
    let deadline = call.deadline();
    let outcome = match force {
        None => call.poll(
            &shared.locks,
            &shared.descriptions,
            conn.namespace(shared.ns()),
        ),
        Some((_, Some(only))) if only != serial => Outcome::Waiting(call),
        Some((WakeReason::TimedOut, _)) if deadline.is_some_and(|d| d <= Instant::now()) => {
            Outcome::Answer(call.cancel(&shared.locks, &shared.descriptions, WakeReason::TimedOut))
        }
        Some((WakeReason::TimedOut, _)) => Outcome::Waiting(call),
        Some((WakeReason::Interrupted, _)) => Outcome::Answer(call.cancel(
            &shared.locks,
            &shared.descriptions,
            WakeReason::Interrupted,
        )),
    };
    match outcome {
        Outcome::Answer(resp) => {
            shared.parked.fetch_sub(1, Ordering::Relaxed);
            if let Some(at) = deadline {
                shared.reactor.remove_deadline(at, conn.id);
            }
            let sent = conn.reply(&resp, None, &shared.jobs);
            drop(guard);
            drop(slot);
            if !sent {
                return close(shared, conn);
            }
            finish(shared, conn);
        }
        Outcome::Waiting(call) => {
            slot.parked = Some(Parked {
                call,
                guard,
                serial,
            })
        }
    }
}

enum Served {
    Reply(Response, Option<OwnedFd>),
    Parked(ParkedCall),
}

fn serve_one(
    shared: &Shared,
    conn: &Conn,
    peer: PeerCred,
    (req, passed): (Request, Option<OwnedFd>),
) -> Served {
    // SHM_LOCK charges the real uid against RLIMIT_MEMLOCK; no other call reads either.
    let full = matches!(req, Request::Shmctl { cmd, .. } if cmd == uipc::ipc::consts::SHM_LOCK);
    let cred = crate::procs::cred_of(peer, full);
    if let Request::ForkChild { child } = req {
        let resp = if parent_of(child) != Some(peer.pid) {
            Response::Error(Errno::EPERM.raw())
        } else {
            match shared.procs.enter(child, None, conn.id, &conn.irq) {
                Ok(_child_guard) => {
                    shared.namespaces.fork(peer.pid, child);
                    conn.namespace(shared.ns()).process_fork(peer.pid, child);
                    Response::Ret(0)
                }
                Err(e) => Response::Error(e.raw()),
            }
        };
        return Served::Reply(resp, None);
    }
    let cx = Ctx {
        ns: conn.namespace(shared.ns()),
        locks: &shared.locks,
        descriptions: &shared.descriptions,
        hints: shared.hints.as_ref(),
        passed: passed.as_ref(),
        backing: &shared.backing,
        cred: &cred,
        pid_view: &|| conn.pid_view(cred.tgid.get()),
        irq: &conn.irq,
        // Lock calls that scan /proc (closes, sweeps) let another worker watch the sockets
        // first; the others are served on this thread with no hand-off.
        before_scan: &|| shared.jobs.promote(),
    };
    // A call that may sleep is first tried without sleeping; only if it would sleep is it
    // started again in its parked form.
    if let Some((quick, would_block)) = req
        .may_block()
        .then(|| dispatch::without_sleeping(&req))
        .flatten()
    {
        match dispatch::serve(&cx, quick) {
            (Response::Error(e), _) if e == would_block => {}
            (resp, pass) => return Served::Reply(resp, pass),
        }
        match parked::start(&cx, &req, &conn.park) {
            Some(Outcome::Answer(resp)) => return Served::Reply(resp, None),
            Some(Outcome::Waiting(call)) => return Served::Parked(call),
            None => {}
        }
    }
    let (resp, pass) = dispatch::serve(&cx, req);
    Served::Reply(resp, pass)
}
