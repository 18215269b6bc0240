//! The daemon in-process: a server on a private socket, clients through `Connection`.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use uipc::ipc::consts::*;
use uipc::ipc::sem::Sembuf;
use uipc_proto::client::{hello_asking, Connection};
use uipc_proto::transport::{recv_frame, send_frame};
use uipc_proto::{HelloArea, LockRequest, Request, Response, SemArg};
use uipc_server::Shared;

mod common;

fn start() -> (PathBuf, Arc<Shared>) {
    common::start("server")
}

fn ret(c: &Connection, req: Request) -> Response {
    c.call(&req, false).unwrap().0
}

/// The value `req` returns; panics on any other answer.
fn value(c: &Connection, req: Request) -> i64 {
    match ret(c, req.clone()) {
        Response::Ret(v) => v,
        other => panic!("{req:?}: {other:?}"),
    }
}

#[test]
fn semaphores_round_trip_through_the_daemon() {
    let (_, _, c) = common::start_connected("server", true);
    let semget = Request::Semget {
        key: 0x5eed,
        nsems: 2,
        flag: IPC_CREAT | 0o600,
    };
    let id = value(&c, semget);
    let id = id as i32;
    let up = Request::Semtimedop {
        semid: id,
        nsops: 1,
        sops: Some(vec![Sembuf::new(1, 3, 0)]),
        timeout: None,
    };
    assert_eq!(ret(&c, up), Response::Ret(0));
    let get = Request::Semctl {
        semid: id,
        semnum: 0,
        cmd: GETALL,
        arg: SemArg::None,
    };
    assert_eq!(ret(&c, get), Response::SemAll(vec![0, 3]));
    assert_eq!(ret(&c, Request::SemNsems { semid: id }), Response::Ret(2));
    let bad = Request::Semtimedop {
        semid: id,
        nsops: 1,
        sops: Some(vec![Sembuf::new(0, -1, IPC_NOWAIT as i16)]),
        timeout: None,
    };
    assert_eq!(ret(&c, bad), Response::Error(libc::EAGAIN));
}

#[test]
fn unreadable_arguments_get_the_kernels_errno_order() {
    let (_, _, c) = common::start_connected("server", true);
    let sem = |semid, nsops| Request::Semtimedop {
        semid,
        nsops,
        sops: None,
        timeout: None,
    };
    assert_eq!(ret(&c, sem(0, 501)), Response::Error(libc::E2BIG));
    assert_eq!(ret(&c, sem(0, 0)), Response::Error(libc::EINVAL));
    assert_eq!(
        ret(&c, sem(-1, 1)),
        Response::Error(libc::EFAULT),
        "the id is checked after the copy"
    );
    assert_eq!(ret(&c, sem(0, 1)), Response::Error(libc::EFAULT));
    let snd = |msgsz, mtype| Request::Msgsnd {
        msqid: 0,
        mtype,
        msgsz,
        text: None,
        flags: 0,
    };
    assert_eq!(ret(&c, snd(8193, 1)), Response::Error(libc::EINVAL));
    assert_eq!(ret(&c, snd(10, 0)), Response::Error(libc::EINVAL));
    assert_eq!(ret(&c, snd(10, 1)), Response::Error(libc::EFAULT));
}

extern "C" fn on_usr1(_: libc::c_int) {}

#[test]
fn a_signal_during_a_blocking_semop_cancels_it_with_eintr() {
    let (path, _) = start();
    // SAFETY: installs an empty handler with SA_RESTART (the read must still be interrupted).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    let c = Connection::connect(&path, true).unwrap();
    let id = common::new_sem(&c, 1);
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        // SAFETY: plain getter.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        let down = Request::Semtimedop {
            semid: id,
            nsops: 1,
            sops: Some(vec![Sembuf::new(0, -1, SEM_UNDO)]),
            timeout: None,
        };
        c.call(&down, true).unwrap().0
    });
    let thread = rx.recv().unwrap();
    // Signalled only once the daemon has the semop queued on the set (a signal before the
    // request is sent would be restarted by SA_RESTART and test nothing).
    let probe = Connection::connect(&path, false).unwrap();
    let ncnt = Request::Semctl {
        semid: id,
        semnum: 0,
        cmd: GETNCNT,
        arg: SemArg::None,
    };
    uipc_testkit::wait_until("the semop queued", || {
        ret(&probe, ncnt.clone()) == Response::Ret(1)
    });
    // SAFETY: the thread is alive (it is blocked in the call) and has a handler installed.
    unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
    assert_eq!(t.join().unwrap(), Response::Error(libc::EINTR));
    let c = Connection::connect(&path, false).unwrap();
    assert_eq!(ret(&c, ncnt), Response::Ret(0), "the sleeper was dequeued");
}

#[test]
fn malformed_frames_get_an_error_and_a_closed_connection() {
    let (path, _) = start();
    let s = UnixStream::connect(&path).unwrap();
    let fd = s.as_raw_fd();
    send_frame(fd, &[0xee, 1, 2], true, None).unwrap();
    let got = recv_frame(fd, false).unwrap();
    assert_eq!(
        Response::decode(&got.payload),
        Ok(Response::Error(libc::EPROTO)),
        "a session must start with hello"
    );
    let c = Connection::connect(&path, false).unwrap();
    let s = c.into_stream();
    let fd = s.as_raw_fd();
    send_frame(fd, &[0xee, 1, 2], true, None).unwrap();
    let got = recv_frame(fd, false).unwrap();
    assert_eq!(
        Response::decode(&got.payload),
        Ok(Response::Error(libc::EBADMSG))
    );
    assert!(recv_frame(fd, false).is_err(), "closed after a bad frame");
    let c = Connection::connect(&path, false).unwrap();
    let s = c.into_stream();
    (&s).write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(
        recv_frame(s.as_raw_fd(), false).is_err(),
        "oversized: closed"
    );
    let bad_version = Request::Hello {
        version: 999,
        new_image: false,
        area: 0,
    };
    let s = UnixStream::connect(&path).unwrap();
    send_frame(s.as_raw_fd(), &bad_version.encode(), true, None).unwrap();
    let got = recv_frame(s.as_raw_fd(), false).unwrap();
    assert_eq!(
        Response::decode(&got.payload),
        Ok(Response::Error(libc::EPROTO))
    );
}

/// The inode of the descriptor `fd`.
fn inode(fd: &impl AsRawFd) -> u64 {
    uipc_proto::client::inode_of(fd.as_raw_fd()).expect("fstat")
}

#[test]
fn a_hello_that_asks_for_a_lock_area_brings_its_memfd_and_the_callers_pid() {
    let (path, _shared) = common::start_private("hello-area");
    let me = std::process::id() as i32;
    for (area, request) in [
        (HelloArea::Leases, LockRequest::Leases),
        (HelloArea::FlockSlots, LockRequest::FlockSlots),
    ] {
        let s = UnixStream::connect(&path).unwrap();
        let g = hello_asking(s.as_raw_fd(), false, area).unwrap();
        assert_eq!(g.pid, me, "{area:?}");
        let fd = g.area.expect("the area's memfd");
        // The same memfd as the area's own request brings, with the same pid.
        let c = Connection::connect(&path, false).unwrap();
        let (resp, own) = c.call(&Request::Lock(request), false).unwrap();
        assert_eq!(resp, Response::Ret(i64::from(me)));
        assert_eq!(inode(&fd), inode(&own.expect("memfd")), "{area:?}");
    }
    // None asked: none comes.
    let s = UnixStream::connect(&path).unwrap();
    let g = hello_asking(s.as_raw_fd(), false, HelloArea::None).unwrap();
    assert_eq!((g.pid, g.area.err()), (me, Some(0)));
}

#[test]
fn a_hello_asking_for_an_area_the_daemon_lacks_gets_its_requests_errno() {
    // `uipc serve`'s daemon has no lock areas: the request says ENOSYS, and so does the Hello.
    let (path, _shared) = start();
    let c = Connection::connect(&path, false).unwrap();
    assert_eq!(
        ret(&c, Request::Lock(LockRequest::Leases)),
        Response::Error(libc::ENOSYS)
    );
    for area in [HelloArea::Leases, HelloArea::FlockSlots] {
        let s = UnixStream::connect(&path).unwrap();
        let g = hello_asking(s.as_raw_fd(), false, area).unwrap();
        assert_eq!(g.pid, std::process::id() as i32);
        assert_eq!(g.area.err(), Some(libc::ENOSYS), "{area:?}");
        // The session goes on as any other.
        let c = Connection::connect(&path, false).unwrap();
        assert!(matches!(common::msgget_private(&c), Response::Ret(_)));
    }
}

#[test]
fn shmat_sends_a_memfd_that_two_mappings_share() {
    let (_, shared, c) = common::start_connected("server", true);
    let shmget = Request::Shmget {
        key: IPC_PRIVATE,
        size: 100,
        flag: 0o600,
    };
    let id = value(&c, shmget);
    let attach = || {
        let (resp, fd) = c
            .call(
                &Request::Shmat {
                    shmid: id as i32,
                    addr: 0,
                    flags: 0,
                },
                false,
            )
            .unwrap();
        let Response::ShmAttached { addr, len, .. } = resp else {
            panic!("{resp:?}")
        };
        assert_eq!(len, 4096);
        let fd = fd.expect("a memfd comes with the reply");
        // SAFETY: maps the memfd shared, at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let moved = ret(
            &c,
            Request::ShmMoved {
                from: addr,
                to: p as u64,
            },
        );
        assert_eq!(moved, Response::Ret(0));
        p.cast::<u8>()
    };
    let (a, b) = (attach(), attach());
    // SAFETY: both are live 4096-byte shared mappings of the same memfd.
    unsafe {
        *a.add(7) = 42;
        assert_eq!(*b.add(7), 42);
    }
    let stat = ret(
        &c,
        Request::Shmctl {
            shmid: id as i32,
            cmd: IPC_STAT,
            set: None,
        },
    );
    let Response::ShmStat { ds, .. } = stat else {
        panic!()
    };
    assert_eq!(ds.nattch, 2);
    assert_eq!(ret(&c, Request::Shmdt { addr: a as u64 }), Response::Ret(0));
    assert_eq!(
        ret(&c, Request::Shmdt { addr: a as u64 }),
        Response::Error(libc::EINVAL)
    );
    let pid = std::process::id() as i32;
    assert_eq!(
        shared.ns().shm_attachments(pid),
        vec![(b as u64, id as i32)]
    );
}
