//! The daemon's bounded spin before its event loop blocks.
//!
//! A round trip through the daemon is two wake-ups: the daemon's when a request arrives, the
//! client's when the reply does. On a virtual machine whose other vCPUs are idle each one is
//! the wake-up of a halted vCPU, which costs tens of microseconds, several times the work of
//! the call itself (`uipc bench shim`'s shmat+shmdt, BENCHMARKS.md). So the daemon's event
//! loop first polls for a short while ([`DAEMON_SPIN_NS`]) and only then blocks: a daemon that
//! just served a request sees the next one without being woken.
//!
//! Each round of the spin is a `poll` with no timeout and then `sched_yield`, so a spinner
//! gives its CPU to any other runnable task at once: it only keeps a CPU that would otherwise
//! be idle from halting. The spin ends at the budget (CLOCK_MONOTONIC), at readiness, or when
//! `poll` fails (the blocking wait that follows reports the error).
//!
//! Clients do not spin. A client that spun for the reply to each call the daemon answers at
//! once made round trips 4-8x faster, but `tests/c/diff_sleepers.c` then diverged from the
//! kernel on some seeds (a sleeper did not return EINTR after a signal) for a reason not
//! found yet (BENCHMARKS.md, "Spinning before a round trip blocks").
//!
//! Nothing here allocates or takes a lock.

use std::os::fd::RawFd;

/// How long the daemon's event loop polls for the next request before it blocks.
pub(crate) const DAEMON_SPIN_NS: u64 = 50_000;

/// CLOCK_MONOTONIC in nanoseconds (the vDSO: no system call).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Polls `fd` for input (yielding the CPU between polls) until it is readable (or hung up,
/// or not open: whatever `poll` reports) or `budget_ns` have passed. Returns whether `poll`
/// reported it; `false` also when `poll` failed.
pub(crate) fn until_readable(fd: RawFd, budget_ns: u64) -> bool {
    let start = monotonic_ns();
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd; no timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n != 0 {
            return n > 0;
        }
        if monotonic_ns().saturating_sub(start) >= budget_ns {
            return false;
        }
        // SAFETY: a plain system call.
        unsafe { libc::sched_yield() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    #[test]
    fn data_already_there_is_seen_at_once() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        assert!(until_readable(b.as_raw_fd(), 10_000_000_000));
    }

    #[test]
    fn data_sent_during_the_spin_ends_it() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            a.write_all(b"x").unwrap();
            a
        });
        let start = Instant::now();
        assert!(until_readable(b.as_raw_fd(), 10_000_000_000));
        assert!(start.elapsed() < Duration::from_secs(5));
        drop(t.join().unwrap());
    }

    #[test]
    fn the_budget_ends_a_spin_with_nothing_to_read() {
        let (_a, b) = UnixStream::pair().unwrap();
        let start = Instant::now();
        assert!(!until_readable(b.as_raw_fd(), 2_000_000));
        assert!(start.elapsed() >= Duration::from_millis(2));
    }

    #[test]
    fn a_hang_up_counts_as_readable() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(until_readable(b.as_raw_fd(), 10_000_000_000));
    }

    #[test]
    fn a_descriptor_that_is_not_open_ends_the_spin() {
        // POLLNVAL (a number past any descriptor table): reported at once, and the blocking
        // wait that follows fails.
        let start = Instant::now();
        assert!(until_readable(1 << 30, 10_000_000_000));
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
