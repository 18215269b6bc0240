//! semget(2), semop(2), semtimedop(2), semctl(2).
//!
//! semctl's fourth argument is variadic in C (`union semun`, passed only for the commands that
//! use it). On x86-64 (and aarch64) a variadic argument of pointer size travels in the same
//! register as a fourth fixed integer argument, so the export takes it as a `usize` and reads
//! it only for the commands that use it, as glibc does.
//!
//! Nothing here allocates or locks (see `conn`): the caller's operations and SETALL's values
//! are copied into the call's scratch space and encoded from there; GETALL's and the stat
//! calls' answers are written back from the reply buffer and stack arrays.

use crate::abi;
use crate::conn::{call_with, enabled, ret_of, ret_view};
use crate::ctl;
use crate::guard::{guard, guard_blocking};
use crate::user::{copy_in_to, copy_out, u64_at};
use libc::{c_int, c_void, size_t};
use uipc::ipc::consts::*;
use uipc::ipc::sem::Timespec;
use uipc::Errno;
use uipc_proto::client::WaitMode;
use uipc_proto::codec::Writer;
use uipc_proto::request::{put_sem_arg, put_sem_arg_array, put_semctl_head, put_semtimedop};
use uipc_proto::{Request, ResponseView, SemArg, MAX_SOPS};

/// semget(2).
#[no_mangle]
pub extern "C-unwind" fn semget(key: libc::key_t, nsems: c_int, semflg: c_int) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_semget, key, nsems, semflg) } as c_int;
    }
    let saved = crate::guard::errno_now();
    let get = uipc::ipc::keytable::Get::Sem(nsems);
    if let Some(r) = crate::keyfast::get(get, key, semflg) {
        return crate::guard::finish(r, saved) as c_int;
    }
    guard(move || {
        ret_of(Request::Semget {
            key,
            nsems,
            flag: semflg,
        })
    }) as c_int
}

/// semop(2): semtimedop without a timeout.
#[no_mangle]
pub extern "C-unwind" fn semop(semid: c_int, sops: *mut c_void, nsops: size_t) -> c_int {
    semtimedop(semid, sops, nsops, std::ptr::null())
}

/// semtimedop(2).
#[no_mangle]
pub extern "C-unwind" fn semtimedop(
    semid: c_int,
    sops: *mut c_void,
    nsops: size_t,
    timeout: *const c_void,
) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_semtimedop, semid, sops, nsops, timeout) }
            as c_int;
    }
    let (sops, timeout) = (sops as usize, timeout as usize);
    if nsops == 1 {
        let saved = crate::guard::errno_now();
        if let Some(r) = fast_semop(semid, sops, timeout) {
            return crate::guard::finish(r, saved) as c_int;
        }
    }
    guard_blocking(move || {
        // The kernel copies the timeout first, and takes nsops as an unsigned int.
        let timeout = match timeout {
            0 => None,
            t => {
                let mut b = [0u8; 16];
                copy_in_to(t, &mut b)?;
                Some(Timespec {
                    tv_sec: u64_at(&b, 0) as i64,
                    tv_nsec: u64_at(&b, 8) as i64,
                })
            }
        };
        let nsops = u64::from(nsops as u32);
        // More operations than a request carries: sent without them (the daemon says E2BIG).
        let bytes = if nsops > MAX_SOPS {
            0
        } else {
            nsops as usize * abi::SEMBUF
        };
        let encode = |w: &mut Writer<'_>, scratch: &mut [u8]| {
            let ops = (nsops <= MAX_SOPS && copy_in_to(sops, scratch).is_ok()).then_some(&*scratch);
            let may_sleep = ops
                .is_some_and(|b| abi::sembufs(b).any(|op| i32::from(op.sem_flg) & IPC_NOWAIT == 0));
            put_semtimedop(w, semid, nsops, ops.map(abi::sembufs), timeout);
            Ok(WaitMode::of(may_sleep, false))
        };
        call_with(bytes, None, encode, |view, _| ret_view(view))
    }) as c_int
}

/// A one-sop semop on the fast path (`crate::semfast`), if it can serve it: the operation
/// and the timeout (which Linux validates first) are copied in, and anything unusual (a bad
/// pointer, a bad timeout) is left to the daemon path, which reports it as Linux does.
fn fast_semop(semid: c_int, sops: usize, timeout: usize) -> Option<Result<i64, Errno>> {
    crate::guard::guarded(|| {
        let mut limit = None;
        if timeout != 0 {
            let mut b = [0u8; 16];
            copy_in_to(timeout, &mut b)?;
            let (sec, nsec) = (u64_at(&b, 0) as i64, u64_at(&b, 8) as i64);
            if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
                return Err(Errno::EINVAL);
            }
            limit = Some((sec, nsec));
        }
        let mut b = [0u8; abi::SEMBUF];
        copy_in_to(sops, &mut b)?;
        let op = abi::sembufs(&b).next().ok_or(Errno::EINVAL)?;
        Ok(crate::semfast::semop(semid, op, limit))
    })
    .ok()
    .flatten()
}

/// Makes the daemon enter `semid`'s slot, which resolves a cancel asked of an operation it
/// adopted from this process's fast-path sleeper (`crate::semfast`): a GETNCNT whose answer
/// is not needed.
pub(crate) fn poke(semid: c_int) {
    let _ = crate::guard::guarded(|| semctl_uipc(semid, 0, GETNCNT, 0));
}

/// semctl(2); see the module doc for the fourth argument.
#[no_mangle]
pub extern "C-unwind" fn semctl(semid: c_int, semnum: c_int, cmd: c_int, arg: usize) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_semctl, semid, semnum, cmd, arg) } as c_int;
    }
    if let Some(r) = crate::semfast::semctl_get(semid, semnum, cmd) {
        return crate::guard::finish(r, crate::guard::errno_now()) as c_int;
    }
    guard(move || semctl_uipc(semid, semnum, cmd, arg)) as c_int
}

fn semctl_uipc(semid: c_int, semnum: c_int, cmd: c_int, arg: usize) -> Result<i64, Errno> {
    let sem_arg = match cmd {
        SETVAL => SemArg::Val(arg as u32 as i32),
        IPC_SET => ctl::ipc_set_ds(cmd, arg).map_or(SemArg::None, ctl::SetDs::sem_arg),
        SETALL => return setall(semid, semnum, arg),
        _ => SemArg::None,
    };
    let req = Request::Semctl {
        semid,
        semnum,
        cmd,
        arg: sem_arg,
    };
    call_with(
        0,
        None,
        |w, _| {
            req.encode_into(w);
            Ok(WaitMode::Immediate)
        },
        |view, _| semctl_reply(view, arg),
    )
}

/// SETALL: the set's size first, to know how many values to read from `arg`.
fn setall(semid: c_int, semnum: c_int, arg: usize) -> Result<i64, Errno> {
    // The set is gone or was never there: SETALL itself reports it (sent without values).
    let nsems = ret_of(Request::SemNsems { semid }).unwrap_or(0).max(0) as usize;
    let encode = |w: &mut Writer<'_>, scratch: &mut [u8]| {
        put_semctl_head(w, semid, semnum, SETALL);
        if nsems > 0 && copy_in_to(arg, scratch).is_ok() {
            let values = scratch.chunks_exact(2);
            put_sem_arg_array(w, values.map(|c| u16::from_le_bytes([c[0], c[1]])));
        } else {
            put_sem_arg(w, &SemArg::None);
        }
        Ok(WaitMode::Immediate)
    };
    call_with(nsems * 2, None, encode, |view, _| semctl_reply(view, arg))
}

/// semctl's answer, with what it returns through `arg` written there.
fn semctl_reply(view: ResponseView<'_>, arg: usize) -> Result<i64, Errno> {
    match view {
        // GETALL: the values travel as the C array lays them out (little-endian u16s).
        ResponseView::SemAll(values) => copy_out(arg, values).map(|()| 0),
        ResponseView::Other(resp) => ctl::reply(resp, arg),
        ResponseView::Msg { .. } => Err(Errno::from_raw(libc::EIO)),
    }
}
