//! `uipc`: the one command. Subcommands dispatch to the library crates.

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
    Bench(BenchArgs),
    /// Run random operations on the host kernel and on the engine and compare the results.
    Conform {
        #[command(subcommand)]
        what: ConformWhat,
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

#[derive(Subcommand)]
enum ConformWhat {
    /// SysV semaphores, message queues and shared memory.
    Ipc(ConformArgs),
    /// POSIX record locks, OFD locks and flock.
    Locks(ConformArgs),
    /// POSIX timers.
    Timers(ConformArgs),
}

#[derive(Args)]
struct BenchArgs {
    /// Which scenario: ipc-keys, ipc-idcycle, ... or `all`.
    scenario: String,
    /// Repeat each cell this many times and report the median.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Smaller sizes, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Also write machine-readable results here.
    #[arg(long, value_name = "PATH")]
    json: Option<std::path::PathBuf>,
    /// Also draw each table as an SVG chart in this directory.
    #[arg(long, value_name = "DIR")]
    svg: Option<std::path::PathBuf>,
    /// Fail (exit 1) if a table lacks a cell it promises and no note says why (a smoke test of
    /// the scenarios, not of their timings).
    #[arg(long)]
    check: bool,
}

#[derive(Args)]
struct ConformArgs {
    /// How many random operations to run.
    #[arg(long, default_value_t = 2000)]
    ops: u64,
    /// Seed of the random operations (the same seed replays the same run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print every operation, not only divergences.
    #[arg(long, short)]
    verbose: bool,
}

type ConformRun = fn(&uipc_conform::Options) -> Result<uipc_conform::Report, String>;

fn conform(what: ConformWhat) -> ExitCode {
    let (run, args): (ConformRun, ConformArgs) = match what {
        ConformWhat::Ipc(a) => (uipc_conform::ipc::run, a),
        ConformWhat::Locks(a) => (uipc_conform::locks::run, a),
        ConformWhat::Timers(a) => (uipc_conform::timers::run, a),
    };
    let opts = uipc_conform::Options {
        ops: args.ops,
        seed: args.seed,
        verbose: args.verbose,
    };
    match run(&opts) {
        Ok(report) => {
            for d in &report.divergences {
                println!("{d}");
            }
            println!("{}", report.summary());
            if report.divergences.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("uipc conform: {e}");
            ExitCode::from(2)
        }
    }
}

fn bench(args: BenchArgs) -> ExitCode {
    let all = uipc_bench::scenarios();
    let chosen: Vec<_> = all
        .iter()
        .filter(|s| args.scenario == "all" || s.name == args.scenario)
        .collect();
    if chosen.is_empty() {
        eprintln!(
            "uipc bench: no scenario {:?}; choose one of:",
            args.scenario
        );
        for s in &all {
            eprintln!("  {:<12} {}", s.name, s.about);
        }
        eprintln!("  {:<12} every scenario above", "all");
        return ExitCode::from(2);
    }
    let machine = uipc_bench::machine::Machine::detect();
    let runs = args.runs.max(1);
    println!("machine: {machine}");
    let cells = if runs == 1 {
        "one run (single runs are noisy: --runs K reports medians)".to_string()
    } else {
        format!("median of {runs} runs ± standard deviation")
    };
    println!(
        "each cell: {cells}{}\n",
        if args.quick { ", --quick sizes" } else { "" }
    );
    let b = uipc_bench::Bench::new(uipc_bench::Options {
        runs,
        quick: args.quick,
    });
    let mut json_rows = Vec::new();
    let mut unexplained = Vec::new();
    for s in chosen {
        let tables = (s.run)(&b);
        b.finish();
        println!("== {}: {}\n", s.name, s.about);
        for t in &tables {
            println!("{}", t.render());
            // Each row says its scenario too, so `bench all` output can be told apart.
            json_rows.extend(t.rows.iter().map(|r| {
                let mut v = serde_json::to_value(r).expect("serializable");
                v["scenario"] = serde_json::Value::from(s.name);
                v
            }));
            if !t.complete_or_explained() {
                unexplained.extend(t.missing_cells());
            }
            if let Some(dir) = &args.svg {
                let stem = uipc_bench::chart::file_stem(s.name, &t.title);
                if let Err(e) = uipc_bench::chart::draw(t, dir, &stem) {
                    eprintln!("uipc bench: chart {stem}: {e}");
                }
            }
        }
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({ "scenario": args.scenario, "machine": machine, "runs": runs, "quick": args.quick, "rows": json_rows });
        if let Err(e) = std::fs::write(
            path,
            serde_json::to_string_pretty(&doc).expect("serializable"),
        ) {
            eprintln!("uipc bench: {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if args.check {
        if unexplained.is_empty() {
            println!("check: every table has every cell it promises, or says why not");
        } else {
            for m in &unexplained {
                eprintln!("check: missing cell without a note: {m}");
            }
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
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

fn main() -> ExitCode {
    let command = Cli::parse().command;
    if matches!(command, Command::Bench(_) | Command::Serve(_)) {
        keep_freed_heap();
    }
    if matches!(
        command,
        Command::Bench(_) | Command::Locks(_) | Command::Ipcs(_) | Command::Ipcrm(_)
    ) {
        die_quietly_on_sigpipe();
    }
    match command {
        Command::Bench(args) => bench(args),
        Command::BenchChild { args } => {
            ExitCode::from(uipc_bench::scenarios::shim::child_main(&args) as u8)
        }
        Command::Conform { what } => conform(what),
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
                Some("all") => Some(ipcs::Types {
                    msg: true,
                    shm: true,
                    sem: true,
                }),
                Some("shm") => Some(ipcs::Types {
                    msg: false,
                    shm: true,
                    sem: false,
                }),
                Some("msg") => Some(ipcs::Types {
                    msg: true,
                    shm: false,
                    sem: false,
                }),
                Some("sem") => Some(ipcs::Types {
                    msg: false,
                    shm: false,
                    sem: true,
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
