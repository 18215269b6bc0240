//! File locks: fcntl/fcntl64's lock commands, flock, lockf/lockf64, and the closes that drop
//! locks (close, dup2, dup3 over an open descriptor, fclose, close_range, closefrom).
//!
//! Routing is on only when `$UIPC_LOCKS` is `1` (set by `uipc run --locks`) and a daemon is
//! named (read once per program image); otherwise every export calls the next definition
//! (libc's) with its arguments unchanged.
//!
//! fcntl is variadic in C. On x86-64 (and aarch64) its third argument, an int or a pointer,
//! travels in the register of a third fixed integer argument, so the export takes a `usize`;
//! commands other than the six lock commands go to libc's `fcntl` through a variadic call
//! with that same value, so an int argument reaches it as the caller passed it.
//!
//! A lock command sends the descriptor itself with the request (SCM_RIGHTS): the daemon
//! reads the file, access mode, offset and size from its copy and recognises the open file
//! description. A descriptor that is not open gets EBADF here (fcntl looks the descriptor up
//! before anything else); an unreadable `struct flock` is sent as absent (EFAULT from the
//! daemon, after its descriptor checks); GETLK's answer is written back over the caller's
//! structure. F_SETLKW, F_OFD_SETLKW and a blocking flock follow SA_RESTART: a handler with
//! it lets the wait go on, one without it ends the call with EINTR ([`conn::call_passing`]).
//! F_SETLKW and F_OFD_SETLKW are cancellation points, as in glibc's fcntl; flock is not.
//!
//! lockf is glibc's, over these fcntl commands: F_LOCK / F_TLOCK set a write lock from the
//! current offset over `len` bytes (waiting or not), F_ULOCK unlocks, F_TEST asks with a read
//! lock and fails with EACCES if another process holds a conflicting lock.
//!
//! Closes: on Linux closing any descriptor of a file drops the process's POSIX locks on it,
//! and the last descriptor of a description takes its OFD and flock locks along. Before
//! libc closes a descriptor of a regular file or directory (close, fclose, dup2 or dup3 onto
//! an open descriptor, close_range and closefrom, whose open descriptors are read from
//! `/proc/self/fd`), the library sends it to the daemon with a `Close`; the daemon decides
//! what goes ([`uipc_proto::LockRequest::Close`]). Only files someone asked to lock need it:
//! the daemon's lock hints (a read-only shared page set, mapped on the first close; see the
//! server's `hints` module) say which files may have locks, and a close of any other file
//! costs an fstat and one byte read. The library's own closes (and anything a close does
//! inside it) pass straight through.

use crate::conn::{call_passing, check, ret_value};
use crate::user::{copy_in, copy_out};
use crate::{finish, guarded};
use libc::{c_int, FILE};
use std::cell::Cell;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use uipc::locks::*;
use uipc::Errno;
use uipc_proto::{hint_slot, LockRequest, LockResponse, Request, Response, HINT_SLOTS};

/// `sizeof(struct flock)` on x86-64: l_type and l_whence (2 bytes each), 4 bytes of padding,
/// l_start and l_len (8 each), l_pid (4), 4 bytes of padding.
const FLOCK_SIZE: usize = 32;

/// lockf's commands (`<unistd.h>`).
const F_ULOCK: c_int = 0;
const F_LOCK: c_int = 1;
const F_TLOCK: c_int = 2;
const F_TEST: c_int = 3;

/// Whether lock calls go to the daemon.
pub fn routing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("UIPC_LOCKS").is_some_and(|v| v == "1") && crate::conn::enabled()
    })
}

fn next(name: &std::ffi::CStr) -> usize {
    // SAFETY: looks up the next definition of a NUL-terminated symbol name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// libc's definitions of the exports, looked up once: from the library's constructor
/// ([`prepare`]), so that no lookup (which locks and allocates) happens later in a forked
/// child or a signal handler.
struct Libc {
    fcntl: usize,
    fcntl64: usize,
    flock: usize,
    lockf: usize,
    lockf64: usize,
    close: usize,
    dup2: usize,
    dup3: usize,
    fclose: usize,
    close_range: usize,
    closefrom: usize,
}

fn libc_fns() -> &'static Libc {
    static LIBC: OnceLock<Libc> = OnceLock::new();
    LIBC.get_or_init(|| Libc {
        fcntl: next(c"fcntl"),
        fcntl64: next(c"fcntl64"),
        flock: next(c"flock"),
        lockf: next(c"lockf"),
        lockf64: next(c"lockf64"),
        close: next(c"close"),
        dup2: next(c"dup2"),
        dup3: next(c"dup3"),
        fclose: next(c"fclose"),
        close_range: next(c"close_range"),
        closefrom: next(c"closefrom"),
    })
}

/// Reads `$UIPC_LOCKS` and looks up libc's definitions; called when the library is loaded.
pub fn prepare() {
    let _ = libc_fns();
    let _ = routing();
}

macro_rules! real {
    ($field:ident, $ty:ty) => {{
        let p = libc_fns().$field;
        // SAFETY: a non-null result is libc's definition of the symbol, of this type.
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
    }};
}

type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

thread_local! {
    /// Set while a close notification is being made: closes inside it go straight to libc.
    static IN_CLOSE: Cell<bool> = const { Cell::new(false) };
}

fn set_errno(e: c_int) {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Whether `fd` is open (a raw system call, not libc's possibly wrapped fcntl).
fn is_open(fd: c_int) -> bool {
    // SAFETY: F_GETFD on any number is safe; failure is reported.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD) >= 0 }
}

/// The file (`st_dev`, `st_ino`) behind `fd` if closing it may drop locks the daemon holds:
/// regular files and directories.
fn lockable(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: zeroed stat is valid output space; fstat on any number reports failure.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above, a raw system call.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0 && matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR))
        .then_some((st.st_dev, st.st_ino))
}

/// The daemon's lock hints, mapped read-only: 0 not asked for yet, 1 unavailable (every close
/// is reported), else the mapping's address. Inherited across fork with the mapping.
static HINTS: AtomicUsize = AtomicUsize::new(0);

fn map_hints() -> Option<usize> {
    let (resp, fd) = call_passing(&Request::Lock(LockRequest::Hints), None, false).ok()?;
    let fd = fd?;
    if resp != Response::Ret(HINT_SLOTS as i64) {
        return None;
    }
    // SAFETY: maps the daemon's read-only memfd; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            HINT_SLOTS,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

/// Whether the daemon may hold locks on the file (dev, ino): its hint byte is set, or the
/// hints are unavailable.
fn may_hold_locks((dev, ino): (u64, u64)) -> bool {
    let mut base = HINTS.load(Ordering::Acquire);
    if base == 0 {
        let got = guarded(|| Ok(map_hints())).ok().flatten().unwrap_or(1);
        base = match HINTS.compare_exchange(0, got, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => got,
            Err(existing) => {
                if got != 1 {
                    // SAFETY: our own mapping, never published.
                    unsafe { libc::munmap(got as *mut libc::c_void, HINT_SLOTS) };
                }
                existing
            }
        };
    }
    if base == 1 {
        return true;
    }
    // SAFETY: the slot is inside the live read-only mapping; the daemon writes it atomically.
    let byte = unsafe { &*(base as *const AtomicU8).add(hint_slot(dev, ino)) };
    byte.load(Ordering::Acquire) != 0
}

fn is_lock_cmd(cmd: c_int) -> bool {
    matches!(
        cmd,
        F_GETLK | F_SETLK | F_SETLKW | F_OFD_GETLK | F_OFD_SETLK | F_OFD_SETLKW
    )
}

fn flock_from(b: &[u8]) -> Flock {
    let i16_at = |o: usize| i16::from_ne_bytes([b[o], b[o + 1]]);
    let i64_at = |o: usize| i64::from_ne_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    Flock {
        l_type: i16_at(0),
        l_whence: i16_at(2),
        l_start: i64_at(8),
        l_len: i64_at(16),
        l_pid: i32::from_ne_bytes(b[24..28].try_into().unwrap_or([0; 4])),
    }
}

fn flock_into(b: &mut [u8], f: &Flock) {
    b[0..2].copy_from_slice(&f.l_type.to_ne_bytes());
    b[2..4].copy_from_slice(&f.l_whence.to_ne_bytes());
    b[8..16].copy_from_slice(&f.l_start.to_ne_bytes());
    b[16..24].copy_from_slice(&f.l_len.to_ne_bytes());
    b[24..28].copy_from_slice(&f.l_pid.to_ne_bytes());
}

/// Sends a lock request through `fd` (if open) and returns the daemon's response. Blocking
/// requests wait with the caller's cancelability when `cancel_point`.
fn lock_call(fd: c_int, req: LockRequest, cancel_point: bool) -> Result<Response, Errno> {
    let req = Request::Lock(req);
    let pass = is_open(fd).then_some(fd);
    let restartable = req.may_block();
    if cancel_point && restartable {
        // The wait runs outside `guarded`, so pthread_cancel acts in it (see crate::guard_blocking).
        return call_passing(&req, pass, true).map(|(r, _)| r);
    }
    guarded(|| call_passing(&req, pass, restartable).map(|(r, _)| r))
}

/// fcntl's lock commands through the daemon, on an already read `struct flock`.
fn fcntl_lock(fd: c_int, cmd: c_int, fl: Option<Flock>) -> Result<Option<Flock>, Errno> {
    if !is_open(fd) {
        return Err(Errno::EBADF);
    }
    let resp = lock_call(fd, LockRequest::Fcntl { cmd, flock: fl }, true)?;
    match check(resp)? {
        Response::Ret(_) => Ok(None),
        Response::Lock(LockResponse::Flock(f)) => Ok(Some(f)),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}

fn fcntl_routed(fd: c_int, cmd: c_int, arg: usize) -> i64 {
    let saved = crate::errno_now();
    let user = guarded(|| Ok(copy_in(arg, FLOCK_SIZE).ok()));
    let result = user.and_then(|bytes| {
        let fl = bytes.as_deref().map(flock_from);
        match fcntl_lock(fd, cmd, fl)? {
            Some(answer) => {
                let mut b = bytes.unwrap_or_else(|| vec![0; FLOCK_SIZE]);
                flock_into(&mut b, &answer);
                guarded(|| copy_out(arg, &b))?;
                Ok(0)
            }
            None => Ok(0),
        }
    });
    finish(result, saved)
}

fn fcntl_any(fd: c_int, cmd: c_int, arg: usize, real: Option<FcntlFn>) -> c_int {
    if routing() && is_lock_cmd(cmd) {
        return fcntl_routed(fd, cmd, arg) as c_int;
    }
    match real {
        // SAFETY: libc's fcntl with the caller's three arguments, the third as passed.
        Some(f) => unsafe { f(fd, cmd, arg) },
        // SAFETY: the raw system call with the same arguments.
        None => unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int },
    }
}

/// fcntl(2); see the module doc for the third argument.
#[no_mangle]
pub extern "C-unwind" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_any(fd, cmd, arg, real!(fcntl, FcntlFn))
}

/// fcntl64 (glibc's large-file name of fcntl; the same on 64-bit systems).
#[no_mangle]
pub extern "C-unwind" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_any(fd, cmd, arg, real!(fcntl64, FcntlFn))
}

/// flock(2).
#[no_mangle]
pub extern "C-unwind" fn flock(fd: c_int, operation: c_int) -> c_int {
    if !routing() {
        return match real!(flock, unsafe extern "C" fn(c_int, c_int) -> c_int) {
            // SAFETY: libc's flock with the caller's arguments.
            Some(f) => unsafe { f(fd, operation) },
            // SAFETY: the raw system call.
            None => unsafe { libc::syscall(libc::SYS_flock, fd, operation) as c_int },
        };
    }
    let saved = crate::errno_now();
    let result = lock_call(fd, LockRequest::Flock { cmd: operation }, false).and_then(ret_value);
    finish(result.map(|_| 0), saved) as c_int
}

fn lockf_routed(fd: c_int, cmd: c_int, len: i64) -> Result<i64, Errno> {
    let mut fl = Flock {
        l_type: F_WRLCK,
        l_whence: SEEK_CUR,
        l_start: 0,
        l_len: len,
        l_pid: 0,
    };
    let setlk = match cmd {
        F_TEST => {
            fl.l_type = F_RDLCK;
            let got = fcntl_lock(fd, F_GETLK, Some(fl))?.unwrap_or(fl);
            // SAFETY: plain getter (raw: other preloads may wrap getpid).
            let me = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
            return if got.l_type == F_UNLCK || got.l_pid == me {
                Ok(0)
            } else {
                Err(Errno::EACCES)
            };
        }
        F_ULOCK => {
            fl.l_type = F_UNLCK;
            F_SETLK
        }
        F_LOCK => F_SETLKW,
        F_TLOCK => F_SETLK,
        _ => return Err(Errno::EINVAL),
    };
    fcntl_lock(fd, setlk, Some(fl)).map(|_| 0)
}

fn lockf_any(fd: c_int, cmd: c_int, len: i64, name: &std::ffi::CStr) -> c_int {
    if !routing() {
        let p = if name == c"lockf" {
            libc_fns().lockf
        } else {
            libc_fns().lockf64
        };
        if p == 0 {
            set_errno(libc::ENOSYS);
            return -1;
        }
        // SAFETY: libc's lockf/lockf64, `int (int, int, off_t)` on 64-bit systems.
        let f = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int, i64) -> c_int>(p)
        };
        // SAFETY: the caller's arguments.
        return unsafe { f(fd, cmd, len) };
    }
    let saved = crate::errno_now();
    finish(lockf_routed(fd, cmd, len), saved) as c_int
}

/// lockf(3).
#[no_mangle]
pub extern "C-unwind" fn lockf(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int {
    lockf_any(fd, cmd, len, c"lockf")
}

/// lockf64 (the same as lockf on 64-bit systems).
#[no_mangle]
pub extern "C-unwind" fn lockf64(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int {
    lockf_any(fd, cmd, len, c"lockf64")
}

/// Tells the daemon that `fd` is about to be closed (see the module doc). Keeps errno. Skipped
/// inside another notification and while the thread's locals are being torn down.
fn before_close(fd: c_int) {
    if !routing() {
        return;
    }
    let Some(file) = lockable(fd) else { return };
    let entered = IN_CLOSE.try_with(|c| !c.replace(true)).unwrap_or(false);
    if !entered {
        return;
    }
    let saved = crate::errno_now();
    if may_hold_locks(file) {
        let _ = lock_call(fd, LockRequest::Close { fd }, false);
    }
    set_errno(saved);
    let _ = IN_CLOSE.try_with(|c| c.set(false));
}

/// close(2).
#[no_mangle]
pub extern "C-unwind" fn close(fd: c_int) -> c_int {
    before_close(fd);
    match real!(close, unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: libc's close.
        Some(f) => unsafe { f(fd) },
        // SAFETY: the raw system call.
        None => unsafe { libc::syscall(libc::SYS_close, fd) as c_int },
    }
}

/// dup2(2): `newfd`, if open, is closed first (unless the call fails or is a no-op).
#[no_mangle]
pub extern "C-unwind" fn dup2(oldfd: c_int, newfd: c_int) -> c_int {
    if oldfd != newfd && is_open(oldfd) && is_open(newfd) {
        before_close(newfd);
    }
    match real!(dup2, unsafe extern "C" fn(c_int, c_int) -> c_int) {
        // SAFETY: libc's dup2.
        Some(f) => unsafe { f(oldfd, newfd) },
        // SAFETY: the raw system call.
        None => unsafe { libc::syscall(libc::SYS_dup2, oldfd, newfd) as c_int },
    }
}

/// dup3(2): as dup2, for valid flags.
#[no_mangle]
pub extern "C-unwind" fn dup3(oldfd: c_int, newfd: c_int, flags: c_int) -> c_int {
    if oldfd != newfd && flags & !libc::O_CLOEXEC == 0 && is_open(oldfd) && is_open(newfd) {
        before_close(newfd);
    }
    match real!(dup3, unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) {
        // SAFETY: libc's dup3.
        Some(f) => unsafe { f(oldfd, newfd, flags) },
        // SAFETY: the raw system call.
        None => unsafe { libc::syscall(libc::SYS_dup3, oldfd, newfd, flags) as c_int },
    }
}

/// fclose(3): libc closes the stream's descriptor internally, out of the wrapper's reach.
#[no_mangle]
pub extern "C-unwind" fn fclose(stream: *mut FILE) -> c_int {
    if routing() && !stream.is_null() {
        // SAFETY: the caller passes an open stream (as libc's fclose requires).
        let fd = unsafe { libc::fileno(stream) };
        if fd >= 0 {
            before_close(fd);
        }
    }
    let Some(f) = real!(fclose, unsafe extern "C" fn(*mut FILE) -> c_int) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: libc's fclose with the caller's stream.
    unsafe { f(stream) }
}

/// Tells the daemon about every open descriptor in `first..=last` (see [`before_close`]).
/// Runs in forked (even vforked) children before exec, as programs close descriptors there:
/// the listing is read with raw system calls into a stack buffer, and only descriptors of
/// files the hints mark go further.
fn before_close_range(first: u32, last: u32) {
    if !routing() {
        return;
    }
    // SAFETY: opens a NUL-terminated path; the result is checked.
    let dir = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as c_int;
    if dir < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads directory entries into a live buffer of the stated size.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 || at + reclen > n as usize {
                break;
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let fd = name.iter().try_fold(0u32, |v, &b| {
                b.is_ascii_digit()
                    .then(|| v.checked_mul(10)?.checked_add(u32::from(b - b'0')))
                    .flatten()
            });
            if let Some(fd) = fd.filter(|fd| !name.is_empty() && (first..=last).contains(fd)) {
                if fd as c_int != dir {
                    before_close(fd as c_int);
                }
            }
            at += reclen;
        }
    }
    // SAFETY: closes our own directory descriptor (raw: not through the close wrapper).
    unsafe { libc::syscall(libc::SYS_close, dir) };
}

/// `CLOSE_RANGE_CLOEXEC`: mark the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 4;

/// close_range(2).
#[no_mangle]
pub extern "C-unwind" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    if (flags as libc::c_uint) & CLOSE_RANGE_CLOEXEC == 0 && first <= last {
        let _ = guarded(|| {
            before_close_range(first, last);
            Ok(())
        });
    }
    match real!(
        close_range,
        unsafe extern "C" fn(libc::c_uint, libc::c_uint, c_int) -> c_int
    ) {
        // SAFETY: libc's close_range.
        Some(f) => unsafe { f(first, last, flags) },
        // SAFETY: the raw system call.
        None => unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int },
    }
}

/// closefrom(3).
#[no_mangle]
pub extern "C-unwind" fn closefrom(lowfd: c_int) {
    if lowfd >= 0 {
        let _ = guarded(|| {
            before_close_range(lowfd as u32, u32::MAX);
            Ok(())
        });
    }
    match real!(closefrom, unsafe extern "C" fn(c_int)) {
        // SAFETY: libc's closefrom.
        Some(f) => unsafe { f(lowfd) },
        // SAFETY: the raw system call (what glibc's closefrom does first).
        None => unsafe {
            libc::syscall(libc::SYS_close_range, lowfd.max(0) as u32, u32::MAX, 0);
        },
    }
}
