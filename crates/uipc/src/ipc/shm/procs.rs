//! The per-process shm records (`ProcTable`): each process's attachments by start address,
//! the segments it created (for the exit rules), and the cursor its fake addresses come from.
//!
//! Records live in a [`ShardedMap`] keyed by tgid (64 mutex-protected maps), so attach and detach in
//! different processes rarely share a lock. Lock order: registry state -> one shard ->
//! segment state; never two shards at once.

use super::super::consts::PAGE_SIZE;
use super::ShmSegment;
use crate::sync::{MutexGuard, ShardedMap};
use crate::{Errno, IpcId, Result, Tgid};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Where a process's fake addresses start (page aligned, far from where real mappings
/// usually go).
pub(super) const FAKE_BASE: u64 = 0x2000_0000_0000;

pub(super) struct Attachment {
    pub(super) seg: Arc<ShmSegment>,
    pub(super) len: u64,
}

/// One process's shm state.
pub(super) struct ProcShm {
    pub(super) attaches: BTreeMap<u64, Attachment>,
    pub(super) created: HashMap<IpcId, Arc<ShmSegment>>,
    pub(super) next_addr: u64,
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
    pub(super) fn overlaps(&self, addr: u64, len: u64) -> Vec<u64> {
        let end = addr + len;
        self.attaches
            .range(..end)
            .filter(|(&a, at)| a + at.len > addr)
            .map(|(&a, _)| a)
            .collect()
    }

    pub(super) fn pick_addr(&mut self, len: u64) -> Result<u64> {
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
    records: ShardedMap<Tgid, ProcShm>,
}

impl ProcTable {
    pub(super) fn new() -> ProcTable {
        ProcTable {
            records: ShardedMap::new(),
        }
    }

    pub(super) fn shard(&self, tgid: Tgid) -> MutexGuard<'_, HashMap<Tgid, ProcShm>> {
        self.records.shard(tgid)
    }

    /// Records `seg` as created by `tgid`. Entry: registry write lock may be held.
    pub(super) fn record_created(&self, tgid: Tgid, seg: &Arc<ShmSegment>) {
        let mut shard = self.shard(tgid);
        let p = shard.entry(tgid).or_default();
        p.created.insert(seg.header.id(), seg.clone());
    }

    /// Forgets a destroyed segment in its creator's record.
    pub(super) fn forget_created(&self, tgid: Tgid, id: IpcId) {
        let mut shard = self.shard(tgid);
        if let Some(p) = shard.get_mut(&tgid) {
            p.created.remove(&id);
            if p.attaches.is_empty() && p.created.is_empty() {
                shard.remove(&tgid);
            }
        }
    }
}
