//! The daemon against hostile clients: random frames that do not decode, random byte
//! streams, oversized and truncated frames. Each gets an error reply or a closed connection,
//! and the daemon keeps serving well-behaved clients.

use proptest::prelude::*;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use uipc_proto::client::Connection;
use uipc_proto::transport::{recv_frame, send_frame};
use uipc_proto::{Request, Response, VERSION};
mod common;

fn daemon() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| common::start("hostile").0)
}

/// The daemon's socket and a raw stream connected to it (no hello said).
fn raw_client() -> (&'static Path, UnixStream) {
    let path = daemon();
    (path, UnixStream::connect(path).unwrap())
}

fn still_serves(path: &Path) {
    let c = Connection::connect(path, false).expect("the daemon still accepts sessions");
    let (resp, _) = c
        .call(
            &Request::Msgget {
                key: 0,
                flag: 0o600,
            },
            false,
        )
        .unwrap();
    assert!(matches!(resp, Response::Ret(id) if id >= 0), "{resp:?}");
}

fn hello(s: &UnixStream) {
    let h = Request::Hello {
        version: VERSION,
        new_image: false,
        area: 0,
    };
    send_frame(s.as_raw_fd(), &h.encode(), true, None).unwrap();
    let got = recv_frame(s.as_raw_fd(), false).unwrap();
    assert!(matches!(
        Response::decode(&got.payload),
        Ok(Response::Hello {
            version: VERSION,
            ..
        })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn an_undecodable_frame_gets_ebadmsg_and_a_closed_connection(
        payload in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        prop_assume!(Request::decode(&payload).is_err());
        let (_, s) = raw_client();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        hello(&s);
        send_frame(s.as_raw_fd(), &payload, true, None).unwrap();
        let got = recv_frame(s.as_raw_fd(), false).unwrap();
        prop_assert_eq!(Response::decode(&got.payload), Ok(Response::Error(libc::EBADMSG)));
        prop_assert!(recv_frame(s.as_raw_fd(), false).is_err());
    }

    #[test]
    fn a_random_byte_stream_never_takes_the_daemon_down(
        bytes in proptest::collection::vec(any::<u8>(), 0..300)
    ) {
        let (path, s) = raw_client();
        let _ = (&s).write_all(&bytes);
        drop(s);
        still_serves(path);
    }
}

#[test]
fn a_frame_sent_without_credentials_is_judged_by_the_ids_the_kernel_attaches() {
    let (path, s) = raw_client();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    hello(&s);
    // The daemon sets SO_PASSCRED, so the kernel attaches credentials anyway: the frame is
    // served with the sender's real ids.
    let get = Request::Msgget {
        key: 0,
        flag: 0o600,
    };
    send_frame(s.as_raw_fd(), &get.encode(), false, None).unwrap();
    let got = recv_frame(s.as_raw_fd(), false).unwrap();
    assert!(matches!(
        Response::decode(&got.payload),
        Ok(Response::Ret(_))
    ));
    still_serves(path);
}

#[test]
fn a_frame_cut_short_by_a_hang_up_is_dropped() {
    let (path, s) = raw_client();
    hello(&s);
    (&s).write_all(&1000u32.to_le_bytes()).unwrap();
    (&s).write_all(&[10, 0, 0]).unwrap();
    drop(s);
    let s = UnixStream::connect(path).unwrap();
    (&s).write_all(&u32::MAX.to_le_bytes()).unwrap();
    drop(s);
    still_serves(path);
}

#[test]
fn a_client_that_sends_without_waiting_for_replies_is_served_or_cut_off() {
    let (path, s) = raw_client();
    hello(&s);
    let get = Request::Msgget {
        key: 0,
        flag: 0o600,
    };
    // Two hundred requests in one write. The daemon reads one frame at a time: it serves them
    // in order, or, if it reads ahead of a call in flight, queues a few and then drops the
    // connection; never an unbounded queue.
    let payload = get.encode();
    let mut burst = Vec::new();
    for _ in 0..200 {
        burst.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        burst.extend_from_slice(&payload);
    }
    (&s).write_all(&burst).unwrap();
    let mut replies = 0;
    let t0 = std::time::Instant::now();
    while replies < 200 && t0.elapsed() < Duration::from_secs(20) {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        if unsafe { libc::poll(&mut p, 1, 2000) } != 1 {
            break;
        }
        let Ok(frame) = recv_frame(s.as_raw_fd(), false) else {
            break;
        };
        assert!(matches!(
            Response::decode(&frame.payload),
            Ok(Response::Ret(_))
        ));
        replies += 1;
    }
    assert!(replies >= 1, "no reply at all");
    still_serves(path);
}

#[test]
fn a_client_that_does_not_read_large_replies_does_not_stall_the_others() {
    let path = daemon();
    let good = Connection::connect(path, false).unwrap();
    let get = Request::Semget {
        key: 0,
        nsems: 32000,
        flag: 0o600,
    };
    let Response::Ret(id) = good.call(&get, false).unwrap().0 else {
        panic!("semget")
    };
    let s = UnixStream::connect(path).unwrap();
    hello(&s);
    // Forty GETALLs of 64 000 bytes each, never read: more than the socket's buffer, so the
    // daemon's send of one of them blocks until the send timeout (10 s).
    let getall = uipc_proto::Request::Semctl {
        semid: id as i32,
        semnum: 0,
        cmd: uipc::ipc::consts::GETALL,
        arg: uipc_proto::SemArg::None,
    }
    .encode();
    let mut burst = Vec::new();
    for _ in 0..40 {
        burst.extend_from_slice(&(getall.len() as u32).to_le_bytes());
        burst.extend_from_slice(&getall);
    }
    (&s).write_all(&burst).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    for _ in 0..20 {
        still_serves(path);
    }
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "other clients waited {:?}",
        t0.elapsed()
    );
    drop(s);
}
