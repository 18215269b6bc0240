//! fork(2) with attachments: the child inherits the parent's shared-memory attachments, and
//! the daemon must count them (nattch) before either process can detach or exit.
//!
//! When the process has attachments, the wrapper makes a pipe, forks, and holds the child on
//! the pipe while the parent tells the daemon `ForkChild { child }` (the daemon checks that the
//! child's parent is the sender and copies the parent's attachments to it); then the parent
//! releases the child. Without attachments a fork needs nothing from the daemon and goes
//! straight through. In both cases the `pthread_atfork` child handler retires the parent's
//! connections in the child ([`crate::conn`]).
//!
//! The attachment table's lock is held across the fork, so no other thread is half-way
//! through changing it when the child's copy is made.

use crate::conn::ret_of;
use crate::shm::attached;
use libc::pid_t;
use std::sync::OnceLock;
use uipc_proto::Request;

type ForkFn = unsafe extern "C" fn() -> pid_t;

fn real_fork() -> Option<ForkFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let p = *REAL.get_or_init(|| crate::kernel::next_symbol(c"fork"));
    // SAFETY: a non-null result is libc's `fork`, whose type is `pid_t (void)`.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, ForkFn>(p) })
}

/// fork(2).
#[no_mangle]
pub extern "C-unwind" fn fork() -> pid_t {
    let Some(real) = real_fork() else {
        // SAFETY: the raw system call; without libc's fork there are no atfork handlers.
        return unsafe { libc::syscall(libc::SYS_fork) } as pid_t;
    };
    let table = attached();
    if table.is_empty() || !crate::conn::enabled() {
        drop(table);
        // SAFETY: libc's fork.
        return unsafe { real() };
    }
    let mut pipe = [-1 as libc::c_int; 2];
    // SAFETY: writes two descriptors into a live array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        drop(table);
        // SAFETY: libc's fork; the daemon will not count this child's attachments.
        return unsafe { real() };
    }
    // SAFETY: libc's fork.
    let pid = unsafe { real() };
    if pid == 0 {
        let mut byte = 0u8;
        // SAFETY: reads into a live byte and closes our pipe ends; retried on EINTR.
        unsafe {
            libc::close(pipe[1]);
            while libc::read(pipe[0], (&mut byte as *mut u8).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            libc::close(pipe[0]);
        }
        drop(table);
        return 0;
    }
    // SAFETY: our own read end.
    unsafe { libc::close(pipe[0]) };
    if pid > 0 {
        let _ = crate::guard::guarded(|| ret_of(Request::ForkChild { child: pid }));
    }
    // SAFETY: writes one byte from a live byte and closes our write end.
    unsafe {
        libc::write(pipe[1], (&0u8 as *const u8).cast(), 1);
        libc::close(pipe[1]);
    }
    drop(table);
    pid
}

/// Looks up the C library's `fork` now (from the library's constructor), not in a fork from a
/// signal handler.
pub(crate) fn prepare() {
    real_fork();
}
