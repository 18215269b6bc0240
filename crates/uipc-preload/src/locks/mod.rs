//! File locks: fcntl/fcntl64's lock commands, flock, lockf/lockf64 here; the closes that drop
//! locks (close, dup2, dup3 over an open descriptor, fclose, close_range, closefrom) in
//! [`close`].
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
//! description. A descriptor that is not open gets EBADF here (fcntl and flock look the
//! descriptor up before anything else; the kernel refuses to pass it, so the daemon hears
//! nothing); an unreadable `struct flock` is sent as absent (EFAULT from the
//! daemon, after its descriptor checks); GETLK's answer is written back over the caller's
//! structure. F_SETLKW, F_OFD_SETLKW and a blocking flock follow SA_RESTART: a handler with
//! it lets the wait go on, one without it ends the call with EINTR ([`conn::call_passing`]).
//! F_SETLKW and F_OFD_SETLKW are cancellation points, as in glibc's fcntl; flock is not.
//!
//! lockf is glibc's, over these fcntl commands: F_LOCK / F_TLOCK set a write lock from the
//! current offset over `len` bytes (waiting or not), F_ULOCK unlocks, F_TEST asks with a read
//! lock and fails with EACCES if another process holds a conflicting lock.

use crate::conn::{call_passing_asking, check, ret_value, Asking};
use crate::guard::{finish, guarded, set_errno};
use crate::kernel::kernel_sys;
use crate::user::{copy_in_to, copy_out};
use libc::c_int;
use std::sync::OnceLock;
use uipc::locks::*;
use uipc::Errno;
use uipc_proto::client::Greeting;
use uipc_proto::{HelloArea, LockRequest, LockResponse, Request, Response};

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

crate::kernel::next_symbols! {
    /// libc's definitions of the exports, looked up once: from the library's constructor
    /// ([`prepare`]), so that no lookup (which locks and allocates) happens later in a forked
    /// child or a signal handler.
    struct Libc, fn libc_fns {
        fcntl, fcntl64, flock, lockf, lockf64, close, dup2, dup3, fclose, close_range, closefrom,
    }
}

/// Reads `$UIPC_LOCKS`, looks up libc's definitions and, when routing, maps the daemon's
/// lock hints; called when the library is loaded, so that no close or lock call (which may
/// come from a signal handler) does either.
pub fn prepare() {
    let _ = libc_fns();
    lease::prepare();
    flockfast::prepare();
    if routing() {
        close::map_hints_now();
    }
}

/// The lock area a session opened by `req` asks for in its Hello: the one its fast path
/// needs (flock: the flock leases; fcntl: the POSIX leases), if this process has none yet.
fn area_for(req: &Request) -> HelloArea {
    match req {
        Request::Lock(LockRequest::Flock { .. }) => flockfast::area_for_hello(),
        Request::Lock(LockRequest::Fcntl { .. }) => lease::area_for_hello(),
        _ => HelloArea::None,
    }
}

/// The reply to a Hello that asked for `area`: the area's grant.
fn greeted(area: HelloArea, greeting: Greeting) {
    match area {
        HelloArea::FlockSlots => flockfast::greeted(greeting),
        HelloArea::Leases => lease::greeted(greeting),
        HelloArea::None => {}
    }
}

macro_rules! real {
    ($field:ident, $ty:ty) => {{
        let p = libc_fns().$field;
        // SAFETY: a non-null result is libc's definition of the symbol, of this type.
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
    }};
}

mod area;
mod by_syscall;
mod close;
mod exec;
mod flockfast;
mod lease;
mod shared;

pub use by_syscall::{is_lock_number, syscall_routed};
pub use exec::{before_exec, exec_failed};

type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

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

/// Sends a lock request through `fd` and returns the daemon's response (EBADF, the daemon
/// not asked, if `fd` is not open: fcntl and flock look the descriptor up first). Blocking
/// requests wait with the caller's cancelability when `cancel_point`.
fn lock_call(fd: c_int, req: LockRequest, cancel_point: bool) -> Result<Response, Errno> {
    let req = Request::Lock(req);
    let pass = Some(fd);
    let restartable = req.may_block();
    // A call that opens the session asks for the lock area in its Hello.
    let asking = Asking {
        area: area_for(&req),
        greeted,
    };
    if cancel_point && restartable {
        // The wait runs outside `guarded`, so pthread_cancel acts in it (see crate::guard::guard_blocking).
        return call_passing_asking(asking, &req, pass, true).map(response_only);
    }
    guarded(|| call_passing_asking(asking, &req, pass, restartable).map(response_only))
}

/// The response; a descriptor that came with it (none should) is closed by the kernel, not
/// through the library's `close`, which would report it to the daemon from inside a call.
fn response_only((resp, fd): (Response, Option<std::os::fd::OwnedFd>)) -> Response {
    if let Some(fd) = fd {
        kernel_sys!(libc::SYS_close, std::os::fd::IntoRawFd::into_raw_fd(fd));
    }
    resp
}

/// fcntl's lock commands through the daemon, on an already read `struct flock`; a blocking
/// one is a cancellation point if `cancel_point`.
fn fcntl_lock(
    fd: c_int,
    cmd: c_int,
    fl: Option<Flock>,
    cancel_point: bool,
) -> Result<Option<Flock>, Errno> {
    loop {
        let resp = lock_call(fd, LockRequest::Fcntl { cmd, flock: fl }, cancel_point)?;
        return match check(resp) {
            Ok(Response::Ret(_)) => Ok(None),
            Ok(Response::Lock(LockResponse::Flock(f))) => Ok(Some(f)),
            Ok(_) => Err(Errno::from_raw(libc::EIO)),
            // A parked F_SETLKW whose file went into shared mode: again, on the slot (or, if
            // that cannot serve it, through the daemon, which then keeps it in its engine).
            Err(e) if e.raw() == uipc::locks::lease::shared::RETRY_LOCAL => {
                let mut local = fl.ok_or(e)?;
                match lease::fcntl(fd, cmd, &mut local) {
                    Some(r) => r.map(|()| None),
                    None => continue,
                }
            }
            Err(e) => Err(e),
        };
    }
}

/// A lock command of fcntl (glibc's, a cancellation point, or syscall(2)'s, not one): the
/// result, or -1 with errno set.
fn fcntl_routed(fd: c_int, cmd: c_int, arg: usize, cancel_point: bool) -> i64 {
    let saved = crate::guard::errno_now();
    // On the stack: fcntl may run in a signal handler (no malloc).
    let mut bytes = [0u8; FLOCK_SIZE];
    let readable = guarded(|| Ok(copy_in_to(arg, &mut bytes).is_ok()));
    let result = readable.and_then(|readable| {
        let mut fl = readable.then(|| flock_from(&bytes));
        if let Some(f) = fl.as_mut() {
            if let Some(r) = lease::fcntl(fd, cmd, f) {
                r?;
                if cmd == F_GETLK {
                    let mut b = bytes;
                    flock_into(&mut b, f);
                    guarded(|| copy_out(arg, &b))?;
                }
                return Ok(0);
            }
        }
        match fcntl_lock(fd, cmd, fl, cancel_point)? {
            Some(answer) => {
                let mut b = bytes;
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
        return fcntl_routed(fd, cmd, arg, true) as c_int;
    }
    match real {
        // SAFETY: libc's fcntl with the caller's three arguments, the third as passed.
        Some(f) => unsafe { f(fd, cmd, arg) },
        None => kernel_sys!(libc::SYS_fcntl, fd, cmd, arg) as c_int,
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
            None => kernel_sys!(libc::SYS_flock, fd, operation) as c_int,
        };
    }
    // Linux's order: LOCK_MAND is ignored before anything else is looked at, and the operation
    // is checked before the descriptor (so a bad one on a bad descriptor is EINVAL).
    if operation & LOCK_MAND != 0 {
        return 0;
    }
    if !flockfast::valid_cmd(operation) {
        set_errno(libc::EINVAL);
        return -1;
    }
    if let Some(r) = flockfast::flock(fd, operation) {
        return r;
    }
    let saved = crate::guard::errno_now();
    // A valid operation never has the bit the library adds.
    let mut cmd = operation;
    if flockfast::may_redo(operation) {
        cmd |= flockfast::FLOCK_MAY_REDO;
    }
    let mut redone = 0;
    let result = loop {
        let r = lock_call(fd, LockRequest::Flock { cmd }, false).and_then(ret_value);
        if r != Err(flockfast::REDO) {
            break r;
        }
        // A member of the file's slot now: the call is redone there.
        if let Some(r) = flockfast::flock(fd, operation) {
            return r;
        }
        redone += 1;
        if redone >= 3 {
            cmd &= !flockfast::FLOCK_MAY_REDO;
        }
    };
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
            let mut local = fl;
            let got = if let Some(r) = lease::fcntl(fd, F_GETLK, &mut local) {
                r?;
                local
            } else {
                fcntl_lock(fd, F_GETLK, Some(fl), true)?.unwrap_or(fl)
            };
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
    if let Some(r) = lease::fcntl(fd, setlk, &mut fl) {
        return r.map(|()| 0);
    }
    fcntl_lock(fd, setlk, Some(fl), true).map(|_| 0)
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
    let saved = crate::guard::errno_now();
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
