//! File locks through the daemon: descriptors passed with the calls, descriptions told apart
//! with kcmp, closes and exits dropping locks as Linux does.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use uipc::locks::*;
use uipc_proto::client::Connection;
use uipc_proto::{LockRequest, LockResponse, Request, Response};

mod common;

/// Numbers the test files.
static N: AtomicUsize = AtomicUsize::new(0);

/// A fresh file opened twice (two open file descriptions), and its path.
fn opened_twice() -> (File, File, PathBuf) {
    let (a, path) = file();
    let b = reopen(&a);
    (a, b, path)
}

/// A fresh file in the temporary directory, opened read-write.
fn file() -> (File, PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "uipc-locks-file-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (f, path)
}

fn reopen(f: &File) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .unwrap()
}

fn call(c: &Connection, fd: Option<RawFd>, req: LockRequest) -> Response {
    c.call_passing(&Request::Lock(req), fd, false, false)
        .unwrap()
        .0
}

fn fcntl(c: &Connection, fd: RawFd, cmd: i32, fl: Flock) -> Response {
    call(
        c,
        Some(fd),
        LockRequest::Fcntl {
            cmd,
            flock: Some(fl),
        },
    )
}

fn flock(c: &Connection, fd: RawFd, cmd: i32) -> Response {
    call(c, Some(fd), LockRequest::Flock { cmd })
}

const OK: Response = Response::Ret(0);
const EAGAIN: Response = Response::Error(libc::EAGAIN);

#[test]
fn ofd_locks_conflict_between_descriptions_and_not_through_a_dup() {
    let (_, shared, c) = common::start_connected("locks", true);
    let (a, b, _p) = opened_twice();
    let dup = a.try_clone().unwrap();
    let w = Flock::new(F_WRLCK, 0, 10);
    assert_eq!(fcntl(&c, a.as_raw_fd(), F_OFD_SETLK, w), OK);
    assert_eq!(fcntl(&c, dup.as_raw_fd(), F_OFD_SETLK, w), OK);
    assert_eq!(fcntl(&c, b.as_raw_fd(), F_OFD_SETLK, w), EAGAIN);
    let Response::Lock(LockResponse::Flock(got)) =
        fcntl(&c, b.as_raw_fd(), F_OFD_GETLK, Flock::new(F_RDLCK, 5, 1))
    else {
        panic!("no flock back")
    };
    assert_eq!(
        (got.l_type, got.l_start, got.l_len, got.l_pid),
        (F_WRLCK, 0, 10, -1)
    );
    // The host kernel took no lock: a kernel OFD lock through `b` succeeds.
    let mut host = libc::flock {
        l_type: F_WRLCK,
        l_whence: 0,
        l_start: 0,
        l_len: 10,
        l_pid: 0,
    };
    // SAFETY: a lock command with a live struct flock.
    assert_eq!(
        unsafe { libc::fcntl(b.as_raw_fd(), F_OFD_SETLK, &mut host) },
        0
    );
    assert_eq!(shared.descriptions.len(), 1);
    // Unlocking leaves the description nothing to own: the daemon lets its copy go.
    assert_eq!(
        fcntl(&c, dup.as_raw_fd(), F_OFD_SETLK, Flock::new(F_UNLCK, 0, 0)),
        OK
    );
    assert_eq!(shared.descriptions.len(), 0);
    assert_eq!(fcntl(&c, b.as_raw_fd(), F_OFD_SETLK, w), OK);
}

#[test]
fn bad_descriptors_and_unreadable_structs_get_linuxs_errnos() {
    let (_, _, c) = common::start_connected("locks", true);
    let (a, _p) = file();
    let none = LockRequest::Fcntl {
        cmd: F_SETLK,
        flock: None,
    };
    assert_eq!(call(&c, None, none.clone()), Response::Error(libc::EBADF));
    assert_eq!(
        call(&c, Some(a.as_raw_fd()), none),
        Response::Error(libc::EFAULT)
    );
    assert_eq!(
        call(&c, None, LockRequest::Flock { cmd: LOCK_EX }),
        Response::Error(libc::EBADF)
    );
    assert_eq!(
        flock(&c, a.as_raw_fd(), LOCK_EX | LOCK_UN),
        Response::Error(libc::EINVAL)
    );
    let ro = File::open(format!("/proc/self/fd/{}", a.as_raw_fd())).unwrap();
    assert_eq!(
        fcntl(&c, ro.as_raw_fd(), F_SETLK, Flock::new(F_WRLCK, 0, 0)),
        Response::Error(libc::EBADF)
    );
    assert_eq!(
        fcntl(&c, a.as_raw_fd(), 1234, Flock::new(F_WRLCK, 0, 0)),
        Response::Error(libc::EINVAL)
    );
}

/// Waits (at most 10 s) until the engine's listing shows exactly one request, of type `ty`,
/// blocked behind one held flock lock, and the daemon has parked that one call; fails if
/// anything else is listed (a request granted instead of blocked, or a second lock).
fn until_blocked(shared: &uipc_server::Shared, ty: LockType) {
    uipc_testkit::wait_until("a flock blocked and its call parked", || {
        let list = shared.locks.list();
        let held: Vec<_> = list.iter().filter(|l| l.blocked_behind.is_none()).collect();
        let blocked: Vec<_> = list.iter().filter(|l| l.blocked_behind.is_some()).collect();
        assert_eq!(held.len(), 1, "one lock held: {list:?}");
        let [b] = blocked[..] else {
            return false;
        };
        assert_eq!((b.kind, b.ty), (LockKind::Flock, ty), "{list:?}");
        shared.parked_calls() == 1
    });
}

#[test]
fn a_blocking_flock_sleeps_until_the_holder_unlocks_and_a_cancel_gives_eintr() {
    let (path, shared, c) = common::start_connected("locks", true);
    let (a, b, _p) = opened_twice();
    assert_eq!(flock(&c, a.as_raw_fd(), LOCK_EX), OK);
    assert_eq!(flock(&c, b.as_raw_fd(), LOCK_SH | LOCK_NB), EAGAIN);
    let path2 = path.clone();
    let bfd = b.as_raw_fd();
    let waiter = std::thread::spawn(move || {
        let c2 = Connection::connect(&path2, false).unwrap();
        flock(&c2, bfd, LOCK_SH)
    });
    // The engine holds the request blocked behind `a`'s lock, parked: asleep, not granted.
    until_blocked(&shared, LockType::Read);
    assert_eq!(flock(&c, a.as_raw_fd(), LOCK_UN), OK);
    assert_eq!(waiter.join().unwrap(), OK);
    assert_eq!(shared.parked_calls(), 0);

    // Now `b` holds LOCK_SH; a blocking LOCK_EX through `a` sleeps until cancelled.
    let c3 = Connection::connect(&path, false).unwrap();
    let raw = c3.raw_fd();
    let req = Request::Lock(LockRequest::Flock { cmd: LOCK_EX });
    uipc_proto::transport::send_frame(raw, &req.encode(), true, Some(a.as_raw_fd())).unwrap();
    until_blocked(&shared, LockType::Write);
    uipc_proto::transport::send_frame(raw, &Request::Cancel.encode(), true, None).unwrap();
    let got = uipc_proto::transport::recv_frame(raw, false).unwrap();
    assert_eq!(
        Response::decode(&got.payload).unwrap(),
        Response::Error(libc::EINTR)
    );
}

#[test]
fn closing_drops_posix_locks_at_once_and_flock_locks_at_the_last_close() {
    let (_, shared, c) = common::start_connected("locks", true);
    let (a, other, file_path) = opened_twice();
    let dup = a.try_clone().unwrap();
    assert_eq!(
        fcntl(&c, a.as_raw_fd(), F_SETLK, Flock::new(F_WRLCK, 0, 0)),
        OK
    );
    assert_eq!(flock(&c, a.as_raw_fd(), LOCK_EX), OK);
    assert_eq!(shared.locks.list().len(), 2);
    // Closing any descriptor of the file (here another description) drops POSIX locks.
    let close = |fd: &File| {
        call(
            &c,
            Some(fd.as_raw_fd()),
            LockRequest::Close { fd: fd.as_raw_fd() },
        )
    };
    assert_eq!(close(&other), OK);
    drop(other);
    let kinds: Vec<LockKind> = shared.locks.list().iter().map(|l| l.kind).collect();
    assert_eq!(kinds, vec![LockKind::Flock]);
    // `a` still refers to the description: closing the dup leaves the flock lock.
    assert_eq!(close(&dup), OK);
    drop(dup);
    assert_eq!(shared.locks.list().len(), 1);
    // Another process holds it too: closing `a` leaves the lock.
    let mut holder = std::process::Command::new("sleep")
        .arg("30")
        .stdin(std::process::Stdio::from(a.try_clone().unwrap()))
        .spawn()
        .unwrap();
    assert_eq!(close(&a), OK);
    drop(a);
    assert_eq!(shared.locks.list().len(), 1);
    // The holder goes without a word to the daemon; the next conflicting call finds the
    // description unreferenced, drops its lock and succeeds.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let fresh = File::open(&file_path).unwrap();
    std::fs::remove_file(&file_path).unwrap();
    assert_eq!(flock(&c, fresh.as_raw_fd(), LOCK_EX | LOCK_NB), OK);
    let owners: Vec<LockKind> = shared.locks.list().iter().map(|l| l.kind).collect();
    assert_eq!(owners, vec![LockKind::Flock]);
    assert_eq!(shared.descriptions.len(), 1);
}

#[test]
fn a_killed_holders_posix_and_flock_locks_are_released_and_getlk_names_it() {
    let (path, shared, c) = common::start_connected("locks", true);
    let (a, mine, _p) = opened_twice();
    // SAFETY: the child makes system calls and allocations, then waits to be killed.
    let (child, ready) = unsafe { common::fork_with_pipe() };
    if child == 0 {
        let ok = (|| {
            let c = Connection::connect(&path, false).ok()?;
            let fd = a.as_raw_fd();
            (fcntl(&c, fd, F_SETLK, Flock::new(F_WRLCK, 0, 5)) == OK).then_some(())?;
            (flock(&c, fd, LOCK_EX) == OK).then_some(())?;
            Some(())
        })();
        // SAFETY: writes one byte from a live buffer, then sleeps until killed.
        unsafe {
            libc::write(
                ready[1],
                if ok.is_some() { b"y" } else { b"n" }.as_ptr().cast(),
                1,
            );
            loop {
                libc::pause();
            }
        }
    }
    drop(a);
    assert_eq!(common::read_byte(ready[0]), b'y');
    let fd = mine.as_raw_fd();
    assert_eq!(fcntl(&c, fd, F_SETLK, Flock::new(F_RDLCK, 0, 1)), EAGAIN);
    let Response::Lock(LockResponse::Flock(got)) =
        fcntl(&c, fd, F_GETLK, Flock::new(F_RDLCK, 0, 1))
    else {
        panic!("no flock back")
    };
    assert_eq!((got.l_type, got.l_pid, got.l_len), (F_WRLCK, child, 5));
    assert_eq!(flock(&c, fd, LOCK_SH | LOCK_NB), EAGAIN);
    // SAFETY: kills and reaps our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    // The exit thread applies the exit; any later request sees it.
    assert_eq!(fcntl(&c, fd, F_SETLK, Flock::new(F_WRLCK, 0, 0)), OK);
    assert_eq!(flock(&c, fd, LOCK_EX | LOCK_NB), OK);
    let pids: Vec<i32> = shared.locks.list().iter().map(|l| l.pid).collect();
    assert!(!pids.contains(&child), "{pids:?}");
}

#[test]
fn the_listing_shows_held_locks_and_blocked_requests() {
    let (_, _, c) = common::start_connected("locks", true);
    let (a, b, _p) = opened_twice();
    assert_eq!(
        fcntl(&c, a.as_raw_fd(), F_OFD_SETLK, Flock::new(F_RDLCK, 3, 4)),
        OK
    );
    assert_eq!(flock(&c, b.as_raw_fd(), LOCK_SH), OK);
    let Response::Lock(LockResponse::List(lines)) = call(&c, None, LockRequest::List) else {
        panic!("no listing")
    };
    // SAFETY: zeroed stat is valid output space.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a live struct.
    assert_eq!(unsafe { libc::fstat(a.as_raw_fd(), &mut st) }, 0);
    let me = std::process::id() as i32;
    let summary: Vec<_> = lines
        .iter()
        .map(|l| (l.kind, l.l_type, l.pid, l.dev, l.ino, l.start, l.end))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, F_RDLCK, me, st.st_dev, st.st_ino, 3, 6),
            (2, F_RDLCK, me, st.st_dev, st.st_ino, 0, OFFSET_MAX),
        ]
    );
}

#[test]
fn a_lock_call_marks_its_file_in_the_hints_clients_map() {
    let (_, shared, c) = common::start_connected("locks", true);
    let (a, file_path) = file();
    // SAFETY: zeroed stat is valid output space.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a live struct.
    assert_eq!(unsafe { libc::fstat(a.as_raw_fd(), &mut st) }, 0);
    let file = FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    let hints = shared.hints.as_ref().unwrap();
    assert!(!hints.is_marked(file));
    // Even a call that fails at the engine marks the file (the mark comes first).
    assert_eq!(
        flock(&c, a.as_raw_fd(), LOCK_SH | LOCK_UN),
        Response::Error(libc::EINVAL)
    );
    assert!(hints.is_marked(file));
    let (resp, fd) = c
        .call_passing(&Request::Lock(LockRequest::Hints), None, false, false)
        .unwrap();
    assert_eq!(resp, Response::Ret(uipc_proto::HINT_SLOTS as i64));
    let fd = fd.expect("the hints' memfd");
    // SAFETY: maps the descriptor read-only; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            uipc_proto::HINT_SLOTS,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: one byte inside the mapping.
    let byte = unsafe {
        *p.cast::<u8>()
            .add(uipc_proto::hint_slot(file.dev, file.ino))
    };
    assert_eq!(byte, 1);
    // SAFETY: unmaps our mapping.
    unsafe { libc::munmap(p, uipc_proto::HINT_SLOTS) };
    std::fs::remove_file(file_path).unwrap();
}

#[test]
fn a_killed_client_parked_in_setlkw_leaves_the_queue_before_the_next_request() {
    let (path, shared, c) = common::start_connected("locks", true);
    let (a, _p) = file();
    assert_eq!(
        fcntl(&c, a.as_raw_fd(), F_SETLK, Flock::new(F_WRLCK, 0, 10)),
        OK
    );
    // SAFETY: the child makes system calls and allocations only, and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let code = Connection::connect(&path, false)
            .map(|c| fcntl(&c, a.as_raw_fd(), F_SETLKW, Flock::new(F_WRLCK, 0, 10)))
            .is_ok();
        // SAFETY: leaves the child without running the test harness's exit path.
        unsafe { libc::_exit(i32::from(!code)) };
    }
    let t0 = std::time::Instant::now();
    while !shared
        .locks
        .list()
        .iter()
        .any(|l| l.pid == child && l.blocked_behind.is_some())
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "never blocked");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(shared.parked_calls(), 1, "waiting without a thread");
    // SAFETY: kills and reaps our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    // The next request is served after the exit was applied: the request is gone.
    let Response::Lock(LockResponse::List(lines)) = call(&c, None, LockRequest::List) else {
        panic!("no listing")
    };
    assert!(lines.iter().all(|l| l.pid != child), "{lines:?}");
    assert_eq!(shared.parked_calls(), 0);
    assert_eq!(
        fcntl(&c, a.as_raw_fd(), F_SETLK, Flock::new(F_UNLCK, 0, 10)),
        OK
    );
    assert!(
        shared.locks.list().is_empty(),
        "nothing granted to the dead"
    );
}
