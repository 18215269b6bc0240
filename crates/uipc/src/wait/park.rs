//! Parking: the context a blocking call is started with when no thread will sleep in it.
//!
//! A [`ParkCtx`] names a [`Notifier`] and an optional [`Interrupt`]. A call started with it
//! (`*_start`) queues its waiter carrying the notifier and returns [`Progress::Parked`]; the
//! waiter is also registered with the interrupt ([`Registration`]), so raising it runs the
//! notifier too. The registration is withdrawn when the parked call is dropped (finished).
//!
//! Lock order: the interrupt's `parked` list is taken alone (to register or withdraw); the
//! notifier runs with none of this module's locks held.

use super::{Interrupt, Notifier, Notify, Waiter};
use std::sync::Arc;

/// How a call started without sleeping is parked: whom to notify and what interrupts it.
/// The default (no notifier, no interrupt) is what the synchronous calls use before sleeping.
#[derive(Clone, Default)]
pub struct ParkCtx {
    /// Run when the parked call may go on.
    pub notifier: Option<Notifier>,
    /// Raised, it cancels the parked call with EINTR at its next poll (and notifies).
    pub interrupt: Option<Interrupt>,
}

impl std::fmt::Debug for ParkCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParkCtx")
            .field("notifier", &self.notifier.is_some())
            .field("interrupt", &self.interrupt)
            .finish()
    }
}

impl ParkCtx {
    /// Notifies through `notifier`, interrupted by `interrupt`.
    pub fn new(notifier: Notifier, interrupt: Option<Interrupt>) -> ParkCtx {
        ParkCtx {
            notifier: Some(notifier),
            interrupt,
        }
    }

    /// A new waiter carrying this context's notifier.
    pub(crate) fn waiter<T: Send + 'static>(&self) -> Arc<Waiter<T>> {
        Waiter::with_notifier(self.notifier.clone())
    }
}

/// The result of starting (or polling) a blocking call without sleeping.
#[must_use = "a parked call stays queued until polled to completion or cancelled"]
pub enum Progress<T, P> {
    /// The call finished with this result.
    Done(crate::Result<T>),
    /// The call waits; `P` resumes or cancels it.
    Parked(P),
}

impl<T: std::fmt::Debug, P> std::fmt::Debug for Progress<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Done(r) => f.debug_tuple("Done").field(r).finish(),
            Progress::Parked(_) => f.write_str("Parked(..)"),
        }
    }
}

/// A parked waiter's registration with its interrupt, withdrawn when dropped.
pub(crate) struct Registration {
    interrupt: Option<Interrupt>,
    notify: Option<Arc<dyn Notify>>,
}

impl Registration {
    /// Registers `waiter` with `ctx`'s interrupt, so that raising it notifies the waiter's
    /// notifier. If the interrupt is raised already, notifies at once.
    pub(crate) fn new<T: Send + 'static>(waiter: &Arc<Waiter<T>>, ctx: &ParkCtx) -> Registration {
        let Some(irq) = ctx.interrupt.clone() else {
            return Registration {
                interrupt: None,
                notify: None,
            };
        };
        let notify: Arc<dyn Notify> = waiter.clone();
        irq.park(notify.clone());
        if irq.is_raised() {
            notify.notify();
        }
        Registration {
            interrupt: Some(irq),
            notify: Some(notify),
        }
    }

    /// Whether the interrupt is raised.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(Interrupt::is_raised)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let (Some(i), Some(n)) = (&self.interrupt, &self.notify) {
            i.unpark(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_registration_notifies_on_raise_until_dropped() {
        let told = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t2 = told.clone();
        let irq = Interrupt::new();
        let ctx = ParkCtx::new(
            Arc::new(move || {
                t2.fetch_add(1, Ordering::SeqCst);
            }),
            Some(irq.clone()),
        );
        let w = ctx.waiter::<()>();
        let reg = Registration::new(&w, &ctx);
        assert!(!reg.interrupted());
        irq.raise();
        assert!(reg.interrupted());
        assert_eq!(told.load(Ordering::SeqCst), 1);
        drop(reg);
        irq.raise();
        assert_eq!(
            told.load(Ordering::SeqCst),
            1,
            "dropped registrations hear nothing"
        );
    }
}
