//! Process lifecycle hooks (`dup_mmap` -> `shm_open`, exec and `exit_mm` -> `shm_close`,
//! `exit_shm`, `shm_destroy_orphans`).
//!
//! - fork: the child gets the parent's attachments at the same addresses; each counts in
//!   nattch and, as Linux records it, sets atime and lpid to the parent.
//! - exec: every attachment is dropped (dtime, lpid = the process).
//! - exit: attachments are dropped first, then the creator rules: with `shm_rmid_forced` 0
//!   the process's segments become orphans; with 1 the unattached ones are destroyed now and
//!   the others at their last detach.
//! - writing 1 to `shm_rmid_forced`: every unattached orphan is destroyed.
//!
//! Entry: no lock held. The process's record is taken out of its shard (or copied, for fork)
//! before any segment is released, so no shard is held while destroying.

use super::procs::{Attachment, FAKE_BASE};
use crate::ipc::IpcNamespace;
use crate::Tgid;

impl IpcNamespace {
    pub(crate) fn shm_process_fork(&self, parent: Tgid, child: Tgid) {
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
                    s.lpid = parent.get();
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

    pub(crate) fn shm_process_exec(&self, tgid: Tgid) {
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
    pub(crate) fn shm_process_exit(&self, tgid: Tgid) {
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
