//! CPU-time clocks (`posix-cpu-timers.c`), through a source of CPU time the embedder supplies.
//!
//! Clock ids: `CLOCK_PROCESS_CPUTIME_ID` and `CLOCK_THREAD_CPUTIME_ID` measure the caller's
//! process or thread; a negative id encodes `~pid << 3 | per_thread << 2 | kind` (kind 0 PROF,
//! 1 VIRT, 2 SCHED; 3 is invalid; `(id & 7) == 3` is a dynamic fd clock instead). `pid` 0 is the
//! caller; a thread must be in the caller's thread group; a process must exist. Failures are
//! EINVAL at `timer_create`'s last step, after an id was consumed, as on Linux.
//!
//! Semantics that differ from the hrtimer clocks, kept as Linux has them: an expiry of 0 means
//! disarmed (so a disarmed SIGEV_NONE CPU timer reads 0), a one-shot timer's expiry is cleared
//! when it fires, arming in the past fires at once inside `timer_settime`, and a target that is
//! gone makes `timer_settime` fail with ESRCH and `timer_gettime` read 0.
//!
//! CPU time advances only while the target runs, so these timers cannot sit in the driver's
//! time-ordered heaps: armed ones are kept in one list that every `run_expired` polls, sampling
//! each target's clock (Linux checks them at the scheduler tick). The driver thread polls every
//! 10 ms while the list is not empty, and not at all otherwise.
//!
//! Locks: the list's mutex is a leaf, taken inside a timer's state lock (arm) or alone (poll);
//! the embedder's source is called with no engine lock held, except by `timer_settime` and
//! `timer_gettime`, which sample under the timer's state lock (Linux samples under `it_lock`).

use super::lock;
use super::timer::{Timer, TimerClock};
use crate::clock::Nanos;
use crate::cred::Cred;
use crate::sync::{Arc, Mutex, Ordering};

/// Whose CPU time a clock measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuTarget {
    /// All threads of process `tgid`.
    Process(i32),
    /// Thread `tid`.
    Thread(i32),
}

/// Which CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuClockKind {
    /// User plus system time (`CPUCLOCK_PROF`).
    Prof,
    /// User time (`CPUCLOCK_VIRT`).
    Virt,
    /// Scheduler runtime (`CPUCLOCK_SCHED`), what `CLOCK_*_CPUTIME_ID` read.
    Sched,
}

/// The embedder's source of CPU time.
pub trait CpuClocks: Send + Sync + 'static {
    /// The CPU time `target` has used, in nanoseconds, or `None` if it does not exist.
    fn cpu_time(&self, target: CpuTarget, kind: CpuClockKind) -> Option<Nanos>;
}

/// CPU time read from the host's own CPU clocks: for an embedder whose processes and threads
/// are the host's (a preload library, a differential run). The clock id is the kernel's
/// `MAKE_PROCESS_CPUCLOCK` / `MAKE_THREAD_CPUCLOCK` encoding: `!id << 3 | kind`, bit 2 for a
/// thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCpuClocks;

impl CpuClocks for HostCpuClocks {
    fn cpu_time(&self, target: CpuTarget, kind: CpuClockKind) -> Option<Nanos> {
        let kind = match kind {
            CpuClockKind::Prof => 0,
            CpuClockKind::Virt => 1,
            CpuClockKind::Sched => 2,
        };
        let clock = match target {
            CpuTarget::Process(pid) => (!pid << 3) | kind,
            CpuTarget::Thread(tid) => (!tid << 3) | 4 | kind,
        };
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes a timespec into a live local; a bad clock id only makes the call fail.
        let r = unsafe { libc::clock_gettime(clock, &mut ts) };
        (r == 0).then(|| ts.tv_sec * crate::clock::NSEC_PER_SEC + ts.tv_nsec)
    }
}

/// How a CPU clock id resolved.
pub(crate) enum CpuClockId {
    /// A well-formed clock; whether its target exists is checked at the last step.
    Clock(CpuTarget, CpuClockKind),
    /// A clock field of 3: EINVAL at the last step.
    Invalid,
}

/// Decodes `id` for `cred`. `None`: not a CPU clock id (a dynamic clock or a positive id).
pub(crate) fn decode(id: i32, cred: &Cred) -> Option<CpuClockId> {
    match id {
        super::CLOCK_PROCESS_CPUTIME_ID => Some(CpuClockId::Clock(
            CpuTarget::Process(cred.tgid.get()),
            CpuClockKind::Sched,
        )),
        super::CLOCK_THREAD_CPUTIME_ID => Some(CpuClockId::Clock(
            CpuTarget::Thread(cred.tid),
            CpuClockKind::Sched,
        )),
        c if c < 0 && c & 7 != 3 => {
            let kind = match c & 3 {
                0 => CpuClockKind::Prof,
                1 => CpuClockKind::Virt,
                2 => CpuClockKind::Sched,
                _ => return Some(CpuClockId::Invalid),
            };
            let pid = !(c >> 3);
            let target = match (c & 4 != 0, pid) {
                (true, 0) => CpuTarget::Thread(cred.tid),
                (false, 0) => CpuTarget::Process(cred.tgid.get()),
                (true, tid) => CpuTarget::Thread(tid),
                (false, tgid) => CpuTarget::Process(tgid),
            };
            Some(CpuClockId::Clock(target, kind))
        }
        _ => None,
    }
}

struct Entry {
    timer: Arc<Timer>,
    arm_seq: u64,
    /// The expiry armed under `arm_seq` (any change of it bumps the sequence).
    expires: Nanos,
}

/// The armed CPU timers. See the module doc.
#[derive(Default)]
pub(crate) struct CpuTimers {
    armed: Mutex<Vec<Entry>>,
}

impl CpuTimers {
    /// Adds an armed timer. Returns true if the list was empty (the driver, which polls only
    /// while the list holds a timer, must be kicked). Entry: its state lock is held and
    /// `arm_seq` was just taken.
    pub(crate) fn arm(&self, timer: &Arc<Timer>, arm_seq: u64, expires: Nanos) -> bool {
        let mut armed = lock(&self.armed);
        let first = armed.is_empty();
        if armed.len() > 64 {
            armed.retain(|e| e.timer.arm_seq.load(Ordering::Acquire) == e.arm_seq);
        }
        armed.push(Entry {
            timer: timer.clone(),
            arm_seq,
            expires,
        });
        first
    }

    /// The live armed timers whose clock reached their expiry, removed from the list. The
    /// source is sampled with no lock held.
    pub(crate) fn take_expired(&self, source: &dyn CpuClocks) -> Vec<(Arc<Timer>, u64)> {
        let entries = std::mem::take(&mut *lock(&self.armed));
        let mut due = Vec::new();
        let mut keep = Vec::new();
        for e in entries {
            if e.timer.arm_seq.load(Ordering::Acquire) != e.arm_seq {
                continue;
            }
            let TimerClock::Cpu(target, kind) = e.timer.clock else {
                continue;
            };
            // A vanished target's timer never fires again (Linux drops it with the task).
            match source.cpu_time(target, kind) {
                Some(now) if now >= e.expires => due.push((e.timer, e.arm_seq)),
                Some(_) => keep.push(e),
                None => {}
            }
        }
        lock(&self.armed).extend(keep);
        due
    }

    /// Whether any entry is queued (the driver thread then polls).
    pub(crate) fn any_armed(&self) -> bool {
        !lock(&self.armed).is_empty()
    }
}

/// `bump_cpu_timer`: the same arithmetic as `hrtimer_forward`, but a no-op before expiry.
pub(crate) fn bump(expires: &mut Nanos, now: Nanos, interval: Nanos) -> i64 {
    if interval == 0 || now < *expires {
        return 0;
    }
    super::timer::forward(expires, now, interval)
}
