//! Opening an existing key (`*get` without IPC_CREAT|IPC_EXCL) checks the permissions and
//! creation size the key map keeps beside the key, not the object: IPC_SET must reach them, a
//! failed IPC_SET must not, removal and SHM_DEST must free the key, and a new object on the
//! same key must bring its own permissions. The same sequence for all three types, with
//! Linux's answers (`uipc conform ipc` also compares IPC_SET and *get as an unprivileged user
//! with the host).

use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsqidSet};
use uipc::ipc::sem::SemctlArg;
use uipc::ipc::shm::ShmSet;
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno};

const KEY: i32 = 0x5eed;

fn owner() -> Cred {
    Cred::user(10, 1000, 1000)
}
fn other() -> Cred {
    Cred::user(20, 2000, 2000)
}

/// IPC_SET's uid, gid and mode.
type Owner = (u32, u32, u32);

/// One object type's calls, as the sequence below needs them.
struct Calls {
    /// `*get(key, flag)` (semget with one semaphore, shmget with 4096 bytes).
    get: fn(&IpcNamespace, &Cred, i32) -> Result<i32, Errno>,
    /// `*ctl(id, IPC_SET)` to the given (uid, gid, mode).
    set: fn(&IpcNamespace, &Cred, i32, Owner) -> Result<(), Errno>,
    /// `*ctl(id, IPC_RMID)`.
    rmid: fn(&IpcNamespace, &Cred, i32) -> Result<(), Errno>,
}

const SEM: Calls = Calls {
    get: |ns, c, flag| ns.semget(c, KEY, 1, flag),
    set: |ns, c, id, (uid, gid, mode)| {
        let arg = SemctlArg::Set { uid, gid, mode };
        ns.semctl(c, id, 0, IPC_SET, arg).map(drop)
    },
    rmid: |ns, c, id| ns.semctl(c, id, 0, IPC_RMID, SemctlArg::None).map(drop),
};

const MSG: Calls = Calls {
    get: |ns, c, flag| ns.msgget(c, KEY, flag),
    set: |ns, c, id, (uid, gid, mode)| {
        let qbytes = 16384;
        let arg = MsgctlArg::Set(MsqidSet {
            uid,
            gid,
            mode,
            qbytes,
        });
        ns.msgctl(c, id, IPC_SET, arg).map(drop)
    },
    rmid: |ns, c, id| ns.msgctl(c, id, IPC_RMID, MsgctlArg::None).map(drop),
};

const SHM: Calls = Calls {
    get: |ns, c, flag| ns.shmget(c, KEY, 4096, flag),
    set: |ns, c, id, (uid, gid, mode)| {
        let set = ShmSet { uid, gid, mode };
        ns.shmctl(c, id, IPC_SET, Some(&set)).map(drop)
    },
    rmid: |ns, c, id| ns.shmctl(c, id, IPC_RMID, None).map(drop),
};

fn sequence(name: &str, t: &Calls) {
    let ns = IpcNamespace::new();
    let id = (t.get)(&ns, &owner(), IPC_CREAT | 0o600).unwrap();
    let open = |c: &Cred, flag| (t.get)(&ns, c, flag);
    let expect = |c: &Cred, flag, want: Result<i32, Errno>, what: &str| {
        assert_eq!(open(c, flag), want, "{name}: {what}");
    };
    expect(&other(), 0o400, Err(Errno::EACCES), "0600, other");
    expect(&other(), 0, Ok(id), "no bits asked");
    expect(&owner(), 0o600, Ok(id), "owner");

    // Group 2000 may read now: the other user's group class applies.
    (t.set)(&ns, &owner(), id, (1000, 2000, 0o640)).unwrap();
    expect(&other(), 0o400, Ok(id), "group read after IPC_SET");
    expect(&other(), 0o200, Err(Errno::EACCES), "group write");

    // A failed IPC_SET changes nothing.
    assert_eq!(
        (t.set)(&ns, &other(), id, (2000, 2000, 0o666)),
        Err(Errno::EPERM),
        "{name}"
    );
    expect(&other(), 0o200, Err(Errno::EACCES), "after EPERM");

    // Ownership moves: the owner class now applies to 2000, and the old owner is the
    // creator, who keeps the owner class too (cuid).
    (t.set)(&ns, &owner(), id, (2000, 0, 0o600)).unwrap();
    expect(&other(), 0o600, Ok(id), "new owner");
    expect(&owner(), 0o600, Ok(id), "creator");
    let third = Cred::user(30, 3000, 3000);
    expect(&third, 0o400, Err(Errno::EACCES), "third user");

    // Removal drops the key; a new object on it carries its own permissions.
    (t.rmid)(&ns, &owner(), id).unwrap();
    expect(&owner(), 0, Err(Errno::ENOENT), "removed");
    let again = (t.get)(&ns, &third, IPC_CREAT | 0o604).unwrap();
    assert_ne!(again, id, "{name}");
    expect(&other(), 0o400, Ok(again), "new object, other read");
    expect(&other(), 0o600, Err(Errno::EACCES), "new object");
}

#[test]
fn semget_sees_ipc_set_and_removal() {
    sequence("sem", &SEM);
}

#[test]
fn msgget_sees_ipc_set_and_removal() {
    sequence("msg", &MSG);
}

#[test]
fn shmget_sees_ipc_set_and_removal() {
    sequence("shm", &SHM);
}

#[test]
fn size_checks_come_before_permissions_and_use_the_creation_sizes() {
    let ns = IpcNamespace::new();
    let sem = ns.semget(&owner(), KEY, 3, IPC_CREAT | 0o600).unwrap();
    assert_eq!(ns.semget(&other(), KEY, 4, 0o400), Err(Errno::EINVAL));
    assert_eq!(ns.semget(&other(), KEY, 3, 0o400), Err(Errno::EACCES));
    assert_eq!(ns.semget(&owner(), KEY, 3, 0), Ok(sem));
    let shm = ns.shmget(&owner(), KEY, 10_000, IPC_CREAT | 0o600).unwrap();
    assert_eq!(ns.shmget(&other(), KEY, 10_001, 0o400), Err(Errno::EINVAL));
    assert_eq!(ns.shmget(&other(), KEY, 10_000, 0o400), Err(Errno::EACCES));
    assert_eq!(ns.shmget(&owner(), KEY, 1, 0), Ok(shm));
}

#[test]
fn a_segment_removed_while_attached_leaves_its_key_free() {
    let ns = IpcNamespace::new();
    let id = ns.shmget(&owner(), KEY, 4096, IPC_CREAT | 0o600).unwrap();
    let _at = ns.shmat(&owner(), id, 0, 0).unwrap();
    ns.shmctl(&owner(), id, IPC_RMID, None).unwrap();
    assert_eq!(ns.shmget(&owner(), KEY, 4096, 0), Err(Errno::ENOENT));
    // IPC_SET on the removed, still attached segment must not touch the key's new owner.
    let fresh = ns.shmget(&other(), KEY, 4096, IPC_CREAT | 0o600).unwrap();
    let set = ShmSet {
        uid: 1000,
        gid: 1000,
        mode: 0o666,
    };
    ns.shmctl(&owner(), id, IPC_SET, Some(&set)).unwrap();
    assert_eq!(ns.shmget(&owner(), KEY, 4096, 0o600), Err(Errno::EACCES));
    assert_eq!(ns.shmget(&other(), KEY, 4096, 0o600), Ok(fresh));
}
