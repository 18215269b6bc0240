//! The leases inside a lock manager: grant after a lone process's lock, the holder's own
//! operations, revoke by another process's call (which then sees the holder's locks), close,
//! exit, listings.

use super::*;
use crate::locks::types::*;
use crate::locks::LockManager;
use crate::{Cred, Tgid, WaitCtx};

const F: FileId = FileId { dev: 7, ino: 42 };

fn open() -> OpenFile {
    OpenFile {
        file: F,
        ofd: OfdId(1),
        readable: true,
        writable: true,
        offset: 0,
        size: 0,
    }
}

fn fl(ty: i16, start: i64, len: i64) -> Flock {
    Flock {
        l_type: ty,
        l_whence: SEEK_SET,
        l_start: start,
        l_len: len,
        l_pid: 0,
    }
}

/// fcntl(`cmd`) with `f` by process `pid` through the test's description: the result, and
/// `f` as the call left it.
fn fcntl(m: &LockManager, pid: i32, cmd: i32, mut f: Flock) -> (crate::Result<()>, Flock) {
    let r = m.fcntl(
        &Cred::root(pid),
        Some(&open()),
        cmd,
        &mut f,
        &WaitCtx::FOREVER,
    );
    (r, f)
}

fn setlk(m: &LockManager, pid: i32, ty: i16, start: i64, len: i64) -> crate::Result<()> {
    fcntl(m, pid, F_SETLK, fl(ty, start, len)).0
}

/// The answer to F_GETLK by `pid` for `ty` over the whole file.
fn getlk(m: &LockManager, pid: i32, ty: i16) -> Flock {
    let (r, f) = fcntl(m, pid, F_GETLK, fl(ty, 0, 0));
    r.unwrap();
    f
}

fn manager() -> LockManager {
    LockManager::new().with_leases(Leases::owned())
}

#[test]
fn a_lone_lock_is_leased_and_another_process_sees_it_after_the_revoke() {
    let m = manager();
    setlk(&m, 100, F_WRLCK, 0, 10).unwrap();
    assert_eq!(m.leases().unwrap().holder(F), Some(100));
    let view = LeaseView::new(m.leases().unwrap().words());
    // The holder's own operations: split, retype, merge.
    assert_eq!(view.set(F, 100, None, 3, 4), Leased::Done);
    assert_eq!(view.set(F, 100, Some(false), 20, 29), Leased::Done);
    assert!(view.holds(F, 100));
    assert!(!view.holds(F, 101));
    assert_eq!(view.set(F, 101, Some(true), 0, 0), Leased::Slow);
    // Another process: EAGAIN, and F_GETLK shows the holder's first lock.
    assert_eq!(setlk(&m, 200, F_WRLCK, 0, 1), Err(crate::Errno::EAGAIN));
    assert_eq!(m.leases().unwrap().holder(F), None);
    assert_eq!(view.set(F, 100, None, 0, 0), Leased::Slow);
    let g = getlk(&m, 200, F_RDLCK);
    assert_eq!(
        (g.l_type, g.l_start, g.l_len, g.l_pid),
        (F_WRLCK, 0, 3, 100)
    );
    let listed: Vec<(i64, i64)> = m.list().iter().map(|l| (l.start, l.end)).collect();
    assert_eq!(listed, vec![(0, 2), (5, 9), (20, 29)]);
    // The file was taken for another process: no new lease for a while.
    setlk(&m, 100, F_UNLCK, 0, 0).unwrap();
    assert_eq!(m.leases().unwrap().holder(F), None);
}

#[test]
fn close_and_exit_drop_the_holders_locks() {
    let m = manager();
    setlk(&m, 100, F_WRLCK, 0, 10).unwrap();
    let view = LeaseView::new(m.leases().unwrap().words());
    assert_eq!(view.set(F, 100, Some(true), 50, 59), Leased::Done);
    // Another process's close keeps the lease.
    m.close(Tgid::new(300), F, OfdId(9), true);
    assert_eq!(m.leases().unwrap().holder(F), Some(100));
    assert_eq!(view.clear(F, 100), Leased::Done);
    assert_eq!(getlk(&m, 200, F_WRLCK).l_type, F_UNLCK);
    let m = manager();
    setlk(&m, 100, F_WRLCK, 0, 10).unwrap();
    let view = LeaseView::new(m.leases().unwrap().words());
    assert_eq!(m.leases().unwrap().holder(F), Some(100));
    m.process_exit(Tgid::new(100));
    assert_eq!(m.leases().unwrap().holder(F), None);
    assert!(!view.holds(F, 100));
    assert_eq!(getlk(&m, 200, F_WRLCK).l_type, F_UNLCK);
    assert!(m.list().is_empty());
}

#[test]
fn a_holder_killed_inside_an_operation_leaves_the_locks_before_it() {
    for stop in 0..5 {
        let m = manager();
        setlk(&m, 100, F_WRLCK, 0, 10).unwrap();
        let view = LeaseView::new(m.leases().unwrap().words());
        assert_eq!(view.set_steps(F, 100, None, (0, 9), stop), Leased::Slow);
        // Revoked by another process while BUSY (or not): the locks before the call.
        let g = getlk(&m, 200, F_RDLCK);
        assert_eq!((g.l_type, g.l_len), (F_WRLCK, 10), "stop {stop}");
        // The slot is not reused while the stopped holder may still write it.
        m.process_exit(Tgid::new(100));
        assert_eq!(getlk(&m, 200, F_RDLCK).l_type, F_UNLCK);
    }
}

#[test]
fn overflow_and_waiters_keep_the_daemon_path() {
    let m = manager();
    setlk(&m, 100, F_WRLCK, 0, 1).unwrap();
    let view = LeaseView::new(m.leases().unwrap().words());
    for k in 1..LEASE_RANGES as i64 {
        assert_eq!(view.set(F, 100, Some(true), k * 10, k * 10), Leased::Done);
    }
    assert_eq!(view.set(F, 100, Some(true), 1000, 1000), Leased::Slow);
    // The daemon path: revoke (by the holder itself), then the lock, then too many to lease.
    setlk(&m, 100, F_WRLCK, 1000, 1).unwrap();
    assert_eq!(m.leases().unwrap().holder(F), None);
    assert_eq!(m.list().len(), LEASE_RANGES + 1);
}

#[test]
fn a_held_file_is_not_leased_until_the_hold_ends() {
    let m = manager();
    m.hold_grants(F);
    for _ in 0..2 * crate::locks::books::COOLDOWN {
        setlk(&m, 100, F_WRLCK, 0, 10).unwrap();
    }
    assert_eq!(m.leases().unwrap().holder(F), None);
    m.release_grants(F);
    setlk(&m, 100, F_WRLCK, 0, 10).unwrap();
    assert_eq!(m.leases().unwrap().holder(F), Some(100));
    m.hold_grants(F);
    assert_eq!(m.leases().unwrap().holder(F), None);
    assert_eq!(getlk(&m, 200, F_RDLCK).l_pid, 100);
    m.release_grants(F);
}
