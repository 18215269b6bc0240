//! Injectable time.
//!
//! SysV IPC records wall-clock seconds (`sem_otime`, `msg_stime`, `shm_atime`, ...) and POSIX
//! timers read several clocks. The engine never reads the host's clocks directly: it asks a
//! [`Clock`], so tests and deterministic replays can drive time by hand with [`ManualClock`].
//!
//! Blocking timeouts (semtimedop, F_SETLKW has none) are measured on the host's monotonic clock
//! through [`crate::wait::WaitCtx`]; they bound how long a thread sleeps, not what is recorded.

use crate::sync::{AtomicI64, Ordering};

/// Nanoseconds in one second.
pub const NSEC_PER_SEC: i64 = 1_000_000_000;

/// A point in time on some clock, as nanoseconds since that clock's origin.
pub type Nanos = i64;

/// The clocks the engine reads.
pub trait Clock: Send + Sync + 'static {
    /// `CLOCK_REALTIME`, nanoseconds since the Unix epoch.
    fn realtime(&self) -> Nanos;
    /// `CLOCK_MONOTONIC`, nanoseconds since an arbitrary origin; never goes back.
    fn monotonic(&self) -> Nanos;
    /// `CLOCK_BOOTTIME`: monotonic plus time suspended. Defaults to `monotonic`.
    fn boottime(&self) -> Nanos {
        self.monotonic()
    }
    /// `CLOCK_TAI`: realtime plus the TAI offset. Defaults to `realtime` (offset 0).
    fn tai(&self) -> Nanos {
        self.realtime()
    }
    /// Wall-clock seconds, as SysV IPC stores them.
    fn now_secs(&self) -> i64 {
        self.realtime().div_euclid(NSEC_PER_SEC)
    }
}

/// The host's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

fn read_host_clock(id: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; the clock ids
    // used are ones every Linux kernel since 2.6.39 supports, so the call cannot fail.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as Nanos * NSEC_PER_SEC + ts.tv_nsec as Nanos
}

impl Clock for SystemClock {
    fn realtime(&self) -> Nanos {
        read_host_clock(libc::CLOCK_REALTIME)
    }
    fn monotonic(&self) -> Nanos {
        read_host_clock(libc::CLOCK_MONOTONIC)
    }
    fn boottime(&self) -> Nanos {
        read_host_clock(libc::CLOCK_BOOTTIME)
    }
    fn tai(&self) -> Nanos {
        read_host_clock(libc::CLOCK_TAI)
    }
    /// `time(2)`: the kernel stamps IPC times with `ktime_get_real_seconds`, the
    /// timekeeper's seconds at its last tick, which is what `time` returns (the vDSO's `time`
    /// reads that one word; the seconds of `CLOCK_REALTIME_COARSE` are the same value, read
    /// under the vDSO's sequence count). Every create reads it, and it is the cheapest of the
    /// three (BENCHMARKS.md, "ipc-keys", measures them).
    fn now_secs(&self) -> i64 {
        // SAFETY: a null pointer asks time(2) to only return the value; it cannot fail.
        unsafe { libc::time(std::ptr::null_mut()) }
    }
}

/// A clock that moves only when told to: for tests and deterministic runs.
#[derive(Debug)]
pub struct ManualClock {
    realtime: AtomicI64,
    monotonic: AtomicI64,
}

impl ManualClock {
    /// A clock reading `realtime_secs` on the wall clock and 1 s on the monotonic one.
    pub fn new(realtime_secs: i64) -> ManualClock {
        ManualClock {
            realtime: AtomicI64::new(realtime_secs * NSEC_PER_SEC),
            monotonic: AtomicI64::new(NSEC_PER_SEC),
        }
    }

    /// Moves both clocks forward by `nanos`.
    pub fn advance(&self, nanos: i64) {
        self.realtime.fetch_add(nanos, Ordering::SeqCst);
        self.monotonic.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Sets the wall clock (as `clock_settime(CLOCK_REALTIME)` does); monotonic is untouched.
    pub fn set_realtime(&self, nanos: Nanos) {
        self.realtime.store(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn realtime(&self) -> Nanos {
        self.realtime.load(Ordering::SeqCst)
    }
    fn monotonic(&self) -> Nanos {
        self.monotonic.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(100);
        assert_eq!(c.now_secs(), 100);
        c.advance(NSEC_PER_SEC / 2);
        assert_eq!(c.now_secs(), 100);
        c.advance(NSEC_PER_SEC / 2);
        assert_eq!(c.now_secs(), 101);
        c.set_realtime(5 * NSEC_PER_SEC);
        assert_eq!(c.now_secs(), 5);
        assert_eq!(c.monotonic(), 2 * NSEC_PER_SEC);
    }

    #[test]
    fn system_clock_is_near_the_host_and_monotonic_never_goes_back() {
        let c = SystemClock;
        let a = c.monotonic();
        let b = c.monotonic();
        assert!(b >= a);
        assert!(c.now_secs() > 1_700_000_000);
    }

    #[test]
    fn system_now_secs_is_the_coarse_realtime_clocks_seconds() {
        let c = SystemClock;
        for _ in 0..1000 {
            let before = read_host_clock(libc::CLOCK_REALTIME_COARSE).div_euclid(NSEC_PER_SEC);
            let now = c.now_secs();
            let after = read_host_clock(libc::CLOCK_REALTIME_COARSE).div_euclid(NSEC_PER_SEC);
            assert!(before <= now && now <= after, "{before} {now} {after}");
        }
    }
}
