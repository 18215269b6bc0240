//! Deadlock detection for blocking lock requests (§6.8; seed 001's `blocked_hash`).
//!
//! The graph records, for every sleeping request it tracks, its owner and the owners of the
//! held locks it waits behind (first conflict first), indexed by owner so that "what is this
//! owner waiting for?" is a hash lookup, not a walk of every blocked request (the seed turned
//! Linux's global `blocked_list` into this hash). A request that is about to sleep is checked
//! and inserted under one hold of the graph's mutex, so two requests racing to close a cycle
//! cannot both miss it; blockers change only under the file's lock followed by this mutex.
//!
//! Two modes ([`DeadlockMode`]):
//! - `Linux` (the default) reproduces the kernel: a request is recorded when its parent in the
//!   waiter tree (`file.rs`) is a POSIX lock or POSIX request, whatever its own kind (so an OFD
//!   request waiting behind a POSIX lock is recorded), and only POSIX requests are checked:
//!   from the first lock that blocks the caller, follow "the owner of that lock is waiting for
//!   the first lock blocking its newest recorded request", and give up after
//!   `MAX_DEADLK_ITERATIONS` (10) steps, which detects cycles of 2 to 12 owners.
//! - `Full` follows every blocking owner of every waiting request, through POSIX, OFD and flock
//!   owners alike, with no step limit (a breadth-first search with a visited set), so every
//!   cycle of waiting owners is reported, whatever its length.
//!
//! In both modes only the request that would close the cycle gets EDEADLK; the others keep
//! sleeping. A sleeping request that a release leaves blocked by another owner is checked
//! again ([`DeadlockGraph::recheck`]), as Linux checks a woken request that must wait again:
//! a delayed deadlock (it waits behind an owner who, meanwhile, waits for it) fails it then. Owners are processes and open file descriptions, not threads: as on Linux, a
//! thread waiting through an OFD while its process holds POSIX locks is two unrelated owners,
//! and threads of one process sharing an owner can see a cycle that their threads would break.
//!
//! Lock order: a file's state -> `DeadlockGraph::inner`. The graph never takes a file lock.

use super::types::{LockKind, Owner};
use crate::sync::{lock, Mutex};
use crate::{Errno, Result, Tgid};
use foldhash::fast::FixedState;
use std::collections::{HashMap, HashSet, VecDeque};

/// How far deadlock detection looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeadlockMode {
    /// As Linux: POSIX requests only, at most 10 steps (cycles of up to 12 owners).
    #[default]
    Linux,
    /// Every cycle among POSIX, OFD and flock owners, of any length.
    Full,
}

/// Linux's `MAX_DEADLK_ITERATIONS`.
const LINUX_MAX_STEPS: usize = 10;

#[derive(Default)]
struct Graph {
    next_id: u64,
    /// Request id -> (owner, blocking owners).
    requests: HashMap<u64, (Owner, Vec<Owner>), FixedState>,
    /// Owner -> its sleeping requests, oldest first.
    by_owner: HashMap<Owner, Vec<u64>, FixedState>,
}

/// The blocked-request graph of one lock manager.
#[derive(Default)]
pub(crate) struct DeadlockGraph {
    mode: DeadlockMode,
    inner: Mutex<Graph>,
    /// The lease area, whose shared-mode sleepers are edges of the graph too
    /// (`lease::shared`): a process with no request here may sleep on a slot.
    leases: std::sync::OnceLock<std::sync::Arc<super::lease::Leases>>,
}

impl DeadlockGraph {
    pub fn new(mode: DeadlockMode) -> DeadlockGraph {
        DeadlockGraph {
            mode,
            inner: Mutex::new(Graph::default()),
            leases: std::sync::OnceLock::new(),
        }
    }

    /// Makes the shared-mode sleepers of `leases` part of the graph.
    pub fn set_leases(&self, leases: std::sync::Arc<super::lease::Leases>) {
        let _ = self.leases.set(leases);
    }

    /// Publishes (`up`) or withdraws a recorded request of `owner` for the libraries' walks.
    fn publish(&self, owner: Owner, up: bool) {
        if let (Some(l), Owner::Process(pid)) = (self.leases.get(), owner) {
            l.engine_sleeper(pid.get(), up);
        }
    }

    /// For a request of `kind` hanging under a tree node of `parent_kind`: whether to check it
    /// for a cycle, and whether to record it.
    pub fn policy(&self, kind: LockKind, parent_kind: LockKind) -> (bool, bool) {
        match self.mode {
            DeadlockMode::Linux => (kind == LockKind::Posix, parent_kind == LockKind::Posix),
            DeadlockMode::Full => (true, true),
        }
    }

    /// If `check`, fails with EDEADLK when `owner` waiting behind `blockers` closes a cycle;
    /// then, if `record`, records the request and returns its id. Call with the file's lock
    /// held; the check and the record happen under one hold of the graph's lock.
    pub fn check_and_insert(
        &self,
        owner: Owner,
        blockers: &[Owner],
        check: bool,
        record: bool,
    ) -> Result<Option<u64>> {
        let mut g = lock(&self.inner);
        // Published before the walk, as a library marks its sleep before its own walk.
        if record {
            self.publish(owner, true);
        }
        if check && g.closes_cycle(self.mode, owner, blockers, self.leases.get()) {
            if record {
                self.publish(owner, false);
            }
            return Err(Errno::EDEADLK);
        }
        if !record {
            return Ok(None);
        }
        let id = g.next_id;
        g.next_id += 1;
        g.requests.insert(id, (owner, blockers.to_vec()));
        g.by_owner.entry(owner).or_default().push(id);
        Ok(Some(id))
    }

    /// Whether sleeping requests' blockers must be recorded again after every change, also one
    /// that only added a lock: a full search must see every edge at once, while Linux's walk
    /// follows the one blocker each waiter had when it went to sleep.
    pub fn wants_every_edge(&self) -> bool {
        matches!(self.mode, DeadlockMode::Full)
    }

    /// A sleeping request of `owner` that a release left blocked by other owners (`blockers`):
    /// if `check`, fails with EDEADLK when waiting behind them closes a cycle (Linux finds
    /// this when the woken request retries and must wait again); else records the blockers
    /// for its record `id`, if it has one. One hold of the graph's lock, as for a new request.
    pub fn recheck(
        &self,
        id: Option<u64>,
        owner: Owner,
        blockers: &[Owner],
        check: bool,
    ) -> Result<()> {
        let mut g = lock(&self.inner);
        if check && g.closes_cycle(self.mode, owner, blockers, self.leases.get()) {
            return Err(Errno::EDEADLK);
        }
        if let Some(r) = id.and_then(|id| g.requests.get_mut(&id)) {
            r.1 = blockers.to_vec();
        }
        Ok(())
    }

    /// Whether a sleeping request whose blockers changed from `old` to `new` is checked for a
    /// cycle again. Linux wakes a request when the lock it hangs under goes, and checks it
    /// again only if it must then wait behind another one: its first blocker changed. A full
    /// search looks again at any change.
    pub fn rechecks(&self, old: &[Owner], new: &[Owner]) -> bool {
        match self.mode {
            DeadlockMode::Linux => old.first() != new.first(),
            DeadlockMode::Full => true,
        }
    }

    /// Forgets a request (granted, or its sleeper gave up).
    pub fn remove(&self, id: u64) {
        let mut g = lock(&self.inner);
        let Some((owner, _)) = g.requests.remove(&id) else {
            return;
        };
        self.publish(owner, false);
        if let Some(ids) = g.by_owner.get_mut(&owner) {
            ids.retain(|&i| i != id);
            if ids.is_empty() {
                g.by_owner.remove(&owner);
            }
        }
    }

    /// How many requests are recorded (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        lock(&self.inner).requests.len()
    }
}

impl Graph {
    /// Whether `owner` waiting behind `blockers` closes a cycle, as `mode` searches for one.
    /// `leases`: the shared-mode sleepers, followed where an owner has no request here.
    fn closes_cycle(
        &self,
        mode: DeadlockMode,
        owner: Owner,
        blockers: &[Owner],
        leases: Option<&std::sync::Arc<super::lease::Leases>>,
    ) -> bool {
        let slept = |o: Owner| match (o, leases) {
            (Owner::Process(pid), Some(l)) => l
                .sleeps_behind(pid.get())
                .map(|p| Owner::Process(Tgid::new(p))),
            _ => None,
        };
        match mode {
            DeadlockMode::Linux => self.linux_walk(owner, blockers, slept),
            DeadlockMode::Full => self.full_search(owner, blockers, slept),
        }
    }

    /// Linux's `posix_locks_deadlock`: one chain, newest request of each owner, first blocker.
    fn linux_walk(
        &self,
        caller: Owner,
        blockers: &[Owner],
        slept: impl Fn(Owner) -> Option<Owner>,
    ) -> bool {
        let Some(&first) = blockers.first() else {
            return false;
        };
        let mut current = first;
        let mut steps = 0;
        while let Some(next) = self.waiting_for(current).or_else(|| slept(current)) {
            if steps > LINUX_MAX_STEPS {
                return false;
            }
            steps += 1;
            if next == caller {
                return true;
            }
            current = next;
        }
        false
    }

    /// The owner of the first lock blocking `owner`'s newest request.
    fn waiting_for(&self, owner: Owner) -> Option<Owner> {
        let id = self.by_owner.get(&owner)?.last()?;
        self.requests.get(id)?.1.first().copied()
    }

    /// Whether `caller` is reachable from `blockers` through any waiting owner.
    fn full_search(
        &self,
        caller: Owner,
        blockers: &[Owner],
        slept: impl Fn(Owner) -> Option<Owner>,
    ) -> bool {
        let mut seen: HashSet<Owner, FixedState> = HashSet::default();
        let mut queue: VecDeque<Owner> = blockers.iter().copied().collect();
        while let Some(o) = queue.pop_front() {
            if o == caller {
                return true;
            }
            if !seen.insert(o) {
                continue;
            }
            for id in self.by_owner.get(&o).into_iter().flatten() {
                if let Some((_, next)) = self.requests.get(id) {
                    queue.extend(next.iter().copied());
                }
            }
            queue.extend(slept(o));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::types::OfdId;

    fn p(n: i32) -> Owner {
        Owner::Process(Tgid::new(n))
    }

    /// Owners 1..=n, each k waiting for k+1; then owner n asks to wait for owner 1.
    fn chain(g: &DeadlockGraph, n: i32) -> Result<Option<u64>> {
        for k in 1..n {
            g.check_and_insert(p(k), &[p(k + 1)], true, true).unwrap();
        }
        g.check_and_insert(p(n), &[p(1)], true, true)
    }

    #[test]
    fn linux_mode_detects_cycles_of_2_to_12_owners_and_no_longer() {
        for n in 2..=12 {
            let g = DeadlockGraph::new(DeadlockMode::Linux);
            assert_eq!(chain(&g, n), Err(Errno::EDEADLK), "cycle of {n}");
        }
        let g = DeadlockGraph::new(DeadlockMode::Linux);
        assert!(chain(&g, 13).is_ok(), "Linux gives up on 13 owners");
    }

    #[test]
    fn full_mode_detects_cycles_of_any_length_and_through_descriptions() {
        let g = DeadlockGraph::new(DeadlockMode::Full);
        assert_eq!(chain(&g, 500), Err(Errno::EDEADLK));
        let g = DeadlockGraph::new(DeadlockMode::Full);
        let d = |n| Owner::Description(OfdId(n));
        g.check_and_insert(d(1), &[d(2)], true, true).unwrap();
        assert_eq!(
            g.check_and_insert(d(2), &[d(1)], true, true),
            Err(Errno::EDEADLK)
        );
        let linux = DeadlockGraph::new(DeadlockMode::Linux);
        assert_eq!(linux.policy(LockKind::Ofd, LockKind::Posix), (false, true));
        assert_eq!(linux.policy(LockKind::Posix, LockKind::Ofd), (true, false));
        assert_eq!(
            linux.policy(LockKind::Flock, LockKind::Flock),
            (false, false)
        );
    }

    #[test]
    fn full_mode_follows_every_blocker_not_just_the_first() {
        let g = DeadlockGraph::new(DeadlockMode::Full);
        g.check_and_insert(p(1), &[p(2), p(3)], true, true).unwrap();
        assert_eq!(
            g.check_and_insert(p(3), &[p(1)], true, true),
            Err(Errno::EDEADLK)
        );
        let g = DeadlockGraph::new(DeadlockMode::Linux);
        g.check_and_insert(p(1), &[p(2), p(3)], true, true).unwrap();
        assert!(
            g.check_and_insert(p(3), &[p(1)], true, true).is_ok(),
            "Linux follows the first blocker only"
        );
    }

    #[test]
    fn removed_and_reblocked_requests_change_the_answer() {
        let g = DeadlockGraph::new(DeadlockMode::Linux);
        let a = g
            .check_and_insert(p(1), &[p(2)], true, true)
            .unwrap()
            .unwrap();
        g.recheck(Some(a), p(1), &[p(3)], true).unwrap();
        assert!(
            g.check_and_insert(p(2), &[p(1)], true, true).is_ok(),
            "1 now waits for 3"
        );
        g.remove(a);
        assert_eq!(g.len(), 1);
        assert!(
            g.check_and_insert(p(3), &[p(1)], true, true).is_ok(),
            "1 waits no more"
        );
    }
}
