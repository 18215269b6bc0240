//! msg operations for `uipc conform ipc`. Keys: `ctx.key(1, n)`.
//!
//! Each step draws one call (msgget, msgsnd, msgrcv in every selection mode with and
//! without MSG_COPY / MSG_NOERROR / MSG_EXCEPT, msgctl with every command), valid or not
//! (stale and negative ids, bad sizes and types, the unprivileged caller), applies it to the
//! host with raw libc calls and to the engine, and compares the results. Calls that could
//! sleep always carry IPC_NOWAIT, so the single-threaded harness never blocks.
//!
//! Host and engine ids are kept in pairs; they should be equal (both namespaces start empty
//! and allocate alike), and msgget compares them. Times are compared only as "set or not".

use super::host::{as_user, effective_caps, result};
use super::{Ctx, KEYS_PER_TYPE, USER_GID, USER_UID};
use std::cell::RefCell;
use uipc::ipc::consts::{
    IPC_CREAT, IPC_EXCL, IPC_INFO, IPC_NOWAIT, IPC_PRIVATE, IPC_RMID, IPC_SET, IPC_STAT, MSG_COPY,
    MSG_EXCEPT, MSG_INFO, MSG_NOERROR, MSG_STAT, MSG_STAT_ANY,
};
use uipc::ipc::msg::{MsgInfo, MsgctlArg, MsgctlOut, MsqidDs, MsqidSet};
use uipc::ipc::{IpcPermStat, Sysctl};
use uipc::{Cred, Errno, WaitCtx};

/// Type base of msg keys.
const BASE: i32 = 1;

#[derive(Default)]
struct State {
    /// Live queues: (host id, engine id).
    live: Vec<(i32, i32)>,
    /// Removed queues, for stale-id calls.
    dead: Vec<(i32, i32)>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Draws one msg operation, applies it to the host and the engine, and compares.
pub fn step(ctx: &mut Ctx) {
    match ctx.rng.below(100) {
        0..=11 => op_get(ctx),
        12..=46 => op_snd(ctx),
        47..=71 => op_rcv(ctx),
        72..=83 => op_stat(ctx),
        84..=88 => op_set(ctx),
        89..=92 => op_rmid(ctx),
        93..=98 => op_info_or_bad(ctx),
        _ => op_sysctl(ctx),
    }
}

/// The engine identity for the caller. Root gets the host's real effective capabilities:
/// a container may withhold some (often CAP_SYS_RESOURCE, which IPC_SET's qbytes rule reads).
fn cred(ctx: &Ctx, user: bool) -> Cred {
    let mut cred = ctx.cred(user).clone();
    if !user {
        cred.caps = effective_caps();
    }
    cred
}

/// A (host, engine) id pair: mostly live, sometimes negative, stale or never used.
fn pick_id(ctx: &mut Ctx) -> (i32, i32) {
    let (live, dead) = STATE.with(|s| {
        let s = s.borrow();
        (s.live.clone(), s.dead.clone())
    });
    if !live.is_empty() && ctx.rng.chance(17, 20) {
        return *ctx.rng.pick(&live);
    }
    match ctx.rng.below(4) {
        0 => (-1, -1),
        1 if !dead.is_empty() => *ctx.rng.pick(&dead),
        2 if !live.is_empty() => {
            let (h, e) = *ctx.rng.pick(&live);
            (h + 32768, e + 32768)
        }
        _ => {
            let id = ctx.rng.range(0, 70) as i32;
            (id, id)
        }
    }
}

fn op_get(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let key = if ctx.rng.chance(1, 8) {
        IPC_PRIVATE
    } else {
        let n = ctx.rng.below(KEYS_PER_TYPE as u64) as i32;
        ctx.key(BASE, n)
    };
    let mut flag = *ctx.rng.pick(&[0o600, 0o644, 0o666, 0o400, 0o200, 0o620, 0]);
    if ctx.rng.chance(3, 4) {
        flag |= IPC_CREAT;
    }
    if ctx.rng.chance(1, 6) {
        flag |= IPC_EXCL;
    }
    // SAFETY: integer arguments only.
    let host = as_user(user, || result(unsafe { libc::msgget(key, flag) } as i64));
    if let Ok(id) = host {
        super::host::remember(super::host::Kind::Msg, id as i32);
    }
    ctx.align_next_id(Sysctl::MsgNextId, &host.map(|id| id as i32));
    let engine = ctx.ns.msgget(&cred(ctx, user), key, flag).map(i64::from);
    let op = format!("msgget(key {key}, {flag:#o}) user={user}");
    ctx.check(&op, &host, &engine);
    if let (Ok(h), Ok(e)) = (host, engine) {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            let pair = (h as i32, e as i32);
            if !s.live.contains(&pair) {
                s.live.push(pair);
            }
        });
    }
}

fn host_msgsnd(id: i32, mtype: i64, text: &[u8], flags: i32) -> Result<i64, Errno> {
    let mut buf = vec![0i64; 1 + text.len().div_ceil(8)];
    buf[0] = mtype;
    // SAFETY: `buf` holds 8 + text.len() bytes; the copy stays inside it.
    unsafe {
        std::ptr::copy_nonoverlapping(
            text.as_ptr(),
            buf.as_mut_ptr().add(1).cast::<u8>(),
            text.len(),
        );
        result(libc::msgsnd(id, buf.as_ptr().cast(), text.len(), flags) as i64)
    }
}

fn host_msgrcv(id: i32, maxsize: i64, msgtyp: i64, flags: i32) -> Result<(i64, Vec<u8>), Errno> {
    // The kernel copies at most min(maxsize, message length <= 8192) bytes.
    let room = maxsize.clamp(0, 9000) as usize;
    let mut buf = vec![0i64; 2 + room.div_ceil(8)];
    // SAFETY: `buf` has 8 + room bytes, and the kernel writes at most 8 + min(maxsize,
    // message length) bytes, which is within it.
    let n = unsafe {
        libc::msgrcv(
            id,
            buf.as_mut_ptr().cast(),
            maxsize as usize,
            msgtyp as libc::c_long,
            flags,
        )
    };
    let n = result(n as i64)? as usize;
    // SAFETY: the kernel wrote n bytes after the mtype; n <= room.
    let text = unsafe { std::slice::from_raw_parts(buf.as_ptr().add(1).cast::<u8>(), n) };
    Ok((buf[0], text.to_vec()))
}

fn op_snd(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let (hid, eid) = pick_id(ctx);
    let mtype = *ctx.rng.pick(&[1, 1, 2, 2, 3, 4, 5, 7, 0, -1, i64::MAX]);
    let len = *ctx
        .rng
        .pick(&[0usize, 1, 5, 5, 17, 64, 300, 1000, 4000, 8192, 8193]);
    let first = ctx.rng.below(256) as u8;
    let text: Vec<u8> = (0..len).map(|i| first.wrapping_add(i as u8)).collect();
    let flags = IPC_NOWAIT;
    let host = as_user(user, || host_msgsnd(hid, mtype, &text, flags));
    let engine = ctx
        .ns
        .msgsnd(
            &cred(ctx, user),
            eid,
            mtype,
            &text,
            flags,
            &WaitCtx::FOREVER,
        )
        .map(|()| 0i64);
    let op = format!("msgsnd({eid}, type {mtype}, {len} bytes) user={user}");
    ctx.check(&op, &host, &engine);
}

fn op_rcv(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let (hid, eid) = pick_id(ctx);
    let maxsize = *ctx.rng.pick(&[-1i64, 0, 4, 5, 64, 300, 8192, 1 << 40]);
    let mut msgtyp = *ctx
        .rng
        .pick(&[0i64, 0, 1, 2, 3, 5, 6, -1, -2, -3, -5, i64::MIN]);
    let mut flags = IPC_NOWAIT;
    if ctx.rng.chance(1, 4) {
        flags |= MSG_NOERROR;
    }
    if ctx.rng.chance(1, 5) {
        flags |= MSG_EXCEPT;
    }
    if ctx.rng.chance(1, 5) {
        flags |= MSG_COPY;
        msgtyp = ctx.rng.range(-1, 5);
        if ctx.rng.chance(1, 6) {
            flags &= !IPC_NOWAIT; // EINVAL before any lookup: never blocks.
        }
    }
    let host = as_user(user, || host_msgrcv(hid, maxsize, msgtyp, flags));
    let engine = ctx.ns.msgrcv(
        &cred(ctx, user),
        eid,
        maxsize,
        msgtyp,
        flags,
        &WaitCtx::FOREVER,
    );
    let op = format!("msgrcv({eid}, max {maxsize}, typ {msgtyp}, {flags:#o}) user={user}");
    ctx.check(&op, &host, &engine);
}

/// A stat buffer with times reduced to "set or not".
fn masked(mut ds: MsqidDs) -> MsqidDs {
    ds.stime = i64::from(ds.stime != 0);
    ds.rtime = i64::from(ds.rtime != 0);
    ds.ctime = i64::from(ds.ctime != 0);
    ds
}

fn host_ctl(id: i32, cmd: i32, buf: &mut libc::msqid_ds) -> Result<i64, Errno> {
    // SAFETY: `buf` is a valid msqid64_ds (the x86-64 glibc layout is the kernel's), large
    // enough for the msginfo the info commands write.
    result(unsafe {
        libc::syscall(
            libc::SYS_msgctl,
            id as libc::c_long,
            cmd as libc::c_long,
            buf as *mut libc::msqid_ds,
        )
    })
}

fn from_host(b: &libc::msqid_ds) -> MsqidDs {
    masked(MsqidDs {
        perm: IpcPermStat {
            key: b.msg_perm.__key,
            uid: b.msg_perm.uid,
            gid: b.msg_perm.gid,
            cuid: b.msg_perm.cuid,
            cgid: b.msg_perm.cgid,
            mode: u32::from(b.msg_perm.mode),
            seq: u32::from(b.msg_perm.__seq),
        },
        stime: b.msg_stime,
        rtime: b.msg_rtime,
        ctime: b.msg_ctime,
        cbytes: b.__msg_cbytes,
        qnum: b.msg_qnum,
        qbytes: b.msg_qbytes,
        lspid: b.msg_lspid,
        lrpid: b.msg_lrpid,
    })
}

fn zeroed_ds() -> libc::msqid_ds {
    // SAFETY: msqid_ds is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

fn op_stat(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let (hid, eid) = pick_id(ctx);
    let cmd = *ctx.rng.pick(&[IPC_STAT, IPC_STAT, MSG_STAT, MSG_STAT_ANY]);
    let (hid, eid) = if cmd != IPC_STAT && ctx.rng.chance(2, 3) {
        (hid & 0x7fff, eid & 0x7fff)
    } else {
        (hid, eid)
    };
    let mut buf = zeroed_ds();
    let host = as_user(user, || host_ctl(hid, cmd, &mut buf)).map(|r| (r as i32, from_host(&buf)));
    let engine = ctx
        .ns
        .msgctl(&cred(ctx, user), eid, cmd, MsgctlArg::None)
        .map(|out| match out {
            MsgctlOut::Stat { ret, ds } => (ret, masked(ds)),
            other => (other.ret(), MsqidDs::default()),
        });
    let op = format!("msgctl({eid}, cmd {cmd}) user={user}");
    ctx.check(&op, &host, &engine);
}

fn op_set(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let (hid, eid) = pick_id(ctx);
    let set = MsqidSet {
        uid: *ctx.rng.pick(&[0, USER_UID, USER_UID, u32::MAX]),
        gid: *ctx.rng.pick(&[0, USER_GID]),
        mode: *ctx.rng.pick(&[0o600, 0o644, 0o666, 0o622, 0o400, 0o1777]),
        qbytes: *ctx
            .rng
            .pick(&[0u64, 1, 3, 100, 8192, 16384, 16384, 16385, 65536]),
    };
    let mut buf = zeroed_ds();
    buf.msg_perm.uid = set.uid;
    buf.msg_perm.gid = set.gid;
    buf.msg_perm.mode = set.mode as libc::c_ushort;
    buf.msg_qbytes = set.qbytes;
    let host = as_user(user, || host_ctl(hid, IPC_SET, &mut buf));
    let engine = ctx
        .ns
        .msgctl(&cred(ctx, user), eid, IPC_SET, MsgctlArg::Set(set))
        .map(|o| i64::from(o.ret()));
    let op = format!("msgctl({eid}, IPC_SET {set:?}) user={user}");
    ctx.check(&op, &host, &engine);
}

fn op_rmid(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let (hid, eid) = pick_id(ctx);
    let mut buf = zeroed_ds();
    let host = as_user(user, || host_ctl(hid, IPC_RMID, &mut buf));
    let engine = ctx
        .ns
        .msgctl(&cred(ctx, user), eid, IPC_RMID, MsgctlArg::None)
        .map(|o| i64::from(o.ret()));
    ctx.check(
        &format!("msgctl({eid}, IPC_RMID) user={user}"),
        &host,
        &engine,
    );
    if host.is_ok() {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            s.live.retain(|&(h, _)| h != hid);
            s.dead.push((hid, eid));
        });
    }
}

fn op_info_or_bad(ctx: &mut Ctx) {
    let user = ctx.pick_caller();
    let (hid, eid) = pick_id(ctx);
    let cmd = *ctx.rng.pick(&[IPC_INFO, MSG_INFO, MSG_INFO, 99, 14, -1]);
    let mut buf = zeroed_ds();
    let host = as_user(user, || host_ctl(hid, cmd, &mut buf)).map(|r| {
        // SAFETY: the info commands wrote a msginfo at the start of the buffer, which is larger.
        let i = unsafe { &*(&buf as *const libc::msqid_ds).cast::<libc::msginfo>() };
        let info = MsgInfo {
            msgpool: i.msgpool,
            msgmap: i.msgmap,
            msgmax: i.msgmax,
            msgmnb: i.msgmnb,
            msgmni: i.msgmni,
            msgssz: i.msgssz,
            msgtql: i.msgtql,
            msgseg: i.msgseg,
        };
        (r as i32, info)
    });
    let engine = ctx
        .ns
        .msgctl(&cred(ctx, user), eid, cmd, MsgctlArg::None)
        .map(|o| match o {
            MsgctlOut::Info { max_idx, info } => (max_idx, info),
            other => (other.ret(), MsgInfo::default()),
        });
    ctx.check(
        &format!("msgctl({eid}, cmd {cmd}) user={user}"),
        &host,
        &engine,
    );
}

/// Changes msgmax, msgmnb or msgmni on both sides (only inside the run's own namespace): new
/// queues take msgmnb, IPC_SET's CAP_SYS_RESOURCE threshold and msgsnd's size check move with
/// them, and msgmni bounds msgget. Some texts are ones the kernel parses its own way.
fn op_sysctl(ctx: &mut Ctx) {
    if !ctx.private_ns {
        return;
    }
    let (name, which, value) = match ctx.rng.below(5) {
        0 | 1 => {
            let v = *ctx
                .rng
                .pick(&["0", "100", "8192", "8192", "20000", "0x2000", "-0"]);
            ("msgmax", Sysctl::MsgMax, v)
        }
        2 | 3 => {
            let v = *ctx
                .rng
                .pick(&["0", "100", "16384", "16384", "20000", "040000 1", "+1"]);
            ("msgmnb", Sysctl::MsgMnb, v)
        }
        _ => {
            // Few queues make msgget's ENOSPC reachable; 32769 is past IPCMNI (EINVAL).
            let v = *ctx.rng.pick(&["4", "32000", "32000", "32769", "-1"]);
            ("msgmni", Sysctl::MsgMni, v)
        }
    };
    super::write_sysctl_both(ctx, name, which, value);
}
