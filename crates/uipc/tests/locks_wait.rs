//! Blocking requests: who is woken by an unlock (only those that can proceed, counted), order
//! among waiters, EINTR, and deadlock detection in both modes (reference §6.7, §6.8).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use uipc::locks::*;
use uipc::{Cred, Errno, Interrupt, Progress, Tgid, WaitCtx};

const FILE: FileId = FileId { dev: 3, ino: 9 };
const LF: common::LockFile = common::LockFile(FILE);

fn fd(ofd: u64) -> OpenFile {
    LF.fd(ofd as i32)
}

fn setlk(m: &LockManager, pid: i32, cmd: i32, ty: i16, start: i64, len: i64) -> Result<(), Errno> {
    LF.setlk(m, pid, cmd, ty, start, len)
}

fn wait_blocked(m: &LockManager, n: usize) {
    LF.wait_blocked(m, n)
}

/// Spawns a blocking F_SETLKW of `ty` over `[start, start+len)` by process `pid`; counts its
/// return in `woken`.
fn spawn_waiter(
    m: &Arc<LockManager>,
    woken: &Arc<AtomicUsize>,
    pid: i32,
    ty: i16,
    start: i64,
    len: i64,
) -> thread::JoinHandle<Result<(), Errno>> {
    let (m, woken) = (m.clone(), woken.clone());
    thread::spawn(move || {
        let r = setlk(&m, pid, F_SETLKW, ty, start, len);
        woken.fetch_add(1, Ordering::SeqCst);
        r
    })
}

/// A parked F_SETLKW of `ty` over `[start, start+len)` by process `pid`, and the count of its
/// notifications: who a release wakes is read from the engine, not guessed after a sleep.
fn parked(
    m: &LockManager,
    pid: i32,
    ty: i16,
    start: i64,
    len: i64,
) -> (ParkedLock, Arc<AtomicUsize>) {
    let (ctx, told) = common::counted(None);
    (LF.park(m, pid, (ty, start, len), &ctx), told)
}

/// The notification counts of `waiters`.
fn told(waiters: &[(ParkedLock, Arc<AtomicUsize>)]) -> Vec<usize> {
    waiters
        .iter()
        .map(|(_, t)| t.load(Ordering::SeqCst))
        .collect()
}

/// Polls a parked request: granted, or still waiting (`None`).
fn poll(m: &LockManager, p: ParkedLock) -> Option<ParkedLock> {
    match p.poll(m) {
        Progress::Done(r) => {
            assert_eq!(r, Ok(()));
            None
        }
        Progress::Parked(p) => Some(p),
    }
}

#[test]
fn an_unlock_wakes_only_the_waiters_it_unblocks() {
    let m = LockManager::new();
    setlk(&m, 1, F_SETLK, F_WRLCK, 0, 100).unwrap();
    // Ten writers, each on its own tenth of the held range.
    let mut waiters: Vec<_> = (0..10)
        .map(|i| parked(&m, 10 + i, F_WRLCK, i as i64 * 10, 10))
        .collect();
    assert_eq!(LF.blocked(&m), 10);
    // Unlocking the first tenth wakes exactly the waiter on [0,9], which then gets it.
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 10).unwrap();
    assert_eq!(told(&waiters), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let (first, _) = waiters.remove(0);
    assert!(poll(&m, first).is_none(), "granted");
    assert_eq!(LF.blocked(&m), 9);
    // A downgrade to read over [10,49] wakes nobody (they want write).
    setlk(&m, 1, F_SETLK, F_RDLCK, 10, 40).unwrap();
    assert_eq!(told(&waiters), [0; 9]);
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(told(&waiters), [1; 9]);
    for (p, _) in waiters {
        assert!(poll(&m, p).is_none(), "granted");
    }
    assert_eq!(LF.blocked(&m), 0);
}

#[test]
fn readers_waiting_behind_a_writer_are_granted_together_and_a_writer_after_them_waits() {
    let m = LockManager::new();
    setlk(&m, 1, F_SETLK, F_WRLCK, 0, 0).unwrap();
    let readers: Vec<_> = (0..5).map(|i| parked(&m, 10 + i, F_RDLCK, 0, 0)).collect();
    let (writer, writer_told) = parked(&m, 20, F_WRLCK, 0, 0);
    assert_eq!(LF.blocked(&m), 6);
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(told(&readers), [1; 5]);
    assert_eq!(
        writer_told.load(Ordering::SeqCst),
        0,
        "the writer conflicts with the woken readers"
    );
    for (p, _) in readers {
        assert!(poll(&m, p).is_none(), "granted");
    }
    assert_eq!(writer_told.load(Ordering::SeqCst), 0, "the readers hold it");
    let writer = poll(&m, writer).expect("the writer still waits");
    for pid in 10..15 {
        setlk(&m, pid, F_SETLK, F_UNLCK, 0, 0).unwrap();
    }
    assert_eq!(writer_told.load(Ordering::SeqCst), 1);
    assert!(poll(&m, writer).is_none(), "granted");
}

#[test]
fn a_woken_waiter_retries_so_a_running_unlocker_can_take_the_lock_back_first() {
    // Linux wakes a waiter to retry rather than handing it the lock: the unlocker, still
    // running, usually relocks before the waiter has been scheduled. (Handing the lock over
    // would cost a context switch per lock on a contended range.) The waiter must still get
    // the lock once it is really free.
    //
    // Each round gives the unlocker one try against a fresh sleeper: a hand-off would make
    // every try fail (the sleeper owns the lock when the unlock returns); with retries the
    // unlocker wins unless the scheduler runs the sleeper first, which on a loaded machine
    // happens in some rounds, not in all.
    let m = Arc::new(LockManager::new());
    let woken = Arc::new(AtomicUsize::new(0));
    let mut relocked = 0;
    for round in 0..20 {
        let sleeper = 2 + round;
        setlk(&m, 1, F_SETLK, F_WRLCK, 0, 0).unwrap();
        let w = spawn_waiter(&m, &woken, sleeper, F_WRLCK, 0, 0);
        wait_blocked(&m, 1);
        setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
        if setlk(&m, 1, F_SETLK, F_WRLCK, 0, 0).is_ok() {
            relocked += 1;
            setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
        }
        assert_eq!(
            w.join().unwrap(),
            Ok(()),
            "the sleeper gets the lock once free"
        );
        assert_eq!(
            setlk(&m, 1, F_SETLK, F_WRLCK, 0, 0),
            Err(Errno::EAGAIN),
            "the sleeper holds the lock now"
        );
        setlk(&m, sleeper, F_SETLK, F_UNLCK, 0, 0).unwrap();
    }
    assert!(
        relocked > 0,
        "the unlocker never got the lock back in 20 rounds"
    );
}

#[test]
fn an_interrupted_or_timed_out_wait_gives_eintr_and_leaves_no_request() {
    let m = Arc::new(LockManager::new());
    setlk(&m, 1, F_SETLK, F_WRLCK, 0, 0).unwrap();
    let irq = Interrupt::new();
    let (m2, irq2) = (m.clone(), irq.clone());
    let t = thread::spawn(move || {
        let ctx = WaitCtx::FOREVER.interruptible(&irq2);
        m2.flock(&Cred::root(2), Some(&fd(2)), LOCK_EX, &ctx)?;
        m2.fcntl(
            &Cred::root(2),
            Some(&fd(2)),
            F_SETLKW,
            &mut Flock::new(F_RDLCK, 5, 1),
            &ctx,
        )
    });
    wait_blocked(&m, 1);
    irq.raise();
    assert_eq!(t.join().unwrap(), Err(Errno::EINTR));
    assert_eq!(
        m.list_file(FILE).len(),
        2,
        "the holder's lock and the flock lock; no request"
    );
    let ctx = WaitCtx::timeout(Duration::from_millis(20));
    let r = m.fcntl(
        &Cred::root(3),
        Some(&fd(3)),
        F_OFD_SETLKW,
        &mut Flock::new(F_WRLCK, 0, 1),
        &ctx,
    );
    assert_eq!(r, Err(Errno::EINTR));
    setlk(&m, 1, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(m.list_file(FILE).len(), 1);
}

#[test]
fn a_two_process_cycle_gets_edeadlk_for_the_request_that_closes_it() {
    let m = Arc::new(LockManager::new());
    setlk(&m, 1, F_SETLK, F_WRLCK, 0, 1).unwrap();
    setlk(&m, 2, F_SETLK, F_WRLCK, 1, 1).unwrap();
    let m2 = m.clone();
    let t = thread::spawn(move || setlk(&m2, 1, F_SETLKW, F_WRLCK, 1, 1));
    wait_blocked(&m, 1);
    assert_eq!(setlk(&m, 2, F_SETLKW, F_WRLCK, 0, 1), Err(Errno::EDEADLK));
    setlk(&m, 2, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(
        t.join().unwrap(),
        Ok(()),
        "the first request was not disturbed"
    );
}

type Waiters = Vec<thread::JoinHandle<Result<(), Errno>>>;

/// Owners 1..=n each hold byte k and wait for byte k+1; owner n then asks for byte 1.
fn cycle(m: &Arc<LockManager>, n: i32, ofd: bool) -> (Result<(), Errno>, Waiters) {
    let (set, setw) = if ofd {
        (F_OFD_SETLK, F_OFD_SETLKW)
    } else {
        (F_SETLK, F_SETLKW)
    };
    for k in 1..=n {
        setlk(m, k, set, F_WRLCK, k as i64, 1).unwrap();
    }
    let mut threads = Vec::new();
    for k in 1..n {
        let m2 = m.clone();
        threads.push(thread::spawn(move || {
            setlk(&m2, k, setw, F_WRLCK, k as i64 + 1, 1)
        }));
        wait_blocked(m, k as usize);
    }
    let irq = Interrupt::new();
    let (m2, irq2) = (m.clone(), irq.clone());
    let last = thread::spawn(move || {
        let ctx = WaitCtx::FOREVER.interruptible(&irq2);
        m2.fcntl(
            &Cred::root(n),
            Some(&fd(n as u64)),
            setw,
            &mut Flock::new(F_WRLCK, 1, 1),
            &ctx,
        )
    });
    thread::sleep(Duration::from_millis(50));
    irq.raise();
    (last.join().unwrap(), threads)
}

fn release_all(m: &LockManager, n: i32, threads: Waiters) {
    for k in 1..=n {
        m.close(Tgid::new(k), FILE, OfdId(k as u64), true);
    }
    for t in threads {
        assert_eq!(t.join().unwrap(), Ok(()));
    }
}

#[test]
fn linux_mode_detects_cycles_up_to_12_processes_and_misses_13() {
    for (n, want) in [
        (3, Err(Errno::EDEADLK)),
        (12, Err(Errno::EDEADLK)),
        (13, Err(Errno::EINTR)),
    ] {
        let m = Arc::new(LockManager::new());
        let (r, threads) = cycle(&m, n, false);
        assert_eq!(r, want, "cycle of {n}");
        release_all(&m, n, threads);
    }
}

#[test]
fn full_mode_detects_long_cycles_and_ofd_cycles_that_linux_lets_hang() {
    let full = || {
        Arc::new(LockManager::with_config(LockConfig {
            deadlock: DeadlockMode::Full,
            ..LockConfig::default()
        }))
    };
    let m = full();
    let (r, threads) = cycle(&m, 20, false);
    assert_eq!(r, Err(Errno::EDEADLK));
    release_all(&m, 20, threads);
    let m = full();
    let (r, threads) = cycle(&m, 2, true);
    assert_eq!(r, Err(Errno::EDEADLK));
    release_all(&m, 2, threads);
    let m = Arc::new(LockManager::new());
    let (r, threads) = cycle(&m, 2, true);
    assert_eq!(r, Err(Errno::EINTR), "Linux never reports OFD deadlocks");
    release_all(&m, 2, threads);
}

#[test]
fn blocked_requests_show_in_proc_locks_under_their_blocker() {
    let m = Arc::new(LockManager::new());
    setlk(&m, 100, F_SETLK, F_WRLCK, 0, 10).unwrap();
    let m2 = m.clone();
    let t = thread::spawn(move || setlk(&m2, 101, F_SETLKW, F_WRLCK, 0, 5));
    wait_blocked(&m, 1);
    assert_eq!(
        m.proc_locks(),
        "1: POSIX  ADVISORY  WRITE 100 00:03:9 0 9\n1: -> POSIX  ADVISORY  WRITE 101 00:03:9 0 4\n"
    );
    setlk(&m, 100, F_SETLK, F_UNLCK, 0, 0).unwrap();
    t.join().unwrap().unwrap();
}

#[test]
fn a_waiter_conflicting_with_an_earlier_waiter_is_listed_under_it_as_linux_nests_them() {
    let m = Arc::new(LockManager::new());
    let woken = Arc::new(AtomicUsize::new(0));
    setlk(&m, 100, F_SETLK, F_WRLCK, 0, 10).unwrap();
    let w1 = spawn_waiter(&m, &woken, 101, F_WRLCK, 0, 5);
    wait_blocked(&m, 1);
    let w2 = spawn_waiter(&m, &woken, 102, F_WRLCK, 2, 2);
    wait_blocked(&m, 2);
    let w3 = spawn_waiter(&m, &woken, 103, F_RDLCK, 5, 5);
    wait_blocked(&m, 3);
    assert_eq!(
        m.proc_locks(),
        "1: POSIX  ADVISORY  WRITE 100 00:03:9 0 9\n\
         1: -> POSIX  ADVISORY  WRITE 101 00:03:9 0 4\n\
         1:  -> POSIX  ADVISORY  WRITE 102 00:03:9 2 3\n\
         1: -> POSIX  ADVISORY  READ 103 00:03:9 5 9\n"
    );
    // The unlock grants 101 and 103; 102 now waits behind 101's lock.
    setlk(&m, 100, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(w1.join().unwrap(), Ok(()));
    assert_eq!(w3.join().unwrap(), Ok(()));
    wait_blocked(&m, 1);
    setlk(&m, 101, F_SETLK, F_UNLCK, 0, 0).unwrap();
    assert_eq!(w2.join().unwrap(), Ok(()));
}

#[test]
fn a_posix_request_closing_a_cycle_through_an_ofd_waiter_behind_a_posix_lock_gets_edeadlk() {
    // Linux records every waiter whose parent in the tree is a POSIX lock, whatever its own
    // kind: description 1 (OFD) holds byte 0 and waits for byte 1 behind process 2's POSIX
    // lock; process 2 waits for byte 2 behind process 3; process 3 asking for byte 0 (held by
    // the description) closes the cycle.
    let m = Arc::new(LockManager::new());
    let ofd1 = |cmd: i32, ty: i16, start: i64| {
        m.fcntl(
            &Cred::root(1),
            Some(&fd(1)),
            cmd,
            &mut Flock::new(ty, start, 1),
            &WaitCtx::FOREVER,
        )
    };
    ofd1(F_OFD_SETLK, F_WRLCK, 0).unwrap();
    setlk(&m, 2, F_SETLK, F_WRLCK, 1, 1).unwrap();
    setlk(&m, 3, F_SETLK, F_WRLCK, 2, 1).unwrap();
    let m2 = m.clone();
    let a = thread::spawn(move || {
        m2.fcntl(
            &Cred::root(1),
            Some(&fd(1)),
            F_OFD_SETLKW,
            &mut Flock::new(F_WRLCK, 1, 1),
            &WaitCtx::FOREVER,
        )
    });
    wait_blocked(&m, 1);
    let m2 = m.clone();
    let b = thread::spawn(move || setlk(&m2, 2, F_SETLKW, F_WRLCK, 2, 1));
    wait_blocked(&m, 2);
    let closing = m.fcntl(
        &Cred::root(3),
        Some(&fd(3)),
        F_SETLKW,
        &mut Flock::new(F_WRLCK, 0, 1),
        &WaitCtx::timeout(Duration::from_secs(2)),
    );
    assert_eq!(
        closing,
        Err(Errno::EDEADLK),
        "EINTR would mean the cycle went unseen"
    );
    m.close(Tgid::new(3), FILE, OfdId(3), true);
    assert_eq!(b.join().unwrap(), Ok(()));
    m.close(Tgid::new(2), FILE, OfdId(2), true);
    assert_eq!(a.join().unwrap(), Ok(()));
}
