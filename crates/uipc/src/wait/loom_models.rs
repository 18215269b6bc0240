//! Loom models of the waiter protocol (the parent module doc): completion against abort,
//! completion and interrupt against a sleeper, and an interrupt against a parked waiter's
//! registration. A lost wake-up shows as loom's deadlock report (every thread blocked).

use super::{Interrupt, ParkCtx, Registration, WaitCtx, Waiter, WakeReason};
use crate::sync::{model, AtomicUsize, Ordering::SeqCst};
use loom::thread;
use std::sync::Arc;

/// A sleeper on a new waiter, interruptible by the returned interrupt; after an interrupted
/// sleep it aborts (as a caller does under the object lock). The thread returns the sleep's
/// result and, after an interrupt, the abort's.
type Sleeper = thread::JoinHandle<(Result<u32, WakeReason>, Option<u32>)>;

fn interruptible_sleeper() -> (Interrupt, Arc<Waiter<u32>>, Sleeper) {
    let irq = Interrupt::new();
    let w = Waiter::<u32>::new();
    let (w2, irq2) = (w.clone(), irq.clone());
    let t = thread::spawn(move || {
        let r = w2.sleep(&WaitCtx::FOREVER.interruptible(&irq2));
        let aborted = if r.is_err() { w2.abort() } else { None };
        (r, aborted)
    });
    (irq, w, t)
}

/// A waker's completion and a timed-out sleeper's abort: exactly one of them wins, and a won
/// completion's value reaches the aborting sleeper.
#[test]
fn complete_racing_abort_delivers_the_value_exactly_once() {
    model(|| {
        let w = Waiter::<u32>::new();
        let w2 = w.clone();
        let t = thread::spawn(move || w2.complete(7));
        let got = w.abort();
        let delivered = t.join().unwrap();
        assert_eq!(got, delivered.then_some(7));
        assert_eq!(w.take_done(), None, "nothing left behind");
        assert!(!w.complete(8), "aborted or taken: completes no more");
    });
}

/// A completion racing a sleeper that goes to sleep: the sleeper always wakes with the value.
#[test]
fn completion_always_wakes_the_sleeper() {
    model(|| {
        let w = Waiter::<u32>::new();
        let w2 = w.clone();
        let t = thread::spawn(move || w2.sleep(&WaitCtx::FOREVER));
        assert!(w.complete(7));
        assert_eq!(t.join().unwrap(), Ok(7));
    });
}

/// An interrupt raised while a sleeper goes to sleep always wakes it.
#[test]
fn raise_always_wakes_an_interruptible_sleeper() {
    model(|| {
        let (irq, _, t) = interruptible_sleeper();
        irq.raise();
        assert_eq!(t.join().unwrap(), (Err(WakeReason::Interrupted), None));
    });
}

/// A completion and an interrupt racing each other and the sleeper: the sleeper ends with the
/// value, or with the interrupt and then (its abort under the object lock) with the value if
/// the completion won; never both lost nor delivered twice.
#[test]
fn completion_racing_interrupt_is_never_lost() {
    model(|| {
        let (irq, w, sleeper) = interruptible_sleeper();
        let w3 = w.clone();
        let waker = thread::spawn(move || w3.complete(5));
        irq.raise();
        let got = match sleeper.join().unwrap() {
            (Ok(v), _) => Some(v),
            (Err(_), aborted) => aborted,
        };
        let delivered = waker.join().unwrap();
        assert_eq!(got, delivered.then_some(5));
    });
}

/// A parked waiter registering with an interrupt while it is raised: its notifier runs.
#[test]
fn raise_racing_a_registration_always_notifies() {
    model(|| {
        let told = Arc::new(AtomicUsize::new(0));
        let t2 = told.clone();
        let irq = Interrupt::new();
        let ctx = ParkCtx::new(
            Arc::new(move || {
                t2.fetch_add(1, SeqCst);
            }),
            Some(irq.clone()),
        );
        let w = ctx.waiter::<()>();
        let raiser = thread::spawn(move || irq.raise());
        let reg = Registration::new(&w, &ctx);
        raiser.join().unwrap();
        assert!(reg.interrupted());
        assert!(
            told.load(SeqCst) >= 1,
            "the raise reached the parked waiter"
        );
    });
}
