//! The C structures of the POSIX timer calls on x86-64 (glibc's layouts, which are the
//! kernel's): `struct sigevent` (64 bytes), `struct itimerspec` (32) and the `siginfo_t` of a
//! timer signal (128), read and written field by field from byte buffers.
//!
//! `struct sigevent`: `sigev_value` (8 bytes) at 0, `sigev_signo` at 8, `sigev_notify` at 12,
//! then a union at 16: the SIGEV_THREAD_ID target (`int`), or SIGEV_THREAD's function pointer
//! and `pthread_attr_t *` (16 and 24). The kernel copies all 64 bytes, so a sigevent whose last
//! bytes are unmapped is EFAULT even when they are unused.
//!
//! A timer's `siginfo_t`: `si_signo` 0, `si_errno` 4, `si_code` 8, then `si_timerid` 16,
//! `si_overrun` 20, `si_value` 24.

use crate::user::{copy_in, u32_at, u64_at};
use uipc::timers::{ItimerSpec, SigEvent, Timespec, UserPtr};

/// `sizeof(struct sigevent)`.
pub const SIGEVENT: usize = 64;
/// `sizeof(struct itimerspec)`.
pub const ITIMERSPEC: usize = 32;
/// `sizeof(siginfo_t)`.
pub const SIGINFO: usize = 128;

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
    let Ok(b) = copy_in(addr, ITIMERSPEC) else {
        return UserPtr::Fault;
    };
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
    let mut b = [0u8; SIGINFO];
    b[0..4].copy_from_slice(&signo.to_le_bytes());
    b[8..12].copy_from_slice(&uipc::timers::SI_TIMER.to_le_bytes());
    b[16..20].copy_from_slice(&timer_id.to_le_bytes());
    b[20..24].copy_from_slice(&overrun.to_le_bytes());
    b[24..32].copy_from_slice(&value.to_le_bytes());
    b
}

/// `si_code` and `si_timerid` of a siginfo, to recognise our own signal.
pub fn siginfo_code_and_timer(b: &[u8; SIGINFO]) -> (i32, i32) {
    (u32_at(b, 8) as i32, u32_at(b, 16) as i32)
}
