//! `timer_create(2)` and `prctl(PR_TIMER_CREATE_RESTORE_IDS)`.
//!
//! Checks, in Linux's order (reference §8.3):
//! 1. the sigevent pointer faults -> EFAULT (before the clock is looked at);
//! 2. unknown clock -> EINVAL; a clock without timer support -> EOPNOTSUPP;
//! 3. restore mode: the wanted id is read (EFAULT) and checked (`> INT_MAX` -> EINVAL);
//! 4. the RLIMIT_SIGPENDING unit of the caller's real uid -> EAGAIN; then the id is reserved
//!    (EAGAIN when none is free, EBUSY when the wanted one is held);
//! 5. the sigevent -> EINVAL (bad `sigev_notify`, signo outside `1..=SIGRTMAX`, a
//!    SIGEV_THREAD_ID target outside the caller's thread group);
//! 6. the id is copied out -> EFAULT;
//! 7. clock-specific setup: the alarm clocks need an RTC wake alarm (EOPNOTSUPP) and
//!    CAP_WAKE_ALARM (EPERM); a CPU clock needs an existing target, a thread one in the
//!    caller's thread group, and a valid clock field (EINVAL).
//!
//! Failures from step 5 on have already consumed the id: the counter has moved on, as on Linux.
//! Steps 3 and 4 are in the order observed on Linux 6.18 (at the limit, a bad restore id gives
//! EINVAL and a held one EAGAIN); the shared reference lists them the other way round.
//!
//! Locks: none on entry or exit. Steps take, one after another, a uid shard (charge), a
//! registry shard, table stripe locks (reserve, publish) and the process's id set.

use super::cpu::{self, CpuClockId, CpuClockKind, CpuTarget};
use super::engine::Inner;
use super::listing::Listing;
use super::timer::{Notify, Timer, TimerClock};
use super::types::*;
use crate::cred::{Cap, Cred};
use crate::errno::{Errno, Result};
use crate::sync::{Arc, Ordering};

/// PR_TIMER_CREATE_RESTORE_IDS.
pub const PR_TIMER_CREATE_RESTORE_IDS: i32 = 77;
/// Its `arg2` values.
pub const PR_TIMER_CREATE_RESTORE_IDS_OFF: u64 = 0;
/// Restore mode on.
pub const PR_TIMER_CREATE_RESTORE_IDS_ON: u64 = 1;
/// Query restore mode.
pub const PR_TIMER_CREATE_RESTORE_IDS_GET: u64 = 2;

/// `clockid_to_kclock` + the `timer_create` callback check.
fn resolve_clock(inner: &Inner, cred: &Cred, clock: i32) -> Result<TimerClock> {
    match clock {
        CLOCK_REALTIME => Ok(TimerClock::Realtime),
        CLOCK_MONOTONIC => Ok(TimerClock::Monotonic),
        CLOCK_BOOTTIME => Ok(TimerClock::Boottime),
        CLOCK_TAI => Ok(TimerClock::Tai),
        CLOCK_REALTIME_ALARM => Ok(TimerClock::RealtimeAlarm),
        CLOCK_BOOTTIME_ALARM => Ok(TimerClock::BoottimeAlarm),
        // No timer_create callback on Linux either.
        CLOCK_MONOTONIC_RAW | CLOCK_REALTIME_COARSE | CLOCK_MONOTONIC_COARSE => {
            Err(Errno::EOPNOTSUPP)
        }
        c => match cpu::decode(c, cred) {
            Some(CpuClockId::Invalid) => Ok(TimerClock::InvalidCpu),
            Some(CpuClockId::Clock(target, kind)) if inner.cpu.is_some() => {
                Ok(TimerClock::Cpu(target, kind))
            }
            // Without a CPU-time source: see "Not supported" in the module doc.
            Some(CpuClockId::Clock(..)) => Err(Errno::EOPNOTSUPP),
            // Negative and not a CPU clock: a dynamic (fd) clock, which has no timers.
            None if c < 0 => Err(Errno::EOPNOTSUPP),
            None => Err(Errno::EINVAL),
        },
    }
}

/// `posix_cpu_timer_create`: the clock's target must exist, and a thread must be one of ours.
fn cpu_target_ok(inner: &Inner, cred: &Cred, target: CpuTarget, kind: CpuClockKind) -> bool {
    if let CpuTarget::Thread(tid) = target {
        if tid != cred.tid && !inner.notifier.same_thread_group(cred.tgid.get(), tid) {
            return false;
        }
    }
    inner
        .cpu
        .as_ref()
        .is_some_and(|source| source.cpu_time(target, kind).is_some())
}

/// `good_sigevent`: the notification, or EINVAL.
fn check_sigevent(inner: &Inner, cred: &Cred, ev: &SigEvent) -> Result<Notify> {
    let target = match ev.notify {
        SIGEV_NONE => return Ok(Notify::None),
        SIGEV_SIGNAL => SignalTarget::Process,
        SIGEV_THREAD => SignalTarget::ThreadCallback,
        SIGEV_THREAD_ID => {
            if !inner
                .notifier
                .same_thread_group(cred.tgid.get(), ev.thread_id)
            {
                return Err(Errno::EINVAL);
            }
            SignalTarget::Thread(ev.thread_id)
        }
        _ => return Err(Errno::EINVAL),
    };
    if ev.signo <= 0 || ev.signo > SIGRTMAX {
        return Err(Errno::EINVAL);
    }
    Ok(Notify::Signal {
        target,
        signo: ev.signo,
        value: ev.value,
    })
}

/// See the module doc for the order of checks.
pub(crate) fn timer_create(
    inner: &Inner,
    cred: &Cred,
    clock: i32,
    event: UserPtr<SigEvent>,
    created_id: UserPtr<i32>,
) -> Result<TimerId> {
    if event == UserPtr::Fault {
        return Err(Errno::EFAULT);
    }
    let timer_clock = resolve_clock(inner, cred, clock)?;
    let tgid = cred.tgid;
    let proc = inner.procs.get_or_create(tgid);
    let wanted = if proc.restore_ids() {
        match created_id {
            UserPtr::Valid(want) if (want as u32) > inner.id_mask => return Err(Errno::EINVAL),
            UserPtr::Valid(want) => Some(TimerId::from_raw(want)),
            _ => return Err(Errno::EFAULT),
        }
    } else {
        None
    };
    if !inner
        .sigpending
        .try_charge(cred.uid, cred.rlimit_sigpending)
    {
        return Err(Errno::EAGAIN);
    }
    let uid = cred.uid;
    let id = match proc.reserve_id(&inner.table, tgid, wanted, inner.id_mask) {
        Ok(id) => id,
        Err(e) => {
            inner.sigpending.uncharge(uid);
            return Err(e);
        }
    };
    let undo = |e: Errno| {
        inner.table.remove(tgid, id);
        proc.forget(id);
        inner.sigpending.uncharge(uid);
        Err(e)
    };
    if !proc.add(id) {
        // The process exited (or exec'd) under us: nothing of this create may survive.
        return undo(Errno::EAGAIN);
    }
    let notify = match event {
        UserPtr::Valid(ev) => match check_sigevent(inner, cred, &ev) {
            Ok(n) => n,
            Err(e) => return undo(e),
        },
        _ => Notify::Signal {
            target: SignalTarget::Process,
            signo: SIGALRM,
            value: id.raw() as u64,
        },
    };
    if !matches!(created_id, UserPtr::Valid(_)) {
        return undo(Errno::EFAULT);
    }
    match timer_clock {
        TimerClock::InvalidCpu => return undo(Errno::EINVAL),
        TimerClock::Cpu(target, kind) if !cpu_target_ok(inner, cred, target, kind) => {
            return undo(Errno::EINVAL)
        }
        _ => {}
    }
    if matches!(
        timer_clock,
        TimerClock::RealtimeAlarm | TimerClock::BoottimeAlarm
    ) {
        if !inner.alarm_rtc {
            return undo(Errno::EOPNOTSUPP);
        }
        if !cred.has_cap(Cap::WAKE_ALARM) {
            return undo(Errno::EPERM);
        }
    }
    let listing = Listing::new(
        inner.created.fetch_add(1, Ordering::Relaxed),
        tgid,
        id,
        clock,
        event,
    );
    let timer = Timer::new(tgid, id, timer_clock, notify, uid, listing);
    let armable = !timer.is_cpu() && !timer.is_sigev_none();
    if armable {
        // Room in the heaps it may be armed on, so timer_settime never grows them.
        inner
            .driver
            .reserve(&[timer_clock.base(false), timer_clock.base(true)]);
    }
    if !inner.table.publish(tgid, id, Arc::new(timer)) {
        if armable {
            inner.driver.unreserve();
        }
        inner.sigpending.uncharge(uid);
        return Err(Errno::EAGAIN);
    }
    Ok(id)
}

/// `prctl(PR_TIMER_CREATE_RESTORE_IDS, arg2, arg3, arg4, arg5)`: 0 off, 1 on, 2 get.
pub(crate) fn prctl_restore_ids(inner: &Inner, cred: &Cred, args: [u64; 4]) -> Result<i32> {
    if args[1..].iter().any(|&a| a != 0) {
        return Err(Errno::EINVAL);
    }
    match args[0] {
        PR_TIMER_CREATE_RESTORE_IDS_OFF | PR_TIMER_CREATE_RESTORE_IDS_ON => {
            let on = args[0] == PR_TIMER_CREATE_RESTORE_IDS_ON;
            // Switching off a process that never used timers need not create its state.
            if on || inner.procs.get(cred.tgid).is_some() {
                inner.procs.get_or_create(cred.tgid).set_restore_ids(on);
            }
            Ok(0)
        }
        PR_TIMER_CREATE_RESTORE_IDS_GET => {
            Ok(inner.procs.get(cred.tgid).is_some_and(|p| p.restore_ids()) as i32)
        }
        _ => Err(Errno::EINVAL),
    }
}
