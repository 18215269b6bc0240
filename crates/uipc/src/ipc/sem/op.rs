//! semop / semtimedop and the wakeup scan (`ipc/sem.c`: `do_semtimedop`,
//! `perform_atomic_semop`, `update_queue`, `do_smart_update`).
//!
//! An operation is all or nothing: [`attempt`] runs the sops in order against running values
//! (a repeated `sem_num` sees the earlier sops' effect) and either yields the new values, the
//! index of the first sop that would block, or an error (ERANGE; EAGAIN when the blocking sop
//! has IPC_NOWAIT). Nothing is written until it succeeded.
//!
//! Wakeup scan ([`Locked::update`], run by whoever changed values, with the set locked): the
//! candidates are the sleeping operations that wait on a changed semaphore (single-sop queues)
//! plus every multi-sop one, in arrival order. Wait-for-zero operations that can now proceed
//! are completed first (they change nothing), then the earliest altering operation that can
//! proceed is applied and completed, its semaphores are added to the changed set, and the scan
//! starts again. It ends when no candidate can proceed, so every operation that can proceed
//! has completed: not strict FIFO (a later -1 passes an earlier -2 that still cannot go).
//!
//! Entry: a [`Locked`] for the semaphores involved. Exit: the same; sleepers are completed
//! under it (their threads take no set lock after a completion).

use super::lock::Locked;
use super::parked::ParkedSemop;
use super::types::{Sembuf, Timespec};
use super::undo::UndoEntry;
use crate::errno::Errno;
use crate::ipc::consts::{IPC_NOWAIT, SEMAEM, SEMVMX, SEM_UNDO};
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::perm::{PERM_READ, PERM_WRITE};
use crate::sync::{AtomicUsize, Ordering::Relaxed};
use crate::wait::{ParkCtx, Progress, Registration, WaitCtx, Waiter};
use crate::{Cred, IpcId, Result, Tgid};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A sleeping operation (`struct sem_queue`).
pub(crate) struct Pending {
    pub(crate) seq: u64,
    pub(crate) sops: Box<[Sembuf]>,
    pub(crate) tgid: Tgid,
    pub(crate) undo: Option<Arc<UndoEntry>>,
    pub(crate) alter: bool,
    /// Index in `sops` of the sop that blocked it last (GETNCNT/GETZCNT count it there only).
    pub(crate) blocking: AtomicUsize,
    pub(crate) waiter: Arc<Waiter<Result<()>>>,
}

impl Pending {
    pub(crate) fn blocking_sop(&self) -> Sembuf {
        self.sops[self.blocking.load(Relaxed)]
    }
}

/// What a successful attempt writes, in sop order.
pub(crate) struct Plan {
    /// New values `(sem, value)`.
    vals: Vec<(usize, i32)>,
    /// New undo adjustments `(sem, semadj)`.
    adjs: Vec<(usize, i32)>,
}

/// The outcome of trying an operation.
pub(crate) enum Attempt {
    Done(Plan),
    /// Sop `k` would block (and has no IPC_NOWAIT).
    Block(usize),
    Fail(Errno),
}

/// `perform_atomic_semop` without writing: `val(n)` reads semaphore n.
pub(crate) fn attempt(
    sops: &[Sembuf],
    undo: Option<&UndoEntry>,
    mut val: impl FnMut(usize) -> i32,
) -> Attempt {
    let mut vals: Vec<(usize, i32)> = Vec::with_capacity(sops.len());
    let mut adjs: Vec<(usize, i32)> = Vec::new();
    for (k, sop) in sops.iter().enumerate() {
        let n = sop.sem_num as usize;
        let cur = match vals.iter().rev().find(|(m, _)| *m == n) {
            Some(&(_, v)) => v,
            None => val(n),
        };
        let op = i32::from(sop.sem_op);
        let new = cur + op;
        if (op == 0 && cur != 0) || new < 0 {
            if i32::from(sop.sem_flg) & IPC_NOWAIT != 0 {
                return Attempt::Fail(Errno::EAGAIN);
            }
            return Attempt::Block(k);
        }
        if new > SEMVMX {
            return Attempt::Fail(Errno::ERANGE);
        }
        if sop.sem_flg & SEM_UNDO != 0 {
            let undo = undo.expect("SEM_UNDO sops come with an undo entry");
            let adj = match adjs.iter().rev().find(|(m, _)| *m == n) {
                Some(&(_, a)) => a,
                None => undo.adj[n].load(Relaxed),
            } - op;
            if !(-(SEMAEM + 1)..=SEMAEM).contains(&adj) {
                return Attempt::Fail(Errno::ERANGE);
            }
            adjs.push((n, adj));
        }
        vals.push((n, new));
    }
    Attempt::Done(Plan { vals, adjs })
}

enum Retry {
    Completed,
    Failed,
    Blocked,
}

impl Locked<'_> {
    /// Writes a successful attempt: values, sempid of every semaphore named, semadj.
    fn commit(&mut self, plan: Plan, undo: Option<&UndoEntry>, tgid: Tgid) {
        for (n, v) in plan.vals {
            let mut s = self.slot(n);
            s.val = v;
            s.pid = tgid.get();
        }
        if let Some(u) = undo {
            for (n, a) in plan.adjs {
                u.adj[n].store(a, Relaxed);
            }
        }
    }

    /// Queues a sleeping operation: single-sop on its semaphore, multi-sop on the array.
    pub(crate) fn enqueue(&mut self, q: Arc<Pending>) {
        if q.sops.len() == 1 {
            self.slot(q.sops[0].sem_num as usize).pending.push_back(q);
        } else if let Locked::Global(g) = self {
            g.arr.complex.push_back(q);
        } else {
            unreachable!("multi-sop operations run in global mode");
        }
    }

    /// Removes a sleeping operation from its queue.
    pub(crate) fn dequeue(&mut self, q: &Arc<Pending>) {
        if q.sops.len() == 1 {
            self.slot(q.sops[0].sem_num as usize)
                .pending
                .retain(|p| !Arc::ptr_eq(p, q));
        } else if let Locked::Global(g) = self {
            g.arr.complex.retain(|p| !Arc::ptr_eq(p, q));
        }
    }

    fn retry(&mut self, q: &Arc<Pending>) -> Retry {
        let undo = q.undo.as_deref();
        match attempt(&q.sops, undo, |n| self.slot(n).val) {
            Attempt::Done(plan) => {
                self.commit(plan, undo, q.tgid);
                self.dequeue(q);
                // The sleeper aborts only under the lock we hold, so it is still waiting.
                let delivered = q.waiter.complete(Ok(()));
                debug_assert!(delivered, "a queued operation is always still waiting");
                Retry::Completed
            }
            Attempt::Fail(e) => {
                self.dequeue(q);
                q.waiter.complete(Err(e));
                Retry::Failed
            }
            Attempt::Block(k) => {
                q.blocking.store(k, Relaxed);
                Retry::Blocked
            }
        }
    }

    fn candidates(&mut self, changed: &BTreeSet<usize>) -> Vec<Arc<Pending>> {
        let mut c: Vec<Arc<Pending>> = Vec::new();
        for &n in changed {
            c.extend(self.slot(n).pending.iter().cloned());
        }
        if let Locked::Global(g) = self {
            c.extend(g.arr.complex.iter().cloned());
        }
        c.sort_by_key(|q| q.seq);
        c
    }

    /// The wakeup scan after semaphores `changed` changed. Returns whether some sleeping
    /// operation completed successfully (Linux then updates otime).
    pub(crate) fn update(&mut self, changed: impl IntoIterator<Item = usize>) -> bool {
        if let Locked::Sem { slot, .. } = self {
            if slot.pending.is_empty() {
                return false;
            }
        }
        let mut changed: BTreeSet<usize> = changed.into_iter().collect();
        let mut completed = false;
        loop {
            let cands = self.candidates(&changed);
            if cands.is_empty() {
                return completed;
            }
            for q in cands.iter().filter(|q| !q.alter) {
                if let Retry::Completed = self.retry(q) {
                    completed = true;
                }
            }
            let mut applied = None;
            for q in cands.iter().filter(|q| q.alter) {
                if let Retry::Completed = self.retry(q) {
                    applied = Some(q);
                    break;
                }
            }
            match applied {
                Some(q) => {
                    completed = true;
                    changed.extend(q.sops.iter().map(|s| s.sem_num as usize));
                }
                None => return completed,
            }
        }
    }

    pub(super) fn relock<'s>(self_set: &'s super::SemSet, q: &Pending) -> Locked<'s> {
        if q.sops.len() == 1 {
            self_set.lock_sem(q.sops[0].sem_num as usize)
        } else {
            Locked::Global(self_set.lock_global())
        }
    }
}

impl IpcNamespace {
    /// semop(2): [`IpcNamespace::semtimedop`] without a timeout.
    pub fn semop(
        &self,
        cred: &Cred,
        semid: i32,
        sops: &[Sembuf],
        wait: &WaitCtx<'_>,
    ) -> Result<()> {
        self.semtimedop(cred, semid, sops, None, wait)
    }

    /// semtimedop(2). Checks in Linux's order: E2BIG (`nsops > semopm`, before the id), EINVAL
    /// (no sops, negative id, bad timeout, unknown id), EFBIG (a sem_num past the set), EACCES
    /// (write if any sem_op != 0, else read), EIDRM; then the operation: ERANGE, EAGAIN with
    /// IPC_NOWAIT, or a sleep that ends with success, EINTR (`wait`'s interrupt), EAGAIN
    /// (`timeout` or `wait`'s deadline) or EIDRM (the set was removed).
    pub fn semtimedop(
        &self,
        cred: &Cred,
        semid: i32,
        sops: &[Sembuf],
        timeout: Option<Timespec>,
        wait: &WaitCtx<'_>,
    ) -> Result<()> {
        match self.semtimedop_start(cred, semid, sops, timeout, &ParkCtx::default()) {
            Progress::Done(r) => r,
            Progress::Parked(p) => p.wait(wait),
        }
    }

    /// [`IpcNamespace::semtimedop`] without sleeping: the same checks and attempt, and if the
    /// operation must wait, its request queued and returned as a [`ParkedSemop`] whose waiter
    /// runs `park`'s notifier when a waker completes it (or `park`'s interrupt is raised). The
    /// timeout becomes the parked call's [`ParkedSemop::deadline`], which the embedder keeps
    /// (cancelling with [`crate::WakeReason::TimedOut`]).
    pub fn semtimedop_start(
        &self,
        cred: &Cred,
        semid: i32,
        sops: &[Sembuf],
        timeout: Option<Timespec>,
        park: &ParkCtx,
    ) -> Progress<(), ParkedSemop> {
        let _inside = self.sem_fast_enter(IpcId::new(semid));
        match self.semop_enqueue(cred, IpcId::new(semid), sops, timeout, park) {
            Ok(p) => p,
            Err(e) => Progress::Done(Err(e)),
        }
    }

    fn semop_enqueue(
        &self,
        cred: &Cred,
        id: IpcId,
        sops: &[Sembuf],
        timeout: Option<Timespec>,
        park: &ParkCtx,
    ) -> Result<Progress<(), ParkedSemop>> {
        // Linux compares the unsigned nsops with semopm converted to unsigned.
        if sops.len() as u64 > u64::from(self.limits.semopm() as u32) {
            return Err(Errno::E2BIG);
        }
        if sops.is_empty() || id.get() < 0 {
            return Err(Errno::EINVAL);
        }
        let mut deadline = None;
        if let Some(t) = timeout {
            if t.tv_sec < 0 || t.tv_nsec < 0 || t.tv_nsec >= 1_000_000_000 {
                return Err(Errno::EINVAL);
            }
            let d = Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
            deadline = Instant::now().checked_add(d);
        }
        let max = sops.iter().map(|s| s.sem_num).max().unwrap_or(0) as usize;
        let undos = sops.iter().any(|s| s.sem_flg & SEM_UNDO != 0);
        let alter = sops.iter().any(|s| s.sem_op != 0);
        let set = self.sem.registry.lookup(id)?;
        if max >= set.nsems() {
            return Err(Errno::EFBIG);
        }
        set.perm
            .get()
            .check(cred, if alter { PERM_WRITE } else { PERM_READ })?;
        let tgid = cred.tgid;
        let undo = if undos {
            Some(self.sem.undo.find_alloc(tgid, &set)?)
        } else {
            None
        };
        let mut locked = if sops.len() == 1 {
            set.lock_sem(sops[0].sem_num as usize)
        } else {
            Locked::Global(set.lock_global())
        };
        if locked.deleted() {
            return Err(Errno::EIDRM);
        }
        let blocked_at = match attempt(sops, undo.as_deref(), |n| locked.slot(n).val) {
            Attempt::Done(plan) => {
                locked.commit(plan, undo.as_deref(), tgid);
                if alter {
                    locked.update(sops.iter().map(|s| s.sem_num as usize));
                }
                locked.slot(sops[0].sem_num as usize).otime = self.now();
                return Ok(Progress::Done(Ok(())));
            }
            Attempt::Fail(e) => return Err(e),
            Attempt::Block(k) => k,
        };
        let q = Arc::new(Pending {
            seq: self.sem.arrivals.fetch_add(1, Relaxed),
            sops: sops.into(),
            tgid,
            undo,
            alter,
            blocking: AtomicUsize::new(blocked_at),
            waiter: park.waiter(),
        });
        locked.enqueue(q.clone());
        drop(locked);
        let registration = Registration::new(&q.waiter, park);
        Ok(Progress::Parked(ParkedSemop {
            set: set.clone(),
            q,
            deadline,
            registration,
        }))
    }
}
