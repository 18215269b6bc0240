//! Fast-path sleepers against the engine: adopted by a daemon call and completed by it (a
//! +1, SETVAL, IPC_RMID's EIDRM), and a cancel of an adopted operation resolved at the next
//! daemon entry into the slot.

use super::owner::SemArena;
use super::{ArenaView, Cancel, Sleep, TestCaller as Who, Ticket, Wait, SLOTS};
use crate::ipc::consts::*;
use crate::ipc::sem::{Sembuf, SemctlArg, SemctlOut};
use crate::ipc::{IpcNamespace, NamespaceOptions};
use crate::{Cred, Errno, WaitCtx};
use std::sync::Arc;

/// A namespace on an arena, a set of one semaphore published with value 0.
fn setup() -> (IpcNamespace, Arc<SemArena>, i32) {
    let arena = Arc::new(SemArena::owned(SLOTS));
    let ns = IpcNamespace::with_options(NamespaceOptions {
        sem_arena: Some(arena.clone()),
        ..Default::default()
    });
    let id = ns.semget(&Cred::root(1), IPC_PRIVATE, 1, 0o600).unwrap();
    ctl(&ns, id, GETVAL, SemctlArg::None).unwrap(); // publishes it
    (ns, arena, id)
}

fn ctl(ns: &IpcNamespace, id: i32, cmd: i32, arg: SemctlArg<'_>) -> Result<i32, Errno> {
    match ns.semctl(&Cred::root(1), id, 0, cmd, arg)? {
        SemctlOut::Ret(r) => Ok(r),
        _ => Ok(0),
    }
}

/// A +1 on semaphore 0 through the engine, by root in process `pid`.
fn engine_up(ns: &IpcNamespace, pid: i32, id: i32) {
    let up = [Sembuf::new(0, 1, 0)];
    ns.semop(&Cred::root(pid), id, &up, &WaitCtx::FOREVER)
        .unwrap();
}

/// A -1 on semaphore 0 by process `pid` on the fast path, armed to sleep.
fn arm(v: &ArenaView<'_>, id: i32, pid: u32) -> Ticket {
    match v.semop_sleep(id, Sembuf::new(0, -1, 0), &Who(pid)) {
        Sleep::Armed(t) => t,
        other => panic!("not armed: {other:?}"),
    }
}

/// [`setup`], and process 50's -1 armed to sleep on the fast path.
fn with_sleeper() -> (IpcNamespace, Arc<SemArena>, i32, Ticket) {
    let (ns, arena, id) = setup();
    let t = arm(&arena.view(), id, 50);
    (ns, arena, id, t)
}

#[test]
fn a_daemon_semop_completes_the_adopted_sleeper_in_fifo_order() {
    let (ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    assert!(matches!(v.wait_state(&t), Wait::Sleep(_)));
    assert_eq!(ctl(&ns, id, GETNCNT, SemctlArg::None), Ok(1), "adopted");
    // An engine +1 (as a multi-sop call would be): the sleeper's -1 goes first.
    engine_up(&ns, 60, id);
    assert_eq!(v.wait_state(&t), Wait::Done(Ok(())));
    assert_eq!(ctl(&ns, id, GETVAL, SemctlArg::None), Ok(0));
    assert_eq!(ctl(&ns, id, GETPID, SemctlArg::None), Ok(50));
    // SETVAL wakes the next one.
    let t = arm(&v, id, 51);
    ctl(&ns, id, SETVAL, SemctlArg::Val(1)).unwrap();
    assert_eq!(v.wait_state(&t), Wait::Done(Ok(())));
    assert_eq!(ctl(&ns, id, GETPID, SemctlArg::None), Ok(51));
}

#[test]
fn rmid_gives_eidrm_and_an_adopted_cancel_is_resolved_by_the_daemon() {
    let (ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    assert_eq!(ctl(&ns, id, GETZCNT, SemctlArg::None), Ok(0));
    assert_eq!(v.cancel(&t), Cancel::AskDaemon);
    assert!(matches!(v.wait_state(&t), Wait::Sleep(_)));
    assert_eq!(ctl(&ns, id, GETNCNT, SemctlArg::None), Ok(0), "withdrawn");
    assert_eq!(v.cancel(&t), Cancel::Cancelled);
    // Published again once quiet: a new sleeper, then IPC_RMID.
    assert_eq!(ctl(&ns, id, GETVAL, SemctlArg::None), Ok(0));
    let t = arm(&v, id, 52);
    ctl(&ns, id, IPC_RMID, SemctlArg::None).unwrap();
    assert_eq!(v.wait_state(&t), Wait::Done(Err(Errno::EIDRM)));
}

#[test]
fn an_exiting_sleeper_is_withdrawn() {
    let (ns, _arena, id, _t) = with_sleeper();
    ns.process_exit(50);
    assert_eq!(ctl(&ns, id, GETNCNT, SemctlArg::None), Ok(0));
    engine_up(&ns, 60, id);
    assert_eq!(ctl(&ns, id, GETVAL, SemctlArg::None), Ok(1));
}

#[test]
fn an_exec_withdraws_a_sleeping_thread_of_the_process() {
    let (ns, arena, id, _t) = with_sleeper();
    ns.process_exec(50);
    assert_eq!(ctl(&ns, id, GETNCNT, SemctlArg::None), Ok(0));
    assert_eq!(ctl(&ns, id, GETVAL, SemctlArg::None), Ok(0));
    // Published again, with a free record: the next sleeper sleeps on the fast path.
    let _t = arm(&arena.view(), id, 51);
}
