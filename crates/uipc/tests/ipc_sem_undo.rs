//! SEM_UNDO: adjustments, their range, application at exit, fork/exec, resets, removal.

use std::sync::Arc;
use std::thread;
use std::time::Duration;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, WaitCtx};

const UNDO: i16 = SEM_UNDO;
const NOWAIT: i16 = IPC_NOWAIT as i16;

fn root() -> Cred {
    Cred::root(100)
}

/// A namespace with one fresh set of `n` semaphores.
fn new_set(n: i32) -> (IpcNamespace, i32) {
    let ns = IpcNamespace::new();
    let id = ns.semget(&root(), IPC_PRIVATE, n, 0o600).unwrap();
    (ns, id)
}
/// Waits until an operation sleeps on semaphore 0 of `id` (its GETNCNT).
fn wait_ncnt(ns: &IpcNamespace, id: i32) {
    while ns
        .semctl(&root(), id, 0, GETNCNT, SemctlArg::None)
        .unwrap()
        .ret()
        == 0
    {
        thread::sleep(Duration::from_millis(1));
    }
}

fn proc_(pid: i32) -> Cred {
    Cred::root(pid)
}
fn val(ns: &IpcNamespace, id: i32, n: i32) -> i32 {
    ns.semctl(&root(), id, n, GETVAL, SemctlArg::None)
        .unwrap()
        .ret()
}
fn op(ns: &IpcNamespace, c: &Cred, id: i32, sops: &[Sembuf]) -> Result<(), Errno> {
    ns.semop(c, id, sops, &WaitCtx::FOREVER)
}
fn setval(ns: &IpcNamespace, id: i32, n: i32, v: i32) {
    ns.semctl(&root(), id, n, SETVAL, SemctlArg::Val(v))
        .unwrap();
}

#[test]
fn exit_reverts_the_process_adjustments() {
    let (ns, id) = new_set(2);
    let p = proc_(7);
    op(
        &ns,
        &p,
        id,
        &[Sembuf::new(0, 5, UNDO), Sembuf::new(1, 2, 0)],
    )
    .unwrap();
    op(&ns, &p, id, &[Sembuf::new(0, -1, UNDO)]).unwrap();
    op(&ns, &p.in_thread(8), id, &[Sembuf::new(0, 1, UNDO)]).unwrap();
    assert_eq!(val(&ns, id, 0), 5);
    assert_eq!(ns.sem_undo_entries(7), 1, "threads share one list");
    ns.process_exit(7);
    assert_eq!(val(&ns, id, 0), 0, "+5 -1 +1 undone");
    assert_eq!(val(&ns, id, 1), 2, "ops without SEM_UNDO stay");
    assert_eq!(ns.sem_undo_entries(7), 0);
    assert_eq!(
        ns.semctl(&root(), id, 0, GETPID, SemctlArg::None)
            .unwrap()
            .ret(),
        7,
        "exit records the pid"
    );
}

#[test]
fn exit_clamps_to_zero_and_semvmx_and_never_fails() {
    let (ns, id) = new_set(2);
    let p = proc_(9);
    op(&ns, &p, id, &[Sembuf::new(0, 5, UNDO)]).unwrap();
    setval(&ns, id, 1, 1);
    op(&ns, &p, id, &[Sembuf::new(1, -1, UNDO)]).unwrap();
    // Others move the values so the undo would leave the range.
    op(&ns, &root(), id, &[Sembuf::new(0, -5, 0)]).unwrap();
    op(&ns, &root(), id, &[Sembuf::new(1, 32767, 0)]).unwrap();
    ns.process_exit(9);
    assert_eq!(val(&ns, id, 0), 0, "undoing +5 from 0 gives 0");
    assert_eq!(val(&ns, id, 1), 32767, "undoing -1 at 32767 gives 32767");
}

#[test]
fn semadj_range_is_checked_with_erange() {
    let (ns, id) = new_set(1);
    let p = proc_(11);
    op(&ns, &p, id, &[Sembuf::new(0, 32767, UNDO)]).unwrap();
    op(&ns, &p, id, &[Sembuf::new(0, -32767, 0)]).unwrap();
    // semadj is -32767; another +1 makes -32768 (allowed), +2 more would be -32770.
    op(&ns, &p, id, &[Sembuf::new(0, 1, UNDO)]).unwrap();
    assert_eq!(
        op(&ns, &p, id, &[Sembuf::new(0, 1, UNDO | NOWAIT)]),
        Err(Errno::ERANGE)
    );
    assert_eq!(val(&ns, id, 0), 1, "the failing op applied nothing");
    op(&ns, &p, id, &[Sembuf::new(0, 1, 0)]).unwrap();
    ns.process_exit(11);
    assert_eq!(val(&ns, id, 0), 0, "adj -32768 clamps at 0");
}

#[test]
fn fork_child_starts_empty_and_exec_keeps_the_list() {
    let (ns, id) = new_set(1);
    op(&ns, &proc_(20), id, &[Sembuf::new(0, 3, UNDO)]).unwrap();
    ns.process_fork(20, 21);
    assert_eq!(ns.sem_undo_entries(21), 0);
    ns.process_exit(21);
    assert_eq!(val(&ns, id, 0), 3, "the child's exit undoes nothing");
    ns.process_exec(20);
    assert_eq!(ns.sem_undo_entries(20), 1);
    ns.process_exit(20);
    assert_eq!(val(&ns, id, 0), 0, "kept across exec, applied at exit");
}

#[test]
fn setval_resets_one_semadj_and_setall_resets_all() {
    let (ns, id) = new_set(2);
    for pid in [30, 31] {
        op(
            &ns,
            &proc_(pid),
            id,
            &[Sembuf::new(0, 1, UNDO), Sembuf::new(1, 1, UNDO)],
        )
        .unwrap();
    }
    setval(&ns, id, 0, 10);
    ns.process_exit(30);
    assert_eq!(
        (val(&ns, id, 0), val(&ns, id, 1)),
        (10, 1),
        "sem0 reset, sem1 undone"
    );
    op(&ns, &proc_(32), id, &[Sembuf::new(0, 4, UNDO)]).unwrap();
    ns.semctl(&root(), id, 0, SETALL, SemctlArg::Array(&[6, 6]))
        .unwrap();
    ns.process_exit(31);
    ns.process_exit(32);
    assert_eq!((val(&ns, id, 0), val(&ns, id, 1)), (6, 6), "all reset");
}

#[test]
fn rmid_drops_the_entries_and_a_reused_id_starts_clean() {
    let (ns, id) = new_set(1);
    op(&ns, &proc_(40), id, &[Sembuf::new(0, 2, UNDO)]).unwrap();
    ns.semctl(&root(), id, 0, IPC_RMID, SemctlArg::None)
        .unwrap();
    assert_eq!(ns.sem_undo_entries(40), 0);
    let again = ns.semget(&root(), IPC_PRIVATE, 1, 0o600).unwrap();
    op(&ns, &root(), again, &[Sembuf::new(0, 1, 0)]).unwrap();
    ns.process_exit(40);
    assert_eq!(val(&ns, again, 0), 1);
}

#[test]
fn exit_wakes_waiters_the_undo_unblocks() {
    let ns = Arc::new(IpcNamespace::new());
    let id = ns.semget(&root(), IPC_PRIVATE, 1, 0o600).unwrap();
    setval(&ns, id, 0, 1);
    op(&ns, &proc_(50), id, &[Sembuf::new(0, -1, UNDO)]).unwrap();
    let ns2 = ns.clone();
    let t = thread::spawn(move || op(&ns2, &proc_(51), id, &[Sembuf::new(0, -1, 0)]));
    wait_ncnt(&ns, id);
    ns.process_exit(50);
    assert_eq!(t.join().unwrap(), Ok(()));
    assert_eq!(val(&ns, id, 0), 0);
}

#[test]
fn a_woken_undo_op_records_its_adjustment() {
    let ns = Arc::new(IpcNamespace::new());
    let id = ns.semget(&root(), IPC_PRIVATE, 1, 0o600).unwrap();
    let ns2 = ns.clone();
    let t = thread::spawn(move || op(&ns2, &proc_(60), id, &[Sembuf::new(0, -2, UNDO)]));
    wait_ncnt(&ns, id);
    op(&ns, &root(), id, &[Sembuf::new(0, 3, 0)]).unwrap();
    assert_eq!(t.join().unwrap(), Ok(()));
    assert_eq!(val(&ns, id, 0), 1);
    ns.process_exit(60);
    assert_eq!(val(&ns, id, 0), 3);
}
