//! Children the library's fork handling does not see: vforked ones (vfork, or clone with
//! CLONE_VM as glibc's posix_spawn makes them), which run on their parent's memory until they
//! exec or exit, and forks made without the C library's fork (a raw `syscall(SYS_fork)`),
//! which run on a private copy but skipped the `pthread_atfork` handlers.
//!
//! # What Linux shows, and what the library does (checked on the host: tests/c/vfork_spawn.c)
//! A vforked child is a process of its own: its pid, SEM_UNDO list (no CLONE_SYSVSEM) and
//! POSIX lock owner (its own descriptor table) are its own, and the daemon already takes
//! every request's pid from the kernel, so its semop, lock and exit rules need nothing here.
//! Its memory, though, is its parent's: the shared memory attachments (one mm, so nattch does
//! not change), and every static and thread-local of this library, the calling thread's
//! daemon session included. A child that used that session could leave it half-used for the
//! parent (killed during a call, the reply stays in the socket and the session stays
//! borrowed), and its first call would use up the parent's "new program image" hello, so
//! that an exec of the parent was never applied (its old attachments stayed counted). And
//! a raw-forked child shares the parent's socket: the two processes' replies cross (hang).
//!
//! So before each daemon call, [`on_borrowed_memory`] compares the caller's pid with the pid
//! whose memory this is ([`OWNER`]: set at load and by the atfork child handler):
//! - the same: the usual path;
//! - another, and `kcmp(KCMP_VM)` says the memory is shared: a vforked child, which then talks
//!   on a connection of its own for each call, without announcing a new image, and leaves the
//!   parent's session and hello alone (`conn.rs`); it cannot create POSIX timers (the service
//!   and its thread would live in the parent's memory: EAGAIN, where Linux gives the child a
//!   timer of its own);
//! - another, with memory of its own (or the owner gone): a fork the atfork handlers did not
//!   see; the process adopts the memory, as the handler would have (inherited sessions are
//!   retired, see `conn.rs`).
//!
//! If `kcmp` is unavailable the caller is taken to share the memory (a connection per call:
//! slower for a raw-forked child, never wrong).
//!
//! Cost: one `getpid` system call per daemon call; a `kcmp` more in those children.

use std::sync::atomic::{AtomicI32, Ordering};

/// The pid whose memory the library runs in (0 before the library's constructor ran).
static OWNER: AtomicI32 = AtomicI32::new(0);

/// `KCMP_VM` (`<linux/kcmp.h>`): whether two processes share their address space.
const KCMP_VM: libc::c_long = 1;

fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail (raw: other preloads may wrap it).
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

extern "C" fn after_fork_in_child() {
    OWNER.store(getpid(), Ordering::SeqCst);
}

/// Records the process that owns this memory; called when the library is loaded.
pub fn prepare() {
    OWNER.store(getpid(), Ordering::SeqCst);
    // SAFETY: registers a child handler that only stores an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
}

/// Whether the caller runs on another live process's memory (a vforked child); see the
/// module doc. A fork the atfork handlers missed is adopted here.
pub fn on_borrowed_memory() -> bool {
    let owner = OWNER.load(Ordering::SeqCst);
    let me = getpid();
    if owner == 0 || owner == me {
        return false;
    }
    let errno = libc::__errno_location;
    // SAFETY: kcmp compares two processes' address spaces, failure is reported in errno,
    // which is read and then put back as the caller had it.
    let (r, err) = unsafe {
        let saved = *errno();
        let (pid1, pid2) = (libc::c_long::from(me), libc::c_long::from(owner));
        let r = libc::syscall(
            libc::SYS_kcmp,
            pid1,
            pid2,
            KCMP_VM,
            0 as libc::c_long,
            0 as libc::c_long,
        );
        let err = *errno();
        *errno() = saved;
        (r, err)
    };
    if r == 0 || (r < 0 && err != libc::ESRCH) {
        return true;
    }
    if OWNER
        .compare_exchange(owner, me, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        crate::conn::after_fork_in_child();
    }
    false
}
