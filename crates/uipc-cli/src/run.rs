//! `uipc run [--socket PATH] [--locks] -- program args...`: runs a program with the preload library,
//! against the daemon on the socket, starting a private one if none answers there.
//!
//! Without `--socket`, a `uipc run` started under another one (`$UIPC_SOCKET` set and
//! answering) joins its daemon, so nested programs share one namespace; otherwise the daemon
//! is private: it serves the program and every descendant whatever uid they switch to, and
//! refuses other users (its socket is 0666 in a fresh 0711 directory, and the daemon admits
//! only this process's descendants and this user: `uipc_server::admission`). A daemon
//! started here is a child process
//! (`uipc serve`) that gets SIGTERM once the program and every descendant that outlived it
//! are gone (`uipc run` is their subreaper), or when `uipc run` itself dies
//! (PR_SET_PDEATHSIG). The library is `libuipc_preload.so` next to the `uipc` binary, else
//! `../lib/uipc/libuipc_preload.so` from the binary's directory (or `$UIPC_PRELOAD`); it is prepended to `LD_PRELOAD`, and `UIPC_SOCKET` names the socket.
//! `--locks` also routes file locks (fcntl, flock, lockf) to the daemon: it sets
//! `UIPC_LOCKS=1` for the program (without it, an inherited value is left as it is, so a
//! nested `uipc run` keeps its parent's choice).
//! `--timers` sets `UIPC_TIMERS=1`: the library then serves POSIX timers inside each process
//! (no daemon involved); a nested `uipc run` without it keeps the inherited value.
//!
//! Orphans: `uipc run` is the subreaper of the program's descendants and reaps each one that
//! dies while the program runs (not only after it), so a dead orphan never stays a zombie that
//! looks alive; the program's own status is kept for the exit status.
//!
//! A daemon that died leaves its socket file: `uipc run --socket S` then says so and exits with
//! status 125 rather than start an empty daemon in its place, unless given `--restart`.
//!
//! While the program runs, `uipc run` ignores SIGINT and SIGQUIT (the terminal sends them to
//! the program too, which decides) and passes SIGTERM and SIGHUP on to it, so the daemon stays
//! up as long as the program does. The exit status is the program's, or 128 + the signal
//! that killed it.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

fn answers(socket: &Path) -> bool {
    uipc_proto::client::Connection::connect(socket, false).is_ok()
}

fn preload_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("UIPC_PRELOAD") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the uipc binary: {e}"))?;
    // Beside the binary (the build tree), or in PREFIX/lib/uipc for PREFIX/bin/uipc (an
    // install by scripts/install.sh).
    let beside = exe.with_file_name("libuipc_preload.so");
    let installed = exe
        .parent()
        .and_then(Path::parent)
        .map(|prefix| prefix.join("lib/uipc/libuipc_preload.so"));
    let candidates = [Some(beside.clone()), installed];
    match candidates.into_iter().flatten().find(|p| p.exists()) {
        Some(lib) => Ok(lib),
        None => Err(format!(
            "{} is missing (build it with `cargo build --release -p uipc-preload`, or install \
             both with scripts/install.sh)",
            beside.display()
        )),
    }
}

/// Whether every user may traverse `dir` and each directory above it.
fn traversable_by_all(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors().all(|d| {
        d.as_os_str().is_empty()
            || std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
    })
}

/// Whether this process may switch to another uid: effective uid 0 or CAP_SETUID in its
/// effective set.
fn may_switch_uid() -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [[0u32; 3]; 2];
    // SAFETY: capget reads the header and writes two capability data structs into `data`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    r == 0 && data[0][0] & (1 << 7) != 0 // CAP_SETUID
}

/// Warns when a child that switches to another uid could not load `lib`: the dynamic linker
/// opens LD_PRELOAD's library as the child's uid, so every directory above it must be
/// searchable and the library readable by others, or that child runs without uipc.
/// `UIPC_NO_REACH_WARNING` in the environment silences it (for callers whose children keep
/// their uid, such as `uipc bench`).
fn warn_if_unreachable_by_others(lib: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if !may_switch_uid() || std::env::var_os("UIPC_NO_REACH_WARNING").is_some() {
        return;
    }
    let readable = std::fs::metadata(lib).is_ok_and(|m| m.permissions().mode() & 0o004 != 0);
    let reachable = lib.parent().is_some_and(traversable_by_all);
    if !(readable && reachable) {
        eprintln!(
            "uipc: warning: {} is not readable by every user (the file, or a directory above \
             it, shuts others out): a child that switches to another uid runs without uipc; \
             install with scripts/install.sh or build in a directory others may search",
            lib.display()
        );
    }
}

/// A socket path in a fresh directory of mode 0711: only its owner may list or change it, but
/// every user may traverse it, so that the program's descendants reach the daemon whatever uid
/// they switch to (the daemon itself refuses processes outside the program's tree). The
/// directory is made under `$XDG_RUNTIME_DIR` or the temporary directory, whichever every
/// user can traverse (`/tmp` if neither).
fn private_socket() -> Result<PathBuf, String> {
    let base = [
        std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()),
        Some(std::env::temp_dir().into_os_string()),
    ]
    .into_iter()
    .flatten()
    .map(PathBuf::from)
    .find(|d| d.is_absolute() && traversable_by_all(d))
    .unwrap_or_else(|| PathBuf::from("/tmp"));
    let template = base.join("uipc-run-XXXXXX");
    let mut bytes = template.into_os_string().into_encoded_bytes();
    bytes.push(0);
    // SAFETY: `bytes` is a writable NUL-terminated template; mkdtemp creates a 0700 directory.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(format!(
            "cannot create a private directory: {}",
            std::io::Error::last_os_error()
        ));
    }
    bytes.pop();
    // SAFETY: mkdtemp filled in the template with a path (bytes that were valid before).
    let dir = PathBuf::from(unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(bytes) });
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
    Ok(dir.join("socket"))
}

/// Starts `uipc serve` on `socket`; with `private`, serving only this process's descendants
/// (and this user).
fn start_daemon(socket: &Path, private: bool) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve").arg("--socket").arg(socket);
    if private {
        cmd.arg("--private-to").arg(std::process::id().to_string());
    }
    cmd.env_remove("LD_PRELOAD");
    // SAFETY: prctl is async-signal-safe; it runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the daemon: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if answers(socket) {
            return Ok(child);
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("the daemon exited: {st}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    Err("the daemon did not answer within 10 s".into())
}

static PROGRAM: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(sig: libc::c_int) {
    let pid = PROGRAM.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; the pid is our unreaped child.
        unsafe { libc::kill(pid, sig) };
    }
}

/// From now on SIGINT and SIGQUIT are ignored and SIGTERM and SIGHUP go to `pid`.
fn forward_signals_to(pid: i32) {
    PROGRAM.store(pid, Ordering::SeqCst);
    // SAFETY: installs dispositions for this process; `pass_on` is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        let handler = pass_on as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGHUP, handler);
    }
}

/// The program is gone: SIGTERM and SIGHUP end `uipc run` again (the daemon follows it).
fn stop_forwarding() {
    PROGRAM.store(0, Ordering::SeqCst);
    // SAFETY: restores default dispositions.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGHUP, libc::SIG_DFL);
    }
}

/// Runs `argv` under uipc; see the module doc.
pub fn run(
    socket: Option<PathBuf>,
    restart: bool,
    locks: bool,
    timers: bool,
    argv: &[String],
) -> ExitCode {
    match run_inner(socket, restart, locks, timers, argv) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("uipc run: {e}");
            ExitCode::from(125)
        }
    }
}

/// Waits for the program (`program`), reaping every other child that ends meanwhile: the
/// program's orphaned descendants, reparented to us (a subreaper), are reaped as they die, as
/// init would reap them, so a killed orphan does not linger as a zombie that `kill(pid, 0)`
/// reports alive. The daemon's own end is noted in `daemon_reaped` (it is not to be signalled
/// or waited for again).
fn wait_reaping_orphans(
    program: i32,
    daemon: Option<i32>,
    daemon_reaped: &mut bool,
) -> std::io::Result<std::process::ExitStatus> {
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of ours, writing its status into a live int.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if pid == program {
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        if Some(pid) == daemon {
            *daemon_reaped = true;
        }
    }
}

/// Once the program has exited: its descendants that outlived it were reparented to us (we
/// are a subreaper); reap them until no child but the daemon is left, as listed in
/// `/proc/self/task/TID/children` (without that file, stop with the program).
fn wait_for_descendants(daemon: Option<i32>, daemon_reaped: &mut bool) {
    let me = std::process::id();
    let children = format!("/proc/{me}/task/{me}/children");
    loop {
        loop {
            // SAFETY: reaps any exited child without blocking; no status wanted.
            let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if Some(pid) == daemon {
                *daemon_reaped = true;
            }
        }
        let Ok(list) = std::fs::read_to_string(&children) else {
            return;
        };
        let others = list
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .any(|p| Some(p) != daemon);
        if !others {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_inner(
    socket: Option<PathBuf>,
    restart: bool,
    locks: bool,
    timers: bool,
    argv: &[String],
) -> Result<ExitCode, String> {
    let (program, args) = argv.split_first().ok_or("no program given")?;
    // SAFETY: marks this process as the reaper of its orphaned descendants.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    let lib = preload_library()?;
    warn_if_unreachable_by_others(&lib);
    let inherited = std::env::var_os("UIPC_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .filter(|s| answers(s));
    let (socket, private_dir) = match socket.or(inherited) {
        Some(s) => (s, None),
        None => {
            let s = private_socket()?;
            let dir = s.parent().map(Path::to_path_buf);
            (s, dir)
        }
    };
    let mut daemon = None;
    if !answers(&socket) {
        if private_dir.is_none() && socket.exists() && !restart {
            return Err(format!(
                "no daemon answers on {}, but the socket file is there: the daemon that made it \
                 died, and its objects with it; pass --restart to start an empty one there",
                socket.display()
            ));
        }
        daemon = Some(start_daemon(&socket, private_dir.is_some())?);
    }
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut command = Command::new(program);
    command
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("UIPC_SOCKET", &socket);
    if locks {
        command.env("UIPC_LOCKS", "1");
    }
    if timers {
        command.env("UIPC_TIMERS", "1");
    }
    let daemon_pid = daemon.as_ref().map(|d| d.id() as i32);
    let mut daemon_reaped = false;
    let status = command.spawn().and_then(|child| {
        forward_signals_to(child.id() as i32);
        let status = wait_reaping_orphans(child.id() as i32, daemon_pid, &mut daemon_reaped);
        stop_forwarding();
        status
    });
    if status.is_ok() {
        wait_for_descendants(daemon_pid, &mut daemon_reaped);
    }
    if let Some(mut d) = daemon.filter(|_| !daemon_reaped) {
        // SAFETY: signals our own child, which has not been reaped yet.
        unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
        let _ = d.wait();
    }
    if let Some(dir) = private_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let status = status.map_err(|e| format!("cannot run {program}: {e}"))?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        _ => ExitCode::FAILURE,
    })
}
