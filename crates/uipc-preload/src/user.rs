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
//!
//! Reads need no system call either from the program's own image: the readable file mappings
//! of its executable as the constructor found them (after the loader's RELRO protection),
//! which hold its constants and static data (a `static const struct itimerspec`, a `static
//! struct sembuf`). The loader never unmaps the executable, so those ranges stay mapped and
//! readable for the life of the program image; [`copy_in_to`] reads them directly. Writes there
//! still go through the kernel (a program may write-protect its own data). A program that
//! unmaps or read-protects part of its own executable's mappings and then passes a pointer into
//! that part crashes instead of getting EFAULT (in the "Not supported" list).

use std::sync::atomic::{AtomicUsize, Ordering};
use uipc::Errno;

/// The main thread's stack mapping `[lo, hi)` when the constructor ran; `lo == hi` if unknown.
static MAIN_STACK: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// How many separate readable ranges of the executable are kept (adjacent mappings merge, so
/// one or two in practice).
const IMAGE_RANGES: usize = 4;

/// The executable's readable file mappings `[lo, hi)` when the constructor ran; empty ranges
/// (`lo == hi`) unused.
static IMAGE: [[AtomicUsize; 2]; IMAGE_RANGES] =
    [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; IMAGE_RANGES];

/// The constructor's part: finds the main thread's stack and the executable's readable
/// mappings in `/proc/self/maps`.
pub fn prepare() {
    if !crate::conn::enabled() {
        return;
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    if let Some((lo, hi)) = maps.lines().find_map(stack_range) {
        MAIN_STACK[0].store(lo, Ordering::Relaxed);
        MAIN_STACK[1].store(hi, Ordering::Relaxed);
    }
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Some(exe) = exe.to_str() else {
        return;
    };
    for (slot, (lo, hi)) in IMAGE.iter().zip(image_ranges(&maps, exe)) {
        slot[0].store(lo, Ordering::Relaxed);
        slot[1].store(hi, Ordering::Relaxed);
    }
}

/// The readable mappings of file `exe` in `/proc/PID/maps` text `maps`, adjacent ones merged,
/// at most [`IMAGE_RANGES`] of them (`(0, 0)` for the unused ones).
fn image_ranges(maps: &str, exe: &str) -> [(usize, usize); IMAGE_RANGES] {
    let mut out = [(0, 0); IMAGE_RANGES];
    let mut n = 0;
    for line in maps.lines() {
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3).map_or("", str::trim_start);
        if path != exe || !perms.starts_with('r') {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if lo >= hi {
            continue;
        }
        if n > 0 && out[n - 1].1 == lo {
            out[n - 1].1 = hi;
        } else if n < IMAGE_RANGES {
            out[n] = (lo, hi);
            n += 1;
        }
    }
    out
}

#[cfg(test)]
#[test]
fn the_executables_readable_mappings_are_found_and_merged() {
    let maps = "\
5600000000-5600001000 r--p 00000000 08:01 42    /usr/bin/prog
5600001000-5600003000 r-xp 00001000 08:01 42    /usr/bin/prog
5600003000-5600004000 ---p 00003000 08:01 42    /usr/bin/prog
5600004000-5600005000 r--p 00003000 08:01 42    /usr/bin/prog
5600005000-5600006000 rw-p 00004000 08:01 42    /usr/bin/prog
5600006000-5600008000 rw-p 00000000 00:00 0 
7f00000000-7f00001000 r--p 00000000 08:01 43    /usr/lib/libc.so.6
7f00001000-7f00002000 r--p 00000000 08:01 44    /usr/bin/prog2
7ffc1a2b3000-7ffc1a2d4000 rw-p 00000000 00:00 0                          [stack]";
    assert_eq!(
        image_ranges(maps, "/usr/bin/prog"),
        [
            (0x5600000000, 0x5600003000),
            (0x5600004000, 0x5600006000),
            (0, 0),
            (0, 0)
        ]
    );
    assert_eq!(image_ranges(maps, "/usr/bin/none"), [(0, 0); IMAGE_RANGES]);
}

/// Whether `[addr, addr + len)` lies inside one of the executable's readable mappings found by
/// [`prepare`].
fn in_image(addr: usize, len: usize) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    IMAGE.iter().any(|r| {
        let (lo, hi) = (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed));
        addr >= lo && end <= hi && lo < hi
    })
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
    /// Inside the main stack ([`in_main_stack`]), or for a read inside the executable's
    /// readable mappings ([`in_image`]): touched directly.
    Direct,
    /// Anywhere else: one `process_vm_*` call ([`vm_copy`]).
    Kernel,
}

/// The route of a copy of `len` bytes at `addr` in direction `dir`; EFAULT for a null `addr`.
fn route(dir: Dir, addr: usize, len: usize) -> Result<Route, Errno> {
    if len == 0 {
        Ok(Route::Nothing)
    } else if addr == 0 {
        Err(Errno::EFAULT)
    } else if in_main_stack(addr, len) || (matches!(dir, Dir::In) && in_image(addr, len)) {
        Ok(Route::Direct)
    } else {
        Ok(Route::Kernel)
    }
}

/// Fills `buf` from the caller's `addr` (allocates nothing).
pub fn copy_in_to(addr: usize, buf: &mut [u8]) -> Result<(), Errno> {
    match route(Dir::In, addr, buf.len())? {
        Route::Nothing => Ok(()),
        Route::Direct => {
            for (i, b) in buf.iter_mut().enumerate() {
                // SAFETY: the byte lies in the main stack's mapping or the executable's
                // readable mappings as the constructor found them, which stay mapped and
                // readable (module doc). The caller's threads may write it meanwhile, as they
                // may during the kernel's copy: a volatile read of each byte takes whatever
                // value is there.
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
    match route(Dir::Out, addr, data.len())? {
        Route::Nothing => Ok(()),
        Route::Direct => {
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
    match route(dir, addr, len)? {
        Route::Nothing => Ok(()),
        Route::Direct => {
            let mut at = addr;
            for &(p, n) in pieces {
                for i in 0..n {
                    let user = (at + i) as *mut u8;
                    // SAFETY: `user` lies in the main stack's mapping as the constructor found
                    // it, which stays mapped, readable and writable, or for `In` in the
                    // executable's readable mappings, which stay readable (module doc); `p` is one of
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
