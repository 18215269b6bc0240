//! Loom models of a parked lock request ([`super::ParkedLock`]) against the release that wakes
//! it: cancel racing the wake, and a poll after the notification.

use super::types::{FileId, Flock, OfdId, OpenFile, Owner, F_SETLK, F_SETLKW, F_UNLCK, F_WRLCK};
use super::{LockManager, ParkedLock};
use crate::sync::{model, AtomicUsize, Ordering::SeqCst};
use crate::wait::{ParkCtx, Progress, WaitCtx, WakeReason};
use crate::{Cred, Errno, Tgid};
use loom::thread;
use std::sync::Arc;

const FILE: FileId = FileId { dev: 1, ino: 1 };

fn fd(pid: i32) -> OpenFile {
    OpenFile {
        file: FILE,
        ofd: OfdId(pid as u64),
        readable: true,
        writable: true,
        offset: 0,
        size: 0,
    }
}

fn setlk(m: &LockManager, pid: i32, ty: i16) -> crate::Result<()> {
    let mut fl = Flock::new(ty, 0, 10);
    m.fcntl(
        &Cred::root(pid),
        Some(&fd(pid)),
        F_SETLK,
        &mut fl,
        &WaitCtx::FOREVER,
    )
}

/// Pid 1 holds [0, 10) for writing and pid 2's F_SETLKW waits behind it, parked with a
/// notifier that counts.
fn parked_behind_pid_1() -> (Arc<LockManager>, ParkedLock, Arc<AtomicUsize>) {
    let m = Arc::new(LockManager::new());
    setlk(&m, 1, F_WRLCK).unwrap();
    let told = Arc::new(AtomicUsize::new(0));
    let t2 = told.clone();
    let ctx = ParkCtx::new(
        Arc::new(move || {
            t2.fetch_add(1, SeqCst);
        }),
        None,
    );
    let mut fl = Flock::new(F_WRLCK, 0, 10);
    match m.fcntl_start(&Cred::root(2), Some(&fd(2)), F_SETLKW, &mut fl, &ctx) {
        Progress::Parked(p) => (m, p, told),
        Progress::Done(r) => panic!("a conflicting F_SETLKW finished: {r:?}"),
    }
}

/// Pid 1's unlock, on a thread of its own.
fn unlock_pid_1(m: &Arc<LockManager>) -> thread::JoinHandle<()> {
    let m = m.clone();
    thread::spawn(move || setlk(&m, 1, F_UNLCK).unwrap())
}

/// The file's held locks' owners and its number of blocked requests; the deadlock graph's
/// size.
fn state(m: &LockManager) -> (Vec<Owner>, usize, usize) {
    let l = m.list_file(FILE);
    let held = l
        .iter()
        .filter(|i| i.blocked_behind.is_none())
        .map(|i| i.owner);
    let blocked = l.iter().filter(|i| i.blocked_behind.is_some()).count();
    (held.collect(), blocked, m.graph.len())
}

/// Cancel racing the unlock that wakes the request: a request woken before its cancel
/// retries and gets the lock (as a sleeper whose wake-up raced its signal); either way
/// nothing stays queued or in the deadlock graph, and the lock is pid 2's exactly when the
/// cancel says so.
#[test]
fn cancel_racing_the_waking_unlock() {
    model(|| {
        let (m, p, told) = parked_behind_pid_1();
        let unlocker = unlock_pid_1(&m);
        let woken_before = told.load(SeqCst) > 0;
        let r = p.cancel(&m, WakeReason::Interrupted);
        unlocker.join().unwrap();
        if woken_before {
            assert_eq!(r, Ok(()), "woken before the cancel: retried and granted");
        }
        let (held, blocked, graph) = state(&m);
        match r {
            Ok(()) => assert_eq!(held, vec![Owner::Process(Tgid::new(2))]),
            Err(e) => {
                assert_eq!(e, Errno::EINTR);
                assert!(held.is_empty(), "{held:?}");
            }
        }
        assert_eq!((blocked, graph), (0, 0), "nothing left queued");
    });
}

/// An embedder polls when notified: the poll after the notification always finds the wake
/// and is granted.
#[test]
fn poll_after_the_notification_is_granted() {
    model(|| {
        let (m, p, told) = parked_behind_pid_1();
        let unlocker = unlock_pid_1(&m);
        while told.load(SeqCst) == 0 {
            thread::yield_now();
        }
        assert!(matches!(p.poll(&m), Progress::Done(Ok(()))));
        unlocker.join().unwrap();
        assert_eq!(state(&m), (vec![Owner::Process(Tgid::new(2))], 0, 0));
    });
}
