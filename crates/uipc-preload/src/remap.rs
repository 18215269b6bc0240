//! remap_file_pages(2) and mremap(2) over shared-memory attachments, as Linux treats them on
//! SysV segments.
//!
//! remap_file_pages: Linux emulates it with an mmap of the mapping's file over the range, so
//! on a SysV segment the old mapping of the range is closed (`shm_close`) before the segment
//! is mapped again (`shm_mmap`). If the range held the last mapped pages of a segment marked
//! for removal (IPC_RMID while attached), the close destroys the segment and the remap fails
//! with EINVAL, leaving the range unmapped (a program that loops "while remap succeeds" ends
//! there). Here the kernel remaps the memfd (its checks and errnos are Linux's own), then the
//! daemon applies the close and the reopen to the attachment (`Request::ShmRemap`); if the
//! segment is gone, the library unmaps the range, forgets the attachment and fails with
//! EINVAL. Whether the range held the attachment's last pages is read from
//! `/proc/self/maps`: another line inside the attachment mapping the same file (device and
//! inode) means it did not.
//!
//! mremap: an attachment moved whole keeps being one (Linux's shmdt finds it at the new
//! address and no longer at the old one): the daemon's record moves with it (`ShmMoved`) and
//! so does the table's entry; attachments the move replaced (MREMAP_FIXED) are detached. An
//! attachment resized in place keeps its start with the new length.
//!
//! Both hold the attachment table (see `attach`, signals blocked) from the lookup to the
//! daemon's answer, as shmat and shmdt do. Nothing here allocates: `/proc/self/maps` is read
//! through a stack buffer.

use crate::attach::{attached, AttachGuard};
use crate::conn::{enabled, ret_of};
use crate::kernel::sys;
use libc::{c_int, c_long, c_void, size_t};
use uipc::Errno;
use uipc_proto::Request;

const PAGE: usize = 4096;

fn page_up(n: usize) -> usize {
    n.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// The kernel's result of [`sys`]: the value, or the errno it set.
fn kernel_result(r: c_long) -> Result<i64, Errno> {
    if r == -1 {
        // SAFETY: reads this thread's errno, just set by the failed call.
        Err(Errno::from_raw(unsafe { *libc::__errno_location() }))
    } else {
        Ok(r)
    }
}

/// remap_file_pages(2).
#[no_mangle]
pub extern "C-unwind" fn remap_file_pages(
    start: *mut c_void,
    size: size_t,
    prot: c_int,
    pgoff: size_t,
    flags: c_int,
) -> c_int {
    let args = [
        start as c_long,
        size as c_long,
        prot as c_long,
        pgoff as c_long,
        flags as c_long,
        0,
    ];
    if !enabled() {
        return sys(libc::SYS_remap_file_pages, args) as c_int;
    }
    crate::guard::guard(|| remap_uipc(args)) as c_int
}

fn remap_uipc(args: [c_long; 6]) -> Result<i64, Errno> {
    let start = args[0] as usize & !(PAGE - 1);
    let mut table = attached();
    let Some((at, len)) = table.containing(start) else {
        drop(table);
        return kernel_result(sys(libc::SYS_remap_file_pages, args));
    };
    let end = start.saturating_add(args[1] as usize & !(PAGE - 1));
    let last = !maps_elsewhere(at, at + len, start, end);
    kernel_result(sys(libc::SYS_remap_file_pages, args))?;
    match ret_of(Request::ShmRemap {
        addr: at as u64,
        last,
    }) {
        Err(Errno::EINVAL) if last => {
            // SAFETY: unmaps the range the kernel just remapped inside this library's
            // attachment, which the segment's removal leaves unmapped on Linux.
            unsafe { crate::kernel::kernel_munmap(start as *mut c_void, end - start) };
            table.remove(at);
            Err(Errno::EINVAL)
        }
        _ => Ok(0),
    }
}

/// Whether `/proc/self/maps` shows, inside `[lo, hi)` but outside `[start, end)`, a mapping
/// of the file mapped at `start` (true when it cannot be read: the attachment is kept).
fn maps_elsewhere(lo: usize, hi: usize, start: usize, end: usize) -> bool {
    let mut file = None;
    let mut found = false;
    let ok = each_map(|m| {
        if m.lo <= start && start < m.hi {
            file = Some(m.file);
        }
        file.is_some()
    });
    let Some(file) = file.filter(|_| ok) else {
        return true;
    };
    each_map(|m| {
        let inside = m.lo < hi && lo < m.hi;
        let outside_range = m.lo < start || end < m.hi;
        if inside && outside_range && m.file == file {
            found = true;
        }
        found
    });
    found
}

/// One line of `/proc/self/maps`: its range and file (device, inode).
#[derive(Clone, Copy)]
struct Map {
    lo: usize,
    hi: usize,
    file: (u64, u64),
}

/// Calls `f` on each line of `/proc/self/maps` until it returns true; false if the file
/// cannot be read.
fn each_map(mut f: impl FnMut(Map) -> bool) -> bool {
    // SAFETY: opens a NUL-terminated path read-only.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    let fd = crate::slots::ClosedQuietly(fd);
    let mut buf = [0u8; 4096];
    // The line being read: its first bytes are enough (range, perms, offset, dev, inode).
    let mut line = [0u8; 160];
    let mut n = 0;
    loop {
        // SAFETY: reads into a live stack buffer of its length.
        let got = unsafe { libc::read(fd.0, buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            return false;
        }
        if got == 0 {
            return true;
        }
        for &b in &buf[..got as usize] {
            if b != b'\n' {
                if n < line.len() {
                    line[n] = b;
                    n += 1;
                }
                continue;
            }
            let parsed = parse_line(&line[..n]);
            n = 0;
            if let Some(m) = parsed {
                if f(m) {
                    return true;
                }
            }
        }
    }
}

/// `lo-hi perms offset major:minor inode ...`.
fn parse_line(line: &[u8]) -> Option<Map> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let lo = hex(&range[..dash])? as usize;
    let hi = hex(&range[dash + 1..])? as usize;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let dev = fields.next()?;
    let colon = dev.iter().position(|&b| b == b':')?;
    let dev = (hex(&dev[..colon])? << 32) | hex(&dev[colon + 1..])?;
    let inode = dec(fields.next()?)?;
    Some(Map {
        lo,
        hi,
        file: (dev, inode),
    })
}

fn hex(s: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(s).ok()?;
    u64::from_str_radix(text, 16).ok()
}

fn dec(s: &[u8]) -> Option<u64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// mremap(2). Variadic in C (`new_address` only with MREMAP_FIXED): read as five fixed
/// arguments, as x86-64 and aarch64 pass them (see `syscall`).
#[no_mangle]
pub extern "C-unwind" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let args = [
        old as c_long,
        old_len as c_long,
        new_len as c_long,
        flags as c_long,
        // Read only with MREMAP_FIXED, as the C library's mremap reads it.
        if flags & libc::MREMAP_FIXED != 0 {
            new_addr as c_long
        } else {
            0
        },
        0,
    ];
    if !enabled() {
        return sys(libc::SYS_mremap, args) as *mut c_void;
    }
    let r = crate::guard::guard(|| mremap_uipc(args));
    if r == -1 {
        libc::MAP_FAILED
    } else {
        r as *mut c_void
    }
}

fn mremap_uipc(args: [c_long; 6]) -> Result<i64, Errno> {
    let old = args[0] as usize;
    let mut table = attached();
    let Some(len) = table.get(old) else {
        drop(table);
        return kernel_result(sys(libc::SYS_mremap, args));
    };
    let to = kernel_result(sys(libc::SYS_mremap, args))? as usize;
    if page_up(args[1] as usize) != len || args[3] as c_int & libc::MREMAP_DONTUNMAP != 0 {
        // Part of the attachment moved or resized, or a copy made: the entry stays as it was.
        return Ok(to as i64);
    }
    let new_len = page_up(args[2] as usize);
    if to == old {
        table.resize(old, new_len);
    } else {
        moved(&mut table, old, to, new_len);
    }
    Ok(to as i64)
}

/// The whole attachment at `old` now lies at `to` (any attachment there was replaced).
fn moved(table: &mut AttachGuard, old: usize, to: usize, new_len: usize) {
    table.remove(old);
    while let Some(at) = table.first_overlapping(to, to + new_len) {
        table.remove(at);
        let _ = ret_of(Request::Shmdt { addr: at as u64 });
    }
    if ret_of(Request::ShmMoved {
        from: old as u64,
        to: to as u64,
    })
    .is_ok()
    {
        // Room: the entry removed above.
        table.insert_reserved(to, new_len);
    }
}
