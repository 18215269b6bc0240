//! A `uipc run` daemon (`--private-to`) serves a program with more threads calling at once
//! than the per-user connection bounds allow a shared daemon's user: its own user has no
//! connection cap (the descriptor reserve still holds).

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use uipc::ipc::consts::{IPC_CREAT, IPC_PRIVATE};
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response};
use uipc_server::limits::CONNS_PER_UID;

/// Threads that connect and call at once: more than the per-user cap.
const THREADS: usize = CONNS_PER_UID + 200;

/// Raises this process's descriptor limit to its hard limit (both ends of every connection
/// live here); false if that is still too low for the test.
fn enough_descriptors() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit through a live struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    lim.rlim_cur >= (3 * THREADS) as u64
}

#[test]
fn a_private_daemon_serves_more_threads_of_its_user_than_the_per_user_cap() {
    if !enough_descriptors() {
        eprintln!("skipped: the descriptor limit is too low");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uipc-private-threads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket: PathBuf = dir.join("socket");
    let server = uipc_server::Server::bind(&uipc_server::Options {
        socket: socket.clone(),
        shared: false,
        private_to: Some(std::process::id() as i32),
        state: None,
        state_discard_damaged: false,
    })
    .unwrap();
    std::thread::spawn(move || server.run());
    let start = Arc::new(Barrier::new(THREADS));
    let done = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (start, done, socket) = (start.clone(), done.clone(), socket.clone());
            std::thread::Builder::new()
                .stack_size(128 << 10)
                .spawn(move || {
                    start.wait();
                    let served = Connection::connect(&socket, false).is_ok_and(|c| {
                        let r = c.call(
                            &Request::Msgget {
                                key: IPC_PRIVATE,
                                flag: IPC_CREAT | 0o600,
                            },
                            false,
                        );
                        // Every connection held open until all threads have called.
                        let ok = matches!(r, Ok((Response::Ret(_), _)));
                        done.wait();
                        ok
                    });
                    if !served {
                        done.wait();
                    }
                    served
                })
                .unwrap()
        })
        .collect();
    done.wait();
    let served = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|&ok| ok)
        .count();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(served, THREADS, "threads refused by the private daemon");
}
