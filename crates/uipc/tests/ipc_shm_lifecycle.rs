//! Process lifecycle: fork, exec, exit, orphans and `shm_rmid_forced`.

use uipc::ipc::consts::*;
use uipc::ipc::shm::{ShmctlOut, ShmidDs};
use uipc::ipc::{IpcNamespace, Sysctl};
use uipc::{Cred, Errno};

fn stat(ns: &IpcNamespace, id: i32) -> Result<ShmidDs, Errno> {
    match ns.shmctl(&Cred::root(1), id, IPC_STAT, None)? {
        ShmctlOut::Stat(_, ds) => Ok(ds),
        o => panic!("{o:?}"),
    }
}
/// Segment `id` is gone: IPC_STAT refuses it with EINVAL.
fn assert_gone(ns: &IpcNamespace, id: i32, why: &str) {
    assert_eq!(stat(ns, id).err(), Some(Errno::EINVAL), "{why}");
}

/// Process `creator` makes two segments and `other` one, `other` attaches the second of the
/// creator's, then `creator` exits: the three ids in that order and the attachment's address.
fn creator_exits(ns: &IpcNamespace, creator: i32, other: &Cred) -> (i32, i32, i32, u64) {
    let c = Cred::root(creator);
    let lone = ns.shmget(&c, 0, 1, 0o600).unwrap();
    let attached = ns.shmget(&c, 0, 1, 0o600).unwrap();
    let others = ns.shmget(other, 0, 1, 0o600).unwrap();
    let a = ns.shmat(other, attached, 0, 0).unwrap();
    ns.process_exit(creator);
    (lone, attached, others, a.addr)
}

fn forced(ns: &IpcNamespace, on: bool) {
    ns.sysctl_write(
        &Cred::root(1),
        Sysctl::ShmRmidForced,
        if on { "1" } else { "0" },
    )
    .unwrap();
}

#[test]
fn fork_inherits_attachments_and_exec_and_exit_detach() {
    let ns = IpcNamespace::new();
    let p = Cred::root(10);
    let id = ns.shmget(&p, 0, 100, 0o600).unwrap();
    let a = ns.shmat(&p, id, 0, 0).unwrap();
    let b = ns.shmat(&p, id, 0, SHM_RDONLY).unwrap();
    ns.process_fork(10, 11);
    assert_eq!(ns.shm_attachments(11), ns.shm_attachments(10));
    let ds = stat(&ns, id).unwrap();
    assert_eq!(
        (ds.nattch, ds.lpid),
        (4, 10),
        "fork counts, recorded as the parent"
    );
    ns.shmdt(&Cred::root(11), a.addr).unwrap();
    assert_eq!(stat(&ns, id).unwrap().nattch, 3);
    ns.process_exec(11);
    assert!(ns.shm_attachments(11).is_empty());
    let ds = stat(&ns, id).unwrap();
    assert_eq!((ds.nattch, ds.lpid), (2, 11));
    ns.process_exit(10);
    assert_eq!(stat(&ns, id).unwrap().nattch, 0);
    assert_eq!(ns.shmdt(&p, b.addr), Err(Errno::EINVAL));
    assert!(stat(&ns, id).is_ok(), "forced 0: the orphan stays");
}

#[test]
fn forced_destroys_at_last_detach_whoever_created_it() {
    let ns = IpcNamespace::new();
    let c = Cred::root(10);
    forced(&ns, true);
    let id = ns.shmget(&c, 0, 1, 0o600).unwrap();
    assert!(stat(&ns, id).is_ok(), "creation alone destroys nothing");
    let a = ns.shmat(&c, id, 0, 0).unwrap();
    ns.shmdt(&c, a.addr).unwrap();
    assert_gone(&ns, id, "as Linux 6.18 does");
}

#[test]
fn exit_with_forced_destroys_unattached_creations_and_the_rest_at_last_detach() {
    let ns = IpcNamespace::new();
    forced(&ns, true);
    let other = Cred::root(21);
    let (lone, shared, by_other, addr) = creator_exits(&ns, 20, &other);
    assert_gone(&ns, lone, "an unattached creation, forced at exit");
    assert_eq!(stat(&ns, shared).unwrap().nattch, 1);
    assert!(stat(&ns, by_other).is_ok(), "not the exiting process's");
    ns.shmdt(&other, addr).unwrap();
    assert_gone(&ns, shared, "forced: destroyed at the last detach");
}

#[test]
fn orphans_stay_until_the_sysctl_is_written_to_one() {
    let ns = IpcNamespace::new();
    let live = Cred::root(31);
    let (orphan, attached_orphan, kept, addr) = creator_exits(&ns, 30, &live);
    assert!(stat(&ns, orphan).is_ok());
    forced(&ns, false);
    assert!(stat(&ns, orphan).is_ok(), "writing 0 destroys nothing");
    forced(&ns, true);
    assert_gone(&ns, orphan, "forced: an unattached orphan");
    assert!(stat(&ns, attached_orphan).is_ok(), "still attached");
    assert!(stat(&ns, kept).is_ok(), "its creator lives");
    forced(&ns, false);
    ns.shmdt(&live, addr).unwrap();
    assert!(stat(&ns, attached_orphan).is_ok(), "forced back to 0");
    forced(&ns, true);
    assert_gone(&ns, attached_orphan, "forced: the orphan once detached");
    assert!(stat(&ns, kept).is_ok());
}

#[test]
fn destroyed_segments_leave_no_process_records_behind() {
    let ns = IpcNamespace::new();
    let c = Cred::root(40);
    for _ in 0..100 {
        let id = ns.shmget(&c, 0, 1, 0o600).unwrap();
        let a = ns.shmat(&c, id, 0, 0).unwrap();
        ns.shmctl(&c, id, IPC_RMID, None).unwrap();
        ns.shmdt(&c, a.addr).unwrap();
    }
    assert!(ns.shm_attachments(40).is_empty());
    ns.process_exit(40);
    ns.process_exit(40);
    assert_eq!(ns.proc_sysvipc_shm().lines().count(), 1);
}

#[test]
fn exec_keeps_the_process_a_living_creator() {
    let ns = IpcNamespace::new();
    let c = Cred::root(50);
    let id = ns.shmget(&c, 0, 1, 0o600).unwrap();
    ns.process_exec(50);
    forced(&ns, true);
    assert!(
        stat(&ns, id).is_ok(),
        "not an orphan: its creator only exec'd"
    );
    ns.process_exit(50);
    assert_gone(&ns, id, "forced: destroyed at exit");
}

#[test]
fn shm_rnd_rounding_to_zero_records_an_explicit_attachment_at_zero() {
    let ns = IpcNamespace::new();
    let c = Cred::root(60);
    let id = ns.shmget(&c, 0, 1, 0o600).unwrap();
    let a = ns.shmat(&c, id, 0x10, SHM_RND).unwrap();
    assert_eq!(a.addr, 0, "as Linux maps it at 0 (MAP_FIXED)");
    assert_eq!(
        ns.shmat(&c, id, 0x20, SHM_RND).err(),
        Some(Errno::EINVAL),
        "overlap"
    );
    ns.shmdt(&c, 0).unwrap();
}

#[test]
fn remap_of_the_last_pages_after_rmid_destroys_the_segment_and_fails() {
    let ns = IpcNamespace::new();
    let p = Cred::root(10);
    let id = ns.shmget(&p, 0, 3 * PAGE_SIZE, 0o600).unwrap();
    let a = ns.shmat(&p, id, 0, 0).unwrap();
    let b = ns.shmat(&p, id, 0, 0).unwrap();
    // Before IPC_RMID: close and reopen, nattch unchanged.
    ns.shm_remap(&p, a.addr, true).unwrap();
    ns.shm_remap(&p, a.addr, false).unwrap();
    assert_eq!(stat(&ns, id).unwrap().nattch, 2);
    ns.shmctl(&p, id, IPC_RMID, None).unwrap();
    // Another attachment keeps the segment: the remap succeeds.
    ns.shm_remap(&p, a.addr, true).unwrap();
    ns.shmdt(&p, b.addr).unwrap();
    // Part of the attachment stays mapped: nattch cannot reach 0.
    ns.shm_remap(&p, a.addr, false).unwrap();
    assert_eq!(stat(&ns, id).unwrap().nattch, 1);
    // The last mapping closed: the segment is gone, the remap fails, the attachment too.
    assert_eq!(ns.shm_remap(&p, a.addr, true), Err(Errno::EINVAL));
    assert_gone(&ns, id, "destroyed with its last pages");
    assert_eq!(ns.shmdt(&p, a.addr), Err(Errno::EINVAL));
    assert_eq!(ns.shm_remap(&p, a.addr, false), Err(Errno::EINVAL));
}
