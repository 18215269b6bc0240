//! One timer and its state machine (Linux's `struct k_itimer` and `common_timer_*`).
//!
//! States, as in Linux 6.13+ (`it_status`):
//! - `Disarmed`: not queued in the driver. SIGEV_NONE timers are always here: Linux never
//!   starts their hrtimer and `timer_gettime` computes their remaining time from `expires`,
//!   which is why a disarmed SIGEV_NONE timer still reports its old remaining time [obs].
//! - `Armed`: queued in the driver under `arm_seq`.
//! - `RequeuePending`: a periodic timer fired and its signal is queued; it is re-armed when the
//!   signal is dequeued (forwarded on its original grid, the skipped periods becoming the
//!   overrun); `timer_gettime` forwards its expiry (counting overrun) without re-arming it.
//!
//! `signal_seq` invalidates a queued signal: settime, delete and each periodic delivery bump it,
//! and a signal whose sequence no longer matches is dropped at dequeue.
//!
//! `timer_getoverrun`'s answer also lives outside `state`, in `Timer::overrun_report`: written
//! under `state`, read with no lock but the table stripe's, so that call takes one lock and no
//! count on the timer (Linux reads it under `it_lock` after an RCU lookup).
//!
//! Locks: `state` is taken after any table stripe lock has been released; the driver's queue
//! locks are taken inside it (order: timer state -> driver queue), never the reverse.

use super::cpu::{bump, CpuClockKind, CpuTarget};
use super::listing::Listing;
use super::types::{ItimerSpec, SignalTarget, TimerId, Timespec};
use crate::clock::{Clock, Nanos};
use crate::sync::{Arc, AtomicI32, AtomicU64, Mutex, Ordering};
use crate::Tgid;

/// The time line a timer's `expires` is measured on (Linux's hrtimer clock base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    Monotonic = 0,
    Boottime = 1,
    Realtime = 2,
    Tai = 3,
}

impl Base {
    pub(crate) const ALL: [Base; 4] = [Base::Monotonic, Base::Boottime, Base::Realtime, Base::Tai];

    pub(crate) fn now(self, clock: &dyn Clock) -> Nanos {
        match self {
            Base::Monotonic => clock.monotonic(),
            Base::Boottime => clock.boottime(),
            Base::Realtime => clock.realtime(),
            Base::Tai => clock.tai(),
        }
    }
}

/// The supported timer clocks, resolved from the raw clock id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimerClock {
    Realtime,
    Monotonic,
    Boottime,
    Tai,
    RealtimeAlarm,
    BoottimeAlarm,
    /// A per-pid CPU clock id whose clock field is invalid: `timer_create` fails at its last
    /// step, so no timer ever has this clock.
    InvalidCpu,
    /// A CPU-time clock (see `cpu.rs`); its timers never use a driver heap.
    Cpu(CpuTarget, CpuClockKind),
}

impl TimerClock {
    /// Where a timer armed this way measures its expiry. Relative CLOCK_REALTIME timers run on
    /// the monotonic base, so setting the wall clock does not move them (`hrtimer_init`); the
    /// alarm clocks keep their own base either way (`alarm_timer_arm`).
    pub(crate) fn base(self, absolute: bool) -> Base {
        match self {
            TimerClock::Realtime if absolute => Base::Realtime,
            TimerClock::Realtime | TimerClock::Monotonic => Base::Monotonic,
            // Not a time line of the driver: CPU timers are polled (cpu.rs).
            TimerClock::InvalidCpu | TimerClock::Cpu(..) => Base::Monotonic,
            TimerClock::Boottime | TimerClock::BoottimeAlarm => Base::Boottime,
            TimerClock::Tai => Base::Tai,
            TimerClock::RealtimeAlarm => Base::Realtime,
        }
    }
}

/// How a timer notifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    None,
    Signal {
        target: SignalTarget,
        signo: i32,
        value: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Disarmed,
    Armed,
    RequeuePending,
}

/// The mutable part of a timer, under `Timer::state`.
pub(crate) struct TimerState {
    pub(crate) deleted: bool,
    pub(crate) status: Status,
    pub(crate) interval: Nanos,
    pub(crate) expires: Nanos,
    pub(crate) base: Base,
    /// Expirations since the last delivery, minus one (`-1`: none yet).
    pub(crate) overrun: i64,
    pub(crate) signal_seq: u64,
    /// The `signal_seq` the queued signal carries, while the embedder holds one.
    pub(crate) queued: Option<u64>,
    /// Whether the timer still holds its RLIMIT_SIGPENDING unit: from create until delete, or
    /// until its queued signal is dequeued if it was deleted with one queued.
    pub(crate) unit_held: bool,
}

/// A POSIX timer. Opaque outside the engine; shared between the table and the driver.
pub struct Timer {
    pub(crate) owner: Tgid,
    pub(crate) id: TimerId,
    pub(crate) clock: TimerClock,
    pub(crate) notify: Notify,
    pub(crate) charged_uid: u32,
    /// What `/proc/PID/timers` shows, fixed at create.
    pub(crate) listing: Listing,
    /// Bumped (under `state`) at every arm and cancel; a driver entry is live iff it matches.
    pub(crate) arm_seq: AtomicU64,
    /// What `timer_getoverrun` returns: `overrun` as moved at the last delivery, clamped to
    /// `INT_MAX`; [`GONE`] once the timer is deleted. Written only with `state` locked.
    overrun_report: AtomicI32,
    pub(crate) state: Mutex<TimerState>,
}

/// `Timer::overrun_report` of a deleted timer (an overrun is never negative).
const GONE: i32 = -1;

/// `hrtimer_forward`: moves `*expires` forward by whole `interval`s until it is after `now`;
/// returns how many intervals it moved (0 if it was already after `now`).
pub(crate) fn forward(expires: &mut Nanos, now: Nanos, interval: Nanos) -> i64 {
    let delta = now.saturating_sub(*expires);
    if delta < 0 {
        return 0;
    }
    let interval = interval.max(1);
    let mut orun = 1;
    if delta >= interval {
        orun = delta / interval;
        *expires = expires.saturating_add(interval.saturating_mul(orun));
        if *expires > now {
            return orun;
        }
        orun += 1;
    }
    *expires = expires.saturating_add(interval);
    orun
}

/// `timer_overrun_to_int`: the overrun as user space sees it, clamped to `INT_MAX`.
pub(crate) fn overrun_to_int(overrun: i64) -> i32 {
    overrun.clamp(0, i32::MAX as i64) as i32
}

impl Timer {
    pub(crate) fn new(
        owner: Tgid,
        id: TimerId,
        clock: TimerClock,
        notify: Notify,
        charged_uid: u32,
        listing: Listing,
    ) -> Timer {
        Timer {
            owner,
            id,
            clock,
            notify,
            charged_uid,
            listing,
            arm_seq: AtomicU64::new(0),
            overrun_report: AtomicI32::new(0),
            state: Mutex::new(TimerState {
                deleted: false,
                status: Status::Disarmed,
                interval: 0,
                expires: 0,
                base: clock.base(true),
                overrun: -1,
                signal_seq: 0,
                queued: None,
                unit_held: true,
            }),
        }
    }

    /// Records the overrun `timer_getoverrun` reports from now on. Entry: `st` is this
    /// timer's locked state, and the timer is not deleted.
    pub(crate) fn set_overrun_last(&self, st: &mut TimerState, overrun: i64) {
        debug_assert!(!st.deleted);
        self.overrun_report
            .store(overrun_to_int(overrun), Ordering::Release);
    }

    /// Makes `timer_getoverrun` fail from now on. Entry: `st` is this timer's locked state,
    /// which the caller has just marked deleted.
    pub(crate) fn set_gone(&self, st: &mut TimerState) {
        debug_assert!(st.deleted);
        self.overrun_report.store(GONE, Ordering::Release);
    }

    /// `timer_getoverrun`'s answer, or `None` once the timer is deleted. Takes no lock.
    pub(crate) fn overrun_last(&self) -> Option<i32> {
        let v = self.overrun_report.load(Ordering::Acquire);
        (v != GONE).then_some(v)
    }

    pub(crate) fn is_sigev_none(&self) -> bool {
        self.notify == Notify::None
    }

    /// `common_timer_get`: the current setting. May forward a periodic timer that is not armed
    /// (signal pending, or SIGEV_NONE), counting the skipped periods as overrun.
    ///
    /// Entry: `st` is this timer's locked state.
    pub(crate) fn get(&self, st: &mut TimerState, clock: &dyn Clock) -> ItimerSpec {
        let sig_none = self.is_sigev_none();
        let mut cur = ItimerSpec::ZERO;
        if st.interval != 0 {
            cur.interval = Timespec::from_nanos(st.interval);
        } else if st.status == Status::Disarmed && !sig_none {
            return cur;
        }
        let now = st.base.now(clock);
        if st.interval != 0 && st.status != Status::Armed {
            st.overrun = st
                .overrun
                .saturating_add(forward(&mut st.expires, now, st.interval));
        }
        let remaining = st.expires.saturating_sub(now);
        if remaining <= 0 {
            if !sig_none {
                cur.value = Timespec { sec: 0, nsec: 1 };
            }
        } else {
            cur.value = Timespec::from_nanos(remaining);
        }
        cur
    }

    pub(crate) fn is_cpu(&self) -> bool {
        matches!(self.clock, TimerClock::Cpu(..))
    }

    /// `posix_cpu_timer_get`: like [`Timer::get`], but an expiry of 0 means disarmed, and `now`
    /// is `None` when the clock's target is gone (then everything reads 0).
    ///
    /// Entry: `st` is this timer's locked state.
    pub(crate) fn get_cpu(&self, st: &mut TimerState, now: Option<Nanos>) -> ItimerSpec {
        let mut cur = ItimerSpec::ZERO;
        let Some(now) = now else {
            return cur;
        };
        if st.expires == 0 {
            return cur;
        }
        cur.interval = Timespec::from_nanos(st.interval);
        if st.interval != 0 && st.status != Status::Armed {
            st.overrun = st
                .overrun
                .saturating_add(bump(&mut st.expires, now, st.interval));
        }
        if now < st.expires {
            cur.value = Timespec::from_nanos(st.expires - now);
        } else if !self.is_sigev_none() {
            cur.value = Timespec { sec: 0, nsec: 1 };
        }
        cur
    }

    /// Expiry (`posix_timer_fn` + `posix_timer_queue_signal`). Returns the signal to hand to the
    /// embedder, or `None` if one is already queued (it is made valid again instead).
    ///
    /// Entry: `st` locked, and the caller checked the driver entry is current and `Armed`.
    pub(crate) fn expire(this: &Arc<Timer>, st: &mut TimerState) -> Option<TimerSignal> {
        st.status = if st.interval != 0 {
            Status::RequeuePending
        } else {
            Status::Disarmed
        };
        if this.is_cpu() && st.interval == 0 {
            st.expires = 0; // cpu_timer_fire disables a one-shot CPU timer
        }
        let Notify::Signal {
            target,
            signo,
            value,
        } = this.notify
        else {
            return None;
        };
        let already_queued = st.queued.is_some();
        st.queued = Some(st.signal_seq);
        if already_queued {
            return None;
        }
        Some(TimerSignal {
            tgid: this.owner.get(),
            target,
            signo,
            value,
            timer: this.id,
            source: Source(this.clone()),
        })
    }

    /// A new arm or a cancel: every driver entry queued so far becomes stale.
    pub(crate) fn bump_arm_seq(&self) -> u64 {
        self.arm_seq.fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// A timer signal the engine asks the embedder to queue (see [`super::Notifier`]).
///
/// The embedder keeps it queued until the target takes it, then hands it back to
/// [`super::Timers::dequeue_signal`], which says whether it is still to be delivered and with
/// which overrun: the same two-step queue/dequeue Linux does with its preallocated sigqueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerSignal {
    /// The process owning the timer.
    pub tgid: i32,
    /// Where the signal goes.
    pub target: SignalTarget,
    /// The signal number.
    pub signo: i32,
    /// `si_value`.
    pub value: u64,
    /// `si_timerid`.
    pub timer: TimerId,
    /// The timer object itself: ids are reused, and a deleted timer's queued signal still
    /// holds its RLIMIT_SIGPENDING unit until it is dequeued.
    pub(crate) source: Source,
}

/// The timer a [`TimerSignal`] came from: equal only to the same object (ids are reused).
#[derive(Clone)]
pub(crate) struct Source(pub(crate) Arc<Timer>);

impl PartialEq for Source {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Source {}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Timer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_counts_whole_periods_and_lands_after_now() {
        let mut e = 100;
        assert_eq!(forward(&mut e, 99, 10), 0);
        assert_eq!(e, 100);
        assert_eq!(
            forward(&mut e, 100, 10),
            1,
            "expiry equal to now moves once"
        );
        assert_eq!(e, 110);
        assert_eq!(forward(&mut e, 159, 10), 5);
        assert_eq!(e, 160);
        assert_eq!(forward(&mut e, 160, 10), 1);
        assert_eq!(e, 170);
    }

    #[test]
    fn overrun_clamps_to_int_max() {
        assert_eq!(overrun_to_int(-1), 0);
        assert_eq!(overrun_to_int(5), 5);
        assert_eq!(overrun_to_int(1 << 40), i32::MAX);
    }
}
