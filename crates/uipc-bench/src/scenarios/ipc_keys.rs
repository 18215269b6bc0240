//! Seeds 000/003: `semget(k++, 1, IPC_CREAT|0600)` loops over KEYS keys, total microseconds.
//!
//! Four tables as in the seed: a create loop, a lookup loop over the same keys, and both again
//! with every call made by a different process. On the kernel the per-process tables fork one
//! child per call and time only the call inside it, as the seed did; on uipc and "before" every
//! call carries a different caller identity (pid), which is what a process is to the engine.
//! The in-process designs make each timed run in a child process of their own, after untimed
//! warm-up runs (`isolated`); the implementations' runs alternate ([`Bench::rounds`]).

use crate::before::linear_keys::LinearSemRegistry;
use crate::report::Table;
use crate::{kernel, Bench};
use std::time::Instant;
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno};

const FLAG: i32 = 0o1000 | 0o600;
const KEY_BASE: i32 = 0x1000_0000;

fn sizes(quick: bool) -> &'static [i32] {
    if quick {
        &[1, 10, 100, 1000]
    } else {
        &[1, 10, 32, 100, 1000, 10000, 31900]
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Create,
    Lookup,
}

/// Times `n` calls of `call(i)` in one loop, microseconds.
fn time_loop(n: i32, mut call: impl FnMut(i32)) -> f64 {
    let t0 = Instant::now();
    for i in 0..n {
        call(i);
    }
    t0.elapsed().as_secs_f64() * 1e6
}

/// `n` semgets of keys `KEY_BASE..` on one design (`semget` with the caller and the key), by
/// one process or by `n` processes; for [`Phase::Lookup`] the sets are made first, untimed.
fn semget_run(
    n: i32,
    per_process: bool,
    phase: Phase,
    semget: impl Fn(&Cred, i32) -> Result<i32, Errno>,
) -> f64 {
    // One process passes its one identity by reference, as an embedder does; a process per
    // call builds each caller's (the kernel's rows fork a process per call).
    let root = Cred::root(1000);
    let work = |i: i32| {
        let own;
        let cred = if per_process {
            own = Cred::root(1000 + i);
            &own
        } else {
            &root
        };
        semget(cred, KEY_BASE + i).expect("semget");
    };
    if phase == Phase::Lookup {
        (0..n).for_each(work);
    }
    time_loop(n, work)
}

fn uipc_run(n: i32, per_process: bool, phase: Phase) -> f64 {
    let ns = IpcNamespace::new();
    semget_run(n, per_process, phase, |cred, key| {
        ns.semget(cred, key, 1, FLAG)
    })
}

fn before_run(n: i32, per_process: bool, phase: Phase) -> f64 {
    let reg = LinearSemRegistry::new();
    semget_run(n, per_process, phase, |cred, key| {
        reg.semget(cred, key, 1, FLAG)
    })
}

/// Untimed runs before the timed one, in its process ([`isolated`]).
const WARM_UPS: usize = 2;

/// One timed run of an in-process design, made in a forked child ([`kernel::in_child`]) after
/// [`WARM_UPS`] untimed runs of the same work there. Every run so starts from this process's
/// heap as it was, and no column's work shapes another's heap: in one shared heap a "before"
/// run between two uipc runs left uipc's next creates 20% and its lookups 80% slower. The
/// warm-up runs let
/// the timed run (even a single one) find the heap's pages mapped instead of faulting in a
/// fresh page every few dozen sets, as the kernel's sets come from slab caches the smaller
/// rows have warmed; in a process that repeats 31900 creates, the first run took three times
/// as long as the third and the second still 10-15% longer, while malloc's free lists settle.
/// The `uipc` binary keeps freed heap memory for reuse (see its `keep_freed_heap`), without
/// which every run would start cold again. NaN if the child failed.
fn isolated(run: impl Fn() -> f64) -> f64 {
    kernel::in_child(|| {
        (0..WARM_UPS).for_each(|_| {
            run();
        });
        Some(run())
    })
    .unwrap_or(f64::NAN)
}

fn host_semget(key: i32) -> bool {
    // SAFETY: integer arguments only.
    unsafe { libc::semget(key, 1, FLAG) >= 0 }
}

fn kernel_run(n: i32, per_process: bool, phase: Phase) -> Option<f64> {
    kernel::remove_all_sem_sets();
    if phase == Phase::Lookup {
        for i in 0..n {
            host_semget(KEY_BASE + i).then_some(())?;
        }
    }
    let total = if per_process {
        let mut sum = 0.0;
        for i in 0..n {
            sum += kernel::time_in_child(|| host_semget(KEY_BASE + i))?;
        }
        sum
    } else {
        let mut ok = true;
        let t = time_loop(n, |i| ok &= host_semget(KEY_BASE + i));
        ok.then_some(t)?
    };
    kernel::remove_all_sem_sets();
    Some(total)
}

/// Runs the scenario.
pub fn run(b: &Bench) -> Vec<Table> {
    let kernel_ok = kernel::private_ipc_namespace();
    let sizes = sizes(b.opts.quick);
    let tables = [
        ("create loop", false, Phase::Create),
        ("lookup loop", false, Phase::Lookup),
        ("create, a process per call", true, Phase::Create),
        ("lookup, a process per call", true, Phase::Lookup),
    ];
    b.plan(
        "ipc-keys",
        (tables.len() * sizes.len() * 3 * b.opts.runs) as u64,
    );
    let mut out = Vec::new();
    for (title, per_process, phase) in tables {
        let mut t = Table::new(title, "keys", "µs total", &["uipc", "before", "kernel"]);
        for &n in sizes {
            let p = n.to_string();
            let mut uipc = || isolated(|| uipc_run(n, per_process, phase));
            let mut before = || isolated(|| before_run(n, per_process, phase));
            let mut kernel = || kernel_run(n, per_process, phase).unwrap_or(f64::NAN);
            // The kernel's loop leaves work behind (its key table's deferred resize, the RCU
            // frees of 31900 removed sets) that ran during a uipc run following it: with the
            // order uipc, before, kernel, uipc's 31900 creates took 3.6-6.1 ms, with this one
            // 2.8-3.2 ms, in one run each. The slow "before" run now absorbs it.
            let mut impls: Vec<(&str, &mut dyn FnMut() -> f64)> = vec![("uipc", &mut uipc)];
            if kernel_ok {
                impls.push(("kernel", &mut kernel));
            }
            impls.push(("before", &mut before));
            for name in b.rounds(&mut t, &p, &mut impls) {
                t.absent.push(format!(
                    "{name}, {n} keys: a run failed (for the kernel: limits of this host?)"
                ));
            }
        }
        if !kernel_ok {
            t.absent
                .push("kernel: needs root to run in a private IPC namespace (unshare)".into());
        }
        out.push(t);
    }
    out
}
