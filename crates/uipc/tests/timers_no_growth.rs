//! timer_settime must not allocate (it may run in a signal handler of the preload library's
//! process): the driver's heaps get their room at timer_create, and compaction frees no timer.

mod common;
use common::Recorder;

use std::sync::Arc;
use uipc::timers::*;
use uipc::{Cred, ManualClock};

const MS: i64 = 1_000_000;

fn engine() -> (Arc<ManualClock>, Timers, Cred) {
    let clock = Arc::new(ManualClock::new(1000));
    let t = Timers::new(clock.clone(), Arc::new(Recorder::default()));
    (clock, t, Cred::root(100))
}

fn create(t: &Timers, c: &Cred, clock: i32) -> TimerId {
    let ev = SigEvent::signal(34, 0);
    t.timer_create(c, clock, UserPtr::Valid(ev), UserPtr::Valid(0))
        .unwrap()
}

fn set(t: &Timers, c: &Cred, id: TimerId, flags: i32, value: i64) {
    let spec = ItimerSpec::from_nanos(value, MS);
    t.timer_settime(c, id, flags, UserPtr::Valid(spec)).unwrap();
}

#[test]
fn rearming_every_timer_many_times_never_grows_the_heaps() {
    let (_clock, t, c) = engine();
    let ids: Vec<_> = (0..500)
        .map(|i| create(&t, &c, if i % 2 == 0 { 0 } else { 1 }))
        .collect();
    let capacity = t.driver_capacity();
    assert!(capacity > 0, "room is made at timer_create");
    for round in 0..20 {
        for (i, &id) in ids.iter().enumerate() {
            set(&t, &c, id, 0, (1000 + i as i64 + round) * MS);
            // Absolute CLOCK_REALTIME timers use the realtime heap.
            set(&t, &c, id, TIMER_ABSTIME, i64::MAX / 2);
        }
        assert_eq!(t.driver_capacity(), capacity, "round {round}");
    }
}

#[test]
fn a_deleted_timers_last_entry_outlives_compaction_until_it_expires() {
    let (clock, t, c) = engine();
    let doomed = create(&t, &c, 1);
    set(&t, &c, doomed, 0, 10 * MS);
    t.timer_delete(&c, doomed).unwrap();
    let other = create(&t, &c, 1);
    // Enough re-arms to compact many times over.
    for k in 0..1000 {
        set(&t, &c, other, 0, (20 + k % 3) * MS);
    }
    // The deleted timer's entry holds its last reference: kept, with the live one and fewer
    // stale ones than the threshold.
    let entries = t.driver_entries();
    assert!((2..=200).contains(&entries), "{entries} entries");
    clock.advance(15 * MS);
    t.run_expired();
    assert!(
        t.driver_entries() < entries,
        "the deleted timer's entry went at its expiry"
    );
}

#[test]
fn run_expired_fires_every_due_timer_across_its_batches() {
    let clock = Arc::new(ManualClock::new(1000));
    let rec = Arc::new(Recorder::default());
    let t = Timers::new(clock.clone(), rec.clone());
    let c = Cred::root(100);
    let ids: Vec<_> = (0..500).map(|_| create(&t, &c, 1)).collect();
    for (k, &id) in ids.iter().enumerate() {
        // Re-armed once, so stale entries sit among the due ones.
        set(&t, &c, id, 0, 5 * MS);
        set(&t, &c, id, 0, MS + k as i64);
    }
    clock.advance(2 * MS);
    assert_eq!(t.run_expired(), 500);
    assert_eq!(rec.0.lock().unwrap().len(), 500);
    // Only stale entries remain (some compacted away already); due, they fire nothing.
    clock.advance(10 * MS);
    assert_eq!(t.run_expired(), 0);
    assert_eq!(t.driver_entries(), 0);
}
