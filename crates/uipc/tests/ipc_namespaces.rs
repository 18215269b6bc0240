//! IPC namespaces: isolation of objects and limits, and the two id layouts (the default 15
//! index bits, and `ipcmni_extend`'s 24 index bits, 7 sequence bits and minimum cycle 4096),
//! seen through the public calls.

use uipc::ipc::consts::*;
use uipc::ipc::msg::MsgctlArg;
use uipc::ipc::{IpcNamespace, NamespaceOptions, Sysctl};
use uipc::{Cred, Errno};

fn root() -> Cred {
    Cred::root(100)
}

fn extended() -> IpcNamespace {
    IpcNamespace::with_options(NamespaceOptions {
        extended_ids: true,
        ..Default::default()
    })
}

/// msgget(IPC_PRIVATE) then IPC_RMID, `n` times; the ids handed out.
fn create_remove(ns: &IpcNamespace, n: usize) -> Vec<i32> {
    (0..n)
        .map(|_| {
            let id = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
            ns.msgctl(&root(), id, IPC_RMID, MsgctlArg::None).unwrap();
            id
        })
        .collect()
}

fn exists(ns: &IpcNamespace, id: i32) -> Result<(), Errno> {
    ns.msgctl(&root(), id, IPC_STAT, MsgctlArg::None)
        .map(|_| ())
}

#[test]
fn namespaces_share_nothing_keys_ids_or_limits() {
    let (a, b) = (IpcNamespace::new(), IpcNamespace::new());
    let in_a = a.msgget(&root(), 0x1234, IPC_CREAT | 0o600).unwrap();
    assert_eq!(b.msgget(&root(), 0x1234, 0), Err(Errno::ENOENT));
    let in_b = b.semget(&root(), 0x1234, 1, IPC_CREAT | 0o600).unwrap();
    assert_eq!((in_a, in_b), (0, 0), "each namespace counts its ids from 0");
    a.sysctl_write(&root(), Sysctl::MsgMnb, "100").unwrap();
    assert_eq!(b.sysctl_read(Sysctl::MsgMnb), "16384");
    a.msgctl(&root(), in_a, IPC_RMID, MsgctlArg::None).unwrap();
    assert_eq!(b.semget(&root(), 0x1234, 1, 0), Ok(in_b));
    assert_eq!(exists(&a, in_a), Err(Errno::EINVAL));
}

#[test]
fn default_layout_cycles_64_indices_then_moves_seq_by_32768() {
    let ns = IpcNamespace::new();
    let ids = create_remove(&ns, 66);
    assert_eq!(ids[..64], (0..64).collect::<Vec<_>>()[..]);
    assert_eq!(ids[64..], [32768, 32769]);
}

#[test]
fn extended_layout_cycles_4096_indices_then_moves_seq_by_2_pow_24() {
    let ns = extended();
    let ids = create_remove(&ns, 4098);
    assert_eq!(ids[..4096], (0..4096).collect::<Vec<_>>()[..]);
    assert_eq!(ids[4096..], [1 << 24, (1 << 24) + 1]);
    let live = ns.msgget(&root(), IPC_PRIVATE, 0o600).unwrap();
    assert_eq!(live, (1 << 24) + 2);
    assert_eq!(
        exists(&ns, 2),
        Err(Errno::EINVAL),
        "same index, old sequence: stale"
    );
    assert_eq!(exists(&ns, live), Ok(()));
}

#[test]
fn extended_layout_sequence_has_7_bits_and_wraps_to_zero() {
    let ns = extended();
    // seq runs 0..=126 (Linux resets it when it reaches INT_MAX >> 24 = 127).
    let ids = create_remove(&ns, 127 * 4096 + 1);
    assert_eq!(ids[126 * 4096], 126 << 24);
    assert_eq!(ids[127 * 4096], 0, "after seq 126 comes seq 0 again");
}

#[test]
fn extended_next_id_restores_an_exact_id_with_a_high_index() {
    let ns = extended();
    let wanted = (5 << 24) + 70_000;
    ns.sysctl_write(&root(), Sysctl::MsgNextId, &wanted.to_string())
        .unwrap();
    assert_eq!(ns.msgget(&root(), IPC_PRIVATE, 0o600), Ok(wanted));
    assert_eq!(ns.sysctl_read(Sysctl::MsgNextId), "-1", "consumed");
    assert_eq!(exists(&ns, wanted), Ok(()));
    assert_eq!(exists(&ns, 70_000), Err(Errno::EINVAL), "seq 0 is stale");
}
