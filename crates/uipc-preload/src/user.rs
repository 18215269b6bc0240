//! Reading and writing the caller's memory without trusting its pointers.
//!
//! The kernel answers a bad pointer with EFAULT; a library that dereferenced it would crash
//! instead. Copies go through `process_vm_readv` / `process_vm_writev` on the calling process
//! itself (always permitted for one's own process), which fail with EFAULT on unmapped or
//! wrongly protected memory exactly where `copy_from_user` / `copy_to_user` would.
//!
//! [`copy_in_to`] and [`copy_out`] allocate nothing (system calls on the caller's buffers), so
//! the SysV IPC paths use them from signal handlers; [`copy_in`] returns a new vector.
//!
//! One case needs no system call: bytes inside the main thread's stack as the constructor
//! found it ([`prepare`] reads the `[stack]` line of `/proc/self/maps`). A stack mapping only
//! ever grows, so that range stays mapped, readable and writable for the life of the program
//! image, and [`copy_in_to`] and [`copy_out`] touch it directly (most callers pass a `struct
//! sembuf`, a timeout or an `itimerspec` on their stack). A program that unmaps or protects
//! its own main stack and then passes a pointer into it would crash there instead of getting
//! EFAULT (in the "Not supported" list).

use std::sync::atomic::{AtomicUsize, Ordering};
use uipc::Errno;

/// The main thread's stack mapping `[lo, hi)` when the constructor ran; `lo == hi` if unknown.
static MAIN_STACK: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// The constructor's part: finds the main thread's stack in `/proc/self/maps`.
pub fn prepare() {
    if !crate::conn::enabled() {
        return;
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let Some((lo, hi)) = maps.lines().find_map(stack_range) else {
        return;
    };
    MAIN_STACK[0].store(lo, Ordering::Relaxed);
    MAIN_STACK[1].store(hi, Ordering::Relaxed);
}

/// The range of a `/proc/PID/maps` line if it is the main thread's stack.
fn stack_range(line: &str) -> Option<(usize, usize)> {
    if !line.ends_with("[stack]") {
        return None;
    }
    let (lo, rest) = line.split_once('-')?;
    let hi = rest.split(' ').next()?;
    let lo = usize::from_str_radix(lo, 16).ok()?;
    let hi = usize::from_str_radix(hi, 16).ok()?;
    (lo < hi).then_some((lo, hi))
}

#[cfg(test)]
#[test]
fn the_stack_line_is_found_and_others_are_not() {
    let stack = "7ffc1a2b3000-7ffc1a2d4000 rw-p 00000000 00:00 0                          [stack]";
    assert_eq!(stack_range(stack), Some((0x7ffc1a2b3000, 0x7ffc1a2d4000)));
    let heap = "55d0c3a1b000-55d0c3a3c000 rw-p 00000000 00:00 0                          [heap]";
    assert_eq!(stack_range(heap), None);
    assert_eq!(stack_range("zz-7ffc1a2d4000 rw-p 0 00:00 0 [stack]"), None);
}

/// Whether `[addr, addr + len)` lies inside the main stack's range found by [`prepare`].
fn in_main_stack(addr: usize, len: usize) -> bool {
    let (lo, hi) = (
        MAIN_STACK[0].load(Ordering::Relaxed),
        MAIN_STACK[1].load(Ordering::Relaxed),
    );
    addr >= lo && addr.checked_add(len).is_some_and(|end| end <= hi)
}

/// Copies `len` bytes from the caller's `addr` into a new vector.
pub fn copy_in(addr: usize, len: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; len];
    copy_in_to(addr, &mut buf)?;
    Ok(buf)
}

/// How a copy of `len` bytes at the caller's `addr` is made.
enum Route {
    /// No bytes: nothing to do (the kernel checks no pointer either).
    Nothing,
    /// Inside the main stack ([`in_main_stack`]): touched directly.
    Stack,
    /// Anywhere else: one `process_vm_*` call ([`vm_copy`]).
    Kernel,
}

/// The route of a copy of `len` bytes at `addr`; EFAULT for a null `addr`.
fn route(addr: usize, len: usize) -> Result<Route, Errno> {
    if len == 0 {
        Ok(Route::Nothing)
    } else if addr == 0 {
        Err(Errno::EFAULT)
    } else if in_main_stack(addr, len) {
        Ok(Route::Stack)
    } else {
        Ok(Route::Kernel)
    }
}

/// Fills `buf` from the caller's `addr` (allocates nothing).
pub fn copy_in_to(addr: usize, buf: &mut [u8]) -> Result<(), Errno> {
    match route(addr, buf.len())? {
        Route::Nothing => Ok(()),
        Route::Stack => {
            for (i, b) in buf.iter_mut().enumerate() {
                // SAFETY: the byte lies in the main stack's mapping as the constructor found
                // it, which stays mapped and readable (module doc). The caller's threads may
                // write it meanwhile, as they may during the kernel's copy: a volatile read of
                // each byte takes whatever value is there.
                *b = unsafe { std::ptr::read_volatile((addr + i) as *const u8) };
            }
            Ok(())
        }
        // SAFETY: the one buffer is `buf`, live and writable.
        Route::Kernel => unsafe { vm_copy(Dir::In, &[iovec(buf.as_mut_ptr(), buf.len())], addr) },
    }
}

/// Copies `data` to the caller's `addr`.
pub fn copy_out(addr: usize, data: &[u8]) -> Result<(), Errno> {
    match route(addr, data.len())? {
        Route::Nothing => Ok(()),
        Route::Stack => {
            for (i, b) in data.iter().enumerate() {
                // SAFETY: the byte lies in the main stack's mapping as the constructor found
                // it, which stays mapped and writable (module doc); a volatile write, as the
                // kernel's copy would store it.
                unsafe { std::ptr::write_volatile((addr + i) as *mut u8, *b) };
            }
            Ok(())
        }
        // SAFETY: the one buffer is `data`, live for reading.
        Route::Kernel => unsafe {
            vm_copy(
                Dir::Out,
                &[iovec(data.as_ptr().cast_mut(), data.len())],
                addr,
            )
        },
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
        iovec(first.as_ptr().cast_mut(), first.len()),
        iovec(then.as_ptr().cast_mut(), then.len()),
    ];
    // SAFETY: `local` is `first` and `then`, live for reading.
    unsafe { vm_copy(Dir::Out, &local, addr) }
}

fn iovec(base: *mut u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base.cast(),
        iov_len: len,
    }
}

/// Which way [`vm_copy`] moves bytes: from the caller's memory, or to it.
#[derive(Clone, Copy)]
enum Dir {
    In,
    Out,
}

/// One `process_vm_readv` (`In`) or `process_vm_writev` (`Out`) between the `local` buffers
/// and the caller's `addr` onwards, as many bytes as they hold: EFAULT unless every byte
/// moved.
///
/// # Safety
/// Each of `local` must describe a live buffer, writable for `In`. (The kernel checks the
/// caller's side.)
unsafe fn vm_copy(dir: Dir, local: &[libc::iovec], addr: usize) -> Result<(), Errno> {
    let len = local.iter().map(|v| v.iov_len).sum();
    let remote = iovec(addr as *mut u8, len);
    let (pid, count) = (crate::vfork::pid(), local.len() as libc::c_ulong);
    // SAFETY: `local` holds live buffers (this function's contract); the kernel checks `remote`.
    let moved = unsafe {
        match dir {
            Dir::In => libc::process_vm_readv(pid, local.as_ptr(), count, &remote, 1, 0),
            Dir::Out => libc::process_vm_writev(pid, local.as_ptr(), count, &remote, 1, 0),
        }
    };
    if moved == len as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Fills the local pieces (pointer, length) in order from the caller's `addr` onwards, in one
/// system call (msgsnd's text into the fast path's ring).
///
/// # Safety
/// Each piece must be a live buffer of its length, writable, that nothing else accesses.
pub unsafe fn copy_in_pieces(addr: usize, pieces: &[(*mut u8, usize)]) -> Result<(), Errno> {
    pieces_copy(Dir::In, addr, pieces)
}

/// Copies the local pieces (pointer, length) in order to the caller's `addr` onwards, in one
/// system call (msgrcv's type and text out of the fast path's ring); EFAULT if any byte
/// cannot be written.
///
/// # Safety
/// Each piece must be a live buffer of its length, readable.
pub unsafe fn copy_out_pieces(addr: usize, pieces: &[(*mut u8, usize)]) -> Result<(), Errno> {
    pieces_copy(Dir::Out, addr, pieces)
}

/// At most three pieces, as [`copy_in_pieces`] and [`copy_out_pieces`] take them (and their
/// contracts).
fn pieces_copy(dir: Dir, addr: usize, pieces: &[(*mut u8, usize)]) -> Result<(), Errno> {
    let len: usize = pieces.iter().map(|p| p.1).sum();
    if addr.checked_add(len).is_none() {
        return Err(Errno::EFAULT);
    }
    match route(addr, len)? {
        Route::Nothing => Ok(()),
        Route::Stack => {
            let mut at = addr;
            for &(p, n) in pieces {
                for i in 0..n {
                    let user = (at + i) as *mut u8;
                    // SAFETY: `user` lies in the main stack's mapping as the constructor found
                    // it, which stays mapped, readable and writable (module doc); `p` is one of
                    // the caller's `n` bytes (the contract). Volatile, as the kernel's copy.
                    unsafe {
                        match dir {
                            Dir::In => p.add(i).write_volatile(user.read_volatile()),
                            Dir::Out => user.write_volatile(p.add(i).read_volatile()),
                        }
                    }
                }
                at += n;
            }
            Ok(())
        }
        Route::Kernel => {
            let mut local = [iovec(std::ptr::null_mut(), 0); 3];
            for (v, &(p, n)) in local.iter_mut().zip(pieces) {
                *v = iovec(p, n);
            }
            // SAFETY: the pieces are live buffers (the contract), writable for `In`.
            unsafe { vm_copy(dir, &local[..pieces.len().min(3)], addr) }
        }
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
