//! `uipc`: the one command. Subcommands dispatch to the library crates.

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
    /// Run random operations on the host kernel and on the engine and compare the results.
    Conform {
        #[command(subcommand)]
        what: ConformWhat,
    },
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

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Conform { what } => conform(what),
    }
}
