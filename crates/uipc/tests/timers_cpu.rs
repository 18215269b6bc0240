//! CPU-time clocks through an embedder-supplied source (posix-cpu-timers semantics).

mod common;
use common::Recorder;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uipc::timers::*;
use uipc::{Cred, Errno, ManualClock};

const MS: i64 = 1_000_000;

/// CPU time per target, moved by hand.
#[derive(Default)]
struct FakeCpu(Mutex<HashMap<CpuTarget, i64>>);

impl CpuClocks for FakeCpu {
    fn cpu_time(&self, target: CpuTarget, _kind: CpuClockKind) -> Option<i64> {
        self.0.lock().unwrap().get(&target).copied()
    }
}

impl FakeCpu {
    fn set(&self, target: CpuTarget, nanos: i64) {
        self.0.lock().unwrap().insert(target, nanos);
    }
    fn forget(&self, target: CpuTarget) {
        self.0.lock().unwrap().remove(&target);
    }
}

struct Rig {
    cpu: Arc<FakeCpu>,
    rec: Arc<Recorder>,
    t: Timers,
    c: Cred,
}

fn rig() -> Rig {
    let cpu = Arc::new(FakeCpu::default());
    cpu.set(CpuTarget::Process(100), 0);
    cpu.set(CpuTarget::Thread(100), 0);
    cpu.set(CpuTarget::Process(1), 5 * MS);
    let rec = Arc::new(Recorder::default());
    let t = Timers::with_config(
        Arc::new(ManualClock::new(1000)),
        rec.clone(),
        TimersConfig {
            cpu_clocks: Some(cpu.clone()),
            ..TimersConfig::default()
        },
    );
    Rig {
        cpu,
        rec,
        t,
        c: Cred::root(100),
    }
}

impl Rig {
    fn create(&self, clock: i32, ev: SigEvent) -> Result<TimerId, Errno> {
        self.t
            .timer_create(&self.c, clock, UserPtr::Valid(ev), UserPtr::Valid(0))
    }
    /// A timer on `clock` that sends signal 10 with `value`.
    fn signalling(&self, clock: i32, value: u64) -> TimerId {
        self.create(clock, SigEvent::signal(10, value)).unwrap()
    }
    fn set(&self, id: TimerId, flags: i32, value: i64, interval: i64) -> Result<ItimerSpec, Errno> {
        let spec = UserPtr::Valid(ItimerSpec::from_nanos(value, interval));
        self.t.timer_settime(&self.c, id, flags, spec)
    }
    fn get(&self, id: TimerId) -> ItimerSpec {
        self.t.timer_gettime(&self.c, id).unwrap()
    }
}

fn nanos(ts: Timespec) -> i64 {
    ts.sec * 1_000_000_000 + ts.nsec
}

/// `~pid << 3 | per_thread << 2 | kind`, as glibc's MAKE_*_CPUCLOCK.
fn cpu_clock_id(pid: i32, thread: bool, kind: i32) -> i32 {
    (!pid << 3) | (thread as i32) << 2 | kind
}

#[test]
fn without_a_source_valid_cpu_clocks_are_eopnotsupp_and_invalid_ones_einval() {
    let t = Timers::new(Arc::new(ManualClock::new(1000)), Arc::new(NoNotifier));
    let c = Cred::root(100);
    let mk = |clock| t.timer_create(&c, clock, UserPtr::Valid(SigEvent::NONE), UserPtr::Valid(0));
    assert_eq!(mk(CLOCK_PROCESS_CPUTIME_ID), Err(Errno::EOPNOTSUPP));
    assert_eq!(mk(CLOCK_THREAD_CPUTIME_ID), Err(Errno::EOPNOTSUPP));
    assert_eq!(mk(cpu_clock_id(0, false, 2)), Err(Errno::EOPNOTSUPP));
    assert_eq!(mk(cpu_clock_id(0, true, 3)), Err(Errno::EINVAL));
}

#[test]
fn cpu_clock_targets_are_checked_at_the_last_step() {
    let r = rig();
    let none = SigEvent::NONE;
    assert_eq!(
        r.create(CLOCK_PROCESS_CPUTIME_ID, none).map(TimerId::raw),
        Ok(0)
    );
    assert_eq!(
        r.create(CLOCK_THREAD_CPUTIME_ID, none).map(TimerId::raw),
        Ok(1)
    );
    assert_eq!(
        r.create(cpu_clock_id(0, false, 0), none).map(TimerId::raw),
        Ok(2)
    );
    assert_eq!(
        r.create(cpu_clock_id(1, false, 2), none).map(TimerId::raw),
        Ok(3),
        "pid 1"
    );
    let refused = [
        (cpu_clock_id(1, true, 2), "foreign thread"),
        (cpu_clock_id(777, false, 2), "no such pid"),
        (cpu_clock_id(0, true, 3), "clock field 3"),
    ];
    for (clock, why) in refused {
        assert_eq!(r.create(clock, none), Err(Errno::EINVAL), "{why}");
    }
    assert_eq!(
        r.create(CLOCK_MONOTONIC, none).map(TimerId::raw),
        Ok(7),
        "ids were consumed"
    );
    assert_eq!(r.t.sigpending(0), 5);
}

#[test]
fn cpu_timer_fires_when_the_target_has_used_enough_cpu() {
    let r = rig();
    let id = r.signalling(CLOCK_PROCESS_CPUTIME_ID, 3);
    r.cpu.set(CpuTarget::Process(100), 20 * MS);
    assert_eq!(r.set(id, 0, 10 * MS, 0), Ok(ItimerSpec::ZERO));
    assert_eq!(nanos(r.get(id).value), 10 * MS);
    r.cpu.set(CpuTarget::Process(100), 29 * MS);
    assert_eq!(r.t.run_expired(), 0);
    assert_eq!(nanos(r.get(id).value), MS);
    r.cpu.set(CpuTarget::Process(100), 30 * MS);
    assert_eq!(r.t.run_expired(), 1);
    let sig = r.rec.0.lock().unwrap().pop().unwrap();
    assert_eq!(sig.value, 3);
    assert_eq!(
        r.get(id),
        ItimerSpec::ZERO,
        "a fired one-shot CPU timer is disabled"
    );
    assert_eq!(r.t.dequeue_signal(&sig).unwrap().overrun, 0);
}

#[test]
fn arming_in_the_past_fires_inside_settime_and_periodic_overrun_is_bumped() {
    let r = rig();
    let id = r.signalling(CLOCK_THREAD_CPUTIME_ID, 0);
    r.cpu.set(CpuTarget::Thread(100), 50 * MS);
    r.set(id, TIMER_ABSTIME, 5 * MS, 10 * MS).unwrap();
    let sig = r.rec.0.lock().unwrap().pop().expect("fired at once");
    // Pending: gettime moves the expiry past now (5 -> 55 ms: 5 periods).
    assert_eq!(nanos(r.get(id).value), 5 * MS);
    r.cpu.set(CpuTarget::Thread(100), 71 * MS);
    let info = r.t.dequeue_signal(&sig).unwrap();
    assert_eq!(
        info.overrun, 6,
        "5 periods seen by gettime, 1 more at delivery, minus one"
    );
    assert_eq!(nanos(r.get(id).value), 4 * MS);
}

#[test]
fn disarmed_sigev_none_cpu_timer_reads_zero_unlike_hrtimer_ones() {
    let r = rig();
    let id = r.create(CLOCK_PROCESS_CPUTIME_ID, SigEvent::NONE).unwrap();
    r.set(id, 0, 100 * MS, 0).unwrap();
    assert_eq!(nanos(r.get(id).value), 100 * MS);
    r.cpu.set(CpuTarget::Process(100), 200 * MS);
    assert_eq!(
        r.get(id),
        ItimerSpec::ZERO,
        "expired one-shot SIGEV_NONE reads 0"
    );
    r.set(id, 0, 100 * MS, 0).unwrap();
    let old = r.set(id, 0, 0, 0).unwrap();
    assert_eq!(nanos(old.value), 100 * MS);
    assert_eq!(r.get(id), ItimerSpec::ZERO);
    assert_eq!(r.t.run_expired(), 0);
    assert!(r.rec.0.lock().unwrap().is_empty());
}

#[test]
fn a_vanished_target_gives_esrch_on_settime_and_zero_on_gettime() {
    let r = rig();
    let id = r.signalling(cpu_clock_id(1, false, 2), 0);
    r.set(id, 0, 10 * MS, 0).unwrap();
    r.cpu.forget(CpuTarget::Process(1));
    assert_eq!(r.get(id), ItimerSpec::ZERO);
    assert_eq!(r.set(id, 0, 10 * MS, 0), Err(Errno::ESRCH));
    assert_eq!(r.t.run_expired(), 0);
}
