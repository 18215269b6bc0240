//! Which requests must look for exits before they are served, so that the others make no
//! system call for it.
//!
//! The rule (`crate::procs`): an exit is applied before any request that happens after it
//! (a parent that reaped its child sees the child's SEM_UNDO applied). A process's pidfd is
//! readable from the moment the kernel notifies its exit, before its parent can reap it, and
//! stays in the exit set until its exit has been applied. The exit set is itself watched by
//! the event loop, edge-triggered (`Reactor::watch_exits`): each pidfd that becomes readable
//! wakes the loop, and the leader counts that batch ([`ExitWatch::noted`]) before it hands
//! out the frames it read (a full batch, which may have left the exit set's event for the
//! next, counts too). So a request sent after an exit was notified arrives in a batch that
//! counted it, or in a later one.
//!
//! A worker about to serve a frame calls [`ExitWatch::reap_if_pending`]: nothing if every
//! counted batch is known applied; else it applies what the exit set holds (waiting for an
//! exit another thread is applying), and if the set then held nothing, records everything
//! counted before its look as applied. A batch counted after that look keeps the next frames
//! looking.
//!
//! Lock order: none (atomics); `Procs::reap_ready` as documented there.

use crate::procs::Procs;
use std::sync::atomic::{AtomicU64, Ordering};

/// Batches that saw an exit notified, and how many of them are known applied.
#[derive(Default)]
pub struct ExitWatch {
    noted: AtomicU64,
    applied: AtomicU64,
}

impl ExitWatch {
    /// The leader's batch saw the exit set wake (or was full): call before handing out its
    /// frames.
    pub fn noted(&self) {
        self.noted.fetch_add(1, Ordering::SeqCst);
    }

    /// Before serving a frame: applies the exits not known applied (see the module doc).
    pub fn reap_if_pending(&self, procs: &Procs, before: &dyn Fn(), on_exit: &dyn Fn(i32)) {
        let noted = self.noted.load(Ordering::SeqCst);
        if self.applied.load(Ordering::SeqCst) >= noted {
            return;
        }
        if procs.reap_ready(0, before, on_exit) == 0 {
            self.applied.fetch_max(noted, Ordering::SeqCst);
        }
    }
}
