//! Telling the user, before an exec, that the new image will run without the library.
//!
//! The dynamic loader preloads nothing into a statically linked executable (no `PT_INTERP`
//! program header: no loader runs at all), and in secure-execution mode (AT_SECURE: a
//! set-user-ID or set-group-ID file that changes the caller's effective ids) it ignores an
//! `LD_PRELOAD` entry that contains a slash, which ours always does. Such an image's SysV
//! IPC calls, locks and timers reach the kernel, silently. So each exec wrapper looks at the
//! file first and, if it is such an image, writes one line on stderr, once per process (the
//! first such exec), and then makes the exec all the same: the program decides what runs.
//!
//! What is looked at: the file named by the path (relative to a directory descriptor for
//! execveat, the descriptor itself for fexecve); a bare name given to execvp/execvpe is
//! looked up in `$PATH` as those functions do. A script (`#!`) is not followed: its
//! interpreter is what runs, and the check does not read it. File capabilities (which also
//! set AT_SECURE) are not read.
//!
//! Like the exec wrappers this runs in vforked children and signal handlers: it allocates
//! nothing (the path buffer and the headers are on the stack), takes no lock, uses raw system
//! calls, and keeps the caller's errno.

use crate::exec_env::decimal;
use crate::guard::{errno_now, set_errno};
use crate::kernel::kernel_sys;
use libc::{c_char, c_int, c_long};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a warning was written: the next exec of this process image says nothing more.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Why an image runs without the library.
#[derive(Debug, PartialEq, Eq)]
enum Unpreloadable {
    Static,
    SecureExec,
}

/// Looks at the image `dirfd`/`path` (or the open `fd`, when `path` is null) and warns once
/// on stderr if it will run without the library.
pub fn warn_if_unpreloadable(dirfd: c_int, path: *const c_char, fd: Option<c_int>) {
    if WARNED.load(Ordering::Relaxed) {
        return;
    }
    // Restored below so the exec's own errno is untouched.
    let saved = errno_now();
    let why = match fd {
        Some(fd) => classify_fd(fd),
        None => open_image(dirfd, path).and_then(|fd| {
            let why = classify_fd(fd);
            kernel_sys!(libc::SYS_close, fd);
            why
        }),
    };
    if let Some(why) = why {
        if !WARNED.swap(true, Ordering::Relaxed) {
            write_warning(path, fd, why);
        }
    }
    set_errno(saved);
}

/// The execvp/execvpe form: a name without a slash is looked up in `$PATH` (empty entries
/// meaning the current directory), as those functions search.
pub fn warn_if_unpreloadable_in_path(file: *const c_char) {
    if WARNED.load(Ordering::Relaxed) || file.is_null() {
        return;
    }
    // SAFETY: `file` is the caller's NUL-terminated name (the exec would read it too).
    let name = unsafe { std::ffi::CStr::from_ptr(file) }.to_bytes();
    if name.is_empty() || name.contains(&b'/') {
        return warn_if_unpreloadable(libc::AT_FDCWD, file, None);
    }
    // SAFETY: getenv reads `environ` without allocating.
    let path_var = unsafe { libc::getenv(c"PATH".as_ptr()) };
    if path_var.is_null() {
        return;
    }
    // SAFETY: getenv returned a NUL-terminated value.
    let dirs = unsafe { std::ffi::CStr::from_ptr(path_var) }.to_bytes();
    let mut buf = [0u8; 4096];
    for dir in dirs.split(|&b| b == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let len = dir.len() + 1 + name.len();
        if len + 1 > buf.len() {
            continue;
        }
        buf[..dir.len()].copy_from_slice(dir);
        buf[dir.len()] = b'/';
        buf[dir.len() + 1..len].copy_from_slice(name);
        buf[len] = 0;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // `buf` is NUL-terminated; `st` is room for one struct stat.
        let at = libc::AT_FDCWD;
        let found = kernel_sys!(libc::SYS_newfstatat, at, buf.as_ptr(), st.as_mut_ptr(), 0) == 0;
        // SAFETY: stat succeeded, so it filled `st`.
        if found && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFREG {
            return warn_if_unpreloadable(libc::AT_FDCWD, buf.as_ptr().cast(), None);
        }
    }
}

fn open_image(dirfd: c_int, path: *const c_char) -> Option<c_int> {
    if path.is_null() {
        return None;
    }
    let flags = libc::O_RDONLY | libc::O_CLOEXEC;
    // `path` is the caller's NUL-terminated path, as the exec would read it.
    let fd = kernel_sys!(libc::SYS_openat, dirfd, path, flags);
    (fd >= 0).then_some(fd as c_int)
}

fn classify_fd(fd: c_int) -> Option<Unpreloadable> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    if kernel_sys!(libc::SYS_fstat, fd, st.as_mut_ptr()) != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    if changes_ids(st.st_mode, st.st_uid, st.st_gid) {
        return Some(Unpreloadable::SecureExec);
    }
    let mut head = [0u8; 64];
    let n = pread(fd, &mut head, 0);
    let phdrs = elf_program_headers(&head[..n])?;
    let mut table = [0u8; 64 * 56];
    let want = (phdrs.count * phdrs.entry_size).min(table.len());
    let got = pread(fd, &mut table[..want], phdrs.offset);
    classify_program_headers(&table[..got], phdrs.entry_size)
}

/// Whether exec of a file with this mode and owner runs in secure-execution mode: the
/// kernel sets AT_SECURE when, after the exec, the effective ids differ from the real ones
/// (so also for any image exec'd by a process whose ids already differ).
fn changes_ids(mode: u32, uid: u32, gid: u32) -> bool {
    // Raw calls: other preloads (fakeroot) wrap the C library's id functions.
    let euid = kernel_sys!(libc::SYS_geteuid) as u32;
    let egid = kernel_sys!(libc::SYS_getegid) as u32;
    let ruid = kernel_sys!(libc::SYS_getuid) as u32;
    let rgid = kernel_sys!(libc::SYS_getgid) as u32;
    let new_euid = if mode & libc::S_ISUID != 0 { uid } else { euid };
    let new_egid = if mode & libc::S_ISGID != 0 { gid } else { egid };
    new_euid != ruid || new_egid != rgid
}

fn pread(fd: c_int, buf: &mut [u8], offset: u64) -> usize {
    let n = kernel_sys!(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), offset);
    usize::try_from(n).unwrap_or(0)
}

/// Where a 64-bit little-endian ELF file's program header table is.
#[derive(Debug)]
struct ProgramHeaders {
    offset: u64,
    count: usize,
    entry_size: usize,
}

fn elf_program_headers(head: &[u8]) -> Option<ProgramHeaders> {
    // ELF magic, ELFCLASS64, ELFDATA2LSB: the only kind this x86-64/aarch64 library meets.
    if head.len() < 64 || head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let u16_at = |i: usize| u16::from_le_bytes([head[i], head[i + 1]]);
    let e_type = u16_at(16);
    // ET_EXEC or ET_DYN; anything else is not run by exec.
    if e_type != 2 && e_type != 3 {
        return None;
    }
    let offset = u64::from_le_bytes(head[32..40].try_into().ok()?);
    let entry_size = usize::from(u16_at(54));
    let count = usize::from(u16_at(56));
    (entry_size >= 56 && count > 0).then_some(ProgramHeaders {
        offset,
        count,
        entry_size,
    })
}

/// Static if no entry of the table is PT_INTERP (a `PT_INTERP` names the loader).
fn classify_program_headers(table: &[u8], entry_size: usize) -> Option<Unpreloadable> {
    const PT_INTERP: u32 = 3;
    let entries = table.chunks_exact(entry_size);
    if entries.len() == 0 {
        return None;
    }
    let has_interp = entries
        .map(|e| u32::from_le_bytes([e[0], e[1], e[2], e[3]]))
        .any(|p_type| p_type == PT_INTERP);
    (!has_interp).then_some(Unpreloadable::Static)
}

/// `/proc/self/fd/FD`'s target into `buf` (the file an fexecve runs), or "" if unreadable.
fn fd_name(fd: c_int, buf: &mut [u8; 256]) -> &[u8] {
    let mut link = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0";
    let mut digits = [0; 20];
    let digits = decimal(u64::from(fd.unsigned_abs()), &mut digits);
    link[14..14 + digits.len()].copy_from_slice(digits);
    let got = kernel_sys!(
        libc::SYS_readlinkat,
        libc::AT_FDCWD,
        link.as_ptr(),
        buf.as_mut_ptr(),
        buf.len()
    );
    &buf[..usize::try_from(got).unwrap_or(0)]
}

fn write_warning(path: *const c_char, fd: Option<c_int>, why: Unpreloadable) {
    let what: &[u8] = match why {
        Unpreloadable::Static => b" is statically linked",
        Unpreloadable::SecureExec => b" is set-user-ID or set-group-ID",
    };
    let mut buf = [0u8; 256];
    // SAFETY: a non-null `path` is the caller's NUL-terminated path.
    let name: &[u8] = match (fd, path.is_null() || unsafe { *path } == 0) {
        (Some(fd), true) => fd_name(fd, &mut buf),
        (_, true) => b"",
        // SAFETY: as above.
        (_, false) => unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes(),
    };
    let name: &[u8] = if name.is_empty() {
        b"the executed file"
    } else {
        name
    };
    let tail: &[u8] =
        b": the loader will not preload uipc into it, so its SysV IPC, locks and timers reach the kernel\n";
    let mut line = [0u8; 512];
    let mut len = 0;
    for part in [b"uipc: ".as_slice(), name, what, tail] {
        let n = part.len().min(line.len() - len);
        line[len..len + n].copy_from_slice(&part[..n]);
        len += n;
    }
    kernel_sys!(libc::SYS_write, 2 as c_long, line.as_ptr(), len);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(e_type: u16, phoff: u64, phentsize: u16, phnum: u16) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[16..18].copy_from_slice(&e_type.to_le_bytes());
        h[32..40].copy_from_slice(&phoff.to_le_bytes());
        h[54..56].copy_from_slice(&phentsize.to_le_bytes());
        h[56..58].copy_from_slice(&phnum.to_le_bytes());
        h
    }

    fn table(types: &[u32]) -> Vec<u8> {
        let mut t = vec![0u8; 56 * types.len()];
        for (i, p) in types.iter().enumerate() {
            t[i * 56..i * 56 + 4].copy_from_slice(&p.to_le_bytes());
        }
        t
    }

    #[test]
    fn a_table_without_pt_interp_is_static_and_one_with_it_is_not() {
        assert_eq!(
            classify_program_headers(&table(&[1, 1, 4]), 56),
            Some(Unpreloadable::Static)
        );
        assert_eq!(classify_program_headers(&table(&[6, 3, 1]), 56), None);
        assert_eq!(classify_program_headers(&[], 56), None, "unreadable table");
    }

    #[test]
    fn only_64_bit_little_endian_executables_are_read() {
        let ph = elf_program_headers(&header(3, 64, 56, 13)).unwrap();
        assert_eq!((ph.offset, ph.count, ph.entry_size), (64, 13, 56));
        assert!(
            elf_program_headers(&header(1, 64, 56, 13)).is_none(),
            "ET_REL"
        );
        assert!(elf_program_headers(&header(2, 64, 0, 13)).is_none());
        assert!(elf_program_headers(b"#!/bin/sh\n").is_none(), "a script");
        let mut be = header(2, 64, 56, 1);
        be[5] = 2;
        assert!(elf_program_headers(&be).is_none(), "big-endian");
    }

    #[test]
    fn this_test_binary_is_dynamically_linked() {
        let fd = open_image(libc::AT_FDCWD, c"/proc/self/exe".as_ptr()).unwrap();
        assert_eq!(classify_fd(fd), None);
        // SAFETY: closes the descriptor opened above.
        unsafe { libc::close(fd) };
    }
}
