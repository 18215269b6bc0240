//! Loom models of the two lock modes (module `lock`): a multi-sop semop entering global mode
//! while a single-sop one runs in per-semaphore mode, leaving it again (under loom the
//! hysteresis is one unlock, so the models see both switches), and a sleeping multi-sop
//! operation that must keep the set global so that single-sop wakers find it.

use super::{SemSet, Sembuf, SemctlArg};
use crate::ipc::consts::{IPC_NOWAIT, IPC_PRIVATE, SETALL};
use crate::ipc::IpcNamespace;
use crate::sync::{lock, model};
use crate::{Cred, IpcId, WaitCtx};
use loom::thread;
use std::sync::Arc;

const NOWAIT: i16 = IPC_NOWAIT as i16;

/// A namespace with one two-semaphore set holding `vals`.
fn set_with(vals: [u16; 2]) -> (Arc<IpcNamespace>, i32, Arc<SemSet>) {
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    let id = ns.semget(&root, IPC_PRIVATE, 2, 0o600).unwrap();
    ns.semctl(&root, id, 0, SETALL, SemctlArg::Array(&vals))
        .unwrap();
    let set = ns.sem.registry.lookup(IpcId::new(id)).unwrap();
    (ns, id, set)
}

/// `sops` by process `pid` on set `id`, on a thread of its own.
fn semop_thread(
    ns: &Arc<IpcNamespace>,
    id: i32,
    pid: i32,
    sops: Vec<Sembuf>,
) -> thread::JoinHandle<crate::Result<()>> {
    let ns = ns.clone();
    thread::spawn(move || ns.semop(&Cred::root(pid), id, &sops, &WaitCtx::FOREVER))
}

fn vals(set: &SemSet) -> [i32; 2] {
    [lock(&set.sems()[0]).val, lock(&set.sems()[1]).val]
}

/// Both semaphores at 1; a multi-sop semop takes one from each while a single-sop semop takes
/// one from the second. Exactly one of them gets the second semaphore's unit, whichever mode
/// each ran in (the single-sop one may run before global mode, inside it through the array
/// lock, or after it ended).
#[test]
fn a_multi_sop_op_and_a_single_sop_op_never_both_take_the_last_unit() {
    model(|| {
        let (ns, id, set) = set_with([1, 1]);
        let single = semop_thread(&ns, id, 2, vec![Sembuf::new(1, -1, NOWAIT)]);
        let both = [Sembuf::new(0, -1, NOWAIT), Sembuf::new(1, -1, NOWAIT)];
        let multi = ns.semop(&Cred::root(3), id, &both, &WaitCtx::FOREVER);
        let single = single.join().unwrap();
        assert!(
            multi.is_ok() != single.is_ok(),
            "exactly one wins: {multi:?} {single:?}"
        );
        let want0 = if multi.is_ok() { 0 } else { 1 };
        assert_eq!(vals(&set), [want0, 0]);
    });
}

/// A multi-sop semop sleeps until both semaphores are positive; a single-sop semop raises
/// each in turn. The sleeper's queue keeps the set global, so the second raise scans it and
/// completes it (a lost wake-up would show as a deadlock).
#[test]
fn a_sleeping_multi_sop_op_is_woken_by_single_sop_ops() {
    model(|| {
        let (ns, id, set) = set_with([0, 0]);
        let both = vec![Sembuf::new(0, -1, 0), Sembuf::new(1, -1, 0)];
        let sleeper = semop_thread(&ns, id, 2, both);
        for n in 0..2 {
            ns.semop(
                &Cred::root(3),
                id,
                &[Sembuf::new(n, 1, 0)],
                &WaitCtx::FOREVER,
            )
            .unwrap();
        }
        assert_eq!(sleeper.join().unwrap(), Ok(()));
        assert_eq!(vals(&set), [0, 0]);
    });
}
