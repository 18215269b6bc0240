//! IPC namespaces: unshare and setns.
//!
//! The kernel keeps track of which IPC namespace a process is in; the daemon reads it from
//! `/proc/PID/ns/ipc` when a connection starts and serves that namespace on it (the server's
//! `namespaces` module). So the library lets unshare and setns through to the C library and,
//! when they succeed and may have changed the IPC namespace (`CLONE_NEWIPC`; any setns),
//! drops every connection of the process, as after fork ([`crate::slots::GENERATION`]), and
//! calls the daemon at once on a new connection, which is served in the new namespace and
//! makes the daemon count the process there (`join_now`). A child made by
//! `clone(CLONE_NEWIPC)` (or clone3) is a process of its own, which makes its own connections
//! at its first call.

use crate::kernel::next_symbol as next;
use libc::c_int;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

type UnshareFn = unsafe extern "C" fn(c_int) -> c_int;
type SetnsFn = unsafe extern "C" fn(c_int, c_int) -> c_int;

fn fns() -> &'static (usize, usize) {
    static FNS: OnceLock<(usize, usize)> = OnceLock::new();
    FNS.get_or_init(|| (next(c"unshare"), next(c"setns")))
}

/// Looks up the C library's functions; called when the library is loaded.
pub fn prepare() {
    let _ = fns();
}

/// Bumped by every change of IPC namespace (the semaphore arena is mapped again).
pub static NS_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// After a successful change of namespace: every connection is made again.
pub fn namespace_changed() {
    NS_GENERATION.fetch_add(1, Ordering::SeqCst);
    crate::slots::GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// After unshare or setns: a call to the daemon at once, so that it counts this process in
/// its new namespace (a connection's Hello joins it). The daemon drops a namespace when the
/// last process it counts there exits; uncounted, this process would not keep it alive, and a
/// child forked before its first call, which made objects and exited, would take them away
/// (Linux keeps them while any process is in the namespace). The call (`SemNsems` of id -1)
/// is answered EINVAL without looking at anything; errno is left as it was.
fn join_now() {
    if !crate::conn::enabled() {
        return;
    }
    let saved = crate::guard::errno_now();
    let _ =
        crate::guard::guarded(|| crate::conn::ret_of(uipc_proto::Request::SemNsems { semid: -1 }));
    // SAFETY: writes this thread's errno.
    unsafe { *crate::guard::errno_slot() = saved };
}

/// unshare(2).
#[no_mangle]
pub extern "C" fn unshare(flags: c_int) -> c_int {
    let r = match fns().0 {
        0 => crate::kernel::kernel_sys!(libc::SYS_unshare, flags) as c_int,
        // SAFETY: the C library's unshare.
        p => unsafe { std::mem::transmute::<usize, UnshareFn>(p)(flags) },
    };
    if r == 0 && flags & libc::CLONE_NEWIPC != 0 {
        namespace_changed();
        join_now();
    }
    if r == 0 && flags & libc::CLONE_NEWUSER != 0 {
        crate::ids::may_change();
    }
    r
}

/// setns(2): `nstype` 0 may be an IPC namespace too.
#[no_mangle]
pub extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    let r = match fns().1 {
        0 => crate::kernel::kernel_sys!(libc::SYS_setns, fd, nstype) as c_int,
        // SAFETY: the C library's setns.
        p => unsafe { std::mem::transmute::<usize, SetnsFn>(p)(fd, nstype) },
    };
    if r == 0 {
        crate::ids::may_change();
    }
    if r == 0 && (nstype == 0 || nstype & libc::CLONE_NEWIPC != 0) {
        namespace_changed();
        join_now();
    }
    r
}
