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
//! A msgrcv that must wait sleeps on a futex in the queue's slot (`Step::Sleep`, then
//! [`sleep`], outside the library's guard so that it keeps the caller's cancelability), and a
//! fast msgsnd hands a matching message straight to it (ARCHITECTURE.md "Sleeping on the
//! message fast path").
//!
//! Nothing here allocates or takes a lock, so it is async-signal-safe as the exports are: a
//! handler that interrupts this thread while it holds a queue's slot finds the slot held,
//! waits a little, and asks the daemon, which takes the queue back without waiting for us.

use crate::user::{copy_in_pieces, copy_in_to, copy_out_pieces};
use std::sync::atomic::AtomicU64;
use uipc::ipc::consts::{IPC_NOWAIT, IPC_STAT};
use uipc::ipc::msg::fast::{Cancel, Deliver, Got, MsgView, Recv, Ticket, Wait};
use uipc::ipc::sem::fast::Fast;
use uipc::Errno;
use uipc_proto::Request;

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

/// What [`msgrcv`] came to when served here.
pub enum Step {
    /// The call's result.
    Done(Result<i64, Errno>),
    /// Armed on the queue's slot: the caller sleeps with [`sleep`], outside the library's
    /// guard (the sleep keeps the caller's cancelability, as msgrcv is a cancellation point).
    Sleep(MsgView<'static>, Ticket),
}

/// msgrcv on the fast path: `Some(step)` if served here (possibly armed to sleep here, on a
/// futex in the queue's slot, when nothing matches, IPC_NOWAIT is clear and the queue has no
/// other sleeper).
pub fn msgrcv(msqid: i32, msgp: usize, msgsz: usize, msgtyp: i64, msgflg: i32) -> Option<Step> {
    let (view, me) = crate::semfast::msg_region()?;
    let maxsize = i64::try_from(msgsz).ok()?;
    let tid = || crate::kernel::kernel_sys!(libc::SYS_gettid) as u32;
    let sleeper = (msgflg & IPC_NOWAIT == 0).then_some(&tid as &dyn Fn() -> u32);
    let args = (msgtyp, maxsize, msgflg);
    let mut deliver = deliver_to(msgp);
    match view.msgrcv_sleep(msqid, args, &me, sleeper, &mut deliver) {
        Recv::Done(r) => {
            crate::semfast::served();
            Some(Step::Done(r.map(|n| n as i64)))
        }
        Recv::Slow => None,
        Recv::Armed(t) => {
            crate::semfast::served();
            Some(Step::Sleep(view, t))
        }
    }
}

/// The copy of a message (type, `n` bytes in ring or mailbox words) to the caller's buffer.
fn deliver_to(
    msgp: usize,
) -> impl FnMut(i64, usize, &[AtomicU64], &[AtomicU64]) -> Result<(), Errno> {
    move |mtype: i64, n: usize, a: &[AtomicU64], b: &[AtomicU64]| {
        let mtype = mtype.to_le_bytes();
        let first = bytes_of(a, n);
        let second = bytes_of(b, n - first.1);
        let pieces = [(mtype.as_ptr().cast_mut(), 8), first, second];
        // SAFETY: `mtype` on our stack and the message's ring (or mailbox) words, which
        // nobody writes while we hold the slot (or the record).
        unsafe { copy_out_pieces(msgp, &pieces) }
    }
}

extern "C-unwind" {
    fn pthread_testcancel();
}

/// How long one futex wait of a sleeper lasts before it looks for a pending `pthread_cancel`
/// (a deferred cancel sends no signal to a thread outside the C library's own cancellable
/// calls, so the sleeper looks for it itself).
const CANCEL_POLL_NS: i128 = 200_000_000;

/// An armed record withdrawn if the thread is cancelled while it sleeps (the cancellation
/// unwinds through here): nobody hands a message to a thread that is gone.
struct Armed<'a> {
    view: &'a MsgView<'static>,
    msqid: i32,
    t: Ticket,
    live: bool,
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if self.live {
            let mut discard = |_: i64, _: usize, _: &[AtomicU64], _: &[AtomicU64]| Ok(());
            let _ = crate::guard::guarded(|| {
                Ok(withdraw(self.view, self.msqid, &self.t, &mut discard))
            });
        }
    }
}

/// Sleeps as armed sleeper `t` (of [`msgrcv`] into `msgp`) until a result is ready or a
/// signal handler runs (a cancel: EINTR, unless a result came first): `None` to look again on
/// the daemon path. The futex wait is timed: the kernel then ends it with EINTR after any
/// handler, SA_RESTART or not, and resumes it after a stop and SIGCONT with no handler, as
/// Linux's msgrcv (ERESTARTNOHAND). It runs with the caller's cancelability: a pending
/// `pthread_cancel` acts (unwinding, the record withdrawn by `Armed`) before each wait, which
/// lasts at most [`CANCEL_POLL_NS`], and after an interrupted one.
pub fn sleep(
    view: MsgView<'static>,
    msqid: i32,
    msgp: usize,
    t: Ticket,
) -> Option<Result<i64, Errno>> {
    let mut deliver = deliver_to(msgp);
    let mut armed = Armed {
        view: &view,
        msqid,
        t,
        live: true,
    };
    let word = view.sleeper_word(&t);
    let got = loop {
        match view.wait_state(&t) {
            Wait::Ready => break view.collect(&t, &mut deliver),
            Wait::Sleep(expect) => {
                // SAFETY: a cancellation point; `armed` withdraws the record if it acts.
                unsafe { pthread_testcancel() };
                if crate::futex::wait_timed(word, expect, CANCEL_POLL_NS) {
                    break withdraw(&view, msqid, &t, &mut deliver);
                }
            }
        }
    };
    armed.live = false;
    match got {
        Got::Done(Err(Errno::EINTR)) => {
            // SAFETY: a cancellation point; the record is free.
            unsafe { pthread_testcancel() };
            Some(Err(Errno::EINTR))
        }
        Got::Done(r) => Some(r.map(|n| n as i64)),
        // Look again, on the daemon path.
        Got::Again => None,
    }
}

/// Ends sleeper `t`'s wait after a signal: EINTR, unless a result came first (delivered).
fn withdraw(view: &MsgView<'_>, msqid: i32, t: &Ticket, deliver: &mut Deliver<'_>) -> Got {
    let word = view.sleeper_word(t);
    // A second Retry or AskDaemon in a row waits a little for the record to change (the
    // daemon adopting the receive, or answering the cancel it was asked for).
    let mut again = false;
    loop {
        let step = view.cancel(t);
        if again && matches!(step, Cancel::Retry | Cancel::AskDaemon) {
            crate::futex::nap(word);
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
                poke(msqid);
                again = true;
            }
        }
    }
}

/// A daemon call on queue `msqid` whose answer is ignored: its entry into the queue's slot
/// withdraws a fast-path sleeper's adopted receive that asked to be cancelled.
pub(crate) fn poke(msqid: i32) {
    let _ = crate::guard::guarded(|| {
        crate::conn::call(&Request::Msgctl {
            msqid,
            cmd: IPC_STAT,
            set: None,
        })
    });
}
