//! msgget(2), msgsnd(2), msgrcv(2), msgctl(2).
//!
//! msgsnd reads `mtype` and the text in one copy (if that fails, `mtype` alone: EFAULT at once
//! if it cannot be read, as the kernel); text the library cannot read or carry ([`MAX_TEXT`])
//! is left out and the daemon answers EINVAL or EFAULT in
//! the kernel's order. msgrcv writes the type and text into the caller's buffer in one copy
//! after the message was taken: a bad buffer gives EFAULT and the message is lost, as on Linux.
//!
//! Nothing here allocates or locks (see `conn`): msgsnd copies the text into the call's
//! scratch space (a mapping of its own beyond 32 KiB) and encodes it from there; msgrcv writes
//! the text back from the reply buffer.

use crate::conn::{call_with, enabled, ret_of, ret_view};
use crate::ctl;
use crate::guard::{guard, guard_blocking};
use crate::user::{copy_in_to, copy_out_pair};
use libc::{c_int, c_long, c_void, size_t, ssize_t};
use uipc::ipc::consts::*;
use uipc_proto::client::WaitMode;
use uipc_proto::codec::Writer;
use uipc_proto::request::put_msgsnd;
use uipc_proto::{Request, ResponseView, MAX_TEXT};

/// msgget(2).
#[no_mangle]
pub extern "C-unwind" fn msgget(key: libc::key_t, msgflg: c_int) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_msgget, key, msgflg) } as c_int;
    }
    let saved = crate::guard::errno_now();
    if let Some(r) = crate::keyfast::get(uipc::ipc::keytable::Get::Msg, key, msgflg) {
        return crate::guard::finish(r, saved) as c_int;
    }
    guard(move || ret_of(Request::Msgget { key, flag: msgflg })) as c_int
}

/// msgsnd(2).
#[no_mangle]
pub extern "C-unwind" fn msgsnd(
    msqid: c_int,
    msgp: *const c_void,
    msgsz: size_t,
    msgflg: c_int,
) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_msgsnd, msqid, msgp, msgsz, msgflg) } as c_int;
    }
    let msgp = msgp as usize;
    if let Some(r) =
        crate::guard::guarded(|| Ok(crate::msgfast::msgsnd(msqid, msgp, msgsz, msgflg)))
            .ok()
            .flatten()
    {
        return crate::guard::finish(r, crate::guard::errno_now()) as c_int;
    }
    guard_blocking(move || {
        let carries_text = msgsz as u64 <= MAX_TEXT;
        let carried = if carries_text { msgsz } else { 0 };
        // The scratch holds the message as the caller's memory has it: mtype, then the text.
        let encode = |w: &mut Writer<'_>, scratch: &mut [u8]| {
            let whole = copy_in_to(msgp, scratch).is_ok();
            if !whole {
                copy_in_to(msgp, &mut scratch[..8])?;
            }
            let (mtype, text) = scratch.split_at(8);
            let mtype = i64::from_le_bytes(mtype.try_into().unwrap_or([0; 8]));
            let text = (whole && carries_text).then_some(text);
            put_msgsnd(w, msqid, mtype, msgsz as u64, text, msgflg);
            Ok(WaitMode::of(msgflg & IPC_NOWAIT == 0, false))
        };
        call_with(carried + 8, None, encode, |view, _| ret_view(view))
    }) as c_int
}

/// msgrcv(2).
#[no_mangle]
pub extern "C-unwind" fn msgrcv(
    msqid: c_int,
    msgp: *mut c_void,
    msgsz: size_t,
    msgtyp: c_long,
    msgflg: c_int,
) -> ssize_t {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_msgrcv, msqid, msgp, msgsz, msgtyp, msgflg) }
            as ssize_t;
    }
    let msgp = msgp as usize;
    let saved = crate::guard::errno_now();
    let fast = || Ok(crate::msgfast::msgrcv(msqid, msgp, msgsz, msgtyp, msgflg));
    let served = match crate::guard::guarded(fast).ok().flatten() {
        Some(crate::msgfast::Step::Done(r)) => Some(r),
        // The sleep keeps the caller's cancelability (msgrcv is a cancellation point).
        Some(crate::msgfast::Step::Sleep(view, t)) => crate::msgfast::sleep(view, msqid, msgp, t),
        None => None,
    };
    if let Some(r) = served {
        return crate::guard::finish(r, saved) as ssize_t;
    }
    let req = Request::Msgrcv {
        msqid,
        maxsize: msgsz as i64,
        msgtyp,
        flags: msgflg,
    };
    let encode = move |w: &mut Writer<'_>, _: &mut [u8]| {
        req.encode_into(w);
        Ok(WaitMode::of(msgflg & IPC_NOWAIT == 0, false))
    };
    let decode = move |view: ResponseView<'_>, _| match view {
        ResponseView::Msg { mtype, text } => {
            copy_out_pair(msgp, &mtype.to_le_bytes(), text)?;
            Ok(text.len() as i64)
        }
        view => ret_view(view),
    };
    guard_blocking(move || call_with(0, None, encode, decode)) as ssize_t
}

/// msgctl(2).
#[no_mangle]
pub extern "C-unwind" fn msgctl(msqid: c_int, cmd: c_int, buf: *mut c_void) -> c_int {
    ctl::call_ctl(libc::SYS_msgctl, msqid, cmd, buf, |set| {
        let set = set.map(ctl::SetDs::msqid_set);
        Request::Msgctl { msqid, cmd, set }
    })
}
