//! The C structures of the POSIX timer calls on x86-64 (glibc's layouts, which are the
//! kernel's): `struct sigevent` (64 bytes), `struct itimerspec` (32) and the `siginfo_t` of a
//! timer signal (128), read and written field by field from byte buffers.
//!
//! `struct sigevent`: `sigev_value` (8 bytes) at 0, `sigev_signo` at 8, `sigev_notify` at 12,
//! then a union at 16: the SIGEV_THREAD_ID target (`int`), or SIGEV_THREAD's function pointer
//! and `pthread_attr_t *` (16 and 24). The kernel copies all 64 bytes, so a sigevent whose last
//! bytes are unmapped is EFAULT even when they are unused.
//!
//! A timer's `siginfo_t` is the engine's ([`uipc::timers::SigInfo::to_bytes`]).

use crate::user::{copy_in, copy_in_to, u32_at, u64_at};
use uipc::timers::{ItimerSpec, SigEvent, SigInfo, TimerId, Timespec, UserPtr};

/// `sizeof(struct sigevent)`.
pub const SIGEVENT: usize = 64;
/// `sizeof(struct itimerspec)`.
pub const ITIMERSPEC: usize = 32;
/// `sizeof(siginfo_t)`.
pub const SIGINFO: usize = uipc::timers::SIGINFO_BYTES;

/// A `struct sigevent` as read from the caller, with SIGEV_THREAD's two pointers.
#[derive(Clone, Copy, Debug)]
pub struct RawSigEvent {
    /// The fields the engine checks.
    pub event: SigEvent,
    /// `sigev_notify_function` (SIGEV_THREAD).
    pub function: usize,
    /// `sigev_notify_attributes` (SIGEV_THREAD).
    pub attributes: usize,
}

/// Reads the sigevent at `addr`: `Null` for NULL, `Fault` if the 64 bytes cannot be read.
pub fn read_sigevent(addr: usize) -> UserPtr<RawSigEvent> {
    if addr == 0 {
        return UserPtr::Null;
    }
    let Ok(b) = copy_in(addr, SIGEVENT) else {
        return UserPtr::Fault;
    };
    UserPtr::Valid(RawSigEvent {
        event: SigEvent {
            notify: u32_at(&b, 12) as i32,
            signo: u32_at(&b, 8) as i32,
            value: u64_at(&b, 0),
            thread_id: u32_at(&b, 16) as i32,
        },
        function: u64_at(&b, 16) as usize,
        attributes: u64_at(&b, 24) as usize,
    })
}

/// Reads the itimerspec at `addr`: `Null` for NULL, `Fault` if it cannot be read.
pub fn read_itimerspec(addr: usize) -> UserPtr<ItimerSpec> {
    if addr == 0 {
        return UserPtr::Null;
    }
    // A stack buffer: timer_settime may run in a signal handler (no malloc).
    let mut b = [0u8; ITIMERSPEC];
    if copy_in_to(addr, &mut b).is_err() {
        return UserPtr::Fault;
    }
    let ts = |off| Timespec {
        sec: u64_at(&b, off) as i64,
        nsec: u64_at(&b, off + 8) as i64,
    };
    UserPtr::Valid(ItimerSpec {
        interval: ts(0),
        value: ts(16),
    })
}

/// The bytes of `spec` as a `struct itimerspec`.
pub fn itimerspec_bytes(spec: &ItimerSpec) -> [u8; ITIMERSPEC] {
    let mut b = [0u8; ITIMERSPEC];
    for (k, v) in [
        spec.interval.sec,
        spec.interval.nsec,
        spec.value.sec,
        spec.value.nsec,
    ]
    .iter()
    .enumerate()
    {
        b[8 * k..8 * k + 8].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// A timer signal's `siginfo_t`, as the kernel builds it (`si_code` SI_TIMER).
pub fn timer_siginfo(signo: i32, timer_id: i32, overrun: i32, value: u64) -> [u8; SIGINFO] {
    SigInfo {
        signo,
        code: uipc::timers::SI_TIMER,
        timer: TimerId::from_raw(timer_id),
        overrun,
        value,
    }
    .to_bytes()
}

/// `si_code` and `si_timerid` of a siginfo, to recognise our own signal.
pub fn siginfo_code_and_timer(b: &[u8; SIGINFO]) -> (i32, i32) {
    let info = SigInfo::from_bytes(b);
    (info.code, info.timer.raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_the_c_library() {
        assert_eq!(size_of::<libc::sigevent>(), SIGEVENT);
        assert_eq!(size_of::<libc::itimerspec>(), ITIMERSPEC);
        assert_eq!(size_of::<libc::siginfo_t>(), SIGINFO);
        assert_eq!(offset_of!(libc::sigevent, sigev_value), 0);
        assert_eq!(offset_of!(libc::sigevent, sigev_signo), 8);
        assert_eq!(offset_of!(libc::sigevent, sigev_notify), 12);
        assert_eq!(offset_of!(libc::sigevent, sigev_notify_thread_id), 16);
        assert_eq!(offset_of!(libc::itimerspec, it_value), 16);
    }

    #[test]
    fn sigevent_fields_are_read_where_c_puts_them() {
        // SAFETY: an all-zero sigevent is a valid value of this plain C struct.
        let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
        ev.sigev_notify = libc::SIGEV_THREAD_ID;
        ev.sigev_signo = 40;
        ev.sigev_value = libc::sigval {
            sival_ptr: 0x1234_5678_9abc as *mut _,
        };
        ev.sigev_notify_thread_id = 4321;
        let UserPtr::Valid(raw) = read_sigevent(&ev as *const _ as usize) else {
            panic!("a live sigevent must be readable");
        };
        assert_eq!(raw.event.notify, libc::SIGEV_THREAD_ID);
        assert_eq!(raw.event.signo, 40);
        assert_eq!(raw.event.value, 0x1234_5678_9abc);
        assert_eq!(raw.event.thread_id, 4321);
        assert!(matches!(read_sigevent(0), UserPtr::Null));
        assert!(matches!(read_sigevent(8), UserPtr::Fault));
    }

    #[test]
    fn itimerspec_round_trips_and_timer_siginfo_reads_back_through_libc() {
        let spec = ItimerSpec {
            interval: Timespec { sec: 1, nsec: 2 },
            value: Timespec { sec: 3, nsec: 4 },
        };
        let bytes = itimerspec_bytes(&spec);
        assert_eq!(
            read_itimerspec(bytes.as_ptr() as usize),
            UserPtr::Valid(spec)
        );
        assert_eq!(read_itimerspec(0), UserPtr::Null);

        let b = timer_siginfo(35, 7, 49, 0xfeed);
        // SAFETY: 128 bytes of a siginfo_t, read unaligned into a local.
        let si: libc::siginfo_t = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
        assert_eq!((si.si_signo, si.si_errno, si.si_code), (35, 0, -2));
        // SAFETY: a timer siginfo carries the sigval where the accessor reads it.
        assert_eq!(unsafe { si.si_value() }.sival_ptr as usize, 0xfeed);
        assert_eq!(siginfo_code_and_timer(&b), (-2, 7));
        assert_eq!(i32::from_le_bytes(b[20..24].try_into().unwrap()), 49);
    }
}
