//! The fast path against the engine: publishing, taking back, permissions, removal, waiters,
//! undo (engine entries keep a set with the daemon; fast adjustments taken into the engine,
//! cleared by SETVAL, applied at exit), and many threads mixing fast calls with engine calls.

use super::owner::SemArena;
use super::{ArenaView, Caller, Fast, SLOTS};
use crate::ipc::consts::*;
use crate::ipc::sem::{Sembuf, SemctlArg, SemctlOut};
use crate::ipc::{IpcNamespace, NamespaceOptions};
use crate::{Cred, Errno, Progress, WaitCtx};
use std::sync::Arc;

struct Who {
    pid: u32,
    euid: u32,
}

impl Caller for Who {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn euid(&self) -> u32 {
        self.euid
    }
    fn now(&self) -> i64 {
        1_700_000_000
    }
}

/// A namespace on an arena of its own, and a private set of `nsems` semaphores in it.
fn setup(nsems: i32) -> (Arc<IpcNamespace>, Arc<SemArena>, i32) {
    let arena = Arc::new(SemArena::owned(SLOTS));
    let ns = IpcNamespace::with_options(NamespaceOptions {
        sem_arena: Some(arena.clone()),
        ..Default::default()
    });
    let id = ns
        .semget(&Cred::root(1), IPC_PRIVATE, nsems, 0o600)
        .unwrap();
    (Arc::new(ns), arena, id)
}

fn ctl(ns: &IpcNamespace, id: i32, n: i32, cmd: i32, arg: SemctlArg<'_>) -> Result<i32, Errno> {
    match ns.semctl(&Cred::root(1), id, n, cmd, arg)? {
        SemctlOut::Ret(r) => Ok(r),
        SemctlOut::Stat(_, ds) => Ok(ds.otime as i32),
        _ => Ok(0),
    }
}

/// SETVAL of semaphore 0 to `val` through the engine.
fn setval(ns: &IpcNamespace, id: i32, val: i32) {
    ctl(ns, id, 0, SETVAL, SemctlArg::Val(val)).unwrap();
}

/// semop through the engine, by root in process `pid`, sleeping as long as it must.
fn engine_op(ns: &IpcNamespace, pid: i32, id: i32, sops: &[Sembuf]) -> Result<(), Errno> {
    ns.semop(&Cred::root(pid), id, sops, &WaitCtx::FOREVER)
}

fn fast_op(v: &ArenaView<'_>, id: i32, op: i16, flg: i16, who: &Who) -> Fast<()> {
    v.semop(id, Sembuf::new(0, op, flg), who)
}

#[test]
fn a_set_is_published_after_a_daemon_call_and_taken_back_before_the_next() {
    let (ns, arena, id) = setup(2);
    let v = arena.view();
    let me = Who { pid: 42, euid: 0 };
    assert_eq!(
        fast_op(&v, id, 1, 0, &me),
        Fast::Slow,
        "not published before a call"
    );
    setval(&ns, id, 3);
    assert_eq!(fast_op(&v, id, -2, 0, &me), Fast::Done(Ok(())));
    assert_eq!(v.semctl_get(id, 0, GETVAL, &me), Fast::Done(Ok(1)));
    assert_eq!(v.semctl_get(id, 0, GETPID, &me), Fast::Done(Ok(42)));
    assert_eq!(v.semctl_get(id, 0, GETNCNT, &me), Fast::Done(Ok(0)));
    let nowait = IPC_NOWAIT as i16;
    assert_eq!(
        fast_op(&v, id, -2, nowait, &me),
        Fast::Done(Err(Errno::EAGAIN))
    );
    assert_eq!(fast_op(&v, id, -2, 0, &me), Fast::Slow, "would sleep");
    // SEM_UNDO by the one owner of the adjustments: fast too; net 0, so no undo entry.
    assert_eq!(fast_op(&v, id, 1, SEM_UNDO, &me), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, -1, SEM_UNDO, &me), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, i16::MAX, 0, &me), Fast::Slow, "ERANGE");
    // The engine sees the fast operations: value, sempid and otime.
    assert_eq!(ctl(&ns, id, 0, GETVAL, SemctlArg::None), Ok(1));
    assert_eq!(ctl(&ns, id, 0, GETPID, SemctlArg::None), Ok(42));
    assert_eq!(
        ctl(&ns, id, 0, IPC_STAT, SemctlArg::None),
        Ok(1_700_000_000)
    );
    // And the fast path sees the engine's changes.
    setval(&ns, id, 7);
    assert_eq!(v.semctl_get(id, 0, GETVAL, &me), Fast::Done(Ok(7)));
    assert_eq!(
        v.semctl_get(id, 2, GETVAL, &me),
        Fast::Slow,
        "EINVAL is the daemon's"
    );
}

#[test]
fn permissions_follow_ipc_set_and_the_callers_euid() {
    let (ns, arena, id) = setup(1);
    let v = arena.view();
    setval(&ns, id, 1);
    let owner = Who { pid: 1, euid: 0 };
    assert_eq!(fast_op(&v, id, 1, 0, &owner), Fast::Done(Ok(())));
    let other = Who { pid: 2, euid: 1000 };
    assert_eq!(fast_op(&v, id, 1, 0, &other), Fast::Slow, "not the owner");
    let set_mode = |mode| {
        let set = SemctlArg::Set {
            uid: 0,
            gid: 0,
            mode,
        };
        ctl(&ns, id, 0, IPC_SET, set).unwrap();
    };
    set_mode(0o666);
    assert_eq!(fast_op(&v, id, 1, 0, &other), Fast::Done(Ok(())));
    set_mode(0o400);
    assert_eq!(fast_op(&v, id, 1, 0, &owner), Fast::Slow, "no write bit");
    assert_eq!(v.semctl_get(id, 0, GETVAL, &owner), Fast::Done(Ok(3)));
    assert_eq!(v.semctl_get(id, 0, GETVAL, &other), Fast::Slow);
}

#[test]
fn removal_waiters_and_undo_keep_the_set_with_the_daemon() {
    let (ns, arena, id) = setup(1);
    let v = arena.view();
    let me = Who { pid: 9, euid: 0 };
    setval(&ns, id, 0);
    // A sleeper: the set stays with the daemon until it is gone.
    let park = crate::ParkCtx::default();
    let Progress::Parked(p) =
        ns.semtimedop_start(&Cred::root(5), id, &[Sembuf::new(0, -1, 0)], None, &park)
    else {
        panic!("should wait");
    };
    assert_eq!(v.semctl_get(id, 0, GETNCNT, &me), Fast::Slow);
    assert_eq!(fast_op(&v, id, 1, 0, &me), Fast::Slow);
    engine_op(&ns, 6, id, &[Sembuf::new(0, 1, 0)]).unwrap();
    assert!(matches!(p.poll(), Progress::Done(Ok(()))));
    assert_eq!(v.semctl_get(id, 0, GETVAL, &me), Fast::Done(Ok(0)));
    // An undo entry: with the daemon until the process exits.
    engine_op(&ns, 7, id, &[Sembuf::new(0, 1, SEM_UNDO)]).unwrap();
    ctl(&ns, id, 0, GETVAL, SemctlArg::None).unwrap();
    assert_eq!(fast_op(&v, id, 1, 0, &me), Fast::Slow);
    ns.process_exit(7);
    assert_eq!(ctl(&ns, id, 0, GETVAL, SemctlArg::None), Ok(0), "undone");
    assert_eq!(fast_op(&v, id, 1, 0, &me), Fast::Done(Ok(())));
    // Removal: the daemon answers (EINVAL for a gone id), and a new set at the index is
    // published under its own id only.
    ctl(&ns, id, 0, IPC_RMID, SemctlArg::None).unwrap();
    assert_eq!(fast_op(&v, id, 1, 0, &me), Fast::Slow);
    let id2 = ns.semget(&Cred::root(1), IPC_PRIVATE, 1, 0o600).unwrap();
    setval(&ns, id2, 0);
    assert_eq!(fast_op(&v, id, 1, 0, &me), Fast::Slow, "the old id");
    assert_eq!(fast_op(&v, id2, 1, 0, &me), Fast::Done(Ok(())));
}

#[test]
fn many_threads_mixing_fast_and_engine_calls_lose_nothing() {
    let (ns, arena, id) = setup(2);
    setval(&ns, id, 0);
    const ROUNDS: usize = 5_000; // 4 * ROUNDS stays below SEMVMX
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (ns, arena) = (ns.clone(), arena.clone());
            std::thread::spawn(move || {
                let who = Who {
                    pid: 100 + t,
                    euid: 0,
                };
                let v = arena.view();
                for i in 0..ROUNDS {
                    // +1 on semaphore 0, fast or through the engine (a multi-sop op, which
                    // takes the set back, every so often).
                    let sop = Sembuf::new(0, 1, 0);
                    if i % 97 == 0 {
                        let two = [sop, Sembuf::new(1, 0, 0)];
                        engine_op(&ns, who.pid as i32, id, &two).unwrap();
                    } else if v.semop(id, sop, &who) == Fast::Slow {
                        engine_op(&ns, who.pid as i32, id, &[sop]).unwrap();
                    }
                    // -1 again, blocking through the engine when the value is 0 (never here).
                    let down = Sembuf::new(0, -1, 0);
                    if v.semop(id, down, &who) == Fast::Slow {
                        engine_op(&ns, who.pid as i32, id, &[down]).unwrap();
                    }
                    let up = Sembuf::new(0, 1, 0);
                    if v.semop(id, up, &who) == Fast::Slow {
                        let _ = engine_op(&ns, 1, id, &[up]);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        ctl(&ns, id, 0, GETVAL, SemctlArg::None),
        Ok(4 * ROUNDS as i32)
    );
}

/// A caller whose operation loses its CAS: the first time the operation builds its word, the
/// daemon sets the value to 0 (SETVAL takes the set back and publishes it again).
struct Raced<'a> {
    ns: &'a IpcNamespace,
    id: i32,
    fired: std::cell::Cell<bool>,
}

impl Caller for Raced<'_> {
    fn pid(&self) -> u32 {
        if !self.fired.replace(true) {
            setval(self.ns, self.id, 0);
        }
        77
    }
    fn euid(&self) -> u32 {
        0
    }
    fn now(&self) -> i64 {
        1_700_000_000
    }
}

#[test]
fn an_operation_that_fails_leaves_otime_alone() {
    let (ns, arena, id) = setup(1);
    let v = arena.view();
    setval(&ns, id, 1);
    let who = Raced {
        ns: &ns,
        id,
        fired: std::cell::Cell::new(false),
    };
    let nowait = IPC_NOWAIT as i16;
    assert_eq!(
        v.semop(id, Sembuf::new(0, -1, nowait), &who),
        Fast::Done(Err(Errno::EAGAIN)),
        "the value was 0 when the retry looked"
    );
    assert_eq!(
        ctl(&ns, id, 0, IPC_STAT, SemctlArg::None),
        Ok(0),
        "no otime"
    );
    assert_eq!(ctl(&ns, id, 0, GETVAL, SemctlArg::None), Ok(0));
    // A successful one does move it.
    setval(&ns, id, 1);
    let me = Who { pid: 5, euid: 0 };
    assert_eq!(fast_op(&v, id, -1, nowait, &me), Fast::Done(Ok(())));
    assert_eq!(
        ctl(&ns, id, 0, IPC_STAT, SemctlArg::None),
        Ok(1_700_000_000)
    );
}

#[test]
fn fast_adjustments_are_applied_at_exit_cleared_by_setval_and_owned_by_one_process() {
    let (ns, arena, id) = setup(2);
    let v = arena.view();
    let owner = Who { pid: 42, euid: 0 };
    let other = Who { pid: 43, euid: 0 };
    setval(&ns, id, 1);
    let undo = SEM_UNDO;
    assert_eq!(fast_op(&v, id, 3, undo, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, -1, undo, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, 1, 0, &owner), Fast::Done(Ok(())));
    assert_eq!(v.semctl_get(id, 0, GETVAL, &owner), Fast::Done(Ok(4)));
    // Another process: its exit may be pending, so the daemon answers.
    assert_eq!(v.semctl_get(id, 0, GETVAL, &other), Fast::Slow);
    assert_eq!(fast_op(&v, id, 1, undo, &other), Fast::Slow);
    // Exit: the adjustment (-2) applied with the owner's pid; the set is fast again.
    ns.process_exit(42);
    assert_eq!(ctl(&ns, id, 0, GETVAL, SemctlArg::None), Ok(2));
    assert_eq!(ctl(&ns, id, 0, GETPID, SemctlArg::None), Ok(42));
    assert_eq!(v.semctl_get(id, 0, GETVAL, &other), Fast::Done(Ok(2)));
    // Taken into the engine by a daemon call, then cleared by SETVAL.
    assert_eq!(fast_op(&v, id, 5, undo, &other), Fast::Done(Ok(())));
    assert_eq!(
        fast_op(&v, id, 0, undo, &owner),
        Fast::Slow,
        "not the owner"
    );
    assert_eq!(ns.sem_undo_entries(43), 0);
    ctl(&ns, id, 1, GETVAL, SemctlArg::None).unwrap();
    assert_eq!(
        ns.sem_undo_entries(43),
        0,
        "back in the arena after the daemon's call"
    );
    assert_eq!(v.semctl_get(id, 0, GETVAL, &other), Fast::Done(Ok(7)));
    assert_eq!(
        v.semctl_get(id, 0, GETVAL, &owner),
        Fast::Slow,
        "43's adjustments"
    );
    // Entries of two processes: the set stays with the daemon until one has gone.
    engine_op(&ns, 44, id, &[Sembuf::new(1, 1, SEM_UNDO)]).unwrap();
    assert_eq!(ns.sem_undo_entries(43), 1, "taken into the engine");
    assert_eq!(v.semctl_get(id, 0, GETVAL, &other), Fast::Slow);
    ns.process_exit(44);
    assert_eq!(ctl(&ns, id, 1, GETVAL, SemctlArg::None), Ok(0));
    assert_eq!(v.semctl_get(id, 0, GETVAL, &other), Fast::Done(Ok(7)));
    setval(&ns, id, 9);
    ns.process_exit(43);
    assert_eq!(ctl(&ns, id, 0, GETVAL, SemctlArg::None), Ok(9));
    // Clamped at exit, and ERANGE past the adjustment's range is the daemon's.
    assert_eq!(fast_op(&v, id, -9, undo, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, 5, 0, &other), Fast::Slow);
    engine_op(&ns, 43, id, &[Sembuf::new(0, 32767, 0)]).unwrap();
    ns.process_exit(42);
    assert_eq!(ctl(&ns, id, 0, GETVAL, SemctlArg::None), Ok(SEMVMX));
    setval(&ns, id, 0);
    assert_eq!(fast_op(&v, id, 32767, undo, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, -32767, 0, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, 1, undo, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, -1, 0, &owner), Fast::Done(Ok(())));
    assert_eq!(fast_op(&v, id, 1, undo, &owner), Fast::Slow, "ERANGE");
    ns.process_exit(42);
    ctl(&ns, id, 0, IPC_RMID, SemctlArg::None).unwrap();
}
