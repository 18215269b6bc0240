//! What an exec does to file locks: when it succeeds, the kernel closes the close-on-exec
//! descriptors, and each such close drops the process's POSIX locks on its file (OFD and
//! flock locks go only with a description's last descriptor, which the daemon's sweeps
//! find). A failed exec closes nothing.
//!
//! Before the exec, [`before_exec`] reports each close-on-exec descriptor of a file the lock
//! hints mark (`LockRequest::ExecClose`, the descriptor passed along); the daemon keeps it as
//! a pending close and drops the locks once it sees the descriptor closed in this process
//! (the server's `execclose.rs`). If the exec returns, [`exec_failed`] withdraws them.
//!
//! A vforked child (vfork, posix_spawn) holds no POSIX locks of its own (they are not
//! inherited) and reports nothing. Nothing here allocates: the descriptors are listed from
//! `/proc/self/fd` into a stack buffer, and the daemon calls are the library's usual ones.

use super::close::closing_drops_locks;
use super::{lock_call, routing};
use crate::conn::call_passing;
use crate::guard::{errno_now, guarded, set_errno};
use crate::kernel::kernel_sys;
use crate::open_fds::each_open_fd;
use libc::c_int;
use uipc_proto::{LockRequest, Request};

fn close_on_exec(fd: c_int) -> bool {
    // The kernel's fcntl (the library's own export would route it): F_GETFD on any number
    // reports failure for a closed one.
    let flags = kernel_sys!(libc::SYS_fcntl, fd, libc::F_GETFD);
    flags >= 0 && flags as c_int & libc::FD_CLOEXEC != 0
}

/// Reports the close-on-exec descriptors whose close may drop locks; whether any was
/// reported (then [`exec_failed`] must follow a failed exec). Keeps errno.
pub fn before_exec() -> bool {
    if !routing() || crate::vfork::on_borrowed_memory() {
        return false;
    }
    let saved = errno_now();
    let mut any = false;
    let _ = guarded(|| {
        each_open_fd(0, u32::MAX, |fd| {
            if !close_on_exec(fd) {
                return;
            }
            if closing_drops_locks(fd).is_some() {
                any |= lock_call(fd, LockRequest::ExecClose { fd }, false).is_ok();
            }
        });
        Ok(())
    });
    // The calls above may have connected to the daemon: that socket is close-on-exec too.
    crate::slots::descriptors_may_change();
    set_errno(saved);
    any
}

/// The exec failed: the reported descriptors stay open, and so do the locks. Keeps errno.
pub fn exec_failed() {
    let saved = errno_now();
    let _ = guarded(|| {
        let _ = call_passing(&Request::Lock(LockRequest::ExecFailed), None, false);
        Ok(())
    });
    set_errno(saved);
}
