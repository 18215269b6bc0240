//! The worker pool's queue of jobs and its leadership: the workers ([`crate::workers`]) take
//! turns watching the sockets and serve what they find (leader/follower).
//!
//! At most one worker, the leader, runs the event loop ([`Reactor::poll_once`]: waits in
//! `epoll_wait`, accepts, reads frames, fires deadlines); the others wait for jobs. What one
//! turn of the loop finds is kept by the leader (a thread-local list, not the shared queue):
//! it gives up the lead and serves the first job itself, so a request is served by the thread
//! that read it, with no hand-off between threads on the way. It wakes an idle worker (to take
//! the other jobs, then the lead) only if it found more than one; otherwise the next worker to
//! be free leads, and a step that may take long (a lock call's `/proc` scans, an exit that
//! waits for requests in flight, a reply the client has no room for) first wakes an idle
//! worker to lead ([`Jobs::promote`]). Jobs a worker makes while it serves a job (an engine
//! notifier run by the worker's own step: an unlock woke a parked lock call, a semop completed
//! a parked one; its connection's next queued frame) stay with that worker, in a thread-local
//! list it serves right after the job, with no wake-up of another thread: a release and the
//! grant it lets through are answered by one thread in one go. A job that made several (a
//! release that let many parked calls through) shares them with the pool at its end, so
//! idle workers take them and one leads meanwhile. Before a step that may take
//! long ([`Jobs::promote`]) the list goes to the shared queue, so nothing waits behind that
//! step. Jobs from elsewhere (the exit thread's cancellations, the event loop's deadlines)
//! go to the shared queue; if no worker is idle, the leader is woken (the loop's eventfd) to
//! serve them. Nothing a worker runs waits for another job, so a fixed pool cannot deadlock:
//! calls that must wait are parked, not slept on.
//!
//! Lock: `Jobs::state` is a leaf, taken by notifiers under engine object locks. The
//! thread-local lists are borrowed only for a push or a pop, never across a job.
//!
//! [`Reactor::poll_once`]: crate::reactor::Reactor::poll_once
use crate::conn::{Job, Queue};
use crate::exits::ExitWatch;
use crate::reactor::Reactor;
use crate::sync::lock;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

struct PoolState {
    queue: VecDeque<Job>,
    /// A worker runs the event loop.
    leader: bool,
    /// Workers waiting for a job.
    idle: usize,
}

/// The queue of jobs, and who leads.
pub struct Jobs {
    state: Mutex<PoolState>,
    ready: Condvar,
    /// The event loop's eventfd: wakes the leader.
    wake_leader: OwnedFd,
    /// Resumption and deadline jobs queued or running (what a stop waits for, `stop.rs`).
    pending: AtomicUsize,
}

thread_local! {
    /// While this thread runs a turn of the event loop: the jobs it found, kept for itself.
    static FOUND: RefCell<Option<Vec<Job>>> = const { RefCell::new(None) };
    /// While this thread (a worker) serves a job: the jobs that job made, served next.
    static MADE: RefCell<Option<VecDeque<Job>>> = const { RefCell::new(None) };
}

impl Jobs {
    /// An empty queue; `wake_leader` is the event loop's eventfd.
    pub fn new(wake_leader: OwnedFd) -> Jobs {
        Jobs {
            state: Mutex::new(PoolState {
                queue: VecDeque::new(),
                leader: false,
                idle: 0,
            }),
            ready: Condvar::new(),
            wake_leader,
            pending: AtomicUsize::new(0),
        }
    }

    /// Queues `job` (kept by the leader if it found it) and makes sure a worker takes it.
    pub fn push(&self, job: Job) {
        if !matches!(job, Job::Frame(..)) {
            self.pending.fetch_add(1, Ordering::SeqCst);
        }
        let job = FOUND.with(|f| match f.borrow_mut().as_mut() {
            Some(found) => {
                found.push(job);
                None
            }
            None => Some(job),
        });
        let Some(job) = job else {
            return;
        };
        let job = MADE.with(|m| match m.borrow_mut().as_mut() {
            Some(made) => {
                made.push_back(job);
                None
            }
            None => Some(job),
        });
        if let Some(job) = job {
            self.share([job]);
        }
    }

    /// Puts `jobs` on the shared queue and makes sure a worker takes them.
    fn share(&self, jobs: impl IntoIterator<Item = Job>) {
        let mut st = lock(&self.state);
        let before = st.queue.len();
        st.queue.extend(jobs);
        if st.queue.len() == before {
            return;
        }
        if st.idle > 0 {
            self.ready.notify_one();
        } else if st.leader {
            drop(st);
            crate::reactor::kick(&self.wake_leader);
        }
    }

    /// After a job: if it made more than one (a release that let several parked calls
    /// through), they go to the shared queue as before a long step ([`Jobs::promote`]), so
    /// idle workers answer them and one watches the sockets, instead of this worker answering
    /// them all in turn while nobody leads.
    fn share_if_many(&self) {
        let many = MADE.with(|m| m.borrow().as_ref().is_some_and(|m| m.len() > 1));
        if many {
            self.promote();
        }
    }

    /// The next job this thread made while serving, if any.
    fn next_made() -> Option<Job> {
        MADE.with(|m| m.borrow_mut().as_mut().and_then(VecDeque::pop_front))
    }

    /// Resumption and deadline jobs queued or being run.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Before a step that may take long (a `/proc` scan, a wait for an exit, a send that may
    /// block): if nobody leads, wakes an idle worker to lead, so the sockets stay watched.
    /// The jobs this thread made so far go to the shared queue first, so none waits behind
    /// the step.
    pub fn promote(&self) {
        let made = MADE.with(|m| m.borrow_mut().as_mut().map(std::mem::take));
        if let Some(made) = made.filter(|m| !m.is_empty()) {
            self.share(made);
        }
        let st = lock(&self.state);
        if !st.leader && st.idle > 0 {
            self.ready.notify_one();
        }
    }

    /// Takes the next job (from the queue, or found by leading `reactor`'s event loop, which
    /// notes exits in `exits`) and runs it with `run`, then the jobs it made, in order.
    pub fn serve_next(self: &Arc<Self>, reactor: &Reactor, exits: &ExitWatch, run: impl Fn(Job)) {
        let mut job = self.next(reactor, exits);
        MADE.with(|m| *m.borrow_mut() = Some(VecDeque::new()));
        loop {
            let counted = !matches!(job, Job::Frame(..));
            run(job);
            if counted {
                self.pending.fetch_sub(1, Ordering::SeqCst);
            }
            self.share_if_many();
            match Jobs::next_made() {
                Some(made) => job = made,
                None => break,
            }
        }
        MADE.with(|m| *m.borrow_mut() = None);
    }

    /// The next job: from the queue, or found by leading the event loop.
    fn next(self: &Arc<Self>, reactor: &Reactor, exits: &ExitWatch) -> Job {
        let mut st = lock(&self.state);
        loop {
            if let Some(job) = st.queue.pop_front() {
                // Helpers are woken one at a time, each waking the next while jobs remain.
                if !st.queue.is_empty() && st.idle > 0 {
                    self.ready.notify_one();
                }
                return job;
            }
            if !st.leader {
                st.leader = true;
                drop(st);
                let found = self.lead(reactor, exits);
                st = lock(&self.state);
                st.leader = false;
                let mut found = found.into_iter();
                let mine = found.next().or_else(|| st.queue.pop_front());
                st.queue.extend(found);
                // An idle worker takes the rest (and then the lead), waking another if more
                // remain. With nothing else to do, nobody leads while this worker serves its
                // job: waking another worker to lead costs a wake-up per request, which on a
                // few cores costs more than the wait of the frames that arrive meanwhile.
                // Steps that may take long hand the lead on first (`promote`).
                if !st.queue.is_empty() && st.idle > 0 {
                    self.ready.notify_one();
                }
                match mine {
                    Some(job) => return job,
                    None => continue,
                }
            }
            st.idle += 1;
            st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            st.idle -= 1;
        }
    }

    /// Runs turns of the event loop until one finds work or a job was queued meanwhile.
    fn lead(self: &Arc<Self>, reactor: &Reactor, exits: &ExitWatch) -> Vec<Job> {
        FOUND.with(|f| *f.borrow_mut() = Some(Vec::new()));
        loop {
            reactor.poll_once(self, exits);
            let found = FOUND.with(|f| std::mem::take(f.borrow_mut().as_mut().expect("leading")));
            if !found.is_empty() || !lock(&self.state).queue.is_empty() {
                FOUND.with(|f| *f.borrow_mut() = None);
                return found;
            }
        }
    }
}

impl Queue for Jobs {
    fn push(&self, job: Job) {
        Jobs::push(self, job);
    }

    fn promote(&self) {
        Jobs::promote(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::Conn;
    use std::os::fd::FromRawFd;
    use std::os::unix::net::UnixStream;

    fn jobs() -> Arc<Jobs> {
        // SAFETY: a fresh eventfd, owned by the queue.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(efd >= 0);
        // SAFETY: as above.
        Arc::new(Jobs::new(unsafe { OwnedFd::from_raw_fd(efd) }))
    }

    fn queued(jobs: &Jobs) -> usize {
        lock(&jobs.state).queue.len()
    }

    #[test]
    fn jobs_made_while_serving_stay_with_the_worker_unless_many_or_a_long_step() {
        let jobs = jobs();
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let conn = Conn::new(1, a, &jobs, 0, uipc_proto::reader::Budget::new(1 << 20));
        // Serving a job: what it makes is served next by the same thread.
        MADE.with(|m| *m.borrow_mut() = Some(VecDeque::new()));
        jobs.push(Job::Resume(conn.clone()));
        assert_eq!(queued(&jobs), 0);
        assert!(matches!(Jobs::next_made(), Some(Job::Resume(_))));
        assert!(Jobs::next_made().is_none());
        // A long step shares what was made so far.
        jobs.push(Job::Resume(conn.clone()));
        jobs.promote();
        assert_eq!(queued(&jobs), 1);
        assert!(Jobs::next_made().is_none());
        // Several made by one job: shared at its end; one alone stays.
        jobs.push(Job::Resume(conn.clone()));
        jobs.share_if_many();
        assert_eq!(queued(&jobs), 1);
        assert!(matches!(Jobs::next_made(), Some(Job::Resume(_))));
        jobs.push(Job::Resume(conn.clone()));
        jobs.push(Job::Resume(conn.clone()));
        jobs.share_if_many();
        assert_eq!(queued(&jobs), 3);
        assert!(Jobs::next_made().is_none());
        // Outside a job (the exit thread, a notifier run elsewhere): the shared queue.
        MADE.with(|m| *m.borrow_mut() = None);
        jobs.push(Job::Resume(conn));
        assert_eq!(queued(&jobs), 4);
        assert_eq!(jobs.pending(), 6);
    }
}
