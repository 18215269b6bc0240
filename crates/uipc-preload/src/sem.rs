//! semget(2), semop(2), semtimedop(2), semctl(2).
//!
//! semctl's fourth argument is variadic in C (`union semun`, passed only for the commands that
//! use it). On x86-64 (and aarch64) a variadic argument of pointer size travels in the same
//! register as a fourth fixed integer argument, so the export takes it as a `usize` and reads
//! it only for the commands that use it, as glibc does.

use crate::conn::{call, check, enabled, ret_of, ret_value};
use crate::user::{copy_in, copy_out, u32_at};
use crate::{abi, guard, guard_blocking};
use libc::{c_int, c_void, size_t};
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, Timespec};
use uipc::Errno;
use uipc_proto::{Request, Response, SemArg, MAX_SOPS};

/// semget(2).
#[no_mangle]
pub extern "C-unwind" fn semget(key: libc::key_t, nsems: c_int, semflg: c_int) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_semget, key, nsems, semflg) } as c_int;
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
    let prepare = move || {
        // The kernel copies the timeout first, and takes nsops as an unsigned int.
        let timeout = match timeout {
            0 => None,
            t => {
                let b = copy_in(t, 16)?;
                Some(Timespec {
                    tv_sec: crate::user::u64_at(&b, 0) as i64,
                    tv_nsec: crate::user::u64_at(&b, 8) as i64,
                })
            }
        };
        let nsops = u64::from(nsops as u32);
        let ops = if nsops > MAX_SOPS {
            None
        } else {
            copy_in(sops, nsops as usize * 6).ok().map(|b| {
                b.chunks_exact(6)
                    .map(|c| {
                        Sembuf::new(
                            u16::from_le_bytes([c[0], c[1]]),
                            i16::from_le_bytes([c[2], c[3]]),
                            i16::from_le_bytes([c[4], c[5]]),
                        )
                    })
                    .collect()
            })
        };
        Ok(Request::Semtimedop {
            semid,
            nsops,
            sops: ops,
            timeout,
        })
    };
    guard_blocking(prepare, ret_value) as c_int
}

/// semctl(2); see the module doc for the fourth argument.
#[no_mangle]
pub extern "C-unwind" fn semctl(semid: c_int, semnum: c_int, cmd: c_int, arg: usize) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_semctl, semid, semnum, cmd, arg) } as c_int;
    }
    guard(move || semctl_uipc(semid, semnum, cmd, arg)) as c_int
}

fn semctl_uipc(semid: c_int, semnum: c_int, cmd: c_int, arg: usize) -> Result<i64, Errno> {
    let sem_arg = match cmd {
        SETVAL => SemArg::Val(arg as u32 as i32),
        IPC_SET => match copy_in(arg, abi::SEMID_DS) {
            Ok(b) => SemArg::Set {
                uid: u32_at(&b, abi::PERM_UID),
                gid: u32_at(&b, abi::PERM_GID),
                mode: u32_at(&b, abi::PERM_MODE),
            },
            Err(_) => SemArg::None,
        },
        SETALL => match ret_of(Request::SemNsems { semid }) {
            Ok(n) => match copy_in(arg, n as usize * 2) {
                Ok(b) => SemArg::Array(
                    b.chunks_exact(2)
                        .map(|c| u16::from_le_bytes([c[0], c[1]]))
                        .collect(),
                ),
                Err(_) => SemArg::None,
            },
            // The set is gone or was never there: SETALL itself reports it.
            Err(_) => SemArg::None,
        },
        _ => SemArg::None,
    };
    let req = Request::Semctl {
        semid,
        semnum,
        cmd,
        arg: sem_arg,
    };
    match check(call(&req)?.0)? {
        Response::Ret(v) => Ok(v),
        Response::SemStat { ret, ds } => {
            copy_out(arg, &abi::semid_ds(&ds))?;
            Ok(i64::from(ret))
        }
        Response::SemInfo { ret, info } => {
            copy_out(arg, &abi::seminfo(&info))?;
            Ok(i64::from(ret))
        }
        Response::SemAll(vals) => {
            let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            copy_out(arg, &bytes)?;
            Ok(0)
        }
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}
