//! Before seed 001 (Linux up to 3.10): every file lock in the system behind one global lock,
//! with deadlock detection walking one global list of blocked requests. Kept only to measure
//! the engine against (`uipc bench lockperf`); nothing else uses it.
//!
//! What it models, as Linux did it before "locks: scalability improvements for file locking":
//! - One global lock (`file_lock_lock`, a spinlock that replaced the BKL in 2010) protects every
//!   file's lock list, every request's wait state and the blocked list. Here it is one
//!   [`Mutex`], the user-space counterpart of a spinlock that a sleeping thread can hold.
//! - Each file has one list of held locks (`inode->i_flock`), flock and POSIX locks together,
//!   scanned linearly for conflicts. POSIX locks are byte ranges, read (shared) or write
//!   (exclusive), owned by a process; flock locks cover the whole file, shared or exclusive,
//!   owned by an open file description.
//! - A request that must wait is queued behind the held lock that blocks it (`fl_block`) and,
//!   when that is a POSIX lock, also on the global `blocked_list`. Before queueing, a blocking
//!   POSIX request runs the deadlock check: from the blocking lock's owner, scan the whole
//!   blocked list for a request of that owner, step to the owner of the lock *it* waits
//!   behind, and repeat; reaching the caller is EDEADLK, and after 10 steps the check gives up.
//!   Every step is a linear scan of the global list, under the global lock.
//! - Removing or changing a held lock wakes every request queued behind it (`fl_block`), each of
//!   which retakes the global lock and tries again from the start (the thundering herd).
//!
//! Lock order: the global `state` mutex is the only lock. A sleeping request waits on its own
//! condition variable, always paired with `state`; on entry and exit of every public method
//! nothing is held.
//!
//! Not modelled (none of it is on the benchmarked path): OFD locks, leases, merging of adjacent
//! POSIX locks of one owner (they are kept as separate records; conflicts and unlocks are the
//! same), `LOCK_MAND`, offsets relative to `SEEK_CUR`/`SEEK_END` (callers pass absolute inclusive
//! ranges), close and exit, interruption of a sleeping request, and the global `file_lock_list`
//! of every held lock (an O(1) insert and removal under the same lock, for `/proc/locks`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use uipc::Errno;

// The flock commands are the host's (Linux's) numbers.
use libc::{LOCK_EX, LOCK_NB, LOCK_SH, LOCK_UN};

/// `l_type` of a read (shared) POSIX lock, as Linux numbers it.
pub const F_RDLCK: i16 = libc::F_RDLCK as i16;
/// `l_type` of a write (exclusive) POSIX lock.
pub const F_WRLCK: i16 = libc::F_WRLCK as i16;
/// `l_type` of an unlock.
pub const F_UNLCK: i16 = libc::F_UNLCK as i16;

/// Which file: any number unique among the files shown to the table (an inode number).
pub type FileKey = u64;

/// Who owns a lock: a process for POSIX locks, an open file description for flock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Owner {
    Process(i32),
    Description(u64),
}

/// Linux's `MAX_DEADLK_ITERATIONS`.
const MAX_DEADLOCK_STEPS: usize = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Posix,
    Flock,
}

/// One held lock (`struct file_lock` on `i_flock`); `end` is inclusive.
struct HeldLock {
    id: u64,
    family: Family,
    owner: Owner,
    exclusive: bool,
    start: i64,
    end: i64,
}

impl HeldLock {
    fn conflicts_with(
        &self,
        family: Family,
        owner: Owner,
        exclusive: bool,
        start: i64,
        end: i64,
    ) -> bool {
        self.family == family
            && self.owner != owner
            && (self.exclusive || exclusive)
            && self.start <= end
            && start <= self.end
    }
}

/// How a sleeping request is woken: the waker sets `woken` under `state` and signals `wake`.
#[derive(Default)]
struct WaitSlot {
    woken: AtomicBool,
    wake: Condvar,
}

/// A request queued behind the held lock `blocker` (an entry of its `fl_block` list).
struct QueuedRequest {
    blocker: u64,
    slot: Arc<WaitSlot>,
    /// Its entry on the global blocked list, for POSIX requests.
    blocked_list_entry: Option<usize>,
}

/// An entry of the global blocked list: who waits, and who holds the lock it waits behind.
struct BlockedEntry {
    owner: Owner,
    blocker_owner: Owner,
}

#[derive(Default)]
struct FileLocks {
    held: Vec<HeldLock>,
    queued: Vec<QueuedRequest>,
}

#[derive(Default)]
struct State {
    /// Every file's lists. A file's (empty) lists stay once created, as `i_flock` lived in the
    /// inode.
    files: HashMap<FileKey, FileLocks>,
    /// The global blocked list, as slots so that removal is O(1) like `list_del`; scans walk
    /// every slot, as a list walk visits every entry.
    blocked_list: Vec<Option<BlockedEntry>>,
    free_blocked_slots: Vec<usize>,
    next_lock_id: u64,
}

impl State {
    /// `posix_locks_deadlock`: whether `caller` waiting behind `blocker_owner` closes a cycle.
    fn would_deadlock(&self, caller: Owner, mut blocker_owner: Owner) -> bool {
        for _ in 0..MAX_DEADLOCK_STEPS {
            let next = self
                .blocked_list
                .iter()
                .flatten()
                .find(|e| e.owner == blocker_owner)
                .map(|e| e.blocker_owner);
            match next {
                None => return false,
                Some(o) if o == caller => return true,
                Some(o) => blocker_owner = o,
            }
        }
        false
    }

    fn add_to_blocked_list(&mut self, entry: BlockedEntry) -> usize {
        match self.free_blocked_slots.pop() {
            Some(i) => {
                self.blocked_list[i] = Some(entry);
                i
            }
            None => {
                self.blocked_list.push(Some(entry));
                self.blocked_list.len() - 1
            }
        }
    }

    /// Removes held lock `index` of `file` and wakes every request queued behind it.
    fn remove_held(&mut self, file: FileKey, index: usize) {
        let locks = self.files.get_mut(&file).expect("file with held locks");
        let gone = locks.held.remove(index);
        let mut i = 0;
        while i < locks.queued.len() {
            if locks.queued[i].blocker == gone.id {
                let q = locks.queued.swap_remove(i);
                if let Some(e) = q.blocked_list_entry {
                    self.blocked_list[e] = None;
                    self.free_blocked_slots.push(e);
                }
                q.slot.woken.store(true, Ordering::Relaxed);
                q.slot.wake.notify_one();
            } else {
                i += 1;
            }
        }
    }

    fn insert_held(
        &mut self,
        file: FileKey,
        family: Family,
        owner: Owner,
        exclusive: bool,
        start: i64,
        end: i64,
    ) {
        let id = self.next_lock_id;
        self.next_lock_id += 1;
        self.files.entry(file).or_default().held.push(HeldLock {
            id,
            family,
            owner,
            exclusive,
            start,
            end,
        });
    }

    /// Takes `[start, end]` out of `owner`'s POSIX locks on `file`, splitting a lock that covers
    /// more; every lock touched wakes its queue.
    fn carve_out(&mut self, file: FileKey, owner: Owner, start: i64, end: i64) {
        let mut i = 0;
        loop {
            let Some(locks) = self.files.get(&file) else {
                return;
            };
            let Some(l) = locks.held.get(i) else { return };
            if l.family != Family::Posix || l.owner != owner || l.end < start || end < l.start {
                i += 1;
                continue;
            }
            let (exclusive, l_start, l_end) = (l.exclusive, l.start, l.end);
            self.remove_held(file, i);
            if l_start < start {
                self.insert_held(file, Family::Posix, owner, exclusive, l_start, start - 1);
            }
            if end < l_end {
                self.insert_held(file, Family::Posix, owner, exclusive, end + 1, l_end);
            }
        }
    }
}

/// Every file's locks behind one global lock.
#[derive(Default)]
pub struct GlobalLockTable {
    state: Mutex<State>,
}

impl GlobalLockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a request behind held lock `blocker` and sleeps until that lock goes or changes;
    /// returns the state lock for the retry.
    fn sleep_behind<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        file: FileKey,
        blocker: u64,
        blocked_list_entry: Option<BlockedEntry>,
    ) -> MutexGuard<'a, State> {
        let slot = Arc::new(WaitSlot::default());
        let blocked_list_entry = blocked_list_entry.map(|e| st.add_to_blocked_list(e));
        st.files
            .entry(file)
            .or_default()
            .queued
            .push(QueuedRequest {
                blocker,
                slot: slot.clone(),
                blocked_list_entry,
            });
        while !slot.woken.load(Ordering::Relaxed) {
            st = slot.wake.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    /// `fcntl(F_SETLK/F_SETLKW)` by process `pid` over the inclusive byte range `[start, end]`
    /// (`end` = `i64::MAX` for "to EOF"): `l_type` F_RDLCK, F_WRLCK or F_UNLCK. `wait` makes it
    /// F_SETLKW. Errors: EINVAL (bad type or range), EAGAIN (conflict, no wait), EDEADLK.
    pub fn posix(
        &self,
        file: FileKey,
        pid: i32,
        l_type: i16,
        start: i64,
        end: i64,
        wait: bool,
    ) -> Result<(), Errno> {
        if start < 0 || end < start || ![F_RDLCK, F_WRLCK, F_UNLCK].contains(&l_type) {
            return Err(Errno::EINVAL);
        }
        let owner = Owner::Process(pid);
        let mut st = self.lock_state();
        if l_type == F_UNLCK {
            st.carve_out(file, owner, start, end);
            return Ok(());
        }
        let exclusive = l_type == F_WRLCK;
        loop {
            let blocker = st.files.get(&file).and_then(|f| {
                f.held
                    .iter()
                    .find(|l| l.conflicts_with(Family::Posix, owner, exclusive, start, end))
                    .map(|l| (l.id, l.owner))
            });
            let Some((blocker, blocker_owner)) = blocker else {
                st.carve_out(file, owner, start, end);
                st.insert_held(file, Family::Posix, owner, exclusive, start, end);
                return Ok(());
            };
            if !wait {
                return Err(Errno::EAGAIN);
            }
            if st.would_deadlock(owner, blocker_owner) {
                return Err(Errno::EDEADLK);
            }
            let entry = BlockedEntry {
                owner,
                blocker_owner,
            };
            st = self.sleep_behind(st, file, blocker, Some(entry));
        }
    }

    /// `flock(fd, cmd)` through open file description `ofd`: LOCK_SH, LOCK_EX or LOCK_UN,
    /// optionally with LOCK_NB. As on Linux, a conversion drops the old lock first.
    /// Errors: EINVAL (bad cmd), EWOULDBLOCK (conflict with LOCK_NB).
    pub fn flock(&self, file: FileKey, ofd: u64, cmd: i32) -> Result<(), Errno> {
        let wait = cmd & LOCK_NB == 0;
        let op = cmd & !LOCK_NB;
        if ![LOCK_SH, LOCK_EX, LOCK_UN].contains(&op) {
            return Err(Errno::EINVAL);
        }
        let owner = Owner::Description(ofd);
        let exclusive = op == LOCK_EX;
        let mut st = self.lock_state();
        let mine = st.files.get(&file).and_then(|f| {
            f.held
                .iter()
                .position(|l| l.family == Family::Flock && l.owner == owner)
        });
        if let Some(i) = mine {
            if op != LOCK_UN && st.files[&file].held[i].exclusive == exclusive {
                return Ok(());
            }
            st.remove_held(file, i);
        }
        if op == LOCK_UN {
            return Ok(());
        }
        loop {
            let blocker = st.files.get(&file).and_then(|f| {
                f.held
                    .iter()
                    .find(|l| l.conflicts_with(Family::Flock, owner, exclusive, 0, i64::MAX))
                    .map(|l| l.id)
            });
            let Some(blocker) = blocker else {
                st.insert_held(file, Family::Flock, owner, exclusive, 0, i64::MAX);
                return Ok(());
            };
            if !wait {
                return Err(Errno::EWOULDBLOCK);
            }
            st = self.sleep_behind(st, file, blocker, None);
        }
    }

    /// How many POSIX requests are on the global blocked list now.
    pub fn blocked_posix_requests(&self) -> usize {
        self.lock_state().blocked_list.iter().flatten().count()
    }
}

#[cfg(test)]
#[path = "global_locks_tests.rs"]
mod tests;
