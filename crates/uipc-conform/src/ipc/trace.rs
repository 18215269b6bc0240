//! Traces of a run, and `uipc conform ipc --through-run`: the host kernel against the preload
//! library and the daemon.
//!
//! A run given a trace file (`--trace FILE`) writes, besides comparing with the engine as
//! usual, one line per comparison: the operation's number, the operation and what the host
//! side gave (`index \t op \t result`). Under `uipc run` the "host" calls (libc's SysV IPC
//! functions, `syscall()` with their numbers, the `/proc/sysvipc` files and IPC sysctls) reach
//! the library and its daemon instead of the kernel, so two traces of one seed, one made
//! natively and one under `uipc run`, compare the kernel with the library and daemon call by
//! call: return values, errnos, the `*_STAT` fields and `ipc_perm`, values, messages, and the
//! `/proc/sysvipc` state, with times reduced as the steps reduce them.
//!
//! Normalized in a trace: process ids, which differ between the two runs. The run's own pid is
//! written `pid0` and each forked child's `pid1`, `pid2`, ... in order of fork, where a pid can
//! stand ([`Pids`]: after `child ` in an operation; in a result, the fields named `...pid`, or
//! what the step says: a GETPID value, the pid of each (value, pid) pair, the pid columns of a
//! `/proc/sysvipc` file), so that a value that happens to equal a pid stays a value. Ids are
//! compared as they are: both
//! runs start in a fresh IPC namespace (the run's own `unshare`, which under `uipc run` the
//! library turns into a new namespace of the daemon's), where Linux and uipc hand out the same
//! ids. The first line says whether the process had the library loaded and a daemon to talk
//! to (`#routed yes`); the last gives the run's own summary.
//!
//! [`through_run`] runs the seed twice, each in a child process: natively, and under `uipc run`
//! with the given `uipc` binary (which takes the library beside it: the current build's) and
//! the semaphore fast path on unless `UIPC_FASTPATH=0` is set. It requires the native trace
//! unrouted and the other routed, so that a run whose calls all reached the kernel cannot
//! pass, and compares the traces line by line. The generator's later draws depend on earlier
//! results, some of which steer it without being compared (a stat that prunes the live ids):
//! where the two runs drew different operations the comparison records that and stops.

use crate::{Divergence, Options, Report};
use std::path::Path;
use std::process::Command;

/// Where a result shows process ids (every stand-alone digit run equal to a noted pid there is
/// replaced by its name).
#[derive(Clone, Copy, Debug)]
pub enum Pids {
    /// Only in struct fields whose name ends in `pid` (`lspid: 123`).
    Fields,
    /// Anywhere (a GETPID result).
    All,
    /// The second of each pair (`[(1, 123), ...]`).
    Seconds,
    /// These whitespace-separated columns of each line (a `/proc/sysvipc` file).
    Columns(&'static [usize]),
}

/// The trace a run writes.
#[derive(Debug, Default)]
pub struct Trace {
    /// The run's own pid, then each forked child's.
    pids: Vec<i32>,
    text: String,
}

impl Trace {
    /// A trace for the process `pid`, starting with its routing line.
    pub fn new(pid: i32) -> Trace {
        let routed = std::env::var_os("UIPC_SOCKET").is_some()
            && std::fs::read_to_string("/proc/self/maps")
                .is_ok_and(|maps| maps.contains("libuipc_preload"));
        Trace {
            pids: vec![pid],
            text: format!("#routed {}\n", if routed { "yes" } else { "no" }),
        }
    }

    /// Notes a forked child's pid, named `pid<n>` from here on.
    pub fn note_pid(&mut self, pid: i32) {
        if !self.pids.contains(&pid) {
            self.pids.push(pid);
        }
    }

    /// Records one comparison: `host` is the host's result as `Debug` shows it.
    pub fn record(&mut self, index: u64, op: &str, host: &str, pids: Pids) {
        let op = self.normalize(op, |before, _| before.ends_with("child "));
        let host = match pids {
            Pids::Fields => self.normalize(host, |before, _| before.ends_with("pid: ")),
            Pids::All => self.normalize(host, |_, _| true),
            Pids::Seconds => self.normalize(host, |before, after| {
                before.ends_with(", ") && after.starts_with(')')
            }),
            // Debug shows the file's newlines as `\n`.
            Pids::Columns(cols) => host
                .split("\\n")
                .map(|line| {
                    line.split(' ')
                        .enumerate()
                        .map(|(i, c)| match c.parse::<i32>() {
                            Ok(n) if cols.contains(&i) => self.name(n),
                            _ => c.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("\\n"),
        };
        self.text
            .push_str(&format!("{index}\t{op}\t{host}").replace('\n', "\\n"));
        self.text.push('\n');
    }

    /// `pid<k>` for the k-th noted pid, else the number.
    fn name(&self, n: i32) -> String {
        match self.pids.iter().position(|&p| p == n) {
            Some(k) => format!("pid{k}"),
            None => n.to_string(),
        }
    }

    /// `text` with each stand-alone digit run that `at(text before it, text after it)` accepts
    /// named by [`Trace::name`].
    fn normalize(&self, text: &str, at: impl Fn(&str, &str) -> bool) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
            let end = rest[start..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len(), |e| start + e);
            let (before, digits, after) = (&rest[..start], &rest[start..end], &rest[end..]);
            out.push_str(before);
            match digits.parse::<i32>() {
                Ok(n) if at(&out, after) => out.push_str(&self.name(n)),
                _ => out.push_str(digits),
            }
            rest = after;
        }
        out.push_str(rest);
        out
    }

    /// Writes the trace with its summary line to `path`.
    pub fn save(&self, path: &Path, report: &Report) -> Result<(), String> {
        let text = format!(
            "{}#summary {} {}\n",
            self.text,
            report.operations,
            report.divergences.len()
        );
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// One child run's trace, parsed.
struct Run {
    routed: bool,
    /// (index, op, result) per comparison.
    lines: Vec<(String, String, String)>,
    /// The run's own count of divergences from the engine.
    engine_divergences: u64,
}

fn parse(text: &str) -> Run {
    let mut run = Run {
        routed: false,
        lines: Vec::new(),
        engine_divergences: 0,
    };
    for line in text.lines() {
        if let Some(r) = line.strip_prefix("#routed ") {
            run.routed = r == "yes";
        } else if let Some(s) = line.strip_prefix("#summary ") {
            run.engine_divergences = s
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else {
            let mut f = line.splitn(3, '\t').map(str::to_string);
            let (i, op, r) = (f.next(), f.next(), f.next());
            run.lines.push((
                i.unwrap_or_default(),
                op.unwrap_or_default(),
                r.unwrap_or_default(),
            ));
        }
    }
    run
}

/// The divergences between the kernel's trace and uipc's, up to the first operation the two
/// runs drew differently.
fn compare(kernel: &Run, uipc: &Run) -> Vec<Divergence> {
    let mut found = Vec::new();
    for (k, u) in kernel.lines.iter().zip(&uipc.lines) {
        let index = k.0.parse().unwrap_or(u64::MAX);
        if k.0 != u.0 || k.1 != u.1 {
            found.push(Divergence {
                index,
                op: "the runs drew different operations from here on (not compared further)".into(),
                host: format!("op {}: {}", k.0, k.1),
                engine: format!("op {}: {}", u.0, u.1),
            });
            return found;
        }
        if k.2 != u.2 {
            found.push(Divergence {
                index,
                op: k.1.clone(),
                host: k.2.clone(),
                engine: u.2.clone(),
            });
        }
    }
    if kernel.lines.len() != uipc.lines.len() {
        found.push(Divergence {
            index: u64::MAX,
            op: "the number of comparisons".into(),
            host: kernel.lines.len().to_string(),
            engine: uipc.lines.len().to_string(),
        });
    }
    found
}

/// Runs `uipc conform ipc` with `opts` and a trace, natively and under `uipc run` (both with the
/// binary `uipc`), and compares the traces. Prints each child's own output, then the
/// divergences between the kernel and uipc; the report holds those, plus one entry for each
/// child run that diverged from its engine.
pub fn through_run(opts: &Options, uipc: &Path) -> Result<Report, String> {
    let dir = std::env::temp_dir().join(format!("uipc-conform-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = through_run_in(opts, uipc, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn through_run_in(opts: &Options, uipc: &Path, dir: &Path) -> Result<Report, String> {
    let args = |trace: &Path| {
        let mut a: Vec<std::ffi::OsString> =
            ["conform", "ipc", "--ops"].iter().map(Into::into).collect();
        a.push(opts.ops.to_string().into());
        a.push("--seed".into());
        a.push(opts.seed.to_string().into());
        a.push("--trace".into());
        a.push(trace.into());
        if opts.verbose {
            a.push("--verbose".into());
        }
        a
    };
    let (native_trace, uipc_trace) = (dir.join("native"), dir.join("uipc"));
    println!("== natively: the kernel against the engine");
    let mut native = Command::new(uipc);
    native.args(args(&native_trace)).env_remove("UIPC_SOCKET");
    let kernel = run_child(native, &native_trace, "the native run")?;
    println!("== under uipc run: the library and daemon against the engine");
    let mut under = Command::new(uipc);
    under
        .arg("run")
        .arg("--")
        .arg(uipc)
        .args(args(&uipc_trace))
        .env_remove("UIPC_SOCKET")
        .env("UIPC_FASTPATH_STATS", "1");
    let ours = run_child(under, &uipc_trace, "the run under uipc run")?;
    if kernel.routed || !ours.routed {
        return Err(format!(
            "the native run {} the library, the run under uipc run {}: not a comparison of the \
             kernel with uipc",
            if kernel.routed { "used" } else { "did not use" },
            if ours.routed { "used it" } else { "did not" },
        ));
    }
    println!("== the kernel against uipc run");
    let mut report = Report {
        operations: opts.ops,
        divergences: compare(&kernel, &ours),
    };
    for d in &report.divergences {
        println!(
            "divergence at op {}: {}\n  kernel:   {}\n  uipc run: {}",
            d.index, d.op, d.host, d.engine
        );
    }
    for (run, name) in [(&kernel, "natively"), (&ours, "under uipc run")] {
        if run.engine_divergences > 0 {
            report.divergences.push(Divergence {
                index: u64::MAX,
                op: format!("the run {name} against the engine"),
                host: format!("{} divergences (above)", run.engine_divergences),
                engine: String::new(),
            });
        }
    }
    Ok(report)
}

/// Runs one child to its end and reads its trace. Its output is passed on (after its end),
/// except the library's fast-path count on stderr, which is summarized.
fn run_child(mut cmd: Command, trace: &Path, name: &str) -> Result<Run, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines() {
        match line.strip_prefix("uipc fastpath: ") {
            Some(n) => println!(
                "semaphore fast path: {} calls",
                n.trim_end_matches(" calls").parse::<u64>().unwrap_or(0)
            ),
            None => eprintln!("{line}"),
        }
    }
    // Exit status 1 is a run that found divergences from its engine (in its trace's summary).
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(format!("{name} failed: {}", out.status));
    }
    let text = std::fs::read_to_string(trace)
        .map_err(|e| format!("{name} left no trace ({}): {e}", trace.display()))?;
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_named_where_they_stand() {
        let mut t = Trace {
            pids: vec![1234],
            text: String::new(),
        };
        t.note_pid(77);
        let line = |t: &mut Trace, op: &str, host: &str, pids| {
            t.text.clear();
            t.record(0, op, host, pids);
            t.text.clone()
        };
        assert_eq!(
            line(
                &mut t,
                "child 77: semop(1234)",
                "Ds { cbytes: 77, lspid: 1234, x: 77 }",
                Pids::Fields
            ),
            "0\tchild pid1: semop(1234)\tDs { cbytes: 77, lspid: pid0, x: 77 }\n"
        );
        assert_eq!(
            line(&mut t, "GETPID", "Ok(771)", Pids::All),
            "0\tGETPID\tOk(771)\n"
        );
        assert_eq!(
            line(&mut t, "GETPID", "Ok(77)", Pids::All),
            "0\tGETPID\tOk(pid1)\n"
        );
        assert_eq!(
            line(&mut t, "v", "[(77, 77), (1234, 0)]", Pids::Seconds),
            "0\tv\t[(77, pid1), (1234, 0)]\n"
        );
        assert_eq!(
            line(
                &mut t,
                "proc",
                "\"k a b c\\n77 1234 77 9\"",
                Pids::Columns(&[1, 2])
            ),
            "0\tproc\t\"k a b c\\n77 pid0 pid1 9\"\n"
        );
    }

    #[test]
    fn compare_finds_results_and_stops_at_other_operations() {
        let a = parse("#routed no\n0\top a\tOk(1)\n1\top b\tOk(2)\n2\top c\tOk(3)\n#summary 3 0\n");
        let b = parse("#routed yes\n0\top a\tOk(1)\n1\top b\tErr(EACCES)\n2\top d\tOk(3)\n");
        assert!(!a.routed && b.routed);
        let d = compare(&a, &b);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].index, d[0].host.as_str()), (1, "Ok(2)"));
        assert_eq!(d[0].engine, "Err(EACCES)");
        assert!(d[1].op.contains("different operations"));
        assert!(compare(&a, &a).is_empty());
    }
}
