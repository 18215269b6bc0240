//! The worker pool: a fixed number of threads serving jobs from one queue.
//!
//! Jobs come from the event loop (a whole frame read from a connection, a semtimedop deadline
//! that passed) and from engine notifiers (a parked call's waiter was completed or its
//! connection's interrupt raised). A worker runs one job at a time with [`crate::session`];
//! nothing a worker runs waits for another job, so a fixed pool cannot deadlock: calls that
//! must wait are parked, not slept on.
//!
//! Lock: `Jobs::queue` is a leaf, taken by notifiers under engine object locks.

use crate::conn::Conn;
use crate::Shared;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use uipc_proto::transport::Received;

/// One piece of work for a worker.
pub enum Job {
    /// A whole frame from the connection, which has no other call in flight.
    Frame(Arc<Conn>, Received),
    /// The connection's parked call may go on: poll it.
    Resume(Arc<Conn>),
    /// The connection's parked call may have passed its deadline.
    Deadline(Arc<Conn>),
}

/// The queue of jobs.
#[derive(Default)]
pub struct Jobs {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Jobs {
    /// Queues `job` and wakes a worker.
    pub fn push(&self, job: Job) {
        lock(&self.queue).push_back(job);
        self.ready.notify_one();
    }

    fn pop(&self) -> Job {
        let mut q = lock(&self.queue);
        loop {
            if let Some(job) = q.pop_front() {
                return job;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// How many workers serve: the cores, at least 4 (a lock call's `/proc` sweep or a reply to
/// a slow reader holds a worker for a while) and at most 16.
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get().clamp(4, 16))
}

/// Starts `count` workers serving `shared`'s jobs.
pub fn spawn(shared: &Arc<Shared>, count: usize) -> std::io::Result<()> {
    for i in 0..count {
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("uipc-worker-{i}"))
            .spawn(move || loop {
                let job = s.jobs.pop();
                crate::session::run_job(&s, job);
            })?;
    }
    Ok(())
}
