//! sigaction(2) under `uipc run --timers`: `si_overrun` fixed when a handler takes a timer
//! signal, as Linux fixes it at the dequeue.
//!
//! The service queues a timer's signal with the overrun known then; Linux writes the count of
//! the expirations up to the moment the signal is dequeued. So a handler installed with
//! SA_SIGINFO is installed behind [`trampoline`]: when the signal is one of this process's
//! timers' (SI_TIMER), the trampoline dequeues it from the engine at once (as
//! timer_getoverrun would) and writes that count into the siginfo on the signal frame before
//! calling the program's handler. Any other signal reaches the handler untouched. sigaction's
//! old action reports the program's handler, never the trampoline.
//!
//! A timer whose signal the process ignores is parked by the service, not re-armed (Linux's
//! ignored list); a new action that replaces SIG_IGN and does not ignore the signal wakes the
//! parked timers of that signal (`Service::unignore`), as Linux's sigaction does. The C
//! library's signal(), bsd_signal() and sysv_signal() reach its sigaction internally, not
//! this export: a change they make wakes no parked timer.
//!
//! The program's handlers sit in an array of atomics indexed by signal number, written before
//! the trampoline is installed and read by it: nothing here allocates or locks, and the
//! trampoline calls only timer_getoverrun's async-signal-safe path.

use crate::timer_abi::{siginfo_code_and_timer, SIGINFO};
use crate::timer_signals::action_ignores;
use libc::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type Handler = extern "C" fn(c_int, *mut c_void, *mut c_void);

const NSIG: usize = 65;
/// The program's SA_SIGINFO handler of each signal that goes through the trampoline (0: none).
static HANDLERS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn next() -> Option<SigactionFn> {
    let p = crate::kernel::next_symbol_cached(&NEXT, c"sigaction");
    // SAFETY: a non-null result is the C library's sigaction.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, SigactionFn>(p) })
}

/// Looks up the C library's sigaction; called by the library's constructor.
pub fn prepare() {
    let _ = next();
}

extern "C" fn trampoline(sig: c_int, info: *mut c_void, context: *mut c_void) {
    let handler = HANDLERS
        .get(sig as usize)
        .map_or(0, |h| h.load(Ordering::Acquire));
    if !info.is_null() {
        // SAFETY: the kernel's siginfo on this handler's frame (128 bytes, writable).
        let bytes = unsafe { &mut *info.cast::<[u8; SIGINFO]>() };
        fix_overrun(bytes);
    }
    if handler != 0 {
        // SAFETY: the program's SA_SIGINFO handler, recorded by sigaction below.
        let f = unsafe { std::mem::transmute::<usize, Handler>(handler) };
        f(sig, info, context);
    }
}

/// A timer signal of ours: dequeued now, its `si_overrun` the count that dequeue fixed.
fn fix_overrun(info: &mut [u8; SIGINFO]) {
    let (code, id) = siginfo_code_and_timer(info);
    if code != uipc::timers::SI_TIMER {
        return;
    }
    // SAFETY: reads this thread's errno, restored below for the interrupted code.
    let saved = unsafe { *libc::__errno_location() };
    let overrun = std::panic::catch_unwind(|| crate::timer::getoverrun(id));
    if let Ok(Ok(v)) = overrun {
        info[20..24].copy_from_slice(&(v as i32).to_le_bytes());
    }
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved };
}

/// sigaction(2).
#[no_mangle]
pub extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(real) = next() else {
        // SAFETY: writes this thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    let slot = HANDLERS
        .get(sig as usize)
        .filter(|_| crate::timer::routed());
    let Some(slot) = slot else {
        // SAFETY: the C library's sigaction with the caller's arguments.
        return unsafe { real(sig, act, old) };
    };
    let before = slot.load(Ordering::Acquire);
    // SAFETY: `act`, when not null, is the caller's sigaction, read once here by copy.
    let wanted = (!act.is_null()).then(|| unsafe { *act });
    // The old action is always read: a change from SIG_IGN wakes the parked timers.
    let mut prev = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    let old_or_prev = if old.is_null() {
        prev.as_mut_ptr()
    } else {
        old
    };
    let r = match wanted {
        Some(mut a)
            if a.sa_flags & libc::SA_SIGINFO != 0
                && a.sa_sigaction != libc::SIG_DFL
                && a.sa_sigaction != libc::SIG_IGN =>
        {
            slot.store(a.sa_sigaction, Ordering::Release);
            a.sa_sigaction = trampoline as *const () as usize;
            // SAFETY: the C library's sigaction with the caller's action, the trampoline in
            // place of its handler; the old action into the caller's or our own.
            unsafe { real(sig, &a, old_or_prev) }
        }
        // SAFETY: the C library's sigaction with the caller's arguments, the old action
        // into the caller's or our own.
        _ => unsafe { real(sig, act, old_or_prev) },
    };
    if r == 0 {
        if wanted.is_some_and(|a| a.sa_flags & libc::SA_SIGINFO == 0 || a.sa_sigaction < 2) {
            slot.store(0, Ordering::Release);
        }
        // SAFETY: the C library just filled the old action (the caller's or ours).
        let was = unsafe { (*old_or_prev).sa_sigaction };
        if let Some(a) = wanted {
            // Linux wakes the timers parked on an ignored signal only when a handler (or a
            // default action that does not ignore it) replaces SIG_IGN.
            if was == libc::SIG_IGN && !action_ignores(sig, a.sa_sigaction) {
                if let Some(svc) = crate::timer_service::current() {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        svc.unignore(sig)
                    }));
                }
            }
        }
        // SAFETY: `old`, when not null, the C library just filled.
        if let Some(o) = unsafe { old.as_mut() } {
            if o.sa_sigaction == trampoline as *const () as usize {
                o.sa_sigaction = before;
            }
        }
    } else if wanted.is_some() {
        slot.store(before, Ordering::Release);
    }
    r
}
