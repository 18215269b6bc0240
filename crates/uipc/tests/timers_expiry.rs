//! Expiry, overrun, gettime and clock jumps, driven by hand with a ManualClock (§8.4, §8.5).

mod common;
use common::Recorder;

use std::sync::Arc;
use uipc::timers::*;
use uipc::{Cred, ManualClock};

const MS: i64 = 1_000_000;
const SEC: i64 = 1_000_000_000;

struct Rig {
    clock: Arc<ManualClock>,
    rec: Arc<Recorder>,
    t: Timers,
    c: Cred,
}

fn rig() -> Rig {
    let clock = Arc::new(ManualClock::new(1000));
    let rec = Arc::new(Recorder::default());
    let t = Timers::new(clock.clone(), rec.clone());
    Rig {
        clock,
        rec,
        t,
        c: Cred::root(100),
    }
}

impl Rig {
    fn create(&self, clock: i32, ev: SigEvent) -> TimerId {
        self.t
            .timer_create(&self.c, clock, UserPtr::Valid(ev), UserPtr::Valid(0))
            .unwrap()
    }
    fn set(&self, id: TimerId, flags: i32, value: i64, interval: i64) -> ItimerSpec {
        let spec = ItimerSpec::from_nanos(value, interval);
        self.t
            .timer_settime(&self.c, id, flags, UserPtr::Valid(spec))
            .unwrap()
    }
    fn get(&self, id: TimerId) -> ItimerSpec {
        self.t.timer_gettime(&self.c, id).unwrap()
    }
    fn overrun(&self, id: TimerId) -> i32 {
        self.t.timer_getoverrun(&self.c, id).unwrap()
    }
    fn advance(&self, nanos: i64) -> usize {
        self.clock.advance(nanos);
        self.t.run_expired()
    }
    /// Arms `id` once, 1 ms ahead, lets it expire: the signal it queued.
    fn fire_once(&self, id: TimerId) -> TimerSignal {
        self.set(id, 0, MS, 0);
        self.advance(MS);
        self.rec.take().pop().expect("the expiry queued a signal")
    }
}

fn nanos(ts: Timespec) -> i64 {
    ts.sec * SEC + ts.nsec
}

#[test]
fn one_shot_fires_once_on_time_and_reads_zero_while_its_signal_is_pending() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 42));
    r.set(id, 0, 5 * MS, 0);
    assert_eq!(nanos(r.get(id).value), 5 * MS);
    assert_eq!(r.advance(5 * MS - 1), 0);
    assert_eq!(nanos(r.get(id).value), 1);
    assert_eq!(r.advance(1), 1);
    let sigs = r.rec.take();
    assert_eq!(sigs.len(), 1);
    assert_eq!((sigs[0].signo, sigs[0].value, sigs[0].timer), (10, 42, id));
    assert_eq!(
        r.get(id),
        ItimerSpec::ZERO,
        "expired one-shot reads 0 while pending"
    );
    let info = r.t.dequeue_signal(&sigs[0]).unwrap();
    assert_eq!(
        (info.code, info.overrun, info.signo, info.value),
        (SI_TIMER, 0, 10, 42)
    );
    assert_eq!(r.advance(SEC), 0);
    assert!(r.rec.take().is_empty());
}

#[test]
fn periodic_overrun_accumulates_while_pending_and_moves_at_delivery() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    r.set(id, 0, MS, MS);
    for _ in 0..50 {
        r.advance(MS);
    }
    let sigs = r.rec.take();
    assert_eq!(sigs.len(), 1, "one queued signal per timer");
    assert_eq!(r.overrun(id), 0, "not moved before delivery");
    let info = r.t.dequeue_signal(&sigs[0]).unwrap();
    assert_eq!(info.overrun, 49);
    assert_eq!(r.overrun(id), 49);
    assert!(r.t.dequeue_signal(&sigs[0]).is_none(), "no second signal");
    // Re-armed on the original grid: the next expiry is the next whole millisecond.
    assert_eq!(nanos(r.get(id).value), MS);
    assert_eq!(nanos(r.get(id).interval), MS);
    r.advance(MS);
    let sigs = r.rec.take();
    assert_eq!(sigs.len(), 1);
    assert_eq!(r.t.dequeue_signal(&sigs[0]).unwrap().overrun, 0);
    assert_eq!(r.overrun(id), 0);
}

#[test]
fn gettime_forwards_a_pending_periodic_timer_to_its_next_boundary() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    r.set(id, 0, 10 * MS, 10 * MS);
    r.advance(10 * MS);
    r.clock.advance(23 * MS);
    assert_eq!(nanos(r.get(id).value), 7 * MS);
    let sig = r.rec.take().pop().unwrap();
    // The periods gettime skipped count at delivery too.
    assert_eq!(r.t.dequeue_signal(&sig).unwrap().overrun, 2);
}

#[test]
fn overrun_clamps_to_int_max() {
    let r = rig();
    let id = r.create(CLOCK_REALTIME, SigEvent::signal(10, 0));
    r.set(id, TIMER_ABSTIME, 1, 1); // epoch + 1 ns, every ns: ~1e12 periods are overdue
    assert_eq!(r.t.run_expired(), 1);
    let sig = r.rec.take().pop().unwrap();
    assert_eq!(r.t.dequeue_signal(&sig).unwrap().overrun, i32::MAX);
    assert_eq!(r.overrun(id), i32::MAX);
}

#[test]
fn settime_resets_the_overrun_and_drops_the_pending_signal() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    r.set(id, 0, MS, MS);
    r.advance(5 * MS);
    let sig = r.rec.take().pop().unwrap();
    r.t.dequeue_signal(&sig).unwrap();
    assert_eq!(r.overrun(id), 4);
    r.advance(2 * MS);
    let pending = r.rec.take().pop().unwrap();
    let old = r.set(id, 0, SEC, 0);
    assert_eq!(nanos(old.interval), MS);
    assert_eq!(r.overrun(id), 0);
    assert!(
        r.t.dequeue_signal(&pending).is_none(),
        "stale signal dropped"
    );
    assert_eq!(nanos(r.get(id).value), SEC);
}

#[test]
fn delete_drops_the_pending_signal() {
    let r = rig();
    let id = r.create(CLOCK_BOOTTIME, SigEvent::signal(10, 0));
    let sig = r.fire_once(id);
    r.t.timer_delete(&r.c, id).unwrap();
    assert!(r.t.dequeue_signal(&sig).is_none());
    // A new timer restored under the same id does not take over the old signal.
    r.t.prctl_timer_create_restore_ids(&r.c, [1, 0, 0, 0])
        .unwrap();
    let again = r.t.timer_create(
        &r.c,
        CLOCK_BOOTTIME,
        UserPtr::Valid(SigEvent::signal(10, 0)),
        UserPtr::Valid(id.raw()),
    );
    assert_eq!(again, Ok(id));
    assert!(r.t.dequeue_signal(&sig).is_none());
}

#[test]
fn rearming_while_pending_revalidates_the_one_queued_signal() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    let sig = r.fire_once(id);
    r.set(id, 0, MS, 0);
    r.advance(MS);
    assert!(r.rec.take().is_empty(), "still one queued signal");
    assert!(
        r.t.dequeue_signal(&sig).is_some(),
        "the queued one counts again"
    );
}

#[test]
fn sigev_none_timers_never_notify_and_read_like_linux() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::NONE);
    assert_eq!(r.get(id), ItimerSpec::ZERO, "never armed");
    r.set(id, 0, 3 * MS, 0);
    assert_eq!(r.advance(10 * MS), 0);
    assert_eq!(r.get(id), ItimerSpec::ZERO, "expired one-shot reads 0");
    r.set(id, 0, MS, MS);
    r.clock.advance(20 * MS + MS / 2);
    assert_eq!(nanos(r.get(id).value), MS / 2, "periodic is forwarded");
    assert_eq!(r.overrun(id), 0, "gettime's forward is not a delivery");
    r.set(id, 0, 100 * SEC, 0);
    let old = r.set(id, 0, 0, 0);
    assert_eq!(nanos(old.value), 100 * SEC);
    // Linux quirk [obs]: a disarmed SIGEV_NONE timer still reports its old expiry.
    r.clock.advance(SEC);
    assert_eq!(nanos(r.get(id).value), 99 * SEC);
    assert!(r.rec.take().is_empty());
}

#[test]
fn settime_returns_the_old_setting_and_zero_value_disarms_with_the_interval() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(12, 0));
    assert_eq!(r.set(id, 0, 2 * SEC, 0), ItimerSpec::ZERO);
    r.clock.advance(SEC / 2);
    let old = r.set(id, 0, 0, 5 * SEC);
    assert_eq!(old, ItimerSpec::from_nanos(3 * SEC / 2, 0));
    assert_eq!(
        r.get(id),
        ItimerSpec::ZERO,
        "interval cleared with the value"
    );
    assert_eq!(r.advance(10 * SEC), 0);
}

#[test]
fn huge_relative_values_saturate_instead_of_wrapping() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(12, 0));
    let spec = ItimerSpec {
        interval: Timespec::ZERO,
        value: Timespec {
            sec: i64::MAX,
            nsec: 999_999_999,
        },
    };
    r.t.timer_settime(&r.c, id, 0, UserPtr::Valid(spec))
        .unwrap();
    let left = nanos(r.get(id).value);
    assert_eq!(left, i64::MAX - r.clock.monotonic_now());
    assert_eq!(r.advance(SEC), 0);
}

trait Mono {
    fn monotonic_now(&self) -> i64;
}
impl Mono for ManualClock {
    fn monotonic_now(&self) -> i64 {
        uipc::Clock::monotonic(self)
    }
}

#[test]
fn setting_the_wall_clock_moves_absolute_realtime_timers_only() {
    let r = rig();
    let abs = r.create(CLOCK_REALTIME, SigEvent::signal(10, 1));
    let rel = r.create(CLOCK_REALTIME, SigEvent::signal(10, 2));
    let now = uipc::Clock::realtime(&*r.clock);
    r.set(abs, TIMER_ABSTIME, now + 10 * SEC, 0);
    r.set(rel, 0, 10 * SEC, 0);
    r.clock.set_realtime(now - 5 * SEC);
    assert_eq!(nanos(r.get(abs).value), 15 * SEC, "backward jump delays it");
    assert_eq!(nanos(r.get(rel).value), 10 * SEC);
    r.clock.set_realtime(now + 20 * SEC);
    assert_eq!(r.t.run_expired(), 1);
    let sigs = r.rec.take();
    assert_eq!(sigs.len(), 1);
    assert_eq!(sigs[0].value, 1, "only the absolute one fired");
    assert_eq!(nanos(r.get(rel).value), 10 * SEC);
    assert_eq!(r.advance(10 * SEC), 1);
}

#[test]
fn thousands_of_timers_fire_exactly_when_due() {
    let r = rig();
    let n = 5000i64;
    let mut ids = Vec::new();
    for i in 0..n {
        let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, i as u64));
        // Expiries spread over 1..=1000 ms, in a scrambled order.
        r.set(id, 0, ((i * 7919) % 1000 + 1) * MS, 0);
        ids.push(id);
    }
    let mut fired = 0;
    for step in 1..=1000i64 {
        let now_fired = r.advance(MS);
        let expected = (0..n).filter(|i| (i * 7919) % 1000 + 1 == step).count();
        assert_eq!(now_fired, expected, "step {step}");
        fired += now_fired;
    }
    assert_eq!(fired as i64, n);
    assert_eq!(r.rec.take().len(), n as usize);
}

#[test]
fn rearming_many_times_keeps_the_driver_queue_bounded() {
    let r = rig();
    let id = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    for i in 0..10_000 {
        r.set(id, 0, SEC + i, 0);
    }
    assert!(
        r.t.driver_entries() <= 200,
        "{} entries",
        r.t.driver_entries()
    );
    assert_eq!(r.advance(2 * SEC), 1);
}

#[test]
fn sigev_thread_id_and_null_event_reach_the_right_target() {
    let r = rig();
    let ev = SigEvent {
        notify: SIGEV_THREAD_ID,
        signo: 34,
        value: 9,
        thread_id: 100,
    };
    let a = r.create(CLOCK_MONOTONIC, ev);
    let b =
        r.t.timer_create(&r.c, CLOCK_MONOTONIC, UserPtr::Null, UserPtr::Valid(0))
            .unwrap();
    r.set(a, 0, MS, 0);
    r.set(b, 0, MS, 0);
    r.advance(MS);
    let mut sigs = r.rec.take();
    sigs.sort_by_key(|s| s.timer);
    assert_eq!(sigs[0].target, SignalTarget::Thread(100));
    assert_eq!(
        (sigs[1].target, sigs[1].signo),
        (SignalTarget::Process, SIGALRM)
    );
    assert_eq!(sigs[1].value, b.raw() as u64, "NULL event: sival_int = id");
}

#[test]
fn a_deleted_timer_keeps_its_sigpending_unit_until_its_queued_signal_is_dequeued() {
    let r = rig();
    let a = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    let b = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    let sig = r.fire_once(a);
    assert_eq!(r.t.sigpending(0), 2);
    r.t.timer_delete(&r.c, a).unwrap();
    r.t.timer_delete(&r.c, b).unwrap();
    assert_eq!(r.t.sigpending(0), 1, "a's queued signal still holds a unit");
    assert!(r.t.dequeue_signal(&sig).is_none());
    assert_eq!(r.t.sigpending(0), 0);
    assert!(r.t.dequeue_signal(&sig).is_none());
    assert_eq!(r.t.sigpending(0), 0, "released once");
}

#[test]
fn process_exit_releases_units_held_by_queued_signals() {
    let r = rig();
    let a = r.create(CLOCK_MONOTONIC, SigEvent::signal(10, 0));
    let sig = r.fire_once(a);
    r.t.exit_process(r.c.tgid.get());
    assert_eq!(r.t.sigpending(0), 0);
    assert!(r.t.dequeue_signal(&sig).is_none());
    assert_eq!(r.t.sigpending(0), 0);
}
