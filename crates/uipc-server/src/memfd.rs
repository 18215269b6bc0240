//! Segment memory as memfds: the daemon's [`ShmBacking`].
//!
//! Each segment is an anonymous memory file (`memfd_create`) truncated to the segment's page
//! length; `shmat` hands a client the descriptor and the client maps it, so every attachment
//! in every process shares the same pages, as Linux's shmem does. The daemon never maps the
//! memory itself: `read_at` and `write_at` use `pread`/`pwrite`, and the resident page count
//! is the file's allocated blocks.
//!
//! No client can widen what it was given (`sealed_memfd`): the file is mode 0600, owned by
//! the daemon's user, so a client that got a read-only descriptor cannot reopen it read-write
//! through `/proc/self/fd/N` (a client with CAP_DAC_OVERRIDE can, as it could attach the
//! segment read-write anyway; a client running as the daemon's own user can change the mode),
//! and it is sealed against shrinking and growing (and against new seals), so no attacher can
//! change a segment's size under the others' mappings.
//!
//! The engine hands back a segment's memory as `Arc<dyn ShmMemory>`; [`MemfdBacking::fd_of`]
//! finds the descriptor behind it through an index keyed by the memory's address, which each
//! memory removes itself from when dropped. Lock: the index mutex is a leaf.

use crate::sync::lock;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use uipc::ipc::shm::{ShmBacking, ShmMemory};
use uipc::{Errno, Result};

const PAGE: u64 = 4096;

type Index = Arc<Mutex<HashMap<usize, RawFd>>>;

/// Makes memfd-backed segments.
#[derive(Default)]
pub struct MemfdBacking {
    index: Index,
}

/// One segment's memory file.
pub struct MemfdMemory {
    fd: OwnedFd,
    len: u64,
    index: Index,
}

fn key_of(mem: *const MemfdMemory) -> usize {
    mem as usize
}

/// A memory file of `len` bytes that no client can resize or reopen writable: created with
/// sealing allowed, mode 0600 (owned by the daemon's user), sized, then sealed against
/// shrinking, growing and `extra_seals`. `F_SEAL_SEAL` is added last unless `open` asks to
/// keep adding seals (the caller then adds it).
pub(crate) fn sealed_memfd(name: &std::ffi::CStr, len: u64, open: bool) -> Result<OwnedFd> {
    let len = libc::off_t::try_from(len).map_err(|_| Errno::EINVAL)?;
    // SAFETY: the name is NUL-terminated; the flags are valid.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(Errno::ENOMEM);
    }
    // SAFETY: `raw` was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | if open { 0 } else { libc::F_SEAL_SEAL };
    // SAFETY: plain system calls on our own open memfd; the length fits off_t.
    let ok = unsafe {
        libc::fchmod(fd.as_raw_fd(), 0o600) == 0
            && libc::ftruncate(fd.as_raw_fd(), len) == 0
            && libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) == 0
    };
    if !ok {
        return Err(Errno::ENOMEM);
    }
    Ok(fd)
}

impl MemfdBacking {
    /// An empty backing.
    pub fn new() -> MemfdBacking {
        MemfdBacking::default()
    }

    /// The memfd behind `mem`, if this backing made it. Valid while `mem` lives.
    pub fn fd_of(&self, mem: &Arc<dyn ShmMemory>) -> Option<RawFd> {
        let key = Arc::as_ptr(mem).cast::<MemfdMemory>();
        lock(&self.index).get(&key_of(key)).copied()
    }
}

impl ShmBacking for MemfdBacking {
    fn create(&self, _key: i32, size: u64) -> Result<Arc<dyn ShmMemory>> {
        let len = size.div_ceil(PAGE).checked_mul(PAGE).ok_or(Errno::ENOMEM)?;
        let fd = sealed_memfd(c"uipc-shm", len, false)?;
        let mem = Arc::new(MemfdMemory {
            fd,
            len,
            index: self.index.clone(),
        });
        lock(&self.index).insert(key_of(Arc::as_ptr(&mem)), mem.fd.as_raw_fd());
        Ok(mem)
    }
}

impl Drop for MemfdMemory {
    fn drop(&mut self) {
        lock(&self.index).remove(&key_of(self));
    }
}

impl MemfdMemory {
    fn check(&self, offset: u64, n: usize) -> Result<()> {
        match offset.checked_add(n as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Errno::EFAULT),
        }
    }
}

/// Repeats `io(done)`, a pread or pwrite of the bytes from `done` on that returns how many it
/// moved, until all `len` have moved; EFAULT if one moves none or fails.
fn every_byte(len: usize, mut io: impl FnMut(usize) -> isize) -> Result<()> {
    let mut done = 0;
    while done < len {
        match io(done) {
            n if n > 0 => done += n as usize,
            _ => return Err(Errno::EFAULT),
        }
    }
    Ok(())
}

impl ShmMemory for MemfdMemory {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len())?;
        let (fd, len) = (self.fd.as_raw_fd(), buf.len());
        every_byte(len, |done| {
            let at = (offset + done as u64) as libc::off_t;
            // SAFETY: the destination is the unread tail of `buf`; the fd is open.
            unsafe { libc::pread(fd, buf[done..].as_mut_ptr().cast(), len - done, at) }
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        let (fd, len) = (self.fd.as_raw_fd(), data.len());
        every_byte(len, |done| {
            let at = (offset + done as u64) as libc::off_t;
            // SAFETY: the source is the unwritten tail of `data`; the fd is open.
            unsafe { libc::pwrite(fd, data[done..].as_ptr().cast(), len - done, at) }
        })
    }

    fn resident_pages(&self) -> u64 {
        // SAFETY: zeroed stat is valid output space; the fd is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return 0;
        }
        (st.st_blocks as u64 * 512).div_ceil(PAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_memory_is_page_rounded_zeroed_and_found_by_its_arc() {
        let b = MemfdBacking::new();
        let m = b.create(0, 5000).unwrap();
        assert_eq!(m.len(), 8192);
        assert!(b.fd_of(&m).is_some());
        assert_eq!(m.resident_pages(), 0);
        let fd = b.fd_of(&m).unwrap();
        // SAFETY: plain system calls on the live memfd.
        unsafe {
            assert_eq!(libc::ftruncate(fd, 0), -1, "sealed against shrinking");
            assert_eq!(libc::ftruncate(fd, 1 << 20), -1, "sealed against growing");
            let seals = libc::fcntl(fd, libc::F_GET_SEALS);
            assert_ne!(seals & libc::F_SEAL_SEAL, 0);
        }
        m.write_at(4094, b"abcd").unwrap();
        assert_eq!(m.resident_pages(), 2);
        let mut buf = [9u8; 6];
        m.read_at(4093, &mut buf).unwrap();
        assert_eq!(&buf, b"\0abcd\0");
        assert_eq!(m.write_at(8190, b"abc"), Err(Errno::EFAULT));
        let other: Arc<dyn ShmMemory> = Arc::new(uipc::ipc::shm::HeapMemory::new(1));
        assert_eq!(b.fd_of(&other), None);
        drop(m);
        assert!(
            lock(&b.index).is_empty(),
            "a dropped memory leaves the index"
        );
    }
}
