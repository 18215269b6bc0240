//! Memory for frames and copies that may be needed inside a signal handler: anonymous
//! private mappings (`mmap`/`munmap` are system calls, safe in a handler, where `malloc` is
//! not: the handler may have interrupted it).
//!
//! [`MapBuf`] owns one mapping and unmaps it when dropped. [`map`] / [`unmap`] are the raw
//! forms, for buffers kept in a thread-local (which must have no destructor) and freed at
//! thread exit.

use uipc::Errno;

/// Maps `len` bytes of zeroed, private, read-write memory.
pub fn map(len: usize) -> Result<*mut u8, Errno> {
    // SAFETY: a new anonymous mapping; the kernel picks the address and checks `len`.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Errno::ENOMEM)
    } else {
        Ok(p.cast())
    }
}

/// Unmaps a mapping [`map`] made.
///
/// # Safety
/// `ptr` and `len` are one mapping from [`map`], not used after this call.
pub unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: the caller's obligation.
    unsafe { crate::kernel::kernel_munmap(ptr.cast(), len.max(1)) };
}

/// An owned anonymous mapping of a fixed length.
pub struct MapBuf {
    ptr: *mut u8,
    len: usize,
}

impl MapBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn new(len: usize) -> Result<MapBuf, Errno> {
        Ok(MapBuf {
            ptr: map(len)?,
            len,
        })
    }

    /// The whole buffer.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` bytes, readable and writable, owned by `self` until drop.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for MapBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, used by nobody after this.
        unsafe { unmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_zeroed_and_writable_to_its_last_byte() {
        let mut b = MapBuf::new(10_000).unwrap();
        let s = b.as_mut_slice();
        assert_eq!(s.len(), 10_000);
        assert!(s.iter().all(|&x| x == 0));
        s[9_999] = 7;
        assert_eq!(b.as_mut_slice()[9_999], 7);
    }

    #[test]
    fn an_impossible_length_is_enomem() {
        assert_eq!(MapBuf::new(usize::MAX / 2).err(), Some(Errno::ENOMEM));
    }
}
