//! Parked lock requests (`fcntl_start`, `flock_start`): woken to retry by a release and granted
//! on poll, cancelled by an interrupt, and a wake-up racing the cancel.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
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

/// A manager in which pid 1 holds a write lock on 0..9.
fn held() -> LockManager {
    let m = LockManager::new();
    set(&m, 1, F_WRLCK).unwrap();
    m
}

/// Pid `pid`'s F_SETLKW of 0..9, parked, and the count of its notifications (interrupted by
/// `irq` if given).
fn parked(m: &LockManager, pid: i32, irq: Option<&Interrupt>) -> (ParkedLock, Arc<AtomicUsize>) {
    let (ctx, told) = common::counted(irq);
    (park_setlkw(m, pid, &ctx), told)
}

fn blocked(m: &LockManager) -> usize {
    LF.blocked(m)
}

type Waiter = (ParkedLock, Arc<AtomicUsize>);

/// A manager in which pids 2 and 3 parked in that order behind pid 1's lock, which pid 1 then
/// released: the first is woken, the one behind it is not.
fn two_parked_and_a_release() -> (LockManager, Waiter, Waiter) {
    let m = held();
    let (p2, told2) = parked(&m, 2, None);
    let (p3, told3) = parked(&m, 3, None);
    set(&m, 1, F_UNLCK).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 1, "the first waiter is woken");
    assert_eq!(told3.load(Ordering::SeqCst), 0, "the one behind it is not");
    (m, (p2, told2), (p3, told3))
}

/// Pid 3, woken by the last release (`why`) while the re-queued pid 2 was not, is granted on
/// poll; its unlock wakes pid 2, which is granted too; then nobody waits.
fn three_then_two_granted(m: &LockManager, (p3, told3): Waiter, (p2, told2): Waiter, why: &str) {
    assert_eq!(told3.load(Ordering::SeqCst), 1, "{why}");
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    assert!(matches!(p3.poll(m), Progress::Done(Ok(()))));
    set(m, 3, F_UNLCK).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 2);
    assert!(matches!(p2.poll(m), Progress::Done(Ok(()))));
    assert_eq!(blocked(m), 0);
}

#[test]
fn a_parked_setlkw_is_woken_by_the_unlock_and_granted_on_poll() {
    let m = held();
    let (p, told) = parked(&m, 2, None);
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
    let m = held();
    let (p, told) = parked(&m, 2, None);
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
    let m = held();
    let irq = Interrupt::new();
    let (p, told) = parked(&m, 2, Some(&irq));
    irq.raise();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(&m), Progress::Done(Err(Errno::EINTR))));
    assert_eq!(blocked(&m), 0);
    let (p, _) = parked(&m, 2, None);
    assert_eq!(p.cancel(&m, WakeReason::TimedOut), Err(Errno::EINTR));
    assert_eq!(blocked(&m), 0);
}

#[test]
fn a_wake_up_racing_the_cancel_takes_the_lock_if_it_is_free() {
    let m = held();
    let (p, _) = parked(&m, 2, None);
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
    let (m, (p2, told2), w3) = two_parked_and_a_release();
    // The running owner takes the range back and releases it again and again before 2 retries:
    // 3 waits behind 2, so nobody else is woken.
    for _ in 0..3 {
        set(&m, 1, F_WRLCK).unwrap();
        set(&m, 1, F_UNLCK).unwrap();
    }
    set(&m, 1, F_WRLCK).unwrap();
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    assert_eq!(w3.1.load(Ordering::SeqCst), 0);
    // 2 retries while 1 holds the range: it waits again, now after 3.
    let p2 = common::parked(p2.poll(&m), "a retry over pid 1's lock");
    assert_eq!(blocked(&m), 2);
    set(&m, 1, F_UNLCK).unwrap();
    three_then_two_granted(&m, w3, (p2, told2), "the oldest sleeper is woken");
}

/// While a woken waiter has not retried, tasks lock and unlock past it (the file is "quiet":
/// the sleeper behind it stays asleep, and no release wakes anyone); once it re-queues, a
/// release wakes again.
#[test]
fn tasks_lock_past_a_woken_waiter_without_waking_the_sleeper_behind_it() {
    let (m, (p2, told2), w3) = two_parked_and_a_release();
    for _ in 0..3 {
        set(&m, 4, F_WRLCK).unwrap();
        assert_eq!(set(&m, 5, F_RDLCK), Err(Errno::EAGAIN));
        set(&m, 4, F_UNLCK).unwrap();
    }
    assert_eq!(told2.load(Ordering::SeqCst), 1);
    assert_eq!(w3.1.load(Ordering::SeqCst), 0);
    set(&m, 4, F_WRLCK).unwrap();
    let p2 = common::parked(p2.poll(&m), "a retry over pid 4's lock");
    set(&m, 4, F_UNLCK).unwrap();
    // Re-queued, pid 2 is now behind pid 3 in arrival order: the release wakes pid 3 only.
    three_then_two_granted(&m, w3, (p2, told2), "a release wakes again");
}
