//! Shared mode inside a lock manager: a contended file goes into it, processes lock, test and
//! unlock there, another kind of call takes the file back with the owner's lock, an exit frees
//! the lock, and the deadlock walks (the library's and the engine's) see shared-mode sleepers.

use super::shared::*;
use super::*;
use crate::locks::types::*;
use crate::locks::LockManager;
use crate::{Cred, Tgid, WaitCtx};

fn file(ino: u64) -> FileId {
    FileId { dev: 7, ino }
}

fn call(m: &LockManager, f: FileId, pid: i32, cmd: i32, ty: i16) -> crate::Result<Flock> {
    fcntl(m, f, pid, (cmd, ty), (0, 0), &WaitCtx::FOREVER)
}

/// fcntl `cmd` of `pid` through the engine for a lock of type `ty` over `len` bytes from
/// `start` (0: to the end), waiting as `wait` says: F_GETLK's answer, or the call's error.
fn fcntl(
    m: &LockManager,
    f: FileId,
    pid: i32,
    (cmd, ty): (i32, i16),
    (start, len): (i64, i64),
    wait: &WaitCtx<'_>,
) -> crate::Result<Flock> {
    let open = OpenFile {
        file: f,
        ofd: OfdId(pid as u64),
        readable: true,
        writable: true,
        offset: 0,
        size: 0,
    };
    let mut fl = Flock {
        l_type: ty,
        l_whence: SEEK_SET,
        l_start: start,
        l_len: len,
        l_pid: 0,
    };
    m.fcntl(&Cred::root(pid), Some(&open), cmd, &mut fl, wait)
        .map(|()| fl)
}

/// A futex that never sleeps (the tests never wait) and counts wakes.
struct NoSleep(u32);

impl Futex for NoSleep {
    fn wait(&mut self, _: &AtomicU64, _: u32) -> Result<(), crate::Errno> {
        Err(crate::Errno::EINTR)
    }
    fn wake_one(&mut self, _: &AtomicU64) {
        self.0 += 1;
    }
    fn alive(&mut self, _: i32) -> bool {
        true
    }
}

/// A manager whose file `f` went into shared mode: 100 held its lease, 200's lock made it
/// contended, 100's unlock left it quiet. 100, 200 and 300 asked for the area.
fn shared(m: &LockManager, f: FileId) {
    let l = m.leases().unwrap();
    for p in [100, 200, 300] {
        l.asked(p);
    }
    call(m, f, 100, F_SETLK, F_WRLCK).unwrap();
    assert_eq!(l.holder(f), Some(100));
    assert_eq!(call(m, f, 200, F_SETLK, F_WRLCK), Err(crate::Errno::EAGAIN));
    call(m, f, 100, F_SETLK, F_UNLCK).unwrap();
    assert!(
        LeaseView::new(l.words()).is_shared(f),
        "contended and quiet"
    );
}

#[test]
fn a_contended_file_is_locked_in_shared_mode_and_taken_back_with_its_owner() {
    let m = LockManager::new().with_leases(Leases::owned());
    let f = file(1);
    shared(&m, f);
    let v = LeaseView::new(m.leases().unwrap().words());
    let mut fx = NoSleep(0);
    assert_eq!(v.shared_lock(f, 200, false, &mut fx), Some(Ok(())));
    assert_eq!(
        v.shared_lock(f, 200, true, &mut fx),
        Some(Ok(())),
        "its own"
    );
    assert_eq!(
        v.shared_lock(f, 300, false, &mut fx),
        Some(Err(crate::Errno::EAGAIN))
    );
    assert_eq!(v.shared_owner(f, 300), Some(200));
    assert_eq!(v.shared_owner(f, 200), Some(0));
    // Another process's unlock: nothing of its own to drop.
    assert_eq!(v.shared_unlock(f, 300, (0, OFFSET_MAX), &mut fx), Some(()));
    // Part of the owner's lock: the daemon.
    assert_eq!(v.shared_unlock(f, 200, (0, 9), &mut fx), None);
    // A daemon call takes the file back: the engine has 200's lock.
    let g = call(&m, f, 300, F_GETLK, F_RDLCK).unwrap();
    assert_eq!(
        (g.l_type, g.l_pid, g.l_start, g.l_len),
        (F_WRLCK, 200, 0, 0)
    );
    assert!(!v.is_shared(f));
    assert_eq!(v.shared_lock(f, 300, false, &mut fx), None);
    assert_eq!(
        call(&m, f, 300, F_SETLK, F_WRLCK),
        Err(crate::Errno::EAGAIN)
    );
    call(&m, f, 200, F_SETLK, F_UNLCK).unwrap();
    call(&m, f, 300, F_SETLK, F_WRLCK).unwrap();
}

#[test]
fn an_unlock_wakes_one_sleeper_and_an_exit_frees_the_lock() {
    let m = LockManager::new().with_leases(Leases::owned());
    let f = file(2);
    shared(&m, f);
    let l = m.leases().unwrap();
    let v = LeaseView::new(l.words());
    let mut fx = NoSleep(0);
    assert_eq!(v.shared_lock(f, 100, false, &mut fx), Some(Ok(())));
    // 200 arms and is interrupted (the test's futex ends every sleep with EINTR).
    assert_eq!(
        v.shared_lock(f, 200, true, &mut fx),
        Some(Err(crate::Errno::EINTR))
    );
    assert_eq!(v.shared_unlock(f, 100, (0, OFFSET_MAX), &mut fx), Some(()));
    assert_eq!(fx.0, 1, "WAITERS was set: one wake");
    assert_eq!(v.shared_lock(f, 300, false, &mut fx), Some(Ok(())));
    m.process_exit(Tgid::new(300));
    assert_eq!(
        v.shared_owner(f, 100),
        Some(0),
        "the dead owner's lock is gone"
    );
    assert_eq!(v.shared_lock(f, 100, false, &mut fx), Some(Ok(())));
}

#[test]
fn walks_follow_sleepers_on_slots_and_stop_at_the_engine() {
    let m = LockManager::new().with_leases(Leases::owned());
    let (f, g) = (file(3), file(4));
    shared(&m, f);
    shared(&m, g);
    let l = m.leases().unwrap();
    let w = l.words();
    let v = LeaseView::new(w);
    let mut fx = NoSleep(0);
    assert_eq!(v.shared_lock(f, 100, false, &mut fx), Some(Ok(())));
    assert_eq!(v.shared_lock(g, 200, false, &mut fx), Some(Ok(())));
    // 100 sleeps on g (behind 200).
    let (k, _, s) = v.shared_slot(g).unwrap();
    set_mark(proc_word(w, 100).unwrap(), sleep_mark(k, s >> 32));
    assert_eq!(l.sleeps_behind(100), Some(200));
    // 200 asking for f (owned by 100) closes the cycle; 300 asking for f does not.
    assert_eq!(walk(w, 200, 100), Walk::Cycle);
    assert_eq!(walk(w, 300, 100), Walk::Clear);
    // A request of 200 asleep in the engine: the library asks the daemon.
    l.engine_sleeper(200, true);
    assert_eq!(walk(w, 300, 100), Walk::Daemon);
    l.engine_sleeper(200, false);
    // Taken back: the mark names a slot no longer in shared mode.
    call(&m, g, 300, F_GETLK, F_RDLCK).unwrap();
    assert_eq!(l.sleeps_behind(100), None);
    assert_eq!(walk(w, 200, 100), Walk::Clear);
}

/// F_SETLKW of `pid` through the engine, waiting at most 100 ms (an engine sleep times out
/// with EAGAIN).
fn setlkw(m: &LockManager, f: FileId, pid: i32) -> crate::Result<()> {
    setlkw_for(m, f, pid, 100)
}

/// F_SETLKW of `pid` through the engine, waiting at most `ms` milliseconds.
fn setlkw_for(m: &LockManager, f: FileId, pid: i32, ms: u64) -> crate::Result<()> {
    let wait = WaitCtx::timeout(std::time::Duration::from_millis(ms));
    fcntl(m, f, pid, (F_SETLKW, F_WRLCK), (0, 0), &wait).map(|_| ())
}

#[test]
fn a_fresh_blocked_setlkw_sleeps_on_the_slot_and_the_file_stays_shared() {
    let m = LockManager::new().with_leases(Leases::owned());
    let f = file(5);
    shared(&m, f);
    let l = m.leases().unwrap();
    let v = LeaseView::new(l.words());
    let mut fx = NoSleep(0);
    assert_eq!(v.shared_lock(f, 100, false, &mut fx), Some(Ok(())));
    // 200's first call reaches the daemon: sent back to sleep on the slot.
    assert_eq!(setlkw(&m, f, 200).map_err(|e| e.raw()), Err(RETRY_LOCAL));
    assert!(v.is_shared(f), "the file stayed in shared mode");
    assert_eq!(v.shared_owner(f, 200), Some(100), "100 still owns it");
    // A process that never asked for the area cannot sleep there: the engine serves it,
    // with the file taken back and 100's lock in it.
    assert!(
        setlkw(&m, f, 400).is_err(),
        "blocked behind 100 until the time-out"
    );
    assert!(!v.is_shared(f));
}

#[test]
fn a_fresh_setlkw_whose_walk_meets_the_engine_goes_into_the_engine() {
    let m = LockManager::new().with_leases(Leases::owned());
    let f = file(6);
    shared(&m, f);
    let l = m.leases().unwrap();
    let v = LeaseView::new(l.words());
    let mut fx = NoSleep(0);
    assert_eq!(v.shared_lock(f, 100, false, &mut fx), Some(Ok(())));
    // The owner has a request asleep in the engine: the library's walk would send 200's call
    // straight back, so the daemon keeps it (and takes the file back).
    l.engine_sleeper(100, true);
    assert_eq!(
        v.shared_lock(f, 200, true, &mut fx),
        None,
        "the library's walk"
    );
    assert!(
        setlkw(&m, f, 200).is_err(),
        "blocked behind 100 until the time-out"
    );
    assert!(!v.is_shared(f));
    l.engine_sleeper(100, false);
}

#[test]
fn a_file_contended_in_the_engine_from_the_start_goes_into_shared_mode() {
    let m = std::sync::Arc::new(LockManager::new().with_leases(Leases::owned()));
    let f = file(7);
    let l = m.leases().unwrap();
    for p in [100, 200, 300] {
        l.asked(p);
    }
    // 100 holds more ranges than a lease takes: its locks stay in the engine, no lease was
    // ever granted, so none is ever taken back for another process.
    for i in 0..=LEASE_RANGES as i64 {
        let (set, ranges) = ((F_SETLK, F_WRLCK), (2 * i, 1));
        fcntl(&m, f, 100, set, ranges, &WaitCtx::FOREVER).unwrap();
    }
    assert_eq!(l.holder(f), None, "too many ranges for a lease");
    // 200 waits in the engine for the whole file. (One waiter: two retrying at once could
    // meet inside the file, and the grant waits for the last call inside.)
    let waiter = {
        let m = m.clone();
        std::thread::spawn(move || setlkw_for(&m, f, 200, 5000))
    };
    let w = l.words();
    let asleep = |p: i32| proc_word(w, p).unwrap().load(crate::sync::Ordering::SeqCst) >> 32 != 0;
    while !asleep(200) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // 100's unlock finds 200 queued (the file is contended); 200's retry takes the lock, and
    // its grant puts the file into shared mode rather than leasing it to 200 alone.
    call(&m, f, 100, F_SETLK, F_UNLCK).unwrap();
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert!(LeaseView::new(w).is_shared(f), "in shared mode");
    assert_eq!(l.holder(f), None, "not leased to 200 alone");
    assert_eq!(LeaseView::new(w).shared_owner(f, 300), Some(200));
    // 300, blocked there, is sent to sleep on the slot.
    assert_eq!(setlkw(&m, f, 300).map_err(|e| e.raw()), Err(RETRY_LOCAL));
}
