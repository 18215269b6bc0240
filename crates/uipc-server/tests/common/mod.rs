//! What the daemon's integration tests share: a daemon on a fresh socket, served by a thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uipc_server::{Options, Server, Shared};

static N: AtomicUsize = AtomicUsize::new(0);

/// Binds a daemon on a socket of its own (under the temporary directory, named after `tag`,
/// this process and a counter) and serves it from a new thread. Returns the socket's path and
/// the daemon's shared state.
pub fn start(tag: &str) -> (PathBuf, Arc<Shared>) {
    start_with(tag, false)
}

/// [`start`], with `shared`: a socket other users may connect to.
#[allow(dead_code)] // not every test binary starts a shared daemon
pub fn start_with(tag: &str, shared: bool) -> (PathBuf, Arc<Shared>) {
    let dir = std::env::temp_dir().join(format!(
        "uipc-{tag}-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("socket");
    let server = Server::bind(&Options {
        socket: socket.clone(),
        shared,
        private_to: None,
        state: None,
        state_discard_damaged: false,
    })
    .unwrap();
    let shared = server.shared().clone();
    std::thread::spawn(move || server.run());
    (socket, shared)
}

/// Runs this test binary again as uid/gid 65534 (`nobody`), only its test `entry`, with
/// `UIPC_NOBODY` set to the scenario and its arguments; asserts that it passed. The entry
/// reads the variable and does nothing without it.
#[allow(dead_code)]
pub fn as_nobody(entry: &str, scenario: &str, args: &[String]) {
    let out = nobody(entry, scenario, args).output().unwrap();
    assert!(
        out.status.success(),
        "{scenario} as nobody failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The command [`as_nobody`] runs (to start it without waiting).
#[allow(dead_code)]
pub fn nobody(entry: &str, scenario: &str, args: &[String]) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env("UIPC_NOBODY", format!("{scenario} {}", args.join(" ")))
        .uid(65534)
        .gid(65534);
    c
}
