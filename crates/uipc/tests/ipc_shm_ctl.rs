//! shmctl: every command, its checks and results.

use std::sync::Arc;
use uipc::ipc::consts::*;
use uipc::ipc::shm::{ShmInfo, ShmSet, ShmctlOut, ShmidDs};
use uipc::ipc::{IpcNamespace, Sysctl};
use uipc::{Cap, CapSet, Cred, Errno, ManualClock};

fn root() -> Cred {
    Cred::root(100)
}
fn stat(ns: &IpcNamespace, id: i32) -> ShmidDs {
    match ns.shmctl(&root(), id, IPC_STAT, None).unwrap() {
        ShmctlOut::Stat(0, ds) => ds,
        o => panic!("{o:?}"),
    }
}

#[test]
fn bad_ids_and_commands_are_einval_even_for_info() {
    let ns = IpcNamespace::new();
    let r = root();
    for cmd in [IPC_INFO, SHM_INFO, IPC_STAT, IPC_RMID] {
        assert_eq!(ns.shmctl(&r, -1, cmd, None), Err(Errno::EINVAL));
    }
    assert_eq!(ns.shmctl(&r, 0, -1, None), Err(Errno::EINVAL));
    assert_eq!(ns.shmctl(&r, 0, 99, None), Err(Errno::EINVAL));
    let id = ns.shmget(&r, 0, 1, 0o600).unwrap();
    assert_eq!(
        ns.shmctl(&r, id, IPC_STAT | IPC_64, None),
        Err(Errno::EINVAL),
        "x86-64 does not strip IPC_64"
    );
    assert_eq!(ns.shmctl(&r, id, IPC_SET, None), Err(Errno::EFAULT));
}

#[test]
fn stat_by_id_by_index_and_any() {
    let ns = IpcNamespace::new();
    let r = root();
    let gap = ns.shmget(&r, 0, 1, 0o600).unwrap();
    let id = ns.shmget(&r, 0, 1, 0o600).unwrap();
    ns.shmctl(&r, gap, IPC_RMID, None).unwrap();
    let u = Cred::user(5, 1000, 1000);
    let idx = id & 0x7fff;
    assert_eq!(ns.shmctl(&u, id, IPC_STAT, None), Err(Errno::EACCES));
    assert_eq!(ns.shmctl(&u, idx, SHM_STAT, None), Err(Errno::EACCES));
    let any = ns.shmctl(&u, idx, SHM_STAT_ANY, None).unwrap();
    assert_eq!(any.ret(), id, "STAT returns the full id");
    assert_eq!(
        ns.shmctl(&r, 0, SHM_STAT, None),
        Err(Errno::EINVAL),
        "empty index"
    );
    assert_eq!(
        ns.shmctl(&r, id, SHM_STAT, None).err(),
        if id == idx { None } else { Some(Errno::EINVAL) }
    );
    let ShmctlOut::Stat(ret, ds) = ns.shmctl(&r, idx, SHM_STAT, None).unwrap() else {
        panic!()
    };
    assert_eq!((ret, ds.segsz, ds.perm.seq), (id, 1, (id >> 15) as u32));
}

#[test]
fn ipc_set_needs_ownership_copies_ids_and_low_mode_bits_and_sets_ctime() {
    let clock = Arc::new(ManualClock::new(1000));
    let ns = IpcNamespace::with_options(uipc::ipc::NamespaceOptions {
        clock: clock.clone(),
        ..Default::default()
    });
    let owner = Cred::user(5, 1000, 1000);
    let id = ns.shmget(&owner, 0, 1, 0o600).unwrap();
    let a = ns.shmat(&owner, id, 0, 0).unwrap();
    ns.shmctl(&owner, id, IPC_RMID, None).unwrap();
    clock.advance(5_000_000_000);
    let set = ShmSet {
        uid: 2000,
        gid: 30,
        mode: 0o7644,
    };
    assert_eq!(
        ns.shmctl(&Cred::user(6, 3000, 3000), id, IPC_SET, Some(&set)),
        Err(Errno::EPERM)
    );
    ns.shmctl(&owner, id, IPC_SET, Some(&set)).unwrap();
    let ds = stat(&ns, id);
    assert_eq!(
        (ds.perm.uid, ds.perm.gid, ds.perm.cuid, ds.perm.mode),
        (2000, 30, 1000, 0o1644)
    );
    assert_eq!(ds.ctime, 1005);
    let bad = ShmSet {
        uid: u32::MAX,
        ..set
    };
    assert_eq!(
        ns.shmctl(&owner, id, IPC_SET, Some(&bad)),
        Err(Errno::EINVAL)
    );
    let admin = Cred {
        caps: CapSet::EMPTY.with(Cap::SYS_ADMIN),
        ..Cred::user(7, 7, 7)
    };
    ns.shmctl(&admin, id, IPC_SET, Some(&set)).unwrap();
    ns.shmdt(&owner, a.addr).unwrap();
}

#[test]
fn info_reports_limits_and_usage_and_the_max_index() {
    let ns = IpcNamespace::new();
    let r = root();
    assert_eq!(ns.shmctl(&r, 0, IPC_INFO, None).unwrap().ret(), 0);
    ns.sysctl_write(&r, Sysctl::ShmMni, "77").unwrap();
    let ids: Vec<i32> = (0..3)
        .map(|_| ns.shmget(&r, 0, 5000, 0o600).unwrap())
        .collect();
    let ShmctlOut::Info(max, info) = ns.shmctl(&r, 0, IPC_INFO, None).unwrap() else {
        panic!()
    };
    assert_eq!(max, 2);
    assert_eq!(
        info,
        ShmInfo {
            shmmax: u64::MAX - (1 << 24),
            shmmin: 1,
            shmmni: 77,
            shmseg: 77,
            shmall: u64::MAX - (1 << 24)
        }
    );
    let a = ns.shmat(&r, ids[1], 0, 0).unwrap();
    a.write(0, &[1; 5000]).unwrap();
    ns.shmctl(&r, ids[2], IPC_RMID, None).unwrap();
    let ShmctlOut::Usage(max, u) = ns.shmctl(&r, 0, SHM_INFO, None).unwrap() else {
        panic!()
    };
    assert_eq!(max, 1);
    assert_eq!(
        (u.used_ids, u.shm_tot, u.shm_rss, u.shm_swp, u.swap_attempts),
        (2, 4, 2, 0, 0)
    );
}

#[test]
fn shm_lock_rules_and_memlock_charge() {
    let ns = IpcNamespace::new();
    let owner = Cred::user(5, 1000, 1000);
    let stranger = Cred::user(6, 2000, 2000);
    let id = ns.shmget(&owner, 0, 4096, 0o666).unwrap();
    assert_eq!(ns.shmctl(&stranger, id, SHM_LOCK, None), Err(Errno::EPERM));
    assert_eq!(
        ns.shmctl(&stranger, id, SHM_UNLOCK, None),
        Err(Errno::EPERM)
    );
    let no_rlimit = Cred {
        rlimit_memlock: 0,
        ..owner.clone()
    };
    assert_eq!(ns.shmctl(&no_rlimit, id, SHM_LOCK, None), Err(Errno::EPERM));
    ns.shmctl(&no_rlimit, id, SHM_UNLOCK, None).unwrap();
    ns.shmctl(&owner, id, SHM_LOCK, None).unwrap();
    ns.shmctl(&owner, id, SHM_LOCK, None).unwrap();
    assert_eq!(stat(&ns, id).perm.mode, 0o2666);
    assert!(ns
        .proc_sysvipc_shm()
        .lines()
        .nth(1)
        .unwrap()
        .contains(" 2666 "));
    ns.shmctl(&owner, id, SHM_UNLOCK, None).unwrap();
    assert_eq!(stat(&ns, id).perm.mode, 0o666);
    let locker = Cred {
        caps: CapSet::EMPTY.with(Cap::IPC_LOCK),
        rlimit_memlock: 0,
        ..stranger.clone()
    };
    ns.shmctl(&locker, id, SHM_LOCK, None).unwrap();
    assert_eq!(stat(&ns, id).perm.mode, 0o2666);
    // The charge: 8 pages of rlimit, shared by every segment the same real uid locks.
    let small = Cred {
        rlimit_memlock: 8 * 4096,
        ..owner.clone()
    };
    let big = ns.shmget(&owner, 0, 9 * 4096, 0o600).unwrap();
    assert_eq!(ns.shmctl(&small, big, SHM_LOCK, None), Err(Errno::ENOMEM));
    let five = ns.shmget(&owner, 0, 5 * 4096, 0o600).unwrap();
    let four = ns.shmget(&owner, 0, 4 * 4096, 0o600).unwrap();
    ns.shmctl(&small, five, SHM_LOCK, None).unwrap();
    assert_eq!(ns.shmctl(&small, four, SHM_LOCK, None), Err(Errno::ENOMEM));
    ns.shmctl(&owner, five, IPC_RMID, None).unwrap();
    ns.shmctl(&small, four, SHM_LOCK, None)
        .expect("destroying a locked segment returns its charge");
}
