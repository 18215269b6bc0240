//! `/proc` views: opening `/proc/sysvipc/{sem,msg,shm}`, the IPC files of `/proc/sys/kernel`
//! (`msgmni`, `sem`, `shm_next_id`, ...) and, under `--locks`, `/proc/locks` gives a
//! descriptor whose content is what the kernel would show if uipc's objects, limits and locks
//! were its own.
//!
//! Exports: open, open64, openat, openat64, their fortified forms (`__open_2`, ...), fopen and
//! fopen64. Each first looks at the path (an absolute path, `.`, `..` and repeated slashes
//! resolved textually) and, for any other file, calls the C library's function with its
//! arguments unchanged: the cost for other files is a look at the path's first bytes.
//!
//! A view opened for reading is a memfd holding the daemon's text
//! ([`uipc_proto::ProcRequest::Read`]), positioned at 0, sealed against writes and size
//! changes, and given to the caller as a read-only descriptor with the kernel file's mode. `/proc/locks` is uipc's locks followed by the kernel's own lines, renumbered after
//! uipc's; `/proc/PID/fdinfo/FD` is the kernel's text with the `lock:` lines of uipc's locks
//! ([`crate::fdinfo`]). A sysctl opened for writing is checked as Linux checks it at open (EACCES) and its
//! writes go to the daemon ([`crate::procwrite`]). Both take the text from `proctext.rs`. Opening a `/proc/sysvipc` file or
//! `/proc/locks` for writing, or with flags that are not for reading or writing an existing
//! file (O_DIRECTORY, O_PATH, O_TMPFILE, O_CREAT with O_EXCL), is left to the kernel. A
//! daemon that is gone makes the open fail as every call then fails (ECONNREFUSED).
//!
//! Not async-signal-safe (the text is allocated), unlike open(2).

use crate::kernel::kernel_sys;
use crate::proctext::{fetch, kernel_mode, memfd_with};
use crate::procwrite;
use libc::{c_char, c_int, c_uint, FILE};
use std::ffi::CStr;
use uipc::ipc::Sysctl;
use uipc::Errno;
use uipc_proto::ProcFile;

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type Openat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;

crate::kernel::next_symbols! {
    /// The C library's definitions, looked up once (the library's constructor).
    struct Next, fn next {
        open, open64, openat, openat64,
        open_2 = "__open_2", open64_2 = "__open64_2",
        openat_2 = "__openat_2", openat64_2 = "__openat64_2",
        fopen, fopen64,
    }
}

/// Looks up the C library's functions; called when the library is loaded.
pub fn prepare() {
    let _ = next();
}

/// What a `/proc` path uipc serves names.
#[derive(Clone, Copy)]
enum View {
    /// A file the daemon serves whole.
    File(ProcFile),
    /// `/proc/PID/fdinfo/FD` under `--locks` ([`crate::fdinfo`]).
    FdInfo(crate::fdinfo::Target),
}

/// The view a path names, if uipc serves it (only with a daemon).
fn view_of(path: *const c_char) -> Option<View> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated path (as open requires); only its first
    // bytes are read before the quick check.
    let first = unsafe { *path.cast::<u8>() };
    if first != b'/' || !crate::conn::enabled() {
        return None;
    }
    // SAFETY: as above.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !bytes.windows(5).any(|w| w == b"proc/") {
        return None;
    }
    // The components, `.` and `..` resolved, on the stack: this runs for every /proc path a
    // program opens (the timer service reads /proc/self/status from signal-safe paths).
    let mut parts: [&[u8]; 8] = [&[]; 8];
    let mut n = 0usize;
    for c in bytes.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => n = n.saturating_sub(1),
            _ if n == parts.len() => return None,
            c => {
                parts[n] = c;
                n += 1;
            }
        }
    }
    if let [b"proc", rest @ ..] = &parts[..n] {
        if let Some(t) = crate::fdinfo::target(rest).filter(|_| crate::locks::routing()) {
            return Some(View::FdInfo(t));
        }
    }
    let file = match &parts[..n] {
        [b"proc", b"sysvipc", b"sem"] => Some(ProcFile::SysvSem),
        [b"proc", b"sysvipc", b"msg"] => Some(ProcFile::SysvMsg),
        [b"proc", b"sysvipc", b"shm"] => Some(ProcFile::SysvShm),
        [b"proc", b"locks"] if crate::locks::routing() => Some(ProcFile::Locks),
        [b"proc", b"sys", b"kernel", name] => std::str::from_utf8(name)
            .ok()
            .and_then(Sysctl::by_name)
            .map(ProcFile::Sysctl),
        _ => None,
    };
    file.map(View::File)
}

/// Opens view `view` (of `path`) with open(2)'s `flags`: `None` to leave the call to the
/// kernel.
fn open_view(view: View, path: *const c_char, flags: c_int) -> Option<Result<c_int, Errno>> {
    let odd = libc::O_DIRECTORY | libc::O_PATH | libc::O_TMPFILE;
    let exclusive = libc::O_CREAT | libc::O_EXCL;
    if flags & odd != 0 || flags & exclusive == exclusive {
        return None;
    }
    let access = flags & libc::O_ACCMODE;
    let cloexec = flags & libc::O_CLOEXEC != 0;
    let file = match view {
        View::File(file) => file,
        View::FdInfo(_) if access != libc::O_RDONLY => return None,
        View::FdInfo(t) => {
            // SAFETY: view_of read it as a NUL-terminated path.
            return crate::fdinfo::open(t, unsafe { CStr::from_ptr(path) }, cloexec);
        }
    };
    let result = match file {
        ProcFile::Sysctl(s) if access != libc::O_RDONLY => procwrite::open(s, access, cloexec),
        _ if access != libc::O_RDONLY => return None,
        _ => fetch(file).and_then(|text| memfd_with(&text, cloexec, false, kernel_mode(file))),
    };
    match result {
        // No daemon named: the kernel's file.
        Err(Errno::ENOSYS) => None,
        r => Some(r),
    }
}

/// The view's descriptor, or -1 with errno, or `None` for the kernel.
fn try_open(path: *const c_char, flags: c_int) -> Option<c_int> {
    let view = view_of(path)?;
    let saved = crate::guard::errno_now();
    let r = crate::guard::guarded(|| Ok(open_view(view, path, flags))).ok()??;
    Some(crate::guard::finish(r.map(i64::from), saved) as c_int)
}

macro_rules! call_next {
    ($field:ident, $ty:ty, $($arg:expr),*) => {{
        let p = next().$field;
        if p == 0 {
            // SAFETY: writes this thread's errno.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        } else {
            // SAFETY: a non-null result is the C library's definition of the symbol, of this
            // type; the caller's arguments go on unchanged.
            unsafe { std::mem::transmute::<usize, $ty>(p)($($arg),*) }
        }
    }};
}

/// open(2).
#[no_mangle]
pub extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(open, OpenFn, path, flags, mode))
}

/// open64(2).
#[no_mangle]
pub extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(open64, OpenFn, path, flags, mode))
}

/// openat(2). Views are recognised by absolute path only, so `dirfd` never matters.
#[no_mangle]
pub extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(openat, OpenatFn, dirfd, path, flags, mode))
}

/// openat64(2).
#[no_mangle]
pub extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    try_open(path, flags)
        .unwrap_or_else(|| call_next!(openat64, OpenatFn, dirfd, path, flags, mode))
}

/// `__open_2` (open with `_FORTIFY_SOURCE`).
#[no_mangle]
pub extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(open_2, Open2Fn, path, flags))
}

/// `__open64_2`.
#[no_mangle]
pub extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(open64_2, Open2Fn, path, flags))
}

/// `__openat_2`.
#[no_mangle]
pub extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(openat_2, Openat2Fn, dirfd, path, flags))
}

/// `__openat64_2`.
#[no_mangle]
pub extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    try_open(path, flags).unwrap_or_else(|| call_next!(openat64_2, Openat2Fn, dirfd, path, flags))
}

/// fopen's mode string as open(2) flags (glibc's reading: the first character, then `+`,
/// `e` and `x` anywhere among the rest).
fn fopen_flags(mode: &[u8]) -> Option<c_int> {
    let mut flags = match mode.first()? {
        b'r' => libc::O_RDONLY,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    for &c in &mode[1..] {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'e' => flags |= libc::O_CLOEXEC,
            b'x' => flags |= libc::O_EXCL,
            b',' => break,
            _ => {}
        }
    }
    Some(flags)
}

/// fopen(3) of a view: a stream over the view's descriptor (reads) or a stream whose writes
/// go to the daemon (a sysctl opened for writing). `None`: the C library's fopen.
fn try_fopen(path: *const c_char, mode: *const c_char) -> Option<*mut FILE> {
    let view = view_of(path)?;
    if mode.is_null() {
        return None;
    }
    // SAFETY: fopen's mode is a NUL-terminated string.
    let mode_bytes = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let flags = fopen_flags(mode_bytes)?;
    let saved = crate::guard::errno_now();
    let stream = match view {
        View::File(ProcFile::Sysctl(s)) if flags & libc::O_ACCMODE != libc::O_RDONLY => {
            match crate::guard::guarded(|| procwrite::fopen(s, flags)) {
                Ok(stream) => stream,
                Err(Errno::ENOSYS) => return None,
                Err(e) => {
                    crate::guard::finish(Err(e), saved);
                    return Some(std::ptr::null_mut());
                }
            }
        }
        _ => {
            // Without O_CREAT (a write mode to a sysvipc file goes to the kernel anyway).
            let fd = try_open(
                path,
                flags & !(libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND),
            )?;
            if fd < 0 {
                return Some(std::ptr::null_mut());
            }
            // SAFETY: a descriptor we just opened, and the caller's mode.
            let stream = unsafe { libc::fdopen(fd, mode) };
            if stream.is_null() {
                let e = crate::guard::errno_now();
                kernel_sys!(libc::SYS_close, fd);
                crate::guard::finish(Err(Errno::from_raw(e)), saved);
            }
            stream
        }
    };
    Some(stream)
}

/// The view of `path` if it names one, else the C library's function `libc_fn` gives (fopen
/// or fopen64, which share a signature) with the caller's arguments.
fn fopen_or(path: *const c_char, mode: *const c_char, libc_fn: fn() -> usize) -> *mut FILE {
    try_fopen(path, mode).unwrap_or_else(|| match libc_fn() {
        0 => std::ptr::null_mut(),
        // SAFETY: the C library's fopen or fopen64 with the caller's arguments.
        p => unsafe { std::mem::transmute::<usize, FopenFn>(p)(path, mode) },
    })
}

/// fopen(3).
#[no_mangle]
pub extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_or(path, mode, || next().fopen)
}

/// fopen64(3).
#[no_mangle]
pub extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_or(path, mode, || next().fopen64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fopen_modes_read_as_glibc_reads_them() {
        assert_eq!(fopen_flags(b"r"), Some(libc::O_RDONLY));
        assert_eq!(fopen_flags(b"re"), Some(libc::O_RDONLY | libc::O_CLOEXEC));
        assert_eq!(
            fopen_flags(b"w"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
        );
        assert_eq!(fopen_flags(b"r+"), Some(libc::O_RDWR));
        assert_eq!(fopen_flags(b"q"), None);
    }
}
