//! Writes to the IPC sysctls of `/proc/sys/kernel` ([`crate::procview`] opens them).
//!
//! Linux applies each `write(2)` to such a file at once: at file position 0 the text is parsed
//! and stored (or the call fails, EINVAL and friends, and the position stays); at any other
//! position the write is ignored and reported done (`sysctl_writes_strict`). Who may open the
//! file for writing is checked at open (EACCES, [`uipc_proto::ProcRequest::MayWrite`]).
//!
//! - open(2) for writing gives a memfd (empty for O_WRONLY; for O_RDWR, holding the value)
//!   whose identity (st_dev, st_ino) goes into a small table ([`SLOTS`], lock-free, oldest
//!   entry replaced when full). The library's `write` export looks a descriptor up there
//!   (only once a process has opened one, [`LIVE`]; before that `write` costs one atomic
//!   load) and sends the text to the daemon at position 0, moving the memfd's offset as
//!   Linux moves the file's; its `pwrite` and `pwrite64` exports do the same at the offset
//!   given, leaving the position. Writes the library does not see (the C library's stdio writes
//!   internally, as bash's `echo` does) land in an O_WRONLY memfd: its content is applied when
//!   a descriptor of it is closed (close, dup2/dup3 over it, fclose, close_range, closefrom)
//!   or the process exits (an `atexit` handler flushes the streams and applies every open
//!   registered memfd), and the memfd emptied. Errors of such a late write are lost (Linux
//!   reports them to the write); content written by a process that ends without `exit`
//!   (`_exit`, a signal) waits for the next close or exit of another holder.
//! - The table is process memory: execve hands it to the next image as
//!   `UIPC_PROC_WRITES=code.dev.ino,...` ([`carried_var`], built without allocating; see
//!   `exec_env.rs`), which the new image's constructor takes into its table and removes from
//!   `environ` ([`take_inherited`]), so a descriptor kept across execve stays a sysctl.
//! - fopen(3) for writing gives a `fopencookie` stream whose write function sends each
//!   flushed buffer, so fprintf/fclose see the daemon's errno.
//!
//! The slow paths allocate (a daemon call): a signal handler writing to such a descriptor is
//! not async-signal-safe, unlike write(2).

use crate::guard::set_errno;
use crate::kernel::kernel_sys;
use crate::proctext::{fetch, kernel_mode, memfd_with};
use libc::{c_char, c_int, c_void, FILE};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use uipc::ipc::Sysctl;
use uipc::Errno;
use uipc_proto::procfs::code_of;
use uipc_proto::{ProcFile, ProcRequest, Request, Response};

/// One registered memfd: its sysctl as `1 + ` its wire code (0: empty slot), `FALLBACK`
/// if its content is applied at close.
struct Slot {
    code: AtomicU8,
    dev: AtomicU64,
    ino: AtomicU64,
}

const FALLBACK: u8 = 0x80;
const NSLOTS: usize = 16;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    code: AtomicU8::new(0),
    dev: AtomicU64::new(0),
    ino: AtomicU64::new(0),
};
static SLOTS: [Slot; NSLOTS] = [EMPTY; NSLOTS];
/// Registrations made by this process (and inherited from its parent or previous image): 0
/// means none.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn identity(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: zeroed stat is valid output space; fstat on any number reports failure.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above, a raw system call.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0).then_some((st.st_dev, st.st_ino))
}

/// The sysctl written through `fd`, and whether its content is applied at close.
fn lookup(fd: c_int) -> Option<(Sysctl, bool)> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let (dev, ino) = identity(fd)?;
    SLOTS.iter().find_map(|s| {
        let code = s.code.load(Ordering::Acquire);
        (code != 0 && s.dev.load(Ordering::Relaxed) == dev && s.ino.load(Ordering::Relaxed) == ino)
            .then(|| {
                let index = usize::from((code & !FALLBACK) - 1);
                Sysctl::ALL.get(index).map(|&s| (s, code & FALLBACK != 0))
            })
            .flatten()
    })
}

fn register(fd: c_int, s: Sysctl, fallback: bool) -> Result<(), Errno> {
    let (dev, ino) = identity(fd).ok_or(Errno::EBADF)?;
    let code = (code_of(s) + 1) | if fallback { FALLBACK } else { 0 };
    register_identity(code, dev, ino);
    Ok(())
}

/// Enters the memfd (`dev`, `ino`) under slot code `code` (see [`Slot`]).
fn register_identity(code: u8, dev: u64, ino: u64) {
    let slot = &SLOTS[LIVE.fetch_add(1, Ordering::AcqRel) % NSLOTS];
    slot.code.store(0, Ordering::Release);
    slot.dev.store(dev, Ordering::Relaxed);
    slot.ino.store(ino, Ordering::Relaxed);
    slot.code.store(code, Ordering::Release);
}

/// Whether this process has registered (or inherited) a sysctl memfd.
pub fn live() -> bool {
    LIVE.load(Ordering::Acquire) != 0
}

/// The variable that carries the table over execve.
const VAR: &std::ffi::CStr = c"UIPC_PROC_WRITES";

/// Writes `UIPC_PROC_WRITES=code.dev.ino,...` (the non-empty slots, in decimal) into `out`,
/// without allocating (exec runs in vforked children); its length, 0 if there is none or it
/// does not fit.
pub fn carried_var(out: &mut [u8]) -> usize {
    if !live() {
        return 0;
    }
    let mut at = 0;
    let mut put = |b: &[u8]| -> bool {
        let Some(to) = out.get_mut(at..at + b.len()) else {
            return false;
        };
        to.copy_from_slice(b);
        at += b.len();
        true
    };
    let mut fits = put(VAR.to_bytes()) && put(b"=");
    let mut first = true;
    for slot in &SLOTS {
        let code = slot.code.load(Ordering::Acquire);
        if code == 0 {
            continue;
        }
        let (dev, ino) = (
            slot.dev.load(Ordering::Relaxed),
            slot.ino.load(Ordering::Relaxed),
        );
        let decimal = crate::exec_env::decimal;
        fits = fits
            && (first || put(b","))
            && put(decimal(u64::from(code), &mut [0; 20]))
            && put(b".")
            && put(decimal(dev, &mut [0; 20]))
            && put(b".")
            && put(decimal(ino, &mut [0; 20]));
        first = false;
    }
    if fits && !first {
        at
    } else {
        0
    }
}

/// `code.dev.ino` as a valid slot code and an identity.
fn parse_entry(text: &str) -> Option<(u8, u64, u64)> {
    let mut parts = text.split('.');
    let code: u8 = parts.next()?.parse().ok()?;
    let dev = parts.next()?.parse().ok()?;
    let ino = parts.next()?.parse().ok()?;
    let index = usize::from((code & !FALLBACK).checked_sub(1)?);
    (parts.next().is_none() && index < Sysctl::ALL.len()).then_some((code, dev, ino))
}

/// Takes the table a previous image handed over ([`carried_var`]) and removes the variable
/// from `environ`; called by the library's constructor, before the program runs.
fn take_inherited() {
    // SAFETY: getenv with a NUL-terminated name, at load time (no other thread yet).
    let value = unsafe { libc::getenv(VAR.as_ptr()) };
    if value.is_null() {
        return;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string in the environment.
    let value = unsafe { std::ffi::CStr::from_ptr(value) };
    if let Ok(text) = value.to_str() {
        for (code, dev, ino) in text.split(',').filter_map(parse_entry).take(NSLOTS) {
            register_identity(code, dev, ino);
        }
    }
    // SAFETY: unsetenv with a NUL-terminated name, at load time.
    unsafe { libc::unsetenv(VAR.as_ptr()) };
}

/// At exit: the streams are flushed and every open registered memfd's content applied.
extern "C" fn at_exit() {
    if !live() {
        return;
    }
    // SAFETY: flushes every stream, as exit does after its handlers.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    crate::open_fds::each_open_fd(0, u32::MAX, before_close);
}

fn may_write(s: Sysctl) -> Result<(), Errno> {
    match crate::conn::call(&Request::Proc(ProcRequest::MayWrite(s)))?.0 {
        Response::Ret(_) => Ok(()),
        Response::Error(e) => Err(Errno::from_raw(e)),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}

/// One write of `text` at file position 0: the bytes taken, or the errno.
fn apply(s: Sysctl, text: Vec<u8>) -> Result<i64, Errno> {
    match crate::conn::call(&Request::Proc(ProcRequest::Write(s, text)))?.0 {
        Response::Ret(n) => Ok(n),
        Response::Error(e) => Err(Errno::from_raw(e)),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}

/// open(2) of sysctl `s` with access mode `access` (O_WRONLY or O_RDWR).
pub fn open(s: Sysctl, access: c_int, cloexec: bool) -> Result<c_int, Errno> {
    may_write(s)?;
    let text = if access == libc::O_RDWR {
        fetch(ProcFile::Sysctl(s))?
    } else {
        Vec::new()
    };
    let fd = memfd_with(&text, cloexec, true, kernel_mode(ProcFile::Sysctl(s)))?;
    if let Err(e) = register(fd, s, access == libc::O_WRONLY) {
        kernel_sys!(libc::SYS_close, fd);
        return Err(e);
    }
    Ok(fd)
}

/// write(2) on a registered descriptor: Linux's position rule (see the module doc).
fn write_to(fd: c_int, s: Sysctl, buf: usize, count: usize) -> Result<i64, Errno> {
    let pos = kernel_sys!(libc::SYS_lseek, fd, 0, libc::SEEK_CUR);
    if pos != 0 {
        kernel_sys!(
            libc::SYS_lseek,
            fd,
            pos.saturating_add(count as i64),
            libc::SEEK_SET
        );
        return Ok(count as i64);
    }
    let text = crate::user::copy_in(buf, count)?;
    let n = apply(s, text)?;
    kernel_sys!(libc::SYS_lseek, fd, n, libc::SEEK_SET);
    Ok(n)
}

type WriteFn = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;

fn next_write() -> usize {
    static NEXT: OnceLock<usize> = OnceLock::new();
    *NEXT.get_or_init(|| crate::kernel::next_symbol(c"write"))
}

/// Looks up the C library's write, takes the inherited table and registers the exit handler;
/// called when the library is loaded.
pub fn prepare() {
    let _ = next_write();
    let _ = next_pwrite();
    take_inherited();
    // SAFETY: registers a handler that takes no arguments and does not unwind.
    unsafe { libc::atexit(at_exit) };
}

/// write(2).
#[no_mangle]
pub extern "C" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    if let Some((s, _)) = lookup(fd) {
        let saved = crate::guard::errno_now();
        let r = crate::guard::guarded(|| write_to(fd, s, buf as usize, count));
        return crate::guard::finish(r, saved) as isize;
    }
    match next_write() {
        0 => kernel_sys!(libc::SYS_write, fd, buf, count) as isize,
        // SAFETY: the C library's write with the caller's arguments.
        p => unsafe { std::mem::transmute::<usize, WriteFn>(p)(fd, buf, count) },
    }
}

crate::kernel::next_symbols! {
    /// The C library's pwrite functions, looked up once (the library's constructor).
    struct NextPwrite, fn next_pwrite {
        pwrite, pwrite64,
    }
}

type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, usize, i64) -> isize;

/// pwrite(2) on a registered descriptor: as a write at position `offset` (applied at 0,
/// ignored and reported done elsewhere), leaving the position where it was.
fn pwrite_to(s: Sysctl, buf: usize, count: usize, offset: i64) -> Result<i64, Errno> {
    if offset < 0 {
        return Err(Errno::EINVAL);
    }
    if offset != 0 {
        return Ok(count as i64);
    }
    apply(s, crate::user::copy_in(buf, count)?)
}

/// pwrite and pwrite64: a registered descriptor's sysctl, else the C library's `next`.
fn pwrite_or(next: usize, fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    if let Some((s, _)) = lookup(fd) {
        let saved = crate::guard::errno_now();
        let r = crate::guard::guarded(|| pwrite_to(s, buf as usize, count, offset));
        return crate::guard::finish(r, saved) as isize;
    }
    match next {
        0 => kernel_sys!(libc::SYS_pwrite64, fd, buf, count, offset) as isize,
        // SAFETY: the C library's pwrite with the caller's arguments.
        p => unsafe { std::mem::transmute::<usize, PwriteFn>(p)(fd, buf, count, offset) },
    }
}

/// pwrite(2).
#[no_mangle]
pub extern "C" fn pwrite(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    pwrite_or(next_pwrite().pwrite, fd, buf, count, offset)
}

/// pwrite64(2) (the same call on 64-bit ABIs).
#[no_mangle]
pub extern "C" fn pwrite64(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    pwrite_or(next_pwrite().pwrite64, fd, buf, count, offset)
}

/// Before `fd` is closed: if it is an O_WRONLY sysctl memfd holding text the library did not
/// see written, applies that text and empties the memfd. Keeps errno.
pub fn before_close(fd: c_int) {
    let Some((s, true)) = lookup(fd) else { return };
    let saved = crate::guard::errno_now();
    let _ = crate::guard::guarded(|| {
        let size = kernel_sys!(libc::SYS_lseek, fd, 0, libc::SEEK_END);
        if size > 0 {
            let mut text = vec![0u8; size as usize];
            let n = kernel_sys!(libc::SYS_pread64, fd, text.as_mut_ptr(), text.len(), 0);
            text.truncate(n.max(0) as usize);
            kernel_sys!(libc::SYS_ftruncate, fd, 0);
            let _ = apply(s, text);
        }
        kernel_sys!(libc::SYS_lseek, fd, 0, libc::SEEK_SET);
        Ok(())
    });
    set_errno(saved);
}

/// fclose of a stream over a registered memfd: its buffer must reach the memfd first.
pub fn before_fclose(stream: *mut FILE) {
    if LIVE.load(Ordering::Acquire) == 0 || stream.is_null() {
        return;
    }
    // SAFETY: the caller passes an open stream (as fclose requires).
    let fd = unsafe { libc::fileno(stream) };
    if fd >= 0 && lookup(fd).is_some() {
        // SAFETY: as above.
        unsafe { libc::fflush(stream) };
        before_close(fd);
    }
}

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// A stream's state: the sysctl, the value read at open (for `r+`), and the position.
struct Cookie {
    sysctl: Sysctl,
    text: Vec<u8>,
    pos: usize,
}

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, size: usize) -> isize {
    // SAFETY: `c` is the Box made in `fopen`, alive until close; glibc passes a live buffer of
    // `size` bytes.
    let c = unsafe { &mut *(c as *mut Cookie) };
    let rest = c.text.get(c.pos..).unwrap_or(&[]);
    let n = rest.len().min(size);
    // SAFETY: as above; `n` fits both.
    unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), buf as *mut u8, n) };
    c.pos += n;
    n as isize
}

unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, size: usize) -> isize {
    // SAFETY: as in `cookie_read`; glibc passes `size` readable bytes.
    let c = unsafe { &mut *(c as *mut Cookie) };
    // SAFETY: as above.
    let text = unsafe { std::slice::from_raw_parts(buf as *const u8, size) }.to_vec();
    if c.pos != 0 {
        c.pos += size;
        return size as isize;
    }
    let sysctl = c.sysctl;
    match crate::guard::guarded(|| apply(sysctl, text)) {
        Ok(n) => {
            c.pos += n as usize;
            n as isize
        }
        Err(e) => {
            set_errno(e.raw());
            -1
        }
    }
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    // SAFETY: the Box made in `fopen`, closed once by glibc.
    drop(unsafe { Box::from_raw(c as *mut Cookie) });
    0
}

/// fopen(3) of sysctl `s` for writing (`flags` as open(2)'s).
pub fn fopen(s: Sysctl, flags: c_int) -> Result<*mut FILE, Errno> {
    may_write(s)?;
    let text = if flags & libc::O_ACCMODE == libc::O_RDWR {
        fetch(ProcFile::Sysctl(s))?
    } else {
        Vec::new()
    };
    let mode: &std::ffi::CStr = if flags & libc::O_ACCMODE == libc::O_RDWR {
        c"r+"
    } else {
        c"w"
    };
    let cookie = Box::into_raw(Box::new(Cookie {
        sysctl: s,
        text,
        pos: 0,
    }));
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: None,
        close: Some(cookie_close),
    };
    // SAFETY: a live cookie and functions that use it as `Cookie`; the mode is a C string.
    let stream = unsafe { fopencookie(cookie as *mut c_void, mode.as_ptr(), io) };
    if stream.is_null() {
        // SAFETY: not handed to glibc.
        drop(unsafe { Box::from_raw(cookie) });
        return Err(Errno::ENOMEM);
    }
    Ok(stream)
}
