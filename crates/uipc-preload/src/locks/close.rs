//! The closes that drop locks: close, dup2 and dup3 onto an open descriptor, fclose,
//! close_range and closefrom.
//!
//! On Linux closing any descriptor of a file drops the process's POSIX locks on it, and the
//! last descriptor of a description takes its OFD and flock locks along. Before libc closes a
//! descriptor of a regular file or directory, the library sends it to the daemon with a
//! `Close`; the daemon decides what goes ([`uipc_proto::LockRequest::Close`]). An O_PATH
//! descriptor's close drops nothing (as on Linux) and is not reported. close_range
//! and closefrom report each open descriptor of their range (read from `/proc/self/fd`).
//!
//! Only files someone asked to lock need it: the daemon's lock hints (a read-only shared page
//! set, mapped by the library's constructor; see the server's `hints` module) say which files may have
//! locks, and a close of any other file costs an fstat and one byte read. The library's own
//! descriptors (the memfd of the hints, one a response might carry) are closed with the
//! kernel's close, never through this module's exports.

use super::{libc_fns, lock_call, routing, set_errno};
use crate::conn::call_passing;
use crate::conn::is_open;
use crate::guard::guarded;
use crate::kernel::kernel_sys;
use crate::open_fds::each_open_fd;
use libc::{c_int, FILE};
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use uipc_proto::{hint_slot, map_hints, LockRequest, Request, Response, HINT_SLOTS};

/// The file (`st_dev`, `st_ino`) behind `fd` if closing it may drop locks the daemon holds:
/// regular files and directories.
pub(super) fn lockable(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: zeroed stat is valid output space; fstat on any number reports failure.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above, a raw system call.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0 && matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR))
        .then_some((st.st_dev, st.st_ino))
}

/// The file (`st_dev`, `st_ino`) behind `fd` if closing `fd` may drop locks the daemon holds
/// on it: a [`lockable`] file the hints mark, through a descriptor that is not O_PATH (Linux
/// leaves the locks alone when an O_PATH descriptor closes, and such a description holds
/// none). The access mode is read only for marked files.
pub(super) fn closing_drops_locks(fd: c_int) -> Option<(u64, u64)> {
    let file = lockable(fd).filter(|&file| may_hold_locks(file))?;
    // The kernel's fcntl (the library's own export would route it).
    let flags = kernel_sys!(libc::SYS_fcntl, fd, libc::F_GETFL);
    (flags >= 0 && flags as c_int & libc::O_PATH == 0).then_some(file)
}

/// The daemon's lock hints, mapped read-only: 0 not asked for yet, 1 unavailable (every close
/// is reported), else the mapping's address. Inherited across fork with the mapping.
static HINTS: AtomicUsize = AtomicUsize::new(0);

fn hints_of_daemon() -> Option<usize> {
    let (resp, fd) = call_passing(&Request::Lock(LockRequest::Hints), None, false).ok()?;
    // Closed below by the kernel, not through `close` (which would come back here).
    let fd = fd?.into_raw_fd();
    if resp != Response::Ret(HINT_SLOTS as i64) {
        kernel_sys!(libc::SYS_close, fd);
        return None;
    }
    let p = map_hints(fd, libc::PROT_READ);
    kernel_sys!(libc::SYS_close, fd);
    p.map(|p| p.as_ptr() as usize)
}

/// Maps the hints (the library's constructor, under `--locks`): a daemon call and a mapping,
/// which allocate, so not in a close that may run in a signal handler.
pub(super) fn map_hints_now() {
    if HINTS.load(Ordering::Acquire) != 0 {
        // Mapped already (a close in an earlier constructor asked for them).
        return;
    }
    let got = guarded(|| Ok(hints_of_daemon()))
        .ok()
        .flatten()
        .unwrap_or(1);
    if HINTS
        .compare_exchange(0, got, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
        && got != 1
    {
        // SAFETY: our own mapping, never published.
        unsafe { crate::kernel::kernel_munmap(got as *mut libc::c_void, HINT_SLOTS) };
    }
}

/// Whether the daemon may hold locks on the file (dev, ino): its hint byte is set, or the
/// hints are unavailable.
pub(super) fn may_hold_locks((dev, ino): (u64, u64)) -> bool {
    let mut base = HINTS.load(Ordering::Acquire);
    if base == 0 {
        // Not mapped by the constructor (the library was not loaded at start).
        let got = guarded(|| Ok(hints_of_daemon()))
            .ok()
            .flatten()
            .unwrap_or(1);
        base = match HINTS.compare_exchange(0, got, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => got,
            Err(existing) => {
                if got != 1 {
                    // SAFETY: our own mapping, never published.
                    unsafe { crate::kernel::kernel_munmap(got as *mut libc::c_void, HINT_SLOTS) };
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

/// Tells the daemon that `fd` is about to be closed (see the module doc). Keeps errno.
///
/// A signal handler's close that interrupted another notification on its thread is reported
/// too (on the thread's other connection, see `crate::slots`): nothing here needs a guard
/// against re-entry, as the library closes its own descriptors with the kernel's close, not
/// through this export.
pub(super) fn before_close(fd: c_int) {
    if !routing() {
        return;
    }
    let saved = crate::guard::errno_now();
    if let Some(file) = closing_drops_locks(fd) {
        if !super::lease::close(file) {
            let _ = lock_call(fd, LockRequest::Close { fd }, false);
        }
    }
    set_errno(saved);
}

/// close(2).
#[no_mangle]
pub extern "C-unwind" fn close(fd: c_int) -> c_int {
    crate::slots::descriptors_may_change();
    crate::procwrite::before_close(fd);
    before_close(fd);
    match real!(close, unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: libc's close.
        Some(f) => unsafe { f(fd) },
        None => kernel_sys!(libc::SYS_close, fd) as c_int,
    }
}

/// What dup2 (`flags` 0) and dup3 do first: `newfd`, if open, is closed by the call unless
/// it fails or is a no-op (the same descriptor, which dup3 refuses and dup2 leaves alone).
pub(super) fn before_dup(oldfd: c_int, newfd: c_int, flags: c_int) {
    if oldfd != newfd {
        crate::procwrite::before_close(newfd);
    }
    if oldfd != newfd && flags & !libc::O_CLOEXEC == 0 && is_open(oldfd) && is_open(newfd) {
        before_close(newfd);
    }
}

/// dup2(2): `newfd`, if open, is closed first (unless the call fails or is a no-op).
#[no_mangle]
pub extern "C-unwind" fn dup2(oldfd: c_int, newfd: c_int) -> c_int {
    crate::slots::descriptors_may_change();
    before_dup(oldfd, newfd, 0);
    match real!(dup2, unsafe extern "C" fn(c_int, c_int) -> c_int) {
        // SAFETY: libc's dup2.
        Some(f) => unsafe { f(oldfd, newfd) },
        None => kernel_sys!(libc::SYS_dup2, oldfd, newfd) as c_int,
    }
}

/// dup3(2): as dup2, for valid flags.
#[no_mangle]
pub extern "C-unwind" fn dup3(oldfd: c_int, newfd: c_int, flags: c_int) -> c_int {
    crate::slots::descriptors_may_change();
    before_dup(oldfd, newfd, flags);
    match real!(dup3, unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) {
        // SAFETY: libc's dup3.
        Some(f) => unsafe { f(oldfd, newfd, flags) },
        None => kernel_sys!(libc::SYS_dup3, oldfd, newfd, flags) as c_int,
    }
}

/// fclose(3): libc closes the stream's descriptor internally, out of the wrapper's reach.
#[no_mangle]
pub extern "C-unwind" fn fclose(stream: *mut FILE) -> c_int {
    crate::slots::descriptors_may_change();
    crate::procwrite::before_fclose(stream);
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

/// Before close_range or closefrom closes `first..=last`: a sysctl memfd's content is applied
/// (`procwrite.rs`) and the daemon told about every open descriptor (see [`before_close`]).
/// Runs in forked (even vforked) children before exec, as programs close descriptors there:
/// only descriptors of files the hints mark go further.
fn before_close_range(first: u32, last: u32) {
    let writes = crate::procwrite::live();
    let locks = routing();
    if !writes && !locks {
        return;
    }
    each_open_fd(first, last, |fd| {
        if writes {
            crate::procwrite::before_close(fd);
        }
        if locks {
            before_close(fd);
        }
    });
    // The calls above may have connected to the daemon with a descriptor in the range, which
    // the close takes: the connection is checked again at its next use.
    crate::slots::descriptors_may_change();
}

/// `CLOSE_RANGE_UNSHARE`: unshare the descriptor table first (closes as usual).
const CLOSE_RANGE_UNSHARE: libc::c_uint = 2;
/// `CLOSE_RANGE_CLOEXEC`: mark the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 4;

/// What close_range does first: reports the descriptors it will close, if it will close any
/// (valid flags without CLOSE_RANGE_CLOEXEC, `first <= last`; the kernel's EINVAL cases
/// report nothing).
pub(super) fn before_close_range_call(first: libc::c_uint, last: libc::c_uint, flags: c_int) {
    let flags = flags as libc::c_uint;
    if flags & !(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC) == 0
        && flags & CLOSE_RANGE_CLOEXEC == 0
        && first <= last
    {
        let _ = guarded(|| {
            before_close_range(first, last);
            Ok(())
        });
    }
}

/// close_range(2).
#[no_mangle]
pub extern "C-unwind" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    crate::slots::descriptors_may_change();
    before_close_range_call(first, last, flags);
    match real!(
        close_range,
        unsafe extern "C" fn(libc::c_uint, libc::c_uint, c_int) -> c_int
    ) {
        // SAFETY: libc's close_range.
        Some(f) => unsafe { f(first, last, flags) },
        None => kernel_sys!(libc::SYS_close_range, first, last, flags) as c_int,
    }
}

/// closefrom(3).
#[no_mangle]
pub extern "C-unwind" fn closefrom(lowfd: c_int) {
    crate::slots::descriptors_may_change();
    if lowfd >= 0 {
        let _ = guarded(|| {
            before_close_range(lowfd as u32, u32::MAX);
            Ok(())
        });
    }
    match real!(closefrom, unsafe extern "C" fn(c_int)) {
        // SAFETY: libc's closefrom.
        Some(f) => unsafe { f(lowfd) },
        // What glibc's closefrom does first.
        None => {
            kernel_sys!(libc::SYS_close_range, lowfd.max(0) as u32, u32::MAX, 0);
        }
    }
}
