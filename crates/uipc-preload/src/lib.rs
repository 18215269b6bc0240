//! `libuipc_preload.so`: loaded with `LD_PRELOAD` (as `uipc run` does), it routes a program's
//! SysV IPC calls to the uipc daemon named by `$UIPC_SOCKET`, so unmodified programs and the
//! processes they fork share uipc's semaphores, message queues and shared memory.
//!
//! Exports: semget, semop, semtimedop, semctl, msgget, msgsnd, msgrcv, msgctl, shmget, shmat,
//! shmdt, shmctl, and fork (to hand inherited attachments to the daemon). Without
//! `$UIPC_SOCKET` each call goes to the kernel unchanged.
//!
//! File locks (`locks.rs`): fcntl and fcntl64 (lock commands only; every other command goes to
//! libc's fcntl with its argument unchanged), flock, lockf, lockf64, and close, dup2, dup3,
//! fclose, close_range and closefrom (which tell the daemon before a descriptor that may hold
//! locks closes). They go to
//! the daemon only with `$UIPC_LOCKS=1` (`uipc run --locks`); otherwise straight to libc.
//!
//! Also `syscall` (`syscall.rs`: the SysV IPC numbers reach the exports above, the timer
//! numbers the timer service, the rest the C library's `syscall`), and timer_create,
//! timer_settime, timer_gettime, timer_getoverrun, timer_delete: with `$UIPC_TIMERS=1`
//! (`uipc run --timers`) served in the process by the engine's timer table
//! (`timer_service.rs`), otherwise the C library's own functions.
//!
//! Every export catches panics (none crosses the C ABI: the call fails with EINVAL instead),
//! sets errno through `__errno_location` on failure and leaves it untouched on success. Thread
//! cancellation is held off inside the library except while semop, semtimedop, msgsnd or
//! msgrcv waits for the daemon, where `pthread_cancel` acts as in the kernel's call (the
//! exports are `C-unwind` so the cancellation unwinds through them). The
//! caller's pointers are never dereferenced: copies go through [`user`], so a bad pointer is
//! EFAULT as from the kernel. A daemon that cannot be reached gives ENOSYS.
//!
//! Other preloaded libraries: fakeroot, for one, wraps `geteuid`, `fstat` and friends (and
//! calls SysV IPC from inside them). The library takes the ids it sends to the daemon and the
//! socket's identity from raw system calls, never through such wrappers.
//!
//! Signals: semop, semtimedop, msgsnd and msgrcv that sleep are cancelled by a signal handler
//! (EINTR, never restarted, whatever SA_RESTART says), as on Linux; see
//! `uipc_proto::client`.
//!
//! ## Not supported yet
//! - File locks: closes the library does not see drop nothing at once: raw
//!   `syscall(SYS_close)` or `syscall(SYS_close_range)`, closes inside libc other than
//!   fclose's (freopen, `posix_spawn` file actions), close-on-exec (the daemon sweeps at the new image's first
//!   call) and descriptors closed by a process that never calls the library. POSIX locks then
//!   stay until the process exits; OFD and flock locks until the daemon's next close, exit or
//!   exec sweep finds the description unreferenced.
//! - File locks: a close of a regular file or directory costs an fstat and a read of the
//!   daemon's lock hints, and a round trip if the file was ever asked to be locked (hint
//!   bytes are never cleared and may collide). The lock calls themselves cost one round trip
//!   carrying the descriptor (SCM_RIGHTS). `syscall(SYS_fcntl, ...)`/`syscall(SYS_flock, ...)` reach the
//!   kernel, whose locks do not see uipc's.
//! - File locks: the lock hints are mapped on the first close of a regular file or directory
//!   in a program image; if that close happens in a vforked child before exec, the mapping
//!   (a daemon call, which allocates) is made there.
//! - File locks: `struct flock` is read as x86-64 lays it out (32 bytes); F_GETLK/F_SETLK on
//!   32-bit ABIs (the non-64 `struct flock`) are not handled. A restarted F_SETLKW (handler
//!   with SA_RESTART) keeps its place in the daemon's queue; Linux re-queues it at the end.
//! - `syscall()` takes its variadic arguments as seven `long`s, right on x86-64 and aarch64
//!   only (`syscall.rs`). Raw system call instructions (not through `syscall()`) reach the
//!   kernel, as do the 32-bit `ipc(2)` multiplexer and the time64 variants of other ABIs.
//!   The file lock numbers (`SYS_fcntl`, `SYS_flock`, `SYS_close`, ...) are not routed: the
//!   lock code makes those very calls through `syscall()` as its way to the kernel.
//! - POSIX timers (`--timers`), where uipc differs from Linux:
//!   - The kernel does not say when a signal is taken: the service looks at its pending sets
//!     (by signal number) at growing gaps after sending and around each period boundary.
//!     A periodic timer whose taken signal is seen late (the service thread delayed by load,
//!     periods of a few hundred µs) counts the boundaries in between as overrun, which
//!     getoverrun reports but no signal carries: such timers deliver fewer signals than Linux
//!     (measured with a handler, 1 s: 1 ms periods 981 signals against the host's 990;
//!     200 µs periods 2,361 against 4,899).
//!   - `si_overrun`: a still-pending process signal is taken back and queued again with the
//!     overrun at each boundary, so a signal taken right after a boundary, before that update,
//!     carries one less than getoverrun then returns (Linux: equal). A SIGEV_THREAD_ID signal
//!     cannot be taken back from another thread's queue: its `si_overrun` is always 0 (its
//!     getoverrun is right). Re-queueing moves it behind other queued signals of its number.
//!   - Another pending signal of the same number (another timer's, a `sigqueue`) makes a
//!     taken timer signal look pending: that timer counts overruns instead of firing until
//!     the other signal is taken.
//!   - settime and delete take a still-pending process signal of the timer out of the kernel
//!     (Linux leaves it visible to `sigpending()` and drops it at dequeue); a pending
//!     SIGEV_THREAD_ID signal of a deleted or re-set timer is delivered.
//!   - exec: Linux 6.18 keeps the process's id counter across execve (observed: ids 0 and 1
//!     before it, 2 after); a new image under uipc starts its table at 0. (The signals the
//!     service queued, being SI_TIMER, are dropped by the kernel at execve, as Linux drops its
//!     own.) A vfork child that calls the timer functions replaces its parent's service.
//!   - RLIMIT_SIGPENDING counts this process's timers only (Linux: every process of the real
//!     uid, and queued signals); while pending, the signals the service queues count as the
//!     kernel's ordinary queued signals (Linux preallocates them), and one refused at the
//!     kernel's limit is lost.
//!   - CPU-time clocks are polled every 10 ms (Linux: at the tick); alarm clocks are
//!     EOPNOTSUPP (a machine without an RTC wake alarm) even where the host has one.
//!   - SIGEV_THREAD uses only the stack size of `sigev_notify_attributes`, and its `timer_t`
//!     is the plain id (glibc's encodes a pointer). A NULL sigevent is glibc's: SIGALRM with
//!     value 0 (through `syscall()`, the kernel's: `sival_int` = id).
//!   - `prctl(PR_TIMER_CREATE_RESTORE_IDS)` is not routed (it reaches the kernel); the
//!     kernel's `/proc/PID/timers` lists none of uipc's timers. Time namespaces are ignored.
//!   - The exports block signals while they run (a handler calling them cannot deadlock on
//!     its own thread) but may allocate in rare paths (the engine's heap growing), so a call
//!     from a handler that interrupted `malloc` is not safe.
//! - vfork, clone and posix_spawn children are not announced to the daemon; as they exec
//!   (dropping attachments) or share the parent's memory, only nattch during that window
//!   differs. A fork by raw syscall, or inside libc (daemon(3) calls its internal fork), is
//!   not announced either: the child's inherited attachments are mapped but not counted.
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
//! - SHM_REMAP over part of an attachment: Linux splits the old mapping and counts each piece
//!   in nattch (it counts mappings); uipc drops the whole old attachment from its books while
//!   the kernel keeps its remaining pages mapped (the differential run leaves SHM_REMAP out
//!   for this reason).
//! - munmap, mremap or a MAP_FIXED mapping over an attachment is not seen: Linux would count
//!   the attachment gone (nattch), uipc keeps it until shmdt, exec or exit.
//! - A fork while another thread is between the daemon's shmat reply and its mapping can give
//!   the child a recorded attachment it does not have (nattch one too high until it exits).
//! - The attachment table is one mutex, taken by shmat, shmdt and fork.

mod abi;
mod attach;
mod conn;
mod fork;
mod locks;
mod mapbuf;
mod msg;
mod sem;
mod shm;
mod sigmask;
mod syscall;
mod timer;
mod timer_abi;
mod timer_in_flight;
mod timer_service;
mod timer_signals;
mod timer_thread;
mod user;

use std::panic::{catch_unwind, AssertUnwindSafe};
use uipc::Errno;

fn errno_slot() -> *mut libc::c_int {
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
fn guarded<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let _no_cancel = NoCancel::new();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(Errno::EINVAL))
}

fn errno_now() -> libc::c_int {
    // SAFETY: reads this thread's errno.
    unsafe { *errno_slot() }
}

/// An export's result: the value, or -1 with errno set; on success errno is `saved`.
fn finish(result: Result<i64, Errno>, saved: libc::c_int) -> i64 {
    let (value, errno) = match result {
        Ok(v) => (v, saved),
        Err(e) => (-1, e.raw()),
    };
    // SAFETY: writes this thread's errno.
    unsafe { *errno_slot() = errno };
    value
}

/// Runs an export that is not a cancellation point.
fn guard(f: impl FnOnce() -> Result<i64, Errno>) -> i64 {
    let saved = errno_now();
    finish(guarded(f), saved)
}

/// Runs an export that is a cancellation point (semop, semtimedop, msgsnd, msgrcv): `call`
/// runs with the caller's cancelability, so `pthread_cancel` acts during the wait for the
/// daemon as during the system call (the export is `C-unwind`, and that part of the library
/// does not panic). `call` holds cancellation off and catches panics around everything else
/// itself ([`guarded`]; [`conn::call_with`] does so around encoding, connecting and decoding).
fn guard_blocking(call: impl FnOnce() -> Result<i64, Errno>) -> i64 {
    let saved = errno_now();
    finish(call(), saved)
}

/// The library's constructor: everything that may allocate or take a lock happens here, once,
/// rather than in a first call that might come from a signal handler.
extern "C" fn init() {
    // SAFETY: registers a child handler that only bumps an atomic counter.
    unsafe { libc::pthread_atfork(None, None, Some(conn::after_fork_in_child)) };
    conn::prepare();
    syscall::prepare();
    fork::prepare();
    locks::prepare();
}

/// Runs [`init`] when the library is loaded.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
