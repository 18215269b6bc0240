//! The map from file to lock context, split into shards so that no lock is shared by all files.
//!
//! Finding a file takes its shard's reader lock just long enough to clone the context's `Arc`;
//! the lock or unlock itself then runs under the file's own mutex only. A context is created
//! on a file's first lock request and leaves the map only when it is idle (nothing held, nobody
//! waiting) at a close or an exit, so a loop locking and unlocking one file does not churn the
//! map.
//!
//! Removal protocol: the remover holds the shard's writer lock, then the file's mutex, checks
//! the file is idle, sets `removed` and takes it out of the map. An operation that cloned the
//! `Arc` before the removal finds `removed` set once it holds the file's mutex and looks the
//! file up again, so a lock is never set on a context that left the map (which would let a
//! second context for the same file miss the conflict). `loom_models` checks this.
//!
//! Each thread remembers the last context it used (map, file, `Arc`), so a thread that locks
//! one file again and again goes straight to the file's mutex, touching no shard lock and no
//! shared reference count: only the file's own lock's cache line moves between cores. The
//! remembered context is checked under its mutex like any other (`removed` set: looked up
//! again), so it is only ever a shortcut to the live context. It keeps a context (of a map
//! since dropped, even) allocated until the thread uses another file or exits.
//!
//! Lock order: shard (reader or writer) -> file state; an operation never holds a shard lock
//! while it waits for a file's mutex except the remover, and nobody takes a shard lock while
//! holding a file's mutex.

use super::file::{FileLocks, FileState};
use super::types::FileId;
use crate::sync::{lock, read, write, Arc, MutexGuard, RwLock};
use foldhash::fast::FixedState;
use std::collections::HashMap;
use std::hash::BuildHasher;

type Shard = RwLock<HashMap<FileId, Arc<FileLocks>, FixedState>>;

/// File -> lock context, sharded.
pub(crate) struct FileMap {
    shards: Box<[Shard]>,
    /// Tells this map's contexts from other maps' in the threads' last-used slot.
    #[cfg_attr(loom, allow(dead_code))]
    id: u64,
}

/// The last context this thread used: (map id, file, context).
#[cfg(not(loom))]
type LastUsed = std::cell::RefCell<Option<(u64, FileId, Arc<FileLocks>)>>;

#[cfg(not(loom))]
thread_local! {
    static LAST_USED: LastUsed = const { std::cell::RefCell::new(None) };
}

impl FileMap {
    /// A map with `shards` shards, rounded up to a power of two.
    pub fn new(shards: usize) -> FileMap {
        let n = shards.max(1).next_power_of_two();
        // std's atomic: a static needs a const constructor, which loom's atomics lack.
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        FileMap {
            shards: (0..n).map(|_| RwLock::new(HashMap::default())).collect(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn shard(&self, file: FileId) -> &Shard {
        let h = FixedState::default().hash_one(file);
        // The high bits are the well-mixed ones.
        &self.shards[(h >> 40) as usize & (self.shards.len() - 1)]
    }

    /// The file's context, if it has one.
    pub fn get(&self, file: FileId) -> Option<Arc<FileLocks>> {
        read(self.shard(file)).get(&file).cloned()
    }

    /// The file's context, created if it has none.
    pub fn get_or_create(&self, file: FileId) -> Arc<FileLocks> {
        if let Some(f) = self.get(file) {
            return f;
        }
        write(self.shard(file)).entry(file).or_default().clone()
    }

    /// Runs `f` on the file's state under its mutex, creating the context if `create`; `None`
    /// if the file has no context and `create` is false. Retries if the context left the map.
    #[inline]
    pub fn with<R>(
        &self,
        file: FileId,
        create: bool,
        mut f: impl FnMut(&Arc<FileLocks>, MutexGuard<'_, FileState>) -> R,
    ) -> Option<R> {
        // The remembered context, used in place (borrowed, not moved out and back). The
        // borrow is only tried: were `f` ever to call back into the map, the inner call would
        // take the general path.
        #[cfg(not(loom))]
        if let Ok(slot) = LAST_USED.try_with(|l| l as *const LastUsed) {
            // SAFETY: `slot` is this thread's own slot, alive until the thread's
            // thread-local destructors run; they cannot run during this call on this thread,
            // and no other thread ever sees the slot. (Taking the pointer out keeps the
            // thread-local access inline; the closure form calls through a function pointer.)
            let slot = unsafe { &*slot };
            if let Ok(l) = slot.try_borrow() {
                if let Some((id, last, ctx)) = l.as_ref() {
                    if *id == self.id && *last == file {
                        let st = lock(&ctx.state);
                        if !st.removed {
                            return Some(f(ctx, st));
                        }
                    }
                }
            }
        }
        loop {
            let ctx = if create {
                self.get_or_create(file)
            } else {
                self.get(file)?
            };
            let st = lock(&ctx.state);
            if st.removed {
                continue;
            }
            let r = f(&ctx, st);
            #[cfg(not(loom))]
            let _ = LAST_USED.try_with(|l| {
                if let Ok(mut l) = l.try_borrow_mut() {
                    *l = Some((self.id, file, ctx));
                }
            });
            return Some(r);
        }
    }

    /// Takes the file out of the map if nothing is held or waiting on it.
    pub fn remove_if_idle(&self, file: FileId) {
        let mut shard = write(self.shard(file));
        let Some(ctx) = shard.get(&file).cloned() else {
            return;
        };
        let mut st = lock(&ctx.state);
        if st.is_idle() {
            st.removed = true;
            drop(st);
            shard.remove(&file);
        }
    }

    /// Every file with a context, in no particular order.
    pub fn all(&self) -> Vec<(FileId, Arc<FileLocks>)> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            out.extend(read(s).iter().map(|(k, v)| (*k, v.clone())));
        }
        out
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::locks::file::Held;
    use crate::locks::types::{LockKind, LockType, Owner};
    use crate::Tgid;

    fn held(pid: Tgid) -> Held {
        Held {
            kind: LockKind::Posix,
            owner: Owner::Process(pid),
            pid,
            ty: LockType::Write,
            start: 0,
            end: 0,
        }
    }

    /// A lock set while the file is being removed as idle is never lost: afterwards the map
    /// holds exactly one context for the file, and it has the lock.
    #[test]
    fn removal_racing_a_new_lock_never_loses_it() {
        loom::model(|| {
            let map = Arc::new(FileMap::new(1));
            let file = FileId { dev: 1, ino: 1 };
            map.with(file, true, |_, _| ());
            let m2 = map.clone();
            let t = loom::thread::spawn(move || {
                m2.with(file, true, |_, mut st| st.posix.push(held(Tgid::new(1))));
            });
            map.remove_if_idle(file);
            t.join().unwrap();
            let n = map.with(file, false, |_, st| st.posix.len()).unwrap_or(0);
            assert_eq!(n, 1, "the lock is in the file's one live context");
        });
    }
}
