//! The child side of `uipc bench shim`'s throughput table: N processes doing semop at once,
//! each on a set of its own or all on one shared set, timed from a common start to the last
//! one's end.
//!
//! Each process alternates +1 and -1 on semaphore 0, so no call ever blocks (a process's -1
//! always finds at least its own +1), whatever the others do on a shared set.

use super::calls::{sop, SemSet};
use crate::kernel::{fork_children, pipe, read_full};
use std::time::Instant;

/// Total semops per millisecond of `procs` processes each doing `iters`, or `None` if a call
/// or a process failed.
pub(crate) fn semop_throughput(procs: usize, shared: bool, iters: u32) -> Option<f64> {
    let sets: Vec<SemSet> = (0..if shared { 1 } else { procs })
        .map(|_| SemSet::new(1))
        .collect::<Option<_>>()?;
    let (ready, go) = (pipe()?, pipe()?);
    let child = |p: usize| {
        let id = sets[if shared { 0 } else { p }].0;
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
        i32::from(!ok)
    };
    // SAFETY: the child makes IPC calls and pipe I/O only.
    let pids = unsafe { fork_children(procs, child) };
    // SAFETY: closing the parent's copies of the ends it does not use.
    unsafe {
        libc::close(ready[1]);
        libc::close(go[0]);
    }
    read_full(ready[0], &mut vec![0u8; pids.len()]);
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
