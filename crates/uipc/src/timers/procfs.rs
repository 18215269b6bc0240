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
    timers.sort_by_key(|t| std::cmp::Reverse(t.listing.created));
    let mut out = String::new();
    for t in timers {
        let l = &t.listing;
        let kind = match l.notify & !SIGEV_THREAD_ID {
            SIGEV_NONE => "none",
            SIGEV_THREAD => "thread",
            _ => "signal",
        };
        let who = if l.notify & SIGEV_THREAD_ID != 0 {
            "tid"
        } else {
            "pid"
        };
        let _ = write!(
            out,
            "ID: {}\nsignal: {}/{:016x}\nnotify: {kind}/{who}.{}\nClockID: {}\n",
            t.id.raw(),
            l.signo,
            l.value,
            l.pid,
            l.clock
        );
    }
    out
}
