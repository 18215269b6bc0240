//! Sleeping on the message fast path against the engine: a hand-off (pipelined, counters as
//! Linux sets them), E2BIG to a too-small sleeper, a hand-off's late last step against the
//! sleeper's next arming, a cancel, the daemon adopting an armed
//! sleeper first in line (a daemon send, a second receiver, IPC_RMID), a cancel of an adopted
//! receive, and an exiting sleeper whose record is freed.

use super::owner::MsgArena;
use super::tests::{setup, stat};
use super::{load_text, store_text, Cancel, Got, MsgView, Recv, Ticket, Wait};
use crate::ipc::consts::*;
use crate::ipc::msg::MsgctlArg;
use crate::ipc::sem::fast::{Fast, TestCaller as Who};
use crate::ipc::IpcNamespace;
use crate::sync::AtomicU64;
use crate::{Cred, Errno, WaitCtx};
use std::sync::Arc;

fn send(v: &MsgView<'_>, id: i32, mtype: i64, text: &[u8], pid: u32) -> Fast<()> {
    let mut fill = |a: &[AtomicU64], b: &[AtomicU64]| {
        store_text(a, b, text);
        true
    };
    v.msgsnd(id, mtype, text.len(), 0, &Who(pid), &mut fill)
}

/// A blocking receive by process `pid` (thread `pid + 1000`) that may arm.
fn sleep_on(v: &MsgView<'_>, id: i32, max: i64, typ: i64, flags: i32, pid: u32) -> Ticket {
    let tid = move || pid + 1000;
    let mut deliver = |_: i64, _: usize, _: &[AtomicU64], _: &[AtomicU64]| Ok(());
    match v.msgrcv_sleep(id, (typ, max, flags), &Who(pid), Some(&tid), &mut deliver) {
        Recv::Armed(t) => t,
        other => panic!("not armed: {other:?}"),
    }
}

/// A published queue ([`setup`]) and receiver pid 20 asleep on it for any message of up to 64
/// bytes.
fn with_sleeper() -> (Arc<IpcNamespace>, Arc<MsgArena>, i32, Ticket) {
    let (ns, arena, id) = setup();
    let t = sleep_on(&arena.view(), id, 64, 0, 0, 20);
    (ns, arena, id, t)
}

fn collect(v: &MsgView<'_>, t: &Ticket) -> Result<(i64, Vec<u8>), Errno> {
    assert_eq!(v.wait_state(t), Wait::Ready);
    let mut got = (0, Vec::new());
    let mut deliver = |mtype: i64, n: usize, a: &[AtomicU64], b: &[AtomicU64]| {
        got = (mtype, load_text(a, b, n));
        Ok(())
    };
    match v.collect(t, &mut deliver) {
        Got::Done(r) => r.map(|n| {
            assert_eq!(n, got.1.len());
            got
        }),
        Got::Again => panic!("again"),
    }
}

fn asleep(v: &MsgView<'_>, t: &Ticket) {
    assert!(matches!(v.wait_state(t), Wait::Sleep(_)));
}

#[test]
fn a_fast_send_hands_its_message_to_the_sleeper() {
    let (ns, arena, id) = setup();
    let v = arena.view();
    let t = sleep_on(&v, id, 64, 2, 0, 20);
    asleep(&v, &t);
    // Another type is queued; the sleeper sleeps on.
    assert_eq!(send(&v, id, 1, b"one", 10), Fast::Done(Ok(())));
    asleep(&v, &t);
    assert_eq!(send(&v, id, 2, b"two", 11), Fast::Done(Ok(())));
    assert_eq!(collect(&v, &t), Ok((2, b"two".to_vec())));
    let ds = stat(&ns, id);
    assert_eq!((ds.qnum, ds.cbytes, ds.lspid, ds.lrpid), (1, 3, 11, 1020));
    assert_eq!((ds.stime, ds.rtime), (1_700_000_000, 1_700_000_000));
    // A second sleeper (the record is free again), cut to its buffer by MSG_NOERROR.
    let t = sleep_on(&v, id, 2, 5, MSG_NOERROR, 21);
    assert_eq!(send(&v, id, 5, b"five", 10), Fast::Done(Ok(())));
    assert_eq!(collect(&v, &t), Ok((5, b"fi".to_vec())));
}

#[test]
fn a_sleeper_with_a_small_buffer_gets_e2big_and_the_message_is_queued() {
    let (ns, arena, id) = setup();
    let v = arena.view();
    let t = sleep_on(&v, id, 2, 0, 0, 20);
    assert_eq!(send(&v, id, 1, b"long", 10), Fast::Done(Ok(())));
    assert_eq!(collect(&v, &t), Err(Errno::E2BIG));
    let ds = stat(&ns, id);
    assert_eq!((ds.qnum, ds.cbytes, ds.lrpid), (1, 4, 0));
}

#[test]
fn a_late_hand_off_step_leaves_the_next_arming_alone() {
    // A sender's last step (marking the record HANDED) can come after the sleeper read its
    // message, freed the record and armed it again; it must not hand that arming the same
    // message. The step is replayed here, late, with the word the sender saw.
    let (_ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    let seen = v.sleeper_word(&t).load(crate::sync::Ordering::Acquire);
    assert_eq!(send(&v, id, 1, b"once", 10), Fast::Done(Ok(())));
    assert_eq!(collect(&v, &t), Ok((1, b"once".to_vec())));
    let again = sleep_on(&v, id, 64, 0, 0, 20);
    assert_eq!(again.j, t.j);
    let slot = v.slot(again.msqid).unwrap();
    super::sleep::handed(slot, t.j, seen, &Who(10));
    asleep(&v, &again);
    assert_eq!(v.cancel(&again), Cancel::Cancelled);
}

#[test]
fn a_cancelled_sleeper_takes_nothing_later() {
    let (ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    assert_eq!(v.cancel(&t), Cancel::Cancelled);
    assert_eq!(send(&v, id, 1, b"x", 10), Fast::Done(Ok(())));
    assert_eq!(stat(&ns, id).qnum, 1);
}

#[test]
fn the_daemon_adopts_an_armed_sleeper_first_in_line() {
    let (ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    // A second receiver on the daemon: queued behind the adopted one.
    let ctx = crate::wait::ParkCtx::default();
    let second = match ns.msgrcv_start(&Cred::root(30), id, 64, 0, 0, &ctx) {
        crate::wait::Progress::Parked(p) => p,
        _ => panic!("the second receiver sleeps"),
    };
    asleep(&v, &t);
    ns.msgsnd(&Cred::root(10), id, 1, b"first", 0, &WaitCtx::FOREVER)
        .unwrap();
    assert_eq!(collect(&v, &t), Ok((1, b"first".to_vec())));
    assert_eq!(stat(&ns, id).lrpid, 1020);
    ns.msgsnd(&Cred::root(10), id, 2, b"second", 0, &WaitCtx::FOREVER)
        .unwrap();
    match second.poll(&ns) {
        crate::wait::Progress::Done(r) => assert_eq!(r, Ok((2, b"second".to_vec()))),
        _ => panic!("the second receiver got the second message"),
    }
    // IPC_RMID wakes an adopted sleeper with EIDRM.
    let t = sleep_on(&v, id, 64, 0, 0, 20);
    ns.msgctl(&Cred::root(1), id, IPC_RMID, MsgctlArg::None)
        .unwrap();
    assert_eq!(collect(&v, &t), Err(Errno::EIDRM));
}

#[test]
fn an_adopted_receive_is_withdrawn_at_the_sleepers_request() {
    let (ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    stat(&ns, id); // adopted
    assert_eq!(v.cancel(&t), Cancel::AskDaemon);
    stat(&ns, id); // the poke
    assert_eq!(v.cancel(&t), Cancel::Ready);
    assert_eq!(collect(&v, &t), Err(Errno::EINTR));
    ns.msgsnd(&Cred::root(10), id, 1, b"x", 0, &WaitCtx::FOREVER)
        .unwrap();
    assert_eq!(stat(&ns, id).qnum, 1);
}

#[test]
fn an_exiting_sleepers_record_is_freed_and_swallows_nothing() {
    let (ns, arena, id, t) = with_sleeper();
    let v = arena.view();
    ns.process_exit(20);
    assert_eq!(v.wait_state(&t), Wait::Ready);
    assert_eq!(send(&v, id, 1, b"x", 10), Fast::Done(Ok(())));
    assert_eq!(stat(&ns, id).qnum, 1);
    // Adopted, then its process exits.
    let t = sleep_on(&v, id, 64, 2, 0, 21);
    stat(&ns, id);
    ns.process_exit(21);
    assert_eq!(v.wait_state(&t), Wait::Ready);
    ns.msgsnd(&Cred::root(10), id, 2, b"y", 0, &WaitCtx::FOREVER)
        .unwrap();
    assert_eq!(stat(&ns, id).qnum, 2);
}
