//! SEM_UNDO at process exit, for `uipc conform ipc`: a forked child operates on a live set with
//! SEM_UNDO (and sometimes without it afterwards, so the exit has to clamp to 0 or SEMVMX),
//! then exits; the kernel applies the child's adjustments at its exit. The engine runs the
//! same calls as that child and then its `process_exit` (after `process_fork`, so inherited
//! shm attachments come and go as on the host). Compared: both calls' results, then every
//! semaphore's value and last pid (the exit records the child's pid where it adjusted).
//!
//! The child starts with no undo list of its own (fork does not share it without
//! CLONE_SYSVSEM), so only its own adjustments are reverted.

use super::host::errno;
use super::Ctx;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg};
use uipc::{Cred, WaitCtx};

fn draw_sops(ctx: &mut Ctx, nsems: usize, undo: bool) -> Vec<Sembuf> {
    let n = ctx.rng.range(1, 3) as usize;
    (0..n)
        .map(|_| {
            let num = ctx.rng.below(nsems as u64) as u16;
            let op = if undo {
                *ctx.rng.pick(&[-2, -1, 1, 2, 3, 32767])
            } else {
                *ctx.rng.pick(&[-32767, 32767, -1, 1, -3])
            };
            let flg = IPC_NOWAIT as i16 | if undo { SEM_UNDO } else { 0 };
            Sembuf::new(num, op, flg)
        })
        .collect()
}

fn host_semop(id: i32, sops: &[Sembuf]) -> i32 {
    let mut raw = super::sem_compare::host_sembufs(sops);
    // SAFETY: `raw` outlives the call and holds `raw.len()` entries.
    let r = unsafe { libc::semop(id, raw.as_mut_ptr(), raw.len()) };
    if r == 0 {
        0
    } else {
        errno()
    }
}

/// Every semaphore's (value, last pid) on the host.
fn host_values(id: i32, nsems: usize) -> Vec<(i32, i32)> {
    (0..nsems as i32)
        .map(|n| {
            // SAFETY: integer arguments only.
            unsafe { (libc::semctl(id, n, GETVAL), libc::semctl(id, n, GETPID)) }
        })
        .collect()
}

fn engine_values(ctx: &Ctx, id: i32, nsems: usize) -> Vec<(i32, i32)> {
    let get = |n: i32, cmd: i32| {
        ctx.ns
            .semctl(&ctx.root, id, n, cmd, SemctlArg::None)
            .map_or(-1, |o| o.ret())
    };
    (0..nsems as i32)
        .map(|n| (get(n, GETVAL), get(n, GETPID)))
        .collect()
}

/// The forked-child SEM_UNDO operation on the live set `(host id, engine id, nsems)`.
pub(super) fn forked_undo(ctx: &mut Ctx, (hid, eid, nsems): (i32, i32, usize)) {
    let with_undo = draw_sops(ctx, nsems, true);
    let after = if ctx.rng.chance(1, 2) {
        draw_sops(ctx, nsems, false)
    } else {
        Vec::new()
    };
    let mut fds = [0; 2];
    // SAFETY: room for the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return;
    }
    // SAFETY: the harness is single threaded; the child makes system calls and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let results = [
            host_semop(hid, &with_undo),
            if after.is_empty() {
                0
            } else {
                host_semop(hid, &after)
            },
        ];
        // SAFETY: writing a local array to our pipe, then leaving without destructors.
        unsafe {
            libc::write(fds[1], results.as_ptr().cast(), 8);
            libc::_exit(0);
        }
    }
    let mut results = [-1i32; 2];
    // SAFETY: closing our write end, reading into a local array, reaping our child.
    unsafe {
        libc::close(fds[1]);
        libc::read(fds[0], results.as_mut_ptr().cast(), 8);
        libc::close(fds[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let child = Cred {
        tid: pid,
        tgid: uipc::Tgid::new(pid),
        ..ctx.root.clone()
    };
    ctx.note_child(pid);
    ctx.ns.process_fork(ctx.root.tgid.get(), pid);
    let run = |sops: &[Sembuf]| {
        ctx.ns
            .semop(&child, eid, sops, &WaitCtx::FOREVER)
            .map_or_else(|e| e.raw(), |()| 0)
    };
    let engine = [
        run(&with_undo),
        if after.is_empty() { 0 } else { run(&after) },
    ];
    ctx.ns.process_exit(pid);
    let show = |s: &[Sembuf]| s.iter().map(|s| (s.sem_num, s.sem_op)).collect::<Vec<_>>();
    let op = format!(
        "child {pid}: semop({hid}, {:?} with SEM_UNDO), semop({:?}); exit",
        show(&with_undo),
        show(&after)
    );
    ctx.check(&op, &results, &engine);
    let host = host_values(hid, nsems);
    let engine = engine_values(ctx, eid, nsems);
    ctx.check_pids(
        &format!("after child {pid}'s exit: (GETVAL, GETPID) of {hid}"),
        &host,
        &engine,
        super::trace::Pids::Seconds,
    );
}
