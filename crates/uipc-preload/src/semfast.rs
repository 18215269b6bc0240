//! The semaphore fast path, client side: single-sop semop/semtimedop and semctl's GETVAL,
//! GETPID, GETNCNT and GETZCNT done on the namespace's arena, in this process, when the
//! engine's protocol allows (`uipc::ipc::sem::fast`; ARCHITECTURE.md "The semaphore fast
//! path"); every other case goes to the daemon as before. A single-sop semop that must wait
//! sleeps here, on a futex in the arena, when the engine's record protocol lets it (`sleep`;
//! ARCHITECTURE.md "Sleeping on the fast path"): always with a timeout, so that a signal
//! handler ends the wait with EINTR even under SA_RESTART; a cancel of an operation the
//! daemon adopted is resolved by a daemon call on the set (`crate::sem::poke`).
//!
//! The arena is asked for once per process (`Request::SemArena`: its memfd, and our pid as the
//! daemon numbers it) and mapped shared. [`FAST_PID`] says for which pid it was granted: a
//! forked child (another pid) asks again, and so does a process after an unshare or setns
//! ([`crate::ipcns::NS_GENERATION`]); it keeps the mapping it has if the memfd granted is the
//! one mapped (same inode), else maps the new one (a clone(CLONE_NEWIPC) child, an unshare or
//! setns: the old mapping is left in place, as another thread may still read it). The fast path is off for good in the image (`OFF`) under `UIPC_FASTPATH=0`, or when
//! the daemon has no arena (ENOSYS); off for the call in a vforked child (whose memory is its
//! parent's) and when the daemon numbers our pid differently (a nested pid namespace).
//!
//! Nothing here allocates or takes a lock: atomics, and for the first call a daemon call and
//! an mmap, so it is async-signal-safe as the exports are. The caller's euid is read with a
//! raw system call (not libc's, which another preload may fake) only when the set's mode does
//! not grant the access to everyone.

use crate::conn::{call, check};
use libc::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use uipc::ipc::keytable::{TableView, OFFSET, TABLE_BYTES};
use uipc::ipc::sem::fast::{
    map_arena, ArenaView, Caller, Cancel, Fast, Sleep, Ticket, Wait, ARENA_BYTES,
};
use uipc::ipc::sem::Sembuf;
use uipc_proto::{Request, Response};

/// The fast path is off in this program image.
static OFF: AtomicBool = AtomicBool::new(false);
/// The pid the arena was granted to (0: not asked yet in this process).
static FAST_PID: AtomicI32 = AtomicI32::new(0);
/// The mapping (null before the first grant) and the namespace generation it belongs to.
static ARENA: AtomicPtr<std::sync::atomic::AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
static ARENA_NS: AtomicU64 = AtomicU64::new(0);
/// The inode of the memfd behind the mapping: a grant of another memfd (another namespace's,
/// as a clone(CLONE_NEWIPC) child gets) is mapped anew.
static ARENA_INO: AtomicU64 = AtomicU64::new(0);
/// Calls served here (tests read it through `UIPC_FASTPATH_STATS`, see `report`).
static SERVED: AtomicUsize = AtomicUsize::new(0);

/// Reads `UIPC_FASTPATH` and `UIPC_FASTPATH_STATS` (the library's constructor).
pub fn prepare() {
    if std::env::var_os("UIPC_FASTPATH").is_some_and(|v| v == "0") {
        OFF.store(true, Ordering::Relaxed);
    }
    if std::env::var_os("UIPC_FASTPATH_STATS").is_some() {
        // SAFETY: registers a plain function that only formats a number and writes it.
        unsafe { libc::atexit(report) };
    }
}

/// The caller as the fast path needs it (`crate::msgfast` uses it too).
pub(crate) struct Me {
    pid: i32,
}

impl Caller for Me {
    fn pid(&self) -> u32 {
        self.pid as u32
    }
    fn euid(&self) -> u32 {
        crate::kernel::kernel_sys!(libc::SYS_geteuid) as u32
    }
    fn now(&self) -> i64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes a live timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        ts.tv_sec
    }
    fn alive(&self, pid: u32) -> bool {
        alive(pid as i32)
    }
    fn wake(&self, word: &AtomicU64) {
        crate::futex::wake_all(word);
    }
}

std::thread_local! {
    /// This thread's pidfd of the last sleeper it handed an operation to: (pid, descriptor,
    /// `slots::closes()` when it was opened); descriptor -1: none. Kept only while no
    /// close-family call was counted since (the program may have closed the number), closed at
    /// thread exit (`slots::thread_exit`); `PIDFD_BUSY` keeps a signal handler's hand-off on
    /// this thread off it.
    static PIDFD: std::cell::Cell<(i32, i32, u64)> = const { std::cell::Cell::new((0, -1, 0)) };
    static PIDFD_BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether process `pid` has not exited: its pidfd is not readable (an exited process's is,
/// zombie or reaped; a pid that is gone has none). Without pidfds, whether it can be signalled.
pub(crate) fn alive(pid: i32) -> bool {
    if PIDFD_BUSY.with(|b| b.replace(true)) {
        return match pidfd(pid) {
            Ok(fd) => {
                let gone = exited(fd);
                crate::kernel::kernel_sys!(libc::SYS_close, fd);
                !gone
            }
            Err(alive) => alive,
        };
    }
    let live = alive_cached(pid);
    PIDFD_BUSY.with(|b| b.set(false));
    live
}

/// [`alive`] through this thread's cached pidfd: a cached one that says "exited" is opened
/// again once (the pid may be another process's now).
fn alive_cached(pid: i32) -> bool {
    let closes = crate::slots::closes();
    let (p, fd, at) = PIDFD.with(|c| c.get());
    let ours = fd >= 0 && at == closes;
    if ours && p == pid && !exited(fd) {
        return true;
    }
    if ours {
        crate::kernel::kernel_sys!(libc::SYS_close, fd);
    }
    PIDFD.with(|c| c.set((0, -1, 0)));
    match pidfd(pid) {
        Ok(fd) => {
            crate::slots::hook_thread_exit();
            PIDFD.with(|c| c.set((pid, fd, closes)));
            !exited(fd)
        }
        Err(alive) => alive,
    }
}

/// Closes this thread's cached pidfd (thread exit).
pub fn thread_exit() {
    let (_, fd, at) = PIDFD.with(|c| c.replace((0, -1, 0)));
    if fd >= 0 && at == crate::slots::closes() {
        crate::kernel::kernel_sys!(libc::SYS_close, fd);
    }
}

/// A pidfd of `pid`, or whether it lives if none can be had (ESRCH: gone; else `kill(pid, 0)`).
fn pidfd(pid: i32) -> Result<c_int, bool> {
    let fd = crate::kernel::kernel_sys!(libc::SYS_pidfd_open, pid, 0);
    if fd >= 0 {
        return Ok(fd as c_int);
    }
    Err(match crate::guard::errno_now() {
        libc::ESRCH => false,
        _ => {
            crate::kernel::kernel_sys!(libc::SYS_kill, pid, 0) == 0
                || crate::guard::errno_now() == libc::EPERM
        }
    })
}

/// Whether pidfd `fd` is readable (its process exited); a descriptor that is not open (closed
/// behind the library's back) counts as exited, so the caller opens a new one or asks the
/// daemon.
fn exited(fd: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let n = crate::kernel::kernel_sys!(
        libc::SYS_ppoll,
        &mut p as *mut libc::pollfd,
        1,
        &zero as *const libc::timespec,
        0,
        0
    );
    n != 0 && (n < 0 || p.revents & (libc::POLLIN | libc::POLLNVAL) != 0)
}

/// CLOCK_MONOTONIC in nanoseconds.
fn mono_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// The arena and who we are, if the fast path may serve this call.
fn arena() -> Option<(ArenaView<'static>, Me)> {
    if OFF.load(Ordering::Relaxed) || crate::vfork::on_borrowed_memory() {
        return None;
    }
    let pid = crate::vfork::pid();
    let ns = crate::ipcns::NS_GENERATION.load(Ordering::Acquire);
    if FAST_PID.load(Ordering::Acquire) != pid || ARENA_NS.load(Ordering::Acquire) != ns {
        grant(pid, ns)?;
    }
    let p = ARENA.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a shared mapping of ARENA_BYTES bytes that is never unmapped, used only
    // through atomics (by us, the daemon and the other clients).
    let words = unsafe { std::slice::from_raw_parts(p, ARENA_BYTES / 8) };
    Some((ArenaView::new(words), Me { pid }))
}

/// Asks the daemon for the arena; maps it unless the mapping we have is this namespace's.
fn grant(pid: i32, ns: u64) -> Option<()> {
    // A process at its descriptor limit asks again with room for the memfd (`crate::fdroom`).
    let (resp, fd) = crate::fdroom::with_room(
        || crate::guard::guarded(|| call(&Request::SemArena)),
        |r| matches!(r, Ok((Response::Ret(_), None))),
    )
    .ok()?;
    let granted = match check(resp) {
        Ok(Response::Ret(p)) => p,
        Err(e) if e.raw() == libc::ENOSYS => {
            OFF.store(true, Ordering::Relaxed);
            return None;
        }
        _ => return None,
    };
    let fd = crate::slots::ClosedQuietly(std::os::fd::IntoRawFd::into_raw_fd(fd?));
    if granted != i64::from(pid) {
        // Another pid namespace: our sempid would be wrong. The daemon path, for good.
        OFF.store(true, Ordering::Relaxed);
        return None;
    }
    // SAFETY: a zeroed `stat` is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // The kernel's fstat, not the C library's: another preload (fakeroot) wraps that one and
    // calls SysV IPC from inside it.
    if crate::kernel::kernel_sys!(libc::SYS_fstat, fd.0, &mut st as *mut libc::stat) != 0 {
        return None;
    }
    if ARENA.load(Ordering::Acquire).is_null() || ARENA_INO.load(Ordering::Acquire) != st.st_ino {
        // The arena, then the key table; never unmapped (see the module doc).
        let p = map_arena(fd.0, uipc::ipc::msg::fast::MAPPING_BYTES)?;
        ARENA.store(p.as_ptr(), Ordering::Release);
        ARENA_INO.store(st.st_ino, Ordering::Release);
    }
    ARENA_NS.store(ns, Ordering::Release);
    FAST_PID.store(pid, Ordering::Release);
    Some(())
}

/// The key table that follows the arena in the same mapping (`crate::keyfast`), if the fast
/// path may serve this call.
pub fn key_table() -> Option<TableView<'static>> {
    arena()?;
    let p = ARENA.load(Ordering::Acquire);
    // SAFETY: the mapping is MAPPING_BYTES long (`grant`), the table at OFFSET within it,
    // never unmapped, used only through atomics.
    let words =
        unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(OFFSET).cast(), TABLE_BYTES / 8) };
    Some(TableView::new(words))
}

/// The message queue region that follows the key table in the same mapping
/// (`crate::msgfast`), and who we are, if the fast path may serve this call.
pub(crate) fn msg_region() -> Option<(uipc::ipc::msg::fast::MsgView<'static>, Me)> {
    let (_, me) = arena()?;
    let p = ARENA.load(Ordering::Acquire);
    // SAFETY: the mapping is MAPPING_BYTES long (`grant`), the region its last REGION_BYTES
    // from msg::fast::OFFSET, never unmapped, used only through atomics.
    let words = unsafe {
        std::slice::from_raw_parts(
            p.cast::<u8>().add(uipc::ipc::msg::fast::OFFSET).cast(),
            uipc::ipc::msg::fast::REGION_BYTES / 8,
        )
    };
    Some((uipc::ipc::msg::fast::MsgView::new(words), me))
}

/// Counts a call served in this process (the report at exit).
pub fn served() {
    SERVED.fetch_add(1, Ordering::Relaxed);
}

/// A single-sop semop on the fast path (`timeout`: semtimedop's, valid): `Some(result)` if
/// served here, sleeping here if it must wait and the set has no other waiter.
pub fn semop(
    semid: c_int,
    sop: Sembuf,
    timeout: Option<(i64, i64)>,
) -> Option<Result<i64, uipc::Errno>> {
    let (view, me) = arena()?;
    let t = match view.semop_sleep(semid, sop, &me) {
        Sleep::Done(r) => {
            SERVED.fetch_add(1, Ordering::Relaxed);
            return Some(r.map(|()| 0));
        }
        Sleep::Slow => return None,
        Sleep::Armed(t) => t,
    };
    SERVED.fetch_add(1, Ordering::Relaxed);
    let deadline =
        timeout.map(|(s, ns)| mono_ns() + i128::from(s) * 1_000_000_000 + i128::from(ns));
    Some(sleep(&view, semid, &t, deadline).map(|()| 0))
}

/// Sleeps as armed sleeper `t` until a hand-off, the daemon's result, a signal handler (EINTR)
/// or `deadline` (EAGAIN); the last two cancel, and a hand-off that won the race stands.
fn sleep(
    view: &ArenaView<'_>,
    semid: c_int,
    t: &Ticket,
    deadline: Option<i128>,
) -> Result<(), uipc::Errno> {
    let word = view.sleeper_word(t);
    let reason = loop {
        match view.wait_state(t) {
            Wait::Done(r) => return r,
            Wait::Sleep(expect) => {
                let left = deadline.map_or(i128::MAX, |d| d - mono_ns());
                if left <= 0 {
                    break uipc::Errno::EAGAIN;
                }
                if crate::futex::wait_timed(word, expect, left) {
                    break uipc::Errno::EINTR;
                }
            }
        }
    };
    // A second Retry or AskDaemon in a row waits a little for the record to change (the
    // daemon adopting the operation, or answering the cancel it was asked for).
    let mut again = false;
    loop {
        let step = view.cancel(t);
        if again && matches!(step, Cancel::Retry | Cancel::AskDaemon) {
            crate::futex::nap(word);
        }
        match step {
            Cancel::Cancelled => return Err(reason),
            Cancel::Done(r) => return r,
            Cancel::Retry => again = true,
            Cancel::AskDaemon => {
                crate::sem::poke(semid);
                again = true;
            }
        }
    }
}

/// semctl's GETVAL, GETPID, GETNCNT, GETZCNT on the fast path.
pub fn semctl_get(semid: c_int, semnum: c_int, cmd: c_int) -> Option<Result<i64, uipc::Errno>> {
    if !matches!(
        cmd,
        uipc::ipc::consts::GETVAL
            | uipc::ipc::consts::GETPID
            | uipc::ipc::consts::GETNCNT
            | uipc::ipc::consts::GETZCNT
    ) {
        return None;
    }
    let (view, me) = arena()?;
    match view.semctl_get(semid, semnum, cmd, &me) {
        Fast::Done(r) => {
            SERVED.fetch_add(1, Ordering::Relaxed);
            Some(r.map(i64::from))
        }
        Fast::Slow => None,
    }
}

/// At exit, with `UIPC_FASTPATH_STATS` set: how many calls the fast path served, on stderr
/// (the tests check that it served some, so a path that never engages cannot pass).
extern "C" fn report() {
    let n = SERVED.load(Ordering::Relaxed);
    let mut buf = *b"uipc fastpath: 0000000000 calls\n";
    let mut v = n;
    for i in (15..25).rev() {
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    // SAFETY: writes our own buffer to stderr.
    unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
}
