//! One file's locks (Linux's `file_lock_context`): the POSIX/OFD list, the flock list, and the
//! requests blocked on them, all behind the file's own mutex (seed 001: per-inode locking
//! instead of one global lock).
//!
//! - `posix` holds POSIX and OFD locks. Each owner's locks are contiguous, sorted by start and
//!   merged ([`super::range`]); owners appear in the order their first current lock was set, as
//!   on Linux, so F_GETLK reports the same "first conflicting lock" the kernel does.
//! - `flocks` holds flock locks, one per open file description at most, oldest first.
//! - `blocked` holds sleeping requests in arrival order.
//!
//! Waking: only a change that releases bytes (an unlock, a downgrade, a removed flock lock)
//! walks the blocked requests ([`FileState::wake_unblocked`]), oldest first. A request that no
//! longer conflicts with any held lock is woken to retry, as Linux does, unless it conflicts
//! with a request woken before it that has not retried yet: those nested requests stay asleep
//! (Linux's waiter tree wakes only the waiters hanging directly under the released lock), so
//! an unlock of a contended range wakes one writer, not all of them. The woken request stays
//! queued, marked `woken`, until its sleeper takes the file's mutex, leaves the queue and tries
//! again. Handing the range to the sleeper instead would be fairer but makes every lock of a
//! contended range wait for a context switch (a convoy: seed 001's posix01 ran 200 times
//! slower that way). Requests that still conflict get their blockers recorded again; one left
//! behind a new first blocker is checked for a deadlock then (Linux wakes it, and it finds the
//! cycle as it waits again), and in a cycle it is woken so that its retry gets EDEADLK.
//!
//! Lock order: the file map shard (only to find the file) -> `FileLocks::state` -> the deadlock
//! graph (`super::deadlock`) -> a `Waiter`'s state. Nothing sleeps holding `state`.

use super::deadlock::DeadlockGraph;
use super::range::{self, overlaps, Piece};
use super::types::{LockKind, LockType, Owner};
use crate::sync::Mutex;
use crate::wait::Waiter;
use crate::{Errno, Result, Tgid};
use std::collections::HashMap;
use std::sync::Arc;

/// A held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub kind: LockKind,
    pub owner: Owner,
    /// The process that set it.
    pub pid: Tgid,
    pub ty: LockType,
    pub start: i64,
    pub end: i64,
}

/// A lock request: a held lock to be, or an unlock (`ty: None`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub kind: LockKind,
    pub owner: Owner,
    /// The calling process.
    pub pid: Tgid,
    pub ty: Option<LockType>,
    pub start: i64,
    pub end: i64,
}

impl Request {
    pub(super) fn held(&self, ty: LockType) -> Held {
        Held {
            kind: self.kind,
            owner: self.owner,
            pid: self.pid,
            ty,
            start: self.start,
            end: self.end,
        }
    }
}

/// Whether `held` stops `req`: another owner, overlapping bytes, and a write on either side.
/// An unlock is never stopped.
pub(crate) fn conflicts(req: &Request, held: &Held) -> bool {
    let Some(ty) = req.ty else {
        return false;
    };
    req.owner != held.owner
        && overlaps((req.start, req.end), (held.start, held.end))
        && (ty == LockType::Write || held.ty == LockType::Write)
}

/// Whether two requests conflict as Linux's waiter tree sees them: same family (flock or not),
/// other owners, overlapping bytes, a write on either side.
fn requests_conflict(a: &Request, b: &Request) -> bool {
    let (Some(x), Some(y)) = (a.ty, b.ty) else {
        return false;
    };
    (a.kind == LockKind::Flock) == (b.kind == LockKind::Flock)
        && a.owner != b.owner
        && overlaps((a.start, a.end), (b.start, b.end))
        && (x == LockType::Write || y == LockType::Write)
}

/// Where a blocked request hangs in Linux's waiter tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Parent {
    /// Under this held lock: index in the flock list if `flock`, else in the POSIX/OFD list.
    Held { flock: bool, index: usize },
    /// Under this earlier blocked request (index in `blocked`).
    Waiting(usize),
}

/// Linux's waiter tree over a file's blocked requests, rebuilt on demand in arrival order.
pub(crate) struct WaiterTree {
    /// `parents[j]`: where `blocked[j]` hangs (`None` if nothing blocks it any more).
    pub parents: Vec<Option<Parent>>,
    /// Each node's children, oldest first.
    pub children: HashMap<Parent, Vec<usize>>,
}

/// A sleeping request.
pub(crate) struct Blocked {
    /// The request, tried again by its sleeper when woken.
    pub req: Request,
    /// Completed with `()` when woken to retry.
    pub waiter: Arc<Waiter<()>>,
    /// The request's key in the deadlock graph, `None` when the graph does not track it.
    pub graph_id: Option<u64>,
    /// The owners of the held locks it conflicts with, first conflict first, as last recorded.
    pub blockers: Vec<Owner>,
    /// Woken to retry (its waiter completed); it stays queued until its sleeper retries.
    pub woken: bool,
    /// A flock whose client can redo it on the file's flock lease slot.
    pub may_redo: bool,
}

/// Everything behind one file's mutex.
#[derive(Default)]
pub(crate) struct FileState {
    pub posix: Vec<Held>,
    pub flocks: Vec<Held>,
    pub blocked: Vec<Blocked>,
    /// Set, under the shard's writer lock, when the file leaves the map: an operation that finds
    /// it set looks the file up again.
    pub removed: bool,
    /// Every blocked request not woken is behind one that was woken and has not retried yet
    /// (Linux mode only): a release then wakes and records nothing, and the walk is skipped.
    /// Cleared whenever `blocked` changes.
    pub quiet: bool,
}

/// A file's lock context.
#[derive(Default)]
pub(crate) struct FileLocks {
    pub state: Mutex<FileState>,
}

impl FileState {
    /// The list a request of `kind` lives on.
    pub fn list(&self, kind: LockKind) -> &Vec<Held> {
        match kind {
            LockKind::Flock => &self.flocks,
            LockKind::Posix | LockKind::Ofd => &self.posix,
        }
    }

    /// Whether nothing is held or waiting: the file may leave the map.
    pub fn is_idle(&self) -> bool {
        self.posix.is_empty() && self.flocks.is_empty() && self.blocked.is_empty()
    }

    /// The distinct owners of the held locks that stop `req`, first conflict first.
    pub fn blockers(&self, req: &Request) -> Vec<Owner> {
        let mut owners: Vec<Owner> = Vec::new();
        for h in self.list(req.kind).iter().filter(|h| conflicts(req, h)) {
            if !owners.contains(&h.owner) {
                owners.push(h.owner);
            }
        }
        owners
    }

    /// Where Linux would hang `req` in its waiter tree: under the first held lock it conflicts
    /// with, then, repeatedly, under the first child (oldest first) of the current node that
    /// it conflicts with (`__locks_insert_block`). `None` if nothing blocks it.
    pub fn tree_parent(&self, req: &Request, tree: &WaiterTree) -> Option<Parent> {
        let flock = req.kind == LockKind::Flock;
        let index = self.list(req.kind).iter().position(|h| conflicts(req, h))?;
        let mut node = Parent::Held { flock, index };
        while let Some(&j) = tree.children.get(&node).and_then(|c| {
            c.iter()
                .find(|&&j| requests_conflict(&self.blocked[j].req, req))
        }) {
            node = Parent::Waiting(j);
        }
        Some(node)
    }

    /// The waiter tree, as if the blocked requests had been inserted in arrival order.
    pub fn waiter_tree(&self) -> WaiterTree {
        let mut tree = WaiterTree {
            parents: Vec::with_capacity(self.blocked.len()),
            children: HashMap::new(),
        };
        for (j, b) in self.blocked.iter().enumerate() {
            // A woken request has left the tree (Linux unlinks it when it wakes it).
            let p = if !b.woken {
                self.tree_parent(&b.req, &tree)
            } else {
                None
            };
            if let Some(p) = p {
                tree.children.entry(p).or_default().push(j);
            }
            tree.parents.push(p);
        }
        tree
    }

    /// The kind of every held POSIX/OFD lock and every POSIX/OFD request asleep, if they are
    /// all of one kind (and there is at least one).
    pub fn uniform_posix_kind(&self) -> Option<LockKind> {
        let mut kinds = self.posix.iter().map(|h| h.kind).chain(
            self.blocked
                .iter()
                .filter(|b| !b.woken && b.req.kind != LockKind::Flock)
                .map(|b| b.req.kind),
        );
        let first = kinds.next()?;
        kinds.all(|k| k == first).then_some(first)
    }

    /// The kind of lock or request a tree node is.
    pub fn node_kind(&self, node: Parent) -> LockKind {
        match node {
            Parent::Held { flock: true, index } => self.flocks[index].kind,
            Parent::Held {
                flock: false,
                index,
            } => self.posix[index].kind,
            Parent::Waiting(j) => self.blocked[j].req.kind,
        }
    }

    /// Applies a POSIX/OFD request (which must not conflict) to its owner's locks. Returns
    /// whether some byte was released (waiters may now proceed), or ENOLCK if the list would
    /// grow past `limit` records.
    pub fn apply_posix(&mut self, req: &Request, limit: usize) -> Result<bool> {
        let first = self.posix.iter().position(|h| h.owner == req.owner);
        let (from, to) = match first {
            Some(i) => {
                let n = self.posix[i..]
                    .iter()
                    .take_while(|h| h.owner == req.owner)
                    .count();
                (i, i + n)
            }
            None => match req.ty {
                None => return Ok(false),
                // The owner's first lock: nothing to merge with (no allocation).
                Some(ty) => {
                    if self.posix.len() >= limit {
                        return Err(Errno::ENOLCK);
                    }
                    self.posix.push(req.held(ty));
                    return Ok(false);
                }
            },
        };
        if req.ty.is_none()
            && self.posix[from..to]
                .iter()
                .all(|h| req.start <= h.start && h.end <= req.end)
        {
            // An unlock of all the owner's locks (no allocation).
            if to == self.posix.len() {
                self.posix.truncate(from);
            } else {
                self.posix.drain(from..to);
            }
            return Ok(true);
        }
        let old: Vec<Piece> = self.posix[from..to]
            .iter()
            .map(|h| Piece {
                ty: h.ty,
                start: h.start,
                end: h.end,
            })
            .collect();
        let (new, applied) = range::apply(&old, req.ty, req.start, req.end);
        if new.len() > old.len() && self.posix.len() - old.len() + new.len() > limit {
            return Err(Errno::ENOLCK);
        }
        let template = Held {
            ty: LockType::Read,
            start: 0,
            end: 0,
            ..req.held(LockType::Read)
        };
        self.posix.splice(
            from..to,
            new.into_iter().map(|p| Held {
                ty: p.ty,
                start: p.start,
                end: p.end,
                ..template
            }),
        );
        Ok(applied.released)
    }

    /// Removes `owner`'s flock lock, if any. Returns whether there was one.
    pub fn remove_flock(&mut self, owner: Owner) -> bool {
        let before = self.flocks.len();
        self.flocks.retain(|h| h.owner != owner);
        self.flocks.len() != before
    }

    /// Removes every POSIX/OFD lock of `owner`. Returns whether there was one.
    pub fn remove_posix_owner(&mut self, owner: Owner) -> bool {
        let before = self.posix.len();
        self.posix.retain(|h| h.owner != owner);
        self.posix.len() != before
    }

    /// Grants a request that does not conflict: applies it to its list.
    fn grant(&mut self, req: &Request, limit: usize) -> Result<bool> {
        match (req.kind, req.ty) {
            (LockKind::Flock, Some(ty)) => {
                if self.flocks.len() >= limit {
                    return Err(Errno::ENOLCK);
                }
                self.flocks.push(req.held(ty));
                Ok(false)
            }
            (LockKind::Flock, None) => Ok(self.remove_flock(req.owner)),
            _ => self.apply_posix(req, limit),
        }
    }

    /// Sets a request that does not conflict. Called by the requester itself.
    pub fn set(&mut self, req: &Request, limit: usize, graph: &DeadlockGraph) -> Result<()> {
        // Only a release can let a waiter go: Linux, too, re-examines waiters only when a
        // lock they hang under goes or changes. (In Linux mode their recorded blockers may
        // then be stale, say a new reader beside the one a writer waits for; Linux records
        // one blocker per waiter and likewise finds that deadlock only when the waiter
        // retries. Full mode records every new edge.)
        if self.grant(req, limit)? || graph.wants_every_edge() {
            self.after_change(graph);
        }
        Ok(())
    }

    /// After the locks changed: if requests are blocked, wake those that can now proceed and
    /// record the blockers of the rest. A change that released nothing can still add blockers
    /// (a new read lock under a waiting writer), so the walk runs whenever anyone waits.
    pub fn after_change(&mut self, graph: &DeadlockGraph) {
        if !self.blocked.is_empty() {
            self.wake_unblocked(graph);
        }
    }

    /// Walks the blocked requests oldest first and wakes, to retry, each one that conflicts
    /// with no held lock and with no request woken before it that has not retried yet (Linux
    /// wakes the waiters hanging directly under a released lock; the ones nested under them
    /// wake when those have retried). A woken request stays in `blocked`, no longer waiting,
    /// until its sleeper retries; it leaves the deadlock graph at once. The rest get their
    /// blockers recorded again.
    pub fn wake_unblocked(&mut self, graph: &DeadlockGraph) {
        if self.quiet {
            return;
        }
        let mut retrying: Vec<Request> = Vec::new();
        // Whether every request left asleep is behind a woken one.
        let mut all_behind = !graph.wants_every_edge();
        for i in 0..self.blocked.len() {
            let req = self.blocked[i].req;
            if self.blocked[i].woken {
                retrying.push(req);
                continue;
            }
            // Checked first, as it is cheap: behind a woken request that conflicts, this one
            // stays asleep until that request has retried (in Linux mode its recorded
            // blockers wait until then too; a full search needs them now).
            let behind_woken = retrying.iter().any(|r| requests_conflict(r, &req));
            if behind_woken && !graph.wants_every_edge() {
                continue;
            }
            let blockers = self.blockers(&req);
            let b = &mut self.blocked[i];
            if !blockers.is_empty() || behind_woken {
                all_behind = false;
            }
            if blockers.is_empty() && !behind_woken {
                if let Some(id) = b.graph_id.take() {
                    graph.remove(id);
                }
                // An aborted (timed-out, interrupted) sleeper ignores this: it dequeues itself.
                b.waiter.complete(());
                b.woken = true;
                retrying.push(req);
            } else if blockers != b.blockers {
                // Linux would have woken it to retry and wait again behind a new blocker,
                // checking for a cycle first (a delayed deadlock): checked here, atomically
                // with the new blockers' record; in a cycle it is woken and its retry fails.
                let check =
                    graph.rechecks(&b.blockers, &blockers) && graph.policy(req.kind, req.kind).0;
                if graph
                    .recheck(b.graph_id, req.owner, &blockers, check)
                    .is_err()
                {
                    if let Some(id) = b.graph_id.take() {
                        graph.remove(id);
                    }
                    b.waiter.complete(());
                    b.woken = true;
                    retrying.push(req);
                    continue;
                }
                b.blockers = blockers;
            }
        }
        self.quiet = all_behind && !retrying.is_empty();
    }

    /// Wakes every blocked request not woken yet to retry (a file leaving the engine for a
    /// slot: each retry is served there); each leaves the deadlock graph at once.
    pub fn wake_all_to_retry(&mut self, graph: &DeadlockGraph) {
        for b in self.blocked.iter_mut().filter(|b| !b.woken) {
            if let Some(id) = b.graph_id.take() {
                graph.remove(id);
            }
            b.waiter.complete(());
            b.woken = true;
        }
        self.quiet = false;
    }

    /// Queues a request that must wait.
    pub fn enqueue(&mut self, blocked: Blocked) {
        self.quiet = false;
        self.blocked.push(blocked);
    }

    /// Dequeues a sleeper's request (it timed out, was interrupted, retried, or was served on
    /// a slot), then wakes what waited only behind it ([`FileState::after_change`]).
    pub fn dequeue(&mut self, waiter: &Arc<Waiter<()>>, graph: &DeadlockGraph) {
        if let Some(i) = self
            .blocked
            .iter()
            .position(|b| Arc::ptr_eq(&b.waiter, waiter))
        {
            self.quiet = false;
            let b = self.blocked.remove(i);
            if let Some(id) = b.graph_id {
                graph.remove(id);
            }
        }
        self.after_change(graph);
    }
}
