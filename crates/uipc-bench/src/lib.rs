//! `uipc bench`: each seed's benchmark reproduced on uipc's engine, beside the design the seed
//! replaced ("before", kept in [`before`] only to compare against) and the host kernel doing the
//! same work through real system calls, side by side in one run.
//!
//! Every cell is the median of `--runs` repetitions, with the standard deviation beside it; the
//! tables are laid out like the seeds' own (rows of sizes, columns of implementations).

pub mod before;
pub mod chart;
pub mod kernel;
pub mod machine;
pub mod report;
pub mod runner;
pub mod scenarios;

use report::Table;
pub use runner::{Bench, Options};

/// A scenario's name, what it reproduces, and the function that runs it.
pub struct Scenario {
    /// The name given to `uipc bench`.
    pub name: &'static str,
    /// One line on what it reproduces.
    pub about: &'static str,
    /// Runs it, returning its tables.
    pub run: fn(&Bench) -> Vec<Table>,
}

/// Every scenario, in `uipc bench all` order.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "ipc-keys",
            about: "seeds 000/003: semget over many keys, create and lookup, one process or one per call",
            run: scenarios::ipc_keys::run,
        },
        Scenario {
            name: "ipc-idcycle",
            about: "seed 002: no-op semop on two ids at growing index distance; id reuse",
            run: scenarios::ipc_idcycle::run,
        },
        Scenario {
            name: "lockperf",
            about: "seed 001: posix01/02, flock01/02: N tasks lock and unlock one file or their own, M times",
            run: scenarios::lockperf::run,
        },
        Scenario {
            name: "timers",
            about: "seed 004: timer tables (uipc, seed 004, mainline, xarray) and whole calls against the kernel",
            run: scenarios::timers::run,
        },
        Scenario {
            name: "peers",
            about: "uipc's id and key tables beside dashmap and scc, from every core",
            run: scenarios::peers::run,
        },
        Scenario {
            name: "shim",
            about: "calls through `uipc run` (preload + daemon) against the kernel; semop throughput of N processes",
            run: scenarios::shim::run,
        },
    ]
}
