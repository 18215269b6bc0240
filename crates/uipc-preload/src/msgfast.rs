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
use std::sync::atomic::AtomicU64;
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

/// msgrcv on the fast path: `Some(result)` if served here.
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
        // SAFETY: `mtype` on our stack and the message's ring words, which nobody writes while
        // we hold the slot.
        unsafe { copy_out_pieces(msgp, &pieces) }
    };
    match view.msgrcv(msqid, maxsize, msgtyp, msgflg, &me, &mut deliver) {
        Fast::Done(r) => {
            crate::semfast::served();
            Some(r.map(|n| n as i64))
        }
        Fast::Slow => None,
    }
}
