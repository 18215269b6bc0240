//! POSIX per-process timers: `timer_create(2)`, `timer_settime(2)`, `timer_gettime(2)`,
//! `timer_getoverrun(2)`, `timer_delete(2)` and `prctl(PR_TIMER_CREATE_RESTORE_IDS)`, with
//! Linux 6.15+ semantics (reference §8, §9, §10) and the table design of seed 004.
//!
//! # Shape
//! - [`Timers`] is one engine instance (think: one kernel). Calls take the caller's [`Cred`]
//!   (its `tgid` is the process, `uid` and `rlimit_sigpending` pay for the timer).
//! - `table::TimerTable`: one table for all processes, `(tgid, id) -> timer`, with seed 004's
//!   lock layout (`roundup_pow_of_two(512 * CPUs)` stripes, one spin lock each) but hashed by
//!   process and *group* of eight consecutive ids, each stripe an open-addressing map of groups
//!   (`group_map`: one id inline in its cell, two or more in a one-line leaf) instead of a
//!   chain. Gettime/getoverrun take one stripe lock and the timer's own lock, nothing
//!   table-wide. Seed 004's chained hash, "mainline" (512 buckets, one lock) and "xarray"
//!   (per-process dense array) are kept in the bench crate to benchmark against (`uipc bench
//!   timers`); the table's module doc has the numbers: at 100k timers lookups about 6x faster
//!   than mainline and faster than xarray, and 2048 timers 512 ids apart cost about what seed
//!   004's buckets cost (117 KiB; xarray 16 MiB).
//! - `process`: per-process linear ids (`0, 1, 2, ...`, wrapping at `INT_MAX`, skipping ids in
//!   use, EAGAIN when none is free), restore mode, and RLIMIT_SIGPENDING per real uid.
//! - `driver`: per-clock-base min-heaps; fired by [`Timers::run_expired`] (deterministic, with
//!   a [`crate::ManualClock`]) or by the thread of [`Timers::start_thread`] (real time, asleep
//!   while nothing is armed). Why a heap: see its doc.
//! - `cpu`: CPU-time clocks through the embedder's [`CpuClocks`]; `procfs`: the
//!   `/proc/PID/timers` listing ([`Timers::proc_timers`]).
//! - Notification goes through the embedder's [`Notifier`]: the engine calls
//!   [`Notifier::queue`] when a timer fires; the embedder keeps the signal queued and, when the
//!   target takes it (or the signal is discarded), passes it to [`Timers::dequeue_signal`],
//!   which says whether it is still valid and with which `si_overrun`. At most one signal per
//!   timer is queued; expirations meanwhile become the overrun.
//!
//! # Lock order
//! Registry shard, uid shard, process id set and table stripe locks are leaves, never nested
//! with each other or held while another engine lock is taken. Timer state -> driver heap,
//! timer state -> driver kick, timer state -> CPU timer list; those three are leaves. The
//! notifier is called with no engine lock held, so it may call back into the engine; the CPU
//! clock source is called under a timer's state lock by settime/gettime, so it must not.
//!
//! # Async-signal safety (§10)
//! The calls take mutexes, so an embedder that serves them inside the calling process (the
//! preload library's `--timers`) runs them with the caller's signals blocked. What the engine
//! guarantees on top: `timer_settime`, `timer_gettime` and `timer_getoverrun` allocate and free
//! nothing for a timer that is not CPU-time (the driver's heaps get their room at
//! `timer_create`, see `driver`), and no engine lock they take is held by another thread while
//! it allocates or frees, except: `timer_create` and `timer_delete` (table stripe, registry and
//! process locks), the CPU timer list (`cpu.rs`), and the last reference to a timer deleted by
//! another thread meanwhile, which the caller then drops. `timer_create` and `timer_delete`
//! themselves allocate.
//!
//! # Process lifecycle (§9)
//! [`Timers::exit_process`] and [`Timers::exec_process`] delete the process's timers; exit
//! forgets its id counter and restore mode, exec keeps the counter (as Linux 6.18 does) and
//! resets restore mode; [`Timers::fork_process`] gives the child nothing.
//!
//! # Not supported
//! - CPU-time clocks without a [`CpuClocks`] source ([`TimersConfig::cpu_clocks`]): valid CPU
//!   clock ids get EOPNOTSUPP where Linux creates a timer. With a source they work (`cpu.rs`),
//!   expiring when polled (every `run_expired`; every 10 ms from the driver thread while any
//!   is armed), which like Linux's tick-based check is not exact. Invalid CPU clock ids and
//!   dynamic fd clocks fail as on Linux either way.
//! - Alarm clocks are modelled, not backed: without [`TimersConfig::alarm_rtc`] (the default,
//!   like a machine with no RTC wake alarm) they fail with EOPNOTSUPP at Linux's step 7; with
//!   it they need CAP_WAKE_ALARM and run on the realtime/boottime bases without waking anything.
//! - Time namespaces: absolute times are taken as host times.
//! - The signal queue is the embedder's: SIG_IGN (keep an ignored timer signal queued), and
//!   the side effects of queueing one signal on others (SIGCONT flushing pending stop signals
//!   and the reverse) happen there, not here.

mod cpu;
mod create;
mod driver;
mod engine;
mod group_map;
mod listing;
mod ops;
mod process;
mod procfs;
mod siginfo;
mod stripe_lock;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod table;
#[cfg(not(feature = "internals"))]
#[allow(dead_code, unused_imports)] // what only the bench and the tests call
pub(crate) mod table;
mod timer;
pub mod types;

use std::thread::JoinHandle;

pub use cpu::{CpuClockKind, CpuClocks, CpuTarget, HostCpuClocks};
pub use create::{
    PR_TIMER_CREATE_RESTORE_IDS, PR_TIMER_CREATE_RESTORE_IDS_GET, PR_TIMER_CREATE_RESTORE_IDS_OFF,
    PR_TIMER_CREATE_RESTORE_IDS_ON,
};
pub use driver::{DriverSleep, DriverState};
use engine::Inner;
pub use engine::{NoNotifier, Notifier};
pub use siginfo::{take_pending_signal, SIGINFO_BYTES};
#[cfg(not(feature = "internals"))]
use table::TimerTable;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use table::{default_bucket_count, TimerTable};
pub use timer::{Timer, TimerSignal};
pub use types::*;

use crate::clock::Clock;
use crate::cred::Cred;
use crate::errno::Result;
use crate::Tgid;

pub(crate) use crate::sync::lock;

/// Engine-wide settings.
#[derive(Clone)]
pub struct TimersConfig {
    /// Table stripes (Linux's buckets); `None` sizes as Linux does:
    /// `roundup_pow_of_two(512 * CPUs)`.
    pub buckets: Option<usize>,
    /// Bits of the per-process id space: ids are `0..2^id_bits`. Linux: 31 (`INT_MAX`). Smaller
    /// values exist so tests can exhaust the space cheaply.
    pub id_bits: u32,
    /// Whether an RTC wake alarm exists, making the `_ALARM` clocks usable.
    pub alarm_rtc: bool,
    /// The source of CPU time for the CPU-time clocks; without one they are EOPNOTSUPP.
    pub cpu_clocks: Option<std::sync::Arc<dyn CpuClocks>>,
}

impl std::fmt::Debug for TimersConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimersConfig")
            .field("buckets", &self.buckets)
            .field("id_bits", &self.id_bits)
            .field("alarm_rtc", &self.alarm_rtc)
            .field("cpu_clocks", &self.cpu_clocks.is_some())
            .finish()
    }
}

impl Default for TimersConfig {
    fn default() -> Self {
        TimersConfig {
            buckets: None,
            id_bits: 31,
            alarm_rtc: false,
            cpu_clocks: None,
        }
    }
}

/// One POSIX timer engine. See the module doc.
pub struct Timers {
    inner: std::sync::Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl Timers {
    /// An engine reading `clock` and notifying through `notifier`, sized as Linux.
    pub fn new(clock: std::sync::Arc<dyn Clock>, notifier: std::sync::Arc<dyn Notifier>) -> Timers {
        Timers::with_config(clock, notifier, TimersConfig::default())
    }

    /// An engine with explicit settings.
    pub fn with_config(
        clock: std::sync::Arc<dyn Clock>,
        notifier: std::sync::Arc<dyn Notifier>,
        config: TimersConfig,
    ) -> Timers {
        let table = match config.buckets {
            Some(n) => TimerTable::with_buckets(n),
            None => TimerTable::new(),
        };
        let bits = config.id_bits.clamp(1, 31);
        Timers {
            inner: std::sync::Arc::new(Inner {
                clock,
                notifier,
                table,
                procs: process::Registry::new(),
                sigpending: process::SigpendingCounts::new(),
                driver: driver::Driver::new(),
                id_mask: ((1u64 << bits) - 1) as u32,
                alarm_rtc: config.alarm_rtc,
                cpu: config.cpu_clocks,
                cpu_timers: cpu::CpuTimers::default(),
                created: crate::sync::AtomicU64::new(0),
            }),
            thread: None,
        }
    }

    /// `timer_create(clock, event, created_id)`. `event` is the sigevent pointer (NULL means
    /// SIGALRM with `sival_int = id`); `created_id` is the `timer_t *` (its current content is
    /// the wanted id in restore mode; NULL or Fault gives EFAULT where Linux copies).
    pub fn timer_create(
        &self,
        cred: &Cred,
        clock: i32,
        event: UserPtr<SigEvent>,
        created_id: UserPtr<i32>,
    ) -> Result<TimerId> {
        create::timer_create(&self.inner, cred, clock, event, created_id)
    }

    /// `timer_settime(id, flags, new, old)`; returns the old setting.
    pub fn timer_settime(
        &self,
        cred: &Cred,
        id: TimerId,
        flags: i32,
        new: UserPtr<ItimerSpec>,
    ) -> Result<ItimerSpec> {
        ops::timer_settime(&self.inner, cred, id, flags, new)
    }

    /// `timer_gettime(id)`.
    pub fn timer_gettime(&self, cred: &Cred, id: TimerId) -> Result<ItimerSpec> {
        ops::timer_gettime(&self.inner, cred, id)
    }

    /// `timer_getoverrun(id)`.
    pub fn timer_getoverrun(&self, cred: &Cred, id: TimerId) -> Result<i32> {
        ops::timer_getoverrun(&self.inner, cred, id)
    }

    /// `timer_delete(id)`.
    pub fn timer_delete(&self, cred: &Cred, id: TimerId) -> Result<()> {
        ops::timer_delete(&self.inner, cred, id)
    }

    /// `prctl(PR_TIMER_CREATE_RESTORE_IDS, arg2, arg3, arg4, arg5)`.
    pub fn prctl_timer_create_restore_ids(&self, cred: &Cred, args: [u64; 4]) -> Result<i32> {
        create::prctl_restore_ids(&self.inner, cred, args)
    }

    /// The target takes (or discards) a signal the notifier queued. `None`: drop it.
    pub fn dequeue_signal(&self, signal: &TimerSignal) -> Option<SigInfo> {
        ops::dequeue_signal(&self.inner, signal)
    }

    /// Whether `signal` is still its timer's queued signal: the timer was neither deleted
    /// nor set again since it was queued. Linux drops a signal that is not at its dequeue,
    /// so an embedder that hands signals on later checks just before, and drops (dequeues)
    /// one that is not.
    pub fn signal_is_live(&self, signal: &TimerSignal) -> bool {
        ops::signal_is_live(signal)
    }

    /// Fires every timer due by the clock's current time. Returns how many fired.
    pub fn run_expired(&self) -> usize {
        ops::run_expired(&self.inner)
    }

    /// Tells the engine the wall clock was set: the driver thread re-reads its deadlines now.
    pub fn clock_was_set(&self) {
        self.inner.driver.kick();
    }

    /// RLIMIT_SIGPENDING units held by real uid `uid` (timers plus embedder charges).
    pub fn sigpending(&self, uid: u32) -> u64 {
        self.inner.sigpending.count(uid)
    }

    /// Charges one RLIMIT_SIGPENDING unit for a signal the embedder queues (Linux counts queued
    /// signals and timers together). False: over the limit.
    pub fn charge_sigpending(&self, uid: u32, limit: u64) -> bool {
        self.inner.sigpending.try_charge(uid, limit)
    }

    /// Gives back a unit taken with [`Timers::charge_sigpending`].
    pub fn uncharge_sigpending(&self, uid: u32) {
        self.inner.sigpending.uncharge(uid)
    }

    /// The last thread of `tgid` exited: delete its timers (`exit_itimers`).
    pub fn exit_process(&self, tgid: i32) {
        let tgid = Tgid::new(tgid);
        let Some(proc) = self.inner.procs.remove(tgid) else {
            return;
        };
        for id in proc.kill() {
            if let Some(timer) = self.inner.table.remove(tgid, id) {
                // Its queued signals die with the process: the units come back now.
                ops::kill_timer(&self.inner, &timer, true);
            }
        }
    }

    /// `tgid` called execve: its timers are deleted; the id counter carries on (Linux 6.18
    /// keeps it in `signal_struct`, which survives exec: ids 0 and 1 before exec, 2 after,
    /// as the host shows) and restore mode is reset.
    pub fn exec_process(&self, tgid: i32) {
        let next = self.inner.procs.get(Tgid::new(tgid)).map(|p| p.next_id());
        self.exit_process(tgid);
        if let Some(next) = next {
            self.inner
                .procs
                .get_or_create(Tgid::new(tgid))
                .set_next_id(next);
        }
    }

    /// The value of `tgid`'s id counter: the id its next `timer_create` tries first (0 for a
    /// process the engine holds nothing for). With [`Timers::resume_timer_ids`], what an
    /// embedder whose engine does not outlive a program image carries over execve.
    pub fn next_timer_id(&self, tgid: i32) -> u32 {
        self.inner
            .procs
            .get(Tgid::new(tgid))
            .map_or(0, |p| p.next_id())
    }

    /// Sets `tgid`'s id counter to `next`, as [`Timers::exec_process`] leaves it, for an
    /// engine that did not see the process's earlier program images (a preload library makes
    /// one engine per image and passes the counter to the next image itself). Its timers and
    /// restore mode are left as they are.
    pub fn resume_timer_ids(&self, tgid: i32, next: u32) {
        self.inner
            .procs
            .get_or_create(Tgid::new(tgid))
            .set_next_id(next);
    }

    /// `parent` forked `child`: the child inherits no timers and starts its ids at 0. Any state
    /// left under the child's tgid (a pid reused without an exit) is discarded.
    pub fn fork_process(&self, _parent: i32, child: i32) {
        self.exit_process(child);
    }

    /// `/proc/PID/timers` of process `tgid`: its timers, newest first.
    pub fn proc_timers(&self, tgid: i32) -> String {
        procfs::render(&self.inner, Tgid::new(tgid))
    }

    /// The shared table, for benchmarks and inspection (`internals` feature).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn table(&self) -> &TimerTable<Timer> {
        &self.inner.table
    }

    /// Driver entries queued, stale ones included (for tests of the lazy cancel).
    pub fn driver_entries(&self) -> usize {
        self.inner.driver.queued_entries()
    }

    /// The driver heaps' capacities, summed (for tests that arming never grows them).
    pub fn driver_capacity(&self) -> usize {
        self.inner.driver.capacity()
    }

    /// The driver's sleeper (the thread of [`Timers::start_thread`], or an embedder's loop in
    /// [`Timers::wait_for_work`]): asleep or not, for how long, whether a kick is pending, how
    /// many times it woke up.
    pub fn driver_state(&self) -> DriverState {
        self.inner.driver.state()
    }

    /// How long until the next timer is due, for an embedder that runs its own driver loop
    /// (zero if one is overdue; `None` with nothing armed). CPU-time timers, which are polled,
    /// cap it at 10 ms while any is armed, as in [`Timers::start_thread`].
    pub fn next_deadline(&self) -> Option<std::time::Duration> {
        let mut timeout = self.inner.driver.next_deadline(&*self.inner.clock);
        if self.inner.cpu_timers.any_armed() {
            let poll = std::time::Duration::from_millis(10);
            timeout = Some(timeout.map_or(poll, |t| t.min(poll)));
        }
        timeout
    }

    /// Sleeps until a timer is armed earlier than before, [`Timers::clock_was_set`] is called,
    /// or `timeout` passes: the sleep of an embedder's own driver loop (one such loop per
    /// engine, and not together with [`Timers::start_thread`]).
    pub fn wait_for_work(&self, timeout: Option<std::time::Duration>) {
        self.inner.driver.sleep(timeout);
    }

    /// Starts the real-time driver thread (for a [`crate::SystemClock`]). It sleeps until the
    /// next expiry, or indefinitely while nothing is armed, and stops when the engine drops.
    pub fn start_thread(&mut self) {
        if self.thread.is_some() {
            return;
        }
        let inner = self.inner.clone();
        self.thread = Some(std::thread::spawn(move || loop {
            ops::run_expired(&inner);
            let mut timeout = inner.driver.next_deadline(&*inner.clock);
            if inner.cpu_timers.any_armed() {
                let poll = std::time::Duration::from_millis(10);
                timeout = Some(timeout.map_or(poll, |t| t.min(poll)));
            }
            if !inner.driver.sleep(timeout) {
                break;
            }
        }));
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.inner.driver.shutdown();
            let _ = t.join();
        }
    }
}
