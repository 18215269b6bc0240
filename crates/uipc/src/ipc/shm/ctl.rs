//! `shmctl(2)`: every command, with Linux's checks in Linux's order (`ksys_shmctl`,
//! `shmctl_stat`, `shmctl_down`, `shmctl_do_lock`, `shmctl_ipc_info`, `shmctl_shm_info`).
//!
//! A negative id or command is EINVAL before anything else, even for the *_INFO commands;
//! an unknown command is EINVAL. IPC_RMID and IPC_SET take the registry write lock, look the
//! id up (EINVAL), lock the segment and check ownership (EPERM). STAT, LOCK and UNLOCK take
//! no registry lock: lookup, segment lock, then the deleted mark (EIDRM). The *_INFO commands
//! read under the registry read lock and return the highest index in use.

use super::super::consts::{
    IPC_INFO, IPC_RMID, IPC_SET, IPC_STAT, PAGE_SIZE, SHMMIN, SHM_DEST, SHM_INFO, SHM_LOCK,
    SHM_LOCKED, SHM_STAT, SHM_STAT_ANY, SHM_UNLOCK,
};
use super::super::perm::PERM_READ;
use crate::ipc::IpcNamespace;
use crate::sync::Ordering::Relaxed;
use crate::{Cap, Cred, Errno, IpcId, IpcIdx, Result};

pub use uipc_abi::ipc::shm::{ShmInfo, ShmSet, ShmUsage, ShmidDs};

/// What `shmctl` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShmctlOut {
    /// IPC_RMID, IPC_SET, SHM_LOCK, SHM_UNLOCK: 0.
    Done,
    /// IPC_STAT (0) and SHM_STAT / SHM_STAT_ANY (the id), with the buffer.
    Stat(i32, ShmidDs),
    /// IPC_INFO: the highest index in use, and the limits.
    Info(i32, ShmInfo),
    /// SHM_INFO: the highest index in use, and the usage.
    Usage(i32, ShmUsage),
}

impl ShmctlOut {
    /// The system call's return value.
    pub fn ret(&self) -> i32 {
        match self {
            ShmctlOut::Done => 0,
            ShmctlOut::Stat(r, _) | ShmctlOut::Info(r, _) | ShmctlOut::Usage(r, _) => *r,
        }
    }
}

impl IpcNamespace {
    /// `shmctl(shmid, cmd, buf)`. See shmctl(2). `set` is IPC_SET's buffer (None: EFAULT);
    /// the other commands ignore it.
    pub fn shmctl(
        &self,
        cred: &Cred,
        shmid: i32,
        cmd: i32,
        set: Option<&ShmSet>,
    ) -> Result<ShmctlOut> {
        if cmd < 0 || shmid < 0 {
            return Err(Errno::EINVAL);
        }
        let id = IpcId::new(shmid);
        match cmd {
            IPC_INFO => {
                let st = self.shm.registry.read();
                let l = &self.limits;
                let mni = l.shmmni() as u64;
                let info = ShmInfo {
                    shmmax: l.shmmax(),
                    shmmin: SHMMIN,
                    shmmni: mni,
                    shmseg: mni,
                    shmall: l.shmall(),
                };
                Ok(ShmctlOut::Info(st.max_idx(), info))
            }
            SHM_INFO => {
                let all = self.shm.registry.snapshot();
                let st = self.shm.registry.read();
                let mut u = ShmUsage {
                    used_ids: st.in_use() as i32,
                    shm_tot: self.shm.tot_pages.load(Relaxed),
                    ..Default::default()
                };
                for seg in &all {
                    u.shm_rss += seg.memory.resident_pages();
                    u.shm_swp += seg.memory.swapped_pages();
                }
                Ok(ShmctlOut::Usage(st.max_idx(), u))
            }
            IPC_STAT | SHM_STAT | SHM_STAT_ANY => self.shm_stat(cred, id, cmd),
            IPC_SET => {
                let set = set.ok_or(Errno::EFAULT)?;
                self.shm_down(cred, id, cmd, Some(*set))
            }
            IPC_RMID => self.shm_down(cred, id, cmd, None),
            SHM_LOCK | SHM_UNLOCK => self.shm_lock_cmd(cred, id, cmd),
            _ => Err(Errno::EINVAL),
        }
    }

    /// IPC_STAT of set `id`; SHM_STAT and SHM_STAT_ANY take the number as an index.
    fn shm_stat(&self, cred: &Cred, id: IpcId, cmd: i32) -> Result<ShmctlOut> {
        let reg = &self.shm.registry;
        let seg = if cmd == IPC_STAT {
            reg.lookup(id)?
        } else {
            // Not masked, as Linux's SHM_STAT: an index past IPCMNI finds nothing (`shmctl`
            // refused a negative one).
            reg.lookup_index(IpcIdx::new(id.get() as u32))?
        };
        let s = seg.lock();
        if cmd != SHM_STAT_ANY {
            s.perm.check(cred, PERM_READ)?;
        }
        if s.deleted {
            return Err(Errno::EIDRM);
        }
        let id = seg.id();
        let ds = ShmidDs {
            perm: s
                .perm
                .stat(seg.header.key().get(), (id as u32) >> reg.layout().shift),
            segsz: seg.size,
            atime: s.atime,
            dtime: s.dtime,
            ctime: s.ctime,
            cpid: s.cpid,
            lpid: s.lpid,
            nattch: s.nattch,
        };
        Ok(ShmctlOut::Stat(if cmd == IPC_STAT { 0 } else { id }, ds))
    }

    /// IPC_RMID / IPC_SET (`shmctl_down`).
    fn shm_down(&self, cred: &Cred, id: IpcId, cmd: i32, set: Option<ShmSet>) -> Result<ShmctlOut> {
        let reg = &self.shm.registry;
        let mut st = reg.write();
        let seg = reg.lookup(id)?;
        let mut s = seg.lock();
        s.perm.check_owner(cred)?;
        if let Some(v) = set.filter(|_| cmd == IPC_SET) {
            s.perm.set(v.uid, v.gid, v.mode)?;
            s.ctime = self.now();
            reg.set_key_perm(&mut st, &seg.header, &s.perm);
        } else if s.nattch == 0 {
            self.shm_destroy(&mut st, &seg, s);
        } else {
            s.perm.mode |= SHM_DEST;
            drop(s);
            reg.set_key_private(&mut st, &seg);
        }
        Ok(ShmctlOut::Done)
    }

    /// SHM_LOCK / SHM_UNLOCK (`shmctl_do_lock`).
    fn shm_lock_cmd(&self, cred: &Cred, id: IpcId, cmd: i32) -> Result<ShmctlOut> {
        let seg = self.shm.registry.lookup(id)?;
        let mut s = seg.lock();
        if s.deleted {
            return Err(Errno::EIDRM);
        }
        let privileged = cred.has_cap(Cap::IPC_LOCK);
        if !privileged {
            if !s.perm.is_owner(cred) {
                return Err(Errno::EPERM);
            }
            if cmd == SHM_LOCK && cred.rlimit_memlock == 0 {
                return Err(Errno::EPERM);
            }
        }
        if cmd == SHM_LOCK {
            if s.locked_by.is_none() {
                let limit = match cred.rlimit_memlock {
                    crate::cred::RLIM_INFINITY => None,
                    _ if privileged => None,
                    l => Some(l / PAGE_SIZE),
                };
                if !self.shm_lock_charge(cred.uid, seg.pages, limit) {
                    return Err(Errno::ENOMEM);
                }
                s.locked_by = Some(cred.uid);
                s.perm.mode |= SHM_LOCKED;
            }
        } else if let Some(uid) = s.locked_by.take() {
            self.shm_unlock_charge(uid, seg.pages);
            s.perm.mode &= !SHM_LOCKED;
        }
        Ok(ShmctlOut::Done)
    }
}
