//! The file lock system calls made through syscall(2): `syscall(SYS_fcntl, ...)`,
//! `SYS_flock`, and the closes that drop locks (`SYS_close`, `SYS_dup2`, `SYS_dup3`,
//! `SYS_close_range`), routed (with `$UIPC_LOCKS=1`) to the same code as the C exports.
//!
//! - `SYS_fcntl`: the six lock commands go to the daemon as fcntl's do; every other command
//!   goes to the kernel with all six arguments unchanged. Unlike glibc's fcntl, syscall(2)
//!   is not a cancellation point, so a blocking F_SETLKW here is not one either.
//! - `SYS_flock`: as the flock export.
//! - The closes: the daemon is told what the close will drop, as by the exports, then the
//!   kernel makes the call with the caller's arguments.
//!
//! Results follow syscall(3): the value, or -1 with errno set; errno untouched on success.
//!
//! The library itself never makes these calls through `syscall`: its way to the kernel is
//! [`crate::kernel`], so nothing here comes back into itself.

use super::close::{before_close, before_close_range_call, before_dup};
use super::{fcntl_routed, flock, is_lock_cmd};
use crate::kernel::sys;
use libc::{c_int, c_long};

/// Whether `nr` is one of the file lock numbers routed here.
pub fn is_lock_number(nr: c_long) -> bool {
    matches!(
        nr,
        libc::SYS_fcntl
            | libc::SYS_flock
            | libc::SYS_close
            | libc::SYS_dup2
            | libc::SYS_dup3
            | libc::SYS_close_range
    )
}

/// syscall(`nr`, `a`...) for a number [`is_lock_number`] accepts, with routing on.
pub fn syscall_routed(nr: c_long, a: [c_long; 6]) -> c_long {
    // The kernel reads these arguments as (unsigned) ints: the same truncation.
    let int = |k: usize| a[k] as c_int;
    match nr {
        libc::SYS_fcntl if is_lock_cmd(int(1)) => {
            fcntl_routed(int(0), int(1), a[2] as usize, false)
        }
        libc::SYS_flock => c_long::from(flock(int(0), int(1))),
        libc::SYS_close => {
            before_close(int(0));
            sys(nr, a)
        }
        libc::SYS_dup2 => {
            before_dup(int(0), int(1), 0);
            sys(nr, a)
        }
        libc::SYS_dup3 => {
            before_dup(int(0), int(1), int(2));
            sys(nr, a)
        }
        libc::SYS_close_range => {
            before_close_range_call(int(0) as u32, int(1) as u32, int(2));
            sys(nr, a)
        }
        _ => sys(nr, a),
    }
}
