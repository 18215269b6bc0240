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
