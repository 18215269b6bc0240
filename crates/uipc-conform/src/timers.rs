//! `uipc conform timers`: random timer_create / timer_delete / timer_settime / timer_gettime /
//! timer_getoverrun / prctl(PR_TIMER_CREATE_RESTORE_IDS) calls, made on the host kernel and on
//! the engine, results compared.
//!
//! The run happens in a forked child, so the host hands out ids from 0 and every host timer dies
//! with it. The child:
//! - blocks every signal, so no timer signal kills it and signals stay pending until the run
//!   takes them with `rt_sigtimedwait` (the engine's queued signals sit in a `SignalQueue`);
//! - uses the raw syscalls (kernel ids, not glibc's `timer_t` objects for SIGEV_THREAD);
//! - switches to a real uid of its own (the RLIMIT_SIGPENDING count is per uid, host-wide), sets
//!   its limit to that uid's count (`SigQ`, normally 0) plus 24 and pre-charges the engine with
//!   the count, so EAGAIN from the limit is compared too;
//! - runs the engine on the host's clocks (`SystemClock`) and calls `run_expired` before each
//!   engine call, so timers that expired on the host have expired on the engine.
//!
//! Compared: ids and errnos exactly; `it_interval` exactly; `it_value` within 50 ms (both sides
//! read the clock at slightly different moments). Timers are armed far in the future,
//! disarmed, or in the past (they fire at once and their signal stays pending), which is
//! deterministic. Signals are taken on both sides (`rt_sigtimedwait` for one signal number on
//! the host, the same selection over the engine's queued signals, see `deliver`), and one
//! operation arms a timer 1 ms ahead with a short interval, sleeps, takes its signal and reads
//! `timer_getoverrun`, so overruns are compared on real counts. An overrun depends on when each
//! side delivered: the two may differ by the periods that fit in the measured gap between the
//! two sides' calls (plus 1 ms, or 50 ms when the timer was armed by an earlier operation);
//! later reads must match what each side handed over at that delivery. Signals of CPU-time
//! timers are never taken (when their next tick-based expiry comes is not comparable).
//! `/proc/self/timers` is compared with the engine's listing. A `fork` operation checks what a
//! fresh child sees (its first id is 0, the parent's ids are unknown, restore mode is off) on
//! both sides. Signal numbers whose queueing
//! has side effects on other pending signals (SIGCHLD, SIGCONT, the stop signals) and the
//! unblockable ones are never used. With `UIPC_DEBUG_SIGQ` set, the child also compares the
//! host's `SigQ` count with the engine's after every operation and prints any difference.
//! The child reports divergences through a pipe as tab-separated lines.

mod deliver;
mod generator;
mod host;

use crate::rng::Rng;
use crate::{Divergence, Options, Report};
use deliver::{arm_and_deliver, deliver_both, LastOverruns, SignalQueue};
use generator::{Gen, CLOCKS};
use host::*;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::time::Instant;
use uipc::timers::*;
use uipc::{Cred, Errno, SystemClock};

pub(crate) const SEC: i64 = 1_000_000_000;
const TOLERANCE: i64 = 50_000_000;

fn nanos(t: &Timespec) -> i64 {
    t.sec.saturating_mul(SEC).saturating_add(t.nsec)
}

/// Nanoseconds since `t`: the gap between a host call and the engine's, which a loaded
/// machine can stretch well past the fixed tolerance.
fn since(t: Instant) -> i64 {
    t.elapsed().as_nanos() as i64
}

/// The row of `call`, a call returning a timer's value that began at `started`: both results
/// and whether they agree (equal, except that `it_value` may differ by the tolerance plus the
/// time the calls took).
fn timed_row(
    call: String,
    h: &Result<ItimerSpec, Errno>,
    e: &Result<ItimerSpec, Errno>,
    started: Instant,
) -> (String, String, String, bool) {
    let tolerance = TOLERANCE + since(started);
    let same = match (h, e) {
        (Ok(a), Ok(b)) => {
            a.interval == b.interval && (nanos(&a.value) - nanos(&b.value)).abs() <= tolerance
        }
        _ => h == e,
    };
    (call, fmt(h), fmt(e), same)
}

/// CPU-time clock ids (the process and thread clocks, and negative per-pid/tid ids).
fn is_cpu_clock(clock: i32) -> bool {
    clock < 0 || clock == CLOCK_PROCESS_CPUTIME_ID || clock == CLOCK_THREAD_CPUTIME_ID
}

/// The engine's interval of timer `id`, in nanoseconds (0 if it has none or is gone).
fn interval_of(engine: &Timers, cred: &Cred, id: i32) -> i64 {
    engine
        .timer_gettime(cred, TimerId::from_raw(id))
        .map_or(0, |s| nanos(&s.interval))
}

/// What a fresh child sees: its first id, a parent's id, restore mode.
pub(crate) fn child_view(
    create: Result<i32, Errno>,
    get: Result<ItimerSpec, Errno>,
    prctl: Result<i32, Errno>,
) -> String {
    format!("{} {} {}", fmt(&create), fmt(&get.map(|_| ())), fmt(&prctl))
}

/// The same on the engine: fork, the child's three calls, the child's exit.
fn engine_forked(engine: &Timers, parent: &Cred, child: i32, probe: i32) -> String {
    engine.fork_process(parent.tgid.get(), child);
    let cred = Cred {
        tid: child,
        tgid: uipc::Tgid::new(child),
        ..parent.clone()
    };
    let no_signal = UserPtr::Valid(SigEvent::NONE);
    let view = child_view(
        engine
            .timer_create(&cred, CLOCK_MONOTONIC, no_signal, UserPtr::Valid(0))
            .map(TimerId::raw),
        engine.timer_gettime(&cred, TimerId::from_raw(probe)),
        engine.prctl_timer_create_restore_ids(&cred, [2, 0, 0, 0]),
    );
    engine.exit_process(child);
    view
}

fn fmt<T: std::fmt::Debug>(r: &Result<T, Errno>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({e:?})"),
    }
}

/// Runs in the forked child: both sides, every divergence written to `out`.
fn child(opts: &Options, out: &mut impl Write) -> Result<(), String> {
    // The raw syscall, because glibc's sigprocmask silently keeps its own signals 32 and 33
    // unblocked, and a timer may well carry one of them.
    let all: u64 = !0;
    // SAFETY: a valid 8-byte kernel sigset; blocking signals cannot harm the process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            &all,
            std::ptr::null_mut::<u64>(),
            8,
        )
    };
    if r != 0 {
        return Err("rt_sigprocmask failed".into());
    }
    // RLIMIT_SIGPENDING counts per real uid across the whole host: move to a uid of our own, so
    // no other process's signals change the count under us. Not root: stay, and hope.
    // SAFETY: plain getter and setter of our own ids.
    unsafe {
        let own = 0x5450_0000 + libc::getpid() as u32;
        libc::setresuid(own, own, own);
    }
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let held: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("SigQ:"))
        .and_then(|v| v.trim().split('/').next()?.parse().ok())
        .ok_or("no SigQ in /proc/self/status")?;
    let limit = held + 24;
    let rl = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: lowering our own limit with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &rl) } != 0 {
        return Err("setrlimit(RLIMIT_SIGPENDING) failed".into());
    }
    // SAFETY: plain getters.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    let cred = Cred {
        rlimit_sigpending: limit,
        ..Cred::user(pid, uid, 0)
    };
    let config = TimersConfig {
        cpu_clocks: Some(Arc::new(HostCpuClocks)),
        ..TimersConfig::default()
    };
    let queue = Arc::new(SignalQueue::default());
    let engine = Timers::with_config(Arc::new(SystemClock), queue.clone(), config);
    for _ in 0..held {
        engine.charge_sigpending(uid, u64::MAX);
    }
    let restore_supported = host_prctl([2, 0, 0, 0]).is_ok();
    let mut g = Gen {
        rng: Rng::new(opts.seed),
        live: Vec::new(),
        dead: Vec::new(),
        restore: false,
        pid,
    };
    // Signal numbers of CPU-time timers (see the delivery operation).
    let mut cpu_signos = std::collections::HashSet::new();
    // The signal number of each live timer that has one (for arm-and-deliver).
    let mut timer_signo = std::collections::HashMap::new();
    let mut last_overruns = LastOverruns::default();
    let mut report = |index: u64, op: &str, host: String, engine: String| {
        let _ = writeln!(out, "D\t{index}\t{op}\t{host}\t{engine}");
    };
    for index in 0..opts.ops {
        engine.run_expired();
        let (op, host, eng, same) = match g.rng.below(27) {
            0..=6 => {
                let clock = *g.rng.pick(&CLOCKS);
                // Unknown ids; negative ids of dynamic (fd) clocks and invalid CPU clocks. Never
                // a valid CPU clock, which the engine does not support.
                let clock = if g.rng.chance(1, 20) {
                    *g.rng
                        .pick(&[12, 99, 2000, i32::MAX, -1, -5, -9, -13, i32::MIN | 7])
                } else {
                    clock
                };
                let (ev, slot) = (g.event(), g.slot());
                let h = host_create(clock, ev, slot);
                let e = engine
                    .timer_create(&cred, clock, ev, slot)
                    .map(TimerId::raw);
                if let Ok(id) = h {
                    g.live.push((id, clock));
                    match ev {
                        UserPtr::Null => timer_signo.insert(id, SIGALRM),
                        UserPtr::Valid(e) if e.notify != SIGEV_NONE => {
                            timer_signo.insert(id, e.signo)
                        }
                        _ => timer_signo.remove(&id),
                    };
                    if is_cpu_clock(clock) {
                        match ev {
                            UserPtr::Null => cpu_signos.insert(SIGALRM),
                            UserPtr::Valid(e) if e.notify != SIGEV_NONE => {
                                cpu_signos.insert(e.signo)
                            }
                            _ => false,
                        };
                    }
                }
                (
                    format!("timer_create({clock}, {ev:?}, {slot:?})"),
                    fmt(&h),
                    fmt(&e),
                    h == e,
                )
            }
            7..=8 => {
                let id = g.id();
                let h = host_simple(libc::SYS_timer_delete, id).map(|_| ());
                let e = engine.timer_delete(&cred, TimerId::from_raw(id));
                if h.is_ok() {
                    g.live.retain(|&(l, _)| l != id);
                    g.dead.push(id);
                    last_overruns.forget(id);
                }
                (format!("timer_delete({id})"), fmt(&h), fmt(&e), h == e)
            }
            9..=12 => {
                let id = g.id();
                let clock = g.live.iter().find(|l| l.0 == id).map_or(1, |l| l.1);
                let (flags, spec) = g.spec(clock);
                let started = Instant::now();
                let h = host_settime(id, flags, spec);
                if h.is_ok() {
                    last_overruns.forget(id);
                }
                if flags & TIMER_ABSTIME != 0 {
                    // A host timer armed in the past fires from an interrupt a moment later;
                    // give it that moment, so the next call sees it fired, as the engine will.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let e = engine.timer_settime(&cred, TimerId::from_raw(id), flags, spec);
                timed_row(
                    format!("timer_settime({id}, {flags}, {spec:?})"),
                    &h,
                    &e,
                    started,
                )
            }
            13..=15 => {
                let id = g.id();
                let started = Instant::now();
                let h = host_gettime(id);
                let e = engine.timer_gettime(&cred, TimerId::from_raw(id));
                timed_row(format!("timer_gettime({id})"), &h, &e, started)
            }
            16..=17 => {
                let id = g.id();
                let h = host_simple(libc::SYS_timer_getoverrun, id);
                let e = engine.timer_getoverrun(&cred, TimerId::from_raw(id));
                let same = match (h, e) {
                    (Ok(h), Ok(e)) => {
                        let interval = interval_of(&engine, &cred, id);
                        last_overruns.agree(id, h, e, interval, TOLERANCE)
                    }
                    _ => h == e,
                };
                (format!("timer_getoverrun({id})"), fmt(&h), fmt(&e), same)
            }
            22..=24 => {
                let pending = queue.pending_signos();
                let signo = if !pending.is_empty() && g.rng.chance(3, 4) {
                    *g.rng.pick(&pending)
                } else {
                    // Any signal number but SIGKILL (9) and SIGSTOP (19).
                    match g.rng.range(1, 62) as i32 {
                        s if s >= 18 => s + 2,
                        s if s >= 9 => s + 1,
                        s => s,
                    }
                };
                if cpu_signos.contains(&signo) {
                    // CPU-time timers expire on the host at scheduler ticks while the process
                    // runs, on the engine when polled: when the next one fires is not
                    // comparable, so their signals are never taken (both sides keep the
                    // first one pending, as they agree on that).
                    continue;
                }
                let (h, e, same) =
                    deliver_both(&engine, &queue, &mut last_overruns, &cred, signo, TOLERANCE);
                // A periodic timer re-armed by the delivery fires again within its interval
                // (at most 1 ms for the short ones): let the host's fire before the engine's
                // next `run_expired`, or the next call would catch one side without it.
                std::thread::sleep(std::time::Duration::from_millis(3));
                (
                    format!("rt_sigtimedwait({signo}) (signo, code, timerid, overrun, value)"),
                    fmt(&h),
                    fmt(&e),
                    same,
                )
            }
            25..=26 => {
                let candidates: Vec<(i32, i32)> = g
                    .live
                    .iter()
                    .filter(|l| !is_cpu_clock(l.1))
                    .filter_map(|l| Some((l.0, *timer_signo.get(&l.0)?)))
                    .filter(|l| !cpu_signos.contains(&l.1))
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                let (id, signo) = *g.rng.pick(&candidates);
                let interval = g.rng.range(200_000, 2_000_000);
                let wait_ms = g.rng.range(3, 30) as u64;
                let (h, e, same) = arm_and_deliver(
                    &engine,
                    &queue,
                    &mut last_overruns,
                    &cred,
                    (id, signo),
                    interval,
                    wait_ms,
                );
                (
                    format!(
                        "timer_settime({id}, 0, 1 ms, interval {interval} ns), sleep {wait_ms} ms, \
                         rt_sigtimedwait({signo}), timer_getoverrun({id})"
                    ),
                    h,
                    e,
                    same,
                )
            }
            21 => {
                let h = std::fs::read_to_string("/proc/self/timers").map_err(|e| e.to_string())?;
                let e = engine.proc_timers(pid);
                let same = h == e;
                let show = |s: &str| s.replace('\n', " | ");
                (
                    "read /proc/self/timers".to_string(),
                    show(&h),
                    show(&e),
                    same,
                )
            }
            20 => {
                let probe = g.id();
                let h = host_forked(probe)?;
                let e = engine_forked(&engine, &cred, h.0, probe);
                (
                    format!(
                        "fork, then in the child: timer_create, timer_gettime({probe}), prctl GET"
                    ),
                    h.1.clone(),
                    e.clone(),
                    h.1 == e,
                )
            }
            _ if restore_supported => {
                let mut args = [*g.rng.pick(&[0, 1, 2, 0, 1, 2, 3, u64::MAX]), 0, 0, 0];
                if g.rng.chance(1, 10) {
                    args[1 + g.rng.below(3) as usize] = 1;
                }
                let h = host_prctl(args);
                let e = engine.prctl_timer_create_restore_ids(&cred, args);
                if h.is_ok() && args[0] < 2 {
                    g.restore = args[0] == 1;
                }
                (
                    format!("prctl(PR_TIMER_CREATE_RESTORE_IDS, {args:?})"),
                    fmt(&h),
                    fmt(&e),
                    h == e,
                )
            }
            _ => continue,
        };
        if std::env::var_os("UIPC_DEBUG_SIGQ").is_some() {
            let st = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let q: u64 = st
                .lines()
                .find_map(|l| l.strip_prefix("SigQ:"))
                .and_then(|v| v.trim().split('/').next()?.parse().ok())
                .unwrap_or(0);
            if q != engine.sigpending(uid) {
                eprintln!(
                    "SIGQ {index}: host {q} engine {} after {op} = {host}",
                    engine.sigpending(uid)
                );
            }
        }
        if !same {
            report(index, &op, host, eng);
        } else if opts.verbose {
            eprintln!("{index}: {op} = {host}");
        }
    }
    let _ = writeln!(out, "N\t{}", opts.ops);
    Ok(())
}

/// Runs the timers differential (see the module doc).
pub fn run(opts: &Options) -> Result<Report, String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err("pipe failed".into());
    }
    let _ = std::io::stdout().flush();
    // SAFETY: the caller is single-threaded here (the CLI forks before starting any thread),
    // so the child may keep using the allocator and std.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        // SAFETY: fds[1] is our own fresh pipe end, owned from here on by this File.
        let mut out = std::io::BufWriter::new(unsafe { std::fs::File::from_raw_fd(fds[1]) });
        // SAFETY: closing the unused read end in the child.
        unsafe { libc::close(fds[0]) };
        let code = match child(opts, &mut out) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(out, "E\t{e}");
                1
            }
        };
        let _ = out.flush();
        // SAFETY: ends the child without running the parent's exit handlers twice.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing the parent's copy of the write end, so EOF arrives when the child ends.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is our fresh read end, owned from here on by this File.
    let input = BufReader::new(unsafe { std::fs::File::from_raw_fd(fds[0]) });
    let mut report = Report::default();
    let mut finished = false;
    for line in input.lines() {
        let line = line.map_err(|e| e.to_string())?;
        let f: Vec<&str> = line.splitn(5, '\t').collect();
        match f.as_slice() {
            ["D", index, op, host, engine] => report.divergences.push(Divergence {
                index: index.parse().unwrap_or(0),
                op: op.to_string(),
                host: host.to_string(),
                engine: engine.to_string(),
            }),
            ["N", n] => {
                report.operations = n.parse().unwrap_or(0);
                finished = true;
            }
            ["E", e] => return Err(e.to_string()),
            _ => return Err(format!("bad line from the child: {line}")),
        }
    }
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if !finished {
        return Err(format!("the conform child died (status {status:#x})"));
    }
    Ok(report)
}
