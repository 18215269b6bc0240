//! What `/proc/PID/timers` shows of one timer (see `procfs.rs` for the format), fixed when
//! the timer is made: plain data, no lock.

use std::fmt::Write;

use super::types::*;

/// What the listing shows of one timer, fixed at create.
pub(crate) struct Listing {
    created: u64,
    signo: i32,
    value: u64,
    notify: i32,
    pid: i32,
    clock: i32,
}

impl Listing {
    pub(crate) fn new(
        created: u64,
        tgid: crate::Tgid,
        id: TimerId,
        clock: i32,
        event: UserPtr<SigEvent>,
    ) -> Listing {
        let ev = match event {
            UserPtr::Valid(ev) => ev,
            _ => SigEvent::signal(SIGALRM, id.raw() as u64),
        };
        Listing {
            created,
            signo: ev.signo,
            value: ev.value,
            notify: ev.notify,
            pid: if ev.notify == SIGEV_THREAD_ID {
                ev.thread_id
            } else {
                tgid.get()
            },
            clock: match clock {
                CLOCK_PROCESS_CPUTIME_ID => -6,
                CLOCK_THREAD_CPUTIME_ID => -2,
                c => c,
            },
        }
    }

    /// When the timer was made (the listing's order: newest first).
    pub(crate) fn created(&self) -> u64 {
        self.created
    }

    /// Appends timer `id`'s block.
    pub(crate) fn write(&self, id: TimerId, out: &mut String) {
        let kind = match self.notify & !SIGEV_THREAD_ID {
            SIGEV_NONE => "none",
            SIGEV_THREAD => "thread",
            _ => "signal",
        };
        let who = if self.notify & SIGEV_THREAD_ID != 0 {
            "tid"
        } else {
            "pid"
        };
        let _ = write!(
            out,
            "ID: {}\nsignal: {}/{:016x}\nnotify: {kind}/{who}.{}\nClockID: {}\n",
            id.raw(),
            self.signo,
            self.value,
            self.pid,
            self.clock
        );
    }
}
