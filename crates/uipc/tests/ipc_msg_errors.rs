//! msgget / msgsnd / msgrcv / msgctl error paths, in Linux's order, and msgctl's results.

mod common;

use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidDs, MsqidSet};
use uipc::ipc::{IpcNamespace, Sysctl};
use uipc::{Cap, CapSet, Cred, Errno, WaitCtx};

const F: WaitCtx<'static> = WaitCtx::FOREVER;

fn root() -> Cred {
    Cred::root(100)
}
fn user() -> Cred {
    Cred::user(200, 1000, 1000)
}

fn stat(ns: &IpcNamespace, cred: &Cred, id: i32) -> Result<MsqidDs, Errno> {
    match ns.msgctl(cred, id, IPC_STAT, MsgctlArg::None)? {
        MsgctlOut::Stat { ret: 0, ds } => Ok(ds),
        other => panic!("IPC_STAT returned {other:?}"),
    }
}

fn set(qbytes: u64, uid: u32, mode: u32) -> MsgctlArg {
    MsgctlArg::Set(MsqidSet {
        uid,
        gid: 0,
        mode,
        qbytes,
    })
}

#[test]
fn msgget_follows_ipcget_order_and_msgmni() {
    let ns = IpcNamespace::new();
    assert_eq!(ns.msgget(&root(), 5, 0), Err(Errno::ENOENT));
    let id = ns.msgget(&root(), 5, IPC_CREAT | 0o600).unwrap();
    assert_eq!(
        ns.msgget(&root(), 5, IPC_CREAT | IPC_EXCL),
        Err(Errno::EEXIST)
    );
    assert_eq!(ns.msgget(&user(), 5, 0o400), Err(Errno::EACCES));
    assert_eq!(ns.msgget(&user(), 5, 0), Ok(id), "asking for nothing opens");
    ns.sysctl_write(&root(), Sysctl::MsgMni, "1").unwrap();
    assert_eq!(ns.msgget(&root(), 6, IPC_CREAT), Err(Errno::ENOSPC));
    assert_eq!(ns.msgget(&root(), IPC_PRIVATE, 0), Err(Errno::ENOSPC));
    assert_eq!(
        ns.msgget(&root(), 5, IPC_CREAT),
        Ok(id),
        "existing key still opens"
    );
}

#[test]
fn new_queue_takes_msgmnb_and_the_clock() {
    let (_clock, ns) = common::ns_with_clock(1_700_000_000);
    ns.sysctl_write(&root(), Sysctl::MsgMnb, "777").unwrap();
    let id = ns.msgget(&user(), 42, IPC_CREAT | 0o640).unwrap();
    let ds = stat(&ns, &root(), id).unwrap();
    assert_eq!(ds.qbytes, 777);
    assert_eq!(ds.ctime, 1_700_000_000);
    assert_eq!((ds.stime, ds.rtime, ds.lspid, ds.lrpid), (0, 0, 0, 0));
    assert_eq!(
        (ds.perm.uid, ds.perm.cuid, ds.perm.gid, ds.perm.mode),
        (1000, 1000, 1000, 0o640)
    );
    assert_eq!(ds.perm.key, 42);
}

#[test]
fn msgsnd_checks_size_and_type_before_the_id_and_permission() {
    let ns = IpcNamespace::new();
    let id = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    let big = vec![0u8; 8193];
    assert_eq!(ns.msgsnd(&user(), id, 0, &big, 0, &F), Err(Errno::EINVAL));
    assert_eq!(ns.msgsnd(&user(), -1, 1, b"", 0, &F), Err(Errno::EINVAL));
    assert_eq!(
        ns.msgsnd(&user(), id, 0, b"", 0, &F),
        Err(Errno::EINVAL),
        "mtype before EACCES"
    );
    assert_eq!(
        ns.msgsnd(&user(), id + 1, 1, b"", 0, &F),
        Err(Errno::EINVAL)
    );
    assert_eq!(ns.msgsnd(&user(), id, 1, b"", 0, &F), Err(Errno::EACCES));
    assert_eq!(ns.msgsnd(&root(), id, 1, &big[..8192], 0, &F), Ok(()));
    ns.sysctl_write(&root(), Sysctl::MsgMax, "10").unwrap();
    assert_eq!(
        ns.msgsnd(&root(), id, 1, &[0; 11], 0, &F),
        Err(Errno::EINVAL)
    );
}

#[test]
fn msgrcv_argument_checks_come_first() {
    let ns = IpcNamespace::new();
    let id = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    let rcv = |c: &Cred, id, max, typ, fl| ns.msgrcv(c, id, max, typ, fl, &F);
    assert_eq!(rcv(&user(), -1, 10, 0, IPC_NOWAIT), Err(Errno::EINVAL));
    assert_eq!(rcv(&user(), id, -1, 0, IPC_NOWAIT), Err(Errno::EINVAL));
    assert_eq!(
        rcv(&user(), id, 10, 0, MSG_COPY),
        Err(Errno::EINVAL),
        "MSG_COPY needs IPC_NOWAIT"
    );
    assert_eq!(
        rcv(&user(), id, 10, 0, MSG_COPY | IPC_NOWAIT | MSG_EXCEPT),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        rcv(&user(), id + 32768, 10, 0, IPC_NOWAIT),
        Err(Errno::EINVAL)
    );
    assert_eq!(rcv(&user(), id, 10, 0, IPC_NOWAIT), Err(Errno::EACCES));
    assert_eq!(rcv(&root(), id, 10, 0, IPC_NOWAIT), Err(Errno::ENOMSG));
}

#[test]
fn e2big_leaves_the_message_and_msg_noerror_truncates() {
    let ns = IpcNamespace::new();
    let id = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    ns.msgsnd(&root(), id, 4, b"abcdef", 0, &F).unwrap();
    assert_eq!(
        ns.msgrcv(&root(), id, 5, 0, IPC_NOWAIT, &F),
        Err(Errno::E2BIG)
    );
    let ds = stat(&ns, &root(), id).unwrap();
    assert_eq!((ds.qnum, ds.cbytes, ds.lrpid), (1, 6, 0), "still queued");
    assert_eq!(
        ns.msgrcv(&root(), id, 5, 0, IPC_NOWAIT | MSG_COPY | MSG_NOERROR, &F),
        Err(Errno::EINVAL),
        "a copy never truncates"
    );
    assert_eq!(
        ns.msgrcv(&root(), id, 3, 4, MSG_NOERROR | IPC_NOWAIT, &F),
        Ok((4, b"abc".to_vec()))
    );
    let ds = stat(&ns, &root(), id).unwrap();
    assert_eq!((ds.qnum, ds.cbytes, ds.lrpid), (0, 0, 100));
}

#[test]
fn msg_copy_reads_by_position_and_leaves_the_queue_alone() {
    let ns = IpcNamespace::new();
    let id = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    for (t, text) in [(3, "a"), (1, "bb"), (2, "ccc")] {
        ns.msgsnd(&root(), id, t, text.as_bytes(), 0, &F).unwrap();
    }
    let copy = |pos| ns.msgrcv(&root(), id, 100, pos, MSG_COPY | IPC_NOWAIT, &F);
    assert_eq!(copy(1), Ok((1, b"bb".to_vec())));
    assert_eq!(copy(2), Ok((2, b"ccc".to_vec())));
    assert_eq!(copy(3), Err(Errno::ENOMSG));
    assert_eq!(copy(-1), Err(Errno::ENOMSG));
    assert_eq!(
        ns.msgrcv(&root(), id, 1, 2, MSG_COPY | IPC_NOWAIT, &F),
        Err(Errno::E2BIG)
    );
    assert_eq!(stat(&ns, &root(), id).unwrap().qnum, 3);
    assert_eq!(
        stat(&ns, &root(), id).unwrap().lrpid,
        0,
        "a copy is not a receive"
    );
}

#[test]
fn msgctl_rejects_bad_ids_and_commands_and_strips_ipc_64() {
    let ns = IpcNamespace::new();
    let id = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    assert_eq!(
        ns.msgctl(&root(), -1, IPC_INFO, MsgctlArg::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.msgctl(&root(), id, -1, MsgctlArg::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.msgctl(&root(), id, 99, MsgctlArg::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.msgctl(&root(), id, 14, MsgctlArg::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.msgctl(&root(), id, IPC_STAT | IPC_64, MsgctlArg::None)
            .err(),
        Some(Errno::EINVAL),
        "x86-64 does not strip IPC_64"
    );
    assert_eq!(stat(&ns, &root(), id + 32768), Err(Errno::EINVAL));
    assert_eq!(stat(&ns, &user(), id), Err(Errno::EACCES));
}

#[test]
fn msg_stat_takes_an_index_and_stat_any_skips_the_mode_check() {
    let ns = IpcNamespace::new();
    let a = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    ns.msgctl(&root(), a, IPC_RMID, MsgctlArg::None).unwrap();
    let b = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    let idx = b & 0x7fff;
    let ret = |cred: &Cred, cmd, idx| ns.msgctl(cred, idx, cmd, MsgctlArg::None).map(|o| o.ret());
    assert_eq!(ret(&root(), MSG_STAT, idx), Ok(b));
    assert_eq!(
        ret(&root(), MSG_STAT, idx + 32768),
        Ok(b),
        "masked to an index"
    );
    assert_eq!(ret(&user(), MSG_STAT, idx), Err(Errno::EACCES));
    assert_eq!(ret(&user(), MSG_STAT_ANY, idx), Ok(b));
    assert_eq!(ret(&root(), MSG_STAT, idx + 1), Err(Errno::EINVAL));
    assert_eq!(
        ns.msgctl(&root(), a, IPC_RMID, MsgctlArg::None),
        Err(Errno::EINVAL),
        "second RMID"
    );
}

#[test]
fn ipc_set_needs_ownership_and_cap_sys_resource_above_msgmnb() {
    let ns = IpcNamespace::new();
    let id = ns.msgget(&user(), IPC_PRIVATE, 0o600).unwrap();
    let other = Cred::user(300, 2000, 2000);
    assert_eq!(
        ns.msgctl(&other, id, IPC_SET, set(100, 2000, 0o600)),
        Err(Errno::EPERM)
    );
    assert_eq!(
        ns.msgctl(&other, id, IPC_RMID, MsgctlArg::None),
        Err(Errno::EPERM)
    );
    assert_eq!(
        ns.msgctl(&user(), id, IPC_SET, MsgctlArg::None),
        Err(Errno::EFAULT)
    );
    assert_eq!(
        ns.msgctl(&user(), id, IPC_SET, set(16385, 1000, 0o600)),
        Err(Errno::EPERM),
        "raising above msgmnb needs CAP_SYS_RESOURCE"
    );
    assert_eq!(
        ns.msgctl(&user(), id, IPC_SET, set(16384, 1000, 0o600))
            .map(|o| o.ret()),
        Ok(0)
    );
    assert_eq!(
        ns.msgctl(&user(), id, IPC_SET, set(5, 1000, 0o600))
            .map(|o| o.ret()),
        Ok(0)
    );
    let resource = Cred {
        caps: CapSet::EMPTY.with(Cap::SYS_RESOURCE),
        ..user()
    };
    ns.msgctl(&resource, id, IPC_SET, set(100_000, 1000, 0o640))
        .unwrap();
    let admin = Cred {
        caps: CapSet::ALL.without(Cap::SYS_RESOURCE),
        ..Cred::root(1)
    };
    assert_eq!(
        ns.msgctl(&admin, id, IPC_SET, set(100_001, 1000, 0o600)),
        Err(Errno::EPERM)
    );
    assert_eq!(
        ns.msgctl(&admin, id, IPC_SET, set(10, u32::MAX, 0o600)),
        Err(Errno::EINVAL)
    );
    let ds = stat(&ns, &root(), id).unwrap();
    assert_eq!((ds.qbytes, ds.perm.mode), (100_000, 0o640));
    ns.msgctl(&user(), id, IPC_SET, set(10, 2000, 0o666))
        .unwrap();
    assert_eq!(
        ns.msgctl(&other, id, IPC_RMID, MsgctlArg::None)
            .map(|o| o.ret()),
        Ok(0),
        "the new owner may remove"
    );
}

#[test]
fn info_commands_report_limits_and_totals() {
    let ns = IpcNamespace::new();
    let info = |cmd| match ns.msgctl(&user(), 0, cmd, MsgctlArg::None).unwrap() {
        MsgctlOut::Info { max_idx, info } => (max_idx, info),
        other => panic!("{other:?}"),
    };
    let (max, i) = info(IPC_INFO);
    assert_eq!(max, 0);
    assert_eq!(
        (i.msgpool, i.msgmap, i.msgtql, i.msgmax, i.msgmnb, i.msgmni, i.msgssz, i.msgseg),
        (MSGPOOL, MSGMAP, MSGTQL, 8192, 16384, 32000, 16, 0xffff)
    );
    let a = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    let b = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    ns.msgsnd(&root(), a, 1, b"12345", 0, &F).unwrap();
    ns.msgsnd(&root(), b, 1, b"123", 0, &F).unwrap();
    ns.msgsnd(&root(), b, 1, b"", 0, &F).unwrap();
    let (max, i) = info(MSG_INFO);
    assert_eq!((max, i.msgpool, i.msgmap, i.msgtql), (1, 2, 3, 8));
    ns.msgctl(&root(), b, IPC_RMID, MsgctlArg::None).unwrap();
    let (max, i) = info(MSG_INFO);
    assert_eq!((max, i.msgpool, i.msgmap, i.msgtql), (0, 1, 1, 5));
}
