//! An unprivileged user against a root `--shared` daemon: the memory the daemon shares with
//! clients (segments, lock hints) cannot be widened, resized or made writable, and queries
//! are permission-checked as Linux checks them.
//!
//! The unprivileged side is this test binary run again as uid/gid 65534 (`nobody`), with the
//! scenario in `UIPC_NOBODY`; it runs only [`nobody_side`], which asserts and exits non-zero
//! on a failure. The tests need root (to start the child as another user); as another user
//! they skip.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use uipc::ipc::consts::{IPC_CREAT, IPC_PRIVATE, IPC_STAT, SETALL, SHM_RDONLY};
use uipc_proto::client::Connection;
use uipc_proto::{LockRequest, Request, Response, SemArg};
#[allow(dead_code)]
mod common;

fn daemon() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| common::start_with("nobody", true).0)
}

/// The daemon, when this test runs as root (the tests that switch to nobody need root).
fn daemon_as_root() -> Option<&'static PathBuf> {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() == 0 };
    root.then(daemon)
}

fn call(c: &Connection, req: Request) -> (Response, Option<OwnedFd>) {
    c.call(&req, false).unwrap()
}

fn ret(c: &Connection, req: Request) -> i64 {
    match call(c, req).0 {
        Response::Ret(v) => v,
        other => panic!("{other:?}"),
    }
}

fn as_nobody(scenario: &str, args: &[String]) {
    common::as_nobody("nobody_side", scenario, args);
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Opening `/proc/self/fd/N` read-write fails; returns the errno.
fn reopen_rw(fd: &OwnedFd) -> i32 {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    // SAFETY: opens a NUL-terminated path; a descriptor returned is closed at once.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw >= 0 {
        // SAFETY: our own fresh descriptor.
        unsafe { libc::close(raw) };
        return 0;
    }
    errno()
}

fn ftruncate(fd: &OwnedFd, len: i64) -> i32 {
    // SAFETY: plain syscall on a live descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } == 0 {
        0
    } else {
        errno()
    }
}

fn map_shared(fd: &OwnedFd, len: usize, prot: i32) -> i32 {
    // SAFETY: a mapping attempt on a live descriptor; a mapping made is unmapped at once.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return errno();
        }
        libc::munmap(p, len);
    }
    0
}

fn fchmod(fd: &OwnedFd) -> i32 {
    // SAFETY: plain syscall on a live descriptor.
    if unsafe { libc::fchmod(fd.as_raw_fd(), 0o666) } == 0 {
        0
    } else {
        errno()
    }
}

fn shmat(c: &Connection, shmid: i64, flags: i32) -> OwnedFd {
    // A fresh address per attach (the daemon tracks each process's attach ranges).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let slot = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (resp, fd) = call(
        c,
        Request::Shmat {
            shmid: shmid as i32,
            addr: 0x7f00_0000_0000 + (slot << 24),
            flags,
        },
    );
    assert!(matches!(resp, Response::ShmAttached { .. }), "{resp:?}");
    fd.expect("shmat sends the segment's descriptor")
}

fn hints_fd(c: &Connection) -> OwnedFd {
    let (resp, fd) = call(c, Request::Lock(LockRequest::Hints));
    assert!(matches!(resp, Response::Ret(_)), "{resp:?}");
    fd.expect("the hints come with a descriptor")
}

/// The unprivileged side: does nothing unless started by [`as_nobody`].
#[test]
fn nobody_side() {
    let Some(words) = uipc_testkit::role_args("UIPC_NOBODY") else {
        return;
    };
    let c = Connection::connect(Path::new(&words[1]), false).expect("nobody may connect");
    let num = |i: usize| words[i].parse::<i64>().unwrap();
    match words[0].as_str() {
        "shm" => {
            let ro = shmat(&c, num(2), SHM_RDONLY);
            assert_eq!(reopen_rw(&ro), libc::EACCES, "reopen of a read-only attach");
            assert_ne!(map_shared(&ro, 8192, libc::PROT_WRITE), 0);
            assert_eq!(fchmod(&ro), libc::EPERM, "chmod of the daemon's memfd");
            let rw = shmat(&c, num(3), 0);
            assert_eq!(ftruncate(&rw, 0), libc::EPERM, "shrinking a segment");
            assert_eq!(ftruncate(&rw, 1 << 20), libc::EPERM, "growing a segment");
            assert_eq!(map_shared(&rw, 8192, libc::PROT_READ | libc::PROT_WRITE), 0);
        }
        "hints" => {
            let h = hints_fd(&c);
            assert_eq!(reopen_rw(&h), libc::EACCES, "reopen of the hints");
            assert_eq!(fchmod(&h), libc::EPERM, "chmod of the hints");
            assert_ne!(ftruncate(&h, 0), 0, "truncating the hints");
        }
        "nsems" => {
            let semid = num(2) as i32;
            // SETALL's size query answers only a caller that may alter the set.
            let (resp, _) = call(&c, Request::SemNsems { semid });
            assert_eq!(resp, Response::Error(libc::EACCES), "nsems query");
            let (resp, _) = call(
                &c,
                Request::Semctl {
                    semid,
                    semnum: 0,
                    cmd: SETALL,
                    arg: SemArg::None,
                },
            );
            assert_eq!(resp, Response::Error(libc::EACCES), "SETALL");
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn a_read_only_attach_cannot_be_made_writable_and_no_attacher_can_resize() {
    let Some(path) = daemon_as_root() else {
        return;
    };
    let c = Connection::connect(path, false).unwrap();
    let shmget = |mode| Request::Shmget {
        key: IPC_PRIVATE,
        size: 8192,
        flag: IPC_CREAT | mode,
    };
    let ro = ret(&c, shmget(0o644));
    let rw = ret(&c, shmget(0o666));
    as_nobody(
        "shm",
        &[path.display().to_string(), ro.to_string(), rw.to_string()],
    );
    // The segment keeps its size: the owner still maps and writes all of it.
    let fd = shmat(&c, rw, 0);
    // SAFETY: plain syscall on a live descriptor into zeroed output space.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
    assert_eq!(st.st_size, 8192);
}

#[test]
fn the_lock_hints_cannot_be_made_writable_even_by_root() {
    let Some(path) = daemon_as_root() else {
        return;
    };
    as_nobody("hints", &[path.display().to_string()]);
    // Root may reopen the file (it overrides the mode), but the hints are sealed against
    // writes by anyone but the daemon's own mapping.
    let c = Connection::connect(path, false).unwrap();
    let h = hints_fd(&c);
    let p = std::ffi::CString::new(format!("/proc/self/fd/{}", h.as_raw_fd())).unwrap();
    // SAFETY: opens a NUL-terminated path.
    let raw = unsafe { libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(raw >= 0, "root reopens the file: {}", errno());
    // SAFETY: our own fresh descriptor.
    let rw: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
    let len = uipc_proto::HINT_SLOTS;
    assert_eq!(
        map_shared(&rw, len, libc::PROT_READ | libc::PROT_WRITE),
        libc::EPERM
    );
    let zero = [0u8; 16];
    // SAFETY: writes from a live buffer.
    let n = unsafe { libc::pwrite(rw.as_raw_fd(), zero.as_ptr().cast(), zero.len(), 0) };
    assert_eq!((n, errno()), (-1, libc::EPERM));
    assert_eq!(ftruncate(&rw, 0), libc::EPERM);
}

#[test]
fn the_nsems_query_is_permission_checked() {
    let Some(path) = daemon_as_root() else {
        return;
    };
    let c = Connection::connect(path, false).unwrap();
    let semid = ret(
        &c,
        Request::Semget {
            key: IPC_PRIVATE,
            nsems: 3,
            flag: IPC_CREAT | 0o644,
        },
    );
    as_nobody("nsems", &[path.display().to_string(), semid.to_string()]);
    let (resp, _) = call(
        &c,
        Request::Semctl {
            semid: semid as i32,
            semnum: 0,
            cmd: IPC_STAT,
            arg: SemArg::None,
        },
    );
    assert!(matches!(resp, Response::SemStat { .. }), "{resp:?}");
}
