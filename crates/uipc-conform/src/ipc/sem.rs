//! sem operations for `uipc conform ipc`. Keys: `ctx.key(0, n)`.
//!
//! Each step draws one semget, semop/semtimedop or semctl (valid and invalid: unknown and
//! stale ids, bad sizes, bad semnums, out-of-range values, the unprivileged caller, IPC_NOWAIT
//! on every sop so nothing sleeps, or a zero timeout without it), runs it on the host through
//! raw system calls and on the engine, and compares the results (errno, return value, the
//! IPC_STAT/SEM_STAT fields, times as set or not, the seminfo buffers, GETALL's values).
//!
//! Between steps it remembers the sets it created (host id, engine id, nsems) and the ids it
//! removed, so later steps can target live, removed and never-used ids. That memory is kept
//! per run (it is reset when a new namespace is seen).

use super::host::{as_user, result};
use super::sem_compare::{compare_get, compare_getall, compare_semtimedop, compare_setval};
use super::Ctx;
use std::cell::RefCell;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut, Timespec};
use uipc::Errno;

#[derive(Default)]
struct State {
    run: usize,
    live: Vec<(i32, i32, usize)>,
    dead: Vec<i32>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

const MODES: [i32; 8] = [0o600, 0o666, 0o644, 0o400, 0o200, 0o000, 0o660, 0o606];

/// Draws one sem operation, applies it to the host and the engine, and compares.
pub fn step(ctx: &mut Ctx) {
    STATE.with(|s| {
        let mut st = s.borrow_mut();
        let run = &ctx.ns as *const _ as usize;
        if st.run != run {
            *st = State {
                run,
                ..State::default()
            };
        }
        match ctx.rng.below(100) {
            0..=14 => semget(ctx, &mut st),
            15..=54 => semop(ctx, &st),
            55..=64 => stat(ctx, &st),
            65..=69 => info(ctx),
            70..=79 => get_one(ctx, &st),
            80..=84 => getall(ctx, &st),
            85..=89 => setval(ctx, &st),
            90..=93 => setall(ctx, &st),
            94..=95 => ipc_set(ctx, &st),
            96 if ctx.private_ns => limits(ctx),
            97 if !st.live.is_empty() => {
                let live = st.live[ctx.rng.below(st.live.len() as u64) as usize];
                super::sem_undo::forked_undo(ctx, live);
            }
            _ => rmid(ctx, &mut st),
        }
    });
}

/// An id pair (host, engine) and the set size to assume.
fn pick_id(ctx: &mut Ctx, st: &State) -> (i32, i32, usize) {
    let r = ctx.rng.below(100);
    if r < 88 && !st.live.is_empty() {
        return *ctx.rng.pick(&st.live);
    }
    if r < 94 && !st.dead.is_empty() {
        let id = *ctx.rng.pick(&st.dead);
        return (id, id, 3);
    }
    let id = match ctx.rng.below(3) {
        0 => -1,
        1 => ctx.rng.range(0, 70) as i32,
        _ => (ctx.rng.range(1, 3) as i32) << 15 | ctx.rng.range(0, 8) as i32,
    };
    (id, id, 3)
}

fn semget(ctx: &mut Ctx, st: &mut State) {
    let key = if ctx.rng.chance(1, 5) {
        IPC_PRIVATE
    } else {
        let n = ctx.rng.below(super::KEYS_PER_TYPE as u64) as i32;
        ctx.key(0, n)
    };
    let nsems = *ctx.rng.pick(&[-1, 0, 1, 2, 3, 3, 3, 5, 8, 1, 2, 32001]);
    let mut flag = *ctx.rng.pick(&MODES);
    if ctx.rng.chance(3, 4) {
        flag |= IPC_CREAT;
    }
    if ctx.rng.chance(1, 4) {
        flag |= IPC_EXCL;
    }
    if st.live.len() > 24 && key == IPC_PRIVATE {
        flag &= !IPC_CREAT;
    }
    let user = ctx.pick_caller();
    // SAFETY: integer arguments only.
    let h = as_user(user, || {
        result(unsafe { libc::syscall(libc::SYS_semget, key, nsems, flag) })
    });
    let h = h.map(|v| v as i32);
    if let Ok(id) = h {
        super::host::remember(super::host::Kind::Sem, id);
    }
    ctx.align_next_id(uipc::ipc::Sysctl::SemNextId, &h);
    let e = ctx.ns.semget(ctx.cred(user), key, nsems, flag);
    let op = format!("semget(key {key}, nsems {nsems}, flag {flag:#o}, user {user})");
    ctx.check(&op, &h, &e);
    if let (Ok(h), Ok(e)) = (h, e) {
        if !st.live.iter().any(|l| l.0 == h) {
            let n = semctl_stat_nsems(h).unwrap_or(nsems.max(1) as usize);
            st.live.push((h, e, n));
            st.dead.retain(|&d| d != h);
        }
    }
}

fn semctl_stat_nsems(id: i32) -> Option<usize> {
    // SAFETY: a zeroed semid_ds is a valid buffer for IPC_STAT.
    let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_semctl, id, 0, IPC_STAT, &mut ds as *mut _) };
    (r == 0).then_some(ds.sem_nsems as usize)
}

fn semop(ctx: &mut Ctx, st: &State) {
    let (hid, eid, nsems) = pick_id(ctx, st);
    let nsops = match ctx.rng.below(20) {
        0 => 0,
        1 => 501,
        2 => 500,
        _ => ctx.rng.range(1, 4) as usize,
    };
    let zero_timeout = ctx.rng.chance(1, 10);
    let mut sops = Vec::with_capacity(nsops);
    for _ in 0..nsops {
        let num = if ctx.rng.chance(1, 12) {
            nsems as u16 + ctx.rng.below(2) as u16
        } else {
            ctx.rng.below(nsems as u64) as u16
        };
        let op = if nsops >= 500 {
            0
        } else {
            *ctx.rng
                .pick(&[-2, -1, -1, -1, 0, 0, 1, 1, 1, 2, 3, 32767, -32767])
        };
        let mut flg = if zero_timeout { 0 } else { IPC_NOWAIT as i16 };
        if ctx.rng.chance(3, 10) {
            flg |= SEM_UNDO;
        }
        sops.push(Sembuf::new(num, op, flg));
    }
    let timeout = if zero_timeout {
        Some(Timespec::default())
    } else {
        match ctx.rng.below(24) {
            0 => Some(Timespec {
                tv_sec: -1,
                tv_nsec: 0,
            }),
            1 => Some(Timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000_000,
            }),
            2 => Some(Timespec {
                tv_sec: 0,
                tv_nsec: -1,
            }),
            3 => Some(Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            }),
            _ => None,
        }
    };
    let user = ctx.pick_caller();
    compare_semtimedop(ctx, "", (hid, eid), &sops, timeout, user);
}

/// IPC_STAT's return value, `ipc_perm` (key, uid, gid, cuid, cgid, mode, seq), nsems, and
/// whether sem_otime and sem_ctime are set.
type StatView = (i32, i32, u32, u32, u32, u32, u32, u32, u64, (bool, bool));

fn stat(ctx: &mut Ctx, st: &State) {
    let cmd = *ctx.rng.pick(&[IPC_STAT, IPC_STAT, SEM_STAT, SEM_STAT_ANY]);
    let (hid, eid, _) = if cmd == IPC_STAT {
        pick_id(ctx, st)
    } else {
        let i = ctx.rng.range(-1, 8) as i32 + if ctx.rng.chance(1, 8) { 32768 } else { 0 };
        (i, i, 0)
    };
    let user = ctx.pick_caller();
    // SAFETY: a zeroed semid_ds is a valid buffer.
    let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
    let h: Result<StatView, Errno> = as_user(user, || {
        // SAFETY: the buffer outlives the call.
        result(unsafe { libc::syscall(libc::SYS_semctl, hid, 0, cmd, &mut ds as *mut _) })
    })
    .map(|r| {
        let p = &ds.sem_perm;
        (
            r as i32,
            p.__key,
            p.uid,
            p.gid,
            p.cuid,
            p.cgid,
            u32::from(p.mode),
            u32::from(p.__seq),
            ds.sem_nsems,
            (ds.sem_otime != 0, ds.sem_ctime != 0),
        )
    });
    let e = ctx
        .ns
        .semctl(ctx.cred(user), eid, 0, cmd, SemctlArg::None)
        .map(|out| match out {
            SemctlOut::Stat(r, d) => {
                let p = d.perm;
                let times = (d.otime != 0, d.ctime != 0);
                (
                    r, p.key, p.uid, p.gid, p.cuid, p.cgid, p.mode, p.seq, d.nsems, times,
                )
            }
            other => (other.ret(), 0, 0, 0, 0, 0, 0, 0, u64::MAX, (false, false)),
        });
    ctx.check(&format!("semctl({hid}, cmd {cmd}, user {user})"), &h, &e);
}

fn info(ctx: &mut Ctx) {
    let cmd = *ctx.rng.pick(&[IPC_INFO, SEM_INFO]);
    let id = *ctx.rng.pick(&[-1, 0, 5, 99999]);
    // SAFETY: a zeroed seminfo is a valid buffer.
    let mut si: libc::seminfo = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer outlives the call.
    let h = result(unsafe { libc::syscall(libc::SYS_semctl, id, 0, cmd, &mut si as *mut _) }).map(
        |r| {
            (
                r as i32,
                [
                    si.semmap, si.semmni, si.semmns, si.semmnu, si.semmsl, si.semopm, si.semume,
                    si.semusz, si.semvmx, si.semaem,
                ],
            )
        },
    );
    let e = ctx
        .ns
        .semctl(&ctx.root, id, 0, cmd, SemctlArg::None)
        .map(|out| match out {
            SemctlOut::Info(r, i) => (
                r,
                [
                    i.semmap, i.semmni, i.semmns, i.semmnu, i.semmsl, i.semopm, i.semume, i.semusz,
                    i.semvmx, i.semaem,
                ],
            ),
            other => (other.ret(), [0; 10]),
        });
    ctx.check(&format!("semctl({id}, cmd {cmd})"), &h, &e);
}

fn get_one(ctx: &mut Ctx, st: &State) {
    let (hid, eid, nsems) = pick_id(ctx, st);
    let mut cmd = *ctx
        .rng
        .pick(&[GETVAL, GETVAL, GETPID, GETNCNT, GETZCNT, 99]);
    if ctx.rng.chance(1, 20) {
        cmd |= IPC_64;
    }
    let semnum = ctx.rng.range(-1, nsems as i64) as i32;
    let user = ctx.pick_caller();
    compare_get(ctx, "", (hid, eid), semnum, cmd, user);
}

fn getall(ctx: &mut Ctx, st: &State) {
    let (hid, eid, nsems) = pick_id(ctx, st);
    // A drawn id may name a live set of another size: the host fills as many as it has.
    let nsems = semctl_stat_nsems(hid).unwrap_or(nsems);
    let user = ctx.pick_caller();
    compare_getall(ctx, "", (hid, eid), nsems, user);
}

fn setval(ctx: &mut Ctx, st: &State) {
    let (hid, eid, nsems) = pick_id(ctx, st);
    let semnum = ctx.rng.range(-1, nsems as i64) as i32;
    let val = *ctx.rng.pick(&[-1, 0, 0, 1, 2, 3, 5, 32767, 32768]);
    let user = ctx.pick_caller();
    compare_setval(ctx, "", (hid, eid), semnum, val, user);
}

fn setall(ctx: &mut Ctx, st: &State) {
    let (hid, eid, nsems) = pick_id(ctx, st);
    let mut vals: Vec<u16> = (0..nsems.max(64))
        .map(|_| ctx.rng.below(4) as u16)
        .collect();
    if ctx.rng.chance(1, 6) {
        let i = ctx.rng.below(nsems as u64) as usize;
        vals[i] = *ctx.rng.pick(&[32767u16, 32768, 65535]);
    }
    let user = ctx.pick_caller();
    let h = as_user(user, || {
        // SAFETY: the buffer holds at least nsems values and outlives the call.
        result(unsafe { libc::syscall(libc::SYS_semctl, hid, 0, SETALL, vals.as_ptr()) })
    })
    .map(|r| r as i32);
    let e = ctx
        .ns
        .semctl(ctx.cred(user), eid, 0, SETALL, SemctlArg::Array(&vals))
        .map(|o| o.ret());
    ctx.check(
        &format!(
            "semctl({hid}, SETALL {:?}, user {user})",
            &vals[..nsems.min(8)]
        ),
        &h,
        &e,
    );
}

fn ipc_set(ctx: &mut Ctx, st: &State) {
    let (hid, eid, _) = pick_id(ctx, st);
    let uid = *ctx.rng.pick(&[0, super::USER_UID]);
    let gid = *ctx.rng.pick(&[0, super::USER_GID]);
    let mode = *ctx.rng.pick(&MODES) as u32 | if ctx.rng.chance(1, 4) { 0o7000 } else { 0 };
    let user = ctx.pick_caller();
    // SAFETY: a zeroed semid_ds is a valid buffer.
    let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
    ds.sem_perm.uid = uid;
    ds.sem_perm.gid = gid;
    ds.sem_perm.mode = mode as u16;
    let h = as_user(user, || {
        // SAFETY: the buffer outlives the call.
        result(unsafe { libc::syscall(libc::SYS_semctl, hid, 0, IPC_SET, &mut ds as *mut _) })
    })
    .map(|r| r as i32);
    let e = ctx
        .ns
        .semctl(
            ctx.cred(user),
            eid,
            0,
            IPC_SET,
            SemctlArg::Set { uid, gid, mode },
        )
        .map(|o| o.ret());
    ctx.check(
        &format!("semctl({hid}, IPC_SET {uid}/{gid}/{mode:o}, user {user})"),
        &h,
        &e,
    );
}

fn rmid(ctx: &mut Ctx, st: &mut State) {
    let (hid, eid, _) = pick_id(ctx, st);
    let user = ctx.pick_caller();
    // SAFETY: integer arguments only.
    let h = as_user(user, || {
        result(unsafe { libc::syscall(libc::SYS_semctl, hid, 0, IPC_RMID, 0usize) })
    })
    .map(|r| r as i32);
    let e = ctx
        .ns
        .semctl(ctx.cred(user), eid, 0, IPC_RMID, SemctlArg::None)
        .map(|o| o.ret());
    ctx.check(&format!("semctl({hid}, IPC_RMID, user {user})"), &h, &e);
    if h.is_ok() {
        st.live.retain(|l| l.0 != hid);
        st.dead.push(hid);
    }
}

/// Changes the namespace's sem limits on both sides (only in a private namespace), so that
/// E2BIG, EINVAL and the ENOSPC paths of semget meet real limits.
fn limits(ctx: &mut Ctx) {
    let semmsl = *ctx.rng.pick(&[32000, 250, 4]);
    let semmns = *ctx.rng.pick(&[1_024_000_000, 32000, 20]);
    let semopm = *ctx.rng.pick(&[500, 32, 3]);
    let semmni = *ctx.rng.pick(&[32000, 128, 8]);
    let text = if ctx.rng.chance(1, 6) {
        // Texts the kernel parses its own way: values stored one by one before a bad one,
        // SEMMNI alone put back on ERANGE, octal and hex, extra numbers ignored.
        ctx.rng
            .pick(&[
                "250 32000 x",
                "250 32000 32 -1",
                "250 32000 32 32769",
                "0372 0x7d00 040",
                "250 32000 32 128 99",
                "+250",
                "",
            ])
            .to_string()
    } else {
        format!("{semmsl} {semmns} {semopm} {semmni}")
    };
    let h = std::fs::write("/proc/sys/kernel/sem", &text)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)));
    let e = ctx
        .ns
        .sysctl_write(&ctx.root, uipc::ipc::Sysctl::Sem, &text);
    ctx.check(&format!("write kernel.sem {text:?}"), &h, &e);
    let host_now = std::fs::read_to_string("/proc/sys/kernel/sem").unwrap_or_default();
    let engine_now = ctx.ns.sysctl_read(uipc::ipc::Sysctl::Sem);
    ctx.check("read kernel.sem", &host_now.trim(), &engine_now.as_str());
}
