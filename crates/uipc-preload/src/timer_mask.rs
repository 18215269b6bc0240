//! The signal-mask and signal-wait exports that keep timer signals as Linux times them
//! (`uipc run --timers`): sigprocmask, pthread_sigmask, sigwaitinfo and sigtimedwait.
//!
//! Linux queues a timer's signal in the expiry interrupt and fixes its overrun when the
//! signal is dequeued: the expirations between the one that queued it and the dequeue (the
//! timer is re-armed then, on its grid). Here the service thread fires timers, so it may run
//! late, and it learns of a dequeue only by seeing the signal no longer pending. Two moments
//! a program can observe are made exact:
//! - Unblocking: before a mask that may unblock signals is set, the timers due by now are
//!   fired and the call waits (bounded) until the service thread has queued their signals
//!   in the kernel ([`Service::catch_up`]), so the new mask delivers what Linux would have
//!   had pending. timer_getoverrun right after counts the expirations the pending signal
//!   absorbed (the dequeue is settled at that call).
//! - Accepting with sigwaitinfo or sigtimedwait: a timer signal taken is dequeued from the
//!   engine at once, and the `si_overrun` the caller reads is the engine's count at that
//!   moment, the one timer_getoverrun then returns (Linux's rule: fixed at dequeue).
//!
//! The library's own mask changes go to the C library's function ([`set_mask`], `sigmask.rs`), never
//! through these exports. Without `$UIPC_TIMERS` (or before any timer exists) each export is
//! the C library's function and nothing else.

use crate::guard::{errno_now, set_errno};
use crate::kernel::next_symbol_cached as next;
use crate::sigmask::{set_mask, SignalsBlocked};
use crate::timer_abi::{siginfo_code_and_timer, SIGINFO};
use crate::timer_service::{current, Service};
use libc::{c_int, c_void, sigset_t, timespec};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

type MaskFn = unsafe extern "C" fn(c_int, *const sigset_t, *mut sigset_t) -> c_int;
type WaitFn = unsafe extern "C" fn(*const sigset_t, *mut c_void, *const timespec) -> c_int;

static SIGPROCMASK: AtomicUsize = AtomicUsize::new(0);
static SIGTIMEDWAIT: AtomicUsize = AtomicUsize::new(0);

/// Looks up the C library's functions; called by the library's constructor.
pub fn prepare() {
    crate::sigmask::prepare();
    next(&SIGPROCMASK, c"sigprocmask");
    next(&SIGTIMEDWAIT, c"sigtimedwait");
}

/// The service, when timers are routed and this process has made one.
fn service() -> Option<&'static Service> {
    crate::timer::routed().then(current).flatten()
}

/// pthread_sigmask(3).
#[no_mangle]
pub extern "C" fn pthread_sigmask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int {
    let _unblocking = before_mask(how, set);
    set_mask(how, set, old)
}

/// sigprocmask(2).
#[no_mangle]
pub extern "C" fn sigprocmask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int {
    let _unblocking = before_mask(how, set);
    match next(&SIGPROCMASK, c"sigprocmask") {
        0 => {
            // SAFETY: writes this thread's errno.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
        // SAFETY: the C library's sigprocmask with the caller's arguments.
        p => unsafe { std::mem::transmute::<usize, MaskFn>(p)(how, set, old) },
    }
}

/// Before a mask that may unblock signals: the timers due are fired and their signals queued
/// ([`Service::catch_up`]), and until the returned guard is dropped (after the mask is set) the
/// service thread takes no pending signal back to re-queue it: each is in the kernel when the
/// mask changes, as Linux would hold it.
fn before_mask(how: c_int, set: *const sigset_t) -> Option<Unblocking> {
    if set.is_null() || how == libc::SIG_BLOCK {
        return None;
    }
    // SAFETY: `set` is the caller's sigset_t, as the C library's function would read it.
    if how == libc::SIG_SETMASK && unsafe { blocks_all(set) } {
        return None;
    }
    let svc = service()?;
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| svc.catch_up()));
    svc.unblocking.fetch_add(1, Ordering::AcqRel);
    // A take-back already under way (the service holds `in_flight` across it) ends first.
    let held = SignalsBlocked::new();
    drop(svc.in_flight.lock().unwrap_or_else(|e| e.into_inner()));
    drop(held);
    Some(Unblocking(svc))
}

/// Whether a mask set to `set` blocks every signal a program may block (SIGKILL, SIGSTOP and
/// the C library's two internal signals aside): such a mask unblocks nothing.
///
/// # Safety
/// `set` points to a readable sigset_t.
unsafe fn blocks_all(set: *const sigset_t) -> bool {
    (1..=64).all(|sig| {
        matches!(sig, libc::SIGKILL | libc::SIGSTOP | 32 | 33)
            // SAFETY: the caller's contract; `sig` is a valid signal number.
            || unsafe { libc::sigismember(set, sig) } == 1
    })
}

/// Re-queueing held off while a mask is set (see [`before_mask`]).
struct Unblocking(&'static Service);

impl Drop for Unblocking {
    fn drop(&mut self) {
        self.0.unblocking.fetch_sub(1, Ordering::AcqRel);
    }
}

/// sigtimedwait(2).
#[no_mangle]
pub extern "C" fn sigtimedwait(
    set: *const sigset_t,
    info: *mut c_void,
    timeout: *const timespec,
) -> c_int {
    let Some(svc) = service() else {
        return real_wait(set, info, timeout);
    };
    let mut own = [0u8; SIGINFO];
    let buf = if info.is_null() {
        own.as_mut_ptr().cast()
    } else {
        info
    };
    let waiting = crate::timer_signals::Waiting::new(set);
    let r = real_wait(set, buf, timeout);
    drop(waiting);
    if r > 0 {
        // SAFETY: the kernel filled `buf`, a siginfo the caller gave or ours (128 bytes).
        let bytes = unsafe { &mut *buf.cast::<[u8; SIGINFO]>() };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| accepted(svc, bytes)));
    }
    r
}

/// sigwaitinfo(2).
#[no_mangle]
pub extern "C" fn sigwaitinfo(set: *const sigset_t, info: *mut c_void) -> c_int {
    sigtimedwait(set, info, std::ptr::null())
}

fn real_wait(set: *const sigset_t, info: *mut c_void, timeout: *const timespec) -> c_int {
    match next(&SIGTIMEDWAIT, c"sigtimedwait") {
        0 => {
            // SAFETY: writes this thread's errno.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
        // SAFETY: the C library's sigtimedwait with the caller's arguments.
        p => unsafe { std::mem::transmute::<usize, WaitFn>(p)(set, info, timeout) },
    }
}

/// A signal accepted by sigwaitinfo or sigtimedwait: if it is one of our timers', the
/// engine dequeues it now and `si_overrun` gets the count fixed by that dequeue.
fn accepted(svc: &Service, info: &mut [u8; SIGINFO]) {
    let (code, id) = siginfo_code_and_timer(info);
    if code != uipc::timers::SI_TIMER {
        return;
    }
    let saved = errno_now();
    let _held = SignalsBlocked::new();
    if let Ok(overrun) = svc.getoverrun(id) {
        info[20..24].copy_from_slice(&overrun.to_le_bytes());
    }
    // The call succeeded; errno stays the caller's.
    set_errno(saved);
}

/// How long an unblocking call waits at most for the service thread.
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

impl Service {
    /// Fires the timers due by now and waits (at most [`CATCH_UP_WAIT`] in all) until the
    /// service thread has queued their signals in the kernel, and any it was firing or
    /// sending. All signals
    /// stay blocked meanwhile.
    pub(crate) fn catch_up(&self) {
        let saved = errno_now();
        let _held = SignalsBlocked::new();
        self.engine.run_expired();
        // A run of the service thread's that took a due timer off the heap before ours has
        // put its signal in the outbox once `firing` is back to zero.
        let start = Instant::now();
        while self.firing.load(Ordering::Acquire) != 0 && start.elapsed() < CATCH_UP_WAIT {
            std::thread::yield_now();
        }
        // The batch holding what is queued now, or else the one being sent (taken from the
        // outbox, not yet in the kernel).
        let target = {
            let outbox = self.outbox.0.lock().unwrap_or_else(|e| e.into_inner());
            let taken = self.batches_taken.load(Ordering::Acquire);
            taken + u64::from(!outbox.is_empty())
        };
        if self.batches_sent.load(Ordering::Acquire) >= target {
            set_errno(saved);
            return;
        }
        self.engine.clock_was_set();
        while self.batches_sent.load(Ordering::Acquire) < target && start.elapsed() < CATCH_UP_WAIT
        {
            std::thread::yield_now();
        }
        set_errno(saved);
    }
}
