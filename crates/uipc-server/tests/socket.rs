//! The daemon's socket: it never exists with wider permissions than asked (whatever the
//! umask), and credentials come with every frame from the first, even one sent before the
//! daemon accepted the connection.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uipc_proto::transport::{recv_frame, send_frame};
use uipc_proto::{Request, Response, VERSION};
use uipc_server::{Options, Server};

fn options(tag: &str, shared: bool) -> Options {
    let dir = std::env::temp_dir().join(format!("uipc-socket-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Options {
        socket: dir.join("socket"),
        shared,
        private_to: None,
        state: None,
        state_discard_damaged: false,
    }
}

#[test]
fn a_first_frame_sent_before_the_accept_carries_credentials() {
    let server = Server::bind(&options("early", false)).unwrap();
    let s = UnixStream::connect(server.path()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Request::Hello {
        version: VERSION,
        new_image: false,
        area: 0,
    };
    // No SCM_CREDENTIALS from the client, and nobody has accepted yet: the kernel attaches
    // them only if the listening socket asked for them.
    send_frame(s.as_raw_fd(), &hello.encode(), false, None).unwrap();
    std::thread::spawn(move || server.run());
    let got = recv_frame(s.as_raw_fd(), false).unwrap();
    assert!(matches!(
        Response::decode(&got.payload),
        Ok(Response::Hello {
            version: VERSION,
            ..
        })
    ));
}

#[test]
fn the_socket_never_has_wider_permissions_than_asked() {
    // SAFETY: sets this process's umask (the other test here does not create files).
    let old = unsafe { libc::umask(0) };
    let widest = Arc::new(AtomicU32::new(0));
    for round in 0..20 {
        let opts = options(&format!("mode{round}"), false);
        std::fs::create_dir_all(opts.socket.parent().unwrap()).unwrap();
        std::fs::set_permissions(
            opts.socket.parent().unwrap(),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (path, stop, widest) = (opts.socket.clone(), stop.clone(), widest.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(m) = std::fs::symlink_metadata(&path) {
                        widest.fetch_or(m.permissions().mode() & 0o077, Ordering::Relaxed);
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_millis(2));
        let server = Server::bind(&opts).unwrap();
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        let mode = std::fs::metadata(server.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // SAFETY: restores the umask.
    unsafe { libc::umask(old) };
    assert_eq!(
        widest.load(Ordering::Relaxed),
        0,
        "the socket was seen open to group or others"
    );
}
