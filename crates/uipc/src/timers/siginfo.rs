//! A timer signal's `siginfo_t` as the host kernel lays it out, and taking one pending signal
//! from the host: for embedders that deliver the engine's signals as real signals, and for
//! comparing the engine with the host kernel.
//!
//! Layout on 64-bit Linux (128 bytes): `si_signo` at 0, `si_errno` 4, `si_code` 8, then for a
//! timer `si_timerid` 16, `si_overrun` 20, `si_value` 24 (8 bytes). Integers are native-endian.

use super::{SigInfo, TimerId};
use crate::errno::Errno;

/// `sizeof(siginfo_t)`.
pub const SIGINFO_BYTES: usize = 128;

fn i32_at(b: &[u8; SIGINFO_BYTES], at: usize) -> i32 {
    i32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl SigInfo {
    /// The `siginfo_t` bytes the kernel fills in for this timer signal.
    pub fn to_bytes(&self) -> [u8; SIGINFO_BYTES] {
        let mut b = [0u8; SIGINFO_BYTES];
        b[0..4].copy_from_slice(&self.signo.to_ne_bytes());
        b[8..12].copy_from_slice(&self.code.to_ne_bytes());
        b[16..20].copy_from_slice(&self.timer.raw().to_ne_bytes());
        b[20..24].copy_from_slice(&self.overrun.to_ne_bytes());
        b[24..32].copy_from_slice(&self.value.to_ne_bytes());
        b
    }

    /// The timer fields of `siginfo_t` bytes (meaningful when `si_code` is SI_TIMER).
    pub fn from_bytes(b: &[u8; SIGINFO_BYTES]) -> SigInfo {
        let mut value = [0u8; 8];
        value.copy_from_slice(&b[24..32]);
        SigInfo {
            signo: i32_at(b, 0),
            code: i32_at(b, 8),
            timer: TimerId::from_raw(i32_at(b, 16)),
            overrun: i32_at(b, 20),
            value: u64::from_ne_bytes(value),
        }
    }
}

/// Takes one pending signal `signo` of the calling thread (its own queue first, then its
/// process's) from the host kernel without waiting: `rt_sigtimedwait` for that number alone
/// with a zero timeout. EAGAIN if none is pending. The signal should be blocked, or a handler
/// may take it first. Allocates nothing, so a signal handler may call it.
pub fn take_pending_signal(signo: i32) -> Result<[u8; SIGINFO_BYTES], Errno> {
    if !(1..=64).contains(&signo) {
        return Err(Errno::EINVAL);
    }
    let set: u64 = 1 << (signo - 1);
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut info = [0u8; SIGINFO_BYTES];
    // SAFETY: the kernel reads an 8-byte sigset and a timespec and writes at most
    // SIGINFO_BYTES into `info`; all three are live for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigtimedwait,
            &set,
            info.as_mut_ptr(),
            &zero,
            8usize,
        )
    };
    if r < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error();
        return Err(Errno::from_raw(errno.unwrap_or(libc::EINVAL)));
    }
    Ok(info)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::timers::SI_TIMER;

    #[test]
    fn the_layout_is_the_c_library_s() {
        assert_eq!(std::mem::size_of::<libc::siginfo_t>(), SIGINFO_BYTES);
        let info = SigInfo {
            signo: 40,
            code: SI_TIMER,
            timer: TimerId::from_raw(7),
            overrun: 3,
            value: 0x1234_5678_9abc,
        };
        let b = info.to_bytes();
        // SAFETY: siginfo_t is plain data of SIGINFO_BYTES bytes; every bit pattern is valid.
        let c: libc::siginfo_t = unsafe { std::mem::transmute(b) };
        assert_eq!((c.si_signo, c.si_code), (40, SI_TIMER));
        // SAFETY: a timer siginfo's union holds the timer fields.
        assert_eq!(unsafe { c.si_value().sival_ptr } as u64, 0x1234_5678_9abc);
        assert_eq!(SigInfo::from_bytes(&b), info);
    }

    #[test]
    fn nothing_pending_is_eagain_and_a_bad_number_einval() {
        assert_eq!(take_pending_signal(0), Err(Errno::EINVAL));
        assert_eq!(take_pending_signal(65), Err(Errno::EINVAL));
        // SIGRTMAX-1 is blocked nowhere and never sent by this test binary.
        assert_eq!(
            take_pending_signal(libc::SIGRTMAX() - 1),
            Err(Errno::EAGAIN)
        );
    }
}
