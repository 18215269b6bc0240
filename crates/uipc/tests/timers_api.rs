//! timer_create / settime / gettime / getoverrun / delete / prctl: every errno path and the id
//! rules (reference §8.1-§8.4, §8.6), on a ManualClock.

use std::sync::{Arc, Mutex};
use uipc::timers::*;
use uipc::{Cap, Cred, Errno, ManualClock};

#[derive(Default)]
struct Threads(Mutex<Vec<(i32, i32)>>);

impl Notifier for Threads {
    fn queue(&self, _signal: TimerSignal) {}
    fn same_thread_group(&self, tgid: i32, tid: i32) -> bool {
        tgid == tid || self.0.lock().unwrap().contains(&(tgid, tid))
    }
}

fn engine_with(config: TimersConfig) -> Timers {
    Timers::with_config(
        Arc::new(ManualClock::new(1000)),
        Arc::new(Threads(Mutex::new(vec![(100, 101)]))),
        config,
    )
}

fn engine() -> Timers {
    engine_with(TimersConfig::default())
}

/// [`engine`] and root in its process 100.
fn engine_and_root() -> (Timers, Cred) {
    (engine(), Cred::root(100))
}

fn create(t: &Timers, cred: &Cred) -> Result<i32, Errno> {
    t.timer_create(
        cred,
        CLOCK_MONOTONIC,
        UserPtr::Valid(SigEvent::NONE),
        UserPtr::Valid(0),
    )
    .map(TimerId::raw)
}

fn create_ev(t: &Timers, cred: &Cred, clock: i32, ev: UserPtr<SigEvent>) -> Result<i32, Errno> {
    t.timer_create(cred, clock, ev, UserPtr::Valid(0))
        .map(TimerId::raw)
}

fn id(raw: i32) -> TimerId {
    TimerId::from_raw(raw)
}

#[test]
fn sigevent_fault_beats_a_bad_clock() {
    let (t, c) = engine_and_root();
    assert_eq!(create_ev(&t, &c, 99, UserPtr::Fault), Err(Errno::EFAULT));
    assert_eq!(create_ev(&t, &c, 99, UserPtr::Null), Err(Errno::EINVAL));
    assert_eq!(create(&t, &c), Ok(0), "step 1-2 failures consume no id");
}

#[test]
fn unknown_clocks_are_einval_and_untimed_clocks_eopnotsupp() {
    let (t, c) = engine_and_root();
    let none = UserPtr::Valid(SigEvent::NONE);
    for clock in [10, 12, 99, i32::MAX] {
        assert_eq!(
            create_ev(&t, &c, clock, none),
            Err(Errno::EINVAL),
            "{clock}"
        );
    }
    for clock in [
        CLOCK_MONOTONIC_RAW,
        CLOCK_REALTIME_COARSE,
        CLOCK_MONOTONIC_COARSE,
    ] {
        assert_eq!(create_ev(&t, &c, clock, none), Err(Errno::EOPNOTSUPP));
    }
    // Dynamic (fd) clock ids have no timers; per-pid CPU clock ids with clock field 3 are
    // EINVAL only at the last step, after an id was consumed (checked below: ids start at 2).
    assert_eq!(create_ev(&t, &c, -5, none), Err(Errno::EOPNOTSUPP));
    assert_eq!(create_ev(&t, &c, -1, none), Err(Errno::EINVAL));
    assert_eq!(create_ev(&t, &c, -9, none), Err(Errno::EINVAL));
    for (n, clock) in [CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME, CLOCK_TAI]
        .into_iter()
        .enumerate()
    {
        assert_eq!(create_ev(&t, &c, clock, none), Ok(n as i32 + 2));
    }
}

#[test]
fn bad_sigevents_are_einval_after_the_id_was_consumed() {
    let (t, c) = engine_and_root();
    let bad = [
        SigEvent {
            notify: 3,
            ..SigEvent::NONE
        },
        SigEvent {
            notify: 5,
            ..SigEvent::NONE
        },
        SigEvent {
            notify: 6,
            signo: 10,
            ..SigEvent::NONE
        },
        SigEvent::signal(0, 0),
        SigEvent::signal(65, 0),
        SigEvent::signal(-1, 0),
        SigEvent {
            notify: SIGEV_THREAD,
            signo: 65,
            ..SigEvent::NONE
        },
        SigEvent {
            notify: SIGEV_THREAD_ID,
            signo: 10,
            value: 0,
            thread_id: 555,
        },
        SigEvent {
            notify: SIGEV_THREAD_ID,
            signo: 0,
            value: 0,
            thread_id: 100,
        },
    ];
    for (n, ev) in bad.iter().enumerate() {
        assert_eq!(
            create_ev(&t, &c, 0, UserPtr::Valid(*ev)),
            Err(Errno::EINVAL),
            "{ev:?}"
        );
        assert_eq!(t.timer_gettime(&c, id(n as i32)), Err(Errno::EINVAL));
    }
    let next = bad.len() as i32;
    let good = [
        SigEvent {
            signo: 0,
            ..SigEvent::NONE
        },
        SigEvent {
            notify: SIGEV_THREAD_ID,
            signo: 64,
            value: 0,
            thread_id: 101,
        },
        SigEvent {
            notify: SIGEV_THREAD,
            signo: 1,
            ..SigEvent::NONE
        },
    ];
    for (n, ev) in good.iter().enumerate() {
        assert_eq!(
            create_ev(&t, &c, 0, UserPtr::Valid(*ev)),
            Ok(next + n as i32)
        );
    }
    assert_eq!(
        t.sigpending(0),
        good.len() as u64,
        "failed creates gave their unit back"
    );
}

#[test]
fn created_id_fault_is_efault_after_the_id_was_consumed() {
    let (t, c) = engine_and_root();
    for slot in [UserPtr::Null, UserPtr::Fault] {
        let r = t.timer_create(&c, 0, UserPtr::Valid(SigEvent::NONE), slot);
        assert_eq!(r, Err(Errno::EFAULT));
    }
    assert_eq!(create(&t, &c), Ok(2));
    assert_eq!(t.sigpending(0), 1);
}

#[test]
fn alarm_clocks_need_an_rtc_and_cap_wake_alarm() {
    let (t, root) = engine_and_root();
    let none = UserPtr::Valid(SigEvent::NONE);
    assert_eq!(
        create_ev(&t, &root, CLOCK_REALTIME_ALARM, none),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        create_ev(&t, &root, CLOCK_BOOTTIME_ALARM, none),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(create(&t, &root), Ok(2), "step 7 comes after the id");

    let t = engine_with(TimersConfig {
        alarm_rtc: true,
        ..TimersConfig::default()
    });
    let user = Cred::user(100, 1000, 1000);
    assert_eq!(
        create_ev(&t, &user, CLOCK_REALTIME_ALARM, none),
        Err(Errno::EPERM)
    );
    let capable = Cred {
        caps: user.caps.with(Cap::WAKE_ALARM),
        ..user
    };
    assert_eq!(create_ev(&t, &capable, CLOCK_BOOTTIME_ALARM, none), Ok(1));
}

#[test]
fn ids_are_linear_per_process_and_not_reused_before_a_wrap() {
    let t = engine();
    let a = Cred::root(100);
    let b = Cred::root(200);
    for want in 0..4 {
        assert_eq!(create(&t, &a), Ok(want));
    }
    t.timer_delete(&a, id(0)).unwrap();
    assert_eq!(create(&t, &a), Ok(4), "deleted 0 is not handed out again");
    assert_eq!(create(&t, &b), Ok(0), "another process has its own ids");
    assert_eq!(
        t.timer_gettime(&b, id(1)),
        Err(Errno::EINVAL),
        "a's id 1 is foreign to b"
    );
    assert_eq!(t.timer_delete(&b, id(3)), Err(Errno::EINVAL));
    assert!(t.timer_gettime(&a, id(3)).is_ok());
}

#[test]
fn small_id_space_wraps_skips_ids_in_use_and_fills_with_eagain() {
    let t = engine_with(TimersConfig {
        id_bits: 2,
        ..TimersConfig::default()
    });
    let c = Cred::root(100);
    for want in 0..4 {
        assert_eq!(create(&t, &c), Ok(want));
    }
    assert_eq!(create(&t, &c), Err(Errno::EAGAIN));
    assert_eq!(t.sigpending(0), 4, "EAGAIN gave its unit back");
    t.timer_delete(&c, id(2)).unwrap();
    assert_eq!(create(&t, &c), Ok(2), "wrapped past 0 and 1, both in use");
    t.timer_delete(&c, id(0)).unwrap();
    t.timer_delete(&c, id(3)).unwrap();
    assert_eq!(create(&t, &c), Ok(3));
    assert_eq!(create(&t, &c), Ok(0));
}

#[test]
fn restore_mode_takes_the_wanted_id_and_moves_the_counter() {
    let (t, c) = engine_and_root();
    let prctl = |a: [u64; 4]| t.prctl_timer_create_restore_ids(&c, a);
    assert_eq!(prctl([2, 0, 0, 0]), Ok(0));
    assert_eq!(prctl([3, 0, 0, 0]), Err(Errno::EINVAL));
    assert_eq!(prctl([1, 1, 0, 0]), Err(Errno::EINVAL));
    assert_eq!(prctl([0, 0, 0, 1]), Err(Errno::EINVAL));
    assert_eq!(create(&t, &c), Ok(0));
    assert_eq!(prctl([1, 0, 0, 0]), Ok(0));
    assert_eq!(prctl([2, 0, 0, 0]), Ok(1));
    let restore = |want: UserPtr<i32>| {
        t.timer_create(&c, 1, UserPtr::Valid(SigEvent::NONE), want)
            .map(TimerId::raw)
    };
    assert_eq!(restore(UserPtr::Valid(1_000_000)), Ok(1_000_000));
    assert_eq!(restore(UserPtr::Valid(1_000_000)), Err(Errno::EBUSY));
    assert_eq!(restore(UserPtr::Valid(0)), Err(Errno::EBUSY));
    assert_eq!(restore(UserPtr::Valid(-5)), Err(Errno::EINVAL));
    assert_eq!(restore(UserPtr::Null), Err(Errno::EFAULT));
    assert_eq!(restore(UserPtr::Fault), Err(Errno::EFAULT));
    // The sigevent fault and the clock still come first.
    let r = t.timer_create(&c, 99, UserPtr::Fault, UserPtr::Valid(-5));
    assert_eq!(r, Err(Errno::EFAULT));
    let r = t.timer_create(&c, 99, UserPtr::Valid(SigEvent::NONE), UserPtr::Valid(-5));
    assert_eq!(r, Err(Errno::EINVAL));
    assert_eq!(prctl([0, 0, 0, 0]), Ok(0));
    assert_eq!(create(&t, &c), Ok(1_000_001));
    assert_eq!(t.sigpending(0), 3);
}

#[test]
fn restoring_int_max_wraps_the_counter_to_zero() {
    let (t, c) = engine_and_root();
    assert_eq!(create(&t, &c), Ok(0));
    t.prctl_timer_create_restore_ids(&c, [1, 0, 0, 0]).unwrap();
    let r = t.timer_create(
        &c,
        1,
        UserPtr::Valid(SigEvent::NONE),
        UserPtr::Valid(i32::MAX),
    );
    assert_eq!(r.map(TimerId::raw), Ok(i32::MAX));
    t.prctl_timer_create_restore_ids(&c, [0, 0, 0, 0]).unwrap();
    assert_eq!(
        create(&t, &c),
        Ok(1),
        "counter wrapped to 0, which is in use"
    );
    assert_eq!(create(&t, &c), Ok(2));
}

#[test]
fn settime_rejects_null_faults_bad_timespecs_and_unknown_ids() {
    let (t, c) = engine_and_root();
    let tid = id(create(&t, &c).unwrap());
    let set = |id, spec| t.timer_settime(&c, id, 0, spec);
    assert_eq!(set(tid, UserPtr::Null), Err(Errno::EINVAL));
    assert_eq!(set(tid, UserPtr::Fault), Err(Errno::EFAULT));
    let ts = |sec, nsec| Timespec { sec, nsec };
    for bad in [ts(0, -1), ts(0, 1_000_000_000), ts(-1, 0)] {
        let as_value = ItimerSpec {
            interval: Timespec::ZERO,
            value: bad,
        };
        let as_interval = ItimerSpec {
            interval: bad,
            value: ts(1, 0),
        };
        assert_eq!(set(tid, UserPtr::Valid(as_value)), Err(Errno::EINVAL));
        assert_eq!(set(tid, UserPtr::Valid(as_interval)), Err(Errno::EINVAL));
        assert_eq!(set(id(77), UserPtr::Valid(as_value)), Err(Errno::EINVAL));
    }
    let ok = UserPtr::Valid(ItimerSpec::from_nanos(5, 0));
    assert_eq!(set(id(77), ok), Err(Errno::EINVAL));
    assert_eq!(set(id(-1), ok), Err(Errno::EINVAL));
    assert_eq!(set(tid, ok), Ok(ItimerSpec::ZERO));
    let other = Cred::root(200);
    assert_eq!(t.timer_settime(&other, tid, 0, ok), Err(Errno::EINVAL));
}

#[test]
fn gettime_getoverrun_delete_reject_unknown_negative_and_deleted_ids() {
    let (t, c) = engine_and_root();
    let tid = id(create(&t, &c).unwrap());
    for bad in [id(-1), id(1), id(i32::MAX)] {
        assert_eq!(t.timer_gettime(&c, bad), Err(Errno::EINVAL));
        assert_eq!(t.timer_getoverrun(&c, bad), Err(Errno::EINVAL));
        assert_eq!(t.timer_delete(&c, bad), Err(Errno::EINVAL));
    }
    assert_eq!(t.timer_getoverrun(&c, tid), Ok(0));
    assert_eq!(t.timer_delete(&c, tid), Ok(()));
    assert_eq!(t.timer_delete(&c, tid), Err(Errno::EINVAL));
    assert_eq!(t.timer_getoverrun(&c, tid), Err(Errno::EINVAL));
}

#[test]
fn rlimit_sigpending_is_per_real_uid_and_counts_every_timer() {
    let t = engine();
    let limited = |pid| Cred {
        rlimit_sigpending: 5,
        ..Cred::user(pid, 1000, 1000)
    };
    let a = limited(100);
    for want in 0..5 {
        assert_eq!(create(&t, &a), Ok(want));
    }
    assert_eq!(create(&t, &a), Err(Errno::EAGAIN));
    assert_eq!(
        create(&t, &limited(200)),
        Err(Errno::EAGAIN),
        "same uid, other process"
    );
    assert_eq!(
        create(&t, &Cred::user(300, 1001, 1000)),
        Ok(0),
        "another uid"
    );
    assert!(
        !t.charge_sigpending(1000, 5),
        "queued signals share the count"
    );
    assert_eq!(t.sigpending(1000), 5);
    t.timer_delete(&a, id(3)).unwrap();
    assert_eq!(create(&t, &a), Ok(5), "EAGAIN consumed no id");
    let zero = Cred {
        rlimit_sigpending: 0,
        ..Cred::root(400)
    };
    assert_eq!(create(&t, &zero), Err(Errno::EAGAIN), "root is not exempt");
}

#[test]
fn restore_id_is_checked_before_the_rlimit_charge_and_held_ids_after_it() {
    let t = engine();
    let c = Cred {
        rlimit_sigpending: 1,
        ..Cred::user(100, 1000, 1000)
    };
    assert_eq!(create(&t, &c), Ok(0));
    t.prctl_timer_create_restore_ids(&c, [1, 0, 0, 0]).unwrap();
    let restore = |want| {
        t.timer_create(&c, 1, UserPtr::Valid(SigEvent::NONE), want)
            .map(TimerId::raw)
    };
    assert_eq!(restore(UserPtr::Valid(-5)), Err(Errno::EINVAL));
    assert_eq!(restore(UserPtr::Null), Err(Errno::EFAULT));
    assert_eq!(
        restore(UserPtr::Valid(0)),
        Err(Errno::EAGAIN),
        "limit before EBUSY"
    );
    assert_eq!(restore(UserPtr::Valid(9)), Err(Errno::EAGAIN));
}

#[test]
fn proc_timers_lists_newest_first_in_linux_format() {
    let (t, c) = engine_and_root();
    let ev = |notify, signo, value, thread_id| {
        UserPtr::Valid(SigEvent {
            notify,
            signo,
            value,
            thread_id,
        })
    };
    create_ev(&t, &c, CLOCK_MONOTONIC, ev(SIGEV_NONE, 7, 0x1234, 0)).unwrap();
    create_ev(&t, &c, CLOCK_REALTIME, UserPtr::Null).unwrap();
    create_ev(
        &t,
        &c,
        CLOCK_BOOTTIME,
        ev(SIGEV_THREAD_ID, 40, u64::MAX, 101),
    )
    .unwrap();
    create_ev(&t, &c, CLOCK_TAI, ev(SIGEV_THREAD, 41, 0, 0)).unwrap();
    create_ev(&t, &c, CLOCK_MONOTONIC, UserPtr::Null).unwrap();
    t.timer_delete(&c, id(4)).unwrap();
    let want = "\
ID: 3
signal: 41/0000000000000000
notify: thread/pid.100
ClockID: 11
ID: 2
signal: 40/ffffffffffffffff
notify: signal/tid.101
ClockID: 7
ID: 1
signal: 14/0000000000000001
notify: signal/pid.100
ClockID: 0
ID: 0
signal: 7/0000000000001234
notify: none/pid.100
ClockID: 1
";
    assert_eq!(t.proc_timers(100), want);
    assert_eq!(t.proc_timers(200), "");
}
