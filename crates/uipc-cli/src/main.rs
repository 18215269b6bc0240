//! `uipc`: the one command. Subcommands dispatch to the library crates. `bench` and
//! `conform` are cargo features (both on by default): `--no-default-features` builds a `uipc`
//! that serves and runs programs (and lists and removes objects and locks) without the
//! benchmark's and the differential runs' code and dependencies.

#[cfg(feature = "bench")]
mod bench;
#[cfg(feature = "conform")]
mod conform;
mod ipcrm;
mod ipcs;
mod locks;
mod run;

use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "uipc",
    version,
    about = "User-space Linux SysV IPC, file locks and POSIX timers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reproduce the seeds' benchmarks: uipc beside the design it replaced and the host kernel.
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// Run random operations on the host kernel and on the engine and compare the results.
    #[cfg(feature = "conform")]
    Conform {
        #[command(subcommand)]
        what: conform::ConformWhat,
    },
    /// Serve one IPC namespace to client processes over a Unix socket (the daemon).
    Serve(ServeArgs),
    /// Run a program (and what it forks) with its SysV IPC served by uipc.
    Run(RunArgs),
    /// List a daemon's SysV IPC objects (util-linux ipcs's formats).
    Ipcs(IpcsArgs),
    /// Remove a daemon's SysV IPC objects by id or key (util-linux ipcrm's options).
    Ipcrm(IpcrmArgs),
    /// List a daemon's file locks (util-linux lslocks's default columns).
    Locks(LocksArgs),
    /// The program `uipc bench shim` runs natively and under `uipc run` (not for direct use).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    BenchChild {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args)]
struct LocksArgs {
    /// The daemon's socket (default: $UIPC_SOCKET, else the default socket).
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// Only the locks of this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<i32>,
    /// No header line.
    #[arg(short = 'n', long = "noheadings")]
    noheadings: bool,
}

#[derive(Args)]
struct IpcsArgs {
    /// The daemon's socket (default: $UIPC_SOCKET, else the default socket).
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// Message queues.
    #[arg(short = 'q', long = "queues")]
    queues: bool,
    /// Shared memory segments.
    #[arg(short = 'm', long = "shmems")]
    shmems: bool,
    /// Semaphore arrays.
    #[arg(short = 's', long = "semaphores")]
    semaphores: bool,
    /// All three (the default).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Print details on the object with this id (with one of -q, -m, -s).
    #[arg(
        short = 'i',
        long = "id",
        value_name = "ID",
        allow_negative_numbers = true
    )]
    id: Option<i32>,
    /// Show attach, detach and change times.
    #[arg(short = 't', long = "time", overrides_with_all = ["pid", "creator", "limits", "summary"])]
    time: bool,
    /// Show PIDs of creator and last operator.
    #[arg(short = 'p', long = "pid", overrides_with_all = ["time", "creator", "limits", "summary"])]
    pid: bool,
    /// Show creator and owner.
    #[arg(short = 'c', long = "creator", overrides_with_all = ["time", "pid", "limits", "summary"])]
    creator: bool,
    /// Show resource limits.
    #[arg(short = 'l', long = "limits", overrides_with_all = ["time", "pid", "creator", "summary"])]
    limits: bool,
    /// Show status summary.
    #[arg(short = 'u', long = "summary", overrides_with_all = ["time", "pid", "creator", "limits"])]
    summary: bool,
    /// Show sizes in human-readable format.
    #[arg(long = "human", overrides_with = "bytes")]
    human: bool,
    /// Show sizes in bytes.
    #[arg(short = 'b', long = "bytes", overrides_with = "human")]
    bytes: bool,
}

#[derive(Args)]
struct IpcrmArgs {
    /// The daemon's socket (default: $UIPC_SOCKET, else the default socket).
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// Remove the shared memory segment with this id.
    #[arg(short = 'm', long = "shmem-id", value_name = "ID")]
    shm_ids: Vec<String>,
    /// Remove the shared memory segment with this key.
    #[arg(short = 'M', long = "shmem-key", value_name = "KEY")]
    shm_keys: Vec<String>,
    /// Remove the message queue with this id.
    #[arg(short = 'q', long = "queue-id", value_name = "ID")]
    msg_ids: Vec<String>,
    /// Remove the message queue with this key.
    #[arg(short = 'Q', long = "queue-key", value_name = "KEY")]
    msg_keys: Vec<String>,
    /// Remove the semaphore set with this id.
    #[arg(short = 's', long = "semaphore-id", value_name = "ID")]
    sem_ids: Vec<String>,
    /// Remove the semaphore set with this key.
    #[arg(short = 'S', long = "semaphore-key", value_name = "KEY")]
    sem_keys: Vec<String>,
    /// Remove every object (of one type: shm, msg or sem).
    #[arg(short = 'a', long = "all", value_name = "TYPE", num_args = 0..=1, default_missing_value = "all")]
    all: Option<String>,
}

#[derive(Args)]
struct RunArgs {
    /// The daemon's socket; one is started there if none answers (default: a private daemon).
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// With --socket: if the socket file is there but no daemon answers (it died), start an
    /// empty daemon there instead of failing.
    #[arg(long)]
    restart: bool,
    /// Route file locks (fcntl, flock, lockf) to the daemon too.
    #[arg(long)]
    locks: bool,
    /// Serve POSIX timers (timer_create and friends) in the program's own processes, not in
    /// the kernel (without it those calls reach the kernel unchanged).
    #[arg(long)]
    timers: bool,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    argv: Vec<String>,
}

#[derive(Args)]
struct ServeArgs {
    /// The socket (default: $XDG_RUNTIME_DIR/uipc/socket, /run/uipc/socket for root).
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// Let other users connect (socket mode 0666); their calls are still judged by their ids.
    #[arg(long)]
    shared: bool,
    /// Serve only the descendants of this process, whatever their uid, and this user: the
    /// private daemon of a `uipc run` (socket mode 0666 in a directory others can only
    /// traverse).
    #[arg(long, value_name = "PID", hide = true)]
    private_to: Option<i32>,
    /// Restore the namespace from this file at start (if it exists) and save it there on
    /// SIGTERM, SIGINT or SIGHUP: same ids, keys, owners, values, messages and contents.
    #[arg(long, value_name = "PATH")]
    state: Option<std::path::PathBuf>,
    /// With --state: if the file is damaged (truncated, changed, another version), move it
    /// aside to FILE.damaged and start empty instead of refusing to start.
    #[arg(long, requires = "state")]
    state_discard_damaged: bool,
}

fn serve(args: ServeArgs) -> ExitCode {
    let opts = uipc_server::Options {
        socket: args.socket.unwrap_or_else(uipc_server::default_socket_path),
        shared: args.shared,
        private_to: args.private_to,
        state: args.state,
        state_discard_damaged: args.state_discard_damaged,
    };
    let run = uipc_server::run_until_signalled(&opts);
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uipc serve: {}: {e}", opts.socket.display());
            ExitCode::from(2)
        }
    }
}

/// Commands that print a report end quietly when their reader goes away (`uipc bench | head`),
/// as C tools do: SIGPIPE back to its default action. The daemon and `uipc run` keep Rust's
/// ignored SIGPIPE, so a client that hangs up cannot kill them.
fn die_quietly_on_sigpipe() {
    // SAFETY: installs the default disposition for one signal before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The daemon and the benchmark keep the heap memory they free for their next allocations.
///
/// glibc's malloc hands freed memory at the top of its heap back to the kernel once more than
/// a threshold is free (and adapts that threshold and its mmap threshold as big blocks come and
/// go): a namespace that frees 31900 sets and makes them again then takes a page fault for
/// every 4 KiB it touches, a cost of the kernel's page-fault path, not of uipc's tables (in a
/// VM it doubled the time of a 31900-set `semget` loop). A long-running daemon, like the
/// kernel's slab caches, should keep such memory: fixed thresholds (which also stop glibc's
/// adaptation) of 32 MiB for mmap and 512 MiB for trimming. Other C libraries keep their own
/// policy.
fn keep_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets two of malloc's tunables; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

impl Command {
    /// The daemon and the benchmark (see [`keep_freed_heap`]).
    fn keeps_freed_heap(&self) -> bool {
        match self {
            #[cfg(feature = "bench")]
            Command::Bench(_) => true,
            Command::Serve(_) => true,
            _ => false,
        }
    }

    /// The commands that print a report (see [`die_quietly_on_sigpipe`]).
    fn prints_a_report(&self) -> bool {
        match self {
            #[cfg(feature = "bench")]
            Command::Bench(_) => true,
            Command::Locks(_) | Command::Ipcs(_) | Command::Ipcrm(_) => true,
            _ => false,
        }
    }
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    if command.keeps_freed_heap() {
        keep_freed_heap();
    }
    if command.prints_a_report() {
        die_quietly_on_sigpipe();
    }
    match command {
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::bench(args),
        #[cfg(feature = "bench")]
        Command::BenchChild { args } => bench::child(&args),
        #[cfg(feature = "conform")]
        Command::Conform { what } => conform::conform(what),
        Command::Serve(args) => serve(args),
        Command::Run(args) => run::run(
            args.socket,
            args.restart,
            args.locks,
            args.timers,
            &args.argv,
        ),
        Command::Locks(a) => locks::locks(a.socket, a.pid, !a.noheadings),
        Command::Ipcs(a) => {
            let any = a.queues || a.shmems || a.semaphores;
            // With -i, no resource option means none (util-linux refuses it).
            let default = !any && a.id.is_none();
            let t = ipcs::Types {
                msg: a.all || default || a.queues,
                shm: a.all || default || a.shmems,
                sem: a.all || default || a.semaphores,
            };
            let format = match (a.time, a.pid, a.creator, a.limits, a.summary) {
                (true, ..) => ipcs::Format::Time,
                (_, true, ..) => ipcs::Format::Pid,
                (_, _, true, ..) => ipcs::Format::Creator,
                (_, _, _, true, _) => ipcs::Format::Limits,
                (.., true) => ipcs::Format::Status,
                _ => ipcs::Format::Default,
            };
            let unit = match (a.human, a.bytes) {
                (true, _) => ipcs::Unit::Human,
                (_, true) => ipcs::Unit::Bytes,
                _ => ipcs::Unit::Default,
            };
            let ask = ipcs::Ask {
                types: t,
                format,
                unit,
                id: a.id,
            };
            ipcs::ipcs(a.socket, ask)
        }
        Command::Ipcrm(a) => {
            let all = match a.all.as_deref() {
                None => None,
                Some(which @ ("all" | "msg" | "shm" | "sem")) => Some(ipcs::Types {
                    msg: matches!(which, "all" | "msg"),
                    shm: matches!(which, "all" | "shm"),
                    sem: matches!(which, "all" | "sem"),
                }),
                Some(other) => {
                    eprintln!("uipc ipcrm: unknown type {other:?} (shm, msg or sem)");
                    return ExitCode::from(2);
                }
            };
            ipcrm::ipcrm(
                a.socket,
                ipcrm::Removals {
                    msg_ids: a.msg_ids,
                    msg_keys: a.msg_keys,
                    shm_ids: a.shm_ids,
                    shm_keys: a.shm_keys,
                    sem_ids: a.sem_ids,
                    sem_keys: a.sem_keys,
                    all,
                },
            )
        }
    }
}
