//! Close-on-exec descriptors of a process that is about to exec.
//!
//! Linux closes a process's close-on-exec descriptors when its exec succeeds, and that close
//! drops the process's POSIX locks on each such descriptor's file (whatever descriptor set
//! them), as any close does. The kernel does it out of the library's sight, and a failed
//! exec closes nothing, so the library reports these descriptors before the exec
//! ([`uipc_proto::LockRequest::ExecClose`], the descriptor passed along) and the daemon keeps
//! each as a *pending* close: its pid, its number in the client and the daemon's copy of the
//! description.
//!
//! A pending close is *resolved* before every lock call, listing and exec Hello the daemon
//! serves ([`ExecCloses::resolve`]): `kcmp(KCMP_FILE)` of the client's descriptor number with
//! the daemon's copy. Equal: the exec has not happened (or failed and was not reported yet),
//! the close stays pending. Anything else (the number is closed, refers to another
//! description, or the process is gone): the client closed it, by its exec or otherwise, and
//! either way Linux has dropped the process's POSIX locks on the file: so does the daemon.
//! A refused `kcmp` (EPERM: a daemon that may not inspect the process) decides nothing: the
//! close stays pending, the locks until the process exits.
//! Since the kernel closes the descriptors before the new image runs, whatever the new image
//! or anyone who learned of the exec does next finds the locks gone, as on Linux. A failed
//! exec withdraws the process's pending closes ([`ExecCloses::forget`]), as does its exit.
//!
//! While a close is pending, no lease of either kind (POSIX lease slot, shared mode, flock
//! lease) is granted on its file, and its leases are taken back into the engine when it is
//! registered ([`LockManager::hold_grants`]): the process's locks must be the engine's to
//! drop, and another process's question about the file must reach the daemon and this
//! resolution rather than be answered in its own process. For a flock lock that matters when
//! the close is its description's last: a daemon-path call that conflicts with it sweeps the
//! description and drops it, where a member of a flock lease would still find it held
//! (`tests/c/exec_hold_flock.c`).
//!
//! Lock order: the table's mutex is taken alone; the engine is called after it is released.

use crate::fdscan::kcmp_file;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use uipc::locks::{FileId, LockManager, OfdId};
use uipc::{Errno, Tgid};

struct Pending {
    tgid: Tgid,
    fd: i32,
    file: FileId,
    copy: OwnedFd,
}

/// The pending closes of processes about to exec.
#[derive(Default)]
pub struct ExecCloses {
    table: Mutex<Vec<Pending>>,
    /// Whether the table may be non-empty (read without the mutex on every lock call).
    any: AtomicBool,
}

impl ExecCloses {
    fn table(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Process `tgid` is about to exec, and its descriptor `fd` (of `file`; `copy` is the
    /// daemon's descriptor of the same description) is close-on-exec.
    pub fn add(&self, locks: &LockManager, tgid: Tgid, fd: i32, file: FileId, copy: OwnedFd) {
        locks.hold_grants(file);
        // The same descriptor reported again (an earlier exec's failure not reported).
        for p in self.remove(|p| p.tgid == tgid && p.fd == fd) {
            locks.release_grants(p.file);
        }
        self.table().push(Pending {
            tgid,
            fd,
            file,
            copy,
        });
        self.any.store(true, Ordering::SeqCst);
    }

    /// Process `tgid`'s exec failed (its descriptors stay open, nothing is dropped), or it
    /// exited (its POSIX locks go with the exit).
    pub fn forget(&self, locks: &LockManager, tgid: Tgid) {
        for p in self.remove(|p| p.tgid == tgid) {
            locks.release_grants(p.file);
        }
    }

    fn remove(&self, mut which: impl FnMut(&Pending) -> bool) -> Vec<Pending> {
        if !self.any.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let mut t = self.table();
        let mut gone = Vec::new();
        let mut i = 0;
        while i < t.len() {
            if which(&t[i]) {
                gone.push(t.swap_remove(i));
            } else {
                i += 1;
            }
        }
        self.any.store(!t.is_empty(), Ordering::SeqCst);
        gone
    }

    /// Drops the POSIX locks of every pending close whose descriptor its process no longer
    /// has open (see the module doc).
    pub fn resolve(&self, locks: &LockManager) {
        let me = std::process::id() as i32;
        let closed = self.remove(|p| {
            match kcmp_file(p.tgid.get(), p.fd, me, p.copy.as_raw_fd()) {
                Ok(order) => order != std::cmp::Ordering::Equal,
                // The number is closed, or the process is gone; a refusal (EPERM) keeps it
                // pending until the process exits.
                Err(e) => e == Errno::EBADF || e == Errno::ESRCH,
            }
        });
        for p in closed {
            // Id 0 is never a description's: only the process's POSIX locks go.
            locks.close(p.tgid, p.file, OfdId(0), false);
            locks.release_grants(p.file);
        }
    }
}
