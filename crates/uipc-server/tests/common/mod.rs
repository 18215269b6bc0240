//! What the daemon's integration tests share: a daemon on a fresh socket, served by a thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uipc_proto::client::Connection;
use uipc_server::{Options, Server, Shared};

static N: AtomicUsize = AtomicUsize::new(0);

/// Binds a daemon on a socket of its own (under a temporary directory every user can traverse,
/// so the tests' unprivileged side reaches it; named after `tag`,
/// this process and a counter) and serves it from a new thread. Returns the socket's path and
/// the daemon's shared state.
pub fn start(tag: &str) -> (PathBuf, Arc<Shared>) {
    start_with(tag, false)
}

/// A daemon bound on `socket` with no state file, not yet serving.
fn bind(socket: PathBuf, shared: bool) -> Server {
    bind_for(socket, shared, None)
}

/// [`bind`], private to the tree of process `private_to` (as `uipc run`'s daemon, which has
/// the fast paths' areas) if given.
fn bind_for(socket: PathBuf, shared: bool, private_to: Option<i32>) -> Server {
    Server::bind(&Options {
        socket,
        shared,
        private_to,
        state: None,
        state_discard_damaged: false,
    })
    .unwrap()
}

/// [`start`], and a connection to the daemon (`new_image` as [`Connection::connect`] takes it).
#[allow(dead_code)] // not every test binary speaks through a connection
pub fn start_connected(tag: &str, new_image: bool) -> (PathBuf, Arc<Shared>, Connection) {
    let (path, shared) = start(tag);
    let c = Connection::connect(&path, new_image).unwrap();
    (path, shared, c)
}

/// [`start_connected`] (not a new image) and a private one-semaphore set made through the
/// connection ([`new_sem`]): its id last.
#[allow(dead_code)] // not every test binary makes a set
pub fn with_sem(tag: &str) -> (PathBuf, Arc<Shared>, Connection, i32) {
    let (path, shared, c) = start_connected(tag, false);
    let semid = new_sem(&c, 1);
    (path, shared, c, semid)
}

/// [`start`], with `shared`: a socket other users may connect to.
#[allow(dead_code)] // not every test binary starts a shared daemon
pub fn start_with(tag: &str, shared: bool) -> (PathBuf, Arc<Shared>) {
    start_as(tag, shared, None)
}

/// [`start`], a daemon private to this process's tree, as `uipc run` starts one (with the
/// fast paths' shared areas).
#[allow(dead_code)] // not every test binary starts a private daemon
pub fn start_private(tag: &str) -> (PathBuf, Arc<Shared>) {
    start_as(tag, false, Some(std::process::id() as i32))
}

fn start_as(tag: &str, shared: bool, private_to: Option<i32>) -> (PathBuf, Arc<Shared>) {
    let dir = traversable_tmp().join(format!(
        "uipc-{tag}-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("socket");
    let server = bind_for(socket.clone(), shared, private_to);
    let shared = server.shared().clone();
    std::thread::spawn(move || server.run());
    (socket, shared)
}

/// The daemon side of a test that runs the daemon in a child process (this binary again)
/// with a resource limit of its own: with the environment variable `var` set to a socket
/// path, sets `resource` to `limit` and serves on that socket (`shared`: other users may
/// connect) until killed; without it, does nothing.
#[allow(dead_code)] // not every test binary runs a daemon child
pub fn limited_daemon_side(
    var: &str,
    resource: libc::__rlimit_resource_t,
    limit: u64,
    shared: bool,
) {
    let Ok(socket) = std::env::var(var) else {
        return;
    };
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: sets this process's own limit from a live struct.
    assert_eq!(unsafe { libc::setrlimit(resource, &lim) }, 0);
    let _ = bind(socket.into(), shared).run();
}

/// Waits (up to 20 seconds, else panics) until a daemon answers on `socket`.
#[allow(dead_code)] // not every test binary starts its daemon in a child
pub fn wait_for_daemon(socket: &std::path::Path) {
    let t = std::time::Instant::now();
    while Connection::connect(socket, false).is_err() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "no daemon"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
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

/// The command [`as_nobody`] runs (to start it without waiting). It runs [`nobody_exe`], a
/// copy of this binary nobody can reach, from that copy's directory.
#[allow(dead_code)]
pub fn nobody(entry: &str, scenario: &str, args: &[String]) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let exe = nobody_exe();
    let mut c = std::process::Command::new(exe);
    c.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env("UIPC_NOBODY", format!("{scenario} {}", args.join(" ")))
        .current_dir(exe.parent().unwrap())
        .uid(65534)
        .gid(65534);
    c
}

/// A copy of this test binary that uid 65534 can execute: the build tree may sit in a
/// directory only root can traverse (a clone under `mktemp -d`, mode 0700), where nobody's
/// exec of the binary itself fails with EACCES. The copy is made once per process, mode 0755
/// in a fresh 0755 directory under the temporary directory (`/tmp` if that one is not
/// traversable by every user), and removed when the process exits.
#[allow(dead_code)]
pub fn nobody_exe() -> &'static std::path::Path {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let dir = traversable_tmp().join(format!("uipc-nobody-exe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o755).create(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let me = std::env::current_exe().unwrap();
        let copy = dir.join(me.file_name().unwrap());
        std::fs::copy(&me, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        extern "C" fn remove_copy() {
            if let Some(exe) = EXE.get() {
                let _ = std::fs::remove_dir_all(exe.parent().unwrap());
            }
        }
        // SAFETY: registers a plain function with no arguments, run once at exit.
        unsafe { libc::atexit(remove_copy) };
        copy
    })
}

/// The temporary directory if every user may traverse it and each directory above it, else
/// `/tmp`.
pub fn traversable_tmp() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let tmp = std::env::temp_dir();
    let all = tmp
        .ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    if all {
        tmp
    } else {
        PathBuf::from("/tmp")
    }
}

/// Whether `s` has bytes (or end of file) to read within `ms` milliseconds.
#[allow(dead_code)] // not every test binary watches a raw socket
pub fn readable(s: &std::os::unix::net::UnixStream, ms: i32) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// msgget(IPC_PRIVATE, IPC_CREAT | 0600) through `c`: the daemon's answer.
#[allow(dead_code)] // not every test binary makes a queue
pub fn msgget_private(c: &uipc_proto::client::Connection) -> uipc_proto::Response {
    let req = uipc_proto::Request::Msgget {
        key: uipc::ipc::consts::IPC_PRIVATE,
        flag: uipc::ipc::consts::IPC_CREAT | 0o600,
    };
    c.call(&req, false).unwrap().0
}

/// A Hello frame of this version (length prefix and all), as a client's first bytes.
#[allow(dead_code)] // not every test binary writes raw frames
pub fn hello_frame() -> Vec<u8> {
    let h = uipc_proto::Request::Hello {
        version: uipc_proto::VERSION,
        new_image: false,
        area: 0,
    }
    .encode();
    let mut f = (h.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&h);
    f
}

/// A pipe, then a fork: the child's pid (0 in the child) and the pipe's `[read, write]` ends.
///
/// # Safety
/// The child must make only calls that are safe after a fork of a multi-threaded process
/// (system calls, glibc's malloc) and must leave by `_exit` or be killed.
#[allow(dead_code)] // not every test binary forks
pub unsafe fn fork_with_pipe() -> (libc::pid_t, [i32; 2]) {
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a live array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the caller answers for what the child does.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    (child, fds)
}

/// One byte read from `fd` (a pipe's read end); panics on end of file or error.
#[allow(dead_code)] // not every test binary forks
pub fn read_byte(fd: i32) -> u8 {
    let mut byte = 0u8;
    // SAFETY: reads one byte into a live buffer.
    assert_eq!(
        unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) },
        1
    );
    byte
}

/// A private set of `nsems` semaphores made through `c`: its id.
#[allow(dead_code)] // not every test binary makes a set
pub fn new_sem(c: &uipc_proto::client::Connection, nsems: i32) -> i32 {
    let req = uipc_proto::Request::Semget {
        key: uipc::ipc::consts::IPC_PRIVATE,
        nsems,
        flag: 0o600,
    };
    let uipc_proto::Response::Ret(id) = c.call(&req, false).unwrap().0 else {
        panic!("semget")
    };
    id as i32
}
