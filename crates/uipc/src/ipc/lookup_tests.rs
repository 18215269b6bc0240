//! Operations on an existing id take no registry lock: with every registry's writer lock held
//! (as a concurrent semget, IPC_RMID or IPC_SET would hold it), semop, the semctl readers,
//! msgsnd, msgrcv, msgctl(IPC_STAT), shmat, shmdt and shmctl(IPC_STAT) still complete. A
//! call that took the lock would block until the guard is dropped, and the test would see it
//! time out.

use super::consts::*;
use super::msg::MsgctlArg;
use super::namespace::HasRegistry;
use super::sem::{Sembuf, SemctlArg};
use super::IpcNamespace;
use crate::{Cred, WaitCtx};
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[test]
fn operations_on_existing_ids_complete_while_every_registry_is_write_locked() {
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(7);
    let sem = ns.semget(&root, IPC_PRIVATE, 2, 0o600).unwrap();
    let msg = ns.msgget(&root, IPC_PRIVATE, 0o600).unwrap();
    let shm = ns.shmget(&root, IPC_PRIVATE, 4096, 0o600).unwrap();
    let guards = (
        ns.sem.registry().write(),
        ns.msg.registry().write(),
        ns.shm.registry().write(),
    );
    let (done, finished) = mpsc::channel();
    let worker = {
        let ns = ns.clone();
        std::thread::spawn(move || {
            let root = Cred::root(7);
            let w = WaitCtx::FOREVER;
            let up = Sembuf {
                sem_num: 1,
                sem_op: 1,
                sem_flg: 0,
            };
            let step = |name: &str, ok: bool| done.send((name.to_string(), ok)).unwrap();
            step("semop", ns.semop(&root, sem, &[up], &w).is_ok());
            step(
                "semctl GETVAL",
                ns.semctl(&root, sem, 1, GETVAL, SemctlArg::None).is_ok(),
            );
            step(
                "semctl IPC_STAT",
                ns.semctl(&root, sem, 0, IPC_STAT, SemctlArg::None).is_ok(),
            );
            step("msgsnd", ns.msgsnd(&root, msg, 1, b"x", 0, &w).is_ok());
            step("msgrcv", ns.msgrcv(&root, msg, 8, 0, 0, &w).is_ok());
            step(
                "msgctl IPC_STAT",
                ns.msgctl(&root, msg, IPC_STAT, MsgctlArg::None).is_ok(),
            );
            let at = ns.shmat(&root, shm, 0, 0);
            step("shmat", at.is_ok());
            step(
                "shmctl IPC_STAT",
                ns.shmctl(&root, shm, IPC_STAT, None).is_ok(),
            );
            if let Ok(at) = at {
                step("shmdt", ns.shmdt(&root, at.addr).is_ok());
            }
        })
    };
    let mut seen = Vec::new();
    while let Ok((name, ok)) = finished.recv_timeout(Duration::from_secs(3)) {
        assert!(ok, "{name} failed");
        seen.push(name);
    }
    drop(guards);
    worker.join().unwrap();
    assert_eq!(
        seen.len(),
        9,
        "completed with the registries locked: {seen:?}; the next one blocked"
    );
}
