//! A call parked on the daemon still ends as a sleeping one did: on the client's Cancel, on
//! its hang-up, at semtimedop's deadline (`parking_scale.rs` shows it costs no thread).

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use uipc::ipc::consts::*;
use uipc::ipc::sem::Timespec;
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response};
mod common;

#[path = "common/parked_client.rs"]
mod parked_client;
use parked_client::*;

/// Sends a semop -1 on session `s` (with `timeout`) and waits until the daemon has it queued
/// on set `semid` (seen through `c`).
fn park_down(s: &UnixStream, c: &Connection, semid: i32, timeout: Option<Timespec>) {
    send(s, &semop(semid, -1, timeout));
    until("the semop queued", || sem_count(c, semid, GETNCNT) == 1);
}

#[test]
fn cancel_ends_a_parked_semop_and_msgrcv_with_eintr() {
    let (path, shared, c, semid) = common::with_sem("parking");
    let msqid = new_queue(&c);
    let s = session(&path);
    park_down(&s, &c, semid, None);
    send(&s, &Request::Cancel);
    assert_eq!(reply(&s), Response::Error(libc::EINTR));
    assert_eq!(sem_count(&c, semid, GETNCNT), 0);
    let rcv = Request::Msgrcv {
        msqid,
        maxsize: 10,
        msgtyp: 0,
        flags: 0,
    };
    send(&s, &rcv);
    until("the receiver parked", || shared.parked_calls() == 1);
    send(&s, &Request::Cancel);
    assert_eq!(reply(&s), Response::Error(libc::EINTR));
    let snd = Request::Msgsnd {
        msqid,
        mtype: 1,
        msgsz: 2,
        text: Some(b"ok".to_vec()),
        flags: 0,
    };
    assert_eq!(call(&c, snd), Response::Ret(0));
    let nowait = Request::Msgrcv {
        msqid,
        maxsize: 10,
        msgtyp: 0,
        flags: IPC_NOWAIT,
    };
    assert_eq!(
        call(&c, nowait),
        Response::Msg {
            mtype: 1,
            text: b"ok".to_vec()
        },
        "the cancelled receiver took nothing"
    );
    send(&s, &semop(semid, 1, None));
    assert_eq!(
        reply(&s),
        Response::Ret(0),
        "the session goes on after a Cancel"
    );
}

#[test]
fn a_hang_up_withdraws_the_parked_call() {
    let (path, shared, c, semid) = common::with_sem("parking");
    let s = session(&path);
    park_down(&s, &c, semid, None);
    let open = shared.reactor.connections();
    drop(s);
    until("withdrawn", || sem_count(&c, semid, GETNCNT) == 0);
    until("connection gone", || {
        shared.reactor.connections() == open - 1
    });
    assert_eq!(call(&c, semop(semid, 1, None)), Response::Ret(0));
    assert_eq!(sem_count(&c, semid, GETVAL), 1, "nothing consumed it");
}

#[test]
fn semtimedops_timeout_ends_a_parked_call_with_eagain() {
    let (path, shared, c, semid) = common::with_sem("parking");
    let s = session(&path);
    let t0 = Instant::now();
    let t = Timespec {
        tv_sec: 0,
        tv_nsec: 80_000_000,
    };
    send(&s, &semop(semid, -1, Some(t)));
    assert_eq!(reply(&s), Response::Error(libc::EAGAIN));
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(80), "answered after {took:?}");
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert_eq!(sem_count(&c, semid, GETNCNT), 0);
    // A nearer deadline queued after a farther one fires first.
    let far = session(&path);
    let ten_seconds = Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    park_down(&far, &c, semid, Some(ten_seconds));
    let t0 = Instant::now();
    send(&s, &semop(semid, -1, Some(t)));
    assert_eq!(reply(&s), Response::Error(libc::EAGAIN));
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(call(&c, semop(semid, 1, None)), Response::Ret(0));
    assert_eq!(
        reply(&far),
        Response::Ret(0),
        "completed before its deadline"
    );
    until("no deadline left", || shared.reactor.deadlines() == 0);
}

fn msgsnd(msqid: i32, mtype: i64, text: &[u8]) -> Request {
    Request::Msgsnd {
        msqid,
        mtype,
        msgsz: text.len() as u64,
        text: Some(text.to_vec()),
        flags: 0,
    }
}

#[test]
fn a_parked_msgsnd_is_woken_by_a_receive_and_sends_then() {
    let (path, shared, c) = common::start_connected("parking", false);
    let msqid = new_queue(&c);
    let set = Request::Msgctl {
        msqid,
        cmd: IPC_SET,
        set: Some(uipc::ipc::msg::MsqidSet {
            uid: 0,
            gid: 0,
            mode: 0o600,
            qbytes: 4,
        }),
    };
    assert_eq!(call(&c, set), Response::Ret(0));
    assert_eq!(call(&c, msgsnd(msqid, 1, b"full")), Response::Ret(0));
    let s = session(&path);
    send(&s, &msgsnd(msqid, 2, b"next"));
    until("the sender parked", || shared.parked_calls() == 1);
    let rcv = |flags| Request::Msgrcv {
        msqid,
        maxsize: 10,
        msgtyp: 0,
        flags,
    };
    assert_eq!(
        call(&c, rcv(0)),
        Response::Msg {
            mtype: 1,
            text: b"full".to_vec()
        }
    );
    assert_eq!(reply(&s), Response::Ret(0), "woken, it retried and sent");
    assert_eq!(
        call(&c, rcv(IPC_NOWAIT)),
        Response::Msg {
            mtype: 2,
            text: b"next".to_vec()
        }
    );
    assert_eq!(shared.parked_calls(), 0);
}

#[test]
fn cancels_racing_completions_never_lose_or_repeat_an_operation() {
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 40;
    let (path, shared, c, semid) = common::with_sem("parking");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let posted = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let poster = {
        let (path, done, posted) = (path.clone(), done.clone(), posted.clone());
        std::thread::spawn(move || {
            let c = Connection::connect(&path, false).unwrap();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                assert_eq!(call(&c, semop(semid, 1, None)), Response::Ret(0));
                posted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let s = session(&path);
                let mut took = 0i64;
                for r in 0..ROUNDS {
                    send(&s, &semop(semid, -1, None));
                    if (i + r) % 3 != 0 {
                        std::thread::sleep(Duration::from_micros(((i * 7 + r * 13) % 400) as u64));
                        send(&s, &Request::Cancel);
                    }
                    match reply(&s) {
                        Response::Ret(0) => took += 1,
                        Response::Error(libc::EINTR) => {}
                        other => panic!("{other:?}"),
                    }
                }
                took
            })
        })
        .collect();
    let took: i64 = clients.into_iter().map(|t| t.join().unwrap()).sum();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    poster.join().unwrap();
    let posted = posted.load(std::sync::atomic::Ordering::SeqCst);
    until("nothing parked", || shared.parked_calls() == 0);
    assert_eq!(sem_count(&c, semid, GETNCNT), 0);
    assert_eq!(
        sem_count(&c, semid, GETVAL),
        posted - took,
        "{posted} posted, {took} taken"
    );
    assert!(took > 0);
}
