//! `--state`: a namespace saved and restored keeps its ids, keys, owners, modes, semaphore
//! values, queued messages (in order) and segment contents; a damaged file is refused whole;
//! the file is written only through a fresh temporary file; a segment that cannot be saved
//! fails the save.

use std::path::PathBuf;
use std::sync::Arc;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidSet};
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut};
use uipc::ipc::shm::{ShmSet, ShmctlOut};
use uipc::ipc::{IpcNamespace, NamespaceOptions};
use uipc::{Cred, WaitCtx};
use uipc_server::memfd::MemfdBacking;
use uipc_server::state::durable::{temp_name, TEMP_ATTEMPTS};
use uipc_server::state::{restore, save, RestoreError};

fn namespace() -> (IpcNamespace, Arc<MemfdBacking>) {
    let backing = Arc::new(MemfdBacking::new());
    let ns = IpcNamespace::with_options(NamespaceOptions {
        shm_backing: Some(backing.clone()),
        ..Default::default()
    });
    (ns, backing)
}

/// msgctl(IPC_SET) of queue `q`: owner `(uid, gid, mode)` and `qbytes`.
fn msg_set(ns: &IpcNamespace, cred: &Cred, q: i32, (uid, gid, mode): (u32, u32, u32), qbytes: u64) {
    let set = MsqidSet {
        uid,
        gid,
        mode,
        qbytes,
    };
    ns.msgctl(cred, q, IPC_SET, MsgctlArg::Set(set)).unwrap();
}

/// A fresh directory; on tmpfs when there is one (the damage test rewrites its file some ten
/// thousand times, which ext4 turns into as many flushes of a truncated file).
fn scratch(tag: &str) -> PathBuf {
    let base = Some(PathBuf::from("/dev/shm"))
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("uipc-state-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_saved_namespace_comes_back_with_the_same_ids_values_messages_and_bytes() {
    let root = Cred::root(1);
    let user = Cred::user(2, 1000, 100);
    let (a, backing) = namespace();
    // Some churn first, so ids are not simply 0, 1, 2.
    for _ in 0..3 {
        let id = a.semget(&root, IPC_PRIVATE, 1, 0o600).unwrap();
        a.semctl(&root, id, 0, IPC_RMID, SemctlArg::None).unwrap();
    }
    let sem = a.semget(&user, 0x5e3, 3, IPC_CREAT | 0o640).unwrap();
    a.semop(
        &user,
        sem,
        &[Sembuf::new(0, 7, 0), Sembuf::new(2, 9, 0)],
        &WaitCtx::FOREVER,
    )
    .unwrap();
    a.semctl(
        &root,
        sem,
        0,
        IPC_SET,
        SemctlArg::Set {
            uid: 1234,
            gid: 99,
            mode: 0o604,
        },
    )
    .unwrap();
    let q = a.msgget(&user, IPC_PRIVATE, 0o600).unwrap();
    for (t, text) in [(5, &b"first"[..]), (2, b"second"), (5, b"")] {
        a.msgsnd(&user, q, t, text, 0, &WaitCtx::FOREVER).unwrap();
    }
    msg_set(&a, &user, q, (1000, 100, 0o620), 999);
    let shm = a.shmget(&user, 0x5a, 5000, IPC_CREAT | 0o600).unwrap();
    let at = a.shmat(&user, shm, 0, 0).unwrap();
    at.write(4990, b"tail!").unwrap();
    at.write(0, b"head").unwrap();
    a.shmdt(&user, at.addr).unwrap();
    let gone = a.shmget(&root, IPC_PRIVATE, 100, 0o600).unwrap();
    let at = a.shmat(&root, gone, 0, 0).unwrap();
    a.shmctl(&root, gone, IPC_RMID, None).unwrap();

    let dir = scratch("roundtrip");
    let path = dir.join("state");
    save(&a, &backing, &path).unwrap();
    a.shmdt(&root, at.addr).unwrap();
    let (b, _) = namespace();
    restore(&b, &path).unwrap();

    let Ok(SemctlOut::Stat(_, ds)) = b.semctl(&root, sem, 0, IPC_STAT, SemctlArg::None) else {
        panic!("semaphore set {sem} missing")
    };
    assert_eq!((ds.perm.key, ds.perm.uid, ds.perm.gid), (0x5e3, 1234, 99));
    assert_eq!(
        (ds.perm.cuid, ds.perm.cgid, ds.perm.mode & 0o777),
        (1000, 100, 0o604)
    );
    assert_eq!(
        b.semctl(&root, sem, 0, GETALL, SemctlArg::None),
        Ok(SemctlOut::All(vec![7, 0, 9]))
    );
    assert_eq!(b.semget(&root, 0x5e3, 0, 0), Ok(sem), "the key finds it");
    let Ok(MsgctlOut::Stat { ds, .. }) = b.msgctl(&root, q, IPC_STAT, MsgctlArg::None) else {
        panic!("queue {q} missing")
    };
    assert_eq!((ds.qnum, ds.qbytes, ds.perm.mode & 0o777), (3, 999, 0o620));
    let nowait = IPC_NOWAIT;
    let got: Vec<_> = (0..3)
        .map(|_| {
            b.msgrcv(&root, q, 100, 0, nowait, &WaitCtx::FOREVER)
                .unwrap()
        })
        .collect();
    assert_eq!(
        got,
        vec![(5, b"first".to_vec()), (2, b"second".to_vec()), (5, vec![])]
    );
    let Ok(ShmctlOut::Stat(_, ds)) = b.shmctl(&root, shm, IPC_STAT, None) else {
        panic!("segment {shm} missing")
    };
    assert_eq!((ds.perm.key, ds.segsz, ds.nattch), (0x5a, 5000, 0));
    let at = b.shmat(&root, shm, 0, SHM_RDONLY).unwrap();
    let mut buf = [0u8; 5];
    at.read(4990, &mut buf).unwrap();
    assert_eq!(&buf, b"tail!");
    at.read(0, &mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], b"head");
    assert!(
        b.shmctl(&root, gone, IPC_STAT, None).is_err(),
        "a segment marked for removal is not saved"
    );
    let set = ShmSet {
        uid: 0,
        gid: 0,
        mode: 0o600,
    };
    assert!(b.shmctl(&root, shm, IPC_SET, Some(&set)).is_ok());

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the file holds every user's data");
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many semaphore sets, queues and segments `ns` holds.
fn objects(ns: &IpcNamespace) -> (i32, i32, i32) {
    let root = Cred::root(1);
    let Ok(SemctlOut::Info(_, sem)) = ns.semctl(&root, 0, 0, SEM_INFO, SemctlArg::None) else {
        panic!("SEM_INFO")
    };
    let Ok(MsgctlOut::Info { info: msg, .. }) = ns.msgctl(&root, 0, MSG_INFO, MsgctlArg::None)
    else {
        panic!("MSG_INFO")
    };
    let Ok(ShmctlOut::Usage(_, shm)) = ns.shmctl(&root, 0, SHM_INFO, None) else {
        panic!("SHM_INFO")
    };
    (sem.semusz, msg.msgpool, shm.used_ids)
}

/// Every truncation and every single flipped bit of a saved file is refused, with what is
/// wrong, and restores nothing.
#[test]
fn a_truncated_or_bit_flipped_file_is_refused_whole() {
    let root = Cred::root(1);
    let (a, backing) = namespace();
    let sem = a.semget(&root, 0x11, 2, IPC_CREAT | 0o640).unwrap();
    a.semctl(&root, sem, 0, SETALL, SemctlArg::Array(&[3, 4]))
        .unwrap();
    let q = a.msgget(&root, 0x22, IPC_CREAT | 0o600).unwrap();
    a.msgsnd(&root, q, 9, b"text", 0, &WaitCtx::FOREVER)
        .unwrap();
    let shm = a.shmget(&root, 0x33, 100, IPC_CREAT | 0o600).unwrap();
    let at = a.shmat(&root, shm, 0, 0).unwrap();
    at.write(10, b"bytes").unwrap();
    let dir = scratch("damage");
    let path = dir.join("state");
    save(&a, &backing, &path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let (b, _) = namespace();
    restore(&b, &path).unwrap();
    assert_eq!(objects(&b), (1, 1, 1));

    // One namespace for every attempt: each must leave it empty.
    let (ns, _) = namespace();
    let refused = |bytes: &[u8], what: &str| -> String {
        std::fs::write(&path, bytes).unwrap();
        match restore(&ns, &path) {
            Err(RestoreError::Damaged(d)) => {
                assert_eq!(objects(&ns), (0, 0, 0), "{what}: something was restored");
                d.0
            }
            other => panic!("{what}: {other:?}"),
        }
    };
    for len in 0..good.len() {
        let why = refused(&good[..len], &format!("truncated to {len}"));
        assert!(
            why.contains("truncated") || len < 9,
            "truncated to {len}: {why}"
        );
    }
    let mut longer = good.clone();
    longer.push(0);
    refused(&longer, "one byte appended");
    for bit in 0..good.len() * 8 {
        let mut bad = good.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        refused(&bad, &format!("bit {bit} flipped"));
    }
    let mut text = good.clone();
    let at = text.windows(4).position(|w| w == b"text").unwrap();
    text[at] = b'T';
    assert!(refused(&text, "message text").contains("checksum mismatch"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment that cannot be saved fails the save, which says which segment, and the previous
/// file stays: memory that is not one of the daemon's memfds, and a memory file a client
/// shrank (where seals do not forbid it).
#[test]
fn a_segment_that_cannot_be_read_fails_the_save_loudly() {
    use std::os::fd::AsRawFd;
    let root = Cred::root(1);
    let (a, backing) = namespace();
    let dir = scratch("shrunk");
    let path = dir.join("state");
    save(&a, &backing, &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let failed = |ns: &IpcNamespace, backing: &MemfdBacking, shm: i32| {
        let e = save(ns, backing, &path).expect_err("saved without the segment");
        assert!(e.to_string().contains(&format!("segment {shm}")), "{e}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the old file was replaced"
        );
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "a temporary file was left behind");
    };

    let heap = IpcNamespace::new();
    let shm = heap.shmget(&root, 0x5eec, 100, IPC_CREAT | 0o600).unwrap();
    failed(&heap, &backing, shm);

    let shm = a.shmget(&root, 0x5eed, 1 << 20, IPC_CREAT | 0o600).unwrap();
    let at = a.shmat(&root, shm, 0, 0).unwrap();
    at.write(0, b"data").unwrap();
    let fd = backing.fd_of(&at.memory).unwrap();
    // What an attacher could do with the descriptor shmat sent it, were it not sealed.
    // SAFETY: shrinks our own open memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) } == 0 {
        failed(&a, &backing, shm);
    } else {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The temporary file is created, never opened through what is there: a symbolic link at
/// its name is left alone (and so is its target), and with every name taken the save fails.
#[test]
fn the_temporary_file_never_follows_a_planted_link() {
    let (a, backing) = namespace();
    let dir = scratch("symlink");
    let path = dir.join("state");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    // The name the daemon used to write to, and its first temporary name now.
    std::os::unix::fs::symlink(&victim, path.with_extension("tmp")).unwrap();
    let first = temp_name(&path, std::process::id(), 0);
    std::os::unix::fs::symlink(&victim, &first).unwrap();
    save(&a, &backing, &path).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&first).unwrap().is_symlink());
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    for n in 1..TEMP_ATTEMPTS {
        std::os::unix::fs::symlink(&victim, temp_name(&path, std::process::id(), n)).unwrap();
    }
    assert!(save(&a, &backing, &path).is_err());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Limits and msg_qbytes lowered below what is in use (Linux allows it) do not stop the
/// restore, and come back as they were.
#[test]
fn limits_lowered_below_use_are_restored_after_the_objects() {
    let root = Cred::root(1);
    let (a, backing) = namespace();
    let q = a.msgget(&root, 0x44, IPC_CREAT | 0o600).unwrap();
    a.msgsnd(&root, q, 1, &[7u8; 100], 0, &WaitCtx::FOREVER)
        .unwrap();
    msg_set(&a, &root, q, (0, 0, 0o600), 10);
    a.msgget(&root, 0x45, IPC_CREAT | 0o600).unwrap();
    a.sysctl_write(&root, uipc::ipc::Sysctl::MsgMni, "1")
        .unwrap();
    a.sysctl_write(&root, uipc::ipc::Sysctl::MsgMax, "50")
        .unwrap();
    let dir = scratch("limits");
    let path = dir.join("state");
    save(&a, &backing, &path).unwrap();
    let (b, _) = namespace();
    restore(&b, &path).unwrap();
    assert_eq!(b.sysctl_read(uipc::ipc::Sysctl::MsgMni).trim(), "1");
    assert_eq!(b.sysctl_read(uipc::ipc::Sysctl::MsgMax).trim(), "50");
    let Ok(MsgctlOut::Stat { ds, .. }) = b.msgctl(&root, q, IPC_STAT, MsgctlArg::None) else {
        panic!("queue {q} missing")
    };
    assert_eq!((ds.qnum, ds.qbytes), (1, 10));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A never-written gibibyte costs nothing in the file, and comes back as a hole.
#[test]
fn sparse_segment_memory_is_saved_and_restored_sparse() {
    let root = Cred::root(1);
    let (a, backing) = namespace();
    let shm = a.shmget(&root, 0x66, 1 << 30, IPC_CREAT | 0o600).unwrap();
    let at = a.shmat(&root, shm, 0, 0).unwrap();
    at.write((1 << 29) + 5, b"mid").unwrap();
    let dir = scratch("sparse");
    let path = dir.join("state");
    save(&a, &backing, &path).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 16 << 10);
    let (b, _) = namespace();
    restore(&b, &path).unwrap();
    let at = b.shmat(&root, shm, 0, SHM_RDONLY).unwrap();
    let mut buf = [0u8; 3];
    at.read((1 << 29) + 5, &mut buf).unwrap();
    assert_eq!(&buf, b"mid");
    assert!(at.memory.resident_pages() <= 4);
    let _ = std::fs::remove_dir_all(&dir);
}
