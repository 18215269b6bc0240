//! flock leases, the caller's side: flock LOCK_SH, LOCK_EX or LOCK_UN (with or without
//! LOCK_NB) through a descriptor of the description that holds its file's flock lease
//! completes here, on the daemon's flock lease area (`uipc::locks::flockfast`;
//! ARCHITECTURE.md "flock leases"); every other case, and every error, goes to the daemon.
//!
//! The area is asked for once per process (`LockRequest::FlockSlots`: its memfd, and our pid
//! as the daemon numbers it) and mapped shared; a forked child keeps the mapping and asks
//! again only to learn its pid; a new program image maps it again. It is off for good in the
//! image when the daemon has none (ENOSYS, `uipc serve`, `UIPC_FASTPATH=0`), numbers our pid
//! differently (a nested pid namespace) or refuses us `kcmp` on its descriptors; off for the
//! call in a vforked child.
//!
//! Which slot: a cache of 64 words (descriptor number + 1 in the high half, the slot in the
//! low) remembers where a descriptor was last served; a miss costs an `fstat` and a look at
//! the file's slot group. Every use is proven by one `kcmp(KCMP_FILE)` of our descriptor
//! with the daemon's named in the slot. Nothing here allocates or takes a lock (the first
//! call's daemon call and mmap aside), so flock stays async-signal-safe.

use crate::conn::{call_passing, check};
use crate::kernel::kernel_sys;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use uipc::locks::flockfast::{map_flock_slots, FlockView, Flocked, Mode, Token, FLOCK_BYTES};
use uipc::locks::FileId;
use uipc_proto::{LockRequest, Request, Response};

/// Leases are off in this program image.
static OFF: AtomicBool = AtomicBool::new(false);
/// The pid the area was granted to (0: not asked yet in this process).
static SLOTS_PID: AtomicI32 = AtomicI32::new(0);
/// The mapping (null before the first grant); never unmapped.
static AREA: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
/// Descriptor -> slot where it was last served (see the module doc).
static CACHE: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// `kcmp`'s type for "the same open file description".
const KCMP_FILE: libc::c_long = 0;

/// Reads `UIPC_FASTPATH` (the library's constructor).
pub fn prepare() {
    if std::env::var_os("UIPC_FASTPATH").is_some_and(|v| v == "0") {
        OFF.store(true, Ordering::Relaxed);
    }
}

fn grant(pid: i32) -> Option<()> {
    let req = Request::Lock(LockRequest::FlockSlots);
    let (resp, fd) = crate::guard::guarded(|| call_passing(&req, None, false)).ok()?;
    let fd = fd.map(|fd| crate::slots::ClosedQuietly(std::os::fd::IntoRawFd::into_raw_fd(fd)));
    match check(resp) {
        Ok(Response::Ret(p)) if p == i64::from(pid) => {}
        Ok(Response::Ret(_)) => {
            OFF.store(true, Ordering::Relaxed);
            return None;
        }
        Err(e) if e.raw() == libc::ENOSYS => {
            OFF.store(true, Ordering::Relaxed);
            return None;
        }
        _ => return None,
    }
    let fd = fd?;
    if AREA.load(Ordering::Acquire).is_null() {
        let p = map_flock_slots(fd.0)?;
        if AREA
            .compare_exchange(
                std::ptr::null_mut(),
                p.as_ptr(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: our own mapping, never published.
            unsafe { libc::munmap(p.as_ptr().cast(), FLOCK_BYTES) };
        }
    }
    SLOTS_PID.store(pid, Ordering::Release);
    Some(())
}

/// The area and our pid, if flock leases may serve this call.
fn view() -> Option<(FlockView<'static>, i32)> {
    if OFF.load(Ordering::Relaxed) || crate::vfork::on_borrowed_memory() {
        return None;
    }
    let pid = crate::vfork::pid();
    if SLOTS_PID.load(Ordering::Acquire) != pid {
        grant(pid)?;
    }
    let p = AREA.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a shared mapping of FLOCK_BYTES that is never unmapped, used only through
    // atomics (by us, the daemon and the other clients).
    let words = unsafe { std::slice::from_raw_parts(p, FLOCK_BYTES / 8) };
    Some((FlockView::new(words), pid))
}

/// Whether our `fd` refers to the description the daemon's `token` names. A refusal
/// (EPERM: the daemon is not ours to inspect) turns the leases off in this image.
fn same(pid: i32, fd: libc::c_int, token: Token) -> bool {
    let r = kernel_sys!(libc::SYS_kcmp, pid, token.pid, KCMP_FILE, fd, token.fd);
    if r < 0 && crate::guard::errno_now() == libc::EPERM {
        OFF.store(true, Ordering::Relaxed);
    }
    r == 0
}

fn file_of(fd: libc::c_int) -> Option<FileId> {
    // SAFETY: a zeroed `stat` is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (kernel_sys!(libc::SYS_fstat, fd, &mut st as *mut libc::stat) == 0).then_some(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// flock(`fd`, `cmd`) here, if `fd`'s description holds its file's flock lease: `Some(())`
/// done, `None` for the daemon. Keeps errno.
pub(super) fn flock(fd: libc::c_int, cmd: libc::c_int) -> Option<()> {
    let want = Mode::of_cmd(cmd)?;
    if fd < 0 {
        return None;
    }
    let saved = crate::guard::errno_now();
    let r = flock_here(fd, want);
    // SAFETY: writes this thread's errno back.
    unsafe { *libc::__errno_location() = saved };
    if r.is_some() {
        crate::semfast::served();
    }
    r
}

fn flock_here(fd: libc::c_int, want: Mode) -> Option<()> {
    let (view, pid) = view()?;
    let entry = &CACHE[fd as usize % CACHE.len()];
    let c = entry.load(Ordering::Relaxed);
    if c >> 32 == fd as u64 + 1
        && view.flock(c as u32 as usize, pid, want, |t| same(pid, fd, t)) == Flocked::Done
    {
        return Some(());
    }
    let file = file_of(fd)?;
    for k in view.candidates(file) {
        if view.flock(k, pid, want, |t| same(pid, fd, t)) == Flocked::Done {
            entry.store(((fd as u64 + 1) << 32) | k as u64, Ordering::Relaxed);
            return Some(());
        }
    }
    None
}
