//! The message queue fast path, client side: msgsnd and msgrcv done on the namespace's
//! message region, in this process, when the engine's protocol allows
//! (`uipc::ipc::msg::fast`; ARCHITECTURE.md "The message queue fast path"); every other case
//! goes to the daemon as before.
//!
//! The region is the last part of the fast path's mapping (`crate::semfast`, which asks for
//! it and decides whether the fast path may serve this process). msgsnd reads `mtype` first,
//! as the kernel does (a bad pointer goes to the daemon, which gives EFAULT in Linux's
//! order), then copies the text straight from the caller's memory into the ring in one
//! `process_vm_readv` (or directly, from the main stack); msgrcv copies the type and text
//! from the ring to the caller's buffer in one `process_vm_writev` before it commits the
//! receive, and a bad buffer is EFAULT after the message was taken, as on Linux.
//!
//! Nothing here allocates or takes a lock, so it is async-signal-safe as the exports are: a
//! handler that interrupts this thread while it holds a queue's slot finds the slot held,
//! waits a little, and asks the daemon, which takes the queue back without waiting for us.

use crate::user::{copy_in_pieces, copy_in_to, copy_out_pieces};
use std::sync::atomic::{AtomicU64, Ordering};
use uipc::ipc::consts::IPC_NOWAIT;
use uipc::ipc::msg::fast::{Cancel, Deliver, Got, MsgView, Recv, Ticket, Wait};
use uipc::ipc::sem::fast::Fast;
use uipc::Errno;

/// The bytes of ring words `w` (the first `max` of them).
fn bytes_of(w: &[AtomicU64], max: usize) -> (*mut u8, usize) {
    (w.as_ptr() as *mut u8, (w.len() * 8).min(max))
}

/// msgsnd on the fast path: `Some(result)` if served here.
pub fn msgsnd(msqid: i32, msgp: usize, msgsz: usize, msgflg: i32) -> Option<Result<i64, Errno>> {
    let (view, me) = crate::semfast::msg_region()?;
    let mut mtype = [0u8; 8];
    copy_in_to(msgp, &mut mtype).ok()?;
    let mtype = i64::from_le_bytes(mtype);
    let text = msgp.checked_add(8)?;
    let mut fill = |a: &[AtomicU64], b: &[AtomicU64]| {
        let first = bytes_of(a, msgsz);
        let second = bytes_of(b, msgsz - first.1);
        // SAFETY: the ring words after the queue's tail, which only this holder writes.
        unsafe { copy_in_pieces(text, &[first, second]) }.is_ok()
    };
    match view.msgsnd(msqid, mtype, msgsz, msgflg, &me, &mut fill) {
        Fast::Done(r) => {
            crate::semfast::served();
            Some(r.map(|()| 0))
        }
        Fast::Slow => None,
    }
}

/// msgrcv on the fast path: `Some(result)` if served here, sleeping here (on a futex in the
/// queue's slot) if nothing matches, IPC_NOWAIT is clear and the queue has no other sleeper.
pub fn msgrcv(
    msqid: i32,
    msgp: usize,
    msgsz: usize,
    msgtyp: i64,
    msgflg: i32,
) -> Option<Result<i64, Errno>> {
    let (view, me) = crate::semfast::msg_region()?;
    let maxsize = i64::try_from(msgsz).ok()?;
    let mut deliver = |mtype: i64, n: usize, a: &[AtomicU64], b: &[AtomicU64]| {
        let mtype = mtype.to_le_bytes();
        let first = bytes_of(a, n);
        let second = bytes_of(b, n - first.1);
        let pieces = [(mtype.as_ptr().cast_mut(), 8), first, second];
        // SAFETY: `mtype` on our stack and the message's ring (or mailbox) words, which
        // nobody writes while we hold the slot (or the record).
        unsafe { copy_out_pieces(msgp, &pieces) }
    };
    let tid = || crate::kernel::kernel_sys!(libc::SYS_gettid) as u32;
    let sleeper = (msgflg & IPC_NOWAIT == 0).then_some(&tid as &dyn Fn() -> u32);
    let args = (msgtyp, maxsize, msgflg);
    let t = match view.msgrcv_sleep(msqid, args, &me, sleeper, &mut deliver) {
        Recv::Done(r) => {
            crate::semfast::served();
            return Some(r.map(|n| n as i64));
        }
        Recv::Slow => return None,
        Recv::Armed(t) => t,
    };
    crate::semfast::served();
    match sleep(&view, msqid, &t, &mut deliver) {
        Got::Done(r) => Some(r.map(|n| n as i64)),
        // Look again, on the daemon path.
        Got::Again => None,
    }
}

/// Sleeps as armed sleeper `t` until a result is ready or a signal handler runs (a cancel:
/// EINTR, unless a result came first). The futex wait is timed: the kernel then ends it with
/// EINTR after any handler, SA_RESTART or not, and resumes it after a stop and SIGCONT with no
/// handler, as Linux's msgrcv (ERESTARTNOHAND).
fn sleep(view: &MsgView<'_>, msqid: i32, t: &Ticket, deliver: &mut Deliver<'_>) -> Got {
    let word = view.sleeper_word(t);
    loop {
        match view.wait_state(t) {
            Wait::Ready => return view.collect(t, deliver),
            Wait::Sleep(expect) => {
                if crate::semfast::futex_wait(word, expect, 3600 * 1_000_000_000) {
                    break;
                }
            }
        }
    }
    // A second Retry or AskDaemon in a row waits a little for the record to change (the
    // daemon adopting the receive, or answering the cancel it was asked for).
    let mut again = false;
    loop {
        let step = view.cancel(t);
        if again && matches!(step, Cancel::Retry | Cancel::AskDaemon) {
            crate::semfast::futex_wait(word, word.load(Ordering::Acquire) as u32, 1_000_000);
        }
        match step {
            Cancel::Cancelled => return Got::Done(Err(Errno::EINTR)),
            Cancel::Ready => {
                return match view.collect(t, deliver) {
                    Got::Again => Got::Done(Err(Errno::EINTR)),
                    got => got,
                }
            }
            Cancel::Retry => again = true,
            Cancel::AskDaemon => {
                crate::msg::poke(msqid);
                again = true;
            }
        }
    }
}
