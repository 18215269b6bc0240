//! Seed 001: Jeff Layton's lockperf tests, as the seed ran them for "locks: scalability
//! improvements for file locking" (Linux 3.11).
//!
//! - posix01: N tasks open the same file and each takes and drops a whole-file write lock
//!   (`fcntl(F_SETLKW)` then `F_UNLCK`) M1 times;
//! - posix02: the same, each task on its own file, M2 times;
//! - flock01 / flock02: the same with `flock(LOCK_EX)` then `flock(LOCK_UN)`.
//!
//! Each task times its own loop; the seed's "mean time" is the sum of those task times over the
//! N tasks (not the time the test took), so a task waiting for the lock counts while it waits.
//! The first table gives that sum, the second the wall time from the first task's start to the
//! last one's end, both in microseconds (the seed's sums were in seconds). N = 128, M1 = 10000
//! and M2 = 20000 as in the seed; `--quick` keeps N and runs M1 = 200, M2 = 400.
//!
//! Columns:
//! - "uipc": N threads on one `uipc::locks::LockManager`, each a process of its own to the
//!   engine (its own tgid) and with its own open file description, blocking with
//!   `WaitCtx::FOREVER`;
//! - "before": the same threads on [`GlobalLockTable`], the pre-3.11 design (one global lock,
//!   a linear blocked list for deadlock detection, wake-all on unlock);
//! - "kernel": N forked processes doing the real system calls on files in /dev/shm (tmpfs, as
//!   in the seed), each opening the file itself and reporting its time through a pipe.
//!
//! Two more tables ([`super::lockperf_more`]): posix01 and flock01 beside two CPU-bound
//! processes, and 128 processes on one file through the daemon (`uipc run --locks`) beside
//! the kernel.
//!
//! Threads stand for processes in the first two columns: what makes tasks distinct owners to a
//! lock manager is their identity (tgid, open file description), not their address space. On a
//! machine with fewer cores than tasks, every column also measures how the scheduler hands the
//! lock around, as the seed's 2-way machine did.

use crate::before::global_locks::{GlobalLockTable, F_UNLCK, F_WRLCK};
use crate::kernel::{self, HostLock, TaskTimes};
use crate::report::Table;
use crate::Bench;
use std::ffi::CString;
use std::sync::Barrier;
use std::time::Instant;
use uipc::locks::{
    FileId, Flock, LockManager, OfdId, OpenFile, F_SETLK, F_SETLKW, LOCK_EX, LOCK_UN,
};
use uipc::{Cred, Errno, WaitCtx};

/// One of the seed's four tests.
#[derive(Clone, Copy)]
pub(crate) struct LockTest {
    name: &'static str,
    lock: HostLock,
    /// All tasks on one file (the "01" tests) or each on its own ("02").
    same_file: bool,
}

const TESTS: [LockTest; 4] = [
    LockTest {
        name: "posix01",
        lock: HostLock::PosixWholeFile,
        same_file: true,
    },
    LockTest {
        name: "posix02",
        lock: HostLock::PosixWholeFile,
        same_file: false,
    },
    LockTest {
        name: "flock01",
        lock: HostLock::FlockExclusive,
        same_file: true,
    },
    LockTest {
        name: "flock02",
        lock: HostLock::FlockExclusive,
        same_file: false,
    },
];

/// The one-file test of that name (posix01 or flock01).
pub(crate) fn one_file_test(name: &str) -> &'static LockTest {
    TESTS
        .iter()
        .find(|t| t.name == name && t.same_file)
        .expect("a one-file test")
}

/// N, and M for the same-file and own-file tests.
pub(crate) struct Sizes {
    pub(crate) tasks: usize,
    pub(crate) same_file_iterations: usize,
    pub(crate) own_file_iterations: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                tasks: 128,
                same_file_iterations: 200,
                own_file_iterations: 400,
            }
        } else {
            Sizes {
                tasks: 128,
                same_file_iterations: 10_000,
                own_file_iterations: 20_000,
            }
        }
    }

    fn iterations(&self, test: &LockTest) -> usize {
        if test.same_file {
            self.same_file_iterations
        } else {
            self.own_file_iterations
        }
    }
}

/// Runs `task(i, start)` on `tasks` threads; each sets itself up, waits on `start`, and returns
/// when its loop started and ended. The wall time runs from the first start to the last end.
fn threaded<F>(tasks: usize, task: F) -> Result<TaskTimes, Errno>
where
    F: Fn(usize, &Barrier) -> Result<(Instant, Instant), Errno> + Sync,
{
    let start = Barrier::new(tasks);
    let epoch = Instant::now();
    let spans: Result<Vec<(u64, u64)>, Errno> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..tasks)
            .map(|i| {
                let (task, start) = (&task, &start);
                s.spawn(move || task(i, start))
            })
            .collect();
        let ns = |t: Instant| t.duration_since(epoch).as_nanos() as u64;
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("lockperf task")
                    .map(|(a, b)| (ns(a), ns(b)))
            })
            .collect()
    });
    Ok(TaskTimes::from_spans(&spans?))
}

/// One task on the engine: process `1000 + i` (its own tgid), description `i + 1`, file 1 for
/// all or `i + 1` for each.
fn uipc_task(
    manager: &LockManager,
    test: &LockTest,
    iterations: usize,
    i: usize,
    start: &Barrier,
) -> Result<(Instant, Instant), Errno> {
    let cred = Cred::root(1000 + i as i32);
    let ino = if test.same_file { 1 } else { 1 + i as u64 };
    let fd = OpenFile {
        file: FileId { dev: 0x2a, ino },
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
        match test.lock {
            HostLock::PosixWholeFile => {
                let mut lock = Flock::new(uipc::locks::F_WRLCK, 0, 0);
                manager.fcntl(&cred, Some(&fd), F_SETLKW, &mut lock, &wait)?;
                let mut unlock = Flock::new(uipc::locks::F_UNLCK, 0, 0);
                manager.fcntl(&cred, Some(&fd), F_SETLK, &mut unlock, &wait)?;
            }
            HostLock::FlockExclusive => {
                manager.flock(&cred, Some(&fd), LOCK_EX, &wait)?;
                manager.flock(&cred, Some(&fd), LOCK_UN, &wait)?;
            }
        }
    }
    Ok((t0, Instant::now()))
}

/// A task of a design on its table `on`: the `i`th task, released by `start`.
type Task<T> = fn(&T, &LockTest, usize, usize, &Barrier) -> Result<(Instant, Instant), Errno>;

/// `test` at `sizes` on one design: its table `on`, each task running `task`.
fn run_design<T: Sync>(
    on: T,
    task: Task<T>,
    test: &LockTest,
    sizes: &Sizes,
) -> Result<TaskTimes, Errno> {
    let iterations = sizes.iterations(test);
    threaded(sizes.tasks, |i, start| {
        task(&on, test, iterations, i, start)
    })
}

pub(crate) fn uipc_run(test: &LockTest, sizes: &Sizes) -> Result<TaskTimes, Errno> {
    run_design(LockManager::new(), uipc_task, test, sizes)
}

/// One task on the "before" design: pid `1000 + i`, open file description `i`.
fn before_task(
    table: &GlobalLockTable,
    test: &LockTest,
    iterations: usize,
    i: usize,
    start: &Barrier,
) -> Result<(Instant, Instant), Errno> {
    let file = if test.same_file { 1 } else { 1 + i as u64 };
    let pid = 1000 + i as i32;
    start.wait();
    let t0 = Instant::now();
    for _ in 0..iterations {
        match test.lock {
            HostLock::PosixWholeFile => {
                table.posix(file, pid, F_WRLCK, 0, i64::MAX, true)?;
                table.posix(file, pid, F_UNLCK, 0, i64::MAX, false)?;
            }
            HostLock::FlockExclusive => {
                table.flock(file, i as u64, libc::LOCK_EX)?;
                table.flock(file, i as u64, libc::LOCK_UN)?;
            }
        }
    }
    Ok((t0, Instant::now()))
}

pub(crate) fn before_run(test: &LockTest, sizes: &Sizes) -> Result<TaskTimes, Errno> {
    run_design(GlobalLockTable::new(), before_task, test, sizes)
}

/// Where the kernel column's files go: tmpfs as in the seed, else the temporary directory.
pub(crate) fn host_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.into()
    } else {
        std::env::temp_dir()
    }
}

/// One run of `test` on the host kernel, its files in `dir` (removed afterwards).
pub(crate) fn kernel_run(
    test: &LockTest,
    sizes: &Sizes,
    dir: &std::path::Path,
) -> Option<TaskTimes> {
    let files = if test.same_file { 1 } else { sizes.tasks };
    let names: Vec<std::path::PathBuf> = (0..files)
        .map(|i| dir.join(format!("uipc-lockperf-{}-{i}", std::process::id())))
        .collect();
    let paths: Vec<CString> = (0..sizes.tasks)
        .map(|i| {
            let name = &names[if test.same_file { 0 } else { i }];
            CString::new(name.as_os_str().as_encoded_bytes()).expect("no NUL in a temp path")
        })
        .collect();
    let times = kernel::lock_tasks_in_children(&paths, test.lock, sizes.iterations(test));
    for n in &names {
        let _ = std::fs::remove_file(n);
    }
    times
}

/// One run of one test (`posix01`, ..., `flock02`) in one column (`uipc`, `before`, `kernel`)
/// with `tasks` tasks of `iterations` lock+unlock pairs each; `None` for an unknown name or a
/// failed run. For profiling one cell (examples/lockperf_one.rs).
pub fn run_one(column: &str, test: &str, tasks: usize, iterations: usize) -> Option<TaskTimes> {
    let test = TESTS.iter().find(|t| t.name == test)?;
    let sizes = Sizes {
        tasks,
        same_file_iterations: iterations,
        own_file_iterations: iterations,
    };
    match column {
        "uipc" => uipc_run(test, &sizes).ok(),
        "before" => before_run(test, &sizes).ok(),
        "kernel" => kernel_run(test, &sizes, &host_dir()),
        _ => None,
    }
}

/// The cells of one implementation for one test: task-time sums and wall times, one per run.
#[derive(Default)]
struct Runs {
    task_sums: Vec<f64>,
    walls: Vec<f64>,
    failure: Option<String>,
}

impl Runs {
    fn record(&mut self, outcome: Result<TaskTimes, String>) {
        match outcome {
            Ok(t) => {
                self.task_sums.push(t.per_task_micros.iter().sum());
                self.walls.push(t.wall_micros);
            }
            Err(e) => self.failure = Some(e),
        }
    }

    fn add_to(&self, test: &str, column: &str, sums: &mut Table, walls: &mut Table) {
        match &self.failure {
            None => {
                sums.add(test, column, &self.task_sums);
                walls.add(test, column, &self.walls);
            }
            Some(why) => {
                for t in [sums, walls] {
                    if !t.params.iter().any(|p| p == test) {
                        t.params.push(test.into());
                    }
                    t.absent.push(format!("{column}, {test}: {why}"));
                }
            }
        }
    }
}

/// Runs the scenario.
pub fn run(b: &Bench) -> Vec<Table> {
    let sizes = Sizes::new(b.opts.quick);
    let columns = ["uipc", "before", "kernel"];
    // The main tables, the two one-file tests beside spinners (three columns) and through
    // the daemon (two).
    b.plan(
        "lockperf",
        ((TESTS.len() * columns.len() + 2 * 3 + 2 * 2) * b.opts.runs) as u64,
    );
    let n = sizes.tasks;
    let m = format!(
        "M = {} on one file, {} on own files",
        sizes.same_file_iterations, sizes.own_file_iterations
    );
    let mut sums = Table::new(
        &format!("task time: {n} tasks each lock+unlock M times, summed over tasks ({m})"),
        "test",
        "µs, sum of tasks",
        &columns,
    );
    let mut walls = Table::new(
        &format!("wall time of the same runs ({n} tasks, {m})"),
        "test",
        "µs",
        &columns,
    );
    for test in &TESTS {
        let mut uipc_runs = Runs::default();
        let mut before_runs = Runs::default();
        let mut kernel_runs = Runs::default();
        // Runs interleave the columns, so that a noisy moment of a shared machine spreads over
        // all of them instead of one.
        for _ in 0..b.opts.runs {
            b.step(&format!("{}: uipc", test.name));
            uipc_runs.record(uipc_run(test, &sizes).map_err(|e| format!("failed: {e:?}")));
            b.step(&format!("{}: before", test.name));
            before_runs.record(before_run(test, &sizes).map_err(|e| format!("failed: {e:?}")));
            b.step(&format!("{}: kernel", test.name));
            kernel_runs.record(
                kernel_run(test, &sizes, &host_dir())
                    .ok_or_else(|| "a fork, open or lock call failed on the host".to_string()),
            );
        }
        uipc_runs.add_to(test.name, "uipc", &mut sums, &mut walls);
        before_runs.add_to(test.name, "before", &mut sums, &mut walls);
        kernel_runs.add_to(test.name, "kernel", &mut sums, &mut walls);
    }
    let busy = super::lockperf_more::busy_table(b, &sizes);
    let daemon_iterations = if b.opts.quick { 5 } else { DAEMON_M };
    let daemon = super::lockperf_more::daemon_table(b, sizes.tasks, daemon_iterations);
    vec![sums, walls, busy, daemon]
}

/// M of the daemon table: every lock call is a round trip to the daemon, and every flock
/// call that conflicts has the daemon read all of `/proc` (its sweep of descriptions nobody
/// holds any more), milliseconds each.
const DAEMON_M: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Sizes = Sizes {
        tasks: 4,
        same_file_iterations: 50,
        own_file_iterations: 100,
    };

    #[test]
    fn every_column_reports_one_time_per_task_for_every_test() {
        for test in &TESTS {
            let uipc = uipc_run(test, &TINY).expect("engine");
            let before = before_run(test, &TINY).expect("before design");
            let kernel = kernel_run(test, &TINY, &host_dir()).expect("host kernel");
            for t in [uipc, before, kernel] {
                assert_eq!(t.per_task_micros.len(), TINY.tasks, "{}", test.name);
                assert!(t.per_task_micros.iter().all(|&us| us > 0.0));
                assert!(t.wall_micros > 0.0);
            }
        }
    }

    #[test]
    fn wall_time_runs_from_the_first_start_to_the_last_end() {
        let t = TaskTimes::from_spans(&[(5_000, 9_000), (1_000, 3_000), (2_000, 12_000)]);
        assert_eq!(t.per_task_micros, vec![4.0, 2.0, 10.0]);
        assert_eq!(t.wall_micros, 11.0);
    }

    #[test]
    fn kernel_column_fails_cleanly_when_a_task_cannot_open_its_file() {
        let paths = vec![CString::new("/nonexistent-dir/uipc-lockperf").unwrap(); 3];
        assert!(kernel::lock_tasks_in_children(&paths, HostLock::FlockExclusive, 10).is_none());
    }

    #[test]
    fn kernel_column_removes_its_files() {
        let dir = host_dir().join(format!("uipc-lockperf-test-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        for test in &TESTS {
            kernel_run(test, &TINY, &dir).expect("host kernel");
        }
        let left = std::fs::read_dir(&dir).unwrap().count();
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(left, 0);
    }
}
