//! `uipc conform` (cargo feature `conform`, on by default): the differential runs of
//! `uipc-conform` against the host kernel.

use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ConformWhat {
    /// SysV semaphores, message queues and shared memory.
    Ipc(ConformArgs),
    /// POSIX record locks, OFD locks and flock.
    Locks(ConformArgs),
    /// POSIX timers.
    Timers(ConformArgs),
}

#[derive(Args)]
pub struct ConformArgs {
    /// How many random operations to run.
    #[arg(long, default_value_t = 2000)]
    ops: u64,
    /// Seed of the random operations (the same seed replays the same run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print every operation, not only divergences.
    #[arg(long, short)]
    verbose: bool,
    /// `ipc` only: run the seed natively and under `uipc run` (this binary and the library
    /// beside it), each also against the engine, and compare the kernel's results with those
    /// of the library and daemon call by call.
    #[arg(long)]
    through_run: bool,
    /// `ipc` only: write every comparison's host result to FILE (what --through-run compares).
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
}

type ConformRun = fn(&uipc_conform::Options) -> Result<uipc_conform::Report, String>;

pub fn conform(what: ConformWhat) -> ExitCode {
    let (run, args): (ConformRun, ConformArgs) = match what {
        ConformWhat::Ipc(a) if a.through_run && a.trace.is_some() => {
            return usage("--through-run writes its own traces: no --trace with it")
        }
        ConformWhat::Ipc(a) if a.through_run => (through_run, a),
        ConformWhat::Ipc(a) => (uipc_conform::ipc::run, a),
        ConformWhat::Locks(a) | ConformWhat::Timers(a) if a.through_run || a.trace.is_some() => {
            return usage("--through-run and --trace are for `uipc conform ipc` only")
        }
        ConformWhat::Locks(a) => (uipc_conform::locks::run, a),
        ConformWhat::Timers(a) => (uipc_conform::timers::run, a),
    };
    let opts = uipc_conform::Options {
        ops: args.ops,
        seed: args.seed,
        verbose: args.verbose,
        trace: args.trace,
    };
    match run(&opts) {
        Ok(report) => {
            // --through-run printed its divergences as it found them.
            if !args.through_run {
                for d in &report.divergences {
                    println!("{d}");
                }
            }
            if args.through_run {
                print!("the kernel against uipc run: ");
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

/// `uipc conform ipc --through-run`, with this binary as the `uipc` to run under.
fn through_run(opts: &uipc_conform::Options) -> Result<uipc_conform::Report, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the uipc binary: {e}"))?;
    uipc_conform::ipc::trace::through_run(opts, &exe)
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("uipc conform: {msg}");
    ExitCode::from(2)
}
