//! Bursts of the semaphore calls that `uipc run`'s fast path serves, for `uipc conform ipc`.
//!
//! Under `uipc run` a single-sop semop or semtimedop without SEM_UNDO, and GETVAL, GETPID,
//! GETNCNT and GETZCNT, complete in the caller's process on a set that has no SEM_UNDO
//! adjustment and no sleeper (README, "the semaphore fast path"). The other sem steps soon give
//! every set an adjustment of this process's, kept until it exits, so they reach the fast path
//! rarely. A burst makes a set of its own (IPC_PRIVATE, 1 to 4 semaphores), runs 20 to 60 such
//! calls on it, as root and as the unprivileged user, mixed with calls that take the daemon
//! path and change what the next fast call must see (SETVAL, IPC_SET of the owner and mode,
//! a semop with SEM_UNDO or several sops), compares each with the engine, checks IPC_STAT
//! (with whether sem_otime is set) and GETALL, and removes the set.
//!
//! A burst draws from a generator of its own (seeded from the run's seed), so that adding it
//! left the run's other operations as they were.

use super::host::{as_user, result};
use super::Ctx;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut, Timespec};

/// Runs one burst (its draws from `ctx.rng`, which the caller has switched to the burst's own).
pub fn burst(ctx: &mut Ctx) {
    let nsems = ctx.rng.range(1, 4) as i32;
    let mode = *ctx.rng.pick(&[0o600, 0o666, 0o644, 0o660]);
    // SAFETY: integer arguments only.
    let h = result(unsafe { libc::syscall(libc::SYS_semget, IPC_PRIVATE, nsems, mode) })
        .map(|v| v as i32);
    let e = ctx.ns.semget(&ctx.root, IPC_PRIVATE, nsems, mode);
    if !ctx.check(
        &format!("fast burst: semget(IPC_PRIVATE, {nsems}, {mode:#o})"),
        &h,
        &e,
    ) {
        return;
    }
    let (Ok(id), Ok(_)) = (h, e) else { return };
    for _ in 0..ctx.rng.range(20, 60) {
        match ctx.rng.below(100) {
            0..=44 => semop(ctx, id, nsems, false),
            45..=49 => semop(ctx, id, nsems, true),
            50..=74 => get(ctx, id, nsems),
            75..=81 => setval(ctx, id, nsems),
            82..=87 => ipc_set(ctx, id),
            88..=94 => stat(ctx, id),
            _ => getall(ctx, id, nsems),
        }
    }
    // SAFETY: integer arguments only.
    let h = result(unsafe { libc::syscall(libc::SYS_semctl, id, 0, IPC_RMID, 0usize) });
    let e = ctx
        .ns
        .semctl(&ctx.root, id, 0, IPC_RMID, SemctlArg::None)
        .map(|o| i64::from(o.ret()));
    ctx.check(&format!("fast burst: semctl({id}, IPC_RMID)"), &h, &e);
}

/// A single sop without SEM_UNDO (the fast path's), or with `slow` two sops or (a quarter of
/// the time) one with SEM_UNDO, which keeps the set on the daemon path for the rest of the
/// burst. Never sleeps: IPC_NOWAIT, or a zero timeout.
fn semop(ctx: &mut Ctx, id: i32, nsems: i32, slow: bool) {
    let n = if !slow || ctx.rng.chance(1, 4) { 1 } else { 2 };
    let zero_timeout = ctx.rng.chance(1, 5);
    let sops: Vec<Sembuf> = (0..n)
        .map(|_| {
            let num = if ctx.rng.chance(1, 20) {
                nsems as u16
            } else {
                ctx.rng.below(nsems as u64) as u16
            };
            let op = *ctx.rng.pick(&[-2, -1, -1, 0, 1, 1, 2]);
            let mut flg = if zero_timeout { 0 } else { IPC_NOWAIT as i16 };
            if slow && n == 1 {
                flg |= SEM_UNDO;
            }
            Sembuf::new(num, op, flg)
        })
        .collect();
    let timeout = zero_timeout.then(Timespec::default);
    let user = ctx.pick_caller();
    super::sem_compare::compare_semtimedop(ctx, "fast burst: ", (id, id), &sops, timeout, user);
}

fn get(ctx: &mut Ctx, id: i32, nsems: i32) {
    let cmd = *ctx.rng.pick(&[GETVAL, GETVAL, GETPID, GETNCNT, GETZCNT]);
    let semnum = if ctx.rng.chance(1, 20) {
        *ctx.rng.pick(&[-1, nsems])
    } else {
        ctx.rng.range(0, i64::from(nsems) - 1) as i32
    };
    let user = ctx.pick_caller();
    super::sem_compare::compare_get(ctx, "fast burst: ", (id, id), semnum, cmd, user);
}

fn setval(ctx: &mut Ctx, id: i32, nsems: i32) {
    let semnum = ctx.rng.range(0, i64::from(nsems) - 1) as i32;
    let val = ctx.rng.range(0, 3) as i32;
    let user = ctx.pick_caller();
    super::sem_compare::compare_setval(ctx, "fast burst: ", (id, id), semnum, val, user);
}

/// IPC_SET as root: the next fast call must judge the caller by the new owner and mode.
fn ipc_set(ctx: &mut Ctx, id: i32) {
    let uid = *ctx.rng.pick(&[0, super::USER_UID]);
    let gid = *ctx.rng.pick(&[0, super::USER_GID]);
    let mode = *ctx
        .rng
        .pick(&[0o600, 0o666, 0o644, 0o400, 0o200, 0o000, 0o606, 0o660]);
    // SAFETY: a zeroed semid_ds is a valid buffer.
    let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
    ds.sem_perm.uid = uid;
    ds.sem_perm.gid = gid;
    ds.sem_perm.mode = mode as u16;
    // SAFETY: the buffer outlives the call.
    let h = result(unsafe { libc::syscall(libc::SYS_semctl, id, 0, IPC_SET, &mut ds as *mut _) })
        .map(|r| r as i32);
    let e = ctx
        .ns
        .semctl(&ctx.root, id, 0, IPC_SET, SemctlArg::Set { uid, gid, mode })
        .map(|o| o.ret());
    let op = format!("fast burst: semctl({id}, IPC_SET {uid}/{gid}/{mode:o})");
    ctx.check(&op, &h, &e);
}

/// IPC_STAT's owner, mode and size, and whether sem_otime is set (a fast semop sets it).
fn stat(ctx: &mut Ctx, id: i32) {
    let user = ctx.pick_caller();
    // SAFETY: a zeroed semid_ds is a valid buffer.
    let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
    let h = as_user(user, || {
        // SAFETY: the buffer outlives the call.
        result(unsafe { libc::syscall(libc::SYS_semctl, id, 0, IPC_STAT, &mut ds as *mut _) })
    })
    .map(|_| {
        let p = &ds.sem_perm;
        (
            p.uid,
            p.gid,
            u32::from(p.mode),
            ds.sem_nsems,
            ds.sem_otime != 0,
        )
    });
    let e = ctx
        .ns
        .semctl(ctx.cred(user), id, 0, IPC_STAT, SemctlArg::None)
        .map(|o| match o {
            SemctlOut::Stat(_, d) => (d.perm.uid, d.perm.gid, d.perm.mode, d.nsems, d.otime != 0),
            _ => (0, 0, 0, u64::MAX, false),
        });
    let op = format!("fast burst: semctl({id}, IPC_STAT, user {user})");
    ctx.check(&op, &h, &e);
}

fn getall(ctx: &mut Ctx, id: i32, nsems: i32) {
    let user = ctx.pick_caller();
    super::sem_compare::compare_getall(ctx, "fast burst: ", (id, id), nsems as usize, user);
}
