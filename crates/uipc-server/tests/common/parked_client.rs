//! Client helpers shared by the parking tests: plain calls, a bare session socket to send on
//! without waiting for the reply, semop requests, and polling until a condition holds.
#![allow(dead_code)] // each test binary uses its own subset

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use uipc::ipc::consts::IPC_PRIVATE;
use uipc::ipc::sem::{Sembuf, Timespec};
use uipc_proto::client::Connection;
use uipc_proto::transport::{recv_frame, send_frame};
use uipc_proto::{Request, Response, SemArg};
/// Polls until a condition holds (the workspace's one [`uipc_testkit::wait_until`]).
pub use uipc_testkit::wait_until as until;

pub fn call(c: &Connection, req: Request) -> Response {
    c.call(&req, false).unwrap().0
}

/// A session after its Hello, as a bare socket (to send without waiting for the reply).
pub fn session(path: &Path) -> UnixStream {
    let s = Connection::connect(path, false).unwrap().into_stream();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

pub fn send(s: &UnixStream, req: &Request) {
    send_frame(s.as_raw_fd(), &req.encode(), true, None).unwrap();
}

pub fn reply(s: &UnixStream) -> Response {
    Response::decode(&recv_frame(s.as_raw_fd(), false).unwrap().payload).unwrap()
}

pub fn semop(semid: i32, op: i16, timeout: Option<Timespec>) -> Request {
    Request::Semtimedop {
        semid,
        nsops: 1,
        sops: Some(vec![Sembuf::new(0, op, 0)]),
        timeout,
    }
}

/// The daemon's answer to semctl(`cmd`) (GETVAL, GETNCNT, ...) on semaphore 0 of `semid`;
/// panics on an answer that is not a value.
pub fn sem_count(c: &Connection, semid: i32, cmd: i32) -> i64 {
    let req = Request::Semctl {
        semid,
        semnum: 0,
        cmd,
        arg: SemArg::None,
    };
    match call(c, req) {
        Response::Ret(v) => v,
        other => panic!("semctl {cmd}: {other:?}"),
    }
}

/// A private message queue.
pub fn new_queue(c: &Connection) -> i32 {
    let Response::Ret(id) = call(
        c,
        Request::Msgget {
            key: IPC_PRIVATE,
            flag: 0o600,
        },
    ) else {
        panic!("msgget")
    };
    id as i32
}
