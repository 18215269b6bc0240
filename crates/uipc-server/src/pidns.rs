//! PID namespaces: the pids the daemon hands back (semctl GETPID, msg_lspid/lrpid and
//! shm_cpid/lpid of the `*_STAT` commands and of `/proc/sysvipc/{msg,shm}`, F_GETLK's l_pid)
//! as the caller's pid namespace
//! numbers them, 0 for a process it cannot see, as Linux's `pid_vnr`.
//!
//! The engine records pids as the daemon sees them (its pid namespace, which is that of its
//! `/proc`). A process's pid namespace never changes, so its view ([`PidView::of`]) is read
//! once per connection, when a reply to the greeting process first carries pids
//! ([`crate::conn::Conn::pid_view`]; most connections never need it): the caller's `NSpid`
//! line in `/proc/PID/status`. One number means the caller is in the daemon's pid namespace and
//! replies carry the daemon's numbers (the usual case: no read per reply). Otherwise the caller is `level` namespaces
//! below, and a recorded pid P is shown as the `level`-th number of P's `NSpid` line if P's
//! pid namespace at that level is the caller's: P's own namespace (`/proc/P/ns/pid`) walked
//! up with the `NS_GET_PARENT` ioctl to that level, compared by inode with the caller's.
//! A process that has exited cannot be looked up: it shows as 0 to callers in nested
//! namespaces (Linux keeps its numbers while the object refers to it).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;

/// `NS_GET_PARENT`: `_IO(0xb7, 0x2)`.
const NS_GET_PARENT: libc::c_ulong = 0xb702;

/// `pid`'s numbers, outermost (the daemon's) first.
fn nspid(pid: i32) -> Option<Vec<i32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().map(|n| n.parse().ok()).collect()
}

/// How a caller in a nested pid namespace numbers processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidView {
    level: usize,
    ns: u64,
}

impl PidView {
    /// The view of process `caller`, `None` if it is in the daemon's pid namespace (or cannot
    /// be read: then the daemon's numbers are given).
    pub fn of(caller: i32) -> Option<PidView> {
        let chain = nspid(caller)?;
        if chain.len() <= 1 {
            return None;
        }
        let ns = std::fs::metadata(format!("/proc/{caller}/ns/pid"))
            .ok()?
            .ino();
        Some(PidView {
            level: chain.len() - 1,
            ns,
        })
    }

    /// `pid` (the daemon's number) as the caller sees it: 0 if it cannot.
    pub fn translate(&self, pid: i32) -> i32 {
        if pid <= 0 {
            return pid;
        }
        let Some(chain) = nspid(pid) else { return 0 };
        let Some(&nr) = chain.get(self.level) else {
            return 0;
        };
        let Ok(file) = File::open(format!("/proc/{pid}/ns/pid")) else {
            return 0;
        };
        let mut ns = file;
        for _ in self.level..chain.len() - 1 {
            // SAFETY: an ioctl on a namespace descriptor we own; a new descriptor or -1.
            let parent = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_PARENT) };
            if parent < 0 {
                return 0;
            }
            // SAFETY: a fresh descriptor owned by nobody else.
            ns = unsafe { File::from_raw_fd(parent) };
        }
        match ns.metadata() {
            Ok(m) if m.ino() == self.ns => nr,
            _ => 0,
        }
    }
}

/// `pid` as a caller with `view` (`None`: the daemon's namespace) sees it.
pub fn translated(view: Option<PidView>, pid: i32) -> i32 {
    view.map_or(pid, |view| view.translate(pid))
}

/// Applies `f` to the pids of a reply for a caller with `view`, if it is a nested namespace's.
pub fn for_caller(view: Option<PidView>, f: impl FnOnce(&dyn Fn(i32) -> i32)) {
    if let Some(view) = view {
        f(&|pid| view.translate(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_in_the_daemons_namespace_needs_no_view() {
        assert!(PidView::of(std::process::id() as i32).is_none());
        let view = PidView { level: 1, ns: 0 };
        assert_eq!(view.translate(std::process::id() as i32), 0);
        assert_eq!(view.translate(0), 0);
    }
}
