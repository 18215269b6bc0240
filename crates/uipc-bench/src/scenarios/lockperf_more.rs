//! Two more lockperf tables for the one-file tests (posix01, flock01):
//!
//! - "beside two CPU-bound processes": the same runs as the main tables (uipc, before, kernel,
//!   wall time) while two forked children spin on the CPU, to see whether a column's time
//!   grows with load more than the kernel's does (a design that sleeps and wakes per lock
//!   pays for every wake-up with a scheduler that now has other work).
//! - "through the daemon": 128 processes on one file (posix01, flock01) as the kernel column
//!   runs them, but each a process under `uipc run --locks`, so every lock call goes through
//!   the preload library to the daemon, and a contended F_SETLKW or flock parks there. The
//!   child program is the `uipc` binary's hidden `bench-child lockperf TEST TASKS ITERATIONS`
//!   (through `scenarios::shim::child`), run natively (the kernel column) and under `uipc run`
//!   in alternating rounds; it prints the wall time in microseconds.

use super::lockperf::{before_run, kernel_run, one_file_test, uipc_run, Sizes};
use crate::report::Table;
use crate::Bench;
use std::time::Duration;

const ONE_FILE: [&str; 2] = ["posix01", "flock01"];

/// Two children spinning on the CPU until dropped.
struct Spinners(Vec<libc::pid_t>);

impl Spinners {
    fn start() -> Spinners {
        let mut pids = Vec::new();
        for _ in 0..2 {
            // SAFETY: the child only spins (no allocation, no locks) until killed.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            if pid > 0 {
                pids.push(pid);
            }
        }
        // Let them get going.
        std::thread::sleep(Duration::from_millis(50));
        Spinners(pids)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill and waitpid on children of ours.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The wall-time table of posix01 and flock01 beside two spinning processes.
pub(crate) fn busy_table(b: &Bench, sizes: &Sizes) -> Table {
    let columns = ["uipc", "before", "kernel"];
    let mut t = Table::new(
        &format!(
            "wall time beside two CPU-bound processes ({} tasks, M = {} on one file)",
            sizes.tasks, sizes.same_file_iterations
        ),
        "test",
        "µs",
        &columns,
    );
    for name in ONE_FILE {
        let test = one_file_test(name);
        let mut cells: [Vec<f64>; 3] = Default::default();
        for _ in 0..b.opts.runs {
            let spin = Spinners::start();
            b.step(&format!("{name} beside two spinners: uipc"));
            if let Ok(v) = uipc_run(test, sizes) {
                cells[0].push(v.wall_micros);
            }
            b.step(&format!("{name} beside two spinners: before"));
            if let Ok(v) = before_run(test, sizes) {
                cells[1].push(v.wall_micros);
            }
            b.step(&format!("{name} beside two spinners: kernel"));
            if let Some(v) = kernel_run(test, sizes, &super::lockperf::host_dir()) {
                cells[2].push(v.wall_micros);
            }
            drop(spin);
        }
        for (col, v) in columns.iter().zip(&cells) {
            if v.len() == b.opts.runs {
                t.add(name, col, v);
            } else {
                t.absent.push(format!("{col}, {name}: a run failed"));
            }
        }
    }
    t
}

/// `uipc bench-child lockperf TEST TASKS ITERATIONS`: the kernel column's run of a one-file
/// test, printed as `wall<TAB>µs`; under `uipc run --locks` its locks are the daemon's.
pub fn child_main(args: &[String]) -> i32 {
    let (Some(test), Some(tasks), Some(iterations)) = (
        args.first().filter(|t| ONE_FILE.contains(&t.as_str())),
        args.get(1).and_then(|s| s.parse::<usize>().ok()),
        args.get(2).and_then(|s| s.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: uipc bench-child lockperf posix01|flock01 TASKS ITERATIONS");
        return 2;
    };
    let sizes = Sizes {
        tasks,
        same_file_iterations: iterations,
        own_file_iterations: iterations,
    };
    match kernel_run(one_file_test(test), &sizes, &super::lockperf::host_dir()) {
        Some(t) => {
            println!("wall\t{}", t.wall_micros);
            0
        }
        None => 1,
    }
}

/// The daemon table: posix01 and flock01 with `tasks` processes of `iterations` pairs each,
/// natively and under `uipc run --locks`.
pub(crate) fn daemon_table(b: &Bench, tasks: usize, iterations: usize) -> Table {
    let mut t = Table::new(
        &format!(
            "wall time through the daemon: {tasks} processes under `uipc run --locks` on one \
             file, M = {iterations}"
        ),
        "test",
        "µs",
        &["kernel", "uipc"],
    )
    .uipc_over_kernel();
    for name in ONE_FILE {
        let mut cells: [Vec<f64>; 2] = Default::default();
        for _ in 0..b.opts.runs {
            for (i, under) in [false, true].into_iter().enumerate() {
                b.step(&format!(
                    "{name} through the daemon: {}",
                    ["kernel", "uipc"][i]
                ));
                let args = [
                    "lockperf".to_string(),
                    name.to_string(),
                    tasks.to_string(),
                    iterations.to_string(),
                ];
                match super::shim::child(under, &args) {
                    Ok(rows) => {
                        if let Some((_, Some(v))) = rows.iter().find(|(n, _)| n == "wall") {
                            cells[i].push(*v);
                        }
                    }
                    Err(e) => t.absent.push(format!("{name}: {e}")),
                }
            }
        }
        for (col, v) in ["kernel", "uipc"].iter().zip(&cells) {
            if v.len() == b.opts.runs {
                t.add(name, col, v);
            }
        }
    }
    t
}
