//! Profiling aid: one lockperf cell alone, e.g. `lockperf_one uipc posix01 128 1000` (under
//! `perf stat -e context-switches` or `perf record`).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let column = arg(1, "uipc");
    let test = arg(2, "posix01");
    let tasks: usize = arg(3, "128").parse().expect("tasks: a number");
    let iterations: usize = arg(4, "1000").parse().expect("iterations: a number");
    match uipc_bench::scenarios::lockperf::run_one(&column, &test, tasks, iterations) {
        Some(t) => println!(
            "{column} {test} {tasks}x{iterations}: task time {:.0} µs summed, wall {:.0} µs",
            t.per_task_micros.iter().sum::<f64>(),
            t.wall_micros
        ),
        None => {
            eprintln!("usage: lockperf_one uipc|before|kernel posix01|posix02|flock01|flock02 TASKS ITERATIONS (or the run failed)");
            std::process::exit(2);
        }
    }
}
