//! The uipc daemon: one IPC namespace served to client processes over a Unix socket
//! (`uipc serve`).
//!
//! Threads, a fixed number whatever the number of clients: a pool of workers ([`workers`],
//! one per core, 4 to 16, plus the thread that calls [`Server::run`]) that take turns running
//! the event loop ([`reactor`]: accepts connections, reads frames from every socket without
//! blocking, fires semtimedop deadlines) and serve what it finds ([`session`]); and the exit
//! thread, which waits on the client pidfds and applies a dead process's exit rules
//! ([`procs`]; workers apply them too when they see an exit first). The preload library opens
//! one connection per client thread; a connection has one call in flight ([`conn`]). A call
//! that must wait (semop, semtimedop, msgsnd, msgrcv, F_SETLKW, F_OFD_SETLKW, a blocking
//! flock) is parked ([`parked`]): the engine's request stays queued on its object, and the
//! waker's notification, the client's Cancel or hang-up, the process's exit or the deadline
//! brings it back to a worker, which answers it. A sleeping call costs its queued request
//! and a few hundred bytes, not a thread.

//! File locks: one [`LockManager`] beside the namespace. Lock calls carry the client's
//! descriptor; the daemon reads the file's identity and access from its copy and tells open
//! file descriptions apart with `kcmp` ([`descriptions`], [`lockserve`]). A blocking F_SETLKW
//! or flock is parked like semop (tried without waiting first). Exits drop the process's POSIX locks, and the OFD and flock locks of
//! descriptions no process holds open any more.
//!
//! Shared memory is memfd-backed ([`memfd`]): shmat sends the segment's memfd with the reply
//! and the client maps it. With a state file the namespace survives a restart ([`state`]):
//! the daemon stops serving before it saves ([`stop`]), so the file holds what its replies
//! acknowledged.
//!
//! The socket lives in a directory that is not writable by others: created 0700 (0755 with
//! `shared`) if missing, refused if it exists and is group- or other-writable or belongs to
//! another user (root's directories excepted). The socket is
//! 0600, or 0666 with `shared` (connecting needs write permission on it), from its creation
//! ([`listen`]); the daemon judges
//! every call by the caller's kernel-verified credentials either way. A `uipc run`'s private
//! daemon (`private_to`) has a 0666 socket in a 0711 directory and admits only the run's
//! descendants and its own user ([`admission`]).
//!
//! ## Not supported
//! - POSIX timers are not served by the daemon: `uipc run --timers` serves them inside each
//!   process (the preload library's own engine timer table), as a process's timers are its own.
//! - File locks are not saved in the state file (Linux's locks do not survive a reboot
//!   either, but a restarted daemon forgets locks its clients still think they hold).
//! - A description's last close is found by scanning every process's `/proc/PID/fd` (stat,
//!   then kcmp) on a close through a description that owns OFD or flock locks, and after an
//!   exit or exec while any description owns such locks, unless a cheaper check proves it
//!   still held ([`descriptions`]): costly with many processes when it is not. A
//!   process whose descriptors the daemon may not read is not seen, and a descriptor closed
//!   without the daemon hearing of it (a raw close system call, `close_range`, a process the
//!   daemon never served) is found only at the next exit, exec or close sweep.
//!   A request already asleep behind such a lock is granted only when one of these sweeps
//!   runs (a new conflicting call runs one and is retried).
//! - A process the daemon cannot inspect (another user's without privilege, or one that made
//!   itself non-dumpable) is not seen holding a description: its closing peers may drop the
//!   description's OFD and flock locks while it still has it open. A `kcmp` refused for a
//!   descriptor that matched by file counts as a reference (locks are kept).
//! - Without `kcmp` (a kernel built without CONFIG_KCMP, or a seccomp filter that forbids it,
//!   as container runtimes' default profiles may without CAP_SYS_PTRACE) OFD and flock calls
//!   fail with ENOLCK.
//! - The scans race with forks and dups happening at the same time: a description passed on
//!   while the scan runs may be missed.
//! - A frame's pid is the number the kernel reports at receive time; a process that died and
//!   whose pid was reused at once could be confused with its successor (SCM_PIDFD would close
//!   this gap).
//! - Capabilities are read with `capget` of the process (its main thread's) and supplementary
//!   groups from its `/proc/PID/status` (the main thread's too): a thread whose capabilities
//!   or groups differ from its main thread's (capset, setgroups or setuid made by one thread
//!   through a raw system call) is judged by the main thread's, with the groups dropped if its
//!   effective ids differ. A process in an ancestor of the daemon's user namespace gets no
//!   capabilities (Linux grants it those it holds there).
//! - What still holds a worker while it runs (never while a call waits for a waker): the
//!   `/proc/*/fd` scans of lock closes and sweeps, the reading of `/proc/PID/status` when a
//!   check needs the caller's supplementary groups, a large reply the kernel would not buffer
//!   whole (only
//!   for a daemon without CAP_NET_ADMIN, with a reply over `net.core.wmem_max`, to a client
//!   that read everything before: the rest waits for it, at most 10 seconds; a client that
//!   left replies unread loses its connection instead, [`conn`]), and an exit handled by a
//!   worker, which waits for the process's requests that are being served at that moment.
//!   With every worker held so, other connections wait; parked calls never hold one. While
//!   the worker that read a frame serves it, nobody watches the sockets unless it found more
//!   work or reached one of the slow steps above (it then wakes an idle worker to lead):
//!   frames that arrive meanwhile wait for that one call.
//! - The bounds of [`limits`] are per user, not per process: a user's own processes can crowd
//!   each other out. A client with CAP_DAC_OVERRIDE, or running as the daemon's user, can
//!   reopen a read-only segment descriptor writable (it could attach the segment writable
//!   anyway). The namespace's own limits (shmmni, msgmni, msgmnb, ...) are shared by all
//!   users, as on one kernel.

pub mod admission;
pub mod arena;
pub mod conn;
pub mod descriptions;
pub mod dispatch;
mod execclose;
mod exits;
pub mod fdscan;
mod flocknames;
pub mod hints;
pub mod jobs;
pub mod limits;
pub mod listen;
pub mod lockserve;
pub mod memfd;
pub mod namespaces;
pub mod outcome;
pub mod parked;
pub mod pidns;
pub mod procs;
pub mod procserve;
pub mod reactor;
pub mod session;
pub mod shared;
mod spin;
pub mod state;
pub mod stop;
mod sync;
pub mod workers;

/// Held by each unit test that reads every process's descriptors or makes a child: a child
/// holds copies of all of the test process's descriptors between its fork and its exec (or
/// its own close_range), and a scan made then would count it as a reference.
#[cfg(test)]
pub(crate) fn serial_scans_and_forks() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

use jobs::Jobs;
use memfd::MemfdBacking;
use procs::Procs;
use reactor::Reactor;
pub use shared::Shared;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uipc::locks::LockManager;

/// How the daemon listens.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The socket path.
    pub socket: PathBuf,
    /// Let other users connect (socket 0666, directory 0755 when created).
    pub shared: bool,
    /// Serve only this process's descendants (whatever their uid) and the daemon's own user:
    /// a `uipc run`'s private daemon ([`admission`]). The socket is 0666 (the directory 0711
    /// when created) so that a descendant reaches it after switching uid.
    pub private_to: Option<i32>,
    /// Restore the namespace from this file at start (if it exists) and save it there when
    /// stopped by SIGTERM, SIGINT or SIGHUP ([`run_until_signalled`]).
    pub state: Option<PathBuf>,
    /// A damaged state file is moved aside (FILE.damaged) and the daemon starts empty,
    /// instead of refusing to start.
    pub state_discard_damaged: bool,
}

/// A bound daemon, not yet accepting.
pub struct Server {
    shared: Arc<Shared>,
    listener: UnixListener,
    path: PathBuf,
}

/// Serves until SIGTERM, SIGINT, SIGHUP or SIGQUIT, then saves the state (if asked), removes
/// the socket and exits the process. A save that fails exits nothing: the daemon stays, not
/// serving, its objects in memory, says so, and tries the save again at the next signal;
/// SIGQUIT after a failed save exits without saving (status 1). Call before any thread is started: the signals are blocked
/// in every thread and taken by one with `sigwait`.
pub fn run_until_signalled(opts: &Options) -> io::Result<()> {
    // SAFETY: builds a signal set in a zeroed sigset_t and blocks it for this thread (and the
    // threads it starts later).
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let server = Server::bind(opts)?;
    let shared = server.shared.clone();
    let (socket, state) = (opts.socket.clone(), opts.state.clone());
    std::thread::Builder::new()
        .name("uipc-signals".into())
        .spawn(move || {
            let mut failed = false;
            let code = loop {
                let mut sig = 0;
                // SAFETY: waits for one of the blocked signals of a live set.
                unsafe { libc::sigwait(&set, &mut sig) };
                let Some(path) = &state else {
                    break 0;
                };
                shared.stop_serving();
                if sig == libc::SIGQUIT && failed {
                    eprintln!(
                        "uipc serve: SIGQUIT: exiting without saving {} (the objects are lost)",
                        path.display()
                    );
                    break 1;
                }
                let home = shared.namespaces.home();
                if let Some(warning) = state::unsaved_warning(&shared.namespaces) {
                    eprintln!("{warning}");
                }
                match state::save(home, &shared.backing, path) {
                    Ok(()) => break 0,
                    Err(e) => {
                        failed = true;
                        eprintln!("{}", state::save_failed_message(path, &e));
                    }
                }
            };
            let _ = std::fs::remove_file(&socket);
            std::process::exit(code);
        })?;
    server.run()
}

/// The default socket: `$XDG_RUNTIME_DIR/uipc/socket`, `/run/uipc/socket` for root, else
/// `/tmp/uipc-UID/socket`.
pub fn default_socket_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&dir).join("uipc/socket");
    }
    // SAFETY: plain getter.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        PathBuf::from("/run/uipc/socket")
    } else {
        PathBuf::from(format!("/tmp/uipc-{uid}/socket"))
    }
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit from a live struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn prepare_dir(dir: &Path, mode: u32) -> io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) => {
            if !m.is_dir() {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            // SAFETY: plain getter.
            let me = unsafe { libc::geteuid() };
            if m.uid() != me && m.uid() != 0 {
                return Err(io::Error::other(format!(
                    "{} belongs to another user; choose a directory of your own",
                    dir.display()
                )));
            }
            if m.permissions().mode() & 0o022 != 0 {
                return Err(io::Error::other(format!(
                    "{} is writable by others; choose a private directory",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(dir),
        Err(e) => Err(e),
    }
}

impl Server {
    /// Creates the namespace and binds the socket. Fails if a daemon already answers there.
    /// Raises the soft descriptor limit to the hard one: the daemon holds a descriptor per
    /// connection, per client process (its pidfd) and per segment.
    pub fn bind(opts: &Options) -> io::Result<Server> {
        raise_fd_limit();
        let dir = opts.socket.parent().unwrap_or(Path::new("."));
        prepare_dir(
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            match (opts.shared, opts.private_to) {
                (true, _) => 0o755,
                (false, Some(_)) => 0o711,
                (false, None) => 0o700,
            },
        )?;
        if opts.socket.exists() {
            if UnixStream::connect(&opts.socket).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("a daemon already listens on {}", opts.socket.display()),
                ));
            }
            std::fs::remove_file(&opts.socket)?;
        }
        let backing = Arc::new(MemfdBacking::new());
        // The semaphore fast path: a private daemon's program tree only (`arena`).
        let fast = opts.private_to.is_some()
            && !opts.shared
            && opts.state.is_none()
            && !arena::switched_off();
        let ns = namespaces::engine_namespace(&backing, fast);
        if let Some(state) = opts.state.as_deref() {
            state::restore_at_start(&ns, state, opts.state_discard_damaged)?;
        }
        let mode = if opts.shared || opts.private_to.is_some() {
            0o666
        } else {
            0o600
        };
        let listener = listen::bind_listener(&opts.socket, mode)?;
        // SAFETY: plain getter.
        let me = unsafe { libc::geteuid() };
        // A private daemon does not cap its own user's connections (`limits`).
        let reactor = Reactor::new(opts.private_to.map(|_| me))?;
        let admission = match opts.private_to {
            Some(root) => admission::Admission::Tree { root, owner: me },
            None => admission::Admission::Anyone,
        };
        let shared = Arc::new(Shared {
            namespaces: namespaces::Namespaces::new(ns, backing.clone(), fast),
            locks: match (
                arena::new_leases().filter(|_| fast),
                arena::new_flock_slots().filter(|_| fast),
            ) {
                (Some(leases), Some(slots)) => LockManager::new()
                    .with_leases(leases)
                    .with_flock_slots(slots),
                (Some(leases), None) => LockManager::new().with_leases(leases),
                _ => LockManager::new(),
            },
            descriptions: descriptions::Descriptions::new(),
            hints: hints::LockHints::new(),
            backing,
            procs: Procs::new(admission)?,
            exits: exits::ExitWatch::default(),
            jobs: Arc::new(Jobs::new(reactor.wake_handle()?)),
            reactor,
            parked: std::sync::atomic::AtomicUsize::new(0),
            stop: stop::StopGate::default(),
        });
        shared.reactor.watch_exits(shared.procs.exit_set())?;
        workers::spawn(&shared, workers::default_count())?;
        let s = shared.clone();
        std::thread::Builder::new()
            .name("uipc-exits".into())
            .spawn(move || loop {
                s.procs.reap_ready(-1, &|| {}, &|pid| {
                    let _inside = s.stop.enter();
                    s.process_exit(pid)
                });
            })?;
        Ok(Server {
            shared,
            listener,
            path: opts.socket.clone(),
        })
    }

    /// The state shared with sessions (tests look at the namespace through it).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections and serves them forever (the calling thread joins the workers).
    pub fn run(self) -> io::Result<()> {
        self.shared.reactor.listen(self.listener)?;
        workers::work(&self.shared)
    }
}
