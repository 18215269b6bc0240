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
