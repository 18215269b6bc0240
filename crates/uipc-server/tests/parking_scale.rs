//! Calls that wait on the daemon cost a parked object, not a thread: hundreds of clients
//! blocked at once leave the daemon's thread count where it was, and each one is answered
//! when woken. (Alone in its test binary: other tests' daemons would add threads.)

use std::os::unix::net::UnixStream;
use uipc::ipc::consts::*;
use uipc_proto::{Request, Response};
mod common;

#[path = "common/parked_client.rs"]
mod parked_client;
use parked_client::*;

/// The daemon's threads in this process: those it names `uipc-*`.
fn daemon_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("uipc-"))
        .count()
}

#[test]
fn three_hundred_blocked_clients_add_no_daemon_thread_and_all_are_answered() {
    const SEMOPS: usize = 200;
    const RECEIVERS: usize = 100;
    let (path, shared, c, semid) = common::with_sem("parking");
    let msqid = new_queue(&c);
    // The workers and the exit thread name themselves once running.
    let before = uipc_server::workers::default_count() + 1;
    until("the daemon's threads are up", || daemon_threads() == before);
    let sleepers: Vec<UnixStream> = (0..SEMOPS).map(|_| session(&path)).collect();
    for s in &sleepers {
        send(s, &semop(semid, -1, None));
    }
    let receivers: Vec<UnixStream> = (0..RECEIVERS).map(|_| session(&path)).collect();
    for (i, s) in receivers.iter().enumerate() {
        let rcv = Request::Msgrcv {
            msqid,
            maxsize: 64,
            msgtyp: i as i64 + 1,
            flags: 0,
        };
        send(s, &rcv);
    }
    until("every semop queued", || {
        sem_count(&c, semid, GETNCNT) == SEMOPS as i64
    });
    until("every call parked", || {
        shared.parked_calls() == SEMOPS + RECEIVERS
    });
    assert!(shared.reactor.connections() > SEMOPS + RECEIVERS);
    let during = daemon_threads();
    assert_eq!(
        during,
        before,
        "{} blocked clients changed the daemon's thread count",
        SEMOPS + RECEIVERS
    );
    assert!(during <= 20, "a small, fixed pool: {during} threads");
    assert_eq!(
        call(&c, semop(semid, SEMOPS as i16, None)),
        Response::Ret(0)
    );
    for s in &sleepers {
        assert_eq!(reply(s), Response::Ret(0));
    }
    for i in (0..RECEIVERS).rev() {
        let text = format!("to {i}").into_bytes();
        let snd = Request::Msgsnd {
            msqid,
            mtype: i as i64 + 1,
            msgsz: text.len() as u64,
            text: Some(text),
            flags: 0,
        };
        assert_eq!(call(&c, snd), Response::Ret(0));
    }
    for (i, s) in receivers.iter().enumerate() {
        let want = Response::Msg {
            mtype: i as i64 + 1,
            text: format!("to {i}").into_bytes(),
        };
        assert_eq!(reply(s), want);
    }
    assert_eq!(sem_count(&c, semid, GETVAL), 0);
    assert_eq!(sem_count(&c, semid, GETNCNT), 0);
    assert_eq!(daemon_threads(), before);
    until("nothing parked", || shared.parked_calls() == 0);
}
