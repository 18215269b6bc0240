//! The daemon's side of the flock leases: which description is named by which token, which
//! file is leased in which slot to which description, how many engine calls are inside each
//! file, grants and revokes (ARCHITECTURE.md "flock leases").
//!
//! Everything here is the daemon's own memory; the shared slots are written (grant, revoke)
//! and only `STATE` is read back (by the revoke's `fetch_or`), validated against the grant.
//! The per-file books and their walk are `locks::books`, shared with the POSIX leases; a
//! file's cooldown starts when its lease is taken back for another description.
//!
//! Lock order: one shard's mutex (the shard of the file's slot group), then the names' mutex,
//! or, inside the callbacks of [`FlockSlots::enter`] and [`FlockSlots::leave`], the engine's
//! file-map shard and one file's state. No two shards are held together.

use super::*;
use crate::ipc::shared_words::SharedWords;
use crate::locks::books::{Books, Shard, SlotMap, COOLDOWN};
use crate::locks::types::OfdId;
use crate::sync::{lock, Mutex, MutexGuard, Ordering::Release, Ordering::SeqCst};
use crate::Tgid;
use std::collections::HashMap;

/// A description's name ([`FlockSlots::name`]).
struct Name {
    /// The daemon's descriptor number of it.
    fd: i32,
    /// Calls that named it and have not unnamed it yet.
    calls: u32,
}

/// Whether `pid` fits the slots' pid fields (1 to [`PID_MASK`]).
fn fits(pid: Tgid) -> bool {
    pid.get() > 0 && pid.get() as u64 <= PID_MASK
}

/// A member of a slot: its description and the pid its token names (the daemon's own copy of
/// what it wrote into the token: the shared word is not trusted).
#[derive(Clone, Copy)]
struct Member {
    ofd: OfdId,
    pid: i32,
}

#[derive(Default)]
struct SlotBook {
    /// The epoch of the last grant.
    epoch: u64,
    /// The file while leased.
    file: Option<FileId>,
    /// The members, by index (the first is the one the grant went to); `None` for one dropped
    /// at its process's exit ([`FlockSlots::exit`]), whose index is not reused in this epoch.
    members: Vec<Option<Member>>,
}

impl SlotBook {
    /// The index of description `ofd` among the members.
    fn index_of(&self, ofd: OfdId) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.is_some_and(|m| m.ofd == ofd))
    }

    /// The description of member `i`.
    fn ofd_at(&self, i: usize) -> Option<OfdId> {
        self.members.get(i).copied().flatten().map(|m| m.ofd)
    }
}

/// What a revoke hands back: the description, its flock lock (if any) and the pid that set it.
pub(crate) type Taken = (OfdId, Option<crate::locks::LockType>, Tgid);

/// A flock lease area and its books.
pub struct FlockSlots {
    mem: SharedWords,
    books: Books<SlotBook>,
    /// The names of the descriptions whose calls are in flight (given by the embedder).
    names: Mutex<HashMap<OfdId, Name>>,
}

impl std::fmt::Debug for FlockSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlockSlots").finish_non_exhaustive()
    }
}

impl FlockSlots {
    fn with_mem(mem: SharedWords) -> FlockSlots {
        FlockSlots {
            mem,
            books: Books::new(),
            names: Mutex::new(HashMap::new()),
        }
    }

    /// An area in the process's own memory (tests, models).
    pub fn owned() -> FlockSlots {
        FlockSlots::owned_words(FLOCK_SLOTS * SLOT_WORDS)
    }

    /// An area of `len` words in the process's own memory: the models use one group's worth.
    pub(crate) fn owned_words(len: usize) -> FlockSlots {
        FlockSlots::with_mem(SharedWords::owned(len))
    }

    /// An area of [`FLOCK_BYTES`] at `ptr`, kept mapped by `keep`.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned, valid for reads and writes of [`FLOCK_BYTES`] for as long
    /// as `keep` lives, zeroed at first, and used by others only as atomics.
    #[cfg(not(loom))]
    pub unsafe fn from_raw(ptr: *mut u8, keep: Box<dyn std::any::Any + Send + Sync>) -> FlockSlots {
        // SAFETY: the caller's contract.
        FlockSlots::with_mem(unsafe { SharedWords::mapped(ptr, FLOCK_SLOTS * SLOT_WORDS, keep) })
    }

    /// What the embedder kept with a mapping (its memfd).
    pub fn keeper(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.mem.keeper()
    }

    /// The shared words (a caller's [`FlockView`] over them).
    pub fn words(&self) -> &[AtomicU64] {
        self.mem.words()
    }

    fn slot(&self, k: usize) -> Option<&[AtomicU64]> {
        self.words().get(k * SLOT_WORDS..(k + 1) * SLOT_WORDS)
    }

    fn shard(&self, file: FileId) -> MutexGuard<'_, Shard<SlotBook>> {
        self.books.lock(group_of(file))
    }

    /// Holds back lease grants on `file` (see [`Shard::hold`]).
    pub(crate) fn hold(&self, file: FileId) {
        self.shard(file).hold(file);
    }

    /// Ends one [`FlockSlots::hold`] of `file`.
    pub(crate) fn unhold(&self, file: FileId) {
        self.shard(file).unhold(file);
    }

    /// Names description `ofd` by `fd`, the number of the daemon's own descriptor of it, for
    /// the calls through it that follow, until as many [`FlockSlots::unname`]s: only a named
    /// description can be granted a lease or become a member.
    pub fn name(&self, ofd: OfdId, fd: i32) {
        let mut names = lock(&self.names);
        let e = names.entry(ofd).or_insert(Name { fd, calls: 0 });
        e.fd = fd;
        e.calls += 1;
    }

    /// Ends one [`FlockSlots::name`].
    pub fn unname(&self, ofd: OfdId) {
        let mut names = lock(&self.names);
        if let Some(e) = names.get_mut(&ofd) {
            e.calls = e.calls.saturating_sub(1);
            if e.calls == 0 {
                names.remove(&ofd);
            }
        }
    }

    /// The daemon's descriptor number that names `ofd`, if a call in flight named it.
    fn name_of(&self, ofd: OfdId) -> Option<i32> {
        lock(&self.names).get(&ofd).map(|e| e.fd)
    }

    /// Takes slot `k` back: the lock it held (its description, type and setter), validated,
    /// and its sleepers woken (they go to the daemon). `None` if it was not leased.
    fn revoke(&self, slots: &mut SlotMap<SlotBook>, k: usize) -> Option<Option<Taken>> {
        let book = slots.get_mut(&k)?;
        book.file.take()?;
        let slot = self.slot(k)?;
        let v = slot[STATE].fetch_or(SLOW, AcqRel);
        if v & WAITERS_MASK != 0 {
            crate::sync::futex_wake_all(&slot[STATE]);
        }
        // Not a word of the grant's epoch: written by someone else; nothing to trust.
        let owner = owner_in(v, book.epoch)
            .flatten()
            .and_then(|i| book.ofd_at(i));
        book.members.clear();
        let Some(ofd) = owner else {
            return Some(None);
        };
        let pid = (slot[SETTER].load(Acquire) & PID_MASK) as i32;
        let ty = if v & SH != 0 {
            crate::locks::LockType::Read
        } else {
            crate::locks::LockType::Write
        };
        Some((pid > 0).then_some((ofd, Some(ty), Tgid::new(pid))))
    }

    /// A call on `file` through description `by` (if any) begins: the file's lease is taken
    /// back first and its lock handed to `import`. No grant happens while a call is inside.
    pub(crate) fn enter(&self, file: FileId, by: Option<OfdId>, import: impl FnOnce(Taken)) {
        let mut sh = self.shard(file);
        let (book, slots) = sh.enter(file);
        let Some(k) = book.lease.take() else { return };
        let member = slots
            .get(&k)
            .is_some_and(|b| by.is_some_and(|o| b.index_of(o).is_some()));
        if !member {
            book.cooldown = COOLDOWN;
        }
        if let Some(Some(taken)) = self.revoke(slots, k) {
            import(taken);
        }
    }

    /// The call that [`FlockSlots::enter`]ed `file` ends. If it was the last one inside and
    /// `grant` names the description and pid of a successful flock call, and the description
    /// is named, the file may be leased to it: `take` is asked for the description's flock
    /// lock, which it removes from the engine, and returns only if nothing else is on the
    /// file (`Some(None)`: no lock).
    #[allow(clippy::type_complexity)]
    pub(crate) fn leave(
        &self,
        file: FileId,
        grant: Option<(OfdId, Tgid)>,
        take: impl FnOnce(OfdId) -> Option<Option<(crate::locks::LockType, Tgid)>>,
    ) {
        self.shard(file).leave(file, |book, slots| {
            let Some((ofd, pid)) = grant.filter(|&(_, p)| fits(p)) else {
                return;
            };
            if book.cooldown > 0 {
                book.cooldown -= 1;
            } else if let Some(token) = self.name_of(ofd) {
                if let Some(k) = self.free_slot(slots, file) {
                    if let Some(held) = take(ofd) {
                        let (mode, setter) = match held {
                            Some((crate::locks::LockType::Write, p)) => (Mode::Exclusive, p),
                            Some((_, p)) => (Mode::Shared, p),
                            None => (Mode::Unlocked, pid),
                        };
                        self.grant(slots, k, (file, ofd), token, (mode, setter, pid));
                        book.lease = Some(k);
                    }
                }
            }
        });
    }

    /// A slot of `file`'s group that no lease uses.
    fn free_slot(&self, slots: &SlotMap<SlotBook>, file: FileId) -> Option<usize> {
        (0..GROUP)
            .map(|i| group_of(file) * GROUP + i)
            .find(|&k| self.slot(k).is_some() && slots.get(&k).is_none_or(|b| b.file.is_none()))
    }

    /// Leases slot `k` to description `ofd` (named `fd` in the daemon) of process `caller`,
    /// holding `mode` set by `pid`.
    fn grant(
        &self,
        slots: &mut SlotMap<SlotBook>,
        k: usize,
        (file, ofd): (FileId, OfdId),
        fd: i32,
        (mode, pid, caller): (Mode, Tgid, Tgid),
    ) {
        let book = slots.entry(k).or_default();
        book.epoch = book.epoch.wrapping_add(1);
        book.file = Some(file);
        book.members = vec![Some(Member {
            ofd,
            pid: caller.get(),
        })];
        let Some(slot) = self.slot(k) else { return };
        for w in &slot[TOKEN0..] {
            w.store(0, Release);
        }
        slot[DEV].store(file.dev, Release);
        slot[INO].store(file.ino, Release);
        slot[DPID].store(u64::from(std::process::id()), Release);
        slot[SETTER].store(pid.get() as u64 & PID_MASK, Release);
        slot[TOKEN0].store(token_word(caller.get(), fd), Release);
        let lock = match mode {
            Mode::Unlocked => 0,
            Mode::Shared => 1 | SH,
            Mode::Exclusive => 1,
        };
        slot[STATE].store((book.epoch << EPOCH_SHIFT) | HELD | lock, Release);
        self.books.mark_granted();
    }

    /// A call of description `ofd` (process `pid`, asking for `want`) on `file` whose slot it
    /// can use: if the file is leased and `ofd` is named, it becomes (or stays) a member of the
    /// slot, named with `pid`, and the call is the caller's to redo there. LOCK_SH makes no
    /// second member (the slot serves LOCK_SH only to a lone member).
    pub(crate) fn register(&self, file: FileId, ofd: OfdId, pid: Tgid, want: Mode) -> bool {
        let Some(fd) = self.name_of(ofd) else {
            return false;
        };
        if !fits(pid) {
            return false;
        }
        let pid = pid.get();
        let mut sh = self.shard(file);
        let Some((k, book)) = sh.leased_mut(file) else {
            return false;
        };
        let Some(slot) = self.slot(k) else {
            return false;
        };
        if let Some(i) = book.index_of(ofd) {
            slot[TOKEN0 + i].store(token_word(pid, fd), Release);
            book.members[i] = Some(Member { ofd, pid });
            return true;
        }
        if want == Mode::Shared || book.members.len() >= MEMBERS {
            return false;
        }
        let i = book.members.len();
        slot[TOKEN0 + i].store(token_word(pid, fd), Release);
        let mut v = slot[STATE].load(Acquire);
        loop {
            if v & (HELD | SLOW | SH) != HELD {
                slot[TOKEN0 + i].store(0, Release);
                return false;
            }
            match slot[STATE].compare_exchange(v, v | MULTI, AcqRel, Acquire) {
                Ok(_) => break,
                Err(now) => v = now,
            }
        }
        book.members.push(Some(Member { ofd, pid }));
        true
    }

    /// After process `pid`'s exit: wakes every slot's sleepers (one woken by an unlock may
    /// have died before taking the lock, leaving the others asleep on a free lock), and drops
    /// the members named with `pid` that do not hold the lock. Nothing else keeps such a
    /// member's description: without this a lease would keep every description that ever
    /// joined it, and their files open, for as long as the lease lives. A dropped member's
    /// token becomes [`GONE`] before the embedder can close its descriptor (it does once
    /// [`FlockSlots::holds`] says no), and then nobody can prove to be it: a caller would
    /// need the pid of a process that is gone. (A process given that pid anew, and the same
    /// description, between the exit and this walk could still take the lock as the member
    /// just dropped: the lock would then be lost at the next revoke.) A process that still
    /// holds the description asks the daemon, and joins as a new member.
    pub(crate) fn exit(&self, pid: Tgid) {
        self.books.each_shard(|sh| {
            for (&k, b) in sh.slots.iter_mut() {
                let Some(slot) = self.slot(k).filter(|_| b.file.is_some()) else {
                    continue;
                };
                let s = slot[STATE].load(Acquire);
                if s & WAITERS_MASK != 0 {
                    crate::sync::futex_wake_all(&slot[STATE]);
                }
                let Some(owner) = owner_in(s, b.epoch) else {
                    continue;
                };
                for (i, m) in b.members.iter_mut().enumerate() {
                    if m.is_some_and(|m| m.pid == pid.get()) && owner != Some(i) {
                        slot[TOKEN0 + i].store(GONE, SeqCst);
                        *m = None;
                    }
                }
            }
        });
    }

    /// Whether description `ofd` holds `file`'s lease (the embedder keeps what names it).
    pub fn holds(&self, file: FileId, ofd: OfdId) -> bool {
        let sh = self.shard(file);
        sh.leased(file)
            .is_some_and(|(_, b)| b.index_of(ofd).is_some())
    }

    /// Whether description `ofd` may hold `file`'s flock lock through the file's lease: a
    /// member that the slot's `STATE`, read now, names as the owner, or any member while that
    /// word is not one this book can read (not HELD, SLOW, another epoch). A member that is
    /// not the owner holds nothing that its last close would drop.
    pub fn may_hold(&self, file: FileId, ofd: OfdId) -> bool {
        let sh = self.shard(file);
        let Some((k, book)) = sh.leased(file) else {
            return false;
        };
        let Some(i) = book.index_of(ofd) else {
            return false;
        };
        let Some(slot) = self.slot(k) else {
            return true;
        };
        owner_in(slot[STATE].load(Acquire), book.epoch).is_none_or(|owner| owner == Some(i))
    }

    /// Takes every lease back (a listing of all locks), handing each one's lock to `import`.
    pub(crate) fn revoke_all(&self, mut import: impl FnMut(FileId, Taken)) {
        self.books.revoke_all(|slots, f, k| {
            if let Some(Some(taken)) = self.revoke(slots, k) {
                import(f, taken);
            }
        });
    }

    /// The description `file`'s lease was granted to, if any (tests).
    pub fn holder(&self, file: FileId) -> Option<OfdId> {
        self.shard(file).leased(file)?.1.ofd_at(0)
    }
}
