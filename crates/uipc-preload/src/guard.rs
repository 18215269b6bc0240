//! What every export runs in: no panic escapes into C (a panic is EINVAL), thread
//! cancellation is held off while library code runs (its socket calls are cancellation points,
//! and a cancellation must not unwind through `catch_unwind`), and the result is C's: the
//! value, or -1 with `errno` set, `errno` left as it was on success.

use std::panic::{catch_unwind, AssertUnwindSafe};
use uipc::Errno;

/// This thread's `errno`.
pub(crate) fn errno_slot() -> *mut libc::c_int {
    // SAFETY: glibc's per-thread errno location, always valid.
    unsafe { libc::__errno_location() }
}

const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
}

/// Thread cancellation held off for a scope, and restored after.
struct NoCancel(libc::c_int);

impl NoCancel {
    fn new() -> NoCancel {
        let mut old = 0;
        // SAFETY: sets this thread's cancelability state, saving the old one in a live int.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel(old)
    }
}

impl Drop for NoCancel {
    fn drop(&mut self) {
        let mut ignored = 0;
        // SAFETY: restores the state saved by `new`.
        unsafe { pthread_setcancelstate(self.0, &mut ignored) };
    }
}

/// Runs library code with no panic escaping (a panic is EINVAL) and thread cancellation held
/// off: the socket calls inside are cancellation points, and a cancellation must not unwind
/// through `catch_unwind`.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let _no_cancel = NoCancel::new();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(Errno::EINVAL))
}

/// The value of this thread's `errno`.
pub(crate) fn errno_now() -> libc::c_int {
    // SAFETY: reads this thread's errno.
    unsafe { *errno_slot() }
}

/// Sets this thread's `errno` to `e`.
pub(crate) fn set_errno(e: libc::c_int) {
    // SAFETY: writes this thread's errno.
    unsafe { *errno_slot() = e };
}

/// An export's result: the value, or -1 with errno set; on success errno is `saved`.
pub(crate) fn finish(result: Result<i64, Errno>, saved: libc::c_int) -> i64 {
    let (value, errno) = match result {
        Ok(v) => (v, saved),
        Err(e) => (-1, e.raw()),
    };
    // SAFETY: writes this thread's errno.
    unsafe { *errno_slot() = errno };
    value
}

/// Runs an export that is not a cancellation point.
pub(crate) fn guard(f: impl FnOnce() -> Result<i64, Errno>) -> i64 {
    let saved = errno_now();
    finish(guarded(f), saved)
}

/// Runs an export that is a cancellation point (semop, semtimedop, msgsnd, msgrcv): `call`
/// runs with the caller's cancelability, so `pthread_cancel` acts during the wait for the
/// daemon as during the system call (the export is `C-unwind`, and that part of the library
/// does not panic). `call` holds cancellation off and catches panics around everything else
/// itself ([`guarded`]; [`crate::conn::call_with`] does so around encoding, connecting and decoding).
pub(crate) fn guard_blocking(call: impl FnOnce() -> Result<i64, Errno>) -> i64 {
    let saved = errno_now();
    finish(call(), saved)
}
