//! Stopping to save: the daemon stops serving, lets what is under way finish, and only then
//! reads the namespace, so the saved state is the one its replies described.
//!
//! Everything that changes the namespace runs inside the gate: each worker job
//! ([`crate::workers`]: a frame, a parked call's resumption, a deadline) and each exit applied by the
//! exit thread ([`StopGate::enter`]). [`StopGate::close`]:
//! 1. marks the gate stopping: from then on a new frame is dropped unserved (its client sees
//!    the connection close when the daemon exits, as for any call it never answered);
//! 2. waits until nobody is inside the gate and no resumption or deadline job is queued.
//!    Resumptions still run while stopping: a parked call that a waker completed (a message
//!    handed to a receiver, a semop applied) is answered before the save, so its effect is
//!    either in a reply that was sent or in the namespace, never lost between the two. The
//!    count of queued ones ([`Jobs::pending`](crate::jobs::Jobs::pending)) is raised when
//!    a job is queued, before the waker leaves the gate, and lowered when it has run;
//! 3. closes the gate for good: whoever comes later waits forever (the daemon exits after
//!    saving).
//!
//! The gate lets anyone in while it is not closed, even when [`StopGate::close`] is waiting:
//! a worker inside may wait for an exit that the exit thread is applying, so the exit thread
//! must not wait for the closer. Nothing new starts once stopping, so the work inside drains.
//!
//! Lock: `state` is a leaf.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Default)]
struct GateState {
    inside: usize,
    closed: bool,
}

/// Who is changing the namespace, and whether the daemon is stopping.
#[derive(Default)]
pub struct StopGate {
    state: Mutex<GateState>,
    changed: Condvar,
    stopping: AtomicBool,
}

/// Inside the gate until dropped.
pub struct Inside<'a>(&'a StopGate);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let mut st = crate::sync::lock(&self.0.state);
        st.inside -= 1;
        // Only the closer waits for `inside` to drain, and it sets `stopping` under this lock
        // before it waits: no wake-up system call per job otherwise.
        if st.inside == 0 && self.0.stopping.load(Ordering::SeqCst) {
            self.0.changed.notify_all();
        }
    }
}

impl StopGate {
    /// Enters (waiting forever once the gate is closed).
    pub fn enter(&self) -> Inside<'_> {
        let mut st = crate::sync::lock(&self.state);
        while st.closed {
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.inside += 1;
        Inside(self)
    }

    /// Enters to serve a new frame: `None` once stopping.
    pub(crate) fn enter_new(&self) -> Option<Inside<'_>> {
        let mut st = crate::sync::lock(&self.state);
        if self.stopping.load(Ordering::SeqCst) {
            return None;
        }
        st.inside += 1;
        Some(Inside(self))
    }

    /// Stops serving and waits until the namespace is still: nobody inside, and `pending()`
    /// (the queued resumptions) zero. The gate stays closed.
    pub fn close(&self, pending: impl Fn() -> usize) {
        let mut st = crate::sync::lock(&self.state);
        self.stopping.store(true, Ordering::SeqCst);
        while st.inside > 0 || pending() > 0 {
            // Resumptions are counted outside this lock: look again every millisecond.
            st = self
                .changed
                .wait_timeout(st, Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        st.closed = true;
    }
}
