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
//! Such children can only come from a few calls: vfork, the C library's `clone` and `_Fork`
//! (which run no atfork handlers), and `syscall()` with a fork or clone number. The library
//! exports the first three as small naked functions that set [`UNSEEN_CHILDREN`] and jump to
//! the C library's own (so vfork's child returns on no frame of ours), and its `syscall()`
//! sets it for those numbers. Until the flag is set every child went through the atfork
//! handlers, so [`OWNER`] is the caller's pid: [`pid`] returns it and
//! [`on_borrowed_memory`] answers false, with no system call. Once it is set (for good: a
//! vforked child runs on until it execs or exits, out of the parent's sight), both ask the
//! kernel on every call, as follows.
//!
//! [`on_borrowed_memory`] compares the caller's pid with the pid whose memory this is
//! ([`OWNER`]: set at load and by the atfork child handler):
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
//! Cost: nothing until the process vforks or clones outside fork(); then one `getpid` system
//! call per daemon call, and a `kcmp` more in those children. A child made with a fork or
//! clone system call issued by the program's own instructions (not through the C library's
//! functions or `syscall()`) is not seen: it would use its parent's sessions (listed in the
//! crate doc's limits).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// The pid whose memory the library runs in (0 before the library's constructor ran).
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Set (for good) before the process first makes a child the atfork handlers do not see.
static UNSEEN_CHILDREN: AtomicBool = AtomicBool::new(false);

/// The C library's vfork, clone and _Fork (0 until the constructor found them).
static REAL_VFORK: AtomicUsize = AtomicUsize::new(0);
static REAL_CLONE: AtomicUsize = AtomicUsize::new(0);
static REAL_UFORK: AtomicUsize = AtomicUsize::new(0);

/// The caller's pid: the cached owner while no unseen child can exist (see the module doc).
pub fn pid() -> i32 {
    if !UNSEEN_CHILDREN.load(Ordering::SeqCst) {
        let owner = OWNER.load(Ordering::Relaxed);
        if owner != 0 {
            return owner;
        }
    }
    getpid()
}

/// Whether the process may have made a child the atfork handlers did not see.
pub fn unseen_children() -> bool {
    UNSEEN_CHILDREN.load(Ordering::SeqCst)
}

/// Notes that a child the atfork handlers do not see may follow (`syscall()`'s fork and
/// clone numbers).
pub fn unseen_child_ahead() {
    UNSEEN_CHILDREN.store(true, Ordering::SeqCst);
}

/// Whether `syscall()` number `nr` makes a process.
pub fn is_child_number(nr: libc::c_long) -> bool {
    matches!(nr, libc::SYS_clone | libc::SYS_clone3)
        || cfg!(target_arch = "x86_64") && is_x86_fork_number(nr)
}

#[cfg(target_arch = "x86_64")]
fn is_x86_fork_number(nr: libc::c_long) -> bool {
    nr == libc::SYS_fork || nr == libc::SYS_vfork
}

#[cfg(not(target_arch = "x86_64"))]
fn is_x86_fork_number(_nr: libc::c_long) -> bool {
    false
}

/// Without the C library's function: vfork and _Fork become fork (a vfork may be a fork),
/// clone fails with ENOSYS.
extern "C" fn fallback_fork() -> libc::pid_t {
    // SAFETY: the raw system call; nothing of ours runs in the child until it returns.
    unsafe {
        libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) as libc::pid_t
    }
}

extern "C" fn fallback_clone() -> libc::c_int {
    // SAFETY: sets the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// An export that sets [`UNSEEN_CHILDREN`] and jumps, with every argument register as it
/// found them and no frame of its own, to the C library's function (or the fallback).
macro_rules! flagging_export {
    ($(#[$doc:meta])* $name:ident => $real:ident, $fallback:ident) => {
        $(#[$doc])*
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!(
                "mov byte ptr [rip + {flag}], 1",
                "mfence",
                "mov r11, qword ptr [rip + {real}]",
                "test r11, r11",
                "jz {fallback}",
                "jmp r11",
                flag = sym UNSEEN_CHILDREN,
                real = sym $real,
                fallback = sym $fallback,
            );
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!(
                "adrp x16, {flag}",
                "add x16, x16, :lo12:{flag}",
                "mov w17, #1",
                "strb w17, [x16]",
                "dmb ish",
                "adrp x16, {real}",
                "ldr x16, [x16, :lo12:{real}]",
                "cbz x16, 1f",
                "br x16",
                "1:",
                "b {fallback}",
                flag = sym UNSEEN_CHILDREN,
                real = sym $real,
                fallback = sym $fallback,
            );
        }
    };
}

flagging_export!(
    /// vfork(2): the child runs on this memory, so the library stops trusting its cached pid.
    vfork => REAL_VFORK, fallback_fork
);
flagging_export!(
    /// clone(2)'s C library wrapper (no atfork handlers run).
    clone => REAL_CLONE, fallback_clone
);
flagging_export!(
    /// `_Fork`: a fork without atfork handlers.
    _Fork => REAL_UFORK, fallback_fork
);

/// `KCMP_VM` (`<linux/kcmp.h>`): whether two processes share their address space.
const KCMP_VM: libc::c_long = 1;

fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail (raw: other preloads may wrap it).
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

extern "C" fn after_fork_in_child() {
    OWNER.store(getpid(), Ordering::SeqCst);
}

/// Records the process that owns this memory and finds the C library's vfork, clone and
/// _Fork; called when the library is loaded.
pub fn prepare() {
    for (real, name) in [
        (&REAL_VFORK, c"vfork"),
        (&REAL_CLONE, c"clone"),
        (&REAL_UFORK, c"_Fork"),
    ] {
        real.store(crate::kernel::next_symbol(name), Ordering::SeqCst);
    }
    OWNER.store(getpid(), Ordering::SeqCst);
    uipc_proto::transport::set_pid_source(pid);
    // SAFETY: registers a child handler that only stores an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
}

/// Whether the caller runs on another live process's memory (a vforked child); see the
/// module doc. A fork the atfork handlers missed is adopted here.
pub fn on_borrowed_memory() -> bool {
    if !UNSEEN_CHILDREN.load(Ordering::SeqCst) {
        return false;
    }
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
        crate::slots::after_fork_in_child();
    }
    false
}
