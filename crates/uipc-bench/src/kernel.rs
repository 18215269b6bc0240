//! The host kernel side: isolation and forking per call.

use std::time::Instant;

/// Moves this process into a fresh IPC namespace, so kernel columns start from an empty,
/// default-limited namespace and leave nothing behind. Returns whether that worked (root).
pub fn private_ipc_namespace() -> bool {
    use std::sync::OnceLock;
    static DONE: OnceLock<bool> = OnceLock::new();
    // SAFETY: unshare takes no pointers; on failure nothing changed.
    *DONE.get_or_init(|| unsafe { libc::unshare(libc::CLONE_NEWIPC) == 0 })
}

/// Runs `work` in a freshly forked child and returns what it reported (microseconds), or
/// `None` if it reported `None`, panicked or the child failed. The child writes 8 bytes to a
/// pipe and `_exit`s: no destructor, exit handler or stdio flush of the parent's state runs
/// twice. `work` may allocate (glibc's fork leaves malloc usable in the child) but must not
/// wait for other threads of the parent, which do not exist in the child.
pub fn in_child(work: impl FnOnce() -> Option<f64>) -> Option<f64> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the child runs `work`, writes to the pipe and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
            .ok()
            .flatten()
            .unwrap_or(f64::NAN);
        // SAFETY: writing 8 bytes from a live local to our pipe end, then leaving at once.
        unsafe {
            libc::write(fds[1], (&out as *const f64).cast(), 8);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = f64::NAN;
    // SAFETY: reading up to 8 bytes into a live local.
    let n = unsafe { libc::read(fds[0], (&mut out as *mut f64).cast(), 8) };
    // SAFETY: reaping our own child and closing our read end.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
    }
    (pid > 0 && n == 8 && out.is_finite()).then_some(out)
}

/// Runs `call` in a freshly forked child ([`in_child`]) and returns how long the call itself
/// took there, in microseconds (the fork is not timed), or `None` if it failed. `call` should
/// be plain system calls, so that the time is the kernel's.
pub fn time_in_child(call: impl Fn() -> bool) -> Option<f64> {
    in_child(|| {
        let t0 = Instant::now();
        call().then(|| t0.elapsed().as_secs_f64() * 1e6)
    })
}

/// Removes every semaphore set in this (private) namespace.
pub fn remove_all_sem_sets() {
    let ids: Vec<i32> = std::fs::read_to_string("/proc/sysvipc/sem")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    for id in ids {
        // SAFETY: integer arguments only.
        unsafe { libc::semctl(id, 0, libc::IPC_RMID) };
    }
}

/// Why the host kernel's timer column could not be measured ([`timers_in_child`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimersRefused {
    /// RLIMIT_SIGPENDING's hard limit in the child (`u64::MAX`: unlimited).
    pub hard_limit: u64,
    /// The errno of setrlimit raising both limits to what `n` timers need, 0 if it worked.
    pub raise_errno: i32,
    /// How many timers the kernel created before it refused one.
    pub created: i32,
    /// The errno of the refused call (0: the child failed in another way).
    pub errno: i32,
}

/// Creates `n` SIGEV_NONE CLOCK_MONOTONIC timers with the raw system call in a forked child
/// (so ids start at 0 and the timers die with it), then calls `timer_getoverrun` on each.
/// Returns (create µs, getoverrun µs). Each timer is charged to RLIMIT_SIGPENDING, so the
/// child first raises both its limits to `n` plus room for signals; if it may not (raising the
/// hard limit needs CAP_SYS_RESOURCE), it raises the soft limit to the hard one and tries
/// anyway, and the error tells which call the kernel refused and why. `_threads` is reserved
/// for a threaded variant; the child is single-threaded.
pub fn timers_in_child(_threads: usize, n: i32) -> Result<(f64, f64), TimersRefused> {
    let mut fds = [0i32; 2];
    let failed = TimersRefused {
        hard_limit: 0,
        raise_errno: 0,
        created: 0,
        errno: 0,
    };
    // SAFETY: `fds` is a valid array of two ints for pipe to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(failed);
    }
    // SAFETY: the child only makes system calls, reads the clock and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let out = timers_child(n);
        // SAFETY: writing 48 bytes from a live local to our pipe end, then leaving at once.
        unsafe {
            libc::write(fds[1], out.as_ptr().cast(), 48);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = [u64::MAX; 6];
    // SAFETY: reading up to 48 bytes into a live local.
    let got = unsafe { libc::read(fds[0], out.as_mut_ptr().cast(), 48) };
    // SAFETY: reaping our own child and closing our read end.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
    }
    if pid <= 0 || got != 48 {
        return Err(failed);
    }
    let [create_ns, lookup_ns, hard_limit, raise_errno, created, errno] = out;
    if create_ns == u64::MAX || lookup_ns == u64::MAX {
        return Err(TimersRefused {
            hard_limit,
            raise_errno: raise_errno as i32,
            created: created as i32,
            errno: errno as i32,
        });
    }
    Ok((create_ns as f64 / 1000.0, lookup_ns as f64 / 1000.0))
}

/// The forked child of [`timers_in_child`]: [create ns, getoverrun ns, the hard limit,
/// setrlimit's errno, timers created, the refused call's errno]; `u64::MAX` for a time not
/// measured. System calls and the clock only.
fn timers_child(n: i32) -> [u64; 6] {
    let mut out = [u64::MAX, u64::MAX, 0, 0, 0, 0];
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as u64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit for getrlimit to fill.
    unsafe { libc::getrlimit(libc::RLIMIT_SIGPENDING, &mut lim) };
    out[2] = lim.rlim_max;
    let want = libc::rlimit {
        rlim_cur: n as u64 + 1024,
        rlim_max: (n as u64 + 1024).max(lim.rlim_max),
    };
    // SAFETY: a valid rlimit; raising the hard limit needs CAP_SYS_RESOURCE.
    if unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &want) } != 0 {
        out[3] = errno();
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: as above; the soft limit up to the hard one needs no privilege.
        unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &lim) };
    }
    // SAFETY: a zeroed sigevent is valid; we set SIGEV_NONE.
    let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
    sev.sigev_notify = libc::SIGEV_NONE;
    let t0 = Instant::now();
    for i in 0..n {
        let mut id: libc::c_int = 0;
        // SAFETY: valid pointers to a sigevent and an int for the kernel to fill.
        let r = unsafe {
            libc::syscall(
                libc::SYS_timer_create,
                libc::CLOCK_MONOTONIC,
                &mut sev as *mut libc::sigevent,
                &mut id as *mut libc::c_int,
            )
        };
        if r != 0 {
            out[4] = i as u64;
            out[5] = errno();
            return out;
        }
    }
    out[0] = t0.elapsed().as_nanos() as u64;
    out[4] = n as u64;
    let t0 = Instant::now();
    for id in 0..n {
        // SAFETY: integer argument; ids 0..n were just created in this process.
        if unsafe { libc::syscall(libc::SYS_timer_getoverrun, id as libc::c_long) } < 0 {
            out[5] = errno();
            return out;
        }
    }
    out[1] = t0.elapsed().as_nanos() as u64;
    out
}

/// Which lock a host lock-benchmark task takes and drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostLock {
    /// `fcntl(F_SETLKW)` of a whole-file write lock, then `F_UNLCK` with `F_SETLK`.
    PosixWholeFile,
    /// `flock(LOCK_EX)`, then `flock(LOCK_UN)`.
    FlockExclusive,
}

/// What a lock benchmark measured: each task's own time, and the wall time from the first
/// task's start to the last task's end, in microseconds.
#[derive(Clone, Debug)]
pub struct TaskTimes {
    /// Each task's time spent locking and unlocking.
    pub per_task_micros: Vec<f64>,
    /// From the first start to the last end.
    pub wall_micros: f64,
}

impl TaskTimes {
    /// From each task's (start, end) in nanoseconds on one clock.
    pub fn from_spans(spans: &[(u64, u64)]) -> TaskTimes {
        let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
        let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
        TaskTimes {
            per_task_micros: spans
                .iter()
                .map(|&(a, b)| b.saturating_sub(a) as f64 / 1000.0)
                .collect(),
            wall_micros: last.saturating_sub(first) as f64 / 1000.0,
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine.
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Clock `id` in nanoseconds (CLOCK_THREAD_CPUTIME_ID: this thread's CPU time, for loops
/// that leave out the time other processes take the core).
pub fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the kernel (or the vDSO) to fill.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A new pipe's `[read, write]` ends, or `None` if the kernel refuses one.
pub(crate) fn pipe() -> Option<[i32; 2]> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe to fill.
    (unsafe { libc::pipe(fds.as_mut_ptr()) } == 0).then_some(fds)
}

/// Forks up to `n` children, the `i`th running `child(i)` and leaving with `_exit` of the
/// status it returns (no exit handler or destructor of the parent's state runs twice); stops
/// at the first fork that fails. Returns the children's pids, in order.
///
/// # Safety
/// `child` runs in the forked copy of a process that may have other threads: it must not
/// wait for them nor take a lock one of them may hold (the benchmarks' children make system
/// calls only).
pub(crate) unsafe fn fork_children(n: usize, child: impl Fn(usize) -> i32) -> Vec<libc::pid_t> {
    let mut pids = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the child runs `child` (this function's contract) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let status = child(i);
            // SAFETY: leaving the child without running the parent's exit handlers.
            unsafe { libc::_exit(status) };
        }
        if pid < 0 {
            break;
        }
        pids.push(pid);
    }
    pids
}

/// Reads exactly `buf.len()` bytes unless the pipe reaches end of file; returns how many.
pub(crate) fn read_full(fd: i32, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the pointer and length stay inside `buf`.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    got
}

/// The body of one forked task: open `path` (its own open file description), report ready,
/// wait for the start, and run `iterations` lock/unlock pairs; returns when the loop started
/// and ended on [`monotonic_ns`]'s clock, or `u64::MAX` twice on any failure. Only system
/// calls and the clock: safe after fork.
fn host_lock_task(
    path: &std::ffi::CStr,
    lock: HostLock,
    iterations: usize,
    pipes: [i32; 3],
) -> [u64; 2] {
    let [ready_fd, start_fd, _] = pipes;
    // SAFETY: a valid NUL-terminated path; integer flags.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600) };
    let mut byte = [0u8; 1];
    // SAFETY: one byte from a live local, closing the ready pipe (so that the parent sees its
    // end of file even if a task died before reporting), then a read that returns at the start
    // pipe's end of file.
    unsafe {
        libc::write(ready_fd, byte.as_ptr().cast(), 1);
        libc::close(ready_fd);
        libc::read(start_fd, byte.as_mut_ptr().cast(), 1);
    }
    if fd < 0 {
        return [u64::MAX; 2];
    }
    // SAFETY: a zeroed `struct flock` is valid; the fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_whence = libc::SEEK_SET as i16;
    let start = monotonic_ns();
    for _ in 0..iterations {
        // SAFETY: `fd` is ours and `fl` a live `struct flock`.
        let ok = unsafe {
            match lock {
                HostLock::PosixWholeFile => {
                    fl.l_type = libc::F_WRLCK as i16;
                    let a = libc::fcntl(fd, libc::F_SETLKW, &fl as *const libc::flock);
                    fl.l_type = libc::F_UNLCK as i16;
                    a == 0 && libc::fcntl(fd, libc::F_SETLK, &fl as *const libc::flock) == 0
                }
                HostLock::FlockExclusive => {
                    libc::flock(fd, libc::LOCK_EX) == 0 && libc::flock(fd, libc::LOCK_UN) == 0
                }
            }
        };
        if !ok {
            return [u64::MAX; 2];
        }
    }
    [start, monotonic_ns()]
}

/// Closes every descriptor from 3 up except `keep`, in a forked child.
fn close_all_but(keep: &[i32]) {
    let mut keep: [i32; 3] = keep.try_into().expect("three descriptors");
    keep.sort_unstable();
    let mut first = 3u32;
    for fd in keep {
        if fd as u32 > first {
            // SAFETY: integer arguments; closes only descriptors of this (child) process.
            unsafe { libc::syscall(libc::SYS_close_range, first, fd as u32 - 1, 0u32) };
        }
        first = fd as u32 + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
}

/// Forks one child per path (the same path repeated makes tasks share a file, each through its
/// own open), starts them together, and collects what each spent taking and dropping `lock`
/// `iterations` times, as the seed's lockperf did. `None` if a fork, an open or a lock failed.
/// The caller removes the files.
pub fn lock_tasks_in_children(
    paths: &[std::ffi::CString],
    lock: HostLock,
    iterations: usize,
) -> Option<TaskTimes> {
    let (ready, start, results) = (pipe()?, pipe()?, pipe()?);
    let task = |i: usize| {
        // Keep only the three pipe ends this task uses: the start pipe's end of file must
        // come when the parent closes its write end, so no task may hold a copy of it (nor
        // of another run's pipes, forked at the same time from another thread).
        let ends = [ready[1], start[0], results[1]];
        close_all_but(&ends);
        let span = host_lock_task(&paths[i], lock, iterations, ends);
        // SAFETY: 16 bytes from a live local (one atomic pipe write).
        unsafe { libc::write(results[1], span.as_ptr().cast(), 16) };
        0
    };
    // SAFETY: the child runs only system calls and the clock (`host_lock_task`); it allocates
    // nothing.
    let children = unsafe { fork_children(paths.len(), task) };
    // SAFETY: closing the parent's copies of the children's ends.
    unsafe {
        libc::close(ready[1]);
        libc::close(start[0]);
        libc::close(results[1]);
    }
    let mut ready_bytes = vec![0u8; children.len()];
    let all_ready = read_full(ready[0], &mut ready_bytes) == children.len();
    // SAFETY: closing the start pipe's write end releases every child at once.
    unsafe { libc::close(start[1]) };
    let mut raw = vec![0u8; 16 * children.len()];
    let got = read_full(results[0], &mut raw);
    for &pid in &children {
        // SAFETY: reaping our own children.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    // SAFETY: closing our remaining pipe ends.
    unsafe {
        libc::close(ready[0]);
        libc::close(results[0]);
    }
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().expect("8 bytes"));
    let spans: Vec<(u64, u64)> = raw[..got]
        .chunks_exact(16)
        .map(|c| (word(&c[..8]), word(&c[8..])))
        .collect();
    let complete = all_ready
        && children.len() == paths.len()
        && spans.len() == paths.len()
        && spans.iter().all(|&(a, _)| a != u64::MAX);
    complete.then(|| TaskTimes::from_spans(&spans))
}
