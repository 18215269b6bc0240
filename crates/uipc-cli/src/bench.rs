//! `uipc bench` and the hidden `uipc bench-child` (cargo feature `bench`, on by default):
//! the seeds' benchmarks of `uipc-bench`, printed as tables, optionally as JSON and SVG.

use clap::Args;
use std::process::ExitCode;

#[derive(Args)]
pub struct BenchArgs {
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

pub fn bench(args: BenchArgs) -> ExitCode {
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

/// `uipc bench-child`: the program `uipc bench shim` runs natively and under `uipc run`.
pub fn child(args: &[String]) -> ExitCode {
    ExitCode::from(uipc_bench::scenarios::shim::child_main(args) as u8)
}
