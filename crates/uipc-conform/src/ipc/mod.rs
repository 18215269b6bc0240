//! `uipc conform ipc`: the same random SysV IPC operations on the host kernel and on the
//! engine, compared call by call and state by state.
//!
//! Isolation: the run first moves itself into a fresh IPC namespace (`unshare(CLONE_NEWIPC)`,
//! which needs root), so its objects cannot collide with anything on the host and vanish with
//! the process. Without that privilege it falls back to a private key range (see
//! [`KEY_BASE`]), remembers every object it created (keyed or private) and removes them when it
//! ends; SIGINT and SIGTERM end the run after the current operation, so Ctrl-C cleans up too.
//! Such a run cannot switch identities: every call, "user" cases included, is made as the
//! caller, and the engine is given the caller's own ids and capabilities. It cannot compare
//! ids either (the host's allocator is shared with the machine): the engine is given each id
//! the host hands out (`Ctx::align_next_id`), starts from the host's limits, and compares only
//! the run's own rows of `/proc/sysvipc`. On a host with other IPC objects, the `*_INFO`
//! totals and the index-based `*_STAT` commands see those objects and diverge.
//!
//! The second identity: permission checks are exercised as an unprivileged uid/gid by
//! switching only the calling thread's effective ids with raw `setresuid`/`setresgid` system
//! calls (glibc's wrappers would switch every thread) and back again ([`host::as_user`]).
//!
//! Each object type lives in its own module (`sem`, `msg`, `shm`) with a `step` that draws one
//! operation, applies it to both sides and compares; this module runs the loop (with two
//! cross-type operations of its own: bursts of private queues, and `*_next_id` writes that the
//! next creation consumes), every [`FAST_EVERY`] operations a burst of the semaphore calls
//! `uipc run`'s fast path serves (`sem_fast`, from a generator of its own), and every
//! [`STATE_EVERY`] operations and at the end compares the `/proc/sysvipc` files with times
//! masked.
//!
//! With a trace file the run also writes each comparison's host result ([`trace`]): two traces
//! of one seed, made natively and under `uipc run`, compare the kernel with the preload
//! library and daemon (`uipc conform ipc --through-run`).

pub mod host;
pub mod msg;
pub mod sem;
mod sem_compare;
mod sem_fast;
mod sem_undo;
pub mod shm;
pub mod trace;

use crate::rng::Rng;
use crate::{Divergence, Options, Report};
use std::fmt::Debug;
use uipc::ipc::IpcNamespace;
use uipc::{CapSet, Cred};

/// First key of the run's private key range ("uipc" in ASCII).
pub const KEY_BASE: i32 = 0x7569_7063;
/// How many keys each object type draws from.
pub const KEYS_PER_TYPE: i32 = 6;
/// The unprivileged identity used for permission checks.
pub const USER_UID: u32 = 4242;
/// Its group.
pub const USER_GID: u32 = 4343;
/// How often the whole `/proc/sysvipc` state is compared.
pub const STATE_EVERY: u64 = 50;
/// How often a burst of the semaphore calls `uipc run`'s fast path serves runs (`sem_fast`).
pub const FAST_EVERY: u64 = 25;

/// What every step sees.
pub struct Ctx {
    /// The run's generator.
    pub rng: Rng,
    /// The generator of the fast-path bursts, swapped into `rng` while one runs.
    fast_rng: Rng,
    /// The engine's namespace, in the same state as the host's.
    pub ns: IpcNamespace,
    /// Root, as the host process is (same pid, so recorded pids compare equal).
    pub root: Cred,
    /// The unprivileged identity ([`USER_UID`]/[`USER_GID`], no capabilities).
    pub user: Cred,
    /// Print every operation.
    pub verbose: bool,
    /// Whether the run is in its own IPC namespace (else cleanup is by key range and ids).
    pub private_ns: bool,
    divergences: Vec<Divergence>,
    index: u64,
    /// Private queues made by [`burst`], as (host id, engine id).
    burst_ids: Vec<(i32, i32)>,
    /// The trace being written, if the run was given a file.
    trace: Option<trace::Trace>,
}

impl Ctx {
    /// The key for slot `n` (0..KEYS_PER_TYPE) of a type with base offset `type_base`.
    pub fn key(&self, type_base: i32, n: i32) -> i32 {
        KEY_BASE + type_base * 16 + n
    }

    /// Draws a caller: root most of the time, the unprivileged user otherwise.
    pub fn pick_caller(&mut self) -> bool {
        self.rng.chance(1, 5)
    }

    /// The engine identity for `as_user`.
    pub fn cred(&self, as_user: bool) -> &Cred {
        if as_user {
            &self.user
        } else {
            &self.root
        }
    }

    /// Outside a private namespace the host's id allocator is shared with the rest of the
    /// machine, so ids cannot be compared: before the engine's `*get`, it is told (through
    /// `*_next_id`) to hand out the id the host just did, and every later call compares as in
    /// a private namespace. A no-op in a private namespace.
    pub fn align_next_id(&self, which: uipc::ipc::Sysctl, host: &Result<i32, uipc::Errno>) {
        if self.private_ns {
            return;
        }
        if let Ok(id) = host {
            let admin = Cred::root(self.root.tgid.get());
            let _ = self.ns.sysctl_write(&admin, which, &id.to_string());
        }
    }

    /// Notes a child the run forked, so that a trace names its pid.
    pub fn note_child(&mut self, pid: i32) {
        if let Some(t) = &mut self.trace {
            t.note_pid(pid);
        }
    }

    /// Records a divergence unless `host == engine` (and the host's result in the trace).
    /// Returns whether they agreed.
    pub fn check<T: PartialEq + Debug>(&mut self, op: &str, host: &T, engine: &T) -> bool {
        self.check_pids(op, host, engine, trace::Pids::Fields)
    }

    /// [`Ctx::check`] for a result that shows process ids where `pids` says.
    pub fn check_pids<T: PartialEq + Debug>(
        &mut self,
        op: &str,
        host: &T,
        engine: &T,
        pids: trace::Pids,
    ) -> bool {
        if let Some(t) = &mut self.trace {
            t.record(self.index, op, &format!("{host:?}"), pids);
        }
        if self.verbose {
            println!(
                "op {}: {op} -> host {host:?}, engine {engine:?}",
                self.index
            );
        }
        if host == engine {
            return true;
        }
        self.divergences.push(Divergence {
            index: self.index,
            op: op.to_string(),
            host: format!("{host:?}"),
            engine: format!("{engine:?}"),
        });
        false
    }
}

/// Runs `opts.ops` random operations.
pub fn run(opts: &Options) -> Result<Report, String> {
    let private_ns = host::enter_private_ipc_namespace();
    if opts.trace.is_some() && !private_ns {
        return Err("a trace needs a private IPC namespace (root), so that ids compare".into());
    }
    let pid = std::process::id() as i32;
    // SAFETY: a plain getter.
    let is_root = unsafe { libc::geteuid() } == 0;
    host::set_switch_ids(is_root);
    host::catch_stop_signals();
    // Root as the host sees this process: sandboxes often drop capabilities (here, for one,
    // CAP_SYS_RESOURCE), and the engine must judge root by the same set. Anyone else runs
    // every call as themselves, "user" cases included.
    let root = host::own_cred(pid);
    let user = if is_root {
        Cred {
            caps: CapSet::EMPTY,
            ..Cred::user(pid, USER_UID, USER_GID)
        }
    } else {
        root.clone()
    };
    let mut ctx = Ctx {
        rng: Rng::new(opts.seed),
        fast_rng: Rng::new(opts.seed ^ 0x6661_7374),
        ns: IpcNamespace::new(),
        root,
        user,
        verbose: opts.verbose,
        private_ns,
        divergences: Vec::new(),
        index: 0,
        burst_ids: Vec::new(),
        trace: opts.trace.as_ref().map(|_| trace::Trace::new(pid)),
    };
    if !private_ns {
        eprintln!("uipc conform ipc: not root, using keys {KEY_BASE:#x}.. in the host's namespace");
        host::remove_key_range();
        mirror_host_limits(&ctx);
    }
    let mut done = 0;
    for i in 0..opts.ops {
        if host::stop_requested() {
            eprintln!("uipc conform ipc: stopped by a signal after {i} operations");
            break;
        }
        done = i + 1;
        ctx.index = i;
        match ctx.rng.below(1000) {
            0..=9 => burst(&mut ctx),
            10..=17 => next_id(&mut ctx),
            18..=399 => sem::step(&mut ctx),
            400..=749 => msg::step(&mut ctx),
            _ => shm::step(&mut ctx),
        }
        if (i + 1) % FAST_EVERY == 0 {
            std::mem::swap(&mut ctx.rng, &mut ctx.fast_rng);
            sem_fast::burst(&mut ctx);
            std::mem::swap(&mut ctx.rng, &mut ctx.fast_rng);
        }
        if (i + 1) % STATE_EVERY == 0 || i + 1 == opts.ops {
            compare_proc(&mut ctx);
        }
    }
    if !private_ns {
        host::remove_key_range();
        host::remove_remembered();
    }
    let report = Report {
        operations: done,
        divergences: ctx.divergences,
    };
    if let (Some(t), Some(path)) = (&ctx.trace, &opts.trace) {
        t.save(path, &report)?;
    }
    Ok(report)
}

/// Creates or removes many private queues at once, so that the number of live objects (and
/// with it the cyclic allocator's window, `max(in_use * 3/2, 64)`) grows and shrinks well past
/// what the per-type steps keep alive, and the ids handed out after it are compared.
fn burst(ctx: &mut Ctx) {
    let grow = ctx.burst_ids.len() < 40 || (ctx.burst_ids.len() < 300 && ctx.rng.chance(1, 2));
    if grow {
        let n = ctx.rng.range(20, 120);
        for _ in 0..n {
            // SAFETY: integer arguments only.
            let host = host::result(unsafe { libc::msgget(libc::IPC_PRIVATE, 0o600) } as i64)
                .map(|id| id as i32);
            if let Ok(h) = host {
                host::remember(host::Kind::Msg, h);
            }
            ctx.align_next_id(uipc::ipc::Sysctl::MsgNextId, &host);
            let engine = ctx.ns.msgget(&ctx.root, 0, 0o600);
            if !ctx.check("burst: msgget(IPC_PRIVATE, 0600)", &host, &engine) {
                return;
            }
            if let (Ok(h), Ok(e)) = (host, engine) {
                ctx.burst_ids.push((h, e));
            }
        }
    } else {
        let n = ctx.rng.range(1, ctx.burst_ids.len() as i64) as usize;
        for _ in 0..n {
            let (h, e) = ctx
                .burst_ids
                .swap_remove(ctx.rng.below(ctx.burst_ids.len() as u64) as usize);
            // SAFETY: integer arguments and a NULL buffer, which IPC_RMID ignores.
            let host = host::result(
                unsafe { libc::msgctl(h, libc::IPC_RMID, std::ptr::null_mut()) } as i64,
            )
            .map(|_| ());
            let engine = ctx
                .ns
                .msgctl(
                    &ctx.root,
                    e,
                    uipc::ipc::consts::IPC_RMID,
                    uipc::ipc::msg::MsgctlArg::None,
                )
                .map(|_| ());
            ctx.check(&format!("burst: msgctl({h}, IPC_RMID)"), &host, &engine);
        }
    }
}

/// Writes `sem_next_id`, `msg_next_id` or `shm_next_id` on both sides (only in the run's own
/// namespace, where the files are ours): usually an index near the live ones with a small or a
/// large sequence number, sometimes an index in use, a negative, an out-of-range or a
/// non-numeric value. The next creation of that type (drawn by the type's own step) consumes
/// it, and the ids compared there show whether the engine restored it as Linux does. The
/// files are read back on both sides.
fn next_id(ctx: &mut Ctx) {
    if !ctx.private_ns {
        return;
    }
    let (name, which) = *ctx.rng.pick(&[
        ("sem_next_id", uipc::ipc::Sysctl::SemNextId),
        ("msg_next_id", uipc::ipc::Sysctl::MsgNextId),
        ("shm_next_id", uipc::ipc::Sysctl::ShmNextId),
    ]);
    let value = match ctx.rng.below(10) {
        0 => ctx
            .rng
            .pick(&[
                "-1",
                "-7",
                "2147483648",
                "x",
                "",
                "12 13",
                "010",
                "0x1f",
                "+5",
                " 9\n",
            ])
            .to_string(),
        1 => ctx
            .rng
            .pick(&["0", "2147483647", "32767", "32768"])
            .to_string(),
        _ => {
            let seq = *ctx.rng.pick(&[0, 0, 1, 3, 127, 128, 65535]);
            let idx = ctx.rng.range(0, 400);
            ((seq << 15) + idx).to_string()
        }
    };
    write_sysctl_both(ctx, name, which, &value);
}

/// Writes `value` to `/proc/sys/kernel/{name}` on the host and to the engine's tunable,
/// compares the results, then compares what each reads back.
pub(crate) fn write_sysctl_both(ctx: &mut Ctx, name: &str, which: uipc::ipc::Sysctl, value: &str) {
    let path = format!("/proc/sys/kernel/{name}");
    let host = std::fs::write(&path, value).map_err(|e| e.raw_os_error());
    let engine = ctx
        .ns
        .sysctl_write(&ctx.root, which, value)
        .map_err(|e| Some(e.raw()));
    ctx.check(&format!("write {path} {value:?}"), &host, &engine);
    let host_now = std::fs::read_to_string(&path).unwrap_or_default();
    let engine_now = ctx.ns.sysctl_read(which);
    ctx.check(
        &format!("read {path}"),
        &host_now.trim(),
        &engine_now.as_str(),
    );
}

/// Masks the time columns of a `/proc/sysvipc` file so host and engine compare.
pub fn mask_times(text: &str, time_columns: &[usize]) -> String {
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            if n == 0 {
                return line.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            let cols: Vec<&str> = line.split_whitespace().collect();
            cols.iter()
                .enumerate()
                .map(|(i, c)| if time_columns.contains(&i) { "T" } else { c })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Gives the engine the host's current IPC limits (outside a private namespace the run cannot
/// write them, and the host's may differ from Linux's defaults).
fn mirror_host_limits(ctx: &Ctx) {
    use uipc::ipc::Sysctl;
    let admin = Cred::root(ctx.root.tgid.get());
    // The limits, not the *_next_id files.
    for which in &Sysctl::ALL[..8] {
        let which = *which;
        if let Ok(text) = std::fs::read_to_string(format!("/proc/sys/kernel/{}", which.name())) {
            let _ = ctx.ns.sysctl_write(&admin, which, &text);
        }
    }
}

/// Keeps the header and the rows of `text` whose id (second column) is in `ids`.
fn only_rows_of(text: &str, ids: &[i32]) -> String {
    text.lines()
        .enumerate()
        .filter(|(n, line)| {
            *n == 0
                || line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|id| id.parse::<i32>().ok())
                    .is_some_and(|id| ids.contains(&id))
        })
        .map(|(_, line)| format!("{line}\n"))
        .collect()
}

fn compare_proc(ctx: &mut Ctx) {
    // Each file's time columns, and its pid columns.
    type File<'a> = (&'a str, host::Kind, String, &'a [usize], &'static [usize]);
    let files: [File; 3] = [
        (
            "sem",
            host::Kind::Sem,
            ctx.ns.proc_sysvipc_sem(),
            &[8, 9],
            &[],
        ),
        (
            "msg",
            host::Kind::Msg,
            ctx.ns.proc_sysvipc_msg(),
            &[11, 12, 13],
            &[5, 6],
        ),
        (
            "shm",
            host::Kind::Shm,
            ctx.ns.proc_sysvipc_shm(),
            &[11, 12, 13],
            &[4, 5],
        ),
    ];
    for (name, kind, engine, times, pids) in files {
        let mut host = std::fs::read_to_string(format!("/proc/sysvipc/{name}")).unwrap_or_default();
        if !ctx.private_ns {
            // The host's files list every object on the machine: keep the run's own.
            host = only_rows_of(&host, &host::remembered(kind));
        }
        let (h, e) = (mask_times(&host, times), mask_times(&engine, times));
        let op = format!("state of /proc/sysvipc/{name}");
        ctx.check_pids(&op, &h, &e, trace::Pids::Columns(pids));
    }
}
