//! Descriptors the library needs while the program is at its RLIMIT_NOFILE.
//!
//! The kernel's SysV IPC calls take no descriptor, but the library's do: a connection to the
//! daemon (a thread's first call, a forked child's) and, for a moment, a memfd received with a
//! reply (shmat, the fast paths' arena). A program that has used every descriptor its soft
//! limit allows would see its calls fail where Linux's succeed. So when such a descriptor
//! cannot be had (EMFILE), [`with_room`] raises the soft limit by a few descriptors, up to
//! the hard limit, runs the step again and puts the limit back: the library's descriptor then
//! lies above the program's limit, which only bounds new descriptors. A limit already at the
//! hard limit cannot be raised (without CAP_SYS_RESOURCE): the call fails with EMFILE.
//!
//! [`out_of_the_way`] moves a connection up to the top of the numbers the limit allows, so
//! the program's own opens get the numbers Linux would give them, and never leaves it on a
//! standard descriptor (0, 1 or 2).
//!
//! Only after an EMFILE: a call that gets its descriptor costs nothing more. While the limit
//! is raised another thread may open a descriptor above the program's limit, and a setrlimit
//! of RLIMIT_NOFILE that another thread makes in that moment is overwritten by the restore.
//! Raw `prlimit64` system calls only: no allocation, no lock (usable from a signal handler).

/// The highest number [`out_of_the_way`] starts its search at: a higher one would make the
/// kernel grow the process's descriptor table to it.
const HIGH_FLOOR_MAX: u64 = 1024;

/// Moves the library's long-lived descriptor `fd` (a connection to the daemon) to a number
/// in the top quarter of the soft RLIMIT_NOFILE (from at most [`HIGH_FLOOR_MAX`]),
/// close-on-exec, and closes `fd`: Linux gives a program's open the lowest free number, so
/// a descriptor of the library must not sit among the low numbers the program's next opens
/// would get. When no such number can be had (a low limit, or every number above the floor
/// taken), a descriptor on 0, 1 or 2 (the program closed it) still moves to 3 or above: a
/// SysV call takes no descriptor on Linux, so the program's next open must get its standard
/// descriptor back, and its writes to a closed one must fail rather than reach the daemon.
/// Returns the new number, or `fd` itself if it cannot or need not move (at the descriptor
/// limit it stays where it is). Raw system calls only; errno is kept.
pub fn out_of_the_way(fd: std::os::fd::RawFd) -> std::os::fd::RawFd {
    let saved = crate::guard::errno_now();
    let mut lim = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let none: *const libc::rlimit64 = std::ptr::null();
    let got = crate::kernel::kernel_sys!(
        libc::SYS_prlimit64,
        0,
        libc::RLIMIT_NOFILE,
        none,
        &mut lim as *mut libc::rlimit64
    ) == 0;
    let floor = if got {
        (lim.rlim_cur - lim.rlim_cur / 4).min(HIGH_FLOOR_MAX)
    } else {
        0
    };
    // The top quarter; failing that, anything above the standard descriptors.
    let moved = [floor, 3]
        .into_iter()
        .filter(|&at| at >= 3 && (fd as u64) < at)
        .map(|at| crate::kernel::kernel_sys!(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, at))
        .find(|&new| new >= 0);
    let out = match moved {
        Some(new) => {
            crate::kernel::kernel_sys!(libc::SYS_close, fd);
            new as std::os::fd::RawFd
        }
        None => fd,
    };
    crate::guard::set_errno(saved);
    out
}

/// How many descriptors above the soft limit a step may take.
const ROOM: u64 = 4;

/// Runs `step`; if `out_of_descriptors` says its result failed for want of a descriptor,
/// runs it once more with the soft RLIMIT_NOFILE raised by [`ROOM`] (if it can be), and
/// returns that result.
pub fn with_room<T>(mut step: impl FnMut() -> T, out_of_descriptors: impl Fn(&T) -> bool) -> T {
    let first = step();
    if !out_of_descriptors(&first) {
        return first;
    }
    let Some(old) = raise() else {
        return first;
    };
    let again = step();
    restore(&old);
    again
}

/// Raises the soft limit by [`ROOM`], at most to the hard limit; the limits before, if it
/// was raised.
fn raise() -> Option<libc::rlimit64> {
    let mut old = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let none: *const libc::rlimit64 = std::ptr::null();
    if crate::kernel::kernel_sys!(
        libc::SYS_prlimit64,
        0,
        libc::RLIMIT_NOFILE,
        none,
        &mut old as *mut libc::rlimit64
    ) != 0
        || old.rlim_cur >= old.rlim_max
    {
        return None;
    }
    let new = libc::rlimit64 {
        rlim_cur: old.rlim_cur.saturating_add(ROOM).min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    let out: *mut libc::rlimit64 = std::ptr::null_mut();
    (crate::kernel::kernel_sys!(
        libc::SYS_prlimit64,
        0,
        libc::RLIMIT_NOFILE,
        &new as *const libc::rlimit64,
        out
    ) == 0)
        .then_some(old)
}

/// Puts the limits `old` back (lowering the soft limit is always allowed).
fn restore(old: &libc::rlimit64) {
    let out: *mut libc::rlimit64 = std::ptr::null_mut();
    let saved = crate::guard::errno_now();
    crate::kernel::kernel_sys!(
        libc::SYS_prlimit64,
        0,
        libc::RLIMIT_NOFILE,
        old as *const libc::rlimit64,
        out
    );
    crate::guard::set_errno(saved);
}
