//! `libuipc_preload.so`: loaded with `LD_PRELOAD` (as `uipc run` does), it routes a program's
//! SysV IPC calls to the uipc daemon named by `$UIPC_SOCKET`, so unmodified programs and the
//! processes they fork share uipc's semaphores, message queues and shared memory.
//!
//! Exports: semget, semop, semtimedop, semctl, msgget, msgsnd, msgrcv, msgctl, shmget, shmat,
//! shmdt, shmctl, and fork (to hand inherited attachments to the daemon). Without
//! `$UIPC_SOCKET` each call goes to the kernel unchanged.
//!
//! Every export catches panics (none crosses the C ABI: the call fails with EINVAL instead),
//! sets errno through `__errno_location` on failure and leaves it untouched on success. The
//! caller's pointers are never dereferenced: copies go through [`user`], so a bad pointer is
//! EFAULT as from the kernel. A daemon that cannot be reached gives ENOSYS.
//!
//! Signals: semop, semtimedop, msgsnd and msgrcv that sleep are cancelled by a signal handler
//! (EINTR, never restarted, whatever SA_RESTART says), as on Linux; see
//! `uipc_proto::client`.
//!
//! ## Not supported yet
//! - File locks (flock, fcntl/fcntl64 lock commands, lockf, and close/dup2/dup3 effects) and
//!   POSIX timers (timer_create and friends): not exported; `uipc run --locks/--timers` do not
//!   exist yet, so these calls reach the kernel.
//! - `syscall(SYS_semop, ...)` and the other raw system call numbers go to the kernel.
//! - vfork, clone and posix_spawn children are not announced to the daemon; as they exec
//!   (dropping attachments) or share the parent's memory, only nattch during that window
//!   differs. A fork by raw syscall is not seen either.
//! - execve is seen when the new image makes its first call (its `Hello` says it is new): an
//!   image that never calls keeps its old attachments counted until it exits, and one started
//!   without the library keeps them too.
//! - Async-signal safety: a call from a signal handler allocates and may take the attachment
//!   table's lock; it uses a separate connection when the thread's own is busy.
//! - semctl's variadic argument is read as x86-64 and aarch64 pass it; other ABIs are not
//!   handled. The structure layouts are x86-64's.
//! - A shmat at a given address checks only the daemon's record and the kernel's
//!   MAP_FIXED_NOREPLACE; if mapping fails after the daemon recorded the attachment, the
//!   library detaches it again, which sets the segment's dtime.
//! - Messages longer than 8 MiB (msgmax raised past it) cannot be sent (EFAULT).
//! - `uipc locks`, state save/restore (`--state`): see the daemon.

mod abi;
mod conn;
mod fork;
mod msg;
mod sem;
mod shm;
mod user;

use std::panic::{catch_unwind, AssertUnwindSafe};
use uipc::Errno;

fn errno_slot() -> *mut libc::c_int {
    // SAFETY: glibc's per-thread errno location, always valid.
    unsafe { libc::__errno_location() }
}

/// Runs an export's body: its value, or -1 with errno set; a panic is EINVAL.
fn guard(f: impl FnOnce() -> Result<i64, Errno>) -> i64 {
    // SAFETY: reads this thread's errno.
    let saved = unsafe { *errno_slot() };
    let result = catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(Errno::EINVAL));
    let (value, errno) = match result {
        Ok(v) => (v, saved),
        Err(e) => (-1, e.raw()),
    };
    // SAFETY: writes this thread's errno.
    unsafe { *errno_slot() = errno };
    value
}

extern "C" fn init() {
    // SAFETY: registers a child handler that only bumps an atomic counter.
    unsafe { libc::pthread_atfork(None, None, Some(conn::after_fork_in_child)) };
}

/// Runs [`init`] when the library is loaded.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
