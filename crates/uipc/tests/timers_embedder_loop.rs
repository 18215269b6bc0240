//! An embedder's own driver loop (the preload library's timer service runs one):
//! `Timers::next_deadline` says how long to sleep, `Timers::wait_for_work` sleeps until then or
//! until something changes.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};
use uipc::timers::*;
use uipc::{Cred, ManualClock};

const MS: i64 = 1_000_000;

fn engine() -> (Arc<ManualClock>, Timers, Cred, TimerId) {
    let clock = Arc::new(ManualClock::new(1000));
    let timers = Timers::new(clock.clone(), Arc::new(NoNotifier));
    let cred = Cred::root(100);
    let id = common::monotonic_timer(&timers, &cred);
    (clock, timers, cred, id)
}

#[test]
fn next_deadline_is_none_until_armed_then_the_time_to_the_earliest_expiry() {
    let (clock, timers, cred, id) = engine();
    assert_eq!(timers.next_deadline(), None);
    let spec = UserPtr::Valid(ItimerSpec::from_nanos(5 * MS, 0));
    timers.timer_settime(&cred, id, 0, spec).unwrap();
    assert_eq!(timers.next_deadline(), Some(Duration::from_millis(5)));
    clock.advance(2 * MS);
    assert_eq!(timers.next_deadline(), Some(Duration::from_millis(3)));
    clock.advance(10 * MS);
    assert_eq!(
        timers.next_deadline(),
        Some(Duration::ZERO),
        "overdue: zero"
    );
    assert_eq!(timers.run_expired(), 1);
    assert_eq!(
        timers.next_deadline(),
        None,
        "a fired one-shot timer is not armed"
    );
}

#[test]
fn wait_for_work_returns_at_its_timeout_or_when_the_clock_is_said_to_be_set() {
    let (_clock, timers, _cred, _id) = engine();
    let timers = Arc::new(timers);
    let start = Instant::now();
    timers.wait_for_work(Some(Duration::from_millis(20)));
    assert!(start.elapsed() >= Duration::from_millis(20));

    let waker = {
        let timers = timers.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            timers.clock_was_set();
        })
    };
    let start = Instant::now();
    timers.wait_for_work(Some(Duration::from_secs(30)));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "woken, not timed out"
    );
    waker.join().unwrap();
}
