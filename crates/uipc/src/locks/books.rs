//! The daemon's books of a lease area, the part both kinds share: the POSIX leases
//! (`lease::book`) and the flock leases (`flockfast::book`). Per file: how many engine calls
//! are inside it, which slot leases it, how many grant chances it still skips and how many
//! holds keep it from any grant (an exec's pending close of a descriptor of it: its locks
//! must stay the engine's to drop, `LockManager::hold_grants`); per slot: the kind's own book
//! `S`. Files are spread over [`SHARDS`] mutexes by their slot group (so a
//! file and the slots it may use are under the same mutex).
//!
//! The walk is the same for both kinds: a call *enters* its file (counted inside), the kind
//! takes the lease back if it has to; the call *leaves*, and when it was the last inside and
//! the file is neither leased nor held, the kind may grant a slot; a file's book goes once it
//! is idle (no call inside, no lease, no cooldown, no hold). What a revoke and a grant write to the shared slot is
//! the kind's.
//!
//! Lock order: one shard's mutex at a time; the kind's callbacks run under it (and may take
//! what comes after it in the lock order of `locks`). No two shards are held together.

use super::types::FileId;
use crate::sync::{lock, AtomicBool, Mutex, MutexGuard, Ordering::Relaxed};
use std::collections::HashMap;

/// Shard mutexes.
const SHARDS: usize = 64;
/// Grant chances a file skips after its lease was taken back for another caller.
pub(crate) const COOLDOWN: u16 = 32;

/// One file's book.
#[derive(Default)]
pub(crate) struct FileBook {
    /// Engine calls inside the file (entered, not yet left).
    pub(crate) inside: u32,
    /// The slot that leases it.
    pub(crate) lease: Option<usize>,
    /// Grant chances still to skip (a contended file).
    pub(crate) cooldown: u16,
    /// Holds ([`Shard::hold`]): no grant while any is left.
    held: u32,
}

impl FileBook {
    fn idle(&self) -> bool {
        self.inside == 0 && self.lease.is_none() && self.cooldown == 0 && self.held == 0
    }
}

/// The slots' books of one shard, by slot number.
pub(crate) type SlotMap<S> = HashMap<usize, S>;

/// The books of the files and slots of some slot groups.
pub(crate) struct Shard<S> {
    pub(crate) files: HashMap<FileId, FileBook>,
    pub(crate) slots: SlotMap<S>,
}

impl<S> Shard<S> {
    /// A call on `file` begins: it is counted inside. The file's book and the slots'.
    pub(crate) fn enter(&mut self, file: FileId) -> (&mut FileBook, &mut SlotMap<S>) {
        let book = self.files.entry(file).or_default();
        book.inside += 1;
        (book, &mut self.slots)
    }

    /// The call that [`Shard::enter`]ed `file` ends; if it was the last one inside and the
    /// file is neither leased nor held, `grant` may lease it (setting the book's `lease`). The
    /// book goes if it is idle then.
    pub(crate) fn leave(
        &mut self,
        file: FileId,
        grant: impl FnOnce(&mut FileBook, &mut SlotMap<S>),
    ) {
        let Some(book) = self.files.get_mut(&file) else {
            return;
        };
        book.inside = book.inside.saturating_sub(1);
        if book.inside == 0 && book.lease.is_none() && book.held == 0 {
            grant(book, &mut self.slots);
        }
        if book.idle() {
            self.files.remove(&file);
        }
    }

    /// No lease is granted on `file` until as many [`Shard::unhold`]s (a lease it has now
    /// stays: the kind takes it back).
    pub(crate) fn hold(&mut self, file: FileId) {
        self.files.entry(file).or_default().held += 1;
    }

    /// Ends one [`Shard::hold`] of `file`; its book goes if idle.
    pub(crate) fn unhold(&mut self, file: FileId) {
        if let Some(b) = self.files.get_mut(&file) {
            b.held = b.held.saturating_sub(1);
            if b.idle() {
                self.files.remove(&file);
            }
        }
    }

    /// `file` is not leased any more (its slot was taken back); its book goes if idle.
    pub(crate) fn unlease(&mut self, file: FileId) {
        if let Some(b) = self.files.get_mut(&file) {
            b.lease = None;
            if b.idle() {
                self.files.remove(&file);
            }
        }
    }

    /// The slot leasing `file` and its book.
    pub(crate) fn leased(&self, file: FileId) -> Option<(usize, &S)> {
        let k = self.files.get(&file)?.lease?;
        Some((k, self.slots.get(&k)?))
    }

    /// [`Shard::leased`], the slot's book to change.
    pub(crate) fn leased_mut(&mut self, file: FileId) -> Option<(usize, &mut S)> {
        let k = self.files.get(&file)?.lease?;
        Some((k, self.slots.get_mut(&k)?))
    }
}

/// A lease area's books: the shards, and whether any lease was ever granted.
pub(crate) struct Books<S> {
    shards: Box<[Mutex<Shard<S>>]>,
    /// Some lease was ever granted (a walk of all slots with none looks at nothing).
    granted: AtomicBool,
}

impl<S> Books<S> {
    pub(crate) fn new() -> Books<S> {
        let shard = || {
            Mutex::new(Shard {
                files: HashMap::new(),
                slots: HashMap::new(),
            })
        };
        Books {
            shards: (0..SHARDS).map(|_| shard()).collect(),
            granted: AtomicBool::new(false),
        }
    }

    /// The shard of slot group `group`, locked.
    pub(crate) fn lock(&self, group: usize) -> MutexGuard<'_, Shard<S>> {
        lock(&self.shards[group % SHARDS])
    }

    /// A lease was granted (from now on the walks look).
    pub(crate) fn mark_granted(&self) {
        self.granted.store(true, Relaxed);
    }

    /// Runs `f` on each shard in turn, under its mutex; on none if no lease was ever granted.
    pub(crate) fn each_shard(&self, mut f: impl FnMut(&mut Shard<S>)) {
        if !self.granted.load(Relaxed) {
            return;
        }
        for shard in self.shards.iter() {
            f(&mut lock(shard));
        }
    }

    /// Takes every lease back: `revoke` gets each leased file and its slot, and the slots'
    /// books to take the slot back in; the file is not leased after.
    pub(crate) fn revoke_all(&self, mut revoke: impl FnMut(&mut SlotMap<S>, FileId, usize)) {
        self.each_shard(|sh| {
            let leased: Vec<(FileId, usize)> = sh
                .files
                .iter()
                .filter_map(|(&f, b)| b.lease.map(|k| (f, k)))
                .collect();
            for (f, k) in leased {
                revoke(&mut sh.slots, f, k);
                sh.unlease(f);
            }
        });
    }
}
