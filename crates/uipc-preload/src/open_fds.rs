//! The process's open descriptors, listed from `/proc/self/fd` with raw system calls into a
//! stack buffer: no allocation and no lock, so a forked (even vforked) child may list them
//! before an exec (close_range and closefrom, the sysctl writes applied at close).

use crate::kernel::kernel_sys;
use libc::c_int;

/// Calls `f` with each open descriptor in `first..=last`, listed from `/proc/self/fd` with raw
/// system calls into a stack buffer (no allocation).
pub(crate) fn each_open_fd(first: u32, last: u32, mut f: impl FnMut(c_int)) {
    // SAFETY: opens a NUL-terminated path; the result is checked.
    let dir = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as c_int;
    if dir < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads directory entries into a live buffer of the stated size.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 || at + reclen > n as usize {
                break;
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let fd = name.iter().try_fold(0u32, |v, &b| {
                b.is_ascii_digit()
                    .then(|| v.checked_mul(10)?.checked_add(u32::from(b - b'0')))
                    .flatten()
            });
            if let Some(fd) = fd.filter(|fd| !name.is_empty() && (first..=last).contains(fd)) {
                if fd as c_int != dir {
                    f(fd as c_int);
                }
            }
            at += reclen;
        }
    }
    // Our own directory descriptor, closed by the kernel (not through the close wrapper).
    kernel_sys!(libc::SYS_close, dir);
}
