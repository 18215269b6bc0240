//! `--state`: a namespace saved and restored keeps its ids, keys, owners, modes, semaphore
//! values, queued messages (in order) and segment contents; a damaged file is refused.

use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidSet};
use uipc::ipc::sem::{Sembuf, SemctlArg, SemctlOut};
use uipc::ipc::shm::{ShmSet, ShmctlOut};
use uipc::ipc::{IpcNamespace, NamespaceOptions};
use uipc::{Cred, WaitCtx};
use uipc_server::memfd::MemfdBacking;
use uipc_server::state::{restore, save};

fn namespace() -> IpcNamespace {
    IpcNamespace::with_options(NamespaceOptions {
        shm_backing: Some(std::sync::Arc::new(MemfdBacking::new())),
        ..Default::default()
    })
}

#[test]
fn a_saved_namespace_comes_back_with_the_same_ids_values_messages_and_bytes() {
    let root = Cred::root(1);
    let user = Cred::user(2, 1000, 100);
    let a = namespace();
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
    let set = MsqidSet {
        uid: 1000,
        gid: 100,
        mode: 0o620,
        qbytes: 999,
    };
    a.msgctl(&user, q, IPC_SET, MsgctlArg::Set(set)).unwrap();
    let shm = a.shmget(&user, 0x5a, 5000, IPC_CREAT | 0o600).unwrap();
    let at = a.shmat(&user, shm, 0, 0).unwrap();
    at.write(4990, b"tail!").unwrap();
    at.write(0, b"head").unwrap();
    a.shmdt(&user, at.addr).unwrap();
    let gone = a.shmget(&root, IPC_PRIVATE, 100, 0o600).unwrap();
    let at = a.shmat(&root, gone, 0, 0).unwrap();
    a.shmctl(&root, gone, IPC_RMID, None).unwrap();

    let path = std::env::temp_dir().join(format!("uipc-state-test-{}", std::process::id()));
    save(&a, &path).unwrap();
    a.shmdt(&root, at.addr).unwrap();
    let b = namespace();
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

    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&path, &bytes).unwrap();
    assert!(
        restore(&namespace(), &path).is_err(),
        "a truncated file is refused"
    );
    std::fs::write(&path, b"not a state file").unwrap();
    assert!(restore(&namespace(), &path).is_err());
    let _ = std::fs::remove_file(&path);
}
