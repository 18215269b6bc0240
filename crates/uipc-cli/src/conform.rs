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
}

type ConformRun = fn(&uipc_conform::Options) -> Result<uipc_conform::Report, String>;

pub fn conform(what: ConformWhat) -> ExitCode {
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
