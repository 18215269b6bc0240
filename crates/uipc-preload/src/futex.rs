//! The library's futex calls, on the low 32 bits of a word the daemon shares with it (a fast
//! path's sleeper record, a lock slot's owner or state word). Each is one raw system call
//! (`kernel_sys!`: the program's `syscall` may be ours); none takes a lock or allocates.

use crate::kernel::kernel_sys;
use std::sync::atomic::{AtomicU64, Ordering};

/// An untimed FUTEX_WAIT on `word` while its low 32 bits are `expect`: whether a signal
/// handler ended it (EINTR). The kernel restarts it after a handler with SA_RESTART, which is
/// the rule of the calls that sleep here (flock, F_SETLKW).
pub(crate) fn wait(word: &AtomicU64, expect: u32) -> bool {
    let rc = kernel_sys!(
        libc::SYS_futex,
        word.as_ptr(),
        libc::FUTEX_WAIT,
        expect,
        0usize,
        0,
        0
    );
    rc < 0 && crate::guard::errno_now() == libc::EINTR
}

/// FUTEX_WAIT on `word` while its low 32 bits are `expect`, at most `ns` nanoseconds (always
/// timed: the kernel restarts an untimed wait after an SA_RESTART handler, semop and msgrcv
/// must not): whether a signal handler ended it (EINTR).
pub(crate) fn wait_timed(word: &AtomicU64, expect: u32, ns: i128) -> bool {
    let ns = ns.clamp(0, 86_400 * 1_000_000_000);
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    let rc = kernel_sys!(
        libc::SYS_futex,
        word.as_ptr(),
        libc::FUTEX_WAIT,
        expect,
        &ts as *const libc::timespec,
        0,
        0
    );
    rc < 0 && crate::guard::errno_now() == libc::EINTR
}

/// Sleeps up to a millisecond while `word`'s low 32 bits stay what they are now: a short wait
/// for another party (the daemon) to change a record.
pub(crate) fn nap(word: &AtomicU64) {
    wait_timed(word, word.load(Ordering::Acquire) as u32, 1_000_000);
}

/// FUTEX_WAKE of one thread asleep on `word`.
pub(crate) fn wake_one(word: &AtomicU64) {
    kernel_sys!(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
}

/// FUTEX_WAKE of every thread asleep on `word`.
pub(crate) fn wake_all(word: &AtomicU64) {
    kernel_sys!(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
}
