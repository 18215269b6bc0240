//! The `/proc` views ([`uipc_proto::procfs`]): the text of `/proc/sysvipc/*`, uipc's part of
//! `/proc/locks` and the IPC sysctls of the caller's namespace, and writes to those sysctls.
//!
//! Who may write a sysctl is what Linux's `ipc_permissions` (ipc/ipc_sysctl.c) makes of the
//! file's mode and `proc_sys_permission`'s `test_perm` then checks: the `*_next_id` files are
//! writable by a caller with CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN and by nobody else (mode
//! 0444); the others (mode 0644) by effective uid 0, else by nobody (a member of group 0 gets
//! the group's bits, read only). No capability lets anyone else write: EACCES, at open.
//! The text of a write is parsed and range-checked by the engine ([`IpcNamespace::sysctl_write`]).

use crate::pidns::PidView;
use uipc::ipc::{IpcNamespace, Sysctl};
use uipc::locks::LockManager;
use uipc::{Cred, Errno};
use uipc_proto::{ProcFile, ProcRequest, Response};

fn is_next_id(s: Sysctl) -> bool {
    matches!(s, Sysctl::SemNextId | Sysctl::MsgNextId | Sysctl::ShmNextId)
}

/// The open-for-write check of sysctl `s` for `cred`.
fn may_write(ns: &IpcNamespace, cred: &Cred, s: Sysctl) -> Result<(), Errno> {
    if is_next_id(s) {
        // The engine's own check: an empty write changes nothing.
        return ns.sysctl_write(cred, s, "");
    }
    if cred.euid == 0 {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Serves one `/proc` request; the pids of `/proc/sysvipc/{msg,shm}` are numbered as the
/// caller's pid namespace numbers them (`view`, as for IPC_STAT).
pub fn serve(
    ns: &IpcNamespace,
    locks: &LockManager,
    cred: &Cred,
    view: &dyn Fn() -> Option<PidView>,
    req: ProcRequest,
) -> Response {
    let result = match req {
        ProcRequest::Read(file) => {
            let pid = |p| crate::pidns::translated(view(), p);
            return Response::Text(
                match file {
                    ProcFile::SysvSem => ns.proc_sysvipc_sem(),
                    ProcFile::SysvMsg => ns.proc_sysvipc_msg_as(&pid),
                    ProcFile::SysvShm => ns.proc_sysvipc_shm_as(&pid),
                    ProcFile::Locks => locks.proc_locks(),
                    ProcFile::Sysctl(s) => ns.sysctl_read(s) + "\n",
                }
                .into_bytes(),
            );
        }
        ProcRequest::MayWrite(s) => may_write(ns, cred, s).map(|()| 0),
        ProcRequest::Write(s, text) => may_write(ns, cred, s).and_then(|()| {
            // The kernel reads at most a page of a write; invalid UTF-8 is no number.
            let text = std::str::from_utf8(&text).map_err(|_| Errno::EINVAL)?;
            ns.sysctl_write_taken(cred, s, text).map(|n| n as i64)
        }),
    };
    match result {
        Ok(v) => Response::Ret(v),
        Err(e) => Response::Error(e.raw()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_follow_linux_permissions_and_ranges() {
        let ns = IpcNamespace::new();
        let locks = LockManager::new();
        let root = Cred::root(1);
        let user = Cred::user(2, 1000, 1000);
        let write = |cred: &Cred, s, t: &str| {
            serve(&ns, &locks, cred, &|| None, ProcRequest::Write(s, t.into()))
        };
        assert_eq!(write(&root, Sysctl::MsgMni, "100\n"), Response::Ret(4));
        assert_eq!(
            serve(
                &ns,
                &locks,
                &user,
                &|| None,
                ProcRequest::Read(ProcFile::Sysctl(Sysctl::MsgMni))
            ),
            Response::Text(b"100\n".to_vec())
        );
        assert_eq!(
            write(&user, Sysctl::MsgMni, "5"),
            Response::Error(libc::EACCES)
        );
        assert_eq!(
            serve(
                &ns,
                &locks,
                &user,
                &|| None,
                ProcRequest::MayWrite(Sysctl::ShmMax)
            ),
            Response::Error(libc::EACCES)
        );
        assert_eq!(
            write(&root, Sysctl::MsgMni, "-1"),
            Response::Error(libc::EINVAL)
        );
        assert_eq!(write(&root, Sysctl::ShmNextId, "7"), Response::Ret(1));
        assert_eq!(
            write(&user, Sysctl::ShmNextId, "7"),
            Response::Error(libc::EACCES)
        );
        assert_eq!(ns.sysctl_read(Sysctl::MsgMni), "100");
    }
}
