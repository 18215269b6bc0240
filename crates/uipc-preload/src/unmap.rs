//! munmap(2) over shared-memory attachments: an unmap of exactly one whole attachment (its
//! start, and a length that rounds up to its mapped length) detaches it as shmdt does, since
//! Linux's munmap closes the segment's memory area: shm_nattch drops, shm_dtime and shm_lpid
//! are set, and a segment marked for removal goes with its last attachment. Every other unmap
//! is the kernel's alone: memory that holds no attachment, and a range that covers part of
//! one or more than one, which uipc does not follow (crate doc, "Not supported").
//!
//! The kernel unmaps first, with its own checks and errno; the attachment is forgotten and
//! reported (`Request::Shmdt`) only if that succeeded. The table is held from the lookup to
//! the daemon's answer, as shmdt holds it (see `shm`), so a shmat of another thread never maps
//! at the freed address while the daemon still records the old attachment there.
//!
//! A process without attachments pays one atomic load ([`crate::attach::maybe_attached`])
//! before the kernel's munmap. The library's own unmaps go through [`kernel_munmap`]: under
//! `LD_PRELOAD` the C library's `munmap` symbol is this export, and shmat, shmdt and the
//! table's growth unmap while holding the table, which this export takes.

use crate::attach::attached;
use crate::conn::ret_of;
use crate::kernel::kernel_munmap;
use libc::{c_int, c_void, size_t};
use uipc::Errno;
use uipc_proto::Request;

const PAGE: usize = 4096;

/// munmap(2).
#[no_mangle]
pub extern "C-unwind" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // A vforked child's attachments are its parent's in the daemon's books (`crate::vfork`).
    if !crate::attach::maybe_attached() || crate::vfork::on_borrowed_memory() {
        // SAFETY: the caller's munmap, with its own obligations.
        return unsafe { kernel_munmap(addr, len) };
    }
    crate::guard::guard(move || unmap_uipc(addr as usize, len)) as c_int
}

fn unmap_uipc(addr: usize, len: usize) -> Result<i64, Errno> {
    let mut table = attached();
    let rounded = len.checked_add(PAGE - 1).map(|n| n & !(PAGE - 1));
    let whole = table
        .get(addr)
        .is_some_and(|mapped| Some(mapped.next_multiple_of(PAGE)) == rounded);
    if !whole {
        drop(table);
        // SAFETY: the caller's munmap, with its own obligations.
        return unmapped(unsafe { kernel_munmap(addr as *mut c_void, len) });
    }
    // SAFETY: the caller's munmap of a whole attachment, which it gives up as with shmdt.
    unmapped(unsafe { kernel_munmap(addr as *mut c_void, len) })?;
    table.remove(addr);
    // The memory is gone whatever the daemon answers: munmap succeeded.
    let _ = ret_of(Request::Shmdt { addr: addr as u64 });
    Ok(0)
}

/// The kernel's munmap result as a `Result`.
fn unmapped(r: c_int) -> Result<i64, Errno> {
    if r == 0 {
        Ok(0)
    } else {
        Err(Errno::from_raw(crate::guard::errno_now()))
    }
}
