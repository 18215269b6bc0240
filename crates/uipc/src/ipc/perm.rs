//! Ownership and mode checks shared by the three object types (`ipc/util.c`: `ipcperms`,
//! `ipcctl_obtain_check`, `ipc_update_perm`).
//!
//! An [`IpcPerm`] lives inside each object's locked state; every function here expects that
//! lock to be held by the caller.

use crate::{Cap, Cred, Errno, Result};

/// The owner, creator and mode of an object (`kern_ipc_perm` without key and seq).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IpcPerm {
    /// Owner user id (changed by IPC_SET).
    pub uid: u32,
    /// Owner group id (changed by IPC_SET).
    pub gid: u32,
    /// Creator user id (never changes).
    pub cuid: u32,
    /// Creator group id (never changes).
    pub cgid: u32,
    /// Mode: the low 9 bits are permissions; SHM_DEST and SHM_LOCKED ride above them.
    pub mode: u32,
}

/// The request of `ipcperms`: read, write or both, in the `S_IRUGO`/`S_IWUGO` sense.
pub const PERM_READ: i32 = 0o444;
/// Write permission request.
pub const PERM_WRITE: i32 = 0o222;

impl IpcPerm {
    /// A new object's permissions: owner and creator are the caller's effective ids.
    pub fn new(cred: &Cred, flag: i32) -> IpcPerm {
        IpcPerm {
            uid: cred.euid,
            gid: cred.egid,
            cuid: cred.euid,
            cgid: cred.egid,
            mode: (flag & 0o777) as u32,
        }
    }

    /// Whether `cred`'s effective uid is the owner or the creator.
    pub fn is_owner(&self, cred: &Cred) -> bool {
        cred.euid == self.uid || cred.euid == self.cuid
    }

    /// `ipcperms`: EACCES unless the one applicable class (owner, else group, else other)
    /// grants every requested bit, or the caller has CAP_IPC_OWNER.
    pub fn check(&self, cred: &Cred, flag: i32) -> Result<()> {
        let requested = ((flag >> 6) | (flag >> 3) | flag) as u32 & 7;
        let granted = if self.is_owner(cred) {
            self.mode >> 6
        } else if cred.in_group(self.gid) || cred.in_group(self.cgid) {
            self.mode >> 3
        } else {
            self.mode
        } & 7;
        if requested & !granted != 0 && !cred.has_cap(Cap::IPC_OWNER) {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    /// `ipcctl_obtain_check` for IPC_SET / IPC_RMID: owner or creator, or CAP_SYS_ADMIN; EPERM.
    pub fn check_owner(&self, cred: &Cred) -> Result<()> {
        if self.is_owner(cred) || cred.has_cap(Cap::SYS_ADMIN) {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    /// The `ipc_perm` that IPC_STAT reports: these permissions with the object's key and
    /// sequence number.
    pub fn stat(&self, key: i32, seq: u32) -> IpcPermStat {
        IpcPermStat {
            key,
            uid: self.uid,
            gid: self.gid,
            cuid: self.cuid,
            cgid: self.cgid,
            mode: self.mode,
            seq,
        }
    }

    /// IPC_SET's copy of uid, gid and the low 9 mode bits. EINVAL for an unmappable id (-1).
    /// The caller updates ctime.
    pub fn set(&mut self, uid: u32, gid: u32, mode: u32) -> Result<()> {
        if uid == u32::MAX || gid == u32::MAX {
            return Err(Errno::EINVAL);
        }
        self.uid = uid;
        self.gid = gid;
        self.mode = (self.mode & !0o777) | (mode & 0o777);
        Ok(())
    }
}

pub use uipc_abi::ipc::IpcPermStat;

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(mode: u32) -> IpcPerm {
        IpcPerm {
            uid: 1000,
            gid: 100,
            cuid: 1000,
            cgid: 100,
            mode,
        }
    }

    #[test]
    fn exactly_one_class_applies_even_when_other_grants_more() {
        let p = perm(0o604);
        let member = Cred {
            groups: vec![100],
            ..Cred::user(2, 2000, 2000)
        };
        let outsider = Cred::user(3, 3000, 3000);
        assert_eq!(p.check(&member, PERM_READ), Err(Errno::EACCES));
        assert_eq!(p.check(&outsider, PERM_READ), Ok(()));
        assert_eq!(p.check(&outsider, PERM_WRITE), Err(Errno::EACCES));
        assert_eq!(
            p.check(&Cred::user(1, 1000, 1), PERM_READ | PERM_WRITE),
            Ok(())
        );
        assert_eq!(
            p.check(&outsider, 0),
            Ok(()),
            "asking for nothing always passes"
        );
    }

    #[test]
    fn cap_ipc_owner_overrides_mode_but_not_ownership() {
        let p = perm(0);
        let cred = Cred {
            caps: crate::CapSet::EMPTY.with(Cap::IPC_OWNER),
            ..Cred::user(4, 4000, 4000)
        };
        assert_eq!(p.check(&cred, PERM_READ | PERM_WRITE), Ok(()));
        assert_eq!(p.check_owner(&cred), Err(Errno::EPERM));
        let admin = Cred {
            caps: crate::CapSet::EMPTY.with(Cap::SYS_ADMIN),
            ..Cred::user(4, 4000, 4000)
        };
        assert_eq!(p.check_owner(&admin), Ok(()));
    }

    #[test]
    fn set_moves_ownership_and_keeps_the_creator() {
        let mut p = perm(0o1600);
        p.set(2000, 200, 0o7644).unwrap();
        assert_eq!((p.uid, p.gid, p.cuid, p.mode), (2000, 200, 1000, 0o1644));
        assert_eq!(
            p.check_owner(&Cred::user(1, 1000, 1)),
            Ok(()),
            "the creator keeps the right"
        );
        assert_eq!(p.check_owner(&Cred::user(1, 3000, 1)), Err(Errno::EPERM));
        assert_eq!(p.set(u32::MAX, 0, 0), Err(Errno::EINVAL));
    }
}
