//! semget, msgget and shmget of an existing key answered in this process from the key table
//! the daemon publishes after the semaphore arena (`uipc::ipc::keytable`; ARCHITECTURE.md "The
//! key table"). Every case the table cannot answer (no table, IPC_PRIVATE, a key it does not
//! have, a denial that CAP_IPC_OWNER may lift) goes to the daemon as before.
//!
//! What the decision needs of the caller is read from the kernel at the call, with raw system
//! calls (not the C library's, which another preload may fake), each only when the decision
//! reaches it: `geteuid` when the flag asks for a permission bit, `getegid` and `getgroups`
//! when the caller is not the owner and the group and other classes differ, `capget` when the
//! mode denies. So an id, group or capability change made by any means counts at the next
//! call. Nothing here allocates or locks (a stack array for the groups): async-signal-safe.
//!
//! Only a caller in the daemon's user namespace is answered here (its ids are numbered as the
//! daemon's and its capabilities count there). Its namespace (the inode of
//! `/proc/self/ns/user`) is read once and kept with the pid and the id epoch it was read
//! under ([`crate::ids::epoch`]: unshare and setns move it, and a clone child has another
//! pid); a process that enters another user namespace by its own system call instructions is
//! not seen (the limit `ids.rs` states for ids).

use crate::kernel::kernel_sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use uipc::ipc::keytable::{decide, Get, Who};
use uipc::ipc::sem::fast::Fast;
use uipc::Errno;

/// Supplementary groups read into a stack array; a caller with more goes to the daemon.
const GROUPS: usize = 64;
/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_V3: u32 = 0x2008_0522;
/// CAP_IPC_OWNER's bit.
const CAP_IPC_OWNER: u32 = 15;

/// The user namespace last read: pid (bits 32-63), id epoch (bits 1-31), bit 0 set once
/// read; 0: not read.
static USERNS: AtomicU64 = AtomicU64::new(0);
/// The inode read with [`USERNS`]'s last value.
static USERNS_INO: AtomicU64 = AtomicU64::new(0);

/// The inode of this process's user namespace, read from the kernel (`None` if it cannot be).
fn read_user_ns() -> Option<u64> {
    // SAFETY: a zeroed `stat` is a valid value to pass for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let path = c"/proc/self/ns/user";
    let r = kernel_sys!(
        libc::SYS_newfstatat,
        libc::AT_FDCWD,
        path.as_ptr(),
        &mut st as *mut libc::stat,
        0
    );
    (r == 0).then_some(st.st_ino)
}

/// The calling thread, as the kernel says at this call.
struct Me {
    euid: Cell<Option<u32>>,
}

impl Who for Me {
    fn user_ns(&self) -> Option<u64> {
        let pid = crate::vfork::pid() as u32 as u64;
        let tag = pid << 32 | (crate::ids::epoch() & 0x7fff_ffff) << 1;
        let kept = USERNS.load(Ordering::Acquire);
        if kept & !1 == tag && kept != 0 {
            return Some(USERNS_INO.load(Ordering::Acquire));
        }
        let ino = read_user_ns()?;
        // Two threads that race here read the same namespace (changing it needs a process of
        // one thread); the inode is stored before the tag that vouches for it.
        USERNS_INO.store(ino, Ordering::Release);
        USERNS.store(tag | 1, Ordering::Release);
        Some(ino)
    }

    fn euid(&self) -> u32 {
        if let Some(e) = self.euid.get() {
            return e;
        }
        let e = kernel_sys!(libc::SYS_geteuid) as u32;
        self.euid.set(Some(e));
        e
    }

    fn in_group(&self, a: u32, b: u32) -> Option<bool> {
        let egid = kernel_sys!(libc::SYS_getegid) as u32;
        if egid == a || egid == b {
            return Some(true);
        }
        let mut groups = [0u32; GROUPS];
        let n = kernel_sys!(libc::SYS_getgroups, GROUPS, groups.as_mut_ptr());
        let n = usize::try_from(n).ok()?;
        Some(groups.get(..n)?.iter().any(|&g| g == a || g == b))
    }

    fn has_ipc_owner(&self) -> Option<bool> {
        let mut head = [CAP_V3, 0u32];
        // Two structs of (effective, permitted, inheritable).
        let mut data = [0u32; 6];
        if kernel_sys!(libc::SYS_capget, head.as_mut_ptr(), data.as_mut_ptr()) != 0 {
            return None;
        }
        Some(data[0] & (1 << CAP_IPC_OWNER) != 0)
    }
}

/// `Some(result)` if the key table answers this `*get` here.
pub fn get(get: Get, key: libc::key_t, flag: libc::c_int) -> Option<Result<i64, Errno>> {
    if key == 0 {
        return None;
    }
    let table = crate::semfast::key_table()?;
    let me = Me {
        euid: Cell::new(None),
    };
    let answer = crate::guard::guarded(|| match decide(&table, get, key, flag, &me) {
        Fast::Done(r) => Ok(Some(r.map(i64::from))),
        Fast::Slow => Ok(None),
    });
    let r = answer.ok().flatten()?;
    crate::semfast::served();
    Some(r)
}
