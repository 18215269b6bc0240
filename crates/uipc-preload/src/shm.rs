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
//! A segment this process attached before (its mapped length kept in the table, see
//! `attach`) is attached at address 0 in one round trip instead: the library reserves a range
//! of that length (an inaccessible anonymous mapping), asks the daemon to record the
//! attachment there, and maps the memfd over the reservation (`shmat_reserved`). The daemon's
//! checks and its updates of shm_nattch, shm_atime and shm_lpid are the same; a length that
//! no longer matches (the id names another segment now) falls back to mapping where the
//! kernel picks and `ShmMoved`.
//!
//! The process keeps its attachments in the table of [`crate::attach`] (start address ->
//! length); shmdt of an address not in it is EINVAL without asking the daemon. The table is
//! copied into a child by fork, matching what the daemon records for the child (see `fork`).
//! shmat holds the table from its mapping to its `ShmMoved` report (the one-round-trip shmat
//! from its reservation to its mapping), and shmdt from its
//! lookup to the daemon's answer, so that the table, the process's mappings and the daemon's
//! records change together: a fork copies a table that matches the records, and a shmat never
//! maps at an address whose old attachment the daemon still records. The table's guard blocks
//! signals meanwhile, so a handler's own shmat or shmdt never waits for its own thread.
//!
//! Nothing here allocates (see `conn` and `attach`).

/// Re-exported for `fork`, which holds the table across the fork.
pub use crate::attach::attached;
use crate::attach::AttachGuard;
use crate::conn::{call, check, enabled, ret_of};
use crate::ctl;
use crate::guard::guard;
use libc::{c_int, c_void, size_t};
use std::os::fd::IntoRawFd;
use uipc::ipc::consts::*;
use uipc::Errno;
use uipc_proto::{Request, Response};

/// shmget(2).
#[no_mangle]
pub extern "C-unwind" fn shmget(key: libc::key_t, size: size_t, shmflg: c_int) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_shmget, key, size, shmflg) } as c_int;
    }
    let saved = crate::guard::errno_now();
    let get = uipc::ipc::keytable::Get::Shm(size as u64);
    if let Some(r) = crate::keyfast::get(get, key, shmflg) {
        return crate::guard::finish(r, saved) as c_int;
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
    if wanted == 0 && flags & SHM_REMAP == 0 {
        let mut table = attached();
        if let Some(len) = table.known_len(shmid) {
            if let Some(done) = shmat_reserved(&mut table, shmid, len, flags) {
                return done;
            }
        }
    }
    let req = Request::Shmat {
        shmid,
        addr: wanted as u64,
        flags,
    };
    let (resp, fd) = call_attach(&req)?;
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
    // Closed by number at the end, not through the C library's `close` (which this library
    // wraps for file locks: the daemon has nothing to learn about this descriptor).
    let fd = crate::slots::ClosedQuietly(fd.into_raw_fd());
    let prot = prot_of(read_only, flags);
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
    // Room for the entry first: once mapped and reported, the attachment must be recorded.
    if let Err(e) = table.reserve() {
        drop(table);
        return undo(e);
    }
    // SAFETY: maps the segment's memfd; with MAP_FIXED only where the caller asked for
    // SHM_REMAP at that address, as shmat itself would replace the mapping there.
    let p = unsafe { libc::mmap(hint as *mut c_void, len as usize, prot, map_flags, fd.0, 0) };
    if p == libc::MAP_FAILED {
        let e = last_errno();
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
            unsafe { crate::kernel::kernel_munmap(p, len as usize) };
            drop(table);
            return undo(e);
        }
    }
    table.remove_overlapping(at, at + len as usize);
    table.insert_reserved(at, len as usize);
    table.remember_len(shmid, len as usize);
    Ok(at as i64)
}

/// `call` of a Shmat request, whose reply brings the segment's memfd. A process at its
/// descriptor limit gets the reply without it: the attachment is undone and made again with
/// room for the descriptor (`crate::fdroom`), else the call fails with EMFILE.
fn call_attach(req: &Request) -> Result<(Response, Option<std::os::fd::OwnedFd>), Errno> {
    let attach = || match call(req) {
        Ok((Response::ShmAttached { addr, .. }, None)) => {
            let _ = call(&Request::Shmdt { addr });
            Err(Errno::from_raw(libc::EMFILE))
        }
        r => r,
    };
    crate::fdroom::with_room(attach, |r| {
        r.as_ref().is_err_and(|e| e.raw() == libc::EMFILE)
    })
}

/// The protection of an attachment: read, plus write unless read-only, plus execute for
/// SHM_EXEC.
fn prot_of(read_only: bool, flags: c_int) -> c_int {
    let mut prot = libc::PROT_READ;
    if !read_only {
        prot |= libc::PROT_WRITE;
    }
    if flags & SHM_EXEC != 0 {
        prot |= libc::PROT_EXEC;
    }
    prot
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOMEM)
}

/// shmat at an address of the kernel's choice, in one round trip: with the segment's mapped
/// length from this process's last attach of it (`guess`), an inaccessible anonymous mapping
/// reserves the range first, the daemon records the attachment there (an explicit address:
/// the same checks in the same order as for address 0, as the range overlaps no attachment),
/// and the memfd is mapped over the reservation. If the id names a segment of another length
/// now, the reservation is dropped, the memfd mapped where the kernel picks and the record
/// moved (`ShmMoved`), as the general path does. `None`: no reservation could be made (the
/// caller takes the general path, which reports errors in Linux's order). The table is held
/// throughout, so a fork copies a table that matches the daemon's records.
fn shmat_reserved(
    table: &mut AttachGuard,
    shmid: c_int,
    guess: usize,
    flags: c_int,
) -> Option<Result<i64, Errno>> {
    table.reserve().ok()?;
    // SAFETY: a new private, inaccessible anonymous mapping that nothing else refers to.
    let r = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            guess,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return None;
    }
    // The reservation, unmapped at most once, unless the segment is mapped over it.
    let mut reserved = Some(r);
    let release = |reserved: &mut Option<*mut c_void>| {
        if let Some(r) = reserved.take() {
            // SAFETY: unmaps this function's own reservation, not mapped over.
            unsafe { crate::kernel::kernel_munmap(r, guess) };
        }
    };
    let req = Request::Shmat {
        shmid,
        addr: r as u64,
        flags,
    };
    let answer = call_attach(&req).and_then(|(resp, fd)| match check(resp)? {
        Response::ShmAttached {
            addr,
            len,
            read_only,
            ..
        } => Ok((addr, len as usize, read_only, fd)),
        _ => Err(Errno::from_raw(libc::EIO)),
    });
    let (addr, len, read_only, fd) = match answer {
        Ok(a) => a,
        Err(e) => {
            release(&mut reserved);
            return Some(Err(e));
        }
    };
    let undo = |e: Errno, reserved: &mut Option<*mut c_void>| {
        let _ = call(&Request::Shmdt { addr });
        release(reserved);
        Some(Err(e))
    };
    let Some(fd) = fd else {
        return undo(Errno::ENOMEM, &mut reserved);
    };
    // Closed by number, as in `shmat_uipc`.
    let fd = crate::slots::ClosedQuietly(fd.into_raw_fd());
    let prot = prot_of(read_only, flags);
    let at = if len == guess && addr == r as u64 {
        // SAFETY: maps the memfd over this function's own reservation, exactly.
        let p = unsafe { libc::mmap(r, len, prot, libc::MAP_SHARED | libc::MAP_FIXED, fd.0, 0) };
        if p == libc::MAP_FAILED {
            return undo(Errno::from_raw(last_errno()), &mut reserved);
        }
        reserved = None;
        p as usize
    } else {
        release(&mut reserved);
        // SAFETY: maps the memfd where the kernel picks.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.0, 0) };
        if p == libc::MAP_FAILED {
            return undo(Errno::from_raw(last_errno()), &mut reserved);
        }
        if let Err(e) = ret_of(Request::ShmMoved {
            from: addr,
            to: p as u64,
        }) {
            // SAFETY: unmaps the mapping made just above.
            unsafe { crate::kernel::kernel_munmap(p, len) };
            return undo(e, &mut reserved);
        }
        p as usize
    };
    debug_assert!(reserved.is_none());
    table.remove_overlapping(at, at + len);
    table.insert_reserved(at, len);
    table.remember_len(shmid, len);
    Some(Ok(at as i64))
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
        // The table stays held until the daemon has dropped its record too: else another
        // thread's (or a handler's) shmat could map at the address just freed and find the
        // daemon's record of the old attachment still there.
        let mut table = attached();
        let len = table.get(addr).ok_or(Errno::EINVAL)?;
        // SAFETY: unmaps exactly an attachment this library mapped at `addr`.
        unsafe { crate::kernel::kernel_munmap(addr as *mut c_void, len) };
        table.remove(addr);
        ret_of(Request::Shmdt { addr: addr as u64 })
    }) as c_int
}

/// shmctl(2).
#[no_mangle]
pub extern "C-unwind" fn shmctl(shmid: c_int, cmd: c_int, buf: *mut c_void) -> c_int {
    ctl::call_ctl(libc::SYS_shmctl, shmid, cmd, buf, |set| Request::Shmctl {
        shmid,
        cmd,
        set: set.map(ctl::SetDs::shm_set),
    })
}
