//! shmget: Linux's decision order for existing keys and for creation.

use uipc::ipc::consts::*;
use uipc::ipc::shm::{ShmUsage, ShmctlOut};
use uipc::ipc::{IpcNamespace, Sysctl};
use uipc::{Cap, CapSet, Cred, Errno};

fn root() -> Cred {
    Cred::root(100)
}
fn user() -> Cred {
    Cred::user(200, 1000, 1000)
}
fn usage(ns: &IpcNamespace) -> ShmUsage {
    match ns.shmctl(&root(), 0, SHM_INFO, None).unwrap() {
        ShmctlOut::Usage(_, u) => u,
        o => panic!("{o:?}"),
    }
}

#[test]
fn existing_key_checks_size_before_permission_and_zero_size_passes() {
    let ns = IpcNamespace::new();
    let id = ns.shmget(&root(), 7, 5000, IPC_CREAT | 0o600).unwrap();
    assert_eq!(ns.shmget(&user(), 7, 5001, 0o600), Err(Errno::EINVAL));
    assert_eq!(ns.shmget(&user(), 7, 5000, 0o600), Err(Errno::EACCES));
    assert_eq!(ns.shmget(&user(), 7, 0, 0), Ok(id), "no mode bits asked");
    assert_eq!(ns.shmget(&root(), 7, 0, 0o600), Ok(id));
    assert_eq!(
        ns.shmget(&root(), 7, 1 << 40, IPC_CREAT),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.shmget(&root(), 7, 0, IPC_CREAT | IPC_EXCL),
        Err(Errno::EEXIST)
    );
    assert_eq!(ns.shmget(&root(), 8, 0, 0), Err(Errno::ENOENT));
}

#[test]
fn creation_checks_run_in_newseg_order() {
    let ns = IpcNamespace::new();
    let r = root();
    assert_eq!(ns.shmget(&r, 0, 0, 0o600), Err(Errno::EINVAL), "size < 1");
    assert_eq!(ns.shmget(&r, 9, 0, IPC_CREAT), Err(Errno::EINVAL));
    ns.sysctl_write(&r, Sysctl::ShmMax, "18446744073709551615")
        .unwrap();
    assert_eq!(
        ns.shmget(&r, 0, u64::MAX, 0o600),
        Err(Errno::ENOSPC),
        "page count overflow"
    );
    ns.sysctl_write(&r, Sysctl::ShmMax, "10000").unwrap();
    assert_eq!(ns.shmget(&r, 0, 10001, 0o600), Err(Errno::EINVAL));
    ns.sysctl_write(&r, Sysctl::ShmAll, "3").unwrap();
    ns.shmget(&r, 0, 8192, 0o600).unwrap();
    assert_eq!(ns.shmget(&r, 0, 4097, 0o600), Err(Errno::ENOSPC), "shmall");
    assert_eq!(usage(&ns).shm_tot, 2);
    let one_page = ns.shmget(&r, 0, 1, 0o600).unwrap();
    assert_eq!(usage(&ns).shm_tot, 3, "pages are charged rounded up");
    ns.shmctl(&r, one_page, IPC_RMID, None).unwrap();
    assert_eq!(usage(&ns).shm_tot, 2, "removal returns the pages");
    ns.sysctl_write(&r, Sysctl::ShmAll, "100").unwrap();
    ns.sysctl_write(&r, Sysctl::ShmMni, "1").unwrap();
    // Hugetlb privilege is checked before the count limit (observed on 6.18).
    let u = user();
    assert_eq!(ns.shmget(&u, 0, 1, SHM_HUGETLB | 0o600), Err(Errno::EPERM));
    assert_eq!(ns.shmget(&u, 0, 1, 0o600), Err(Errno::ENOSPC), "shmmni");
    ns.sysctl_write(&r, Sysctl::ShmMni, "10").unwrap();
    let locker = Cred {
        caps: CapSet::EMPTY.with(Cap::IPC_LOCK),
        ..user()
    };
    assert!(ns.shmget(&locker, 0, 1, SHM_HUGETLB | 0o600).is_ok());
    let wheel = Cred {
        groups: vec![0],
        ..user()
    };
    assert!(ns.shmget(&wheel, 0, 1, SHM_HUGETLB | 0o600).is_ok());
}

#[test]
fn segsz_keeps_exact_bytes_and_owner_is_the_creator() {
    let ns = IpcNamespace::new();
    let u = user();
    let id = ns
        .shmget(&u, 0x1234, 5000, IPC_CREAT | IPC_EXCL | 0o1640)
        .unwrap();
    let ShmctlOut::Stat(0, ds) = ns.shmctl(&u, id, IPC_STAT, None).unwrap() else {
        panic!()
    };
    assert_eq!(ds.segsz, 5000);
    assert_eq!(ds.perm.mode, 0o640, "only the permission bits are kept");
    assert_eq!((ds.perm.uid, ds.perm.cuid, ds.perm.gid), (1000, 1000, 1000));
    assert_eq!(
        (ds.cpid, ds.lpid, ds.nattch, ds.atime, ds.dtime),
        (200, 0, 0, 0, 0)
    );
    assert_eq!(ds.perm.key, 0x1234);
    assert!(ds.ctime > 0);
    assert_eq!(usage(&ns).shm_tot, 2);
}

/// The host's commit check (`/proc/sys/vm/overcommit_memory` 0 or 2) refuses a segment as
/// large as 2^63 - 4096 bytes.
fn host_overcommits_always() -> bool {
    std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() == "1")
}

#[test]
fn a_size_past_loff_t_is_einval_and_one_the_host_cannot_commit_is_enomem() {
    let ns = IpcNamespace::new();
    let r = root();
    assert_eq!(ns.shmget(&r, 0, 1 << 63, 0o600), Err(Errno::EINVAL));
    assert_eq!(
        ns.shmget(&r, 0, (1 << 63) + 4096, 0o600),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.shmget(&r, 0, u64::MAX - (1 << 24), 0o600),
        Err(Errno::EINVAL),
        "shmmax itself"
    );
    if !host_overcommits_always() {
        assert_eq!(
            ns.shmget(&r, 0, (1 << 63) - 4096, 0o600),
            Err(Errno::ENOMEM)
        );
    }
    // SHM_NORESERVE skips the charge (outside strict overcommit).
    let strict =
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() == "2");
    if !strict {
        assert!(ns.shmget(&r, 0, 1 << 62, SHM_NORESERVE | 0o600).is_ok());
    }
    assert_eq!(usage(&ns).shm_tot, if strict { 0 } else { 1 << 50 });
}
