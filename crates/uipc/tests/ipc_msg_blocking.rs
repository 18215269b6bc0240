//! Sleeping in msgsnd / msgrcv: pipelined send, E2BIG to sleepers, EINTR, EIDRM, wakeups.
//!
//! A test waits for a thread to be asleep by polling the queue's own counters where it can,
//! and otherwise gives it a short head start; every sleep is bounded by a deadline so a bug
//! fails the test (EINTR) instead of hanging it.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidDs, MsqidSet};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, Interrupt, WaitCtx};

const F: WaitCtx<'static> = WaitCtx::FOREVER;

fn setup() -> (Arc<IpcNamespace>, i32) {
    let ns = Arc::new(IpcNamespace::new());
    let id = ns.msgget(&Cred::root(1), IPC_PRIVATE, 0o666).unwrap();
    (ns, id)
}

fn bounded() -> WaitCtx<'static> {
    WaitCtx::timeout(Duration::from_secs(10))
}

fn stat(ns: &IpcNamespace, id: i32) -> MsqidDs {
    match ns
        .msgctl(&Cred::root(1), id, IPC_STAT, MsgctlArg::None)
        .unwrap()
    {
        MsgctlOut::Stat { ds, .. } => ds,
        other => panic!("{other:?}"),
    }
}

fn receiver(
    ns: &Arc<IpcNamespace>,
    id: i32,
    tid: i32,
    max: i64,
    typ: i64,
    flags: i32,
) -> JoinHandle<Result<(i64, Vec<u8>), Errno>> {
    let ns = ns.clone();
    let h = thread::spawn(move || {
        let cred = Cred::root(tid).in_thread(tid + 1);
        ns.msgrcv(&cred, id, max, typ, flags, &bounded())
    });
    settle();
    h
}

/// Gives a freshly spawned thread time to queue itself.
fn settle() {
    thread::sleep(Duration::from_millis(50));
}

fn qbytes(ns: &IpcNamespace, id: i32, q: u64) {
    let arg = MsgctlArg::Set(MsqidSet {
        uid: 0,
        gid: 0,
        mode: 0o666,
        qbytes: q,
    });
    ns.msgctl(&Cred::root(1), id, IPC_SET, arg).unwrap();
}

#[test]
fn send_hands_the_message_to_a_sleeping_receiver_without_queueing_it() {
    let (ns, id) = setup();
    let r = receiver(&ns, id, 500, 100, 7, 0);
    ns.msgsnd(&Cred::root(9), id, 3, b"other", 0, &F).unwrap();
    ns.msgsnd(&Cred::root(9), id, 7, b"seven", 0, &F).unwrap();
    assert_eq!(r.join().unwrap(), Ok((7, b"seven".to_vec())));
    let ds = stat(&ns, id);
    assert_eq!(
        (ds.qnum, ds.cbytes, ds.lspid),
        (1, 5, 9),
        "only type 3 queued"
    );
    assert_eq!(
        ds.lrpid, 501,
        "a pipelined receive records the receiver's thread id"
    );
    assert!(ds.rtime > 0);
}

#[test]
fn too_small_receiver_gets_e2big_and_the_next_receiver_gets_the_message() {
    let (ns, id) = setup();
    let small = receiver(&ns, id, 600, 2, 0, 0);
    let big = receiver(&ns, id, 700, 100, 0, 0);
    ns.msgsnd(&Cred::root(9), id, 1, b"hello", 0, &F).unwrap();
    assert_eq!(small.join().unwrap(), Err(Errno::E2BIG));
    assert_eq!(big.join().unwrap(), Ok((1, b"hello".to_vec())));
    assert_eq!(stat(&ns, id).qnum, 0);
}

#[test]
fn sleeping_receiver_with_msg_noerror_gets_a_truncated_message() {
    let (ns, id) = setup();
    let r = receiver(&ns, id, 600, 2, -5, MSG_NOERROR);
    ns.msgsnd(&Cred::root(9), id, 6, b"no", 0, &F).unwrap();
    ns.msgsnd(&Cred::root(9), id, 5, b"hello", 0, &F).unwrap();
    assert_eq!(r.join().unwrap(), Ok((5, b"he".to_vec())));
}

#[test]
fn full_queue_blocks_the_sender_until_a_receive_makes_room() {
    let (ns, id) = setup();
    qbytes(&ns, id, 4);
    ns.msgsnd(&Cred::root(1), id, 1, b"abcd", 0, &F).unwrap();
    assert_eq!(
        ns.msgsnd(&Cred::root(1), id, 1, b"e", IPC_NOWAIT, &F),
        Err(Errno::EAGAIN)
    );
    let ns2 = ns.clone();
    let s = thread::spawn(move || ns2.msgsnd(&Cred::root(2), id, 2, b"ef", 0, &bounded()));
    settle();
    assert!(!s.is_finished());
    assert_eq!(
        ns.msgrcv(&Cred::root(3), id, 10, 0, 0, &F),
        Ok((1, b"abcd".to_vec()))
    );
    assert_eq!(s.join().unwrap(), Ok(()));
    assert_eq!(stat(&ns, id).lspid, 2);
}

#[test]
fn queue_full_by_message_count_blocks_the_sender_until_a_receive_frees_a_slot() {
    let (ns, id) = setup();
    qbytes(&ns, id, 2);
    ns.msgsnd(&Cred::root(1), id, 1, b"", 0, &F).unwrap();
    ns.msgsnd(&Cred::root(1), id, 1, b"", 0, &F).unwrap();
    let ns2 = ns.clone();
    let s = thread::spawn(move || ns2.msgsnd(&Cred::root(2), id, 2, b"", 0, &bounded()));
    settle();
    assert!(
        !s.is_finished(),
        "zero bytes fit, but qbytes 2 also caps the queue at 2 messages"
    );
    assert_eq!(stat(&ns, id).qnum, 2);
    assert_eq!(
        ns.msgrcv(&Cred::root(3), id, 10, 0, 0, &F),
        Ok((1, Vec::new()))
    );
    assert_eq!(s.join().unwrap(), Ok(()));
    let ds = stat(&ns, id);
    assert_eq!((ds.qnum, ds.lspid), (2, 2));
}

#[test]
fn raising_qbytes_wakes_a_blocked_sender() {
    let (ns, id) = setup();
    qbytes(&ns, id, 1);
    let ns2 = ns.clone();
    let s = thread::spawn(move || ns2.msgsnd(&Cred::root(2), id, 2, b"xyz", 0, &bounded()));
    settle();
    assert!(!s.is_finished(), "3 bytes never fit in qbytes 1");
    qbytes(&ns, id, 100);
    assert_eq!(s.join().unwrap(), Ok(()));
}

#[test]
fn interrupt_ends_sleeping_senders_and_receivers_with_eintr() {
    let (ns, id) = setup();
    qbytes(&ns, id, 0);
    let irq = Interrupt::new();
    let spawn_send = |ns: &Arc<IpcNamespace>, irq: &Interrupt| {
        let (ns, irq) = (ns.clone(), irq.clone());
        thread::spawn(move || {
            ns.msgsnd(
                &Cred::root(2),
                id,
                1,
                b"",
                0,
                &bounded().interruptible(&irq),
            )
        })
    };
    let s = spawn_send(&ns, &irq);
    let (ns2, irq2) = (ns.clone(), irq.clone());
    let r = thread::spawn(move || {
        ns2.msgrcv(
            &Cred::root(3),
            id,
            10,
            0,
            0,
            &bounded().interruptible(&irq2),
        )
    });
    settle();
    irq.raise();
    assert_eq!(s.join().unwrap(), Err(Errno::EINTR));
    assert_eq!(r.join().unwrap(), Err(Errno::EINTR));
    // The interrupted sleepers are gone: a send now reaches no stale receiver and queues.
    irq.clear();
    qbytes(&ns, id, 100);
    ns.msgsnd(&Cred::root(4), id, 1, b"x", 0, &F).unwrap();
    assert_eq!(stat(&ns, id).qnum, 1);
}

#[test]
fn rmid_wakes_every_sleeper_with_eidrm() {
    let (ns, id) = setup();
    qbytes(&ns, id, 0);
    let mut sleepers = Vec::new();
    for i in 0..2 {
        let ns2 = ns.clone();
        sleepers.push(thread::spawn(move || {
            ns2.msgsnd(&Cred::root(10 + i), id, 1, b"", 0, &bounded())
                .map(|()| (0, Vec::new()))
        }));
        sleepers.push(receiver(&ns, id, 20 + i, 10, i as i64, 0));
    }
    settle();
    ns.msgctl(&Cred::root(1), id, IPC_RMID, MsgctlArg::None)
        .unwrap();
    for s in sleepers {
        assert_eq!(s.join().unwrap(), Err(Errno::EIDRM));
    }
    assert_eq!(
        ns.msgsnd(&Cred::root(1), id, 1, b"", 0, &F),
        Err(Errno::EINVAL)
    );
}

#[test]
fn ipc_set_makes_sleeping_receivers_recheck_permission() {
    let (ns, id) = setup();
    let ns2 = ns.clone();
    let r = thread::spawn(move || ns2.msgrcv(&Cred::user(5, 1000, 1000), id, 10, 0, 0, &bounded()));
    settle();
    let arg = MsgctlArg::Set(MsqidSet {
        uid: 0,
        gid: 0,
        mode: 0o600,
        qbytes: 100,
    });
    ns.msgctl(&Cred::root(1), id, IPC_SET, arg).unwrap();
    assert_eq!(r.join().unwrap(), Err(Errno::EACCES));
}

#[test]
fn woken_sender_rechecks_permission_after_ipc_set() {
    let (ns, id) = setup();
    qbytes(&ns, id, 0);
    let ns2 = ns.clone();
    let s =
        thread::spawn(move || ns2.msgsnd(&Cred::user(5, 1000, 1000), id, 1, b"x", 0, &bounded()));
    settle();
    let arg = MsgctlArg::Set(MsqidSet {
        uid: 0,
        gid: 0,
        mode: 0o600,
        qbytes: 0,
    });
    ns.msgctl(&Cred::root(1), id, IPC_SET, arg).unwrap();
    settle();
    assert!(!s.is_finished(), "still no room: not woken");
    let arg = MsgctlArg::Set(MsqidSet {
        uid: 0,
        gid: 0,
        mode: 0o600,
        qbytes: 100,
    });
    ns.msgctl(&Cred::root(1), id, IPC_SET, arg).unwrap();
    assert_eq!(
        s.join().unwrap(),
        Err(Errno::EACCES),
        "room now, but no write permission"
    );
    assert_eq!(stat(&ns, id).qnum, 0);
}

#[test]
fn message_larger_than_qbytes_sleeps_until_interrupted() {
    let (ns, id) = setup();
    qbytes(&ns, id, 3);
    let r = ns.msgsnd(
        &Cred::root(1),
        id,
        1,
        b"four",
        0,
        &WaitCtx::timeout(Duration::from_millis(30)),
    );
    assert_eq!(r, Err(Errno::EINTR), "a deadline acts as a signal");
    assert_eq!(stat(&ns, id).qnum, 0);
}
