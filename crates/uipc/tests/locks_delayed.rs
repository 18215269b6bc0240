//! Delayed deadlocks (reference §6.8): a waiter that a release leaves blocked by another owner
//! is checked for a cycle again, as Linux checks a woken request that must wait again, and
//! gets EDEADLK at once if that owner waits for it; sleeping and parked alike.
//!
//! The scenario: process 1 holds W[2,6], process 2 W[9,13], process 3 W[17,21]. Process 2
//! waits for [17,21] (behind 3); process 3 waits for [2,15] (behind 1, who waits for nobody:
//! no cycle yet). Process 1 unlocks: 3 is now blocked by 2, who waits for 3.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use uipc::locks::*;
use uipc::{Errno, ParkCtx, Progress};

const FILE: FileId = FileId { dev: 5, ino: 17 };
const LF: common::LockFile = common::LockFile(FILE);

fn setlk(m: &LockManager, pid: i32, cmd: i32, ty: i16, start: i64, len: i64) -> Result<(), Errno> {
    LF.setlk(m, pid, cmd, ty, start, len)
}

fn park(m: &LockManager, pid: i32, start: i64, len: i64, ctx: &ParkCtx) -> ParkedLock {
    LF.park(m, pid, (F_WRLCK, start, len), ctx)
}

fn blocked(m: &LockManager) -> usize {
    LF.blocked(m)
}

fn wait_blocked(m: &LockManager, n: usize) {
    LF.wait_blocked(m, n)
}

fn hold_three(m: &LockManager) {
    setlk(m, 1, F_SETLK, F_WRLCK, 2, 5).unwrap();
    setlk(m, 2, F_SETLK, F_WRLCK, 9, 5).unwrap();
    setlk(m, 3, F_SETLK, F_WRLCK, 17, 5).unwrap();
}

#[test]
fn a_sleeper_left_blocked_by_an_owner_waiting_for_it_gets_edeadlk_at_once() {
    let m = Arc::new(LockManager::new());
    hold_three(&m);
    let m2 = m.clone();
    let two = thread::spawn(move || setlk(&m2, 2, F_SETLKW, F_WRLCK, 17, 5));
    wait_blocked(&m, 1);
    let m3 = m.clone();
    let three = thread::spawn(move || {
        let t0 = Instant::now();
        (setlk(&m3, 3, F_SETLKW, F_WRLCK, 2, 14), t0.elapsed())
    });
    wait_blocked(&m, 2);
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
    let (r, took) = three.join().unwrap();
    assert_eq!(r, Err(Errno::EDEADLK), "EINTR means it slept on");
    assert!(took < Duration::from_secs(4), "{took:?}");
    // The cycle is still there: asked again, refused at once.
    assert_eq!(setlk(&m, 3, F_SETLKW, F_WRLCK, 9, 1), Err(Errno::EDEADLK));
    setlk(&m, 3, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(two.join().unwrap(), Ok(()));
    assert_eq!(blocked(&m), 0);
}

#[test]
fn a_full_search_refuses_the_request_at_once_as_it_follows_every_blocker() {
    let m = Arc::new(LockManager::with_config(LockConfig {
        deadlock: DeadlockMode::Full,
        ..LockConfig::default()
    }));
    hold_three(&m);
    let m2 = m.clone();
    let two = thread::spawn(move || setlk(&m2, 2, F_SETLKW, F_WRLCK, 17, 5));
    wait_blocked(&m, 1);
    // Process 3 would wait behind 1 and 2; 2 waits for 3.
    assert_eq!(setlk(&m, 3, F_SETLKW, F_WRLCK, 2, 14), Err(Errno::EDEADLK));
    setlk(&m, 3, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(two.join().unwrap(), Ok(()));
}

#[test]
fn a_parked_request_left_blocked_by_an_owner_waiting_for_it_is_notified_and_gets_edeadlk() {
    let m = LockManager::new();
    hold_three(&m);
    let (ctx2, told2) = common::counted(None);
    let two = park(&m, 2, 17, 5, &ctx2);
    let (ctx3, told3) = common::counted(None);
    let three = park(&m, 3, 2, 14, &ctx3);
    assert_eq!(blocked(&m), 2);
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(told3.load(Ordering::SeqCst), 1, "the daemon must be told");
    assert!(matches!(
        three.poll(&m),
        Progress::Done(Err(Errno::EDEADLK))
    ));
    assert_eq!(blocked(&m), 1);
    assert_eq!(told2.load(Ordering::SeqCst), 0, "2 still waits for 3");
    setlk(&m, 3, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    assert!(matches!(two.poll(&m), Progress::Done(Ok(()))));
}

#[test]
fn a_release_that_leaves_no_cycle_wakes_no_one_still_blocked() {
    // As above, but 2 waits for 4 (not for 3): 3, left blocked by 2, sleeps on unwoken.
    let m = LockManager::new();
    hold_three(&m);
    setlk(&m, 4, F_SETLK, F_WRLCK, 30, 1).unwrap();
    let (ctx2, told2) = common::counted(None);
    let two = park(&m, 2, 30, 1, &ctx2);
    let (ctx3, told3) = common::counted(None);
    let three = park(&m, 3, 2, 14, &ctx3);
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(told3.load(Ordering::SeqCst), 0);
    let three = match three.poll(&m) {
        Progress::Parked(p) => p,
        Progress::Done(r) => panic!("{r:?}"),
    };
    setlk(&m, 4, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert!(matches!(two.poll(&m), Progress::Done(Ok(()))));
    setlk(&m, 2, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(told3.load(Ordering::SeqCst), 1);
    assert!(matches!(three.poll(&m), Progress::Done(Ok(()))));
    assert_eq!(told2.load(Ordering::SeqCst), 1);
}
