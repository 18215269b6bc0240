//! The host side of `uipc conform timers`: the raw timer syscalls and prctl, with deliberate
//! NULL and faulting pointers, and a fork probe.

use super::{child_view, SEC};
use uipc::timers::*;
use uipc::Errno;

/// The kernel's `struct sigevent` (64 bytes).
#[repr(C)]
struct KSigevent {
    value: u64,
    signo: i32,
    notify: i32,
    thread_id: i32,
    _pad: [i32; 11],
}

fn fault_ptr<T>() -> *mut T {
    1usize as *mut T // in the never-mapped first page: the kernel answers EFAULT
}

fn ret(r: libc::c_long) -> Result<i64, Errno> {
    if r < 0 {
        Err(Errno::from_raw(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    } else {
        Ok(r)
    }
}

pub(super) fn host_create(
    clock: i32,
    ev: UserPtr<SigEvent>,
    slot: UserPtr<i32>,
) -> Result<i32, Errno> {
    let mut kev = KSigevent {
        value: 0,
        signo: 0,
        notify: 0,
        thread_id: 0,
        _pad: [0; 11],
    };
    let evp: *mut KSigevent = match ev {
        UserPtr::Null => std::ptr::null_mut(),
        UserPtr::Fault => fault_ptr(),
        UserPtr::Valid(e) => {
            (kev.value, kev.signo, kev.notify, kev.thread_id) =
                (e.value, e.signo, e.notify, e.thread_id);
            &mut kev
        }
    };
    let mut id: i32 = 0;
    let idp: *mut i32 = match slot {
        UserPtr::Null => std::ptr::null_mut(),
        UserPtr::Fault => fault_ptr(),
        UserPtr::Valid(want) => {
            id = want;
            &mut id
        }
    };
    // SAFETY: every pointer is NULL, a deliberately unmapped address (the kernel checks it and
    // returns EFAULT), or points to a live local of the right kernel layout.
    ret(unsafe { libc::syscall(libc::SYS_timer_create, clock, evp, idp) }).map(|_| id)
}

fn to_kspec(s: &ItimerSpec) -> libc::itimerspec {
    libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: s.interval.sec,
            tv_nsec: s.interval.nsec,
        },
        it_value: libc::timespec {
            tv_sec: s.value.sec,
            tv_nsec: s.value.nsec,
        },
    }
}

fn from_kspec(k: &libc::itimerspec) -> ItimerSpec {
    ItimerSpec {
        interval: Timespec {
            sec: k.it_interval.tv_sec,
            nsec: k.it_interval.tv_nsec,
        },
        value: Timespec {
            sec: k.it_value.tv_sec,
            nsec: k.it_value.tv_nsec,
        },
    }
}

pub(super) fn host_settime(
    id: i32,
    flags: i32,
    new: UserPtr<ItimerSpec>,
) -> Result<ItimerSpec, Errno> {
    let knew;
    let newp: *const libc::itimerspec = match new {
        UserPtr::Null => std::ptr::null(),
        UserPtr::Fault => fault_ptr(),
        UserPtr::Valid(s) => {
            knew = to_kspec(&s);
            &knew
        }
    };
    let mut old = to_kspec(&ItimerSpec::ZERO);
    // SAFETY: `newp` is NULL, unmapped (EFAULT) or a live itimerspec; `old` is writable.
    let r = unsafe { libc::syscall(libc::SYS_timer_settime, id, flags, newp, &mut old) };
    ret(r).map(|_| from_kspec(&old))
}

pub(super) fn host_gettime(id: i32) -> Result<ItimerSpec, Errno> {
    let mut cur = to_kspec(&ItimerSpec::ZERO);
    // SAFETY: `cur` is a writable itimerspec for the duration of the call.
    ret(unsafe { libc::syscall(libc::SYS_timer_gettime, id, &mut cur) }).map(|_| from_kspec(&cur))
}

pub(super) fn host_simple(nr: libc::c_long, id: i32) -> Result<i32, Errno> {
    // SAFETY: timer_getoverrun / timer_delete take only an integer id.
    ret(unsafe { libc::syscall(nr, id) }).map(|r| r as i32)
}

pub(super) fn host_prctl(args: [u64; 4]) -> Result<i32, Errno> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe {
        libc::prctl(
            PR_TIMER_CREATE_RESTORE_IDS,
            args[0],
            args[1],
            args[2],
            args[3],
        )
    };
    ret(r as libc::c_long).map(|r| r as i32)
}

pub(super) fn host_now(clock: i32) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is writable; an unsupported clock leaves it zero, which is harmless here.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * SEC + ts.tv_nsec
}

/// Forks; the grandchild reports what it sees through a pipe and exits (its timers with it).
pub(super) fn host_forked(probe: i32) -> Result<(i32, String), String> {
    let mut fds = [0; 2];
    // SAFETY: room for the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err("pipe failed".into());
    }
    // SAFETY: this process is single-threaded, so the child may use std until _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let view = child_view(
            host_create(
                CLOCK_MONOTONIC,
                UserPtr::Valid(SigEvent::NONE),
                UserPtr::Valid(0),
            ),
            host_gettime(probe),
            host_prctl([2, 0, 0, 0]),
        );
        // SAFETY: writing our own buffer to our pipe, then leaving without exit handlers.
        unsafe {
            libc::write(fds[1], view.as_ptr().cast(), view.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our write end; reading into a local buffer; reaping our child; taking
    // its SIGCHLD with an initialised set.
    unsafe {
        libc::close(fds[1]);
        let mut buf = vec![0u8; 512];
        let n = libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
        libc::close(fds[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        // The child's SIGCHLD stays queued (everything is blocked) and would hold one of our
        // uid's RLIMIT_SIGPENDING units: take it.
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::sigtimedwait(&chld, std::ptr::null_mut(), &zero);
        buf.truncate(n.max(0) as usize);
        Ok((pid, String::from_utf8_lossy(&buf).into_owned()))
    }
}
