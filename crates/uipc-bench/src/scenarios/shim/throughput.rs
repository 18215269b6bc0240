//! The child side of `uipc bench shim`'s throughput table: N processes doing semop at once,
//! each on a set of its own or all on one shared set, timed from a common start to the last
//! one's end.
//!
//! Each process alternates +1 and -1 on semaphore 0, so no call ever blocks (a process's -1
//! always finds at least its own +1), whatever the others do on a shared set.

use super::calls::{sop, SemSet};
use std::time::Instant;

/// Total semops per millisecond of `procs` processes each doing `iters`, or `None` if a call
/// or a process failed.
pub(crate) fn semop_throughput(procs: usize, shared: bool, iters: u32) -> Option<f64> {
    let sets: Vec<SemSet> = (0..if shared { 1 } else { procs })
        .map(|_| SemSet::new(1))
        .collect::<Option<_>>()?;
    let (ready, go) = (pipe()?, pipe()?);
    let mut pids = Vec::with_capacity(procs);
    for p in 0..procs {
        let id = sets[if shared { 0 } else { p }].0;
        // SAFETY: the child makes IPC calls and pipe I/O only, then leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: closing the child's copy of the go pipe's write end, so that the
            // parent's close is seen as end of file; then the handshake on live locals.
            let ok = unsafe {
                libc::close(go[1]);
                // The first call opens this process's way to the daemon: not timed.
                let warm = libc::semctl(id, 0, libc::GETVAL) >= 0;
                let byte = 1u8;
                libc::write(ready[1], (&byte as *const u8).cast(), 1);
                let mut b = 0u8;
                libc::read(go[0], (&mut b as *mut u8).cast(), 1);
                warm && (0..iters).all(|i| sop(id, 0, if i % 2 == 0 { 1 } else { -1 }, 0))
            };
            // SAFETY: leaving the child without the parent's exit handlers.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        if pid < 0 {
            break;
        }
        pids.push(pid);
    }
    // SAFETY: closing the parent's copies of the ends it does not use.
    unsafe {
        libc::close(ready[1]);
        libc::close(go[0]);
    }
    let mut got = 0;
    while got < pids.len() {
        let mut b = [0u8; 16];
        // SAFETY: reading into a live local buffer.
        let n = unsafe { libc::read(ready[0], b.as_mut_ptr().cast(), b.len()) };
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    let t0 = Instant::now();
    // SAFETY: closing the go pipe starts every child at once.
    unsafe { libc::close(go[1]) };
    let mut ok = pids.len() == procs;
    for pid in &pids {
        let mut status = 0;
        // SAFETY: reaping our own child into a live local.
        unsafe { libc::waitpid(*pid, &mut status, 0) };
        ok &= libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    // SAFETY: our own descriptor.
    unsafe { libc::close(ready[0]) };
    drop(sets);
    (ok && ms > 0.0).then(|| (procs as f64 * f64::from(iters)) / ms)
}

fn pipe() -> Option<[i32; 2]> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe to fill.
    (unsafe { libc::pipe(fds.as_mut_ptr()) } == 0).then_some(fds)
}
