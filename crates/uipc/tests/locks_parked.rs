//! Parked lock requests (`fcntl_start`, `flock_start`): woken to retry by a release and granted
//! on poll, cancelled by an interrupt, and a wake-up racing the cancel.

mod common;

use std::sync::atomic::Ordering;
use uipc::locks::*;
use uipc::{Cred, Errno, Interrupt, ParkCtx, Progress, WaitCtx, WakeReason};

const FILE: FileId = FileId { dev: 4, ino: 2 };
const LF: common::LockFile = common::LockFile(FILE);

fn fd(ofd: u64) -> OpenFile {
    LF.fd(ofd as i32)
}

fn set(m: &LockManager, pid: i32, ty: i16) -> Result<(), Errno> {
    LF.setlk(m, pid, F_SETLK, ty, 0, 10)
}

fn park_setlkw(m: &LockManager, pid: i32, p: &ParkCtx) -> ParkedLock {
    LF.park(m, pid, (F_WRLCK, 0, 10), p)
}

fn blocked(m: &LockManager) -> usize {
    LF.blocked(m)
}

#[test]
fn a_parked_setlkw_is_woken_by_the_unlock_and_granted_on_poll() {
    let m = LockManager::new();
    set(&m, 1, F_WRLCK).unwrap();
    let (ctx, told) = common::counted(None);
    let p = park_setlkw(&m, 2, &ctx);
    assert_eq!(blocked(&m), 1);
    let p = match p.poll(&m) {
        Progress::Parked(p) => p,
        Progress::Done(r) => panic!("{r:?}"),
    };
    set(&m, 1, F_UNLCK).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(&m), Progress::Done(Ok(()))));
    assert_eq!(blocked(&m), 0);
    assert_eq!(
        set(&m, 1, F_RDLCK),
        Err(Errno::EAGAIN),
        "pid 2 holds it now"
    );
}

#[test]
fn a_woken_setlkw_that_lost_the_race_parks_again() {
    let m = LockManager::new();
    set(&m, 1, F_WRLCK).unwrap();
    let (ctx, told) = common::counted(None);
    let p = park_setlkw(&m, 2, &ctx);
    set(&m, 1, F_UNLCK).unwrap();
    set(&m, 3, F_WRLCK).unwrap();
    let p = match p.poll(&m) {
        Progress::Parked(p) => p,
        Progress::Done(r) => panic!("granted over pid 3's lock: {r:?}"),
    };
    assert_eq!(blocked(&m), 1);
    set(&m, 3, F_UNLCK).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 2);
    assert!(matches!(p.poll(&m), Progress::Done(Ok(()))));
}

#[test]
fn an_interrupted_parked_lock_leaves_the_queue_with_eintr() {
    let m = LockManager::new();
    set(&m, 1, F_WRLCK).unwrap();
    let irq = Interrupt::new();
    let (ctx, told) = common::counted(Some(&irq));
    let p = park_setlkw(&m, 2, &ctx);
    irq.raise();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(&m), Progress::Done(Err(Errno::EINTR))));
    assert_eq!(blocked(&m), 0);
    let (ctx, _) = common::counted(None);
    let p = park_setlkw(&m, 2, &ctx);
    assert_eq!(p.cancel(&m, WakeReason::TimedOut), Err(Errno::EINTR));
    assert_eq!(blocked(&m), 0);
}

#[test]
fn a_wake_up_racing_the_cancel_takes_the_lock_if_it_is_free() {
    let m = LockManager::new();
    set(&m, 1, F_WRLCK).unwrap();
    let (ctx, _) = common::counted(None);
    let p = park_setlkw(&m, 2, &ctx);
    set(&m, 1, F_UNLCK).unwrap();
    assert_eq!(p.cancel(&m, WakeReason::Interrupted), Ok(()));
    assert_eq!(set(&m, 1, F_RDLCK), Err(Errno::EAGAIN), "pid 2 holds it");
    assert_eq!(blocked(&m), 0);
}

#[test]
fn a_parked_flock_is_granted_after_the_holders_unlock() {
    let m = LockManager::new();
    let me = Cred::root(1);
    let f = &WaitCtx::FOREVER;
    m.flock(&me, Some(&fd(10)), LOCK_EX, f).unwrap();
    let (ctx, told) = common::counted(None);
    let p = match m.flock_start(&Cred::root(2), Some(&fd(20)), LOCK_SH, &ctx) {
        Progress::Parked(p) => p,
        Progress::Done(r) => panic!("{r:?}"),
    };
    assert!(matches!(
        m.flock_start(&Cred::root(2), Some(&fd(30)), LOCK_SH | LOCK_NB, &ctx),
        Progress::Done(Err(Errno::EAGAIN))
    ));
    m.flock(&me, Some(&fd(10)), LOCK_UN, f).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(&m), Progress::Done(Ok(()))));
    assert_eq!(
        m.flock(&me, Some(&fd(10)), LOCK_EX | LOCK_NB, f),
        Err(Errno::EAGAIN)
    );
}

#[test]
fn releases_while_a_woken_waiter_has_not_retried_wake_no_one_else_and_a_requeue_wakes_the_next() {
    let m = LockManager::new();
    set(&m, 1, F_WRLCK).unwrap();
    let (ctx2, told2) = common::counted(None);
    let p2 = park_setlkw(&m, 2, &ctx2);
    let (ctx3, told3) = common::counted(None);
    let p3 = park_setlkw(&m, 3, &ctx3);
    set(&m, 1, F_UNLCK).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    // The running owner takes the range back and releases it again and again before 2 retries:
    // 3 waits behind 2, so nobody else is woken.
    for _ in 0..3 {
        set(&m, 1, F_WRLCK).unwrap();
        set(&m, 1, F_UNLCK).unwrap();
    }
    set(&m, 1, F_WRLCK).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    assert_eq!(told3.load(Ordering::SeqCst), 0);
    // 2 retries while 1 holds the range: it waits again, now after 3.
    let p2 = match p2.poll(&m) {
        Progress::Parked(p) => p,
        Progress::Done(r) => panic!("granted over pid 1's lock: {r:?}"),
    };
    assert_eq!(blocked(&m), 2);
    set(&m, 1, F_UNLCK).unwrap();
    assert_eq!(
        told3.load(Ordering::SeqCst),
        1,
        "the oldest sleeper is woken"
    );
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    assert!(matches!(p3.poll(&m), Progress::Done(Ok(()))));
    set(&m, 3, F_UNLCK).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 2);
    assert!(matches!(p2.poll(&m), Progress::Done(Ok(()))));
    assert_eq!(blocked(&m), 0);
}
