//! shmat / shmdt: checks, addresses, counts, SHM_DEST and shared data.

use uipc::ipc::consts::*;
use uipc::ipc::shm::{ShmctlOut, ShmidDs};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno};

fn root() -> Cred {
    Cred::root(100)
}
fn stat(ns: &IpcNamespace, id: i32) -> Result<ShmidDs, Errno> {
    match ns.shmctl(&root(), id, IPC_STAT, None)? {
        ShmctlOut::Stat(_, ds) => Ok(ds),
        o => panic!("{o:?}"),
    }
}

#[test]
fn shmat_checks_id_address_and_permissions_in_order() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.shmget(&r, 0, 5000, 0o640).unwrap();
    let reader = Cred {
        groups: vec![0],
        ..Cred::user(300, 1000, 1000)
    };
    let other = Cred::user(301, 2000, 2000);
    assert_eq!(ns.shmat(&r, -1, 0, 0).err(), Some(Errno::EINVAL));
    assert_eq!(ns.shmat(&r, id + 32768, 0, 0).err(), Some(Errno::EINVAL));
    assert_eq!(ns.shmat(&r, id, 0x1001, 0).err(), Some(Errno::EINVAL));
    assert_eq!(ns.shmat(&r, id, 0, SHM_REMAP).err(), Some(Errno::EINVAL));
    assert_eq!(
        ns.shmat(&r, id, 0x10, SHM_RND | SHM_REMAP).err(),
        Some(Errno::EINVAL)
    );
    // Address checks come before the permission check.
    assert_eq!(ns.shmat(&other, id, 0x1001, 0).err(), Some(Errno::EINVAL));
    assert_eq!(
        ns.shmat(&other, id, 0, SHM_RDONLY).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(
        ns.shmat(&reader, id, 0, 0).err(),
        Some(Errno::EACCES),
        "needs rw"
    );
    assert_eq!(
        ns.shmat(&reader, id, 0, SHM_RDONLY | SHM_EXEC).err(),
        Some(Errno::EACCES)
    );
    let ro = ns.shmat(&reader, id, 0, SHM_RDONLY).unwrap();
    assert!(ro.read_only);
    assert_eq!(ro.write(0, b"x"), Err(Errno::EFAULT));
    let rnd = ns.shmat(&r, id, 0x7000_1234, SHM_RND).unwrap();
    assert_eq!(rnd.addr, 0x7000_0000 + 0x1000);
    assert_eq!((rnd.size, rnd.len), (5000, 8192));
    assert_eq!(
        ns.shmat(&r, id, 0x7000_2000, 0).err(),
        Some(Errno::EINVAL),
        "overlaps the attachment at 0x7000_1000"
    );
    assert_eq!(stat(&ns, id).unwrap().nattch, 2);
    let re = ns.shmat(&r, id, 0x7000_2000, SHM_REMAP).unwrap();
    assert_eq!(re.addr, 0x7000_2000);
    assert_eq!(
        ns.shm_attachments(100),
        vec![(0x7000_2000, id)],
        "remap replaced it"
    );
    assert_eq!(stat(&ns, id).unwrap().nattch, 2);
    assert_eq!(
        ns.shmat(&r, id, !0xfff, 0).err(),
        Some(Errno::EINVAL),
        "wraps"
    );
}

#[test]
fn counts_times_and_pids_follow_attach_and_detach() {
    let ns = IpcNamespace::new();
    let a = Cred::root(10);
    let b = Cred::root(11);
    let id = ns.shmget(&a, 0, 100, 0o600).unwrap();
    let x = ns.shmat(&a, id, 0, 0).unwrap();
    let y = ns.shmat(&b, id, 0, 0).unwrap();
    let z = ns.shmat(&b, id, 0, 0).unwrap();
    assert_ne!(y.addr, z.addr, "fake addresses are unique per process");
    assert_eq!(y.addr % 4096, 0);
    let ds = stat(&ns, id).unwrap();
    assert_eq!((ds.nattch, ds.lpid, ds.dtime), (3, 11, 0));
    assert!(ds.atime > 0);
    assert_eq!(x.addr, y.addr, "separate address spaces");
    assert_eq!(
        ns.shmdt(&a, z.addr),
        Err(Errno::EINVAL),
        "another process's address"
    );
    assert_eq!(ns.shmdt(&b, y.addr + 1), Err(Errno::EINVAL));
    ns.shmdt(&a, x.addr).unwrap();
    assert_eq!(ns.shmdt(&a, x.addr), Err(Errno::EINVAL), "second shmdt");
    let ds = stat(&ns, id).unwrap();
    assert_eq!((ds.nattch, ds.lpid), (2, 10));
    assert!(ds.dtime > 0);
    ns.shmdt(&b, y.addr).unwrap();
    ns.shmdt(&b, z.addr).unwrap();
    assert_eq!(stat(&ns, id).unwrap().nattch, 0);
    assert!(stat(&ns, id).is_ok(), "not destroyed without SHM_DEST");
}

#[test]
fn rmid_while_attached_marks_dest_makes_key_private_and_destroys_at_last_detach() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.shmget(&r, 0x99, 4096, IPC_CREAT | 0o640).unwrap();
    let a = ns.shmat(&r, id, 0, 0).unwrap();
    ns.shmctl(&r, id, IPC_RMID, None).unwrap();
    let ds = stat(&ns, id).unwrap();
    assert_eq!((ds.perm.key, ds.perm.mode, ds.nattch), (0, 0o1640, 1));
    assert_eq!(ns.shmget(&r, 0x99, 0, 0), Err(Errno::ENOENT));
    let proc_text = ns.proc_sysvipc_shm();
    let row = proc_text.lines().nth(1).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[0], cols[1], cols[2]), ("0", &*id.to_string(), "1640"));
    // A second RMID is fine while it exists; attaching is still allowed.
    ns.shmctl(&r, id, IPC_RMID, None).unwrap();
    let b = ns.shmat(&r, id, 0, 0).unwrap();
    let fresh = ns.shmget(&r, 0x99, 4096, IPC_CREAT | 0o600).unwrap();
    assert_ne!(fresh, id, "the old key now creates a new segment");
    ns.shmdt(&r, a.addr).unwrap();
    assert!(stat(&ns, id).is_ok());
    ns.shmdt(&r, b.addr).unwrap();
    assert_eq!(
        stat(&ns, id).err(),
        Some(Errno::EINVAL),
        "destroyed at last detach"
    );
    assert_eq!(ns.shmat(&r, id, 0, 0).err(), Some(Errno::EINVAL));
    assert_eq!(ns.shmget(&r, 0x99, 0, 0), Ok(fresh));
}

#[test]
fn rmid_unattached_destroys_at_once() {
    let ns = IpcNamespace::new();
    let r = root();
    let id = ns.shmget(&r, 5, 1, IPC_CREAT | 0o600).unwrap();
    assert_eq!(
        ns.shmctl(&Cred::user(5, 9, 9), id, IPC_RMID, None),
        Err(Errno::EPERM)
    );
    ns.shmctl(&r, id, IPC_RMID, None).unwrap();
    assert_eq!(ns.shmctl(&r, id, IPC_RMID, None), Err(Errno::EINVAL));
    assert_eq!(ns.shmget(&r, 5, 0, 0), Err(Errno::ENOENT));
}

#[test]
fn data_written_through_one_attachment_is_seen_through_another() {
    let ns = IpcNamespace::new();
    let id = ns.shmget(&Cred::root(1), 0, 10000, 0o666).unwrap();
    let w = ns.shmat(&Cred::root(1), id, 0, 0).unwrap();
    let r = ns.shmat(&Cred::root(2), id, 0, SHM_RDONLY).unwrap();
    w.write(4090, b"hello, segment").unwrap();
    let mut buf = [0u8; 14];
    r.read(4090, &mut buf).unwrap();
    assert_eq!(&buf, b"hello, segment");
    assert_eq!(w.write(12285, b"too far"), Err(Errno::EFAULT));
    let proc_text = ns.proc_sysvipc_shm();
    let rss: u64 = proc_text
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .nth(14)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(rss, 8192, "two pages touched, in bytes");
}

#[test]
fn attach_move_rebinds_for_callers_that_map_themselves() {
    let ns = IpcNamespace::new();
    let c = root();
    let id = ns.shmget(&c, 0, 4096, 0o600).unwrap();
    let a = ns.shmat(&c, id, 0, 0).unwrap();
    let b = ns.shmat(&c, id, 0x5000_0000, 0).unwrap();
    assert_eq!(
        ns.shm_attach_move(100, a.addr, 0x5000_0000),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.shm_attach_move(100, a.addr, 0x6000_0001),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        ns.shm_attach_move(100, 0x1234_0000, 0x6000_0000),
        Err(Errno::EINVAL)
    );
    ns.shm_attach_move(100, a.addr, 0x6000_0000).unwrap();
    assert_eq!(ns.shmdt(&c, a.addr), Err(Errno::EINVAL));
    ns.shmdt(&c, 0x6000_0000).unwrap();
    ns.shmdt(&c, b.addr).unwrap();
    assert_eq!(stat(&ns, id).unwrap().nattch, 0);
}
