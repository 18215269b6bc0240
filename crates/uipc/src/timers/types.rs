//! The values that cross the timer API: ids, clocks, timespecs, sigevents, user pointers.
//!
//! Everything here is plain data. Arguments arrive in Linux's raw forms (a clock is an `i32`, a
//! sigevent carries its raw `sigev_notify`) because checking them, in Linux's order, is part of
//! the engine's job; see `create.rs` for that order.

use crate::clock::{Nanos, NSEC_PER_SEC};

/// A POSIX timer id, as `timer_create` hands it out (`timer_t`, an `int` in the kernel ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(i32);

impl TimerId {
    /// Wraps a raw id as a caller passed it; negative values are simply unknown ids.
    pub const fn from_raw(raw: i32) -> TimerId {
        TimerId(raw)
    }

    /// The raw id.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

impl From<i32> for TimerId {
    fn from(raw: i32) -> TimerId {
        TimerId(raw)
    }
}

/// A user-space pointer argument, as the embedder found it when it copied the argument in.
///
/// The engine takes values, not addresses, yet Linux checks pointer faults at fixed points of
/// each call (a faulting sigevent beats a bad clock). The embedder reports what it saw and the
/// engine returns EFAULT (or EINVAL for a required NULL) at the step where Linux would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserPtr<T> {
    /// The pointer was NULL.
    Null,
    /// The pointer was not NULL but could not be read or written.
    Fault,
    /// The pointer was usable; for an in-argument, this is what it pointed to.
    Valid(T),
}

/// `CLOCK_REALTIME`.
pub const CLOCK_REALTIME: i32 = 0;
/// `CLOCK_MONOTONIC`.
pub const CLOCK_MONOTONIC: i32 = 1;
/// `CLOCK_PROCESS_CPUTIME_ID`.
pub const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
/// `CLOCK_THREAD_CPUTIME_ID`.
pub const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
/// `CLOCK_MONOTONIC_RAW` (no timer support).
pub const CLOCK_MONOTONIC_RAW: i32 = 4;
/// `CLOCK_REALTIME_COARSE` (no timer support).
pub const CLOCK_REALTIME_COARSE: i32 = 5;
/// `CLOCK_MONOTONIC_COARSE` (no timer support).
pub const CLOCK_MONOTONIC_COARSE: i32 = 6;
/// `CLOCK_BOOTTIME`.
pub const CLOCK_BOOTTIME: i32 = 7;
/// `CLOCK_REALTIME_ALARM`.
pub const CLOCK_REALTIME_ALARM: i32 = 8;
/// `CLOCK_BOOTTIME_ALARM`.
pub const CLOCK_BOOTTIME_ALARM: i32 = 9;
/// `CLOCK_TAI`.
pub const CLOCK_TAI: i32 = 11;

/// `TIMER_ABSTIME`: the only `timer_settime` flag Linux looks at.
pub const TIMER_ABSTIME: i32 = 1;

/// `SIGEV_SIGNAL`.
pub const SIGEV_SIGNAL: i32 = 0;
/// `SIGEV_NONE`.
pub const SIGEV_NONE: i32 = 1;
/// `SIGEV_THREAD` (the kernel treats it as SIGEV_SIGNAL; the C library runs the callback).
pub const SIGEV_THREAD: i32 = 2;
/// `SIGEV_THREAD_ID` (Linux-specific; really `SIGEV_SIGNAL | SIGEV_THREAD_ID`).
pub const SIGEV_THREAD_ID: i32 = 4;

/// `SIGALRM`, the signal of a timer created with a NULL sigevent.
pub const SIGALRM: i32 = 14;
/// `SIGRTMAX` on Linux.
pub const SIGRTMAX: i32 = 64;
/// `SI_TIMER`, the `si_code` of a timer signal.
pub const SI_TIMER: i32 = -2;

/// A `struct sigevent`, with the fields Linux reads, in their raw form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigEvent {
    /// `sigev_notify`.
    pub notify: i32,
    /// `sigev_signo`.
    pub signo: i32,
    /// `sigev_value`, as the 64 bits of the union.
    pub value: u64,
    /// `sigev_notify_thread_id`, read for SIGEV_THREAD_ID only.
    pub thread_id: i32,
}

impl SigEvent {
    /// A SIGEV_NONE event: the timer only counts time and is read with `timer_gettime`.
    pub const NONE: SigEvent = SigEvent {
        notify: SIGEV_NONE,
        signo: 0,
        value: 0,
        thread_id: 0,
    };

    /// A SIGEV_SIGNAL event for `signo` carrying `value`.
    pub const fn signal(signo: i32, value: u64) -> SigEvent {
        SigEvent {
            notify: SIGEV_SIGNAL,
            signo,
            value,
            thread_id: 0,
        }
    }
}

/// A `struct timespec`, as the caller passed it (possibly invalid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    /// Seconds.
    pub sec: i64,
    /// Nanoseconds; valid only in `0..1_000_000_000`.
    pub nsec: i64,
}

/// `KTIME_MAX`: every time the engine computes saturates here, as the kernel's does.
pub const KTIME_MAX: Nanos = i64::MAX;

impl Timespec {
    /// The zero timespec (disarms when used as `it_value`).
    pub const ZERO: Timespec = Timespec { sec: 0, nsec: 0 };

    /// A timespec of `nanos` (non-negative) nanoseconds.
    pub const fn from_nanos(nanos: Nanos) -> Timespec {
        Timespec {
            sec: nanos / NSEC_PER_SEC,
            nsec: nanos % NSEC_PER_SEC,
        }
    }

    /// `timespec64_valid`: non-negative seconds, nanoseconds below one second.
    pub fn is_valid(&self) -> bool {
        self.sec >= 0 && (0..NSEC_PER_SEC).contains(&self.nsec)
    }

    /// `timespec64_to_ktime`: nanoseconds, saturating at [`KTIME_MAX`]. Valid timespecs only.
    pub fn to_nanos(self) -> Nanos {
        self.sec
            .checked_mul(NSEC_PER_SEC)
            .and_then(|n| n.checked_add(self.nsec))
            .unwrap_or(KTIME_MAX)
    }

    /// Whether both fields are zero.
    pub fn is_zero(&self) -> bool {
        self.sec == 0 && self.nsec == 0
    }
}

/// A `struct itimerspec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItimerSpec {
    /// The period; zero for a one-shot timer.
    pub interval: Timespec,
    /// Time to (or, with TIMER_ABSTIME, point of) the next expiry; zero disarms.
    pub value: Timespec,
}

impl ItimerSpec {
    /// All zero: a disarmed timer.
    pub const ZERO: ItimerSpec = ItimerSpec {
        interval: Timespec::ZERO,
        value: Timespec::ZERO,
    };

    /// A timer first expiring after `value` ns, then every `interval` ns (0: once).
    pub const fn from_nanos(value: Nanos, interval: Nanos) -> ItimerSpec {
        ItimerSpec {
            interval: Timespec::from_nanos(interval),
            value: Timespec::from_nanos(value),
        }
    }
}

/// Where a timer's signal goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalTarget {
    /// SIGEV_SIGNAL: to the process (any thread that does not block it).
    Process,
    /// SIGEV_THREAD: to the process, where the C library runs the callback on a thread.
    ThreadCallback,
    /// SIGEV_THREAD_ID: to this thread of the process.
    Thread(i32),
}

/// What the target finds in its `siginfo_t` for a delivered timer signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigInfo {
    /// `si_signo`.
    pub signo: i32,
    /// `si_code`: always [`SI_TIMER`].
    pub code: i32,
    /// `si_timerid`.
    pub timer: TimerId,
    /// `si_overrun`, clamped to `INT_MAX`.
    pub overrun: i32,
    /// `si_value`.
    pub value: u64,
}
