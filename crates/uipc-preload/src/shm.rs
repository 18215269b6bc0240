//! shmget(2), shmat(2), shmdt(2), shmctl(2): real shared memory from the daemon's memfds.
//!
//! shmat: the daemon records the attachment and sends the segment's memfd; the library maps
//! it (`PROT_READ` for SHM_RDONLY, plus `PROT_WRITE` otherwise and `PROT_EXEC` for SHM_EXEC)
//! and closes the descriptor. At a given address (already rounded by the daemon for SHM_RND)
//! the mapping is `MAP_FIXED` with SHM_REMAP and `MAP_FIXED_NOREPLACE` without it, so an
//! overlap with any existing mapping fails with EINVAL as on Linux. At address 0 the kernel
//! picks the address and the library tells the daemon where the attachment really is
//! (`ShmMoved`), so that shmdt, fork and exit find it.
//!
//! The process keeps its attachments in [`ATTACHED`] (start address -> length); shmdt of an
//! address not in it is EINVAL without asking the daemon. The table is copied into a child
//! by fork, matching what the daemon records for the child (see `fork`).

use crate::conn::{call, check, enabled, ret_of};
use crate::user::{copy_in, copy_out, u32_at};
use crate::{abi, guard};
use libc::{c_int, c_void, size_t};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use uipc::ipc::consts::*;
use uipc::ipc::shm::ShmSet;
use uipc::Errno;
use uipc_proto::{Request, Response};

/// This process's attachments: start address -> mapped length.
pub static ATTACHED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// Locks the attachment table (poisoning is ignored: the table stays consistent).
pub fn attached() -> MutexGuard<'static, BTreeMap<usize, usize>> {
    ATTACHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// shmget(2).
#[no_mangle]
pub extern "C-unwind" fn shmget(key: libc::key_t, size: size_t, shmflg: c_int) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_shmget, key, size, shmflg) } as c_int;
    }
    guard(move || {
        ret_of(Request::Shmget {
            key,
            size: size as u64,
            flag: shmflg,
        })
    }) as c_int
}

/// shmat(2).
#[no_mangle]
pub extern "C-unwind" fn shmat(shmid: c_int, shmaddr: *const c_void, shmflg: c_int) -> *mut c_void {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_shmat, shmid, shmaddr, shmflg) } as *mut c_void;
    }
    let wanted = shmaddr as usize;
    guard(move || shmat_uipc(shmid, wanted, shmflg)) as *mut c_void
}

fn shmat_uipc(shmid: c_int, wanted: usize, flags: c_int) -> Result<i64, Errno> {
    if crate::vfork::on_borrowed_memory() {
        // A vforked child: the daemon would count the attachment as the child's, while it
        // lands in the memory it shares with its parent (`crate::vfork`).
        return Err(Errno::ENOMEM);
    }
    let req = Request::Shmat {
        shmid,
        addr: wanted as u64,
        flags,
    };
    let (resp, fd) = call(&req)?;
    let Response::ShmAttached {
        addr,
        len,
        read_only,
        ..
    } = check(resp)?
    else {
        return Err(Errno::from_raw(libc::EIO));
    };
    let undo = |e: Errno| {
        let _ = call(&Request::Shmdt { addr });
        Err(e)
    };
    let Some(fd) = fd else {
        return undo(Errno::ENOMEM);
    };
    let mut prot = libc::PROT_READ;
    if !read_only {
        prot |= libc::PROT_WRITE;
    }
    if flags & SHM_EXEC != 0 {
        prot |= libc::PROT_EXEC;
    }
    let mut map_flags = libc::MAP_SHARED;
    if wanted != 0 {
        map_flags |= if flags & SHM_REMAP != 0 {
            libc::MAP_FIXED
        } else {
            libc::MAP_FIXED_NOREPLACE
        };
    }
    let hint = if wanted != 0 { addr as usize } else { 0 };
    let mut table = attached();
    // SAFETY: maps the segment's memfd; with MAP_FIXED only where the caller asked for
    // SHM_REMAP at that address, as shmat itself would replace the mapping there.
    let p = unsafe {
        libc::mmap(
            hint as *mut c_void,
            len as usize,
            prot,
            map_flags,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM);
        drop(table);
        return undo(Errno::from_raw(if e == libc::EEXIST {
            libc::EINVAL
        } else {
            e
        }));
    }
    let at = p as usize;
    if wanted == 0 {
        if let Err(e) = ret_of(Request::ShmMoved {
            from: addr,
            to: at as u64,
        }) {
            // SAFETY: unmaps the mapping made just above.
            unsafe { libc::munmap(p, len as usize) };
            drop(table);
            return undo(e);
        }
    }
    let end = at + len as usize;
    let overlapped: Vec<usize> = table
        .range(..end)
        .filter(|(&a, &l)| a + l > at)
        .map(|(&a, _)| a)
        .collect();
    for a in overlapped {
        table.remove(&a);
    }
    table.insert(at, len as usize);
    Ok(at as i64)
}

/// shmdt(2).
#[no_mangle]
pub extern "C-unwind" fn shmdt(shmaddr: *const c_void) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_shmdt, shmaddr) } as c_int;
    }
    let addr = shmaddr as usize;
    guard(move || {
        if crate::vfork::on_borrowed_memory() {
            // A vforked child: the attachments in the memory it shares are its parent's in
            // the daemon's books; refused before anything is unmapped (`crate::vfork`).
            return Err(Errno::EINVAL);
        }
        let mut table = attached();
        let len = *table.get(&addr).ok_or(Errno::EINVAL)?;
        // SAFETY: unmaps exactly an attachment this library mapped at `addr`.
        unsafe { libc::munmap(addr as *mut c_void, len) };
        table.remove(&addr);
        drop(table);
        ret_of(Request::Shmdt { addr: addr as u64 })
    }) as c_int
}

/// shmctl(2).
#[no_mangle]
pub extern "C-unwind" fn shmctl(shmid: c_int, cmd: c_int, buf: *mut c_void) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_shmctl, shmid, cmd, buf) } as c_int;
    }
    let buf = buf as usize;
    guard(move || {
        let set = if cmd == IPC_SET {
            copy_in(buf, abi::SHMID_DS).ok().map(|b| ShmSet {
                uid: u32_at(&b, abi::PERM_UID),
                gid: u32_at(&b, abi::PERM_GID),
                mode: u32_at(&b, abi::PERM_MODE),
            })
        } else {
            None
        };
        let out = match check(call(&Request::Shmctl { shmid, cmd, set })?.0)? {
            Response::Ret(v) => return Ok(v),
            Response::ShmStat { ret, ds } => (ret, abi::shmid_ds(&ds)),
            Response::ShmInfo { ret, info } => (ret, abi::shminfo(&info)),
            Response::ShmUsage { ret, usage } => (ret, abi::shm_info(&usage)),
            _ => return Err(Errno::from_raw(libc::EIO)),
        };
        copy_out(buf, &out.1)?;
        Ok(i64::from(out.0))
    }) as c_int
}
