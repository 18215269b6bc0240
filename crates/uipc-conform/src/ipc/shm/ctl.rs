//! The shmctl, sysctl and process-lifecycle operations of the shm conform step.

use super::{engine_cred, pick_id, State, BASE};
use crate::ipc::host::{as_user, errno, result};
use crate::ipc::Ctx;
use uipc::ipc::consts::*;
use uipc::ipc::shm::{ShmSet, ShmctlOut, ShmidDs};
use uipc::ipc::{IpcPermStat, Sysctl};
use uipc::{Cred, Errno};

type R<T> = Result<T, Errno>;

pub(super) fn host_stat(id: i32, cmd: i32) -> R<(i32, ShmidDs)> {
    // SAFETY: shmid_ds is plain data; zeroed is a valid value.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: `ds` is a valid buffer of the type the kernel writes.
    let r = result(unsafe { libc::shmctl(id, cmd, &mut ds) } as i64)?;
    let p = &ds.shm_perm;
    Ok((
        r as i32,
        ShmidDs {
            perm: IpcPermStat {
                key: p.__key,
                uid: p.uid,
                gid: p.gid,
                cuid: p.cuid,
                cgid: p.cgid,
                mode: u32::from(p.mode),
                seq: u32::from(p.__seq),
            },
            segsz: ds.shm_segsz as u64,
            atime: i64::from(ds.shm_atime != 0),
            dtime: i64::from(ds.shm_dtime != 0),
            ctime: i64::from(ds.shm_ctime != 0),
            cpid: ds.shm_cpid,
            lpid: ds.shm_lpid,
            nattch: ds.shm_nattch,
        },
    ))
}

pub(super) fn op_stat(ctx: &mut Ctx, st: &mut State) {
    let user = ctx.pick_caller();
    let cmd = *ctx.rng.pick(&[IPC_STAT, IPC_STAT, SHM_STAT, SHM_STAT_ANY]);
    let id = if cmd == IPC_STAT {
        pick_id(ctx, st)
    } else {
        ctx.rng.range(-1, 8) as i32
    };
    let host = as_user(user, || host_stat(id, cmd));
    let eng = ctx
        .ns
        .shmctl(&engine_cred(ctx, user), id, cmd, None)
        .map(|o| match o {
            ShmctlOut::Stat(r, mut ds) => {
                ds.atime = i64::from(ds.atime != 0);
                ds.dtime = i64::from(ds.dtime != 0);
                ds.ctime = i64::from(ds.ctime != 0);
                ds.perm.seq &= 0xffff;
                (r, ds)
            }
            other => (other.ret(), ShmidDs::default()),
        });
    ctx.check(
        &format!("shmctl({id}, stat {cmd}) user={user}"),
        &host,
        &eng,
    );
}

pub(super) fn op_set(ctx: &mut Ctx, st: &mut State) {
    let user = ctx.pick_caller();
    let id = pick_id(ctx, st);
    let set = ShmSet {
        uid: *ctx.rng.pick(&[0, crate::ipc::USER_UID]),
        gid: *ctx.rng.pick(&[0, crate::ipc::USER_GID]),
        mode: ctx.rng.below(0o10000) as u32,
    };
    let host = as_user(user, || {
        // SAFETY: zeroed shmid_ds is valid; IPC_SET reads only perm uid/gid/mode.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        ds.shm_perm.uid = set.uid;
        ds.shm_perm.gid = set.gid;
        ds.shm_perm.mode = set.mode as u16;
        // SAFETY: valid buffer.
        result(unsafe { libc::shmctl(id, IPC_SET, &mut ds) } as i64).map(|_| ())
    });
    let eng = ctx
        .ns
        .shmctl(&engine_cred(ctx, user), id, IPC_SET, Some(&set))
        .map(|_| ());
    ctx.check(
        &format!("shmctl({id}, IPC_SET, {set:?}) user={user}"),
        &host,
        &eng,
    );
}

/// A shmctl command that takes no buffer (IPC_RMID, SHM_LOCK, SHM_UNLOCK) on the host.
fn host_plain(id: i32, cmd: i32) -> R<()> {
    // SAFETY: integer arguments; these commands do not use the buffer, so NULL is fine.
    result(unsafe { libc::shmctl(id, cmd, std::ptr::null_mut()) } as i64).map(|_| ())
}

/// A shmctl command that takes no buffer, by `user` on `id`, on the host and the engine.
fn check_plain(ctx: &mut Ctx, user: bool, id: i32, cmd: i32, what: &str) {
    let host = as_user(user, || host_plain(id, cmd));
    let eng = ctx
        .ns
        .shmctl(&engine_cred(ctx, user), id, cmd, None)
        .map(|_| ());
    ctx.check(&format!("shmctl({id}, {what}) user={user}"), &host, &eng);
}

pub(super) fn op_rmid(ctx: &mut Ctx, st: &mut State) {
    let user = ctx.pick_caller();
    let id = pick_id(ctx, st);
    check_plain(ctx, user, id, IPC_RMID, "IPC_RMID");
}

pub(super) fn op_lock(ctx: &mut Ctx, st: &mut State) {
    let user = ctx.pick_caller();
    let id = pick_id(ctx, st);
    let cmd = *ctx.rng.pick(&[SHM_LOCK, SHM_UNLOCK]);
    check_plain(ctx, user, id, cmd, &format!("lock {cmd}"));
}

/// The SHM_LOCK charge: the user locks a large and a small segment of its own (charged to
/// its real uid, 0 here, together with root's locks), then unlocks and removes them.
pub(super) fn op_lock_charge(ctx: &mut Ctx) {
    let sizes = [16u64 << 20, 4096];
    let cred = engine_cred(ctx, true);
    for size in sizes {
        let host = as_user(true, || {
            // SAFETY: integer arguments.
            let id = result(unsafe { libc::shmget(IPC_PRIVATE, size as usize, 0o600) } as i64)?;
            let id = id as i32;
            Ok((
                id,
                host_plain(id, SHM_LOCK),
                host_plain(id, SHM_UNLOCK),
                host_plain(id, IPC_RMID),
            ))
        });
        ctx.align_next_id(Sysctl::ShmNextId, &host.map(|h| h.0));
        let ns = &ctx.ns;
        let eng = ns.shmget(&cred, IPC_PRIVATE, size, 0o600).map(|id| {
            let run = |cmd| ns.shmctl(&cred, id, cmd, None).map(|_| ());
            (id, run(SHM_LOCK), run(SHM_UNLOCK), run(IPC_RMID))
        });
        ctx.check(
            &format!("user lock/unlock/rmid of {size} bytes"),
            &host,
            &eng,
        );
    }
}

pub(super) fn op_info(ctx: &mut Ctx) {
    let cmd = *ctx.rng.pick(&[IPC_INFO, SHM_INFO]);
    let id = *ctx.rng.pick(&[0, 5, -1]);
    let mut buf = [0u64; 16];
    // SAFETY: 128 bytes covers both shminfo64 and shm_info.
    let host = result(unsafe { libc::shmctl(id, cmd, buf.as_mut_ptr().cast()) } as i64);
    let host = host.map(|r| (r as i32, buf[..6].to_vec()));
    let eng = ctx.ns.shmctl(&ctx.root, id, cmd, None).map(|o| match o {
        ShmctlOut::Info(r, i) => (r, vec![i.shmmax, i.shmmin, i.shmmni, i.shmseg, i.shmall, 0]),
        ShmctlOut::Usage(r, u) => (
            r,
            vec![
                u.used_ids as u32 as u64,
                u.shm_tot,
                u.shm_rss,
                u.shm_swp,
                u.swap_attempts,
                u.swap_successes,
            ],
        ),
        other => (other.ret(), vec![]),
    });
    ctx.check(&format!("shmctl({id}, info {cmd})"), &host, &eng);
}

pub(super) fn op_bad_cmd(ctx: &mut Ctx, st: &mut State) {
    let id = pick_id(ctx, st);
    let cmd = *ctx.rng.pick(&[-1, 4, 10, 16, 99, IPC_STAT | IPC_64]);
    let mut buf = [0u64; 16];
    // SAFETY: a 128-byte buffer for any command that would write one.
    let host = result(unsafe { libc::shmctl(id, cmd, buf.as_mut_ptr().cast()) } as i64);
    let eng = ctx
        .ns
        .shmctl(&ctx.root, id, cmd, None)
        .map(|o| o.ret() as i64);
    ctx.check(&format!("shmctl({id}, cmd {cmd})"), &host, &eng);
}

pub(super) fn op_sysctl(ctx: &mut Ctx, _st: &mut State) {
    if !ctx.private_ns {
        return;
    }
    let (name, which, value) = match ctx.rng.below(4) {
        0 => (
            "shmmni",
            Sysctl::ShmMni,
            *ctx.rng.pick(&["3", "8", "4096", "010", "32769", "-0"]),
        ),
        1 => (
            "shmall",
            Sysctl::ShmAll,
            *ctx.rng
                .pick(&["40", "18446744073692774399", "0x28", "-0", "40 x"]),
        ),
        2 => (
            "shmmax",
            Sysctl::ShmMax,
            *ctx.rng.pick(&[
                "30000",
                "18446744073692774399",
                "+30000",
                "18446744073709551616",
            ]),
        ),
        _ => (
            "shm_rmid_forced",
            Sysctl::ShmRmidForced,
            *ctx.rng.pick(&["0", "1", "1 2", "2", " 0\n"]),
        ),
    };
    crate::ipc::write_sysctl_both(ctx, name, which, value);
}

/// A child process creates a segment (attaching and touching it sometimes) and exits: the
/// orphan and `shm_rmid_forced` rules on both sides.
pub(super) fn op_forked_creator(ctx: &mut Ctx, st: &mut State) {
    let n = ctx.rng.below(6) as i32;
    let key = ctx.key(BASE, n);
    let size = *ctx.rng.pick(&[100u64, 4096, 9000]);
    let attach = ctx.rng.chance(1, 2);
    // SAFETY: the child only makes system calls and _exits; the harness is single threaded.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: raw calls, then _exit without running any destructor.
        unsafe {
            let id = libc::shmget(key, size as usize, IPC_CREAT | 0o600);
            let mut code = if id < 0 { errno() } else { 0 };
            if id >= 0 && attach {
                let p = libc::shmat(id, std::ptr::null(), 0);
                if p as isize == -1 {
                    code = 100;
                } else {
                    *(p as *mut u8) = 1;
                }
            }
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    ctx.note_child(pid);
    let host_code = libc::WEXITSTATUS(status);
    let child = Cred {
        tid: pid,
        tgid: uipc::Tgid::new(pid),
        ..ctx.root.clone()
    };
    // The child inherited this process's attachments.
    ctx.ns.process_fork(ctx.root.tgid.get(), pid);
    if !ctx.private_ns {
        // SAFETY: integer arguments: looks the child's segment up, creating nothing.
        let host_id = result(unsafe { libc::shmget(key, 0, 0) } as i64).map(|id| id as i32);
        if let Ok(id) = host_id {
            super::super::host::remember(super::super::host::Kind::Shm, id);
        }
        ctx.align_next_id(Sysctl::ShmNextId, &host_id);
    }
    let eng_code = match ctx.ns.shmget(&child, key, size, IPC_CREAT | 0o600) {
        Err(e) => e.raw(),
        Ok(id) => {
            if !st.ids.contains(&id) {
                st.ids.push(id);
            }
            if attach {
                match ctx.ns.shmat(&child, id, 0, 0) {
                    Ok(a) => a.write(0, &[1]).map_or(100, |_| 0),
                    Err(_) => 100,
                }
            } else {
                0
            }
        }
    };
    ctx.ns.process_exit(pid);
    ctx.check(
        &format!("child {pid}: shmget({key:#x}, {size}) attach={attach}; exit"),
        &host_code,
        &eng_code,
    );
}
