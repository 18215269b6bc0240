//! Creates and looks up N keys in one namespace, as `uipc bench ipc-keys`'s "uipc" column
//! does (one process, root): for `perf stat -e instructions` and `perf record` of the engine's
//! `semget` alone. Usage: `keys_loop [KEYS [ROUNDS [create]]]` (31900 and 5 by default); prints
//! each round's create and lookup microseconds. With `create` the lookups are left out, so
//! that `valgrind --tool=cachegrind` counts the creates (and the namespace's setup and drop)
//! alone.

use std::time::Instant;

/// This thread's CPU time in microseconds (time preempted by other processes left out).
fn cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}
use uipc::ipc::IpcNamespace;
use uipc::Cred;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: i32 = args.next().map_or(31900, |a| a.parse().expect("KEYS"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));
    let lookups = args.next().as_deref() != Some("create");
    // What the `uipc` binary does for the bench (keep_freed_heap).
    // SAFETY: mallopt sets two of malloc's tunables; no other thread runs yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
    let cred = Cred::root(1000);
    for _ in 0..rounds {
        let ns = IpcNamespace::new();
        let (t0, c0) = (Instant::now(), cpu_us());
        for i in 0..n {
            ns.semget(&cred, 0x1000_0000 + i, 1, 0o1000 | 0o600)
                .expect("create");
        }
        let (create, create_cpu) = (t0.elapsed().as_secs_f64() * 1e6, cpu_us() - c0);
        let (t0, c0) = (Instant::now(), cpu_us());
        for i in (0..n).filter(|_| lookups) {
            ns.semget(&cred, 0x1000_0000 + i, 1, 0o1000 | 0o600)
                .expect("lookup");
        }
        let (lookup, lookup_cpu) = (t0.elapsed().as_secs_f64() * 1e6, cpu_us() - c0);
        print!("create {create:.0} µs (cpu {create_cpu:.0}), ");
        println!("lookup {lookup:.0} µs (cpu {lookup_cpu:.0})");
    }
}
