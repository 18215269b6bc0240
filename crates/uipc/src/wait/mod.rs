//! Sleeping in a blocking call: timeouts and interruption.
//!
//! Linux turns a signal into EINTR for a task asleep in semop, msgrcv or F_SETLKW. The engine
//! has no signals, so each caller that may block passes a [`WaitCtx`]: an optional deadline on
//! the host's monotonic clock and an optional [`Interrupt`] handle that another thread (a daemon
//! noticing a signal or a dead client, a sandbox delivering a signal) can raise.
//!
//! A sleeping request is a [`Waiter`]: the subsystem queues it under the object's lock, drops
//! the lock, and calls [`Waiter::sleep`]. A waker that makes the request succeed calls
//! [`Waiter::complete`] under the same object lock. A sleeper that times out or is interrupted
//! must take the object lock again and call [`Waiter::abort`]: if a waker completed it in the
//! meantime the completion stands (Linux returns the completed result, not EINTR), otherwise the
//! request is marked aborted, so no waker can complete it, and the sleeper dequeues it.
//!
//! Parking instead of sleeping: an embedder that serves many callers from a few threads (the
//! daemon) starts a blocking call with a [`ParkCtx`] instead of sleeping in it. The call's
//! `*_start` form returns [`Progress::Done`] or [`Progress::Parked`] with a parked-call object
//! that holds the queued request; the waiter then carries the context's [`Notifier`], run when
//! a waker completes it or the context's interrupt is raised. The embedder answers a
//! notification by polling the parked call (done, still parked, or cancelled because the
//! interrupt is raised) and ends it early with its `cancel(reason)`, which does what a sleeper
//! does after a timeout or an interrupt. The synchronous calls are the same start, followed by
//! [`Waiter::sleep`] and the same resume code (`wait`).
//!
//! Lock order: object lock -> `Waiter::state`. `Interrupt::parked` is never held while taking a
//! waiter's state lock from the sleeper's side, and the raiser takes `parked` then `state`.
//! A notifier runs with no lock of this module held, but possibly under the object lock of the
//! waker (a completion happens under it): it must only record that the call may go on, and
//! take no engine lock.

// std's Arc: waiters are shared as `Arc<dyn Notify>`, a coercion loom's Arc does not support.
use std::sync::Arc;

use crate::sync::{lock, AtomicBool, Condvar, Mutex, Ordering};
use std::time::{Duration, Instant};

/// What a sleeper can be woken by besides completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeReason {
    /// The deadline passed.
    TimedOut,
    /// The caller's [`Interrupt`] was raised.
    Interrupted,
}

pub(crate) trait Notify: Send + Sync {
    fn notify(&self);
}

mod park;
pub(crate) use park::Registration;
pub use park::{ParkCtx, Progress};

/// Told that a parked call may go on (its waiter was completed or its interrupt raised).
/// Runs on the waker's thread, possibly under an engine object lock: it must only record the
/// news (push to a queue, write an eventfd) and never call back into the engine.
pub type Notifier = Arc<dyn Fn() + Send + Sync>;

/// A handle that interrupts the blocking calls of one caller (a thread, a client process).
///
/// Raising it is sticky: every blocking call made with it returns EINTR (after dequeuing its
/// request) until the embedder calls [`Interrupt::clear`], as a pending signal would keep
/// interrupting until handled.
#[derive(Clone, Default)]
pub struct Interrupt {
    inner: Arc<InterruptInner>,
}

#[derive(Default)]
struct InterruptInner {
    raised: AtomicBool,
    parked: Mutex<Vec<Arc<dyn Notify>>>,
}

impl Interrupt {
    /// A fresh, lowered handle.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Interrupts the blocking calls using this handle, now and until [`Interrupt::clear`].
    pub fn raise(&self) {
        self.inner.raised.store(true, Ordering::SeqCst);
        let parked: Vec<_> = lock(&self.inner.parked).clone();
        for p in parked {
            p.notify();
        }
    }

    /// Lowers the handle again.
    pub fn clear(&self) {
        self.inner.raised.store(false, Ordering::SeqCst);
    }

    /// Whether the handle is raised.
    pub fn is_raised(&self) -> bool {
        self.inner.raised.load(Ordering::SeqCst)
    }

    fn park(&self, n: Arc<dyn Notify>) {
        lock(&self.inner.parked).push(n);
    }

    fn unpark(&self, n: &Arc<dyn Notify>) {
        lock(&self.inner.parked).retain(|p| !Arc::ptr_eq(p, n));
    }
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupt")
            .field("raised", &self.is_raised())
            .finish()
    }
}

/// How a blocking call may sleep: until when, and what may interrupt it.
#[derive(Clone, Copy, Debug, Default)]
pub struct WaitCtx<'a> {
    /// Give up at this instant (semtimedop's timeout). `None` sleeps without limit.
    pub deadline: Option<Instant>,
    /// Raised, it ends the sleep with EINTR.
    pub interrupt: Option<&'a Interrupt>,
}

impl<'a> WaitCtx<'a> {
    /// Sleep without limit and without interruption (a test that knows a waker will come).
    pub const FOREVER: WaitCtx<'static> = WaitCtx {
        deadline: None,
        interrupt: None,
    };

    /// Sleep at most `timeout` from now.
    pub fn timeout(timeout: Duration) -> WaitCtx<'static> {
        WaitCtx {
            deadline: Instant::now().checked_add(timeout),
            interrupt: None,
        }
    }

    /// The same context, interruptible through `interrupt`.
    pub fn interruptible(self, interrupt: &'a Interrupt) -> WaitCtx<'a> {
        WaitCtx {
            interrupt: Some(interrupt),
            ..self
        }
    }

    /// Whether the interrupt is raised now.
    pub fn interrupted(&self) -> bool {
        self.interrupt.is_some_and(Interrupt::is_raised)
    }
}

enum State<T> {
    Waiting,
    Done(T),
    Taken,
    Aborted,
}

/// One sleeping request, completed at most once with a `T`.
pub struct Waiter<T> {
    state: Mutex<State<T>>,
    cv: Condvar,
    notifier: Option<Notifier>,
}

impl<T: Send + 'static> Notify for Waiter<T> {
    fn notify(&self) {
        {
            let _g = lock(&self.state);
            self.cv.notify_all();
        }
        if let Some(n) = &self.notifier {
            n();
        }
    }
}

impl<T: Send + 'static> Waiter<T> {
    /// A new request, waiting.
    pub fn new() -> Arc<Waiter<T>> {
        Waiter::with_notifier(None)
    }

    /// A new request whose completion (and whose interrupt, once registered) also runs
    /// `notifier`.
    pub fn with_notifier(notifier: Option<Notifier>) -> Arc<Waiter<T>> {
        Arc::new(Waiter {
            state: Mutex::new(State::Waiting),
            cv: Condvar::new(),
            notifier,
        })
    }

    /// Completes the request with `value`, wakes its sleeper and runs its notifier. Returns
    /// `false`, and drops `value`, if the request was already completed or aborted. Call with
    /// the object lock held.
    pub fn complete(&self, value: T) -> bool {
        {
            let mut st = lock(&self.state);
            if !matches!(*st, State::Waiting) {
                return false;
            }
            *st = State::Done(value);
            self.cv.notify_all();
        }
        if let Some(n) = &self.notifier {
            n();
        }
        true
    }

    /// The completion's value, if a waker completed the request (taken: a second call, a
    /// sleep or an abort then find nothing).
    pub fn take_done(&self) -> Option<T> {
        let mut st = lock(&self.state);
        if !matches!(*st, State::Done(_)) {
            return None;
        }
        match std::mem::replace(&mut *st, State::Taken) {
            State::Done(v) => Some(v),
            _ => unreachable!("checked above"),
        }
    }

    /// Whether the request still waits (neither completed nor aborted).
    pub fn is_waiting(&self) -> bool {
        matches!(*lock(&self.state), State::Waiting)
    }

    /// Sleeps until completion (`Ok(value)`), the deadline or the interrupt (`Err(reason)`).
    /// Call without holding the object lock. After `Err`, take the object lock and call
    /// [`Waiter::abort`].
    pub fn sleep(self: &Arc<Self>, ctx: &WaitCtx<'_>) -> Result<T, WakeReason> {
        let notify: Arc<dyn Notify> = self.clone();
        if let Some(i) = ctx.interrupt {
            i.park(notify.clone());
        }
        let result = self.sleep_inner(ctx);
        if let Some(i) = ctx.interrupt {
            i.unpark(&notify);
        }
        result
    }

    fn sleep_inner(&self, ctx: &WaitCtx<'_>) -> Result<T, WakeReason> {
        let mut st = lock(&self.state);
        loop {
            if matches!(*st, State::Done(_)) {
                return match std::mem::replace(&mut *st, State::Taken) {
                    State::Done(v) => Ok(v),
                    _ => unreachable!("checked above"),
                };
            }
            if ctx.interrupted() {
                return Err(WakeReason::Interrupted);
            }
            st = match ctx.deadline {
                None => self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(WakeReason::TimedOut);
                    }
                    self.cv
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    /// After a timed-out or interrupted sleep, with the object lock held: returns the value if a
    /// waker completed the request after all, else marks it aborted (no waker can complete it
    /// now) and returns `None`; the caller then dequeues it.
    pub fn abort(&self) -> Option<T> {
        let mut st = lock(&self.state);
        match std::mem::replace(&mut *st, State::Aborted) {
            State::Done(v) => {
                *st = State::Taken;
                Some(v)
            }
            _ => None,
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn completion_wakes_the_sleeper_with_its_value() {
        let w = Waiter::<u32>::new();
        let w2 = w.clone();
        let t = thread::spawn(move || w2.sleep(&WaitCtx::FOREVER));
        thread::sleep(Duration::from_millis(20));
        assert!(w.complete(7));
        assert!(!w.complete(8), "a request completes once");
        assert_eq!(t.join().unwrap(), Ok(7));
    }

    /// A waiter whose sleep of `ms` milliseconds ended by its deadline.
    fn timed_out_after(ms: u64) -> Arc<Waiter<u32>> {
        let w = Waiter::<u32>::new();
        let ctx = WaitCtx::timeout(Duration::from_millis(ms));
        assert_eq!(w.sleep(&ctx), Err(WakeReason::TimedOut));
        w
    }

    #[test]
    fn deadline_ends_the_sleep_and_abort_blocks_late_wakers() {
        let w = timed_out_after(10);
        assert_eq!(w.abort(), None);
        assert!(!w.complete(1), "an aborted request cannot be completed");
    }

    #[test]
    fn a_completion_racing_the_timeout_is_kept() {
        let w = timed_out_after(1);
        assert!(w.complete(5));
        assert_eq!(w.abort(), Some(5));
    }

    #[test]
    fn raising_the_interrupt_wakes_the_sleeper_and_stays_raised_until_cleared() {
        let irq = Interrupt::new();
        let w = Waiter::<()>::new();
        let (w2, irq2) = (w.clone(), irq.clone());
        let t = thread::spawn(move || w2.sleep(&WaitCtx::FOREVER.interruptible(&irq2)));
        thread::sleep(Duration::from_millis(20));
        irq.raise();
        assert_eq!(t.join().unwrap(), Err(WakeReason::Interrupted));
        let w = Waiter::<()>::new();
        assert_eq!(
            w.sleep(&WaitCtx::FOREVER.interruptible(&irq)),
            Err(WakeReason::Interrupted)
        );
        irq.clear();
        assert!(!WaitCtx::FOREVER.interruptible(&irq).interrupted());
    }

    #[test]
    fn completion_runs_the_notifier_once_and_take_done_collects_the_value() {
        let told = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t2 = told.clone();
        let notifier: Notifier = Arc::new(move || {
            t2.fetch_add(1, Ordering::SeqCst);
        });
        let w = Waiter::<u32>::with_notifier(Some(notifier));
        assert_eq!(w.take_done(), None);
        assert!(w.complete(3));
        assert!(!w.complete(4));
        assert_eq!(told.load(Ordering::SeqCst), 1);
        assert_eq!(w.take_done(), Some(3));
        assert_eq!(w.take_done(), None, "taken once");
        assert_eq!(w.abort(), None);
    }
}
