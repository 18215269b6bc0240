//! The host side: isolation, identity switching, the caller's own identity, and (outside a
//! private namespace) remembering and removing what the run created, also after Ctrl-C.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Whether [`as_user`] switches identities (only root can, and only root gets a namespace).
static SWITCH_IDS: AtomicBool = AtomicBool::new(true);
/// Set by SIGINT/SIGTERM: the run stops after the current operation and cleans up.
static STOP: AtomicBool = AtomicBool::new(false);
/// Host objects the run created, as (type, id), for the cleanup outside a private namespace.
static CREATED: Mutex<Vec<(Kind, i32)>> = Mutex::new(Vec::new());

/// A SysV IPC object type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A semaphore set.
    Sem,
    /// A message queue.
    Msg,
    /// A shared memory segment.
    Shm,
}

/// Chooses whether [`as_user`] switches to the unprivileged identity (root) or runs every
/// call as the caller itself (anyone else: the "permission cases" then compare as that user).
pub fn set_switch_ids(on: bool) {
    SWITCH_IDS.store(on, Ordering::Relaxed);
}

/// Notes a host object the run created (removed at the end outside a private namespace).
pub fn remember(kind: Kind, id: i32) {
    let mut created = CREATED.lock().unwrap_or_else(|e| e.into_inner());
    if !created.contains(&(kind, id)) {
        created.push((kind, id));
    }
}

/// The remembered ids of one type.
pub fn remembered(kind: Kind) -> Vec<i32> {
    let created = CREATED.lock().unwrap_or_else(|e| e.into_inner());
    created
        .iter()
        .filter(|c| c.0 == kind)
        .map(|c| c.1)
        .collect()
}

/// Removes every remembered object that still exists.
pub fn remove_remembered() {
    let created = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|e| e.into_inner()));
    for (kind, id) in created {
        // SAFETY: integer arguments and NULL buffers, which IPC_RMID ignores; a stale id only
        // makes the call fail.
        unsafe {
            match kind {
                Kind::Sem => libc::semctl(id, 0, libc::IPC_RMID),
                Kind::Msg => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                Kind::Shm => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
            };
        }
    }
}

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM end the run after the current operation (so it cleans up).
pub fn catch_stop_signals() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Whether a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// The calling process's own identity: real, effective and saved ids, supplementary groups,
/// effective capabilities, as the host judges it.
pub fn own_cred(pid: i32) -> uipc::Cred {
    let (mut uid, mut euid, mut suid, mut gid, mut egid, mut sgid) = (0, 0, 0, 0, 0, 0);
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: every pointer is to a live local of the right type; `groups` has room for the
    // count passed.
    let n = unsafe {
        libc::getresuid(&mut uid, &mut euid, &mut suid);
        libc::getresgid(&mut gid, &mut egid, &mut sgid);
        libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr())
    };
    groups.truncate(n.max(0) as usize);
    uipc::Cred {
        uid,
        euid,
        suid,
        gid,
        egid,
        sgid,
        groups,
        caps: effective_caps(),
        ..uipc::Cred::root(pid)
    }
}

/// Moves the process into a fresh IPC namespace. Returns whether that worked (needs root).
pub fn enter_private_ipc_namespace() -> bool {
    // SAFETY: unshare takes no pointers; on failure nothing changed.
    unsafe { libc::unshare(libc::CLONE_NEWIPC) == 0 }
}

/// Runs `f` with this thread's effective uid/gid switched to the unprivileged identity when
/// `as_user` is set (and switching is on, see [`set_switch_ids`]), and switches back before
/// returning.
///
/// Raw system calls change only the calling thread's credentials (glibc's wrappers would
/// broadcast to every thread). Going from euid 0 to another clears the effective
/// capabilities; coming back restores them from the permitted set.
pub fn as_user<R>(as_user: bool, f: impl FnOnce() -> R) -> R {
    if !as_user || !SWITCH_IDS.load(Ordering::Relaxed) {
        return f();
    }
    let keep = -1i64 as libc::c_long;
    // SAFETY: setresgid/setresuid take integers only; the saved ids stay 0 so we can return.
    unsafe {
        assert_eq!(
            libc::syscall(
                libc::SYS_setresgid,
                keep,
                super::USER_GID as libc::c_long,
                keep
            ),
            0
        );
        assert_eq!(
            libc::syscall(
                libc::SYS_setresuid,
                keep,
                super::USER_UID as libc::c_long,
                keep
            ),
            0
        );
    }
    let r = f();
    // SAFETY: as above; the saved uid 0 allows switching back.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_setresuid, keep, 0 as libc::c_long, keep),
            0
        );
        assert_eq!(
            libc::syscall(libc::SYS_setresgid, keep, 0 as libc::c_long, keep),
            0
        );
    }
    r
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A host result as the engine's `Result` type, from a libc return value (-1 = error).
pub fn result(ret: i64) -> Result<i64, uipc::Errno> {
    if ret == -1 {
        Err(uipc::Errno::from_raw(errno()))
    } else {
        Ok(ret)
    }
}

/// Removes every host object whose key is in the run's range (fallback cleanup when the run
/// could not get its own namespace).
pub fn remove_key_range() {
    let lo = super::KEY_BASE;
    let hi = super::KEY_BASE + 3 * 16;
    for key in lo..hi {
        // SAFETY: plain integer arguments; a NULL buffer is fine for IPC_RMID.
        unsafe {
            let id = libc::semget(key, 0, 0);
            if id >= 0 {
                libc::semctl(id, 0, libc::IPC_RMID);
            }
            let id = libc::msgget(key, 0);
            if id >= 0 {
                libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut());
            }
            let id = libc::shmget(key, 0, 0);
            if id >= 0 {
                libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
            }
        }
    }
}

/// This process's effective capabilities, from `/proc/self/status` (`CapEff`).
pub fn effective_caps() -> uipc::CapSet {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let bits = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(uipc::CapSet::ALL.bits());
    uipc::CapSet::from_bits(bits)
}
