//! `shmget(2)`: find or create a segment (`ipc/shm.c`: `ksys_shmget`, `newseg`,
//! `shm_more_checks`).
//!
//! Order (observed on 6.18): the registry's ipcget order; for an existing key, a size larger
//! than the segment is EINVAL before ipcperms' EACCES (0 always passes). A new segment is
//! checked in `newseg`'s order: size outside `[1, shmmax]` EINVAL, page-count overflow ENOSPC,
//! `shm_tot + pages > shmall` ENOSPC, SHM_HUGETLB without privilege EPERM, a size past
//! `loff_t` EINVAL (`__shmem_file_setup`), more pages than the host would commit ENOMEM
//! (`shmem_acct_size`, skipped for SHM_NORESERVE outside strict overcommit; read from the
//! host's `/proc/sys/vm/overcommit_memory` and `/proc/meminfo`), the backing's own failure, and last the count limit (shmmni) ENOSPC inside [`Vacancy::add`](crate::ipc::registry::Vacancy::add).
//!
//! Locks: the registry write lock for the whole call; the creator's process shard is taken
//! under it to record the new segment.

use super::super::consts::{PAGE_SIZE, SHM_HUGETLB, SHM_NORESERVE};
use super::super::perm::IpcPerm;
use super::super::registry::IpcHeader;
use super::{SegState, ShmSegment};
use crate::ipc::IpcNamespace;
use crate::sync::{Mutex, Ordering::Relaxed};
use crate::{Cap, Cred, Errno, IpcId, IpcKey, Result};

const OVERCOMMIT_ALWAYS: u32 = 1;
const OVERCOMMIT_NEVER: u32 = 2;

fn overcommit_mode() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/vm/overcommit_memory")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `/proc/meminfo` fields, in pages.
fn meminfo_pages(fields: &[&str]) -> Option<Vec<u64>> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    fields
        .iter()
        .map(|f| {
            let line = info.lines().find(|l| l.split(':').next() == Some(f))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb / (PAGE_SIZE / 1024))
        })
        .collect()
}

/// `__vm_enough_memory` as the host would decide it for `pages` more pages: always yes with
/// overcommit 1; with 0 (heuristic), no if they exceed RAM plus swap; with 2 (strict), no if
/// they take the committed total past the commit limit (the kernel's small admin and user
/// reserves are not modelled). Unknown (no `/proc`): yes.
fn host_can_commit(pages: u64) -> Result<()> {
    let fits = match overcommit_mode() {
        None | Some(OVERCOMMIT_ALWAYS) => true,
        Some(OVERCOMMIT_NEVER) => meminfo_pages(&["CommitLimit", "Committed_AS"])
            .is_none_or(|v| v[1].saturating_add(pages) <= v[0]),
        Some(_) => meminfo_pages(&["MemTotal", "SwapTotal"])
            .is_none_or(|v| pages <= v[0].saturating_add(v[1])),
    };
    if fits {
        Ok(())
    } else {
        Err(Errno::ENOMEM)
    }
}

/// The group that may use SHM_HUGETLB without CAP_IPC_LOCK (`vm.hugetlb_shm_group` default).
const HUGETLB_SHM_GROUP: u32 = 0;

impl IpcNamespace {
    /// `shmget(key, size, shmflg)`: the id of the segment for `key`, creating it as the flags
    /// say. See shmget(2).
    pub fn shmget(&self, cred: &Cred, key: i32, size: u64, flag: i32) -> Result<i32> {
        let ids = &self.shm;
        let key = IpcKey::new(key);
        ids.registry
            .get_or_create(
                key,
                flag,
                |free| {
                    let l = &self.limits;
                    if size < 1 || size > l.shmmax() {
                        return Err(Errno::EINVAL);
                    }
                    let pages = size.div_ceil(PAGE_SIZE);
                    if pages.checked_mul(PAGE_SIZE).is_none() {
                        return Err(Errno::ENOSPC);
                    }
                    let tot = ids.tot_pages.load(Relaxed);
                    match tot.checked_add(pages) {
                        Some(t) if t <= l.shmall() => {}
                        _ => return Err(Errno::ENOSPC),
                    }
                    if flag & SHM_HUGETLB != 0
                        && !cred.has_cap(Cap::IPC_LOCK)
                        && !cred.in_group(HUGETLB_SHM_GROUP)
                    {
                        return Err(Errno::EPERM);
                    }
                    // __shmem_file_setup: the size must fit loff_t.
                    if size > i64::MAX as u64 {
                        return Err(Errno::EINVAL);
                    }
                    // shmem_acct_size: the pages are charged unless SHM_NORESERVE (which strict
                    // overcommit ignores).
                    let strict = overcommit_mode() == Some(OVERCOMMIT_NEVER);
                    if flag & SHM_NORESERVE == 0 || strict {
                        host_can_commit(pages)?;
                    }
                    let memory = ids.backing.create(key.get(), size)?;
                    let now = self.now();
                    let perm = IpcPerm::new(cred, flag);
                    let seg = free.add(l.shmmni(), (&perm, size), |id| ShmSegment {
                        header: IpcHeader::new(id, key),
                        size,
                        pages,
                        memory,
                        state: Mutex::new(SegState {
                            perm: perm.clone(),
                            atime: 0,
                            dtime: 0,
                            ctime: now,
                            cpid: cred.tgid.get(),
                            lpid: 0,
                            nattch: 0,
                            creator: Some(cred.tgid),
                            locked_by: None,
                            deleted: false,
                        }),
                    })?;
                    ids.tot_pages.fetch_add(pages, Relaxed);
                    ids.procs.record_created(cred.tgid, &seg);
                    Ok(seg.header.id())
                },
                |entry| {
                    if size > entry.info {
                        return Err(Errno::EINVAL);
                    }
                    entry.perm.check(cred, flag)
                },
            )
            .map(IpcId::get)
    }
}
