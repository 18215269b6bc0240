//! `timer_settime`, `timer_gettime`, `timer_getoverrun`, `timer_delete`, expiry and signal
//! dequeue (reference §8.4, §8.5).
//!
//! Every call finds its timer with one table lookup (one stripe lock, released before anything
//! else), then takes the timer's state lock and re-checks `deleted`: a delete that raced the
//! lookup wins and the caller gets EINVAL, as with Linux's lookup-then-`it_lock` re-check.
//! `timer_getoverrun` alone reads its answer under the stripe lock, from an atomic the other
//! calls keep up to date under the state lock (see `Timer::overrun_last`).
//!
//! Locks: on entry and exit none. Inside: table stripe (alone) -> timer state -> driver heap.

use super::engine::Inner;
use super::timer::{overrun_to_int, Base, Notify, Status, Timer, TimerSignal, TimerState};
use super::types::*;
use crate::cred::Cred;
use crate::errno::{Errno, Result};
use crate::sync::{Arc, MutexGuard, Ordering};

/// `id` as a table key: no negative id is ever handed out.
fn table_id(id: TimerId) -> Result<TimerId> {
    if id.raw() < 0 {
        return Err(Errno::EINVAL);
    }
    Ok(id)
}

fn find(inner: &Inner, cred: &Cred, id: TimerId) -> Result<Arc<Timer>> {
    inner
        .table
        .lookup(cred.tgid, table_id(id)?)
        .ok_or(Errno::EINVAL)
}

fn locked(timer: &Timer) -> Result<MutexGuard<'_, TimerState>> {
    let st = super::lock(&timer.state);
    if st.deleted {
        return Err(Errno::EINVAL);
    }
    Ok(st)
}

/// Takes the timer out of the driver, if it is in it. Entry: state locked.
fn cancel(inner: &Inner, timer: &Timer, st: &mut TimerState) {
    if st.status == Status::Armed {
        timer.bump_arm_seq();
        if !timer.is_cpu() {
            inner.driver.cancelled(st.base);
        }
    }
    st.status = Status::Disarmed;
}

/// `timer_settime(2)`: returns the old setting (the embedder copies it out, and turns a fault
/// there into EFAULT after the timer was set, as Linux does).
pub(crate) fn timer_settime(
    inner: &Inner,
    cred: &Cred,
    id: TimerId,
    flags: i32,
    new: UserPtr<ItimerSpec>,
) -> Result<ItimerSpec> {
    let new = match new {
        UserPtr::Null => return Err(Errno::EINVAL),
        UserPtr::Fault => return Err(Errno::EFAULT),
        UserPtr::Valid(n) => n,
    };
    if !new.interval.is_valid() || !new.value.is_valid() {
        return Err(Errno::EINVAL);
    }
    let timer = find(inner, cred, id)?;
    let mut st = locked(&timer)?;
    if timer.is_cpu() {
        let (old, signal) = cpu_settime(inner, &timer, &mut st, flags, &new)?;
        drop(st);
        if let Some(sig) = signal {
            inner.notifier.queue(sig);
        }
        return Ok(old);
    }
    let clock = &*inner.clock;
    let old = timer.get(&mut st, clock);
    cancel(inner, &timer, &mut st);
    // posix_timer_set_common: a zero value clears the interval too.
    st.interval = if new.value.is_zero() {
        0
    } else {
        new.interval.to_nanos()
    };
    timer.set_overrun_last(&mut st, 0);
    st.overrun = -1;
    st.signal_seq += 1;
    if new.value.is_zero() {
        return Ok(old);
    }
    let absolute = flags & TIMER_ABSTIME != 0;
    let base = timer.clock.base(absolute);
    let value = new.value.to_nanos();
    st.base = base;
    st.expires = if absolute {
        value
    } else {
        base.now(clock).saturating_add(value)
    };
    if !timer.is_sigev_none() {
        let seq = timer.bump_arm_seq();
        st.status = Status::Armed;
        inner.driver.arm(&timer, base, st.expires, seq);
    }
    Ok(old)
}

/// Samples a CPU timer's clock. Entry: the timer's state may be locked.
fn cpu_now(inner: &Inner, timer: &Timer) -> Option<crate::clock::Nanos> {
    let (super::timer::TimerClock::Cpu(target, kind), Some(source)) = (timer.clock, &inner.cpu)
    else {
        return None;
    };
    source.cpu_time(target, kind)
}

/// `posix_cpu_timer_set`: returns the old setting and, when the new expiry has already passed,
/// the signal of the immediate expiry (queued by the caller once the state lock is dropped).
fn cpu_settime(
    inner: &Inner,
    timer: &Arc<Timer>,
    st: &mut TimerState,
    flags: i32,
    new: &ItimerSpec,
) -> Result<(ItimerSpec, Option<TimerSignal>)> {
    let now = cpu_now(inner, timer).ok_or(Errno::ESRCH)?;
    let old = timer.get_cpu(st, Some(now));
    cancel(inner, timer, st);
    st.interval = if new.value.is_zero() {
        0
    } else {
        new.interval.to_nanos()
    };
    timer.set_overrun_last(st, 0);
    st.overrun = -1;
    st.signal_seq += 1;
    let value = new.value.to_nanos();
    st.expires = match (value, flags & TIMER_ABSTIME != 0) {
        (0, _) => 0,
        (v, true) => v,
        (v, false) => now.saturating_add(v),
    };
    if timer.is_sigev_none() || st.expires == 0 {
        return Ok((old, None));
    }
    if now < st.expires {
        let seq = timer.bump_arm_seq();
        st.status = Status::Armed;
        if inner.cpu_timers.arm(timer, seq, st.expires) {
            inner.driver.kick();
        }
        return Ok((old, None));
    }
    Ok((old, Timer::expire(timer, st)))
}

/// `timer_gettime(2)`.
pub(crate) fn timer_gettime(inner: &Inner, cred: &Cred, id: TimerId) -> Result<ItimerSpec> {
    let timer = find(inner, cred, id)?;
    let mut st = locked(&timer)?;
    if timer.is_cpu() {
        let now = cpu_now(inner, &timer);
        return Ok(timer.get_cpu(&mut st, now));
    }
    Ok(timer.get(&mut st, &*inner.clock))
}

/// `timer_getoverrun(2)`: the overrun moved at the last delivery, clamped to `INT_MAX`.
/// Reads the timer under the table's stripe lock alone (see `Timer::overrun_last`): a delete
/// marks the timer gone before it leaves the table, so a racing call sees it gone (EINVAL) or
/// answers before the delete, as with Linux's re-check under `it_lock`.
pub(crate) fn timer_getoverrun(inner: &Inner, cred: &Cred, id: TimerId) -> Result<i32> {
    inner
        .table
        .read(cred.tgid, table_id(id)?, Timer::overrun_last)
        .flatten()
        .ok_or(Errno::EINVAL)
}

/// Marks `timer` deleted and disarms it; the caller removes it from the table and process.
/// Returns false if it was already deleted. Its RLIMIT_SIGPENDING unit comes back now, unless a
/// signal of it is still queued and the process lives on: then at that signal's dequeue.
pub(crate) fn kill_timer(inner: &Inner, timer: &Timer, process_gone: bool) -> bool {
    let mut st = super::lock(&timer.state);
    if st.deleted {
        return false;
    }
    st.deleted = true;
    timer.set_gone(&mut st);
    st.signal_seq += 1;
    cancel(inner, timer, &mut st);
    if !timer.is_cpu() && !timer.is_sigev_none() {
        inner.driver.unreserve();
    }
    let release = st.unit_held && (process_gone || st.queued.is_none());
    if release {
        st.unit_held = false;
    }
    drop(st);
    if release {
        inner.sigpending.uncharge(timer.charged_uid);
    }
    true
}

/// `timer_delete(2)`.
pub(crate) fn timer_delete(inner: &Inner, cred: &Cred, id: TimerId) -> Result<()> {
    let timer = find(inner, cred, id)?;
    if !kill_timer(inner, &timer, false) {
        return Err(Errno::EINVAL);
    }
    let tgid = cred.tgid;
    inner.table.remove(tgid, id);
    if let Some(proc) = inner.procs.get(tgid) {
        proc.forget(id);
    }
    Ok(())
}

/// Fires every due timer and hands the signals to the notifier (after all locks are dropped).
/// Returns how many timers expired. Heap entries are taken in batches into vectors allocated
/// here, with no lock held, so nothing allocates or frees under a heap lock.
pub(crate) fn run_expired(inner: &Inner) -> usize {
    const BATCH: usize = 64;
    let mut fired = 0;
    // Room is made only once something is due (the first look has none, so it stops at the
    // first entry due): a call with nothing due allocates nothing, and no lock is held while
    // the room is allocated.
    let mut due = Vec::new();
    let mut dead = Vec::new();
    loop {
        let more = inner
            .driver
            .take_expired(&*inner.clock, &mut due, &mut dead);
        dead.clear();
        fired += fire(inner, due.drain(..).map(|d| (d.timer, d.arm_seq)));
        if !more {
            break;
        }
        if due.capacity() == 0 {
            due.reserve_exact(BATCH);
            dead.reserve_exact(BATCH);
        }
    }
    if let Some(source) = &inner.cpu {
        fired += fire(inner, inner.cpu_timers.take_expired(&**source).into_iter());
    }
    fired
}

/// Expires each timer still armed under `arm_seq`, queueing its signal once its state lock
/// is dropped. Entry and exit: no lock held.
fn fire(inner: &Inner, due: impl Iterator<Item = (Arc<Timer>, u64)>) -> usize {
    let mut fired = 0;
    for (timer, arm_seq) in due {
        let signal = {
            let mut st = super::lock(&timer.state);
            let current = timer.arm_seq.load(Ordering::Acquire) == arm_seq;
            if st.deleted || !current || st.status != Status::Armed {
                continue;
            }
            fired += 1;
            Timer::expire(&timer, &mut st)
        };
        if let Some(sig) = signal {
            inner.notifier.queue(sig);
        }
    }
    fired
}

/// See [`super::Timers::signal_is_live`].
pub(crate) fn signal_is_live(sig: &TimerSignal) -> bool {
    let st = super::lock(&sig.source.0.state);
    !st.deleted && st.queued == Some(st.signal_seq)
}

/// The target takes a queued timer signal (`posixtimer_deliver_signal`): `None` if it must be
/// dropped (the timer was deleted or re-set since), else the siginfo. A periodic timer is
/// re-armed here, on its grid, and the periods it skipped become the overrun.
pub(crate) fn dequeue_signal(inner: &Inner, sig: &TimerSignal) -> Option<SigInfo> {
    let timer = &sig.source.0;
    let mut st = super::lock(&timer.state);
    let queued = st.queued.take();
    if st.deleted {
        if queued.is_some() && st.unit_held {
            st.unit_held = false;
            drop(st);
            inner.sigpending.uncharge(timer.charged_uid);
        }
        return None;
    }
    if queued != Some(st.signal_seq) {
        return None;
    }
    let Notify::Signal { signo, value, .. } = timer.notify else {
        return None;
    };
    let mut overrun = 0;
    if st.interval != 0 && st.status == Status::RequeuePending {
        let interval = st.interval;
        if timer.is_cpu() {
            // posix_cpu_timer_rearm: nothing to re-arm once the target is gone.
            if let Some(now) = cpu_now(inner, timer) {
                let skipped = super::cpu::bump(&mut st.expires, now, interval);
                st.overrun = st.overrun.saturating_add(skipped);
                let seq = timer.bump_arm_seq();
                if inner.cpu_timers.arm(timer, seq, st.expires) {
                    inner.driver.kick();
                }
            }
        } else {
            let base: Base = st.base;
            let now = base.now(&*inner.clock);
            let skipped = super::timer::forward(&mut st.expires, now, interval);
            st.overrun = st.overrun.saturating_add(skipped);
            let seq = timer.bump_arm_seq();
            inner.driver.arm(timer, base, st.expires, seq);
        }
        st.status = Status::Armed;
        let moved = st.overrun;
        timer.set_overrun_last(&mut st, moved);
        st.overrun = -1;
        st.signal_seq += 1;
        overrun = overrun_to_int(moved);
    }
    Some(SigInfo {
        signo,
        code: SI_TIMER,
        timer: sig.timer,
        overrun,
        value,
    })
}
