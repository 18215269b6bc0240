//! Many threads in many simulated processes creating, reading and deleting timers at once.
//! Bounded in iterations; checks that ids never collide within a process, every lookup of a
//! live timer succeeds, every lookup of a deleted one fails, and the accounting balances.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use uipc::timers::*;
use uipc::{Cred, Errno, ManualClock};

const PROCESSES: i32 = 6;
const THREADS_PER_PROCESS: i32 = 3;
const ROUNDS: usize = 300;

#[test]
fn concurrent_create_getoverrun_delete_across_processes_stays_consistent() {
    let clock = Arc::new(ManualClock::new(1000));
    let t = Arc::new(Timers::with_config(
        clock.clone(),
        Arc::new(NoNotifier),
        TimersConfig {
            buckets: Some(64), // small table: many chains shared between processes
            ..TimersConfig::default()
        },
    ));
    let barrier = Arc::new(Barrier::new((PROCESSES * THREADS_PER_PROCESS) as usize));
    let mut handles = Vec::new();
    for p in 0..PROCESSES {
        for th in 0..THREADS_PER_PROCESS {
            let (t, barrier) = (t.clone(), barrier.clone());
            handles.push(std::thread::spawn(move || {
                let pid = 1000 + p;
                let cred = Cred::root(pid).in_thread(pid + 100 * (th + 1));
                barrier.wait();
                let mut mine = Vec::new();
                let mut seen = HashSet::new();
                for round in 0..ROUNDS {
                    let id = common::new_timer(&t, &cred, CLOCK_MONOTONIC, SigEvent::NONE);
                    assert!(seen.insert(id), "id {id:?} handed out twice to one thread");
                    mine.push(id);
                    for &live in &mine {
                        assert_eq!(t.timer_getoverrun(&cred, live), Ok(0));
                    }
                    if round % 3 != 0 {
                        let victim = mine.swap_remove(round % mine.len());
                        t.timer_delete(&cred, victim).unwrap();
                        assert_eq!(t.timer_gettime(&cred, victim), Err(Errno::EINVAL));
                    }
                }
                (pid, mine)
            }));
        }
    }
    let mut per_process: Vec<HashSet<TimerId>> = vec![HashSet::new(); PROCESSES as usize];
    let mut live = 0;
    for h in handles {
        let (pid, ids) = h.join().unwrap();
        for id in ids {
            assert!(per_process[(pid - 1000) as usize].insert(id), "shared id");
            live += 1;
        }
    }
    assert_eq!(t.sigpending(0), live);
    assert_eq!(t.table().chain_stats().1 as u64, live);
    for p in 0..PROCESSES {
        t.exit_process(1000 + p);
    }
    assert_eq!(t.sigpending(0), 0);
    assert_eq!(t.table().chain_stats().1, 0);
}

#[test]
fn concurrent_delete_of_one_timer_succeeds_exactly_once() {
    let t = Arc::new(Timers::new(
        Arc::new(ManualClock::new(1000)),
        Arc::new(NoNotifier),
    ));
    let cred = Cred::root(7);
    for _ in 0..200 {
        let id = common::new_timer(&t, &cred, CLOCK_REALTIME, SigEvent::NONE);
        let racers: Vec<_> = (0..3)
            .map(|_| {
                let (t, cred) = (t.clone(), cred.clone());
                std::thread::spawn(move || t.timer_delete(&cred, id).is_ok())
            })
            .collect();
        let wins = racers.into_iter().map(|h| h.join().unwrap());
        assert_eq!(wins.filter(|&w| w).count(), 1);
    }
    assert_eq!(t.sigpending(0), 0);
}

#[test]
fn exit_racing_creates_leaves_no_timer_and_no_unit_behind() {
    let t = Arc::new(Timers::new(
        Arc::new(ManualClock::new(1000)),
        Arc::new(NoNotifier),
    ));
    let pid = 4242;
    let creators: Vec<_> = (0..3)
        .map(|n| {
            let t = t.clone();
            std::thread::spawn(move || {
                let cred = Cred::root(pid).in_thread(pid + n);
                let mut ok = 0;
                for _ in 0..400 {
                    let r = t.timer_create(
                        &cred,
                        CLOCK_MONOTONIC,
                        UserPtr::Valid(SigEvent::NONE),
                        UserPtr::Valid(0),
                    );
                    match r {
                        Ok(id) => {
                            ok += 1;
                            // Either still ours or already gone with an exit: never an error
                            // other than EINVAL.
                            let g = t.timer_gettime(&cred, id);
                            assert!(g.is_ok() || g == Err(Errno::EINVAL));
                        }
                        Err(e) => assert_eq!(e, Errno::EAGAIN, "only a racing exit fails"),
                    }
                }
                ok
            })
        })
        .collect();
    let exiter = {
        let t = t.clone();
        std::thread::spawn(move || {
            for _ in 0..200 {
                t.exit_process(pid);
                std::thread::yield_now();
            }
        })
    };
    let created: u32 = creators.into_iter().map(|h| h.join().unwrap()).sum();
    exiter.join().unwrap();
    assert!(created > 0);
    t.exit_process(pid);
    assert_eq!(t.sigpending(0), 0, "every unit came back");
    assert_eq!(t.table().chain_stats().1, 0, "no slot left behind");
}

/// `timer_getoverrun` reads its answer without the timer's own lock. Readers racing the
/// deliveries that move a periodic timer's overrun, then its delete, must see only overruns
/// that a delivery moved (growing, as the deliveries' are), then EINVAL for good.
#[test]
fn getoverrun_racing_deliveries_and_delete_sees_delivered_overruns_then_einval() {
    const MS: i64 = 1_000_000;
    let clock = Arc::new(ManualClock::new(1000));
    let queued = Arc::new(common::Recorder::default());
    let t = Arc::new(Timers::new(clock.clone(), queued.clone()));
    let cred = Cred::root(77);
    let id = common::monotonic_timer(&t, &cred);
    let spec = ItimerSpec::from_nanos(MS, MS);
    t.timer_settime(&cred, id, 0, UserPtr::Valid(spec)).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (t, cred, stop) = (t.clone(), cred.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = vec![0];
                loop {
                    // Read before the call: once the delete has returned, no call may find it.
                    let deleted = stop.load(std::sync::atomic::Ordering::Acquire);
                    match t.timer_getoverrun(&cred, id) {
                        Ok(v) => {
                            assert!(
                                !deleted,
                                "the timer was deleted, yet getoverrun still finds it"
                            );
                            assert!(
                                v >= *seen.last().unwrap(),
                                "overrun went back: {seen:?} then {v}"
                            );
                            if v != *seen.last().unwrap() {
                                seen.push(v);
                            }
                        }
                        Err(e) => {
                            assert_eq!(e, Errno::EINVAL);
                            break;
                        }
                    }
                }
                for _ in 0..1000 {
                    assert_eq!(t.timer_getoverrun(&cred, id), Err(Errno::EINVAL));
                }
                seen
            })
        })
        .collect();
    let mut delivered = Vec::new();
    for round in 1..=300 {
        // Let `round` whole periods pass with the signal pending: the delivery moves them.
        clock.advance(round * MS);
        t.run_expired();
        let signals = queued.take();
        for s in signals {
            if let Some(info) = t.dequeue_signal(&s) {
                delivered.push(info.overrun);
                assert_eq!(t.timer_getoverrun(&cred, id), Ok(info.overrun));
            }
        }
    }
    t.timer_delete(&cred, id).unwrap();
    assert_eq!(t.timer_getoverrun(&cred, id), Err(Errno::EINVAL));
    // A reader that still finds the timer after seeing this flag fails.
    stop.store(true, std::sync::atomic::Ordering::Release);
    assert!(delivered.windows(2).all(|w| w[0] < w[1]), "{delivered:?}");
    assert!(
        delivered.len() > 100,
        "deliveries moved the overrun: {delivered:?}"
    );
    for r in readers {
        for v in r.join().unwrap() {
            // 0 is also what a timer reads before its first delivery.
            assert!(
                v == 0 || delivered.contains(&v),
                "{v} was never delivered: {delivered:?}"
            );
        }
    }
}
