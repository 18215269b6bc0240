//! Many threads, many owners, one small file: no lock is ever granted in conflict, no waiter
//! is lost, and with full deadlock detection a hold-and-wait workload never hangs.
//!
//! Each thread is its own process (POSIX owner) or description (OFD/flock owner). After a lock
//! call returns success the thread marks the bytes it holds in a shadow map, and it unmarks them
//! before unlocking; the shadow map checks that no two marks ever conflict.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use uipc::locks::*;
use uipc::{Cred, Errno, WaitCtx};

const FILE: FileId = FileId { dev: 5, ino: 5 };
const BYTES: usize = 48;

/// Per byte: (readers, writer) currently marked.
struct Shadow(Mutex<Vec<(u32, bool)>>);

impl Shadow {
    fn mark(&self, ty: i16, s: usize, e: usize, who: &str) {
        let mut v = self.0.lock().unwrap();
        for b in &mut v[s..=e] {
            if ty == F_WRLCK {
                assert!(
                    b.0 == 0 && !b.1,
                    "{who}: write lock granted over a held byte {s}..={e}"
                );
                b.1 = true;
            } else {
                assert!(
                    !b.1,
                    "{who}: read lock granted over a write-held byte {s}..={e}"
                );
                b.0 += 1;
            }
        }
    }

    fn unmark(&self, ty: i16, s: usize, e: usize) {
        let mut v = self.0.lock().unwrap();
        for b in &mut v[s..=e] {
            if ty == F_WRLCK {
                b.1 = false;
            } else {
                b.0 -= 1;
            }
        }
    }
}

fn fd(ofd: u64) -> OpenFile {
    common::rw_open(FILE, ofd, BYTES as i64)
}

/// Runs `threads` workers for `rounds` each, every worker holding up to `hold` ranges at once
/// (more than one is hold-and-wait: deadlocks happen and must be reported).
fn run(config: LockConfig, threads: u64, rounds: usize, hold: usize) -> usize {
    let m = Arc::new(LockManager::with_config(config));
    let shadow = Arc::new(Shadow(Mutex::new(vec![(0, false); BYTES])));
    let deadlocks = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for t in 0..threads {
        let (m, shadow, deadlocks, done) =
            (m.clone(), shadow.clone(), deadlocks.clone(), done.clone());
        handles.push(thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(0x9e37_79b9 ^ ((t + 1) * 0x1234_5677));
            let ofd = t % 3 == 1;
            let (cmd, owner_pid) = if ofd {
                (F_OFD_SETLKW, 1000)
            } else {
                (F_SETLKW, 100 + t as i32)
            };
            let me = Cred::root(owner_pid);
            let f = fd(t + 1);
            let who = format!("thread {t}");
            for _ in 0..rounds {
                let mut held: Vec<(i16, usize, usize)> = Vec::new();
                for _ in 0..hold {
                    let s = rng.u64(..BYTES as u64) as usize;
                    let e = (s + rng.u64(..8) as usize).min(BYTES - 1);
                    if held.iter().any(|&(_, hs, he)| s <= he && hs <= e) {
                        continue; // keep our own ranges apart so the shadow stays simple
                    }
                    let ty = if rng.u64(..3) == 0 { F_WRLCK } else { F_RDLCK };
                    let mut fl = Flock::new(ty, s as i64, (e - s + 1) as i64);
                    match m.fcntl(&me, Some(&f), cmd, &mut fl, &WaitCtx::FOREVER) {
                        Ok(()) => {
                            shadow.mark(ty, s, e, &who);
                            held.push((ty, s, e));
                        }
                        Err(Errno::EDEADLK) => {
                            deadlocks.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(e) => panic!("{who}: {e}"),
                    }
                }
                if rng.u64(..2) == 0 {
                    thread::yield_now();
                }
                for (ty, s, e) in held.drain(..) {
                    shadow.unmark(ty, s, e);
                    let cmd = if ofd { F_OFD_SETLK } else { F_SETLK };
                    let mut fl = Flock::new(F_UNLCK, s as i64, (e - s + 1) as i64);
                    m.fcntl(&me, Some(&f), cmd, &mut fl, &WaitCtx::FOREVER)
                        .unwrap();
                }
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let t0 = Instant::now();
    while done.load(Ordering::SeqCst) < threads as usize {
        // A worker that panicked (a conflicting grant) ends the test at once with its message.
        if let Some(i) = handles.iter().position(|h| h.is_finished()) {
            if let Err(e) = handles.swap_remove(i).join() {
                std::panic::resume_unwind(e);
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "workers hung (a lost wake-up or an undetected deadlock):\n{}",
            m.proc_locks()
        );
        thread::sleep(Duration::from_millis(10));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        m.list_file(FILE).is_empty(),
        "locks left behind:\n{}",
        m.proc_locks()
    );
    deadlocks.load(Ordering::Relaxed)
}

#[test]
fn sixteen_owners_never_get_conflicting_locks_and_every_waiter_is_woken() {
    run(LockConfig::default(), 16, 400, 1);
}

#[test]
fn hold_and_wait_with_full_detection_reports_deadlocks_and_never_hangs() {
    let full = LockConfig {
        deadlock: DeadlockMode::Full,
        ..LockConfig::default()
    };
    let deadlocks = run(full, 12, 300, 3);
    assert!(deadlocks > 0, "the workload is meant to produce deadlocks");
}

#[test]
fn flock_owners_exclude_each_other_under_contention() {
    let m = Arc::new(LockManager::new());
    let inside = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let (m, inside) = (m.clone(), inside.clone());
            thread::spawn(move || {
                let me = Cred::root(t as i32 + 1);
                for i in 0..300 {
                    let ex = (t + i) % 4 == 0;
                    m.flock(
                        &me,
                        Some(&fd(t + 1)),
                        if ex { LOCK_EX } else { LOCK_SH },
                        &WaitCtx::FOREVER,
                    )
                    .unwrap();
                    let n = if ex {
                        inside.fetch_add(1000, Ordering::SeqCst)
                    } else {
                        inside.fetch_add(1, Ordering::SeqCst)
                    };
                    assert!(
                        if ex { n == 0 } else { n < 1000 },
                        "flock exclusion broken: {n}"
                    );
                    inside.fetch_sub(if ex { 1000 } else { 1 }, Ordering::SeqCst);
                    m.flock(&me, Some(&fd(t + 1)), LOCK_UN, &WaitCtx::FOREVER)
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(m.list().is_empty());
}
