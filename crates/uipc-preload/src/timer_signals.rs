//! The kernel's side of timer signals: whether one is still pending, and taking one back.
//!
//! execve needs nothing here: the kernel drops every pending signal whose `si_code` is
//! SI_TIMER at execve (observed on 6.18), the ones the service queued included, so the new
//! image never sees a signal of the old image's timers, as on Linux (tests/c/timers.c).
//!
//! Pending sets come from `/proc/self/status` (`ShdPnd`, the process's) and
//! `/proc/self/task/TID/status` (`SigPnd`, a thread's; `SigBlk`, its blocked set, for
//! [`kernel_ignores`]), read into a stack buffer: the exports
//! call this, and they may run in a signal handler. A signal is taken with `rt_sigtimedwait`
//! and a zero timeout (it takes a signal whether or not it is blocked); signals of the same
//! number that are not the one wanted are queued again with their own siginfo.

use crate::exec_env::decimal;
use crate::timer_abi;
use std::sync::atomic::{AtomicUsize, Ordering};
use uipc::timers::SignalTarget;

/// Whether the kernel still holds `signo` pending for `target`. Reads the status file into a
/// stack buffer: the exports call this, and they may run in a signal handler.
pub fn kernel_pending(target: SignalTarget, signo: i32) -> bool {
    (1..=64).contains(&signo) && pending_mask(target) & (1u64 << (signo - 1)) != 0
}

/// The signals the kernel holds pending for `target` (bit `n - 1` for signal `n`).
fn pending_mask(target: SignalTarget) -> u64 {
    match target {
        SignalTarget::Thread(tid) => status_mask(Some(tid), b"\nSigPnd:"),
        _ => status_mask(None, b"\nShdPnd:"),
    }
}

/// Whether the kernel would drop `signo` sent to `target` now as ignored (Linux's
/// `sig_ignored`): its action is SIG_IGN, or SIG_DFL for a signal whose default is to ignore
/// it, and the thread it goes to (a process signal: the thread group leader, `pid`) does not
/// block it, nor waits for it in the library's sigtimedwait (which unblocks what it waits
/// for while it waits). Reads the action with the raw system call (the library's sigaction
/// is a wrapper) and the blocked set from the thread's status file.
pub fn kernel_ignores(pid: i32, target: SignalTarget, signo: i32) -> bool {
    if !(1..=64).contains(&signo) {
        return false;
    }
    // The kernel's struct sigaction: handler, flags, restorer, mask.
    let mut act = [0u64; 4];
    // SAFETY: queries (never sets) `signo`'s action into a live 32-byte buffer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            signo,
            std::ptr::null::<u64>(),
            act.as_mut_ptr(),
            8usize,
        )
    };
    if r != 0 || !action_ignores(signo, act[0] as usize) {
        return false;
    }
    if waited_for(signo) {
        return false;
    }
    let tid = match target {
        SignalTarget::Thread(tid) => tid,
        _ => pid,
    };
    status_mask(Some(tid), b"\nSigBlk:") & (1u64 << (signo - 1)) == 0
}

/// Whether an action with handler `handler` ignores `signo` (SIG_IGN, or SIG_DFL for SIGCHLD,
/// SIGCONT, SIGURG and SIGWINCH, whose default is to ignore them).
pub fn action_ignores(signo: i32, handler: usize) -> bool {
    handler == libc::SIG_IGN
        || (handler == libc::SIG_DFL
            && matches!(
                signo,
                libc::SIGCHLD | libc::SIGCONT | libc::SIGURG | libc::SIGWINCH
            ))
}

/// A signal set from a status file: the process's (`tid` None: `/proc/self/status`) or a
/// thread's, the line starting with `field`.
fn status_mask(tid: Option<i32>, field: &[u8]) -> u64 {
    let mut path = [0u8; 48];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        path[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    match tid {
        Some(tid) => {
            push(b"/proc/self/task/");
            push(decimal(u64::from(tid.unsigned_abs()), &mut [0; 20]));
            push(b"/status\0");
        }
        None => push(b"/proc/self/status\0"),
    }
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path in a live buffer; the descriptor is ours and closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: reads into the unfilled part of a live buffer.
        let n = unsafe { libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
        if n <= 0 {
            break;
        }
        filled += n as usize;
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    let text = &buf[..filled];
    let Some(at) = text.windows(field.len()).position(|w| w == field) else {
        return 0;
    };
    let mut mask = 0u64;
    for &c in text[at + field.len()..]
        .iter()
        .skip_while(|c| c.is_ascii_whitespace())
    {
        match (c as char).to_digit(16) {
            Some(d) => mask = mask << 4 | u64::from(d),
            None => break,
        }
    }
    mask
}

/// Takes timer `id`'s pending signal `signo` out of the kernel, putting back any other signal
/// of that number taken on the way (to this thread when `tid`, the caller's own thread, is
/// given: rt_sigtimedwait takes a thread's signals only in that thread). True if ours was
/// found.
pub fn take_from_kernel(pid: i32, tid: Option<i32>, signo: i32, id: i32) -> bool {
    take_matching(pid, tid, signo, |info| {
        timer_abi::siginfo_code_and_timer(info) == (uipc::timers::SI_TIMER, id)
    })
}

/// Takes the first pending signal `signo` whose siginfo `wanted` accepts (looking at 16 at
/// most), putting back the others taken on the way. True if one was taken.
fn take_matching(
    pid: i32,
    tid: Option<i32>,
    signo: i32,
    wanted: impl Fn(&[u8; timer_abi::SIGINFO]) -> bool,
) -> bool {
    // On the stack: settime and delete call this, and settime may run in a signal handler.
    let mut others = [[0u8; timer_abi::SIGINFO]; 16];
    let mut taken = 0;
    let mut found = false;
    for _ in 0..16 {
        let Ok(info) = uipc::timers::take_pending_signal(signo) else {
            break;
        };
        if wanted(&info) {
            found = true;
            break;
        }
        others[taken] = info;
        taken += 1;
    }
    for info in &others[..taken] {
        // SAFETY: queues the signal we took back to this process (or thread), with its own
        // siginfo.
        unsafe {
            match tid {
                Some(tid) => {
                    libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, signo, info.as_ptr())
                }
                None => libc::syscall(libc::SYS_rt_sigqueueinfo, pid, signo, info.as_ptr()),
            }
        };
    }
    found
}

/// Threads in the library's `sigtimedwait` (`timer_mask.rs`) waiting for each signal: the kernel unblocks what a thread
/// waits for while it waits, yet does not count the signal as ignored then (it checks the
/// mask from before the wait), so neither does [`kernel_ignores`].
static WAITERS: [AtomicUsize; 65] = [const { AtomicUsize::new(0) }; 65];

/// Whether a thread waits for `signo` in the library's `sigtimedwait`.
pub(crate) fn waited_for(signo: i32) -> bool {
    WAITERS
        .get(signo as usize)
        .is_some_and(|w| w.load(Ordering::Acquire) != 0)
}

/// The signals of one wait, counted in [`WAITERS`] until dropped.
pub(crate) struct Waiting(u64);

impl Waiting {
    /// Counts the signals of `set` as waited for.
    pub(crate) fn new(set: *const libc::sigset_t) -> Waiting {
        let mut signals = 0u64;
        if !set.is_null() {
            for signo in 1..=64 {
                // SAFETY: the caller's signal set, read only.
                if unsafe { libc::sigismember(set, signo) } == 1 {
                    signals |= 1 << (signo - 1);
                    WAITERS[signo as usize].fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        Waiting(signals)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        for (signo, waiters) in WAITERS.iter().enumerate().skip(1) {
            if self.0 & (1 << (signo - 1)) != 0 {
                waiters.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
