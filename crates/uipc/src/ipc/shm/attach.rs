//! Attachments: `shmat(2)` and `shmdt(2)` (`do_shmat`, `ksys_shmdt`, `shm_close`).
//!
//! Attachments are recorded per process (see `procs`): `shmat` with address 0 hands out a
//! fresh fake address from the process's cursor; an explicit address is recorded as given.
//! No namespace-wide lock is taken unless a segment must be destroyed.
//!
//! Attach: process shard -> lookup (lock-free) -> segment lock; checks in Linux's order
//! (negative id, address alignment, ipcperms EACCES, EIDRM, overlap EINVAL), then
//! `nattch += 1`, atime, lpid, and the record. Detach: the record is removed under the shard,
//! the shard released, then the segment lock: `nattch -= 1`, dtime, lpid; if the segment may
//! now be destroyed, the registry write lock and the segment lock are taken again and the
//! condition re-checked, so concurrent detaches and IPC_RMID destroy it exactly once.

use super::super::consts::{PAGE_SIZE, SHMLBA, SHM_EXEC, SHM_RDONLY, SHM_REMAP, SHM_RND};
use super::super::perm::{PERM_READ, PERM_WRITE};
use super::procs::Attachment;
use super::{ShmMemory, ShmSegment};
use crate::ipc::IpcNamespace;
use crate::Tgid;
use crate::{Cred, Errno, IpcId, Result};
use std::sync::Arc;

/// A successful `shmat`: what the caller needs to map or use the segment.
#[derive(Clone)]
pub struct ShmAttach {
    /// The segment's id.
    pub shmid: i32,
    /// The attach address: the caller's (rounded with SHM_RND) or the engine's pick.
    pub addr: u64,
    /// `shm_segsz`.
    pub size: u64,
    /// Mapped length: the size rounded up to whole pages.
    pub len: u64,
    /// SHM_RDONLY: writes through this attachment are refused.
    pub read_only: bool,
    /// The segment's memory (shared by every attachment).
    pub memory: Arc<dyn ShmMemory>,
}

impl ShmAttach {
    /// Reads through the attachment. EFAULT outside `[0, len)`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.memory.read_at(offset, buf)
    }
    /// Writes through the attachment. EFAULT outside `[0, len)` or if read-only (where Linux
    /// would deliver SIGSEGV).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.read_only {
            return Err(Errno::EFAULT);
        }
        self.memory.write_at(offset, data)
    }
}

impl IpcNamespace {
    /// `shmat(shmid, shmaddr, shmflg)` for process `cred.tgid`. See shmat(2).
    ///
    /// `shmaddr == 0`: the engine picks a unique page-aligned address in this process.
    /// Otherwise the address must be SHMLBA-aligned (or is rounded down with SHM_RND) and must
    /// not overlap another attachment of the process unless SHM_REMAP, which drops the
    /// overlapped attachments. Flags: SHM_RDONLY, SHM_RND, SHM_REMAP, SHM_EXEC (asks for
    /// execute permission too).
    pub fn shmat(&self, cred: &Cred, shmid: i32, shmaddr: u64, flags: i32) -> Result<ShmAttach> {
        if shmid < 0 {
            return Err(Errno::EINVAL);
        }
        let mut addr = shmaddr;
        if addr != 0 {
            if addr & (SHMLBA - 1) != 0 {
                if flags & SHM_RND == 0 {
                    return Err(Errno::EINVAL);
                }
                addr &= !(SHMLBA - 1);
                if addr == 0 && flags & SHM_REMAP != 0 {
                    return Err(Errno::EINVAL);
                }
            }
        } else if flags & SHM_REMAP != 0 {
            return Err(Errno::EINVAL);
        }
        let read_only = flags & SHM_RDONLY != 0;
        let mut want = if read_only {
            PERM_READ
        } else {
            PERM_READ | PERM_WRITE
        };
        if flags & SHM_EXEC != 0 {
            want |= 0o111;
        }
        let ids = &self.shm;
        let me = cred.tgid;
        let mut shard = ids.procs.shard(me);
        let seg = ids.registry.lookup(IpcId::new(shmid))?;
        let mut s = seg.lock();
        s.perm.check(cred, want)?;
        if s.deleted {
            return Err(Errno::EIDRM);
        }
        let len = seg.pages * PAGE_SIZE;
        let proc = shard.entry(me).or_default();
        let mut replaced = Vec::new();
        if shmaddr != 0 {
            addr.checked_add(len).ok_or(Errno::EINVAL)?;
            let hit = proc.overlaps(addr, len);
            if !hit.is_empty() {
                if flags & SHM_REMAP == 0 {
                    return Err(Errno::EINVAL);
                }
                for a in hit {
                    replaced.extend(proc.attaches.remove(&a));
                }
            }
        } else {
            addr = proc.pick_addr(len)?;
        }
        s.nattch += 1;
        s.atime = self.now();
        s.lpid = cred.tgid.get();
        drop(s);
        proc.attaches.insert(
            addr,
            Attachment {
                seg: seg.clone(),
                len,
            },
        );
        drop(shard);
        for old in replaced {
            self.shm_release(&old.seg, me);
        }
        Ok(ShmAttach {
            shmid,
            addr,
            size: seg.size,
            len,
            read_only,
            memory: seg.memory.clone(),
        })
    }

    /// `shmdt(shmaddr)` for process `cred.tgid`: `addr` must be the start of one of its
    /// attachments, else EINVAL. See shmdt(2).
    pub fn shmdt(&self, cred: &Cred, addr: u64) -> Result<()> {
        let at = {
            let me = cred.tgid;
            let mut shard = self.shm.procs.shard(me);
            let proc = shard.get_mut(&me).ok_or(Errno::EINVAL)?;
            proc.attaches.remove(&addr).ok_or(Errno::EINVAL)?
        };
        self.shm_release(&at.seg, cred.tgid);
        Ok(())
    }

    /// Moves process `tgid`'s attachment at `from` to `to` (for callers that attach with
    /// address 0 and then map the memory at an address of the kernel's choosing). EINVAL if
    /// there is no attachment at `from`, `to` is not page aligned, or `to` overlaps another
    /// attachment.
    pub fn shm_attach_move(&self, tgid: i32, from: u64, to: u64) -> Result<()> {
        let tgid = Tgid::new(tgid);
        let mut shard = self.shm.procs.shard(tgid);
        let proc = shard.get_mut(&tgid).ok_or(Errno::EINVAL)?;
        let at = proc.attaches.remove(&from).ok_or(Errno::EINVAL)?;
        let clash = to & (PAGE_SIZE - 1) != 0
            || to.checked_add(at.len).is_none()
            || !proc.overlaps(to, at.len).is_empty();
        let dest = if clash { from } else { to };
        proc.attaches.insert(dest, at);
        if clash {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    }

    /// `remap_file_pages(2)` inside process `cred.tgid`'s attachment at `addr`. Linux emulates
    /// it with an mmap of the segment's file over the range: the old mapping of the range is
    /// closed first (`shm_close`: nattch - 1, dtime, lpid, and the segment destroyed if that
    /// was its last mapping and it may be destroyed), then the file is mapped again
    /// (`shm_mmap`: EINVAL if the segment is gone, else nattch + 1, atime, lpid).
    ///
    /// `last`: the range held the attachment's last mapped pages, so the close is the
    /// attachment's. Otherwise other pages stay mapped, nattch cannot reach 0 and only the
    /// times and lpid change. On EINVAL the attachment is gone (the caller unmaps the range).
    pub fn shm_remap(&self, cred: &Cred, addr: u64, last: bool) -> Result<()> {
        let me = cred.tgid;
        if !last {
            let seg = {
                let shard = self.shm.procs.shard(me);
                let at = shard.get(&me).and_then(|p| p.attaches.get(&addr));
                at.ok_or(Errno::EINVAL)?.seg.clone()
            };
            let mut s = seg.lock();
            let now = self.now();
            s.dtime = now;
            s.atime = now;
            s.lpid = cred.tgid.get();
            return Ok(());
        }
        let at = {
            let mut shard = self.shm.procs.shard(me);
            let proc = shard.get_mut(&me).ok_or(Errno::EINVAL)?;
            proc.attaches.remove(&addr).ok_or(Errno::EINVAL)?
        };
        self.shm_release(&at.seg, me);
        let mut shard = self.shm.procs.shard(me);
        let mut s = at.seg.lock();
        if s.deleted {
            return Err(Errno::EINVAL);
        }
        s.nattch += 1;
        s.atime = self.now();
        s.lpid = cred.tgid.get();
        drop(s);
        shard.entry(me).or_default().attaches.insert(addr, at);
        Ok(())
    }

    /// Process `tgid`'s attachments as `(address, shmid)`, in address order.
    pub fn shm_attachments(&self, tgid: i32) -> Vec<(u64, i32)> {
        let tgid = Tgid::new(tgid);
        let shard = self.shm.procs.shard(tgid);
        shard.get(&tgid).map_or_else(Vec::new, |p| {
            p.attaches.iter().map(|(&a, at)| (a, at.seg.id())).collect()
        })
    }

    /// `shm_close`: one mapping of `seg` by `tgid` is gone. Entry: no shard or registry lock
    /// held. Destroys the segment if it may now be destroyed.
    pub(super) fn shm_release(&self, seg: &Arc<ShmSegment>, tgid: Tgid) {
        let destroy = {
            let mut s = seg.lock();
            debug_assert!(s.nattch > 0 && !s.deleted);
            s.nattch -= 1;
            s.dtime = self.now();
            s.lpid = tgid.get();
            self.shm_may_destroy(&s)
        };
        if destroy {
            let mut st = self.shm.registry.write();
            let s = seg.lock();
            if !s.deleted && self.shm_may_destroy(&s) {
                self.shm_destroy(&mut st, seg, s);
            }
        }
    }
}
