//! The "before" lock table's semantics: mutual exclusion under threads, shared read locks,
//! ranges, deadlock detection through the blocked list, flock conversion, wakeups.

use super::*;
use libc::{LOCK_EX, LOCK_NB, LOCK_SH, LOCK_UN};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use uipc_testkit::wait_until;

const FILE: FileKey = 1;
const EOF: i64 = i64::MAX;

/// Runs `threads` threads that each take and drop an exclusive lock `rounds` times, checking
/// that nobody else is inside while they hold it; returns the number of critical sections run.
fn hammer(
    threads: usize,
    rounds: usize,
    lock: impl Fn(usize) + Sync,
    unlock: impl Fn(usize) + Sync,
) -> usize {
    let inside = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (inside, done, lock, unlock) = (&inside, &done, &lock, &unlock);
            s.spawn(move || {
                for _ in 0..rounds {
                    lock(t);
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::Relaxed);
                    unlock(t);
                }
            });
        }
    });
    done.into_inner()
}

#[test]
fn posix_write_locks_exclude_each_other_across_threads() {
    let t = GlobalLockTable::new();
    let n = hammer(
        8,
        2000,
        |i| {
            t.posix(FILE, 100 + i as i32, F_WRLCK, 0, EOF, true)
                .unwrap()
        },
        |i| {
            t.posix(FILE, 100 + i as i32, F_UNLCK, 0, EOF, true)
                .unwrap()
        },
    );
    assert_eq!(n, 16_000);
    assert_eq!(t.blocked_posix_requests(), 0);
}

#[test]
fn flock_exclusive_locks_exclude_each_other_across_threads() {
    let t = GlobalLockTable::new();
    let n = hammer(
        8,
        2000,
        |i| t.flock(FILE, i as u64, LOCK_EX).unwrap(),
        |i| t.flock(FILE, i as u64, LOCK_UN).unwrap(),
    );
    assert_eq!(n, 16_000);
}

#[test]
fn posix_read_locks_are_shared_and_exclude_writers() {
    let t = GlobalLockTable::new();
    t.posix(FILE, 1, F_RDLCK, 0, EOF, false).unwrap();
    t.posix(FILE, 2, F_RDLCK, 0, 9, false).unwrap();
    assert_eq!(t.posix(FILE, 3, F_WRLCK, 5, 5, false), Err(Errno::EAGAIN));
    assert_eq!(t.posix(FILE, 3, F_RDLCK, 5, 5, false), Ok(()));
    // An owner never conflicts with itself: 1 upgrades the part nobody else reads.
    assert_eq!(t.posix(FILE, 1, F_WRLCK, 10, 19, false), Ok(()));
    assert_eq!(t.posix(FILE, 2, F_RDLCK, 15, 15, false), Err(Errno::EAGAIN));
}

#[test]
fn posix_ranges_conflict_only_where_they_overlap_and_unlock_splits() {
    let t = GlobalLockTable::new();
    t.posix(FILE, 1, F_WRLCK, 0, 99, false).unwrap();
    assert_eq!(t.posix(FILE, 2, F_WRLCK, 100, 199, false), Ok(()));
    assert_eq!(t.posix(FILE, 2, F_WRLCK, 99, 99, false), Err(Errno::EAGAIN));
    t.posix(FILE, 1, F_UNLCK, 40, 59, false).unwrap();
    assert_eq!(t.posix(FILE, 2, F_WRLCK, 40, 59, false), Ok(()));
    assert_eq!(t.posix(FILE, 2, F_WRLCK, 39, 39, false), Err(Errno::EAGAIN));
    assert_eq!(t.posix(FILE, 2, F_WRLCK, 60, 60, false), Err(Errno::EAGAIN));
    // Files are independent.
    let other: FileKey = 2;
    assert_eq!(t.posix(other, 2, F_WRLCK, 0, EOF, false), Ok(()));
}

#[test]
fn posix_bad_type_or_range_is_einval() {
    let t = GlobalLockTable::new();
    assert_eq!(t.posix(FILE, 1, 7, 0, 1, false), Err(Errno::EINVAL));
    assert_eq!(t.posix(FILE, 1, F_WRLCK, -1, 1, false), Err(Errno::EINVAL));
    assert_eq!(t.posix(FILE, 1, F_WRLCK, 5, 4, false), Err(Errno::EINVAL));
}

#[test]
fn unlock_wakes_a_blocked_posix_request_which_then_holds_the_lock() {
    let t = GlobalLockTable::new();
    t.posix(FILE, 1, F_WRLCK, 0, EOF, false).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| t.posix(FILE, 2, F_WRLCK, 0, EOF, true));
        wait_until("the request to block", || t.blocked_posix_requests() == 1);
        t.posix(FILE, 1, F_UNLCK, 0, EOF, false).unwrap();
        assert_eq!(waiter.join().unwrap(), Ok(()));
    });
    assert_eq!(t.blocked_posix_requests(), 0);
    assert_eq!(t.posix(FILE, 1, F_WRLCK, 0, 0, false), Err(Errno::EAGAIN));
}

#[test]
fn a_request_closing_a_cycle_of_owners_gets_edeadlk() {
    let t = GlobalLockTable::new();
    t.posix(FILE, 1, F_WRLCK, 0, 0, false).unwrap();
    t.posix(FILE, 2, F_WRLCK, 1, 1, false).unwrap();
    t.posix(FILE, 3, F_WRLCK, 2, 2, false).unwrap();
    std::thread::scope(|s| {
        // 1 waits for 2, 2 waits for 3; 3 asking for 1's byte closes the cycle.
        let one = s.spawn(|| t.posix(FILE, 1, F_WRLCK, 1, 1, true));
        wait_until("1 to block", || t.blocked_posix_requests() == 1);
        let two = s.spawn(|| t.posix(FILE, 2, F_WRLCK, 2, 2, true));
        wait_until("2 to block", || t.blocked_posix_requests() == 2);
        assert_eq!(t.posix(FILE, 3, F_WRLCK, 0, 0, true), Err(Errno::EDEADLK));
        // A request that waits without closing a cycle is queued.
        t.posix(FILE, 3, F_UNLCK, 2, 2, false).unwrap();
        assert_eq!(two.join().unwrap(), Ok(()));
        t.posix(FILE, 2, F_UNLCK, 1, 2, false).unwrap();
        assert_eq!(one.join().unwrap(), Ok(()));
    });
}

/// A table in which owners 1 and 2 hold shared flock locks on FILE.
fn shared_by_1_and_2() -> GlobalLockTable {
    let t = GlobalLockTable::new();
    t.flock(FILE, 1, LOCK_SH).unwrap();
    t.flock(FILE, 2, LOCK_SH).unwrap();
    t
}

#[test]
fn flock_shared_locks_coexist_and_exclusive_waits_or_fails_with_lock_nb() {
    let t = shared_by_1_and_2();
    assert_eq!(t.flock(FILE, 3, LOCK_EX | LOCK_NB), Err(Errno::EWOULDBLOCK));
    // flock never conflicts with POSIX locks.
    assert_eq!(t.posix(FILE, 9, F_WRLCK, 0, EOF, false), Ok(()));
    std::thread::scope(|s| {
        let ex = s.spawn(|| t.flock(FILE, 3, LOCK_EX));
        t.flock(FILE, 1, LOCK_UN).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!ex.is_finished(), "still one shared holder");
        t.flock(FILE, 2, LOCK_UN).unwrap();
        assert_eq!(ex.join().unwrap(), Ok(()));
    });
    assert_eq!(t.flock(FILE, 1, LOCK_SH | LOCK_NB), Err(Errno::EWOULDBLOCK));
}

#[test]
fn flock_conversion_drops_the_old_lock_first() {
    let t = shared_by_1_and_2();
    // A failed non-blocking upgrade leaves 1 with no lock at all.
    assert_eq!(t.flock(FILE, 1, LOCK_EX | LOCK_NB), Err(Errno::EWOULDBLOCK));
    t.flock(FILE, 2, LOCK_EX | LOCK_NB).unwrap();
    assert_eq!(
        t.flock(FILE, 2, LOCK_EX | LOCK_NB),
        Ok(()),
        "same type again is a no-op"
    );
}

#[test]
fn flock_bad_command_is_einval() {
    let t = GlobalLockTable::new();
    for cmd in [0, LOCK_NB, LOCK_SH | LOCK_EX, 64] {
        assert_eq!(t.flock(FILE, 1, cmd), Err(Errno::EINVAL), "cmd {cmd}");
    }
}
