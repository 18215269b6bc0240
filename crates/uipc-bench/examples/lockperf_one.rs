//! One cell of `uipc bench lockperf`, for profiling and for counting what a lock costs:
//! `lockperf_one COLUMN TEST [TASKS] [ITERATIONS]` (COLUMN uipc, before or kernel; TEST
//! posix01, posix02, flock01 or flock02) prints the wall time, the summed task time, and the
//! context switches per lock+unlock pair of this process (all its threads; the kernel
//! column's tasks are children, counted through RUSAGE_CHILDREN).

fn rusage(who: i32) -> (i64, i64) {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let r = unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut r);
        r
    };
    (r.ru_nvcsw, r.ru_nivcsw)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: lockperf_one uipc|before|kernel TEST [TASKS] [ITERATIONS]");
        std::process::exit(2);
    }
    let tasks = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(128);
    let iterations = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let who = if args[1] == "kernel" {
        libc::RUSAGE_CHILDREN
    } else {
        libc::RUSAGE_SELF
    };
    let (v0, i0) = rusage(who);
    let Some(t) = uipc_bench::scenarios::lockperf::run_one(&args[1], &args[2], tasks, iterations)
    else {
        eprintln!("lockperf_one: unknown cell or failed run");
        std::process::exit(1);
    };
    let (v1, i1) = rusage(who);
    let pairs = (tasks * iterations) as f64;
    println!(
        "{} {}: wall {:.0} µs, task sum {:.0} µs, voluntary switches/pair {:.3}, \
         involuntary/pair {:.3}",
        args[1],
        args[2],
        t.wall_micros,
        t.per_task_micros.iter().sum::<f64>(),
        (v1 - v0) as f64 / pairs,
        (i1 - i0) as f64 / pairs
    );
}
