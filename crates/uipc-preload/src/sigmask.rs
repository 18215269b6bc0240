//! All signals blocked on the calling thread for a scope.
//!
//! A lock that the library takes and that a signal handler calling the library might also
//! take is held only inside such a scope: no handler then runs on a thread that holds it, so
//! the handler cannot deadlock on its own thread; other threads wait for the lock as usual.
//! `pthread_sigmask` (async-signal-safe) leaves out the C library's internal signals
//! (thread cancellation, set*id broadcast), so those still reach the thread. A signal sent
//! in the scope stays pending and is delivered when the scope ends.

use crate::kernel::next_symbol_cached as next;
use libc::{c_int, sigset_t};
use std::mem::MaybeUninit;
use std::sync::atomic::AtomicUsize;

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

/// The thread's signal mask before the scope began, restored on drop.
pub struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    /// Blocks every signal the C library lets a program block.
    pub fn new() -> SignalsBlocked {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises `all`; pthread_sigmask reads it and writes the old
        // mask into `old`, which it always fills when given a valid `how`.
        unsafe {
            libc::sigfillset(all.as_mut_ptr());
            set_mask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
            SignalsBlocked {
                old: old.assume_init(),
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
        set_mask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
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
