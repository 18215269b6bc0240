//! `/proc/PID/timers` (`show_timer` in `fs/proc/base.c`): one block per timer, newest first.
//!
//! ```text
//! ID: 1
//! signal: 14/0000000000000001
//! notify: signal/pid.4242
//! ClockID: 0
//! ```
//!
//! `signal` is the sigevent's signo and value as given, even for SIGEV_NONE; `notify` names the
//! notification (`signal`, `none`, `thread`) and the pid, or `tid` for SIGEV_THREAD_ID; the clock
//! is the timer's internal id (`CLOCK_PROCESS_CPUTIME_ID` shows as -6, the thread one as -2).
//!
//! Locks: takes the registry shard and the process's id set (one after the other), then each
//! timer's stripe and state lock in turn; never two at once.

use std::fmt::Write;

use super::engine::Inner;
use super::types::*;
use crate::Tgid;

pub(crate) fn render(inner: &Inner, tgid: Tgid) -> String {
    let Some(proc) = inner.procs.get(tgid) else {
        return String::new();
    };
    let ids: Vec<TimerId> = super::lock(&proc.ids).ids.iter().copied().collect();
    let mut timers: Vec<_> = ids
        .into_iter()
        .filter_map(|id| inner.table.lookup(tgid, id))
        .filter(|t| !super::lock(&t.state).deleted)
        .collect();
    timers.sort_by_key(|t| std::cmp::Reverse(t.listing.created()));
    let mut out = String::new();
    for t in timers {
        t.listing.write(t.id, &mut out);
    }
    out
}

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
    fn write(&self, id: TimerId, out: &mut String) {
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
