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

/// Runs `call` in a freshly forked child and returns how long the call itself took there, in
/// microseconds (the fork is not timed), or `None` if the child failed.
///
/// The child only calls `call` (which must be async-signal-safe: plain system calls), reads
/// the clock, writes 8 bytes to a pipe and `_exit`s.
pub fn time_in_child(call: impl Fn() -> bool) -> Option<f64> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the child runs only async-signal-safe code before `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let t0 = Instant::now();
        let ok = call();
        let ns: u64 = if ok {
            t0.elapsed().as_nanos() as u64
        } else {
            u64::MAX
        };
        // SAFETY: writing 8 bytes from a live local to our pipe end, then leaving at once.
        unsafe {
            libc::write(fds[1], (&ns as *const u64).cast(), 8);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut ns = 0u64;
    // SAFETY: reading up to 8 bytes into a live local.
    let n = unsafe { libc::read(fds[0], (&mut ns as *mut u64).cast(), 8) };
    // SAFETY: reaping our own child and closing our read end.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
    }
    (pid > 0 && n == 8 && ns != u64::MAX).then(|| ns as f64 / 1000.0)
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

/// Creates `n` SIGEV_NONE CLOCK_MONOTONIC timers with the raw system call in a forked child
/// (so ids start at 0 and the timers die with it), then calls `timer_getoverrun` on each.
/// Returns (create µs, getoverrun µs), or `None` if a call failed. `_threads` is reserved for
/// a threaded variant; the child is single-threaded.
pub fn timers_in_child(_threads: usize, n: i32) -> Option<(f64, f64)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the child only makes system calls, reads the clock and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut out = [u64::MAX; 2];
        let lim = libc::rlimit {
            rlim_cur: n as u64 + 1024,
            rlim_max: n as u64 + 1024,
        };
        // SAFETY: a valid rlimit; root may raise RLIMIT_SIGPENDING.
        let raised = unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &lim) } == 0;
        // SAFETY: a zeroed sigevent is valid; we set SIGEV_NONE.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_NONE;
        let t0 = Instant::now();
        let mut ok = raised;
        for _ in 0..n {
            let mut id: libc::c_int = 0;
            // SAFETY: valid pointers to a sigevent and an int for the kernel to fill.
            ok &= ok
                && unsafe {
                    libc::syscall(
                        libc::SYS_timer_create,
                        libc::CLOCK_MONOTONIC,
                        &mut sev as *mut libc::sigevent,
                        &mut id as *mut libc::c_int,
                    )
                } == 0;
        }
        if ok {
            out[0] = t0.elapsed().as_nanos() as u64;
            let t0 = Instant::now();
            for id in 0..n {
                // SAFETY: integer argument; ids 0..n were just created in this process.
                ok &= unsafe { libc::syscall(libc::SYS_timer_getoverrun, id as libc::c_long) } >= 0;
            }
            if ok {
                out[1] = t0.elapsed().as_nanos() as u64;
            }
        }
        // SAFETY: writing 16 bytes from a live local to our pipe end, then leaving at once.
        unsafe {
            libc::write(fds[1], out.as_ptr().cast(), 16);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = [0u64; 2];
    // SAFETY: reading up to 16 bytes into a live local.
    let got = unsafe { libc::read(fds[0], out.as_mut_ptr().cast(), 16) };
    // SAFETY: reaping our own child and closing our read end.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
    }
    (pid > 0 && got == 16 && out.iter().all(|&v| v != u64::MAX))
        .then(|| (out[0] as f64 / 1000.0, out[1] as f64 / 1000.0))
}
