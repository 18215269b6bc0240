//! The daemon's side of the leases: which file is leased in which slot to whom, how many
//! engine calls are inside each file, grants and revokes (ARCHITECTURE.md "File lock leases").
//!
//! Everything here is the daemon's own memory; the shared slots are written (grant, revoke)
//! but only the current buffer and `STATE` are ever read back, and what is read is validated.
//! The per-file books and their walk are `locks::books`, shared with the flock leases; a
//! file's cooldown starts when its lease is taken back for another process, and while it
//! lasts the file may be granted in shared mode.
//!
//! Lock order: one shard's mutex (the shard of the file's slot group), then, inside the
//! callbacks of [`Leases::enter`] and [`Leases::leave`], the engine's file-map shard and one
//! file's state. No two shards are held together.

use super::*;
use crate::ipc::shared_words::{SharedWords, Slots};
use crate::locks::books::{Books, SlotMap, COOLDOWN};
use crate::sync::{Mutex, MutexGuard};

pub(super) use crate::locks::books::Shard;

/// Why a lease was not granted (`take` of [`Leases::leave`]).
pub(crate) enum NotTaken {
    /// Another process's lock or a blocked request is on the file.
    Contended,
    /// The caller's locks do not fit a slot, or an OFD or flock lock is on the file.
    Unfit,
}

#[derive(Default)]
pub(super) struct SlotBook {
    /// The epoch of the last grant.
    pub(super) epoch: u32,
    /// The file and holder while leased (holder 0: in shared mode).
    pub(super) holder: Option<(FileId, i32)>,
    /// Revoked while BUSY: the holder that may still write the slot until BUSY clears or it
    /// exits.
    pub(super) busy_by: Option<i32>,
}

/// A lease area and its books.
pub struct Leases {
    mem: SharedWords,
    books: Books<SlotBook>,
    /// Processes that asked for the area (whose parked calls may be sent to shared mode).
    pub(super) askers: Mutex<std::collections::HashSet<i32>>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases").finish_non_exhaustive()
    }
}

impl Leases {
    fn with_mem(mem: SharedWords) -> Leases {
        Leases {
            mem,
            books: Books::new(),
            askers: Mutex::new(Default::default()),
        }
    }

    /// An area in the process's own memory (tests, models).
    pub fn owned() -> Leases {
        Leases::owned_words(LEASE_BYTES / 8)
    }

    /// An area of `len` words in the process's own memory: the models use one group's worth
    /// (a file of another group is then never granted).
    pub(crate) fn owned_words(len: usize) -> Leases {
        Leases::with_mem(SharedWords::owned(len))
    }

    /// An area of [`LEASE_BYTES`] at `ptr`, kept mapped by `keep`.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned, valid for reads and writes of [`LEASE_BYTES`] for as long
    /// as `keep` lives, zeroed at first, and used by others only as atomics.
    #[cfg(not(loom))]
    pub unsafe fn from_raw(ptr: *mut u8, keep: Box<dyn std::any::Any + Send + Sync>) -> Leases {
        // SAFETY: the caller's contract.
        Leases::with_mem(unsafe { SharedWords::mapped(ptr, LEASE_BYTES / 8, keep) })
    }

    /// What the embedder kept with a mapping (its memfd).
    pub fn keeper(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.mem.keeper()
    }

    /// The shared words (a holder's [`LeaseView`] over them).
    pub fn words(&self) -> &[AtomicU64] {
        self.mem.words()
    }

    pub(super) fn slot(&self, k: usize) -> Option<&[AtomicU64]> {
        Slots::<SLOT_WORDS>::new(self.words()).get(k)
    }

    pub(super) fn shard(&self, file: FileId) -> MutexGuard<'_, Shard<SlotBook>> {
        self.books.lock(group_of(file))
    }

    /// Holds back lease and shared-mode grants on `file` (see [`Shard::hold`]).
    pub(crate) fn hold(&self, file: FileId) {
        self.shard(file).hold(file);
    }

    /// Ends one [`Leases::hold`] of `file`.
    pub(crate) fn unhold(&self, file: FileId) {
        self.shard(file).unhold(file);
    }

    /// Takes slot `k` back: its holder and the locks it held, validated.
    fn revoke(&self, slots: &mut SlotMap<SlotBook>, k: usize) -> Option<(i32, Vec<Piece>)> {
        let book = slots.get_mut(&k)?;
        let (_, pid) = book.holder.take()?;
        let slot = self.slot(k)?;
        if pid == 0 {
            return Some(self.revoke_shared(slot, book.epoch));
        }
        let v = slot[STATE].fetch_or(REVOKED, AcqRel);
        if v & BUSY != 0 {
            book.busy_by = Some(pid);
        }
        if v & !(BUSY | CUR) != held_state(pid, book.epoch) {
            // Not the state the grant wrote: written by someone else; nothing to trust.
            return Some((pid, Vec::new()));
        }
        let (buf, n) = read_buffer(slot, v);
        Some((pid, buf[..n].iter().copied().filter(Piece::valid).collect()))
    }

    /// A call on `file` by process `by` begins: the file's lease is taken back first (its
    /// holder's locks handed to `import`), unless `keep_others` and the holder is not `by`
    /// (a close, which drops only `by`'s own locks). No grant happens while a call is inside.
    pub(crate) fn enter(
        &self,
        file: FileId,
        by: i32,
        keep_others: bool,
        import: impl FnOnce(i32, &[Piece]),
    ) {
        let mut sh = self.shard(file);
        let (book, slots) = sh.enter(file);
        let Some(k) = book.lease else { return };
        let holder = slots.get(&k).and_then(|b| b.holder).map(|(_, p)| p);
        if keep_others && holder == Some(0) {
            self.release_shared(k, by);
            return;
        }
        if keep_others && holder != Some(by) {
            return;
        }
        book.lease = None;
        if holder != Some(by) {
            book.cooldown = COOLDOWN;
        }
        if let Some((pid, pieces)) = self.revoke(slots, k) {
            import(pid, &pieces);
        }
    }

    /// The call that [`Leases::enter`]ed `file` ends. If it was the last one inside and
    /// `grant` names the process of a successful POSIX set command, the file may be leased
    /// to it: `take` is asked for that process's locks, which it removes from the engine, and
    /// returns only if nothing else is on the file and they fit a slot. A file on which
    /// `take` finds another process's lock or a blocked request is contended as much as one
    /// whose lease was taken back: its cooldown starts (a file locked by many processes from
    /// its first call on never had a lease to take back).
    /// A contended file (in cooldown) is put in shared mode instead when `take_shared` finds
    /// the engine's locks fit it: it returns the owner of the file's one whole-file write lock
    /// (0: none), which it removes from the engine.
    pub(crate) fn leave(
        &self,
        file: FileId,
        grant: Option<i32>,
        take: impl FnOnce(i32) -> Result<Vec<Piece>, NotTaken>,
        take_shared: impl FnOnce() -> Option<i32>,
    ) {
        self.shard(file).leave(file, |book, slots| {
            let grant = grant.filter(|&p| p > 0 && p as u64 <= PID_MASK);
            let Some(pid) = grant else {
                return;
            };
            if book.cooldown > 0 {
                if let Some(k) = self.free_slot(slots, file) {
                    if let Some(owner) = take_shared() {
                        self.grant_shared(slots, k, file, owner);
                        book.lease = Some(k);
                    }
                }
                book.cooldown -= u16::from(book.lease.is_none());
            } else if let Some(k) = self.free_slot(slots, file) {
                match take(pid) {
                    Ok(pieces) => {
                        self.grant(slots, k, file, pid, &pieces);
                        book.lease = Some(k);
                    }
                    Err(NotTaken::Contended) => book.cooldown = COOLDOWN,
                    Err(NotTaken::Unfit) => {}
                }
            }
        });
    }

    /// A slot of `file`'s group that no lease uses and no revoked holder may still write.
    fn free_slot(&self, slots: &mut SlotMap<SlotBook>, file: FileId) -> Option<usize> {
        (0..GROUP).map(|i| group_of(file) * GROUP + i).find(|&k| {
            if self.slot(k).is_none() {
                return false;
            }
            let Some(b) = slots.get_mut(&k) else {
                return true;
            };
            if b.holder.is_some() {
                return false;
            }
            if b.busy_by.is_some()
                && self
                    .slot(k)
                    .is_some_and(|s| s[STATE].load(Acquire) & BUSY == 0)
            {
                b.busy_by = None;
            }
            b.busy_by.is_none()
        })
    }

    pub(super) fn grant(
        &self,
        slots: &mut SlotMap<SlotBook>,
        k: usize,
        file: FileId,
        pid: i32,
        pieces: &[Piece],
    ) {
        let book = slots.entry(k).or_default();
        book.epoch = book.epoch.wrapping_add(1);
        book.holder = Some((file, pid));
        let Some(slot) = self.slot(k) else { return };
        slot[DEV].store(file.dev, Release);
        slot[INO].store(file.ino, Release);
        write_buffer(slot, 0, pieces);
        slot[STATE].store(held_state(pid, book.epoch), Release);
        self.books.mark_granted();
    }

    /// Process `pid` is gone: its leases end and their locks with them (Linux drops a dead
    /// process's POSIX locks); slots it may have left BUSY are free again.
    pub fn exit(&self, pid: i32) {
        self.forget_process(pid);
        self.books.each_shard(|sh| {
            let mine: Vec<(usize, FileId)> = sh
                .slots
                .iter()
                .filter_map(|(&k, b)| match b.holder {
                    Some((f, p)) if p == pid => Some((k, f)),
                    _ => None,
                })
                .collect();
            for (k, f) in mine {
                let _ = self.revoke(&mut sh.slots, k);
                sh.unlease(f);
            }
            for b in sh.slots.values_mut() {
                if b.busy_by == Some(pid) {
                    b.busy_by = None;
                }
            }
            self.exit_shared(sh, pid);
        });
    }

    /// Takes every lease back (a listing of all locks), handing each holder's locks to
    /// `import`.
    pub(crate) fn revoke_all(&self, mut import: impl FnMut(FileId, i32, &[Piece])) {
        self.books.revoke_all(|slots, f, k| {
            if let Some((pid, pieces)) = self.revoke(slots, k) {
                import(f, pid, &pieces);
            }
        });
    }

    /// The holder of `file`'s lease, if any (tests; a slot in shared mode has none).
    pub fn holder(&self, file: FileId) -> Option<i32> {
        let (_, pid) = self.shard(file).leased(file)?.1.holder?;
        Some(pid).filter(|&p| p > 0)
    }
}
