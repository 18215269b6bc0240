//! semget / semop / semctl: every errno path, in Linux's order, and the /proc format.

mod common;

use std::sync::Arc;
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut, Timespec};
use uipc::ipc::{IpcNamespace, NamespaceOptions, Sysctl};
use uipc::{Cred, Errno, ManualClock, WaitCtx};

const NOWAIT: i16 = IPC_NOWAIT as i16;

fn root() -> Cred {
    Cred::root(100)
}
fn user() -> Cred {
    Cred::user(200, 1000, 1000)
}
fn ns_at(secs: i64) -> IpcNamespace {
    IpcNamespace::with_options(NamespaceOptions {
        clock: Arc::new(ManualClock::new(secs)),
        ..Default::default()
    })
}
fn op(ns: &IpcNamespace, c: &Cred, id: i32, sops: &[Sembuf]) -> Result<(), Errno> {
    ns.semop(c, id, sops, &WaitCtx::FOREVER)
}
fn ctl(ns: &IpcNamespace, c: &Cred, id: i32, n: i32, cmd: i32) -> Result<i32, Errno> {
    ns.semctl(c, id, n, cmd, SemctlArg::None).map(|o| o.ret())
}
fn setval(ns: &IpcNamespace, id: i32, n: i32, v: i32) -> Result<i32, Errno> {
    ns.semctl(&root(), id, n, SETVAL, SemctlArg::Val(v))
        .map(|o| o.ret())
}

#[test]
fn semget_checks_nsems_before_the_key_and_in_ipcget_order() {
    let ns = IpcNamespace::new();
    let r = root();
    assert_eq!(ns.semget(&r, 5, -1, IPC_CREAT), Err(Errno::EINVAL));
    assert_eq!(ns.semget(&r, 5, 32001, IPC_CREAT), Err(Errno::EINVAL));
    assert_eq!(ns.semget(&r, 5, 1, 0), Err(Errno::ENOENT));
    assert_eq!(
        ns.semget(&r, 5, 0, IPC_CREAT),
        Err(Errno::EINVAL),
        "0 only opens"
    );
    assert_eq!(ns.semget(&r, IPC_PRIVATE, 0, 0), Err(Errno::EINVAL));
    let id = ns.semget(&r, 5, 3, IPC_CREAT | 0o600).unwrap();
    assert_eq!(ns.semget(&r, 5, 0, 0), Ok(id));
    assert_eq!(ns.semget(&r, 5, 3, IPC_CREAT), Ok(id));
    assert_eq!(
        ns.semget(&r, 5, -1, IPC_CREAT | IPC_EXCL),
        Err(Errno::EINVAL),
        "EINVAL beats EEXIST"
    );
    assert_eq!(
        ns.semget(&r, 5, 1, IPC_CREAT | IPC_EXCL),
        Err(Errno::EEXIST)
    );
    assert_eq!(ns.semget(&r, 5, 4, 0), Err(Errno::EINVAL), "more checks");
    assert_eq!(
        ns.semget(&user(), 5, 4, 0o400),
        Err(Errno::EINVAL),
        "more checks come before ipcperms"
    );
    assert_eq!(ns.semget(&user(), 5, 2, 0o400), Err(Errno::EACCES));
    assert_eq!(
        ns.semget(&user(), 5, 2, 0),
        Ok(id),
        "no mode bits asked, anyone opens"
    );
}

#[test]
fn semget_limits_semmns_and_semmni_give_enospc() {
    let ns = IpcNamespace::new();
    let r = root();
    ns.sysctl_write(&r, Sysctl::Sem, "10 12 5 2").unwrap();
    assert_eq!(ns.semget(&r, 1, 11, IPC_CREAT), Err(Errno::EINVAL));
    let a = ns.semget(&r, 1, 10, IPC_CREAT).unwrap();
    assert_eq!(ns.semget(&r, 2, 3, IPC_CREAT), Err(Errno::ENOSPC), "semmns");
    ns.semget(&r, 2, 2, IPC_CREAT).unwrap();
    assert_eq!(ns.semget(&r, 3, 0, IPC_CREAT), Err(Errno::EINVAL));
    ns.sysctl_write(&r, Sysctl::Sem, "10 100 5 2").unwrap();
    assert_eq!(ns.semget(&r, 3, 1, IPC_CREAT), Err(Errno::ENOSPC), "semmni");
    assert_eq!(ns.semget(&r, 1, 0, 0), Ok(a), "existing keys still open");
    ctl(&ns, &r, a, 0, IPC_RMID).unwrap();
    ns.semget(&r, 3, 1, IPC_CREAT).unwrap();
    let info = ns.semctl(&r, 0, 0, SEM_INFO, SemctlArg::None).unwrap();
    let SemctlOut::Info(_, i) = info else {
        panic!("info")
    };
    assert_eq!((i.semusz, i.semaem), (2, 3), "sets and semaphores in use");
}

#[test]
fn new_set_is_zeroed_with_otime_zero_and_ctime_now() {
    let ns = ns_at(1_000);
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 4, 0o640).unwrap();
    let out = ns.semctl(&r, id, 0, IPC_STAT, SemctlArg::None).unwrap();
    let SemctlOut::Stat(0, ds) = out else {
        panic!("{out:?}")
    };
    assert_eq!((ds.otime, ds.ctime, ds.nsems), (0, 1_000, 4));
    assert_eq!((ds.perm.mode, ds.perm.uid, ds.perm.cuid), (0o640, 0, 0));
    assert_eq!(
        ns.semctl(&r, id, 0, GETALL, SemctlArg::None).unwrap(),
        SemctlOut::All(vec![0; 4])
    );
}

#[test]
fn semop_checks_in_linux_order() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 2, 0o600).unwrap();
    let many = vec![Sembuf::new(0, 0, NOWAIT); 501];
    assert_eq!(op(&ns, &r, -1, &many), Err(Errno::E2BIG), "before the id");
    assert_eq!(op(&ns, &r, id, &many[..500]), Ok(()));
    assert_eq!(op(&ns, &r, id, &[]), Err(Errno::EINVAL));
    let one = [Sembuf::new(0, 1, 0)];
    assert_eq!(op(&ns, &r, -1, &one), Err(Errno::EINVAL));
    for bad in [(-1, 0), (0, -1), (0, 1_000_000_000)] {
        let t = Timespec {
            tv_sec: bad.0,
            tv_nsec: bad.1,
        };
        assert_eq!(
            ns.semtimedop(&r, id, &one, Some(t), &WaitCtx::FOREVER),
            Err(Errno::EINVAL)
        );
    }
    assert_eq!(op(&ns, &r, id + 32768, &one), Err(Errno::EINVAL), "stale");
    assert_eq!(op(&ns, &r, 7, &one), Err(Errno::EINVAL), "unknown");
    let far = [Sembuf::new(0, 1, 0), Sembuf::new(2, 0, 0)];
    assert_eq!(
        op(&ns, &user(), id, &far),
        Err(Errno::EFBIG),
        "EFBIG before EACCES"
    );
    assert_eq!(op(&ns, &user(), id, &one), Err(Errno::EACCES));
    let rid = ns.semget(&r, IPC_PRIVATE, 1, 0o644).unwrap();
    let zero = [Sembuf::new(0, 0, NOWAIT)];
    assert_eq!(op(&ns, &user(), rid, &zero), Ok(()), "read suffices for 0");
    assert_eq!(
        op(
            &ns,
            &user(),
            rid,
            &[Sembuf::new(0, 0, 0), Sembuf::new(0, 1, 0)]
        ),
        Err(Errno::EACCES),
        "any nonzero op needs write"
    );
}

#[test]
fn semop_is_all_or_nothing_with_running_values() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 2, 0o600).unwrap();
    let sops = [
        Sembuf::new(0, 2, 0),
        Sembuf::new(0, -1, 0),
        Sembuf::new(1, 0, 0),
    ];
    op(&ns, &r, id, &sops).unwrap();
    assert_eq!(ctl(&ns, &r, id, 0, GETVAL), Ok(1));
    let blocked = [Sembuf::new(0, 5, 0), Sembuf::new(1, -1, NOWAIT)];
    assert_eq!(op(&ns, &r, id, &blocked), Err(Errno::EAGAIN));
    assert_eq!(ctl(&ns, &r, id, 0, GETVAL), Ok(1), "nothing applied");
    setval(&ns, id, 1, 32767).unwrap();
    let over = [Sembuf::new(0, -1, 0), Sembuf::new(1, 1, 0)];
    assert_eq!(
        op(&ns, &r, id, &over),
        Err(Errno::ERANGE),
        "ERANGE without IPC_NOWAIT, and never sleeps"
    );
    assert_eq!(
        op(&ns, &r, id, &[Sembuf::new(1, 1, NOWAIT)]),
        Err(Errno::ERANGE)
    );
    assert_eq!(ctl(&ns, &r, id, 0, GETVAL), Ok(1));
}

#[test]
fn semop_records_sempid_and_otime_on_success_only() {
    let (clock, ns) = common::ns_with_clock(500);
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 2, 0o666).unwrap();
    clock.advance(10 * 1_000_000_000);
    let u = user();
    op(&ns, &u, id, &[Sembuf::new(1, 1, 0), Sembuf::new(0, 0, 0)]).unwrap();
    assert_eq!(ctl(&ns, &r, id, 0, GETPID), Ok(200));
    assert_eq!(ctl(&ns, &r, id, 1, GETPID), Ok(200));
    let SemctlOut::Stat(_, ds) = ns.semctl(&r, id, 0, IPC_STAT, SemctlArg::None).unwrap() else {
        panic!()
    };
    assert_eq!(ds.otime, 510);
    assert_eq!(
        op(&ns, &r, id, &[Sembuf::new(0, -1, NOWAIT)]),
        Err(Errno::EAGAIN)
    );
    assert_eq!(
        ctl(&ns, &r, id, 0, GETPID),
        Ok(200),
        "failure records nothing"
    );
}

#[test]
fn semctl_generic_errors_and_info() {
    let ns = IpcNamespace::new();
    let r = root();
    assert_eq!(ctl(&ns, &r, -1, 0, IPC_INFO), Err(Errno::EINVAL));
    let SemctlOut::Info(max, i) = ns.semctl(&r, 0, 0, IPC_INFO, SemctlArg::None).unwrap() else {
        panic!()
    };
    assert_eq!(max, 0);
    assert_eq!(
        (i.semmap, i.semmni, i.semmns, i.semmnu, i.semmsl),
        (1_024_000_000, 32000, 1_024_000_000, 1_024_000_000, 32000)
    );
    assert_eq!(
        (i.semopm, i.semume, i.semusz, i.semvmx, i.semaem),
        (500, 500, 20, 32767, 32767)
    );
    let a = ns.semget(&r, IPC_PRIVATE, 1, 0o600).unwrap();
    let b = ns.semget(&r, IPC_PRIVATE, 1, 0o600).unwrap();
    assert_eq!(
        ctl(&ns, &r, 12345, 0, SEM_INFO),
        Ok(1),
        "max index, id ignored"
    );
    assert_eq!(ctl(&ns, &r, a, 0, 99), Err(Errno::EINVAL), "unknown cmd");
    assert_eq!(
        ctl(&ns, &r, a, 0, IPC_STAT | IPC_64),
        Err(Errno::EINVAL),
        "64-bit kernels do not parse IPC_64"
    );
    ctl(&ns, &r, a, 0, IPC_RMID).unwrap();
    assert_eq!(
        ctl(&ns, &r, a, 0, IPC_RMID),
        Err(Errno::EINVAL),
        "second RMID"
    );
    assert_eq!(ctl(&ns, &r, b, 0, SEM_INFO), Ok(1));
}

#[test]
fn sem_stat_takes_an_index_and_checks_read_permission_unless_any() {
    let ns = IpcNamespace::new();
    let r = root();
    ns.semget(&r, IPC_PRIVATE, 1, 0o600).unwrap();
    let id = ns.semget(&r, 77, 2, IPC_CREAT | 0o600).unwrap();
    assert_eq!(id, 1);
    let out = ns.semctl(&r, 1, 0, SEM_STAT, SemctlArg::None).unwrap();
    assert_eq!(out.ret(), id);
    assert_eq!(
        ctl(&ns, &r, 1 + 32768, 0, SEM_STAT),
        Ok(id),
        "sequence bits are masked off"
    );
    assert_eq!(ctl(&ns, &r, 5, 0, SEM_STAT), Err(Errno::EINVAL));
    assert_eq!(ctl(&ns, &user(), 1, 0, SEM_STAT), Err(Errno::EACCES));
    assert_eq!(ctl(&ns, &user(), 1, 0, SEM_STAT_ANY), Ok(id));
    assert_eq!(ctl(&ns, &user(), id, 0, IPC_STAT), Err(Errno::EACCES));
    let SemctlOut::Stat(_, ds) = ns.semctl(&r, 1, 0, SEM_STAT_ANY, SemctlArg::None).unwrap() else {
        panic!()
    };
    assert_eq!((ds.perm.key, ds.nsems), (77, 2));
}

#[test]
fn getters_check_permission_before_semnum() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 2, 0o600).unwrap();
    for cmd in [GETVAL, GETPID, GETNCNT, GETZCNT] {
        assert_eq!(ctl(&ns, &user(), id, 9, cmd), Err(Errno::EACCES));
        assert_eq!(ctl(&ns, &r, id, 2, cmd), Err(Errno::EINVAL));
        assert_eq!(ctl(&ns, &r, id, -1, cmd), Err(Errno::EINVAL));
        assert_eq!(ctl(&ns, &r, id, 1, cmd), Ok(0));
    }
    assert_eq!(ctl(&ns, &user(), id, 0, GETALL), Err(Errno::EACCES));
}

#[test]
fn setval_checks_range_first_then_semnum_then_permission() {
    let ns = ns_at(50);
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 2, 0o644).unwrap();
    let sv = |c: &Cred, id, n, v| {
        ns.semctl(c, id, n, SETVAL, SemctlArg::Val(v))
            .map(|o| o.ret())
    };
    assert_eq!(sv(&r, -5, 0, 1), Err(Errno::EINVAL), "negative id first");
    assert_eq!(sv(&r, 999, 0, 32768), Err(Errno::ERANGE), "before lookup");
    assert_eq!(sv(&r, id, 0, -1), Err(Errno::ERANGE));
    assert_eq!(sv(&r, 999, 0, 1), Err(Errno::EINVAL));
    assert_eq!(
        sv(&user(), id, 5, 1),
        Err(Errno::EINVAL),
        "semnum before perm"
    );
    assert_eq!(sv(&user(), id, 0, 1), Err(Errno::EACCES));
    assert_eq!(sv(&Cred::user(9, 0, 0), id, 1, 32767), Ok(0));
    assert_eq!(ctl(&ns, &r, id, 1, GETVAL), Ok(32767));
    assert_eq!(ctl(&ns, &r, id, 1, GETPID), Ok(9));
}

#[test]
fn setall_rejects_any_value_over_semvmx_and_sets_nothing() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.semget(&r, IPC_PRIVATE, 3, 0o600).unwrap();
    let sa = |c: &Cred, v: &[u16]| {
        ns.semctl(c, id, 0, SETALL, SemctlArg::Array(v))
            .map(|o| o.ret())
    };
    assert_eq!(sa(&user(), &[1, 2, 3]), Err(Errno::EACCES));
    assert_eq!(sa(&r, &[1, 32768, 3]), Err(Errno::ERANGE));
    assert_eq!(
        ns.semctl(&r, id, 0, GETALL, SemctlArg::None).unwrap(),
        SemctlOut::All(vec![0, 0, 0])
    );
    assert_eq!(sa(&r, &[1, 2]), Err(Errno::EFAULT), "too short a buffer");
    assert_eq!(sa(&r, &[1, 32767, 3]), Ok(0));
    assert_eq!(
        ns.semctl(&r, id, 0, GETALL, SemctlArg::None).unwrap(),
        SemctlOut::All(vec![1, 32767, 3])
    );
    assert_eq!(ctl(&ns, &r, id, 2, GETPID), Ok(100));
}

#[test]
fn ipc_set_and_rmid_need_ownership() {
    let ns = ns_at(10);
    let r = root();
    let owner = Cred::user(3, 1000, 1000);
    let id = ns.semget(&owner, IPC_PRIVATE, 1, 0o600).unwrap();
    let set = |c: &Cred, uid, gid, mode| {
        ns.semctl(c, id, 0, IPC_SET, SemctlArg::Set { uid, gid, mode })
            .map(|o| o.ret())
    };
    assert_eq!(
        ns.semctl(&owner, id, 0, IPC_SET, SemctlArg::None),
        Err(Errno::EFAULT)
    );
    assert_eq!(set(&Cred::user(4, 2000, 2000), 0, 0, 0), Err(Errno::EPERM));
    assert_eq!(set(&owner, u32::MAX, 0, 0), Err(Errno::EINVAL));
    assert_eq!(set(&owner, 2000, 2000, 0o7644), Ok(0));
    let SemctlOut::Stat(_, ds) = ns.semctl(&r, id, 0, IPC_STAT, SemctlArg::None).unwrap() else {
        panic!()
    };
    assert_eq!(
        (ds.perm.uid, ds.perm.gid, ds.perm.cuid, ds.perm.mode),
        (2000, 2000, 1000, 0o644)
    );
    assert_eq!(
        ctl(&ns, &Cred::user(5, 3000, 3000), id, 0, IPC_RMID),
        Err(Errno::EPERM)
    );
    assert_eq!(
        ctl(&ns, &owner, id, 0, IPC_RMID),
        Ok(0),
        "the creator keeps it"
    );
    assert_eq!(ctl(&ns, &r, id, 0, GETVAL), Err(Errno::EINVAL));
}

#[test]
fn proc_file_matches_linux_format() {
    let ns = ns_at(1_795_345_190);
    let r = root();
    ns.semget(&r, 0xdeadbeefu32 as i32, 3, IPC_CREAT | 0o644)
        .unwrap();
    let text = ns.proc_sysvipc_sem();
    let host = std::fs::read_to_string("/proc/sysvipc/sem").unwrap();
    assert_eq!(text.lines().next(), host.lines().next(), "header");
    let expected = format!(
        "{:10} {:10}  {:4o} {:10} {:5} {:5} {:5} {:5} {:10} {:10}",
        -559038737, 0, 0o644, 3, 0, 0, 0, 0, 0, 1_795_345_190
    );
    assert_eq!(text.lines().nth(1), Some(expected.as_str()));
    assert_eq!(
        text.lines().nth(1).unwrap(),
        "-559038737          0   644          3     0     0     0     0          0 1795345190"
    );
}

/// Sets made after a namespace goes may reuse its sets' memory (`registry::spare`): each must
/// still start as a new set, with nothing of the old one's values, times, pids or owner.
#[test]
fn sets_made_after_a_namespace_goes_start_fresh() {
    let keys = 0x5e7_0000..0x5e7_0000 + 64;
    let old = ns_at(1000);
    for key in keys.clone() {
        let id = old.semget(&root(), key, 1, IPC_CREAT | 0o666).unwrap();
        old.semctl(&root(), id, 0, SETVAL, SemctlArg::Val(7))
            .unwrap();
        op(&old, &root(), id, &[Sembuf::new(0, 2, 0)]).unwrap();
        let set = SemctlArg::Set {
            uid: 5,
            gid: 6,
            mode: 0o640,
        };
        old.semctl(&root(), id, 0, IPC_SET, set).unwrap();
    }
    drop(old);
    let new = ns_at(2000);
    for key in keys {
        let id = new.semget(&user(), key, 1, IPC_CREAT | 0o600).unwrap();
        assert_eq!(ctl(&new, &user(), id, 0, GETVAL), Ok(0));
        assert_eq!(ctl(&new, &user(), id, 0, GETPID), Ok(0));
        let Ok(SemctlOut::Stat(_, ds)) = new.semctl(&user(), id, 0, IPC_STAT, SemctlArg::None)
        else {
            panic!("IPC_STAT");
        };
        assert_eq!((ds.otime, ds.ctime, ds.nsems), (0, 2000, 1));
        assert_eq!((ds.perm.key, ds.perm.uid, ds.perm.cuid), (key, 1000, 1000));
        assert_eq!(ds.perm.mode & 0o777, 0o600);
    }
}
