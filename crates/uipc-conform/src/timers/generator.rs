//! The operation generator of `uipc conform timers`: ids, sigevents, id slots and itimerspecs,
//! drawn from a seeded generator and biased towards the interesting cases.

use super::host::host_now;
use super::SEC;
use crate::rng::Rng;
use uipc::timers::*;

/// The state the generator needs: live and dead ids, clocks, whether restore mode is on.
pub(super) struct Gen {
    pub(super) rng: Rng,
    pub(super) live: Vec<(i32, i32)>, // (id, clock)
    pub(super) dead: Vec<i32>,
    pub(super) restore: bool,
    pub(super) pid: i32,
}

/// Clock ids drawn for timer_create: the timer clocks (twice as often), the untimed ones, the
/// alarm clocks, an unknown one, and CPU clocks: the caller's process and thread
/// (`CLOCK_*_CPUTIME_ID`; `~0 << 3 | kind` for PROF, VIRT, SCHED; `| 4` for the thread),
/// process 1 (allowed), a thread of process 1 and an unused pid (both EINVAL).
pub(super) const CLOCKS: [i32; 24] = [
    0,
    1,
    7,
    11,
    0,
    1,
    7,
    11,
    4,
    5,
    6,
    8,
    9,
    10,
    2,
    3,
    -8,
    -7,
    -6,
    -2,
    -14,
    -10,
    (!4_000_000 << 3) | 2,
    2,
];

impl Gen {
    pub(super) fn id(&mut self) -> i32 {
        match self.rng.below(10) {
            0..=6 if !self.live.is_empty() => {
                self.live[self.rng.below(self.live.len() as u64) as usize].0
            }
            7 if !self.dead.is_empty() => *self.rng.pick(&self.dead),
            8 => self.rng.range(0, 200) as i32,
            _ => *self.rng.pick(&[-1, i32::MIN, i32::MAX, 1_000_000]),
        }
    }

    pub(super) fn event(&mut self) -> UserPtr<SigEvent> {
        match self.rng.below(20) {
            0 => return UserPtr::Null,
            1 => return UserPtr::Fault,
            2..=9 => return UserPtr::Valid(SigEvent::NONE),
            _ => {}
        }
        let notify = *self.rng.pick(&[0, 0, 2, 4, 4, 1, 3, 5, 6, 8, -1]);
        let signo = match self.rng.below(8) {
            0 => *self.rng.pick(&[0, -1, 65, 64, 1, i32::MAX]),
            // Never SIGKILL or SIGSTOP (they cannot be blocked and would end or stop the child),
            // nor SIGCHLD, SIGCONT and the stop signals: queueing one of those flushes others
            // from the pending queue (a signal-queue effect the embedder owns, not the engine).
            _ => match self.rng.range(1, 57) as i32 {
                s if s >= 16 => s + 7,
                s if s >= 9 => s + 1,
                s => s,
            },
        };
        let thread_id = if self.rng.chance(3, 4) {
            self.pid
        } else {
            *self.rng.pick(&[1, 0, -1, self.pid + 1])
        };
        UserPtr::Valid(SigEvent {
            notify,
            signo,
            value: self.rng.next_u64(),
            thread_id,
        })
    }

    pub(super) fn slot(&mut self) -> UserPtr<i32> {
        if self.rng.chance(1, 40) {
            return *self.rng.pick(&[UserPtr::Null, UserPtr::Fault]);
        }
        if !self.restore {
            return UserPtr::Valid(0);
        }
        UserPtr::Valid(match self.rng.below(6) {
            0 => self.id(),
            1 => i32::MAX,
            2 => *self.rng.pick(&[-5, i32::MIN]),
            _ => self.rng.range(0, 300) as i32,
        })
    }

    pub(super) fn spec(&mut self, clock: i32) -> (i32, UserPtr<ItimerSpec>) {
        match self.rng.below(30) {
            0 => return (0, UserPtr::Null),
            1 => return (0, UserPtr::Fault),
            2 => {
                let bad = Timespec {
                    sec: *self.rng.pick(&[-1, 0, 5]),
                    nsec: *self.rng.pick(&[-1, SEC, 0]),
                };
                let good = Timespec { sec: 100, nsec: 0 };
                let s = if self.rng.chance(1, 2) {
                    ItimerSpec {
                        interval: bad,
                        value: good,
                    }
                } else {
                    ItimerSpec {
                        interval: good,
                        value: bad,
                    }
                };
                return (0, UserPtr::Valid(s));
            }
            _ => {}
        }
        let interval = match self.rng.below(4) {
            0 => self.rng.range(SEC, 100 * SEC),
            1 => self.rng.range(1, SEC / 1000),
            _ => 0,
        };
        let (flags, value) = match self.rng.below(8) {
            0 => (0, 0),
            1 | 2 => (1, host_now(clock) + self.rng.range(10 * SEC, 1000 * SEC)),
            // In the past (at most half the clock's reading, which matters for CPU clocks that
            // may have counted less than a second), with an ignored flag bit.
            3 => (
                1 | 2,
                self.rng.range(1, (host_now(clock) / 2).clamp(1, SEC)),
            ),
            _ => (0, self.rng.range(10 * SEC, 1000 * SEC)),
        };
        (
            flags,
            UserPtr::Valid(ItimerSpec::from_nanos(value, interval)),
        )
    }
}
