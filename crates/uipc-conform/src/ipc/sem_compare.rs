//! The semaphore comparisons that `sem.rs`'s steps and `sem_fast.rs`'s bursts share: each
//! applies one call to the host's set (raw system calls) and the engine's, and compares.

use super::host::{as_user, result};
use super::Ctx;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut, Timespec};
use uipc::WaitCtx;

/// Applies semtimedop of `sops` with `timeout` as `user` to the host's set `hid` and the
/// engine's `eid`, and compares; `label` starts the operation's name.
pub(super) fn compare_semtimedop(
    ctx: &mut Ctx,
    label: &str,
    (hid, eid): (i32, i32),
    sops: &[Sembuf],
    timeout: Option<Timespec>,
    user: bool,
) {
    let nsops = sops.len();
    let mut hsops = host_sembufs(sops);
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.tv_sec,
        tv_nsec: t.tv_nsec,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    let h = as_user(user, || {
        // SAFETY: sops and the timespec outlive the call; nsops is their length.
        result(unsafe { libc::syscall(libc::SYS_semtimedop, hid, hsops.as_mut_ptr(), nsops, tsp) })
    })
    .map(|_| ());
    let e = ctx
        .ns
        .semtimedop(ctx.cred(user), eid, sops, timeout, &WaitCtx::FOREVER);
    let shown: Vec<_> = sops
        .iter()
        .take(4)
        .map(|s| (s.sem_num, s.sem_op, s.sem_flg))
        .collect();
    let op = format!("{label}semtimedop({hid}, {shown:?} x{nsops}, {timeout:?}, user {user})");
    ctx.check(&op, &h, &e);
}

/// Applies semctl `cmd` (one without an argument: GETVAL, GETPID, ...) to semaphore `semnum`
/// as `user` on the host's set `hid` and the engine's `eid`, and compares; `label` starts the
/// operation's name.
pub(super) fn compare_get(
    ctx: &mut Ctx,
    label: &str,
    (hid, eid): (i32, i32),
    semnum: i32,
    cmd: i32,
    user: bool,
) {
    let (h, e) = int_semctl(ctx, (hid, eid), semnum, cmd, SemctlArg::None, user);
    let pids = if cmd & 0xff == GETPID {
        super::trace::Pids::All
    } else {
        super::trace::Pids::Fields
    };
    let op = format!("{label}semctl({hid}, {semnum}, cmd {cmd:#x}, user {user})");
    ctx.check_pids(&op, &h, &e, pids);
}

/// GETALL of a set of `nsems` as `user` on the host's set `hid` and the engine's `eid`,
/// compared; `label` starts the operation's name.
pub(super) fn compare_getall(
    ctx: &mut Ctx,
    label: &str,
    (hid, eid): (i32, i32),
    nsems: usize,
    user: bool,
) {
    let mut buf = vec![0u16; nsems.max(64)];
    let h = as_user(user, || {
        // SAFETY: the buffer holds at least nsems values and outlives the call.
        result(unsafe { libc::syscall(libc::SYS_semctl, hid, 0, GETALL, buf.as_mut_ptr()) })
    })
    .map(|_| buf[..nsems].to_vec());
    let e = ctx
        .ns
        .semctl(ctx.cred(user), eid, 0, GETALL, SemctlArg::None)
        .map(|o| match o {
            SemctlOut::All(v) => v,
            _ => Vec::new(),
        });
    ctx.check(
        &format!("{label}semctl({hid}, GETALL, user {user})"),
        &h,
        &e,
    );
}

/// SETVAL of `val` to semaphore `semnum` as `user` on the host's set `hid` and the engine's
/// `eid`, compared; `label` starts the operation's name.
pub(super) fn compare_setval(
    ctx: &mut Ctx,
    label: &str,
    (hid, eid): (i32, i32),
    semnum: i32,
    val: i32,
    user: bool,
) {
    let (h, e) = int_semctl(ctx, (hid, eid), semnum, SETVAL, SemctlArg::Val(val), user);
    let op = format!("{label}semctl({hid}, {semnum}, SETVAL {val}, user {user})");
    ctx.check(&op, &h, &e);
}

/// semctl `cmd` on semaphore `semnum` as `user`, with `arg` either none (the host call gets 0)
/// or an int (`SemctlArg::Val`, passed to the host by value as the union's int member): the
/// host's result on set `hid` and the engine's on `eid`.
fn int_semctl(
    ctx: &mut Ctx,
    (hid, eid): (i32, i32),
    semnum: i32,
    cmd: i32,
    arg: SemctlArg<'_>,
    user: bool,
) -> (Result<i32, uipc::Errno>, Result<i32, uipc::Errno>) {
    let val = match arg {
        SemctlArg::Val(v) => libc::c_long::from(v),
        _ => 0,
    };
    // SAFETY: integer arguments only.
    let h = as_user(user, || {
        result(unsafe { libc::syscall(libc::SYS_semctl, hid, semnum, cmd, val) })
    });
    let e = ctx.ns.semctl(ctx.cred(user), eid, semnum, cmd, arg);
    (h.map(|r| r as i32), e.map(|o| o.ret()))
}

/// The engine's semaphore operations as the host's `struct sembuf`s.
pub(super) fn host_sembufs(sops: &[Sembuf]) -> Vec<libc::sembuf> {
    sops.iter()
        .map(|s| libc::sembuf {
            sem_num: s.sem_num,
            sem_op: s.sem_op,
            sem_flg: s.sem_flg,
        })
        .collect()
}
