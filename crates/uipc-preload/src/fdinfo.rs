//! `/proc/PID/fdinfo/FD` under `--locks`: the kernel's text with the `lock:` lines of uipc's
//! locks on FD's file in place of the kernel's (which holds none of them), so a program sees
//! its locks there as on Linux.
//!
//! The daemon tells descriptions apart by a descriptor of them, so the reader sends one: FD
//! itself when PID is the reader's own process, else a copy taken with `pidfd_getfd` (which
//! needs the ptrace access `/proc/PID/fdinfo` itself does not; refused, the text has no uipc
//! lines). The daemon answers with the lines of PID's POSIX locks on the file and of the
//! description's OFD and flock locks ([`LockRequest::FdInfo`]); they go after the `ino:` line,
//! numbered from 1, and the kernel's own `lock:` lines follow, renumbered after them.
//!
//! Not async-signal-safe (the texts are allocated), unlike open(2).

use crate::kernel::kernel_sys;
use crate::proctext::{memfd_with, read_kernel_file};
use libc::c_int;
use std::ffi::CStr;
use uipc::Errno;
use uipc_proto::{LockRequest, Request, Response};

/// Whose descriptor an fdinfo path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// The process (`None`: the reader's own, `self` or `thread-self`).
    pid: Option<i32>,
    /// The descriptor.
    fd: i32,
}

fn number(s: &[u8]) -> Option<i32> {
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The target of a `/proc` path's components (after `proc`), if they name an fdinfo file:
/// `PID/fdinfo/FD`, `self/...`, `thread-self/...` or `PID/task/TID/fdinfo/FD`.
pub(crate) fn target(parts: &[&[u8]]) -> Option<Target> {
    let (who, fd) = match parts {
        [who, b"fdinfo", fd] | [who, b"task", _, b"fdinfo", fd] => (*who, number(fd)?),
        _ => return None,
    };
    let pid = match who {
        b"self" | b"thread-self" => None,
        // SAFETY: getpid has no preconditions.
        n => Some(number(n)?).filter(|&p| p != unsafe { libc::getpid() }),
    };
    Some(Target { pid, fd })
}

/// The view of `path` (naming `t`) for reading: `None` leaves the open to the kernel (which
/// then gives its own errno, or the file of a process the daemon cannot know). It never
/// fails where the kernel's open succeeds.
pub(crate) fn open(t: Target, path: &CStr, cloexec: bool) -> Option<Result<c_int, Errno>> {
    let kernel = read_kernel_file(path)?;
    // A descriptor the kernel will not pass (an io_uring's), or a daemon that is gone: the
    // kernel's text alone, as reading the file must not fail for want of uipc's lines.
    let lines = match lock_lines(t) {
        Ok(l) => l,
        Err(Errno::ENOSYS) => return None,
        Err(_) => Vec::new(),
    };
    // The kernel's fdinfo files are 0444.
    Some(memfd_with(&merged(&kernel, &lines), cloexec, false, 0o444))
}

/// The daemon's `lock:` lines for `t` (none if its descriptor cannot be had).
fn lock_lines(t: Target) -> Result<Vec<u8>, Errno> {
    let (fd, owned) = match t.pid {
        None => (t.fd, false),
        Some(pid) => {
            let pidfd = kernel_sys!(libc::SYS_pidfd_open, pid, 0) as c_int;
            if pidfd < 0 {
                return Ok(Vec::new());
            }
            let copy = kernel_sys!(libc::SYS_pidfd_getfd, pidfd, t.fd, 0) as c_int;
            kernel_sys!(libc::SYS_close, pidfd);
            if copy < 0 {
                return Ok(Vec::new());
            }
            (copy, true)
        }
    };
    let req = Request::Lock(LockRequest::FdInfo {
        pid: t.pid.unwrap_or(0),
    });
    let r = crate::conn::call_passing(&req, Some(fd), false);
    if owned {
        kernel_sys!(libc::SYS_close, fd);
    }
    match r?.0 {
        Response::Text(t) => Ok(t),
        Response::Error(e) => Err(Errno::from_raw(e)),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}

/// The kernel's fdinfo text with `ours` (`lock:` lines numbered from 1) after its `ino:`
/// line and the kernel's own `lock:` lines renumbered after ours.
fn merged(kernel: &[u8], ours: &[u8]) -> Vec<u8> {
    let count = ours
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let mut out = Vec::with_capacity(kernel.len() + ours.len());
    let mut placed = false;
    for line in kernel.split_inclusive(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"lock:\t") {
            if !placed {
                out.extend_from_slice(ours);
                placed = true;
            }
            let colon = rest.iter().position(|&b| b == b':');
            let n = colon.and_then(|c| std::str::from_utf8(&rest[..c]).ok()?.parse::<usize>().ok());
            match (n, colon) {
                (Some(n), Some(c)) => {
                    out.extend_from_slice(format!("lock:\t{}", n + count).as_bytes());
                    out.extend_from_slice(&rest[c..]);
                }
                _ => out.extend_from_slice(line),
            }
            continue;
        }
        out.extend_from_slice(line);
        if line.starts_with(b"ino:") && !placed {
            out.extend_from_slice(ours);
            placed = true;
        }
    }
    if !placed {
        out.extend_from_slice(ours);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_a_process_and_descriptor() {
        let t = |p: &[&[u8]]| target(p);
        assert_eq!(
            t(&[b"self", b"fdinfo", b"3"]),
            Some(Target { pid: None, fd: 3 })
        );
        assert_eq!(
            t(&[b"thread-self", b"fdinfo", b"12"]),
            Some(Target { pid: None, fd: 12 })
        );
        assert_eq!(
            t(&[b"1", b"task", b"1", b"fdinfo", b"0"]),
            Some(Target {
                pid: Some(1).filter(|&p| p != unsafe { libc::getpid() }),
                fd: 0
            })
        );
        assert_eq!(t(&[b"self", b"fdinfo"]), None);
        assert_eq!(t(&[b"self", b"fdinfo", b"x"]), None);
        assert_eq!(t(&[b"self", b"fd", b"3"]), None);
        assert_eq!(t(&[b"99999999999", b"fdinfo", b"3"]), None);
    }

    #[test]
    fn our_lines_follow_ino_and_the_kernels_are_renumbered() {
        let kernel =
            b"pos:\t0\nflags:\t02\nmnt_id:\t27\nino:\t5\nlock:\t1: FLOCK  x\nlock:\t2: POSIX  y\n";
        let ours = b"lock:\t1: POSIX  a\nlock:\t2: OFDLCK b\n";
        assert_eq!(
            merged(kernel, ours),
            b"pos:\t0\nflags:\t02\nmnt_id:\t27\nino:\t5\nlock:\t1: POSIX  a\nlock:\t2: OFDLCK b\nlock:\t3: FLOCK  x\nlock:\t4: POSIX  y\n"
        );
        let plain = b"pos:\t0\nflags:\t02\nmnt_id:\t27\nino:\t5\neventfd-count: 1\n";
        assert_eq!(
            merged(plain, b"lock:\t1: FLOCK  z\n"),
            b"pos:\t0\nflags:\t02\nmnt_id:\t27\nino:\t5\nlock:\t1: FLOCK  z\neventfd-count: 1\n"
        );
        assert_eq!(merged(plain, b""), plain.to_vec());
    }
}
