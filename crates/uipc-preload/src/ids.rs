//! The effective uid and gid each frame's SCM_CREDENTIALS carries, kept instead of asked of
//! the kernel on every call.
//!
//! The daemon judges a call by the ids its frame carries, and the kernel checks at each send
//! that the sender holds them (one of its real, effective or saved ids: EPERM otherwise; an id
//! its user namespace cannot map: EINVAL). So the ids are verified per call whatever the
//! library sends; what the library must get right is to send the *effective* ones, as they
//! are at the call. Each thread keeps the pair it last read with the [`EPOCH`] and pid it read
//! them under, and reads them again (geteuid and getegid, raw system calls) when either moved:
//! - [`EPOCH`] is bumped before and after each id-changing call that passes through the
//!   library: the set*id exports below (glibc applies them to every thread), `syscall()` with
//!   their numbers (which changes only the calling thread: every thread reads again, so each
//!   gets its own), unshare and setns (a new user namespace numbers the ids anew);
//! - the pid ([`crate::vfork::pid`]) differs in a forked child (one read, same ids) and in a
//!   vforked child, which runs on its parent's thread-locals: its pair never passes for the
//!   parent's;
//! - a frame the kernel refuses (EPERM, EINVAL) is sent again once with ids read afresh
//!   (`uipc_proto::transport::set_id_source`), which covers a process that dropped an id by
//!   a system call of its own instructions.
//!
//! What stays out of sight: a process that changes its effective ids with its own system call
//! instructions (not through the C library nor `syscall()`) while keeping the old ones as its
//! real or saved ids is judged by the old effective ids until its next id change through the
//! library (listed in the crate doc's limits). It gains nothing it does not hold: the kernel
//! would let it send those ids itself.
//!
//! Async-signal-safety: a thread-local of plain `Cell`s (const, no destructor) and atomics.
//! A handler that runs between a read and its store leaves a pair just as current.

use crate::kernel::next_symbol;
use libc::{c_int, gid_t, uid_t};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bumped around every id change the library sees.
static EPOCH: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (epoch, pid, euid, egid) of this thread's last read; epoch 0: never read.
    static CACHED: Cell<(u64, i32, u32, u32)> = const { Cell::new((0, 0, 0, 0)) };
}

/// The ids may change now (call before and after the change).
pub fn may_change() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// The id epoch: it moves around every id or user-namespace change the library sees.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::SeqCst)
}

/// The effective uid and gid to send: this thread's kept pair, or (`fresh`, or kept under
/// another epoch or pid) the kernel's, kept for the next call.
pub fn effective(fresh: bool) -> (u32, u32) {
    let epoch = EPOCH.load(Ordering::SeqCst);
    let pid = crate::vfork::pid();
    let (e, p, uid, gid) = CACHED.with(Cell::get);
    if !fresh && e == epoch && p == pid {
        return (uid, gid);
    }
    let (uid, gid) = uipc_proto::transport::kernel_effective_ids();
    CACHED.with(|c| c.set((epoch, pid, uid, gid)));
    (uid, gid)
}

/// Hands [`effective`] to the transport and finds the C library's set*id functions; called
/// when the library is loaded.
pub fn prepare() {
    for (slot, name) in NAMES {
        slot.store(next_symbol(name), Ordering::Relaxed);
    }
    uipc_proto::transport::set_id_source(effective);
}

static SETUID: AtomicUsize = AtomicUsize::new(0);
static SETEUID: AtomicUsize = AtomicUsize::new(0);
static SETREUID: AtomicUsize = AtomicUsize::new(0);
static SETRESUID: AtomicUsize = AtomicUsize::new(0);
static SETGID: AtomicUsize = AtomicUsize::new(0);
static SETEGID: AtomicUsize = AtomicUsize::new(0);
static SETREGID: AtomicUsize = AtomicUsize::new(0);
static SETRESGID: AtomicUsize = AtomicUsize::new(0);

const NAMES: [(&AtomicUsize, &std::ffi::CStr); 8] = [
    (&SETUID, c"setuid"),
    (&SETEUID, c"seteuid"),
    (&SETREUID, c"setreuid"),
    (&SETRESUID, c"setresuid"),
    (&SETGID, c"setgid"),
    (&SETEGID, c"setegid"),
    (&SETREGID, c"setregid"),
    (&SETRESGID, c"setresgid"),
];

/// Whether `nr` is a system call that changes ids (`syscall()` bumps the epoch around it).
pub fn is_id_number(nr: libc::c_long) -> bool {
    matches!(
        nr,
        libc::SYS_setuid
            | libc::SYS_setreuid
            | libc::SYS_setresuid
            | libc::SYS_setgid
            | libc::SYS_setregid
            | libc::SYS_setresgid
    )
}

/// Calls the C library's definition in `slot` with `args` (one to three ids; the kernel's
/// system call `nr` with `sys_args` if there is none), the epoch bumped around it.
fn around(slot: &AtomicUsize, args: &[u32], nr: libc::c_long, sys_args: &[u32]) -> c_int {
    may_change();
    let p = slot.load(Ordering::Relaxed);
    let r = if p == 0 {
        let mut a = [0 as libc::c_long; 6];
        for (dst, &id) in a.iter_mut().zip(sys_args) {
            *dst = libc::c_long::from(id);
        }
        crate::kernel::sys(nr, a) as c_int
    } else {
        // SAFETY: a non-zero slot holds the C library's definition of the function the
        // caller names, which takes `args.len()` uid_t or gid_t (u32) arguments and returns
        // int.
        unsafe {
            match *args {
                [a] => std::mem::transmute::<usize, extern "C" fn(u32) -> c_int>(p)(a),
                [a, b] => std::mem::transmute::<usize, extern "C" fn(u32, u32) -> c_int>(p)(a, b),
                [a, b, c, ..] => {
                    std::mem::transmute::<usize, extern "C" fn(u32, u32, u32) -> c_int>(p)(a, b, c)
                }
                [] => -1,
            }
        }
    };
    may_change();
    r
}

/// The four setters of one kind of id (`uid_t` or `gid_t`): set*id(2), sete*id(3) (the
/// kernel's setres*id with the real and saved ids left as they are, -1), setre*id(2) and
/// setres*id(2), each through [`around`] with its slot of the C library's definitions.
macro_rules! id_setters {
    ($t:ty, $set:ident / $set_slot:ident / $set_sys:ident,
     $sete:ident / $sete_slot:ident,
     $setre:ident / $setre_slot:ident / $setre_sys:ident,
     $setres:ident / $setres_slot:ident / $setres_sys:ident) => {
        #[doc = concat!(stringify!($set), "(2).")]
        #[no_mangle]
        pub extern "C" fn $set(id: $t) -> c_int {
            around(&$set_slot, &[id], libc::$set_sys, &[id])
        }

        #[doc = concat!(stringify!($sete), "(3).")]
        #[no_mangle]
        pub extern "C" fn $sete(eid: $t) -> c_int {
            let keep = u32::MAX;
            around(&$sete_slot, &[eid], libc::$setres_sys, &[keep, eid, keep])
        }

        #[doc = concat!(stringify!($setre), "(2).")]
        #[no_mangle]
        pub extern "C" fn $setre(rid: $t, eid: $t) -> c_int {
            around(&$setre_slot, &[rid, eid], libc::$setre_sys, &[rid, eid])
        }

        #[doc = concat!(stringify!($setres), "(2).")]
        #[no_mangle]
        pub extern "C" fn $setres(rid: $t, eid: $t, sid: $t) -> c_int {
            let ids = [rid, eid, sid];
            around(&$setres_slot, &ids, libc::$setres_sys, &ids)
        }
    };
}

id_setters!(
    uid_t,
    setuid / SETUID / SYS_setuid,
    seteuid / SETEUID,
    setreuid / SETREUID / SYS_setreuid,
    setresuid / SETRESUID / SYS_setresuid
);
id_setters!(
    gid_t,
    setgid / SETGID / SYS_setgid,
    setegid / SETEGID,
    setregid / SETREGID / SYS_setregid,
    setresgid / SETRESGID / SYS_setresgid
);
