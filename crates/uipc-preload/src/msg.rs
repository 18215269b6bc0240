//! msgget(2), msgsnd(2), msgrcv(2), msgctl(2).
//!
//! msgsnd reads `mtype` first (EFAULT at once, as the kernel), then the text; text the library
//! cannot read or carry ([`MAX_TEXT`]) is left out and the daemon answers EINVAL or EFAULT in
//! the kernel's order. msgrcv writes the type and text into the caller's buffer after the
//! message was taken: a bad buffer gives EFAULT and the message is lost, as on Linux.

use crate::conn::{call, check, enabled, ret_of, ret_value};
use crate::user::{copy_in, copy_out, u32_at, u64_at};
use crate::{abi, guard, guard_blocking};
use libc::{c_int, c_long, c_void, size_t, ssize_t};
use uipc::ipc::consts::*;
use uipc::ipc::msg::MsqidSet;
use uipc::Errno;
use uipc_proto::{Request, Response, MAX_TEXT};

/// msgget(2).
#[no_mangle]
pub extern "C-unwind" fn msgget(key: libc::key_t, msgflg: c_int) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_msgget, key, msgflg) } as c_int;
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
    let prepare = move || {
        let mtype = u64_at(&copy_in(msgp, 8)?, 0) as i64;
        let text = if msgsz as u64 > MAX_TEXT {
            None
        } else {
            msgp.checked_add(8).and_then(|at| copy_in(at, msgsz).ok())
        };
        Ok(Request::Msgsnd {
            msqid,
            mtype,
            msgsz: msgsz as u64,
            text,
            flags: msgflg,
        })
    };
    guard_blocking(prepare, ret_value) as c_int
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
    let prepare = move || {
        Ok(Request::Msgrcv {
            msqid,
            maxsize: msgsz as i64,
            msgtyp,
            flags: msgflg,
        })
    };
    let done = move |resp| match check(resp)? {
        Response::Msg { mtype, text } => {
            copy_out(msgp, &mtype.to_le_bytes())?;
            copy_out(msgp.checked_add(8).ok_or(Errno::EFAULT)?, &text)?;
            Ok(text.len() as i64)
        }
        _ => Err(Errno::from_raw(libc::EIO)),
    };
    guard_blocking(prepare, done) as ssize_t
}

/// msgctl(2).
#[no_mangle]
pub extern "C-unwind" fn msgctl(msqid: c_int, cmd: c_int, buf: *mut c_void) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_msgctl, msqid, cmd, buf) } as c_int;
    }
    let buf = buf as usize;
    guard(move || {
        let set = if cmd == IPC_SET {
            copy_in(buf, abi::MSQID_DS).ok().map(|b| MsqidSet {
                uid: u32_at(&b, abi::PERM_UID),
                gid: u32_at(&b, abi::PERM_GID),
                mode: u32_at(&b, abi::PERM_MODE),
                qbytes: u64_at(&b, abi::MSG_QBYTES),
            })
        } else {
            None
        };
        match check(call(&Request::Msgctl { msqid, cmd, set })?.0)? {
            Response::Ret(v) => Ok(v),
            Response::MsgStat { ret, ds } => {
                copy_out(buf, &abi::msqid_ds(&ds))?;
                Ok(i64::from(ret))
            }
            Response::MsgInfo { ret, info } => {
                copy_out(buf, &abi::msginfo(&info))?;
                Ok(i64::from(ret))
            }
            _ => Err(Errno::from_raw(libc::EIO)),
        }
    }) as c_int
}
