//! `uipc conform locks`: random POSIX record lock, OFD lock and flock operations from several
//! owners, made on a real file through the host kernel and through the engine
//! ([`uipc::locks::LockManager`]), results and state compared.
//!
//! The host side is a file in `/dev/shm` (unlinked at once, reopened through `/proc`) and
//! [`WORKERS`] forked worker processes ([`worker`]), each holding up to [`worker::SLOTS`]
//! descriptors: opened read-write, read-only, write-only, `O_PATH` or with access mode 3,
//! dup'ed, and shared with other workers (a description passed over `SCM_RIGHTS`), so POSIX
//! locks have several process owners and OFD and flock locks several description owners, some
//! shared by several processes. The driver (this process) tells the workers what to do.
//!
//! The engine side models the same world: each worker incarnation is a process with a pid of
//! its own (`1000 + n`), each open an [`OfdId`] with a reference count, so closing a
//! descriptor is `LockManager::close(pid, file, ofd, last_reference)`, and a worker's exit is
//! its descriptors' closes and then `process_exit`. `O_PATH` descriptors are not shown to the
//! engine at all (as an embedder would not): a lock call through one is made with no
//! descriptor (EBADF), and closing one drops nothing, as on Linux. SEEK_CUR uses the offset
//! the driver had the worker `lseek` to, SEEK_END the file's size, which only `ftruncate`
//! operations change.
//!
//! Compared after every operation ([`generator`] draws them):
//! - the return value or errno of each lock call, and for F_GETLK / F_OFD_GETLK the whole
//!   `struct flock` written back, pids named by worker incarnation ([`state::Pids`]);
//! - the state: `/proc/locks` lines of the test file against the engine's `list()` and,
//!   separately, against its `proc_locks()` text ([`state`]). A state divergence is reported
//!   when it appears (not again for every following operation while it lasts).
//!
//! The operations that set up the workers' first descriptors count as part of operation 0.
//!
//! Blocking calls happen only in the [`scenario`]s (waiter chains and trees, wake-ups,
//! interrupted waiters, POSIX/OFD deadlock cycles, flock upgrades), on a second file; the
//! random operations draw F_SETLKW and F_OFD_SETLKW only where they cannot wait, and flock's
//! LOCK_SH / LOCK_EX always with LOCK_NB. About 1% of the operations are scenarios.
//!
//! `/proc/locks` is global: other programs' locks are filtered out by inode, and a read that
//! they split into several kernel passes is retried ([`state::host_lines`]).
//!
//! Not covered: EFAULT (the engine takes no pointers); leases; several threads of one process;
//! cycles longer than [`WORKERS`] owners (so not Linux's 10-step limit of the deadlock walk);
//! the order in which competing waiters win (never drawn: it is a race on the host).

mod apply;
pub mod blocking;
pub mod generator;
pub mod scenario;
pub mod state;
pub mod worker;

use crate::rng::Rng;
use crate::{Divergence, Options, Report};
use generator::{Op, Slots};
use state::Pids;
use std::collections::HashMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::RawFd;
use std::sync::Arc;

use uipc::locks::*;
use uipc::{Cred, Errno};
use worker::*;

/// How many worker processes the run drives.
pub const WORKERS: usize = 4;
/// The engine pid of worker incarnation `n` is `ENGINE_PID_BASE + n`.
const ENGINE_PID_BASE: i32 = 1000;

/// An open file description, as the engine side tracks it.
struct Description {
    ofd: OfdId,
    /// Which of the run's two files.
    file: usize,
    /// The open flags (the access mode, or `O_PATH`).
    flags: i32,
    /// Where the last `lseek` put it.
    offset: i64,
    /// Descriptors referring to it, in all workers.
    refs: usize,
}

/// One worker slot of the run: the live process and its descriptors.
struct Process {
    worker: Option<Worker>,
    incarnation: usize,
    /// Description (key of `Run::descriptions`) per slot; the last is the scenario slot.
    slots: [Option<u64>; SLOTS + 1],
}

/// Everything the run holds. Dropping it kills the workers.
struct Run {
    /// The file of the random operations, and the one of the blocking scenarios, as
    /// `/proc/<driver>/fd/<n>`: the files are unlinked as soon as they are created (nothing
    /// is left behind even if the run is killed), and opening that path opens the file anew.
    paths: [CString; 2],
    /// The driver's own descriptors of the two files, for `ftruncate` and `fstat`; never used
    /// for locking.
    driver_fds: [RawFd; 2],
    files: [FileId; 2],
    /// The first file's size (the second stays empty).
    size: i64,
    procs: Vec<Process>,
    descriptions: HashMap<u64, Description>,
    next_ofd: u64,
    pids: Pids,
    engine: Arc<LockManager>,
    verbose: bool,
    index: u64,
    divergences: Vec<Divergence>,
    /// Whether each state comparison is currently diverging (reported when it starts).
    state_diverged: [bool; 2],
    /// The host state last printed (with `--verbose`, each change is).
    last_host: Vec<String>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for p in &mut self.procs {
            if let Some(w) = p.worker.take() {
                w.kill_and_reap();
            }
        }
        for fd in self.driver_fds {
            // SAFETY: closing our own descriptor (or -1, harmlessly).
            unsafe { libc::close(fd) };
        }
    }
}

fn errno() -> Errno {
    Errno::from_raw(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

fn show<T: std::fmt::Debug>(r: &Result<T, Errno>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({e:?})"),
    }
}

fn host_result(reply: &Reply) -> Result<i64, Errno> {
    if reply[0] < 0 {
        Err(Errno::from_raw(reply[1] as i32))
    } else {
        Ok(reply[0])
    }
}

impl Run {
    fn new(verbose: bool) -> Result<Run, String> {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = |n: usize| {
            let p = dir.join(format!("uipc-conform-locks-{}-{n}", std::process::id()));
            CString::new(p.to_string_lossy().into_owned()).map_err(|e| e.to_string())
        };
        let mut run = Run {
            paths: [path(0)?, path(1)?],
            driver_fds: [-1; 2],
            files: [FileId { dev: 0, ino: 0 }; 2],
            size: 0,
            procs: Vec::new(),
            descriptions: HashMap::new(),
            next_ofd: 1,
            pids: Pids::new(!state::in_initial_pid_namespace()),
            engine: Arc::new(LockManager::new()),
            verbose,
            index: 0,
            divergences: Vec::new(),
            state_diverged: [false; 2],
            last_host: Vec::new(),
        };
        for n in 0..2 {
            let path = &run.paths[n];
            // SAFETY: a valid C path; a stale file of an earlier run with our pid is replaced,
            // and ours is unlinked at once (see `Run::paths`).
            let fd = unsafe {
                libc::unlink(path.as_ptr());
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                    0o600,
                );
                libc::unlink(path.as_ptr());
                fd
            };
            if fd < 0 {
                return Err(format!("cannot create {path:?}: {:?}", errno()));
            }
            run.driver_fds[n] = fd;
            let reopen = format!("/proc/{}/fd/{fd}", std::process::id());
            run.paths[n] = CString::new(reopen).map_err(|e| e.to_string())?;
            // SAFETY: an all-zero stat is a valid buffer for fstat to fill.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: our own descriptor and a live buffer.
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return Err(format!("fstat failed: {:?}", errno()));
            }
            run.files[n] = FileId {
                dev: st.st_dev,
                ino: st.st_ino,
            };
        }
        run.truncate(100)?;
        for w in 0..WORKERS {
            let p = run.spawn()?;
            run.procs.push(p);
            run.open_scenario_slot(w)?;
        }
        Ok(run)
    }

    fn spawn(&mut self) -> Result<Process, String> {
        let worker = Worker::spawn([&self.paths[0], &self.paths[1]])?;
        let next = ENGINE_PID_BASE + self.pids.count() as i32;
        let incarnation = self.pids.add(worker.pid, next);
        Ok(Process {
            worker: Some(worker),
            incarnation,
            slots: [None; SLOTS + 1],
        })
    }

    /// Opens worker `w`'s descriptor of the second file (read-write, a description of its own).
    fn open_scenario_slot(&mut self, w: usize) -> Result<(), String> {
        let mut req = request(REQ_OPEN, SCENARIO_SLOT, libc::O_RDWR as i64);
        req[3] = 1;
        let (reply, _) = self.worker(w)?.call(&req, None)?;
        host_result(&reply).map_err(|e| format!("open of the second file failed: {e:?}"))?;
        self.new_description(w, SCENARIO_SLOT, 1, libc::O_RDWR);
        Ok(())
    }

    fn new_description(&mut self, w: usize, slot: usize, file: usize, flags: i32) {
        let id = self.next_ofd;
        self.next_ofd += 1;
        let d = Description {
            ofd: OfdId(id),
            file,
            flags,
            offset: 0,
            refs: 0,
        };
        self.descriptions.insert(id, d);
        self.hold(w, slot, id);
    }

    fn engine_pid(&self, w: usize) -> i32 {
        ENGINE_PID_BASE + self.procs[w].incarnation as i32
    }

    fn cred(&self, w: usize) -> Cred {
        Cred::root(self.engine_pid(w))
    }

    fn worker(&self, w: usize) -> Result<&Worker, String> {
        self.procs[w]
            .worker
            .as_ref()
            .ok_or_else(|| "no worker".to_string())
    }

    fn truncate(&mut self, size: i64) -> Result<(), String> {
        // SAFETY: our own descriptor; an all-zero stat is a valid buffer.
        let (r, st) = unsafe {
            let r = libc::ftruncate(self.driver_fds[0], size);
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(self.driver_fds[0], &mut st);
            (r, st)
        };
        if r != 0 {
            return Err(format!("ftruncate({size}) failed: {:?}", errno()));
        }
        self.size = st.st_size;
        Ok(())
    }

    /// Which slots are open, with their open flags (what the generator sees).
    fn slots(&self) -> Slots {
        self.procs
            .iter()
            .map(|p| {
                let mut slots = [None; SLOTS];
                for (slot, d) in slots.iter_mut().zip(&p.slots) {
                    *slot = d.map(|d| self.descriptions[&d].flags);
                }
                slots
            })
            .collect()
    }

    /// The engine's view of worker `w`'s slot: `None` for an empty or `O_PATH` slot.
    fn open_file(&self, w: usize, slot: usize) -> Option<OpenFile> {
        let d = &self.descriptions[&self.procs[w].slots[slot]?];
        let access = d.flags & libc::O_ACCMODE;
        (d.flags & libc::O_PATH == 0).then_some(OpenFile {
            file: self.files[d.file],
            ofd: d.ofd,
            readable: access == libc::O_RDONLY || access == libc::O_RDWR,
            writable: access == libc::O_WRONLY || access == libc::O_RDWR,
            offset: d.offset,
            size: if d.file == 0 { self.size } else { 0 },
        })
    }

    /// Records a divergence unless the two sides agree.
    fn check(&mut self, op: &str, host: String, engine: String) {
        if self.verbose {
            println!("op {}: {op} -> host {host}, engine {engine}", self.index);
        }
        if host != engine {
            self.divergences.push(Divergence {
                index: self.index,
                op: op.to_string(),
                host,
                engine,
            });
        }
    }

    /// Worker `w` dropped its reference to description `id` (a close or its exit).
    fn release(&mut self, w: usize, id: u64) {
        let pid = self.engine_pid(w);
        let d = self.descriptions.get_mut(&id).expect("tracked description");
        d.refs -= 1;
        let last = d.refs == 0;
        if d.flags & libc::O_PATH == 0 {
            self.engine
                .close(uipc::Tgid::new(pid), self.files[d.file], d.ofd, last);
        }
        if last {
            self.descriptions.remove(&id);
        }
    }

    /// Worker `w` gained a reference to description `id` in `slot`.
    fn hold(&mut self, w: usize, slot: usize, id: u64) {
        self.descriptions.get_mut(&id).expect("tracked").refs += 1;
        self.procs[w].slots[slot] = Some(id);
    }

    fn expect_ok(op: &Op, reply: &Reply) -> Result<(), String> {
        host_result(reply)
            .map(|_| ())
            .map_err(|e| format!("{op} failed on the host: {e:?}"))
    }

    /// Compares the state of both sides after `op`.
    fn compare_state(&mut self, op: &str) -> Result<(), String> {
        let host = state::host_lines(&self.files, |p| Some(self.pids.host(p)))?;
        let list = self.engine.list();
        let proc_text = self.engine.proc_locks();
        let (mut listed, mut printed) = (Vec::new(), Vec::new());
        for file in self.files {
            let column = state::dev_ino(file);
            listed.extend(state::render_list(&list, file, |p| self.pids.shown(p)));
            printed.extend(state::normalise_proc_locks(&proc_text, &column, |p| {
                self.pids.shown(p)
            }));
        }
        if self.verbose && host != self.last_host {
            println!("  host state now: {host:?}");
            self.last_host = host.clone();
        }
        for (n, (what, engine)) in [("list()", listed), ("proc_locks()", printed)]
            .into_iter()
            .enumerate()
        {
            let diverged = host != engine;
            if diverged && !self.state_diverged[n] {
                let (host_only, engine_only) = state::difference(&host, &engine);
                self.divergences.push(Divergence {
                    index: self.index,
                    op: format!("{op}; then /proc/locks vs the engine's {what}"),
                    host: format!(
                        "{host_only:?} (and {} lines alike)",
                        host.len() - host_only.len()
                    ),
                    engine: format!("{engine_only:?}"),
                });
            }
            self.state_diverged[n] = diverged;
        }
        Ok(())
    }

    /// The first descriptors: per worker read-write, read-only, write-only and a dup of the
    /// first; and one read-write description shared by every worker.
    fn setup(&mut self) -> Result<(), String> {
        for w in 0..WORKERS {
            for (slot, flags) in [(0, libc::O_RDWR), (1, libc::O_RDONLY), (2, libc::O_WRONLY)] {
                self.apply(Op::Open { w, slot, flags })?;
            }
            self.apply(Op::Dup { w, from: 0, to: 3 })?;
        }
        self.apply(Op::Open {
            w: 0,
            slot: 4,
            flags: libc::O_RDWR,
        })?;
        for to_w in 1..WORKERS {
            self.apply(Op::Share {
                w: 0,
                slot: 4,
                to_w,
                to_slot: 4,
            })?;
        }
        Ok(())
    }
}

/// Runs the locks differential (see the module doc).
pub fn run(opts: &Options) -> Result<Report, String> {
    // The workers are forked: nothing buffered may be printed twice.
    let _ = std::io::stdout().flush();
    let mut run = Run::new(opts.verbose)?;
    run.setup()?;
    let mut rng = Rng::new(opts.seed);
    for index in 0..opts.ops {
        run.index = index;
        let op = generator::draw(&mut rng, &run.slots());
        run.apply(op)?;
        run.compare_state(&op.to_string())?;
    }
    Ok(Report {
        operations: opts.ops,
        divergences: std::mem::take(&mut run.divergences),
    })
}
