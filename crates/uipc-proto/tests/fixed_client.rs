//! The client's non-allocating pieces on real sockets: `connect_raw` + `hello`, `exchange`
//! into a fixed buffer (a reply too large for it is dropped and the stream stays in step),
//! and the Cancel sent when a signal interrupts an interruptible wait.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use uipc_proto::client::{connect_raw, exchange, hello, set_read_timeout, WaitMode};
use uipc_proto::transport::{recv_frame, send_frame};
use uipc_proto::{Request, Response, VERSION};

/// Reads one request and answers it with `resp`.
fn answer(fd: RawFd, resp: &Response) -> Request {
    let got = recv_frame(fd, false).unwrap();
    send_frame(fd, &resp.encode(), false, None).unwrap();
    Request::decode(&got.payload).unwrap()
}

#[test]
fn connect_raw_and_hello_reach_a_listener_and_refuse_another_version() {
    let dir = std::env::temp_dir().join(format!("uipc-fixed-client-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    let listener = UnixListener::bind(&dir).unwrap();
    let server = std::thread::spawn(move || {
        let (a, _) = listener.accept().unwrap();
        let first = answer(
            a.as_raw_fd(),
            &Response::Hello {
                version: VERSION,
                pid: 1,
                area: 0,
            },
        );
        let (b, _) = listener.accept().unwrap();
        answer(
            b.as_raw_fd(),
            &Response::Hello {
                version: VERSION + 1,
                pid: 1,
                area: 0,
            },
        );
        first
    });
    let path = dir.as_os_str().as_encoded_bytes();
    let sock = connect_raw(path).unwrap();
    hello(sock.as_raw_fd(), true).unwrap();
    let other = connect_raw(path).unwrap();
    let refused = hello(other.as_raw_fd(), false).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(
        server.join().unwrap(),
        Request::Hello {
            version: VERSION,
            new_image: true,
            area: 0,
        }
    );
    std::fs::remove_file(&dir).unwrap();
    let too_long = vec![b'x'; 200];
    assert_eq!(
        connect_raw(&too_long).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert!(connect_raw(path).is_err(), "nobody listens any more");
}

#[test]
fn a_reply_larger_than_the_fixed_space_is_enomem_and_the_next_exchange_still_works() {
    let (client, server) = UnixStream::pair().unwrap();
    let daemon = std::thread::spawn(move || {
        let fd = server.as_raw_fd();
        answer(
            fd,
            &Response::Msg {
                mtype: 1,
                text: vec![7; 500],
            },
        );
        answer(fd, &Response::Ret(42));
    });
    let fd = client.as_raw_fd();
    let req = Request::Shmdt { addr: 1 }.encode();
    let mut space = [0u8; 64];
    let e = exchange(fd, &req, None, WaitMode::Immediate, &mut space[..]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    let reply = exchange(fd, &req, None, WaitMode::Immediate, &mut space[..]).unwrap();
    assert_eq!(Response::decode(&space[..reply.len]), Ok(Response::Ret(42)));
    daemon.join().unwrap();
}

static HANDLED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_signal(_: libc::c_int) {
    HANDLED.store(true, Ordering::SeqCst);
}

#[test]
fn a_signal_in_an_interruptible_wait_sends_cancel_and_takes_the_reply_that_follows() {
    // SAFETY: installs a handler that only stores to an atomic (no SA_RESTART).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = note_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
    let (client, server) = UnixStream::pair().unwrap();
    set_read_timeout(client.as_raw_fd(), Some(Duration::from_secs(60))).unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let req = Request::Msgrcv {
            msqid: 1,
            maxsize: 8,
            msgtyp: 0,
            flags: 0,
        };
        let mut space = vec![0u8; 64];
        let reply = exchange(
            client.as_raw_fd(),
            &req.encode(),
            None,
            WaitMode::Interruptible,
            &mut space,
        )
        .unwrap();
        Response::decode(&space[..reply.len]).unwrap()
    });
    let tid = tid_rx.recv().unwrap();
    let fd = server.as_raw_fd();
    let first = recv_frame(fd, false).unwrap();
    assert!(matches!(
        Request::decode(&first.payload),
        Ok(Request::Msgrcv { .. })
    ));
    // The waiter is (or soon will be) in its read: signal it until a Cancel comes.
    let mut tries = 0;
    let cancel = loop {
        tries += 1;
        assert!(tries < 500, "no Cancel after 10 s of signals");
        // SAFETY: signals a live thread of this process.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR2) };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one live pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 20) } == 1 {
            break recv_frame(fd, false).unwrap();
        }
    };
    assert_eq!(Request::decode(&cancel.payload), Ok(Request::Cancel));
    assert!(HANDLED.load(Ordering::SeqCst));
    send_frame(fd, &Response::Error(libc::EINTR).encode(), false, None).unwrap();
    assert_eq!(waiter.join().unwrap(), Response::Error(libc::EINTR));
}
