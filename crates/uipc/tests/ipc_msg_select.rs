//! msgrcv selection modes and the qbytes fit rule.

use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidSet};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, WaitCtx};

const F: WaitCtx<'static> = WaitCtx::FOREVER;

fn filled(types: &[i64]) -> (IpcNamespace, i32) {
    let ns = IpcNamespace::new();
    let root = Cred::root(1);
    let id = ns.msgget(&root, IPC_PRIVATE, 0o600).unwrap();
    for (i, &t) in types.iter().enumerate() {
        ns.msgsnd(&root, id, t, &[i as u8], IPC_NOWAIT, &F).unwrap();
    }
    (ns, id)
}

/// Receives with IPC_NOWAIT; returns (type, position it was sent at).
fn take(ns: &IpcNamespace, id: i32, msgtyp: i64, flags: i32) -> Result<(i64, u8), Errno> {
    ns.msgrcv(&Cred::root(1), id, 10, msgtyp, flags | IPC_NOWAIT, &F)
        .map(|(t, text)| (t, text[0]))
}

#[test]
fn negative_msgtyp_takes_the_lowest_type_at_most_its_magnitude() {
    let (ns, id) = filled(&[5, 3, 2, 3, 7]);
    assert_eq!(take(&ns, id, -3, 0), Ok((2, 2)));
    assert_eq!(take(&ns, id, -3, 0), Ok((3, 1)), "then the first 3");
    assert_eq!(take(&ns, id, -3, 0), Ok((3, 3)));
    assert_eq!(take(&ns, id, -3, 0), Err(Errno::ENOMSG), "<= bound, not <");
    assert_eq!(take(&ns, id, -5, 0), Ok((5, 0)));
    assert_eq!(
        take(&ns, id, i64::MIN, 0),
        Ok((7, 4)),
        "LONG_MIN acts as LONG_MAX"
    );
}

#[test]
fn zero_takes_the_first_and_positive_the_first_of_its_type() {
    let (ns, id) = filled(&[4, 2, 4, 9]);
    assert_eq!(take(&ns, id, 4, 0), Ok((4, 0)));
    assert_eq!(take(&ns, id, 4, 0), Ok((4, 2)));
    assert_eq!(take(&ns, id, 4, 0), Err(Errno::ENOMSG));
    assert_eq!(take(&ns, id, 0, 0), Ok((2, 1)));
    assert_eq!(take(&ns, id, 0, 0), Ok((9, 3)));
    assert_eq!(take(&ns, id, 0, 0), Err(Errno::ENOMSG));
}

#[test]
fn msg_except_takes_the_first_of_another_type_and_is_ignored_otherwise() {
    let (ns, id) = filled(&[4, 4, 6, 4, 2]);
    assert_eq!(take(&ns, id, 4, MSG_EXCEPT), Ok((6, 2)));
    assert_eq!(take(&ns, id, 4, MSG_EXCEPT), Ok((2, 4)));
    assert_eq!(take(&ns, id, 4, MSG_EXCEPT), Err(Errno::ENOMSG));
    assert_eq!(
        take(&ns, id, 0, MSG_EXCEPT),
        Ok((4, 0)),
        "0 with MSG_EXCEPT is any"
    );
    assert_eq!(
        take(&ns, id, -4, MSG_EXCEPT),
        Ok((4, 1)),
        "negative ignores MSG_EXCEPT"
    );
}

#[test]
fn qbytes_caps_the_message_count_as_well_as_the_bytes() {
    let ns = IpcNamespace::new();
    let root = Cred::root(1);
    let id = ns.msgget(&root, IPC_PRIVATE, 0o600).unwrap();
    let set = |q| {
        let arg = MsgctlArg::Set(MsqidSet {
            uid: 0,
            gid: 0,
            mode: 0o600,
            qbytes: q,
        });
        ns.msgctl(&root, id, IPC_SET, arg).unwrap()
    };
    assert_eq!(set(3), MsgctlOut::Done);
    for _ in 0..3 {
        ns.msgsnd(&root, id, 1, b"", IPC_NOWAIT, &F).unwrap();
    }
    assert_eq!(
        ns.msgsnd(&root, id, 1, b"", IPC_NOWAIT, &F),
        Err(Errno::EAGAIN)
    );
    set(10);
    ns.msgsnd(&root, id, 1, b"1234567", IPC_NOWAIT, &F).unwrap();
    assert_eq!(
        ns.msgsnd(&root, id, 1, b"1234", IPC_NOWAIT, &F),
        Err(Errno::EAGAIN),
        "bytes"
    );
    ns.msgsnd(&root, id, 1, b"123", IPC_NOWAIT, &F).unwrap();
    ns.msgsnd(&root, id, 1, b"", IPC_NOWAIT, &F).unwrap();
    while ns.msgrcv(&root, id, 100, 0, IPC_NOWAIT, &F).is_ok() {}
    assert_eq!(
        ns.msgsnd(&root, id, 1, &[0; 11], IPC_NOWAIT, &F),
        Err(Errno::EAGAIN),
        "larger than qbytes never fits, even on an empty queue"
    );
}
