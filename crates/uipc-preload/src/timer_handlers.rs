//! sigaction(2), signal(3), bsd_signal(3), sysv_signal(3) and sigset(3) under `uipc run
//! --timers`: every handler the program installs runs behind [`trampoline`].
//!
//! The trampoline does two things before it calls the program's handler:
//! - Holds the signal off while the thread is inside one of the library's scopes
//!   (`sigmask.rs`): the timer exports take locks without blocking signals, so a handler that
//!   calls them must not run on a thread that holds those locks. The signal is queued again
//!   and delivered when the scope ends.
//! - Fixes `si_overrun`: the service queues a timer's signal with the overrun known then;
//!   Linux writes the count of the expirations up to the moment the signal is dequeued. When
//!   the signal is one of this process's timers' (SI_TIMER), the trampoline dequeues it from
//!   the engine at once (as timer_getoverrun would) and writes that count into the siginfo on
//!   the signal frame. Any other signal reaches the handler untouched.
//!
//! The trampoline is always installed with SA_SIGINFO and without SA_RESETHAND; it calls a
//! handler the program gave without SA_SIGINFO with the signal number alone, and does
//! SA_RESETHAND's reset itself before calling the handler (so a held-off signal is not reset
//! twice). The old action that sigaction reports is the program's: its handler and its
//! SA_SIGINFO and SA_RESETHAND bits. signal() has the C library's BSD semantics (SA_RESTART,
//! the signal blocked in its handler), sysv_signal() SysV's (SA_RESETHAND, SA_NODEFER), and
//! sigset() System V's (SIG_HOLD, the signal unblocked by a new disposition). A handler
//! installed by a raw rt_sigaction system call is not seen: it runs without the trampoline
//! ("Not supported" list).
//!
//! A timer whose signal the process ignores is parked by the service, not re-armed (Linux's
//! ignored list); a new action that replaces SIG_IGN and does not ignore the signal wakes the
//! parked timers of that signal (`Service::unignore`), as Linux's sigaction does.
//!
//! The program's handlers and flags sit in arrays of atomics indexed by signal number, written
//! before the trampoline is installed and read by it: nothing here allocates or locks, and
//! the trampoline calls only timer_getoverrun's async-signal-safe path.

use crate::guard::{errno_now, set_errno};
use crate::timer_abi::{siginfo_code_and_timer, SIGINFO};
use crate::timer_signals::action_ignores;
use libc::{c_int, c_void, sighandler_t};
use std::sync::atomic::{AtomicUsize, Ordering};

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type InfoHandler = extern "C" fn(c_int, *mut c_void, *mut c_void);
type PlainHandler = extern "C" fn(c_int);

const NSIG: usize = 65;
/// The program's handler of each signal that goes through the trampoline (0: none).
static HANDLERS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
/// The program's SA_SIGINFO and SA_RESETHAND bits for that handler.
static FLAGS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The flags the trampoline keeps for the program (the others go to the kernel as given).
const OWN_FLAGS: c_int = libc::SA_SIGINFO | libc::SA_RESETHAND;

fn next() -> Option<SigactionFn> {
    let p = crate::kernel::next_symbol_cached(&NEXT, c"sigaction");
    // SAFETY: a non-null result is the C library's sigaction.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, SigactionFn>(p) })
}

/// Looks up the C library's sigaction; called by the library's constructor.
pub fn prepare() {
    let _ = next();
}

fn trampoline_address() -> usize {
    trampoline as *const () as usize
}

extern "C" fn trampoline(sig: c_int, info: *mut c_void, context: *mut c_void) {
    // SAFETY: the kernel's siginfo and ucontext of this handler's frame.
    if crate::sigmask::inside_scope() && unsafe { crate::sigmask::hold_off(sig, info, context) } {
        return;
    }
    let Some(slot) = HANDLERS.get(sig as usize) else {
        return;
    };
    let handler = slot.load(Ordering::Acquire);
    let flags = FLAGS[sig as usize].load(Ordering::Acquire) as c_int;
    if flags & libc::SA_RESETHAND != 0 {
        reset_to_default(sig);
    }
    if handler == 0 {
        return;
    }
    if flags & libc::SA_SIGINFO == 0 {
        // SAFETY: the program's one-argument handler, recorded by sigaction below.
        let f = unsafe { std::mem::transmute::<usize, PlainHandler>(handler) };
        f(sig);
        return;
    }
    if !info.is_null() {
        // SAFETY: the kernel's siginfo on this handler's frame (128 bytes, writable).
        let bytes = unsafe { &mut *info.cast::<[u8; SIGINFO]>() };
        fix_overrun(bytes);
    }
    // SAFETY: the program's SA_SIGINFO handler, recorded by sigaction below.
    let f = unsafe { std::mem::transmute::<usize, InfoHandler>(handler) };
    f(sig, info, context);
}

/// SA_RESETHAND's reset, done by the trampoline as the kernel does it at delivery.
fn reset_to_default(sig: c_int) {
    HANDLERS[sig as usize].store(0, Ordering::Release);
    FLAGS[sig as usize].store(0, Ordering::Release);
    let Some(real) = next() else {
        return;
    };
    // SAFETY: a zeroed sigaction is SIG_DFL with no flags and an empty mask.
    let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: the C library's sigaction (async-signal-safe) with a valid action.
    unsafe { real(sig, &dfl, std::ptr::null_mut()) };
}

/// A timer signal of ours: dequeued now, its `si_overrun` the count that dequeue fixed.
fn fix_overrun(info: &mut [u8; SIGINFO]) {
    let (code, id) = siginfo_code_and_timer(info);
    if code != uipc::timers::SI_TIMER {
        return;
    }
    // Restored below for the interrupted code.
    let saved = errno_now();
    let overrun = std::panic::catch_unwind(|| crate::timer::getoverrun(id));
    if let Ok(Ok(v)) = overrun {
        info[20..24].copy_from_slice(&(v as i32).to_le_bytes());
    }
    set_errno(saved);
}

/// sigaction(2).
#[no_mangle]
pub extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(real) = next() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    let slot = (sig != libc::SIGKILL && sig != libc::SIGSTOP)
        .then(|| HANDLERS.get(sig as usize))
        .flatten()
        .filter(|_| crate::timer::routed());
    let Some(slot) = slot else {
        // SAFETY: the C library's sigaction with the caller's arguments.
        return unsafe { real(sig, act, old) };
    };
    let flags_slot = &FLAGS[sig as usize];
    let (before, before_flags) = (
        slot.load(Ordering::Acquire),
        flags_slot.load(Ordering::Acquire),
    );
    // SAFETY: `act`, when not null, is the caller's sigaction, read once here by copy.
    let wanted = (!act.is_null()).then(|| unsafe { *act });
    // The old action is always read: a change from SIG_IGN wakes the parked timers.
    let mut prev = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    let old_or_prev = if old.is_null() {
        prev.as_mut_ptr()
    } else {
        old
    };
    let handled =
        wanted.filter(|a| a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN);
    let r = match handled {
        Some(mut a) => {
            slot.store(a.sa_sigaction, Ordering::Release);
            flags_slot.store((a.sa_flags & OWN_FLAGS) as usize, Ordering::Release);
            a.sa_sigaction = trampoline_address();
            a.sa_flags = (a.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
            // SAFETY: the C library's sigaction with the caller's action, the trampoline in
            // place of its handler; the old action into the caller's or our own.
            unsafe { real(sig, &a, old_or_prev) }
        }
        // SAFETY: the C library's sigaction with the caller's arguments, the old action
        // into the caller's or our own.
        None => unsafe { real(sig, act, old_or_prev) },
    };
    if r != 0 {
        slot.store(before, Ordering::Release);
        flags_slot.store(before_flags, Ordering::Release);
        return r;
    }
    if wanted.is_some() && handled.is_none() {
        slot.store(0, Ordering::Release);
        flags_slot.store(0, Ordering::Release);
    }
    // SAFETY: the C library just filled the old action (the caller's or ours).
    let o = unsafe { &mut *old_or_prev };
    if o.sa_sigaction == trampoline_address() {
        o.sa_sigaction = before;
        o.sa_flags = (o.sa_flags & !OWN_FLAGS) | before_flags as c_int;
    }
    if let Some(a) = wanted {
        // Linux wakes the timers parked on an ignored signal only when a handler (or a
        // default action that does not ignore it) replaces SIG_IGN.
        if o.sa_sigaction == libc::SIG_IGN && !action_ignores(sig, a.sa_sigaction) {
            if let Some(svc) = crate::timer_service::current() {
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| svc.unignore(sig)));
            }
        }
    }
    r
}

/// glibc's SIG_HOLD disposition (sigset(3)).
const SIG_HOLD: sighandler_t = 2;

static NEXT_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static NEXT_BSD_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static NEXT_SYSV_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static NEXT_SIGSET: AtomicUsize = AtomicUsize::new(0);

type SignalFn = unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t;

/// The C library's function `name` with the caller's arguments (timers not routed here).
fn pass_on(slot: &AtomicUsize, name: &std::ffi::CStr, sig: c_int, h: sighandler_t) -> sighandler_t {
    match crate::kernel::next_symbol_cached(slot, name) {
        0 => {
            set_errno(libc::ENOSYS);
            libc::SIG_ERR
        }
        // SAFETY: the C library's function of this name and type.
        p => unsafe { std::mem::transmute::<usize, SignalFn>(p)(sig, h) },
    }
}

fn valid(sig: c_int, handler: sighandler_t) -> bool {
    handler != libc::SIG_ERR && (1..NSIG as c_int).contains(&sig)
}

/// Installs `handler` through [`sigaction`] with `flags`, the signal itself blocked in the
/// handler when `block_self`; the old handler, or SIG_ERR with errno.
fn install(sig: c_int, handler: sighandler_t, flags: c_int, block_self: bool) -> sighandler_t {
    if !valid(sig, handler) {
        set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    // SAFETY: a zeroed sigaction is a valid value; the mask is then set by sigemptyset.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: the mask is a sigset_t of `act`; `sig` is a valid signal number.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if block_self {
            libc::sigaddset(&mut act.sa_mask, sig);
        }
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if sigaction(sig, &act, &mut old) < 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// signal(3): the C library's BSD semantics (SA_RESTART, the signal blocked in its handler).
#[no_mangle]
pub extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if !crate::timer::routed() {
        return pass_on(&NEXT_SIGNAL, c"signal", sig, handler);
    }
    install(sig, handler, libc::SA_RESTART, true)
}

/// bsd_signal(3): as signal().
#[no_mangle]
pub extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if !crate::timer::routed() {
        return pass_on(&NEXT_BSD_SIGNAL, c"bsd_signal", sig, handler);
    }
    install(sig, handler, libc::SA_RESTART, true)
}

/// sysv_signal(3): reset to the default at delivery, the signal not blocked in its handler.
#[no_mangle]
pub extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if !crate::timer::routed() {
        return pass_on(&NEXT_SYSV_SIGNAL, c"sysv_signal", sig, handler);
    }
    install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, false)
}

/// The name glibc's headers give sysv_signal().
#[no_mangle]
pub extern "C" fn __sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    sysv_signal(sig, handler)
}

/// sigset(3): SIG_HOLD blocks the signal; any other disposition is installed (no flags, an
/// empty mask) and the signal unblocked. The result is SIG_HOLD if the signal was blocked
/// before, else the old disposition.
#[no_mangle]
pub extern "C" fn sigset(sig: c_int, disp: sighandler_t) -> sighandler_t {
    if !crate::timer::routed() {
        return pass_on(&NEXT_SIGSET, c"sigset", sig, disp);
    }
    if !valid(sig, disp) {
        set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    let mut one = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut before = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises `one`; `sig` is valid.
    unsafe {
        libc::sigemptyset(one.as_mut_ptr());
        libc::sigaddset(one.as_mut_ptr(), sig);
    }
    // SAFETY: `one` is initialised; `before` receives the mask (pthread_sigmask fills it).
    let was_held = |before: &std::mem::MaybeUninit<libc::sigset_t>| unsafe {
        libc::sigismember(before.as_ptr(), sig) == 1
    };
    if disp == SIG_HOLD {
        crate::sigmask::set_mask(libc::SIG_BLOCK, one.as_ptr(), before.as_mut_ptr());
        if was_held(&before) {
            return SIG_HOLD;
        }
        // SAFETY: a zeroed sigaction is a valid value for the old action.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if sigaction(sig, std::ptr::null(), &mut old) < 0 {
            return libc::SIG_ERR;
        }
        return old.sa_sigaction;
    }
    let old = install(sig, disp, 0, false);
    if old == libc::SIG_ERR {
        return old;
    }
    crate::timer_mask::sigprocmask(libc::SIG_UNBLOCK, one.as_ptr(), before.as_mut_ptr());
    if was_held(&before) {
        SIG_HOLD
    } else {
        old
    }
}
