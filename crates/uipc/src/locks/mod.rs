//! POSIX record locks, OFD locks and flock (`fs/locks.c`; fcntl(2), flock(2)), built to seed
//! 001: one mutex per file instead of one global lock, blocked requests hashed by owner for
//! deadlock detection, and a listing that writers never contend on.
//!
//! A [`LockManager`] is keyed by the caller's [`FileId`] (device + inode). Owners are as on Linux:
//! the process (`Cred::tgid`) for POSIX locks, the open file description ([`OfdId`]) for OFD
//! and flock locks. The caller describes each descriptor it acts through with an [`OpenFile`]
//! (access mode, offset and size for `l_whence`), and reports closes and exits.
//!
//! Layout and algorithms:
//! - `files`: file -> context, sharded; the lock/unlock path touches a shard only to find the
//!   file, and a context stays while the file has locks or until an idle close (no churn).
//! - `uncontended`: a request on a file nobody waits on, that nothing held conflicts with, is
//!   finished there under the file's mutex, with no blocker list, wake-up walk or waiter.
//! - `file`: per file, the POSIX/OFD list (owners contiguous, each owner's ranges sorted and
//!   merged by `range`), the flock list and the blocked requests. Whenever a change releases
//!   bytes while requests wait, the waiters that no longer conflict are woken to retry, as on
//!   Linux, except those nested behind an earlier woken waiter (one writer wakes per unlock of
//!   a contended range, no thundering herd).
//! - `deadlock`: the blocked-request graph, keyed by owner; Linux's bounded walk by default,
//!   or a full search through every kind of owner ([`DeadlockMode::Full`]).
//! - `procfs`: `/proc/locks` and [`LockInfo`] listings, built by visiting files one at a time;
//!   there is no global list of locks for writers to update, so nothing global is written on
//!   the lock or unlock path at all.
//!
//! Lock order: file-map shard -> one file's state -> deadlock graph -> a waiter's state. No
//! two files' states are ever held at once, and nothing sleeps holding any of them.
//!
//! Blocking (F_SETLKW, F_OFD_SETLKW, flock without LOCK_NB) sleeps on the calling thread with
//! the caller's [`crate::WaitCtx`], or, through the `*_start` forms, parks as a
//! [`ParkedLock`] that the embedder polls when notified (its module has the protocol). Linux
//! has no timeout for these calls: a deadline is treated as a signal arriving then, so both
//! an interrupt and a deadline give EINTR (the embedder restarts the call itself where
//! SA_RESTART applies).
//!
//! ## Not supported
//! - Leases (F_SETLEASE / F_GETLEASE) and NFS delegations.
//! - Mandatory locking (gone from Linux in 5.15) and `LOCK_MAND` (accepted and ignored, as on
//!   Linux).
//! - The waiter tree's history: Linux re-inserts a woken request that must wait again under
//!   whatever blocks it then; uipc lists (and records for deadlock detection) the tree as if
//!   every request still asleep had been inserted in arrival order. In Linux mode a sleeping
//!   request's blockers are recorded again only after a release (Linux keeps the one blocker
//!   it slept on), and, as on Linux, deadlock is checked again on each retry and whenever a
//!   release leaves a sleeping request behind a new first blocker (where Linux wakes it and
//!   it waits again).
//! - `CLONE_FILES` sharing between processes: the POSIX owner is always the caller's tgid.
//! - The `fcntl`/`close` race Linux repairs by undoing a lock set through a descriptor closed
//!   meanwhile: the engine sees no descriptors.
//! - Process exit does not end a sleeping request of the exiting process: the embedder raises
//!   that thread's [`crate::Interrupt`] (or cancels its [`ParkedLock`]), as a dying task's
//!   wait ends on Linux.
//! - ENOLCK comes from a per-file record limit ([`LockConfig::max_locks_per_file`]), not from
//!   memory pressure.

mod books;
mod deadlock;
mod fcntl;
pub mod fdmemo;
mod file;
mod files;
mod flock;
pub mod flockfast;
pub mod lease;
#[cfg(all(test, loom))]
mod loom_models;
mod parked;
mod procfs;
mod range;
pub mod types;
mod uncontended;

pub use deadlock::DeadlockMode;
pub use parked::ParkedLock;
pub use types::*;

use crate::sync::lock;
use crate::wait::{ParkCtx, Progress, Waiter};
use crate::{Errno, Result, Tgid};
use file::Blocked;
use files::FileMap;
use parked::LockCall;
use std::sync::Arc;

/// Tunables of a lock manager.
#[derive(Clone, Copy, Debug)]
pub struct LockConfig {
    /// How far deadlock detection looks; [`DeadlockMode::Linux`] by default.
    pub deadlock: DeadlockMode,
    /// Lock records one file may hold (POSIX/OFD and flock lists each); past it, ENOLCK.
    pub max_locks_per_file: usize,
}

impl Default for LockConfig {
    fn default() -> LockConfig {
        LockConfig {
            deadlock: DeadlockMode::Linux,
            max_locks_per_file: usize::MAX,
        }
    }
}

/// POSIX, OFD and flock locks over any number of files.
pub struct LockManager {
    config: LockConfig,
    files: FileMap,
    graph: deadlock::DeadlockGraph,
    /// Leases of files to the one process that locks them (`lease`), if the embedder gave
    /// an area.
    leases: Option<std::sync::Arc<lease::Leases>>,
    /// Leases of files to the one description that flocks them (`flockfast`), if the
    /// embedder gave an area.
    flock_slots: Option<flockfast::FlockSlots>,
}

impl Default for LockManager {
    fn default() -> LockManager {
        LockManager::new()
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What the first, locked part of a request decided.
enum Step {
    Done(Result<()>),
    Sleep(crate::sync::Arc<file::FileLocks>, Arc<Waiter<()>>),
}

impl LockManager {
    /// A manager with Linux's behaviour ([`LockConfig::default`]).
    pub fn new() -> LockManager {
        LockManager::with_config(LockConfig::default())
    }

    /// A manager with the given tunables.
    pub fn with_config(config: LockConfig) -> LockManager {
        let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
        LockManager {
            config,
            files: FileMap::new((cpus * 16).max(64)),
            graph: deadlock::DeadlockGraph::new(config.deadlock),
            leases: None,
            flock_slots: None,
        }
    }

    /// The tunables.
    pub fn config(&self) -> LockConfig {
        self.config
    }

    /// A request: sets `req` on `file`, or queues it if it conflicts and `wait`; EAGAIN if it
    /// conflicts and not `wait`. With `flock_conversion`, the owner's existing flock lock is
    /// first kept (same type asked: done) or dropped (flock's non-atomic conversion).
    ///
    /// A sleeper is woken to retry (`FileState::wake_unblocked`), as on Linux: it takes the
    /// file's lock, leaves the queue and tries again, and may find the range taken again by a
    /// task that was running meanwhile. Handing the range straight to the sleeper instead
    /// would make every lock of a contended range cost a context switch (a convoy).
    ///
    /// This is one attempt, under the file's lock; `woken` is the request's previous waiter
    /// (woken to retry), which leaves the queue in the same critical section. If the request
    /// must wait, its waiter (carrying `park`'s notifier) is queued and returned parked.
    #[inline(always)]
    pub(crate) fn request_step(
        &self,
        call: LockCall,
        wait: bool,
        woken: Option<Arc<Waiter<()>>>,
        park: &ParkCtx,
    ) -> Progress<(), ParkedLock> {
        if self.leases.is_none() && self.flock_slots.is_none() {
            // No slot areas (an embedder's engine): none of the hooks below has work.
            return self.request_step_entered(call, wait, woken, park);
        }
        let (file, req) = (call.file, call.req);
        if let Some(r) = self.shared_step(&call, wait, woken.as_ref()) {
            return Progress::Done(r);
        }
        if let (Some(w), true) = (&woken, call.may_redo) {
            if let Some(r) = self.flock_redo_woken(&call, w) {
                return Progress::Done(r);
            }
        }
        let ofd = match req.owner {
            Owner::Description(o) => Some(o),
            Owner::Process(_) => None,
        };
        let retry = woken.is_some();
        self.lease_enter(file, req.pid, false);
        self.flock_enter(file, ofd);
        let r = self.request_step_entered(call, wait, woken, park);
        let done = matches!(r, Progress::Done(Ok(())));
        let flocked = req.kind == LockKind::Flock && done && !retry;
        self.flock_leave(file, ofd.filter(|_| flocked).map(|o| (o, req.pid)));
        self.lease_leave(
            file,
            (req.kind == LockKind::Posix && done).then_some(req.pid),
        );
        r
    }

    /// [`LockManager::request_step`] inside the file (its lease taken back).
    fn request_step_entered(
        &self,
        call: LockCall,
        wait: bool,
        mut woken: Option<Arc<Waiter<()>>>,
        park: &ParkCtx,
    ) -> Progress<(), ParkedLock> {
        let limit = self.config.max_locks_per_file;
        // The closure returns the uncontended result (8 bytes, in registers) and leaves the
        // general path's outcome in `slow`.
        let mut slow = None;
        let done = self
            .files
            .with(call.file, call.req.ty.is_some(), |fctx, mut st| {
                if woken.is_none() {
                    if let Some(r) = st.uncontended(&call.req, call.flock_conversion, limit) {
                        return r;
                    }
                }
                slow = Some(self.try_request(&mut st, fctx, &call, wait, park));
                if let Some(w) = woken.take() {
                    // Leaving the queue may let requests that waited behind this one go.
                    st.dequeue(&w, &self.graph);
                }
                Ok(())
            });
        match slow {
            // An unlock on a file that has no locks, or an uncontended request.
            None => Progress::Done(done.unwrap_or(Ok(()))),
            Some(Step::Done(r)) => Progress::Done(r),
            Some(Step::Sleep(fctx, waiter)) => Self::parked(fctx, waiter, park, call),
        }
    }

    /// A request queued to wait, as a [`ParkedLock`].
    #[cold]
    fn parked(
        fctx: crate::sync::Arc<file::FileLocks>,
        waiter: Arc<Waiter<()>>,
        park: &ParkCtx,
        call: LockCall,
    ) -> Progress<(), ParkedLock> {
        Progress::Parked(ParkedLock::new(fctx, waiter, park, call))
    }

    /// One attempt of [`LockManager::request_step`] on its general path, under the file's lock
    /// (out of line: the uncontended path stays small). A woken request's previous waiter is
    /// still queued; the caller takes it out after.
    #[inline(never)]
    fn try_request(
        &self,
        st: &mut file::FileState,
        fctx: &crate::sync::Arc<file::FileLocks>,
        call: &LockCall,
        wait: bool,
        park: &ParkCtx,
    ) -> Step {
        let (req, limit) = (&call.req, self.config.max_locks_per_file);
        if call.flock_conversion {
            if let Some(h) = st.flocks.iter().find(|h| h.owner == req.owner) {
                if Some(h.ty) == req.ty {
                    return Step::Done(Ok(()));
                }
                st.remove_flock(req.owner);
                st.after_change(&self.graph);
            }
            if req.ty.is_none() {
                return Step::Done(Ok(()));
            }
        }
        let blockers = st.blockers(req);
        if blockers.is_empty() {
            return Step::Done(st.set(req, limit, &self.graph));
        }
        if !wait {
            return Step::Done(Err(Errno::EAGAIN));
        }
        // A request with blockers conflicts with a held lock, so it has a parent. Flock
        // requests hang under flock nodes; where every POSIX/OFD node is of one kind, that is
        // the parent's kind; only a mixed list needs the tree.
        let parent_kind = match req.kind {
            LockKind::Flock => LockKind::Flock,
            _ => st.uniform_posix_kind().unwrap_or_else(|| {
                let tree = st.waiter_tree();
                st.tree_parent(req, &tree)
                    .map_or(req.kind, |p| st.node_kind(p))
            }),
        };
        let (check, record) = self.graph.policy(req.kind, parent_kind);
        let graph_id = match self
            .graph
            .check_and_insert(req.owner, &blockers, check, record)
        {
            Ok(id) => id,
            Err(e) => return Step::Done(Err(e)),
        };
        let waiter = park.waiter();
        st.enqueue(Blocked {
            req: *req,
            waiter: waiter.clone(),
            graph_id,
            blockers,
            woken: false,
            may_redo: call.may_redo,
        });
        Step::Sleep(fctx.clone(), waiter)
    }

    /// Every held lock and blocked request, file by file (files in [`FileId`] order).
    pub fn list(&self) -> Vec<LockInfo> {
        self.leases_revoke_all();
        self.flock_revoke_all();
        let mut files = self.files.all();
        files.sort_by_key(|(id, _)| *id);
        let mut out = Vec::new();
        for (id, ctx) in files {
            let st = lock(&ctx.state);
            if !st.removed {
                procfs::list_file(id, &st, &mut out);
            }
        }
        out
    }

    /// The locks of one file, as [`LockManager::list`] shows them.
    pub fn list_file(&self, file: FileId) -> Vec<LockInfo> {
        let mut out = Vec::new();
        self.with_leases_back(file, || {
            self.files
                .with(file, false, |_, st| procfs::list_file(file, &st, &mut out))
        });
        out
    }

    /// Runs `f` with `file`'s leases (POSIX and flock) taken back into the engine, granting
    /// none after it.
    fn with_leases_back<R>(&self, file: FileId, f: impl FnOnce() -> R) -> R {
        self.lease_enter(file, Tgid::new(0), false);
        self.flock_enter(file, None);
        let r = f();
        self.flock_leave(file, None);
        self.lease_leave(file, None);
        r
    }

    /// Holds back the grants of both lease kinds (POSIX lease, shared mode, flock lease) on
    /// `file` until as many [`LockManager::release_grants`], and takes its leases back into
    /// the engine: its locks must stay the engine's while a close the embedder cannot see
    /// may drop them (a process about to exec with a close-on-exec descriptor of the file:
    /// the close drops the process's POSIX locks, and its description's flock and OFD locks
    /// if that was the last reference).
    pub fn hold_grants(&self, file: FileId) {
        if let Some(l) = &self.leases {
            l.hold(file);
        }
        if let Some(l) = &self.flock_slots {
            l.hold(file);
        }
        self.with_leases_back(file, || ());
    }

    /// Ends one [`LockManager::hold_grants`] of `file`.
    pub fn release_grants(&self, file: FileId) {
        if let Some(l) = &self.leases {
            l.unhold(file);
        }
        if let Some(l) = &self.flock_slots {
            l.unhold(file);
        }
    }

    /// Whether `owner` holds a lock on `file` or has a request blocked there (what
    /// [`LockManager::list_file`] would show for it, without building the listing).
    pub fn owns_any(&self, file: FileId, owner: Owner) -> bool {
        if let Owner::Description(o) = owner {
            if self.flock_leased(file, o) {
                return true;
            }
        }
        self.engine_owns(file, owner)
    }

    /// Whether `owner` may hold a lock on `file` or has a request blocked there: as
    /// [`LockManager::owns_any`], except that a member of the file's flock lease counts only if
    /// it may hold the lease's lock (a member that does not owns nothing a close would drop).
    pub fn holds_or_waits(&self, file: FileId, owner: Owner) -> bool {
        if let Owner::Description(o) = owner {
            if self.flock_may_hold(file, o) {
                return true;
            }
        }
        self.engine_owns(file, owner)
    }

    /// Whether the engine's state of `file` has a lock or a blocked request of `owner`.
    fn engine_owns(&self, file: FileId, owner: Owner) -> bool {
        self.files
            .with(file, false, |_, st| {
                st.posix.iter().any(|h| h.owner == owner)
                    || st.flocks.iter().any(|h| h.owner == owner)
                    || st.blocked.iter().any(|b| b.req.owner == owner)
            })
            .unwrap_or(false)
    }

    /// `/proc/locks`: every lock, in the kernel's format.
    pub fn proc_locks(&self) -> String {
        procfs::render(&self.list())
    }

    /// The `lock:` lines of a `/proc/PID/fdinfo/FD` file of process `tgid` whose descriptor
    /// refers to `file` through description `ofd` (`None`: one the daemon never saw lock
    /// anything): the process's POSIX locks on the file and the description's OFD and flock
    /// locks, in the kernel's format. Linux shows only the POSIX locks set through that
    /// description; the engine does not record which description set a POSIX lock.
    pub fn fdinfo_locks(&self, file: FileId, tgid: Tgid, ofd: Option<OfdId>) -> String {
        let owners = (Owner::Process(tgid), ofd.map(Owner::Description));
        procfs::render_fdinfo(&self.list_file(file), owners.0, owners.1)
    }

    /// Process `tgid` closed one descriptor of `file`, which refers to description `ofd`: all
    /// of the process's POSIX locks on the file go (whatever descriptor set them); if that was
    /// the description's last reference (`last_reference`), its OFD and flock locks go too.
    pub fn close(&self, tgid: Tgid, file: FileId, ofd: OfdId, last_reference: bool) {
        // A lease of another process stays: a close drops only the closer's POSIX locks, and
        // a leased file has no OFD or flock lock.
        self.lease_enter(file, tgid, true);
        // A flock lease goes only with its description's last reference.
        if last_reference {
            self.flock_enter(file, Some(ofd));
        }
        self.files.with(file, false, |_, mut st| {
            let mut changed = st.remove_posix_owner(Owner::Process(tgid));
            if last_reference {
                changed |= st.remove_posix_owner(Owner::Description(ofd));
                changed |= st.remove_flock(Owner::Description(ofd));
            }
            if changed {
                st.after_change(&self.graph);
            }
        });
        self.files.remove_if_idle(file);
        if last_reference {
            self.flock_leave(file, None);
        }
        self.lease_leave(file, None);
    }

    /// Process exit: every POSIX lock of `tgid`, on every file, goes. (The embedder reports the
    /// last closes of the process's descriptions with [`LockManager::close`].)
    pub fn process_exit(&self, tgid: Tgid) {
        if let Some(l) = &self.leases {
            l.exit(tgid.get());
        }
        self.flock_exit(tgid);
        for (id, _) in self.files.all() {
            self.files.with(id, false, |_, mut st| {
                if st.remove_posix_owner(Owner::Process(tgid)) {
                    st.after_change(&self.graph);
                }
            });
            self.files.remove_if_idle(id);
        }
    }
}
