//! Timing a single-threaded loop by the CPU time of the thread that runs it.
//!
//! On a shared machine with two cores, a loop timed by the wall clock also counts the time
//! the scheduler gave other processes: one run of a 4 ms loop measured 4 ms or 8 ms depending
//! on whether a compiler shared its core. The thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`,
//! user and system time, page faults included) counts only the loop's own work, so ratios
//! taken side by side stay put under load; on an idle machine both clocks agree. Only loops
//! that never sleep are timed this way (a sleeping thread's CPU clock stops): the `semget`
//! loops of ipc-keys (in process and in the kernel) and the no-op `semop` loops of
//! ipc-idcycle. Tests with many tasks (lockperf, timers, peers) keep the wall clock.
//!
//! Reading this clock is a system call (no vDSO path), about a microsecond here: the cost
//! of one start-and-read pair, the least of 64 tries, is subtracted from every measurement,
//! so the one-key rows are not mostly clock.

/// A started measurement of the calling thread's CPU time.
pub struct ThreadCpuTimer {
    start_ns: u64,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec for the kernel (or vDSO) to fill; the call is
    // async-signal-safe, so a forked child may make it too.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds a start and an immediate read cost (the least of 64 tries, measured once).
fn clock_overhead_ns() -> u64 {
    use std::sync::OnceLock;
    static OVERHEAD: OnceLock<u64> = OnceLock::new();
    *OVERHEAD.get_or_init(|| {
        (0..64)
            .map(|_| {
                let t = thread_cpu_ns();
                thread_cpu_ns().saturating_sub(t)
            })
            .min()
            .unwrap_or(0)
    })
}

impl ThreadCpuTimer {
    /// Starts measuring now.
    pub fn start() -> ThreadCpuTimer {
        clock_overhead_ns();
        ThreadCpuTimer {
            start_ns: thread_cpu_ns(),
        }
    }

    /// CPU nanoseconds the thread spent since `start`, less the clock's own cost.
    pub fn nanos(&self) -> u64 {
        thread_cpu_ns().saturating_sub(self.start_ns + clock_overhead_ns())
    }

    /// CPU microseconds the thread spent since `start`.
    pub fn micros(&self) -> f64 {
        self.nanos() as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_thread_spends_no_cpu_time_and_a_busy_one_does() {
        let t = ThreadCpuTimer::start();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(t.micros() < 20_000.0, "slept: {} µs of CPU", t.micros());
        let t = ThreadCpuTimer::start();
        let wall = std::time::Instant::now();
        let mut x = 1u64;
        while wall.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(3));
        }
        assert!(t.micros() > 1_000.0, "spun: {} µs of CPU", t.micros());
    }
}
