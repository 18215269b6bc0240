//! The connection bounds: connections that never say hello are capped per user and closed
//! after the hello time-out, and at the descriptor limit a new client is refused at once
//! (not left hanging) while connected clients keep being served, shmget included.
//!
//! The descriptor test runs the daemon in a child process (this binary again, [`daemon_side`]),
//! with a low descriptor limit of its own.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use uipc::ipc::consts::{IPC_CREAT, IPC_PRIVATE};
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response};
use uipc_server::limits::{HELLO_TIMEOUT, UNGREETED_PER_UID};
#[allow(dead_code)]
mod common;

/// The descriptor limit of the daemon in [`daemon_side`].
const NOFILE: u64 = 600;

fn closed(s: &UnixStream) -> bool {
    let mut b = [0u8; 64];
    matches!(std::io::Read::read(&mut &*s, &mut b), Ok(0) | Err(_))
}

#[test]
fn connections_that_never_say_hello_are_capped_and_timed_out() {
    let (path, shared) = common::start("ungreeted");
    // A client that said hello (before the silent ones, which are of the same user).
    let good = Connection::connect(&path, false).unwrap();
    let mut silent = Vec::new();
    for _ in 0..UNGREETED_PER_UID {
        silent.push(UnixStream::connect(&path).unwrap());
    }
    // One more not greeted: closed at once.
    let extra = UnixStream::connect(&path).unwrap();
    assert!(
        common::readable(&extra, 2000),
        "the connection over the bound is kept"
    );
    assert!(closed(&extra));
    // After the time-out, the silent ones are closed.
    let t = Instant::now();
    for s in &silent {
        let left = (HELLO_TIMEOUT + Duration::from_secs(3)).saturating_sub(t.elapsed());
        assert!(
            common::readable(s, left.as_millis() as i32),
            "a silent connection is kept"
        );
        assert!(closed(s));
    }
    assert!(t.elapsed() >= HELLO_TIMEOUT - Duration::from_secs(1));
    let resp = common::msgget_private(&good);
    assert!(matches!(resp, Response::Ret(_)), "{resp:?}");
    assert_eq!(shared.reactor.users.count(0).1, 0);
}

/// The daemon with a low descriptor limit: does nothing unless started by the test.
#[test]
fn daemon_side() {
    common::limited_daemon_side("UIPC_LIMITS_DAEMON", libc::RLIMIT_NOFILE, NOFILE, false);
}

#[test]
fn at_the_descriptor_limit_new_clients_are_refused_and_old_ones_served() {
    let dir = std::env::temp_dir().join(format!("uipc-limits-fd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("socket");
    let mut daemon = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "daemon_side", "--nocapture"])
        .env("UIPC_LIMITS_DAEMON", &socket)
        .spawn()
        .unwrap();
    common::wait_for_daemon(&socket);
    let result = std::panic::catch_unwind(|| at_the_limit(&socket));
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn at_the_limit(socket: &Path) {
    let first = Connection::connect(socket, false).unwrap();
    let hello = common::hello_frame();
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..NOFILE {
        let s = UnixStream::connect(socket).unwrap();
        if (&s).write_all(&hello).is_err() {
            refused += 1;
            continue;
        }
        assert!(common::readable(&s, 3000), "a client at the limit hangs");
        let mut b = [0u8; 64];
        match std::io::Read::read(&mut &s, &mut b) {
            Ok(n) if n > 0 => held.push(s),
            _ => refused += 1,
        }
    }
    println!("{} connections held, {refused} refused", held.len());
    assert!(refused > 0, "the limit was never reached");
    // A connected client is still served, shmget (a new descriptor) included.
    let (resp, _) = first
        .call(
            &Request::Shmget {
                key: IPC_PRIVATE,
                size: 4096,
                flag: IPC_CREAT | 0o600,
            },
            false,
        )
        .unwrap();
    assert!(matches!(resp, Response::Ret(id) if id >= 0), "{resp:?}");
    // Once clients leave, new ones are served again.
    held.truncate(held.len() / 2);
    Connection::connect(socket, false).expect("a new client after others left");
}

/// A long frame sent right after a reply is read is the client's next call, whatever the
/// daemon is still doing with the last one: it gets its answer (msgsnd over msgmax: EINVAL),
/// never a closed connection for a frame too long for a call in flight. (The Hello has
/// another worker watch the sockets while it is served, so the next frame may be read before
/// the Hello's worker is done with it.)
#[test]
fn a_long_frame_right_after_a_reply_is_served() {
    let (path, _) = common::start("nextcall");
    let c = Connection::connect(&path, false).unwrap();
    let Response::Ret(q) = common::msgget_private(&c) else {
        panic!("msgget")
    };
    let text = vec![7u8; 100 << 10];
    let long = Request::Msgsnd {
        msqid: q as i32,
        mtype: 1,
        msgsz: text.len() as u64,
        text: Some(text),
        flags: 0,
    };
    for i in 0..300 {
        let c = Connection::connect(&path, false).unwrap();
        let resp = c.call(&long, false);
        assert!(
            matches!(resp, Ok((Response::Error(libc::EINVAL), _))),
            "connection {i}: {resp:?}"
        );
    }
}
