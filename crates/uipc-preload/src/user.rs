//! Reading and writing the caller's memory without trusting its pointers.
//!
//! The kernel answers a bad pointer with EFAULT; a library that dereferenced it would crash
//! instead. Copies go through `process_vm_readv` / `process_vm_writev` on the calling process
//! itself (always permitted for one's own process), which fail with EFAULT on unmapped or
//! wrongly protected memory exactly where `copy_from_user` / `copy_to_user` would.
//!
//! [`copy_in_to`] and [`copy_out`] allocate nothing (system calls on the caller's buffers), so
//! the SysV IPC paths use them from signal handlers; [`copy_in`] returns a new vector.

use uipc::Errno;

/// Copies `len` bytes from the caller's `addr` into a new vector.
pub fn copy_in(addr: usize, len: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; len];
    copy_in_to(addr, &mut buf)?;
    Ok(buf)
}

/// Fills `buf` from the caller's `addr` (allocates nothing).
pub fn copy_in_to(addr: usize, buf: &mut [u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: buf.len(),
    };
    // SAFETY: `local` is a live buffer of `buf.len()` bytes; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(crate::vfork::pid(), &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Copies `data` to the caller's `addr`.
pub fn copy_out(addr: usize, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: data.len(),
    };
    // SAFETY: `local` is live for reading; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_writev(crate::vfork::pid(), &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Copies `first` then `then` to the caller's `addr` onwards in one system call (msgrcv's
/// type and text); EFAULT if any byte cannot be written (those before it are).
pub fn copy_out_pair(addr: usize, first: &[u8], then: &[u8]) -> Result<(), Errno> {
    let len = first.len() + then.len();
    if addr == 0 || addr.checked_add(len).is_none() {
        return Err(Errno::EFAULT);
    }
    let local = [
        libc::iovec {
            iov_base: first.as_ptr() as *mut _,
            iov_len: first.len(),
        },
        libc::iovec {
            iov_base: then.as_ptr() as *mut _,
            iov_len: then.len(),
        },
    ];
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: len,
    };
    // SAFETY: both local buffers are live for reading; the kernel checks `remote`.
    let n =
        unsafe { libc::process_vm_writev(crate::vfork::pid(), local.as_ptr(), 2, &remote, 1, 0) };
    if n == len as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// A little-endian field reader over a copied struct.
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap_or([0; 4]))
}

/// A little-endian u64 at `off`.
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pointers_are_efault_and_good_ones_copy() {
        let src = [1u8, 2, 3];
        assert_eq!(copy_in(src.as_ptr() as usize, 3), Ok(vec![1, 2, 3]));
        assert_eq!(copy_in(0, 3), Err(Errno::EFAULT));
        assert_eq!(copy_in(8, 3), Err(Errno::EFAULT));
        let mut into = [0u8; 2];
        assert_eq!(copy_in_to(src.as_ptr() as usize + 1, &mut into), Ok(()));
        assert_eq!(into, [2, 3]);
        assert_eq!(copy_in_to(0, &mut []), Ok(()));
        assert_eq!(copy_in_to(8, &mut into), Err(Errno::EFAULT));
        let mut dst = [0u8; 2];
        copy_out(dst.as_mut_ptr() as usize, &[7, 8]).unwrap();
        assert_eq!(dst, [7, 8]);
        let ro = c"read-only".as_ptr() as usize;
        assert_eq!(copy_out(ro, &[1]), Err(Errno::EFAULT));
        let mut pair = [0u8; 5];
        copy_out_pair(pair.as_mut_ptr() as usize, &[1, 2], &[3, 4, 5]).unwrap();
        assert_eq!(pair, [1, 2, 3, 4, 5]);
        assert_eq!(copy_out_pair(ro, &[1], &[2]), Err(Errno::EFAULT));
        assert_eq!(copy_out_pair(0, &[1], &[]), Err(Errno::EFAULT));
    }
}
