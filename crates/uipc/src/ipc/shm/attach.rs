//! Attachments: `shmat(2)`, `shmdt(2)` and the process lifecycle (`do_shmat`, `shm_open`,
//! `shm_close`, `exit_shm`, `shm_destroy_orphans`).
//!
//! Each process (tgid) has a [`ProcShm`] record in one of [`SHARDS`] mutex-protected maps:
//! its attachments by start address, the segments it created, and the cursor from which
//! fake addresses are handed out. Sharding keeps `shmat`/`shmdt` of different processes off
//! one another's locks; no namespace-wide lock is taken unless a segment must be destroyed.
//!
//! Attach: process shard -> lookup (lock-free) -> segment lock; checks in Linux's order
//! (negative id, address alignment, ipcperms EACCES, EIDRM, overlap EINVAL), then
//! `nattch += 1`, atime, lpid, and the record. Detach: the record is removed under the shard,
//! the shard released, then the segment lock: `nattch -= 1`, dtime, lpid; if the segment may
//! now be destroyed, the registry write lock and the segment lock are taken again and the
//! condition re-checked, so concurrent detaches and IPC_RMID destroy it exactly once.

use super::super::consts::{PAGE_SIZE, SHMLBA, SHM_EXEC, SHM_RDONLY, SHM_REMAP, SHM_RND};
use super::super::perm::{PERM_READ, PERM_WRITE};
use super::{ShmMemory, ShmSegment};
use crate::ipc::IpcNamespace;
use crate::sync::{lock, Mutex, MutexGuard};
use crate::{Cred, Errno, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Number of process shards.
const SHARDS: usize = 64;
/// Where a process's fake addresses start (page aligned, far from real mappings' usual
/// places).
const FAKE_BASE: u64 = 0x2000_0000_0000;

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

struct Attachment {
    seg: Arc<ShmSegment>,
    len: u64,
}

/// One process's shm state.
struct ProcShm {
    attaches: BTreeMap<u64, Attachment>,
    created: HashMap<i32, Arc<ShmSegment>>,
    next_addr: u64,
}

impl Default for ProcShm {
    fn default() -> Self {
        ProcShm {
            attaches: BTreeMap::new(),
            created: HashMap::new(),
            next_addr: FAKE_BASE,
        }
    }
}

impl ProcShm {
    fn overlaps(&self, addr: u64, len: u64) -> Vec<u64> {
        let end = addr + len;
        self.attaches
            .range(..end)
            .filter(|(&a, at)| a + at.len > addr)
            .map(|(&a, _)| a)
            .collect()
    }

    fn pick_addr(&mut self, len: u64) -> Result<u64> {
        loop {
            let addr = self.next_addr;
            let end = addr.checked_add(len).ok_or(Errno::ENOMEM)?;
            // One guard page between fake attachments.
            self.next_addr = end.checked_add(PAGE_SIZE).ok_or(Errno::ENOMEM)?;
            if self.overlaps(addr, len).is_empty() {
                return Ok(addr);
            }
        }
    }
}

/// The per-process records, sharded by tgid.
pub(super) struct ProcTable {
    shards: Box<[Mutex<HashMap<i32, ProcShm>>]>,
}

impl ProcTable {
    pub(super) fn new() -> ProcTable {
        ProcTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, tgid: i32) -> MutexGuard<'_, HashMap<i32, ProcShm>> {
        lock(&self.shards[tgid.unsigned_abs() as usize % SHARDS])
    }

    /// Records `seg` as created by `tgid`. Entry: registry write lock may be held.
    pub(super) fn record_created(&self, tgid: i32, seg: &Arc<ShmSegment>) {
        let mut shard = self.shard(tgid);
        let p = shard.entry(tgid).or_default();
        p.created.insert(seg.id(), seg.clone());
    }

    /// Forgets a destroyed segment in its creator's record.
    pub(super) fn forget_created(&self, tgid: i32, id: i32) {
        let mut shard = self.shard(tgid);
        if let Some(p) = shard.get_mut(&tgid) {
            p.created.remove(&id);
            if p.attaches.is_empty() && p.created.is_empty() {
                shard.remove(&tgid);
            }
        }
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
        let mut shard = ids.procs.shard(cred.tgid);
        let seg = ids.registry.lookup(shmid)?;
        let mut s = seg.lock();
        s.perm.check(cred, want)?;
        if s.deleted {
            return Err(Errno::EIDRM);
        }
        let len = seg.memory.len();
        let proc = shard.entry(cred.tgid).or_default();
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
        s.lpid = cred.tgid;
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
            self.shm_release(&old.seg, cred.tgid);
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
            let mut shard = self.shm.procs.shard(cred.tgid);
            let proc = shard.get_mut(&cred.tgid).ok_or(Errno::EINVAL)?;
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

    /// Process `tgid`'s attachments as `(address, shmid)`, in address order.
    pub fn shm_attachments(&self, tgid: i32) -> Vec<(u64, i32)> {
        let shard = self.shm.procs.shard(tgid);
        shard.get(&tgid).map_or_else(Vec::new, |p| {
            p.attaches.iter().map(|(&a, at)| (a, at.seg.id())).collect()
        })
    }

    /// `shm_close`: one mapping of `seg` by `tgid` is gone. Entry: no shard or registry lock
    /// held. Destroys the segment if it may now be destroyed.
    fn shm_release(&self, seg: &Arc<ShmSegment>, tgid: i32) {
        let destroy = {
            let mut s = seg.lock();
            debug_assert!(s.nattch > 0 && !s.deleted);
            s.nattch -= 1;
            s.dtime = self.now();
            s.lpid = tgid;
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

    pub(crate) fn shm_process_fork(&self, parent: i32, child: i32) {
        let (inherited, next_addr) = {
            let shard = self.shm.procs.shard(parent);
            let Some(p) = shard.get(&parent) else { return };
            let now = self.now();
            let list: Vec<(u64, Attachment)> = p
                .attaches
                .iter()
                .map(|(&a, at)| {
                    let mut s = at.seg.lock();
                    s.nattch += 1;
                    s.atime = now;
                    s.lpid = parent;
                    (
                        a,
                        Attachment {
                            seg: at.seg.clone(),
                            len: at.len,
                        },
                    )
                })
                .collect();
            (list, p.next_addr)
        };
        let mut shard = self.shm.procs.shard(child);
        let c = shard.entry(child).or_default();
        c.next_addr = c.next_addr.max(next_addr);
        let mut dropped = Vec::new();
        for (a, at) in inherited {
            dropped.extend(c.attaches.insert(a, at));
        }
        drop(shard);
        for old in dropped {
            self.shm_release(&old.seg, child);
        }
    }

    pub(crate) fn shm_process_exec(&self, tgid: i32) {
        let gone = {
            let mut shard = self.shm.procs.shard(tgid);
            let Some(p) = shard.get_mut(&tgid) else {
                return;
            };
            p.next_addr = FAKE_BASE;
            std::mem::take(&mut p.attaches)
        };
        for (_, at) in gone {
            self.shm_release(&at.seg, tgid);
        }
    }

    /// `exit_mm` then `exit_shm`: detach everything, then apply the creator rules.
    pub(crate) fn shm_process_exit(&self, tgid: i32) {
        let Some(p) = self.shm.procs.shard(tgid).remove(&tgid) else {
            return;
        };
        for (_, at) in p.attaches {
            self.shm_release(&at.seg, tgid);
        }
        if p.created.is_empty() {
            return;
        }
        let mut st = self.shm.registry.write();
        for seg in p.created.values() {
            let mut s = seg.lock();
            if s.deleted {
                continue;
            }
            s.creator = None;
            if self.limits.shm_rmid_forced() && self.shm_may_destroy(&s) {
                self.shm_destroy(&mut st, seg, s);
            }
        }
    }

    pub(crate) fn shm_destroy_orphans(&self) {
        let all = self.shm.registry.snapshot();
        let mut st = self.shm.registry.write();
        for seg in &all {
            let s = seg.lock();
            if !s.deleted && s.creator.is_none() && self.shm_may_destroy(&s) {
                self.shm_destroy(&mut st, seg, s);
            }
        }
    }
}
