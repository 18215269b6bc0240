//! `uipc bench shim`: what a program pays for a call through `uipc run` (the preload library,
//! the socket to the daemon and back) against the same call on the host kernel.
//!
//! The calls are made by a child program, the `uipc` binary's hidden `bench-child` command,
//! run natively and under `uipc run --locks --timers` in alternating rounds (native, then
//! uipc, each round), so that a stretch of noise from other tenants of a shared machine falls
//! on both columns alike. The child times only its loops (not its start, nor the daemon's),
//! and reports nanoseconds per call; each cell is the median over the rounds.
//!
//! Tables:
//! - "calls through `uipc run`": one row per call (`calls::CALLS`), ns per call (per pair or
//!   round trip where the row says so); the ratio column is uipc / kernel (how many times
//!   slower the call is through `uipc run`).
//! - "semop throughput": N processes (1, 2, 4, 8, 16) each doing semop on a set of its own, or
//!   all on one shared set; total semops per millisecond; the ratio is the share of the
//!   kernel's throughput that `uipc run` reaches.

mod calls;
mod throughput;

use crate::report::Table;
use crate::Bench;
use std::collections::HashMap;
use std::process::{Command, Stdio};

const PROCS: [usize; 5] = [1, 2, 4, 8, 16];

/// The child program's entry point (`uipc bench-child ...`): prints one line per row,
/// `name<TAB>value`, the value `-` when a call failed. Returns the exit status.
pub fn child_main(args: &[String]) -> i32 {
    let iters = |i: usize| args.get(i).and_then(|s| s.parse::<u32>().ok());
    match (args.first().map(String::as_str), iters(1)) {
        (Some("calls"), Some(n)) => {
            for c in calls::CALLS {
                // Round trips between two processes cost a few calls and two switches each.
                let n = if c.name.contains("ping-pong") {
                    (n / 4).max(1)
                } else {
                    n
                };
                println!("{}\t{}", c.name, show((c.measure)(n)));
            }
            0
        }
        (Some("throughput"), Some(n)) => {
            for procs in PROCS {
                for shared in [false, true] {
                    let v = throughput::semop_throughput(procs, shared, n);
                    println!("{}\t{}", tput_row(procs, shared), show(v));
                }
            }
            0
        }
        (Some("lockperf"), _) => super::lockperf_more::child_main(&args[1..]),
        _ => {
            eprintln!("usage: uipc bench-child calls ITERS | throughput ITERS | lockperf ...");
            2
        }
    }
}

fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v}"))
}

fn tput_row(procs: usize, shared: bool) -> String {
    format!("{procs} {}", if shared { "shared set" } else { "own sets" })
}

/// Runs the child with `args`, natively or under `uipc run`; its rows, or why it failed.
pub(crate) fn child(
    under_uipc: bool,
    args: &[String],
) -> Result<Vec<(String, Option<f64>)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the uipc binary: {e}"))?;
    let mut cmd = Command::new(&exe);
    if under_uipc {
        // The child keeps its uid: where the library sits does not matter to it.
        cmd.args(["run", "--locks", "--timers", "--"])
            .arg(&exe)
            .env("UIPC_NO_REACH_WARNING", "1");
    }
    cmd.arg("bench-child").args(args);
    // Natively: no preload inherited; under `uipc run`: a private daemon of its own.
    for v in ["LD_PRELOAD", "UIPC_SOCKET", "UIPC_LOCKS", "UIPC_TIMERS"] {
        cmd.env_remove(v);
    }
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("the child program failed ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, v) = l.split_once('\t')?;
            Some((name.to_string(), v.parse::<f64>().ok()))
        })
        .collect())
}

/// Values per (row, column) over the rounds, and the notes on what failed.
#[derive(Default)]
struct Collected {
    cells: HashMap<(String, &'static str), Vec<f64>>,
    notes: Vec<String>,
}

impl Collected {
    fn round(&mut self, col: &'static str, rows: Result<Vec<(String, Option<f64>)>, String>) {
        match rows {
            Ok(rows) => {
                for (name, v) in rows {
                    match v {
                        Some(v) => self.cells.entry((name, col)).or_default().push(v),
                        None => self.note(format!("{col}: {name} failed in a round")),
                    }
                }
            }
            Err(e) => self.note(format!("{col}: {e}")),
        }
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// Fills `t`'s rows `names`, a cell only when every round measured it.
    fn fill(&self, t: &mut Table, names: &[String], runs: usize) {
        for name in names {
            t.params.push(name.clone());
            for col in ["kernel", "uipc"] {
                match self.cells.get(&(name.clone(), col)) {
                    Some(v) if v.len() == runs => t.add(name, col, v),
                    _ => {}
                }
            }
        }
        t.absent.extend(self.notes.iter().cloned());
    }
}

/// Runs the scenario.
pub fn run(b: &Bench) -> Vec<Table> {
    let runs = b.opts.runs;
    let (iters, tput_iters) = if b.opts.quick {
        (200, 40)
    } else {
        (20_000, 2_000)
    };
    b.plan("shim", (runs * 4) as u64);
    let (mut per_call, mut tput) = (Collected::default(), Collected::default());
    for _ in 0..runs {
        for (col, under) in [("kernel", false), ("uipc", true)] {
            per_call.round(col, child(under, &["calls".into(), iters.to_string()]));
            b.step(&format!("calls, {col}"));
        }
        for (col, under) in [("kernel", false), ("uipc", true)] {
            tput.round(
                col,
                child(under, &["throughput".into(), tput_iters.to_string()]),
            );
            b.step(&format!("throughput, {col}"));
        }
    }
    let mut t1 = Table::new(
        "calls through `uipc run` (--locks --timers)",
        "call",
        "ns per call",
        &["kernel", "uipc"],
    )
    .uipc_over_kernel();
    let names: Vec<String> = calls::CALLS.iter().map(|c| c.name.to_string()).collect();
    per_call.fill(&mut t1, &names, runs);
    let mut t2 = Table::new(
        &format!("semop throughput, {tput_iters} semops per process"),
        "processes",
        "semops per ms",
        &["kernel", "uipc"],
    )
    .uipc_over_kernel();
    let names: Vec<String> = PROCS
        .iter()
        .flat_map(|&p| [tput_row(p, false), tput_row(p, true)])
        .collect();
    tput.fill(&mut t2, &names, runs);
    vec![t1, t2]
}
