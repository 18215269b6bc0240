//! Signal handlers kept off the calling thread for a scope ([`SignalsBlocked`]).
//!
//! A lock that the library takes and that a signal handler calling the library might also
//! take is held only inside such a scope: no handler then runs on a thread that holds it, so
//! the handler cannot deadlock on its own thread; other threads wait for the lock as usual.
//! A signal sent in the scope stays pending and its handler runs when the scope ends.
//!
//! Two ways, chosen per program image:
//! - Blocking (the default): all signals blocked with `pthread_sigmask` at the start and the
//!   old mask restored at the end, two system calls. `pthread_sigmask` leaves out the C
//!   library's internal signals (thread cancellation, set*id broadcast), so those still
//!   reach the thread.
//! - Holding off (`uipc run --timers`, where every handler the program installs through the
//!   C library runs behind the library's trampoline, `timer_handlers.rs`): the scope only
//!   counts itself in a thread-local depth, no system call. A handler's signal that arrives
//!   on a thread inside a scope is not handed to the handler: the trampoline adds the signal
//!   to the mask the interrupted code gets back at the handler's return (the `uc_sigmask` of
//!   the signal frame), queues the same siginfo again to the thread (`rt_tgsigqueueinfo`,
//!   allowed for any `si_code` when a thread signals itself) and records the signal as held
//!   ([`hold_off`]). When the outermost scope ends it unblocks the held signals, and the
//!   kernel delivers them then, with their siginfo, as it would have after a blocking scope.
//!   Faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS sent by the kernel) are never
//!   held: returning would fault again.
//!
//! The depth and the held set are const-initialised thread-locals (plain TLS, no lazy set-up,
//! safe to touch in a handler); the held set is an atomic so that the handler's `fetch_or`
//! and the scope's final `swap` never lose a signal. Compiler fences keep the depth's
//! changes on the right side of the locks the scope guards, as seen by a handler on the same
//! thread.

use crate::kernel::next_symbol_cached as next;
use libc::c_void;
use libc::{c_int, sigset_t};
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{compiler_fence, AtomicU64, AtomicUsize, Ordering};

type MaskFn = unsafe extern "C" fn(c_int, *const sigset_t, *mut sigset_t) -> c_int;

static PTHREAD_SIGMASK: AtomicUsize = AtomicUsize::new(0);

/// Looks up the C library's `pthread_sigmask`; called by the library's constructor.
pub fn prepare() {
    next(&PTHREAD_SIGMASK, c"pthread_sigmask");
}

/// The C library's `pthread_sigmask` (the library's own mask changes).
pub fn set_mask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int {
    match next(&PTHREAD_SIGMASK, c"pthread_sigmask") {
        0 => libc::ENOSYS,
        // SAFETY: the C library's pthread_sigmask with the caller's arguments.
        p => unsafe { std::mem::transmute::<usize, MaskFn>(p)(how, set, old) },
    }
}

thread_local! {
    /// How many scopes this thread is inside (holding-off mode).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Signals held off in this thread's scopes, bit `sig - 1`.
    static HELD: AtomicU64 = const { AtomicU64::new(0) };
}

/// Whether this image holds handlers off rather than blocking signals: every handler the
/// program installs runs behind the trampoline.
fn holding_off() -> bool {
    crate::exec_env::timers_routed()
}

/// Whether this thread is inside a scope in holding-off mode.
pub fn inside_scope() -> bool {
    DEPTH.with(Cell::get) > 0
}

/// A fault the kernel raised for the instruction that was running: never held off.
fn is_fault(sig: c_int, code: c_int) -> bool {
    code > 0
        && matches!(
            sig,
            libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGFPE
                | libc::SIGILL
                | libc::SIGTRAP
                | libc::SIGSYS
        )
}

/// Called by the trampoline on a thread inside a scope: keeps the signal for the scope's end.
/// Returns false when the handler must run now instead (a fault, or the kernel refused to
/// queue the signal again).
///
/// # Safety
/// `info` and `context` are the siginfo and ucontext of the signal frame being handled.
pub unsafe fn hold_off(sig: c_int, info: *mut c_void, context: *mut c_void) -> bool {
    if info.is_null() || context.is_null() || !(1..=64).contains(&sig) {
        return false;
    }
    // SAFETY: `info` is the frame's siginfo (the caller's contract).
    let code = unsafe { (*info.cast::<libc::siginfo_t>()).si_code };
    if is_fault(sig, code) {
        return false;
    }
    // SAFETY: the calling thread queues a signal to itself with a copy of the siginfo it was
    // given; getpid and gettid take no arguments.
    let queued = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::syscall(libc::SYS_getpid),
            libc::syscall(libc::SYS_gettid),
            sig,
            info,
        )
    };
    if queued != 0 {
        return false;
    }
    // SAFETY: `context` is the frame's ucontext (the caller's contract); the mask written
    // there is the one the kernel restores when the handler returns.
    unsafe { libc::sigaddset(&mut (*context.cast::<libc::ucontext_t>()).uc_sigmask, sig) };
    HELD.with(|h| h.fetch_or(1 << (sig - 1), Ordering::Relaxed));
    true
}

/// Signal handlers kept off this thread until drop: see the module doc. Create it before
/// taking the lock it guards, and drop it after releasing that lock.
pub struct SignalsBlocked {
    /// The mask to restore (blocking mode); `None` when holding off.
    old: Option<libc::sigset_t>,
}

impl SignalsBlocked {
    /// Blocks every signal the C library lets a program block, or counts a holding-off scope.
    pub fn new() -> SignalsBlocked {
        if holding_off() {
            DEPTH.with(|d| d.set(d.get() + 1));
            compiler_fence(Ordering::SeqCst);
            return SignalsBlocked { old: None };
        }
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises `all`; pthread_sigmask reads it and writes the old
        // mask into `old`, which it always fills when given a valid `how`.
        unsafe {
            libc::sigfillset(all.as_mut_ptr());
            set_mask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
            SignalsBlocked {
                old: Some(old.assume_init()),
            }
        }
    }
}

impl Default for SignalsBlocked {
    fn default() -> Self {
        SignalsBlocked::new()
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            set_mask(libc::SIG_SETMASK, old, std::ptr::null_mut());
            return;
        }
        compiler_fence(Ordering::SeqCst);
        let depth = DEPTH.with(|d| {
            let v = d.get().saturating_sub(1);
            d.set(v);
            v
        });
        if depth > 0 {
            return;
        }
        let held = HELD.with(|h| h.swap(0, Ordering::Relaxed));
        if held == 0 {
            return;
        }
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises `set`, sigaddset adds valid signal numbers (1..=64),
        // and pthread_sigmask only reads it.
        unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for sig in 1..=64 {
                if held & (1 << (sig - 1)) != 0 {
                    libc::sigaddset(set.as_mut_ptr(), sig);
                }
            }
            set_mask(libc::SIG_UNBLOCK, set.as_ptr(), std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(sig: libc::c_int) -> bool {
        let mut now = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: reads the current mask into `now`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), now.as_mut_ptr());
            libc::sigismember(now.as_ptr(), sig) == 1
        }
    }

    #[test]
    fn signals_are_blocked_inside_and_the_old_mask_comes_back() {
        assert!(!blocked(libc::SIGUSR1));
        {
            let _outer = SignalsBlocked::new();
            assert!(blocked(libc::SIGUSR1) && blocked(libc::SIGALRM));
            {
                let _inner = SignalsBlocked::new();
                assert!(blocked(libc::SIGUSR1));
            }
            assert!(
                blocked(libc::SIGUSR1),
                "the inner scope restores the outer's mask"
            );
        }
        assert!(!blocked(libc::SIGUSR1) && !blocked(libc::SIGALRM));
    }
}
