//! Runs lockperf's own-file or one-file tests on the engine alone, as `uipc bench lockperf`'s
//! "uipc" column does (threads, each its own process and description): for `perf record`.
//! Usage: `locks_loop flock|posix own|one [TASKS [ITERATIONS]]`; prints the wall time from the first task's start to the last
//! one's end.

use std::sync::Barrier;
use std::time::Instant;
use uipc::locks::{
    FileId, Flock, LockManager, OfdId, OpenFile, F_SETLK, F_SETLKW, F_UNLCK, F_WRLCK, LOCK_EX,
    LOCK_UN,
};
use uipc::{Cred, WaitCtx};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flock = args.first().map(String::as_str) == Some("flock");
    let own = args.get(1).map(String::as_str) != Some("one");
    let tasks: usize = args.get(2).map_or(128, |a| a.parse().expect("TASKS"));
    let iterations: usize = args
        .get(3)
        .map_or(20_000, |a| a.parse().expect("ITERATIONS"));
    let manager = LockManager::new();
    let start = Barrier::new(tasks);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..tasks)
            .map(|i| {
                let (manager, start) = (&manager, &start);
                s.spawn(move || {
                    let cred = Cred::root(1000 + i as i32);
                    let fd = OpenFile {
                        file: FileId {
                            dev: 0x2a,
                            ino: if own { 1 + i as u64 } else { 1 },
                        },
                        ofd: OfdId(1 + i as u64),
                        readable: true,
                        writable: true,
                        offset: 0,
                        size: 0,
                    };
                    let wait = WaitCtx::FOREVER;
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..iterations {
                        if flock {
                            manager
                                .flock(&cred, Some(&fd), LOCK_EX, &wait)
                                .expect("lock");
                            manager
                                .flock(&cred, Some(&fd), LOCK_UN, &wait)
                                .expect("unlock");
                        } else {
                            let mut l = Flock::new(F_WRLCK, 0, 0);
                            manager
                                .fcntl(&cred, Some(&fd), F_SETLKW, &mut l, &wait)
                                .expect("lock");
                            let mut u = Flock::new(F_UNLCK, 0, 0);
                            manager
                                .fcntl(&cred, Some(&fd), F_SETLK, &mut u, &wait)
                                .expect("unlock");
                        }
                    }
                    (t0, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("task"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("a task");
    let last = spans.iter().map(|s| s.1).max().expect("a task");
    println!("{} µs", (last - first).as_micros());
}
