//! Process exit, exec and fork (reference §9), and the real-time driver thread.

mod common;
use common::Recorder;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uipc::timers::*;
use uipc::{Cred, Errno, ManualClock, SystemClock};

fn create(t: &Timers, c: &Cred, ev: SigEvent) -> Result<TimerId, Errno> {
    t.timer_create(c, CLOCK_MONOTONIC, UserPtr::Valid(ev), UserPtr::Valid(0))
}

fn arm(t: &Timers, c: &Cred, id: TimerId, value: i64) {
    let spec = UserPtr::Valid(ItimerSpec::from_nanos(value, 0));
    t.timer_settime(c, id, 0, spec).unwrap();
}

fn setup() -> (Arc<ManualClock>, Arc<Recorder>, Timers) {
    let clock = Arc::new(ManualClock::new(1000));
    let rec = Arc::new(Recorder::default());
    let t = Timers::new(clock.clone(), rec.clone());
    (clock, rec, t)
}

#[test]
fn exit_deletes_timers_releases_units_and_resets_ids_and_restore_mode() {
    let (clock, rec, t) = setup();
    let c = Cred::user(100, 1000, 1000);
    for _ in 0..3 {
        create(&t, &c, SigEvent::signal(10, 0)).unwrap();
    }
    arm(&t, &c, TimerId::from_raw(0), 1_000);
    arm(&t, &c, TimerId::from_raw(1), 5_000);
    clock.advance(1_000);
    t.run_expired();
    let pending = rec.0.lock().unwrap().pop().unwrap();
    t.prctl_timer_create_restore_ids(&c, [1, 0, 0, 0]).unwrap();
    assert_eq!(t.sigpending(1000), 3);

    t.exit_process(100);
    assert_eq!(t.sigpending(1000), 0);
    for raw in 0..3 {
        let id = TimerId::from_raw(raw);
        assert_eq!(t.timer_gettime(&c, id), Err(Errno::EINVAL));
    }
    assert!(t.dequeue_signal(&pending).is_none());
    clock.advance(10_000);
    assert_eq!(t.run_expired(), 0, "armed timer 1 died with the process");
    assert_eq!(t.prctl_timer_create_restore_ids(&c, [2, 0, 0, 0]), Ok(0));
    assert_eq!(create(&t, &c, SigEvent::NONE), Ok(TimerId::from_raw(0)));
}

#[test]
fn exec_deletes_timers_and_the_id_counter_carries_on() {
    let (_, _, t) = setup();
    let c = Cred::root(100);
    for _ in 0..5 {
        create(&t, &c, SigEvent::NONE).unwrap();
    }
    t.exec_process(100);
    assert_eq!(
        t.timer_getoverrun(&c, TimerId::from_raw(4)),
        Err(Errno::EINVAL)
    );
    // Linux 6.18: 0..=4 before execve, 5 after (the counter lives in signal_struct).
    assert_eq!(create(&t, &c, SigEvent::NONE), Ok(TimerId::from_raw(5)));
    assert_eq!(t.sigpending(0), 1);
}

#[test]
fn a_new_engine_resumes_the_counter_an_exec_carried_over() {
    let (_, _, before) = setup();
    let c = Cred::root(100);
    assert_eq!(before.next_timer_id(100), 0);
    for _ in 0..3 {
        create(&before, &c, SigEvent::NONE).unwrap();
    }
    before.timer_delete(&c, TimerId::from_raw(2)).unwrap();
    // The counter, not the highest live id: 2 was deleted and is not handed out again.
    assert_eq!(before.next_timer_id(100), 3);
    assert_eq!(before.next_timer_id(101), 0);

    let (_, _, after) = setup();
    after.resume_timer_ids(100, before.next_timer_id(100));
    assert_eq!(create(&after, &c, SigEvent::NONE), Ok(TimerId::from_raw(3)));
    assert_eq!(after.next_timer_id(100), 4);
    // Other processes of the new engine start at 0.
    assert_eq!(
        create(&after, &Cred::root(101), SigEvent::NONE),
        Ok(TimerId::from_raw(0))
    );
    // The counter wraps at INT_MAX as Linux's does.
    after.resume_timer_ids(102, i32::MAX as u32);
    let c102 = Cred::root(102);
    assert_eq!(
        create(&after, &c102, SigEvent::NONE),
        Ok(TimerId::from_raw(i32::MAX))
    );
    assert_eq!(
        create(&after, &c102, SigEvent::NONE),
        Ok(TimerId::from_raw(0))
    );
}

#[test]
fn fork_child_inherits_no_timers_restore_mode_or_counter() {
    let (_, _, t) = setup();
    let parent = Cred::root(100);
    let child = Cred::root(101);
    for _ in 0..3 {
        create(&t, &parent, SigEvent::NONE).unwrap();
    }
    t.prctl_timer_create_restore_ids(&parent, [1, 0, 0, 0])
        .unwrap();
    t.fork_process(100, 101);
    assert_eq!(
        t.timer_gettime(&child, TimerId::from_raw(1)),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        t.prctl_timer_create_restore_ids(&child, [2, 0, 0, 0]),
        Ok(0)
    );
    assert_eq!(create(&t, &child, SigEvent::NONE), Ok(TimerId::from_raw(0)));
    assert!(t.timer_gettime(&parent, TimerId::from_raw(2)).is_ok());
    assert_eq!(
        t.prctl_timer_create_restore_ids(&parent, [2, 0, 0, 0]),
        Ok(1)
    );
}

/// Forwards each queued signal to the test thread, which delivers it.
struct Channel(Mutex<mpsc::Sender<(TimerSignal, Instant)>>);

impl Notifier for Channel {
    fn queue(&self, signal: TimerSignal) {
        let _ = self.0.lock().unwrap().send((signal, Instant::now()));
    }
}

/// Timers on the system clock with their driver thread running, and the receiving end of
/// the signals they queue.
fn driven_and_forwarded() -> (Timers, mpsc::Receiver<(TimerSignal, Instant)>) {
    let (tx, rx) = mpsc::channel();
    let mut t = Timers::new(Arc::new(SystemClock), Arc::new(Channel(Mutex::new(tx))));
    t.start_thread();
    (t, rx)
}

#[test]
fn driver_thread_fires_periodic_timers_on_their_grid_in_real_time() {
    let (t, rx) = driven_and_forwarded();
    let c = Cred::root(100);
    let id = create(&t, &c, SigEvent::signal(10, 0)).unwrap();
    let period = Duration::from_millis(5);
    let start = Instant::now();
    let spec = ItimerSpec::from_nanos(period.as_nanos() as i64, period.as_nanos() as i64);
    t.timer_settime(&c, id, 0, UserPtr::Valid(spec)).unwrap();
    let mut overruns = 0;
    for n in 1..=20u32 {
        let (sig, at) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("timer fired");
        assert!(at >= start + period * n, "signal {n} came early");
        overruns += t.dequeue_signal(&sig).unwrap().overrun as u32;
    }
    // Every period is accounted for (as a signal or an overrun): no drift, nothing lost.
    let periods = 20 + overruns;
    let elapsed = start.elapsed();
    assert!(
        elapsed >= period * periods,
        "{elapsed:?} for {periods} periods"
    );
    assert!(elapsed < period * (periods + 1) + Duration::from_millis(500));
    t.timer_delete(&c, id).unwrap();
    drop(t); // joins the thread
}

#[test]
fn driver_thread_sleeps_without_timers_and_wakes_for_an_earlier_one() {
    let (t, rx) = driven_and_forwarded();
    let c = Cred::root(100);
    let late = create(&t, &c, SigEvent::signal(10, 1)).unwrap();
    let soon = create(&t, &c, SigEvent::signal(10, 2)).unwrap();
    let start = Instant::now();
    arm(&t, &c, late, 60_000_000_000);
    std::thread::sleep(Duration::from_millis(20));
    arm(&t, &c, soon, 10_000_000);
    let (sig, _) = rx.recv_timeout(Duration::from_secs(5)).expect("soon fired");
    assert_eq!(sig.value, 2);
    assert!(start.elapsed() < Duration::from_secs(2));
}

/// Waits (at most 5 s) until the driver thread sleeps with no kick pending, and returns its
/// state: from then on nothing but a new kick or its deadline wakes it.
fn settled(t: &Timers) -> DriverState {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let s = t.driver_state();
        if s.sleep != DriverSleep::Running && !s.kicked {
            return s;
        }
        assert!(
            Instant::now() < end,
            "the driver never went to sleep: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn idle_driver_thread_does_not_wake_without_armed_timers() {
    let mut t = Timers::new(Arc::new(SystemClock), Arc::new(NoNotifier));
    t.start_thread();
    let c = Cred::root(100);
    let id = create(&t, &c, SigEvent::signal(10, 0)).unwrap();
    // Creating a timer arms nothing: the thread sleeps without a deadline and was never woken
    // (a kick from the create would show as `kicked`, or as a wake-up once it slept again).
    let s = settled(&t);
    assert_eq!(
        s.sleep,
        DriverSleep::Indefinitely,
        "asleep with nothing armed"
    );
    assert_eq!(s.wakeups, 0, "{s:?}");
    arm(&t, &c, id, 3_600_000_000_000); // an hour away, on the monotonic clock
                                        // One kick to learn the deadline, then asleep until it.
    let s = settled(&t);
    assert_eq!(s.wakeups, 1, "{s:?}");
    match s.sleep {
        DriverSleep::For(d) => assert!(d > Duration::from_secs(3500), "{s:?}"),
        _ => panic!("asleep without the hour's deadline: {s:?}"),
    }
    t.timer_delete(&c, id).unwrap();
}
