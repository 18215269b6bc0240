//! Many threads on one set: single-sop (per-semaphore lock) and multi-sop (global mode)
//! operations racing, with sleepers, timeouts and SEM_UNDO. Bounded in iterations.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut, Timespec};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, WaitCtx};

const NOWAIT: i16 = IPC_NOWAIT as i16;

/// Each thread's mix comes from its own seeded generator, so it is reproducible.
fn rng(seed: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed)
}

fn getall(ns: &IpcNamespace, id: i32) -> Vec<u16> {
    match ns
        .semctl(&Cred::root(1), id, 0, GETALL, SemctlArg::None)
        .unwrap()
    {
        SemctlOut::All(v) => v,
        other => panic!("{other:?}"),
    }
}

/// Semaphores used as counting locks (capacity 2): every thread takes then returns units, by
/// single-sop and multi-sop operations, some with SEM_UNDO. A holder count per semaphore
/// checks that no more than the capacity is ever granted; at the end, every value is back.
#[test]
fn counting_locks_conserve_values_under_mixed_ops_and_undo() {
    const NSEMS: u16 = 4;
    const CAP: i32 = 2;
    const THREADS: i32 = 8;
    const OPS: u32 = 2000;
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    let id = ns.semget(&root, IPC_PRIVATE, NSEMS as i32, 0o600).unwrap();
    let caps = vec![CAP as u16; NSEMS as usize];
    ns.semctl(&root, id, 0, SETALL, SemctlArg::Array(&caps))
        .unwrap();
    let holders: Arc<Vec<AtomicI32>> = Arc::new((0..NSEMS).map(|_| AtomicI32::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (ns, stop) = (ns.clone(), stop.clone());
        thread::spawn(move || {
            let mut checks = 0;
            while !stop.load(Ordering::Relaxed) {
                assert!(getall(&ns, id).iter().all(|&v| i32::from(v) <= CAP));
                checks += 1;
                thread::sleep(Duration::from_micros(200));
            }
            checks
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (ns, holders) = (ns.clone(), holders.clone());
            thread::spawn(move || {
                let me = Cred::root(1000 + t);
                let mut rng = rng(0x9e37_79b9 + t as u64 * 7919);
                let w = WaitCtx::FOREVER;
                for _ in 0..OPS {
                    let flg = if rng.u64(..3) == 0 { SEM_UNDO } else { 0 };
                    let a = rng.u64(..NSEMS as u64) as u16;
                    let b = (a + 1 + rng.u64(..NSEMS as u64 - 1) as u16) % NSEMS;
                    let set: Vec<u16> = if rng.u64(..2) == 0 {
                        vec![a]
                    } else {
                        vec![a, b]
                    };
                    let take: Vec<Sembuf> = set.iter().map(|&n| Sembuf::new(n, -1, flg)).collect();
                    ns.semop(&me, id, &take, &w).unwrap();
                    for &n in &set {
                        let h = holders[n as usize].fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(h <= CAP, "semaphore {n} granted {h} > {CAP}");
                    }
                    thread::yield_now();
                    for &n in &set {
                        holders[n as usize].fetch_sub(1, Ordering::SeqCst);
                    }
                    // Give back one by one (single-sop) or all at once (multi-sop).
                    if rng.u64(..2) == 0 {
                        for &n in &set {
                            ns.semop(&me, id, &[Sembuf::new(n, 1, flg)], &w).unwrap();
                        }
                    } else {
                        let give: Vec<Sembuf> =
                            set.iter().map(|&n| Sembuf::new(n, 1, flg)).collect();
                        ns.semop(&me, id, &give, &w).unwrap();
                    }
                }
                // Leave holding one unit under SEM_UNDO: exit must give it back.
                ns.semop(&me, id, &[Sembuf::new(t as u16 % NSEMS, -1, SEM_UNDO)], &w)
                    .unwrap();
                ns.process_exit(me.tgid.get());
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(monitor.join().unwrap() > 0);
    assert_eq!(getall(&ns, id), caps, "every unit came back");
    for n in 0..NSEMS as i32 {
        for cmd in [GETNCNT, GETZCNT] {
            let c = ns.semctl(&root, id, n, cmd, SemctlArg::None).unwrap();
            assert_eq!(c.ret(), 0, "no sleeper left behind");
        }
    }
}

/// Units move between semaphores: simple threads take one unit from a semaphore and later
/// put one on another with two single-sop calls; complex threads move units atomically with
/// multi-sop calls (some sleeping with a short timeout). A broken per-semaphore/global lock
/// hand-over loses or duplicates units, which the final sum shows.
#[test]
fn simple_and_complex_ops_racing_keep_the_total() {
    const NSEMS: u16 = 6;
    const START: u16 = 5;
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    let id = ns.semget(&root, IPC_PRIVATE, NSEMS as i32, 0o600).unwrap();
    let init = vec![START; NSEMS as usize];
    ns.semctl(&root, id, 0, SETALL, SemctlArg::Array(&init))
        .unwrap();
    let total = i64::from(START) * i64::from(NSEMS);
    let mut handles = Vec::new();
    for t in 0..6u64 {
        let ns = ns.clone();
        handles.push(thread::spawn(move || {
            let me = Cred::root(2000 + t as i32);
            let mut rng = rng(0x1234_5678 + t * 104_729);
            let short = Some(Timespec {
                tv_sec: 0,
                tv_nsec: 2_000_000,
            });
            let w = WaitCtx::FOREVER;
            let (mut moved, mut timeouts) = (0u32, 0u32);
            for _ in 0..1500 {
                let a = rng.u64(..NSEMS as u64) as u16;
                let b = (a + 1 + rng.u64(..NSEMS as u64 - 1) as u16) % NSEMS;
                if t % 2 == 0 {
                    // Simple: take (sleeping briefly at most), then give elsewhere.
                    match ns.semtimedop(&me, id, &[Sembuf::new(a, -1, 0)], short, &w) {
                        Ok(()) => {
                            ns.semop(&me, id, &[Sembuf::new(b, 1, 0)], &w).unwrap();
                            moved += 1;
                        }
                        Err(Errno::EAGAIN) => timeouts += 1,
                        Err(e) => panic!("{e:?}"),
                    }
                } else {
                    let k = 1 + rng.u64(..2) as i16;
                    let sops = [Sembuf::new(a, -k, 0), Sembuf::new(b, k, 0)];
                    let r = if rng.u64(..2) == 0 {
                        ns.semtimedop(&me, id, &sops, short, &w)
                    } else {
                        let nw = [Sembuf::new(a, -k, NOWAIT), Sembuf::new(b, k, 0)];
                        ns.semop(&me, id, &nw, &w)
                    };
                    match r {
                        Ok(()) => moved += 1,
                        Err(Errno::EAGAIN) => timeouts += 1,
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
            (moved, timeouts)
        }));
    }
    let mut moved = 0;
    for h in handles {
        moved += h.join().unwrap().0;
    }
    assert!(moved > 1000, "the race did real work ({moved} moves)");
    let sum: i64 = getall(&ns, id).iter().map(|&v| i64::from(v)).sum();
    assert_eq!(sum, total);
    for n in 0..NSEMS as i32 {
        let c = ns.semctl(&root, id, n, GETNCNT, SemctlArg::None).unwrap();
        assert_eq!(c.ret(), 0, "timed-out sleepers left the queues");
    }
}

/// Sleepers interrupted at random while wakers complete them: an operation reported as
/// interrupted applied nothing, one reported done applied once, so the units add up.
#[test]
fn interrupts_racing_completions_never_lose_or_duplicate_units() {
    use uipc::Interrupt;
    const THREADS: usize = 4;
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    let id = ns.semget(&root, IPC_PRIVATE, 1, 0o600).unwrap();
    let irqs: Arc<Vec<Interrupt>> = Arc::new((0..THREADS).map(|_| Interrupt::new()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (ns, irqs) = (ns.clone(), irqs.clone());
            thread::spawn(move || {
                let me = Cred::root(3000 + t as i32);
                let (mut taken, mut interrupted) = (0u32, 0u32);
                for _ in 0..400 {
                    let ctx = WaitCtx::FOREVER.interruptible(&irqs[t]);
                    match ns.semop(&me, id, &[Sembuf::new(0, -1, 0)], &ctx) {
                        Ok(()) => taken += 1,
                        Err(Errno::EINTR) => {
                            interrupted += 1;
                            irqs[t].clear();
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
                (taken, interrupted)
            })
        })
        .collect();
    let feeder = {
        let (ns, irqs, stop) = (ns.clone(), irqs.clone(), stop.clone());
        thread::spawn(move || {
            let mut rng = rng(42);
            let (me, up) = (Cred::root(9), [Sembuf::new(0, 1, 0)]);
            let mut given = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if rng.u64(..3) == 0 {
                    irqs[rng.u64(..THREADS as u64) as usize].raise();
                } else {
                    ns.semop(&me, id, &up, &WaitCtx::FOREVER).unwrap();
                    given += 1;
                }
                if rng.u64(..4) == 0 {
                    thread::yield_now();
                }
            }
            given
        })
    };
    let mut taken = 0;
    let mut interrupted = 0;
    for w in workers {
        let (t, i) = w.join().unwrap();
        taken += t;
        interrupted += i;
    }
    stop.store(true, Ordering::Relaxed);
    let given = feeder.join().unwrap();
    assert_eq!(taken + interrupted, THREADS as u32 * 400);
    let left = getall(&ns, id)[0] as u32;
    assert_eq!(
        given,
        taken + left,
        "every unit given was taken once or is still there"
    );
    let ncnt = ns.semctl(&root, id, 0, GETNCNT, SemctlArg::None).unwrap();
    assert_eq!(ncnt.ret(), 0);
}

/// RMID while single-sop and multi-sop operations run and sleep: every call ends, with
/// success before the removal and EIDRM/EINVAL after it.
#[test]
fn rmid_during_traffic_ends_every_call_with_eidrm_or_einval() {
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    let id = ns.semget(&root, IPC_PRIVATE, 3, 0o600).unwrap();
    let workers: Vec<_> = (0..6u64)
        .map(|t| {
            let ns = ns.clone();
            thread::spawn(move || {
                let me = Cred::root(4000 + t as i32);
                let mut rng = rng(7 + t * 31);
                loop {
                    let a = rng.u64(..3) as u16;
                    let sops = if t % 2 == 0 {
                        vec![Sembuf::new(a, -1, SEM_UNDO)]
                    } else {
                        vec![Sembuf::new(a, 1, 0), Sembuf::new((a + 1) % 3, -1, 0)]
                    };
                    match ns.semop(&me, id, &sops, &WaitCtx::FOREVER) {
                        Ok(()) => {
                            let give = [Sembuf::new(a, 1, 0)];
                            if let Err(e) = ns.semop(&me, id, &give, &WaitCtx::FOREVER) {
                                assert!(e == Errno::EIDRM || e == Errno::EINVAL, "{e:?}");
                                return e;
                            }
                        }
                        Err(e) => {
                            assert!(e == Errno::EIDRM || e == Errno::EINVAL, "{e:?}");
                            return e;
                        }
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(50));
    ns.semctl(&root, id, 0, IPC_RMID, SemctlArg::None).unwrap();
    for w in workers {
        w.join().unwrap();
    }
    for pid in 4000..4006 {
        ns.process_exit(pid);
        assert_eq!(ns.sem_undo_entries(pid), 0);
    }
    assert_eq!(
        ns.proc_sysvipc_sem().lines().count(),
        1,
        "only the header left"
    );
}

/// A set's undo list is made by its first SEM_UNDO operation (or by RMID): RMID racing with
/// the first registrations must still leave no process an entry for the removed set, before
/// any process exits (Linux's `freeary` unlinks them all).
#[test]
fn rmid_racing_first_undo_registrations_leaves_no_entry_behind() {
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    for round in 0..300 {
        let id = ns.semget(&root, IPC_PRIVATE, 2, 0o600).unwrap();
        let start = Arc::new(std::sync::Barrier::new(4));
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let (ns, start) = (ns.clone(), start.clone());
                thread::spawn(move || {
                    let me = Cred::root(5000 + t);
                    start.wait();
                    let up = [Sembuf::new(t as u16 % 2, 1, SEM_UNDO)];
                    match ns.semop(&me, id, &up, &WaitCtx::FOREVER) {
                        Ok(()) => {}
                        Err(e) => assert!(e == Errno::EIDRM || e == Errno::EINVAL, "{e:?}"),
                    }
                })
            })
            .collect();
        start.wait();
        if round % 3 != 0 {
            thread::yield_now();
        }
        ns.semctl(&root, id, 0, IPC_RMID, SemctlArg::None).unwrap();
        for w in workers {
            w.join().unwrap();
        }
        for pid in 5000..5003 {
            assert_eq!(ns.sem_undo_entries(pid), 0, "round {round}, pid {pid}");
        }
    }
}
