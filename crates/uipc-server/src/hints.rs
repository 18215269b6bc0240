//! Lock hints: a shared page set the clients read before telling the daemon about a close.
//!
//! Closing a descriptor can drop locks only on a file someone asked to lock. The daemon keeps
//! a memfd of [`HINT_SLOTS`] bytes, mapped shared; before it serves a lock call on a file it
//! sets the file's byte ([`hint_slot`]) to 1, and bytes are never cleared. Clients map the
//! memfd read-only ([`uipc_proto::LockRequest::Hints`]) and skip the round trip for a close
//! whose byte is 0. Collisions and stale bytes only cost a round trip. The byte is set before
//! the lock is taken and before the reply, so a process that closes after its own lock call
//! returned, or after it got a description someone locked, sees it set.
//!
//! Clients cannot write the hints (zeroing a byte would make other users' clients skip the
//! closes that drop their locks): the file is made by `memfd::sealed_memfd` (mode
//! 0600, fixed size), and once the daemon has mapped it writable it is sealed with
//! F_SEAL_FUTURE_WRITE, so no later `write`, writable shared mapping or truncation succeeds
//! for anyone, root included; the daemon's own mapping keeps working.
//!
//! No lock: each byte is written with an atomic store.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use uipc::locks::FileId;
use uipc::Errno;
use uipc_proto::{hint_slot, map_hints, HINT_SLOTS};

/// The daemon's side of the lock hints.
pub struct LockHints {
    memfd: OwnedFd,
    base: *mut AtomicU8,
}

// SAFETY: `base` points at a shared mapping that lives as long as the value and is only
// accessed through atomics.
unsafe impl Send for LockHints {}
// SAFETY: as above.
unsafe impl Sync for LockHints {}

impl LockHints {
    /// A fresh, all-zero page set; `None` if the memfd cannot be made or mapped (clients then
    /// report every close).
    pub fn new() -> Option<LockHints> {
        let memfd = crate::memfd::sealed_memfd(c"uipc-lock-hints", HINT_SLOTS as u64, true).ok()?;
        let p = map_hints(memfd.as_raw_fd(), libc::PROT_READ | libc::PROT_WRITE)?;
        let hints = LockHints {
            memfd,
            base: p.as_ptr().cast(),
        };
        let seals = libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: adds seals to our own memfd.
        if unsafe { libc::fcntl(hints.memfd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return None;
        }
        Some(hints)
    }

    /// Marks `file` as possibly locked.
    pub fn mark(&self, file: FileId) {
        let slot = hint_slot(file.dev, file.ino);
        // SAFETY: `slot < HINT_SLOTS`, inside the live mapping; bytes are only accessed
        // atomically.
        unsafe { (*self.base.add(slot)).store(1, Ordering::Release) };
    }

    /// Whether `file`'s byte is set (tests).
    pub fn is_marked(&self, file: FileId) -> bool {
        let slot = hint_slot(file.dev, file.ino);
        // SAFETY: as in `mark`.
        unsafe { (*self.base.add(slot)).load(Ordering::Acquire) != 0 }
    }

    /// A read-only descriptor of the page set for a client.
    pub fn read_only_fd(&self) -> Result<OwnedFd, Errno> {
        let path = std::ffi::CString::new(format!("/proc/self/fd/{}", self.memfd.as_raw_fd()))
            .map_err(|_| Errno::ENOMEM)?;
        // SAFETY: opens a NUL-terminated path read-only.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(Errno::ENOSYS);
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }
}

impl Drop for LockHints {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `new`; no reference into it outlives `self`.
        unsafe { libc::munmap(self.base.cast(), HINT_SLOTS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_file_reads_set_through_a_clients_read_only_mapping() {
        let h = LockHints::new().unwrap();
        let file = FileId { dev: 7, ino: 42 };
        let fd = h.read_only_fd().unwrap();
        let p = map_hints(fd.as_raw_fd(), libc::PROT_READ).expect("read-only mapping");
        let slot = hint_slot(7, 42);
        // SAFETY: reads one byte inside the mapping.
        let read = || unsafe { *p.as_ptr().add(slot) };
        assert_eq!(read(), 0);
        assert!(!h.is_marked(file));
        h.mark(file);
        assert_eq!(read(), 1);
        assert!(h.is_marked(file));
        // A read-only descriptor cannot be mapped writable.
        let w = map_hints(fd.as_raw_fd(), libc::PROT_READ | libc::PROT_WRITE);
        assert!(w.is_none());
        // SAFETY: unmaps our mapping.
        unsafe { libc::munmap(p.as_ptr().cast(), HINT_SLOTS) };
    }
}
