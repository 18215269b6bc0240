//! The host side: isolation and identity switching.

/// Moves the process into a fresh IPC namespace. Returns whether that worked (needs root).
pub fn enter_private_ipc_namespace() -> bool {
    // SAFETY: unshare takes no pointers; on failure nothing changed.
    unsafe { libc::unshare(libc::CLONE_NEWIPC) == 0 }
}

/// Runs `f` with this thread's effective uid/gid switched to the unprivileged identity when
/// `as_user` is set, and switches back before returning.
///
/// Raw system calls change only the calling thread's credentials (glibc's wrappers would
/// broadcast to every thread). Going from euid 0 to another clears the effective
/// capabilities; coming back restores them from the permitted set.
pub fn as_user<R>(as_user: bool, f: impl FnOnce() -> R) -> R {
    if !as_user {
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
