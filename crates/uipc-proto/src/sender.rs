//! Who a client frame says it comes from: the pid and effective ids [`crate::transport`]
//! puts in SCM_CREDENTIALS, from the kernel on each frame or from sources a client installs
//! (the preload library's cached pid and ids, kept current by the library).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Where [`send_frame`](crate::transport::send_frame) gets the pid it puts in SCM_CREDENTIALS (0: a raw getpid).
static PID_SOURCE: AtomicUsize = AtomicUsize::new(0);
/// Where [`send_frame`](crate::transport::send_frame) gets the effective ids it puts in SCM_CREDENTIALS (0: raw geteuid and
/// getegid on every frame).
static ID_SOURCE: AtomicUsize = AtomicUsize::new(0);

/// Makes [`send_frame`](crate::transport::send_frame) take the sender's pid from `source` instead of a getpid system call
/// (the preload library's cached pid). `source` must return the calling process's pid: the
/// kernel refuses a frame with any other (EPERM).
pub fn set_pid_source(source: fn() -> i32) {
    PID_SOURCE.store(source as usize, Ordering::Release);
}

/// Makes [`send_frame`](crate::transport::send_frame) take the effective uid and gid it sends from `source` instead of two
/// system calls per frame (the preload library's cache, renewed when the ids may have
/// changed). `source(false)` may answer from a cache; `source(true)` must ask the kernel. The
/// kernel still checks every frame's ids against the sender's (a uid or gid it does not hold
/// is EPERM, one its user namespace cannot map EINVAL): a frame refused so is sent again once
/// with `source(true)`'s ids.
pub fn set_id_source(source: fn(bool) -> (u32, u32)) {
    ID_SOURCE.store(source as usize, Ordering::Release);
}

pub(crate) fn own_pid() -> libc::pid_t {
    match PID_SOURCE.load(Ordering::Acquire) {
        // SAFETY: getpid takes no arguments and cannot fail (raw: see `fill_control`).
        0 => unsafe { libc::syscall(libc::SYS_getpid) as libc::pid_t },
        f => {
            // SAFETY: only `set_pid_source` stores a non-zero value, a `fn() -> i32`.
            let source = unsafe { std::mem::transmute::<usize, fn() -> i32>(f) };
            source()
        }
    }
}

/// The effective uid and gid, asked of the kernel.
pub fn kernel_effective_ids() -> (u32, u32) {
    // Raw system calls: another preloaded library (fakeroot's) may fake the libc getters, and
    // the kernel refuses credentials the process does not hold.
    // SAFETY: geteuid and getegid take no arguments and cannot fail.
    unsafe {
        (
            libc::syscall(libc::SYS_geteuid) as u32,
            libc::syscall(libc::SYS_getegid) as u32,
        )
    }
}

pub(crate) fn own_ids(fresh: bool) -> (u32, u32) {
    match ID_SOURCE.load(Ordering::Acquire) {
        0 => kernel_effective_ids(),
        f => {
            // SAFETY: only `set_id_source` stores a non-zero value, a `fn(bool) -> (u32, u32)`.
            let source = unsafe { std::mem::transmute::<usize, fn(bool) -> (u32, u32)>(f) };
            source(fresh)
        }
    }
}
