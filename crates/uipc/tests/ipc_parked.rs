//! Parked semop, msgsnd and msgrcv (the `*_start` forms): no thread sleeps; the waiter's
//! notifier says when to poll. Each form: completed by a waker, cancelled by an interrupt,
//! timed out, and a completion racing the cancel.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uipc::ipc::consts::*;
use uipc::ipc::msg::{ParkedMsgrcv, ParkedMsgsnd};
use uipc::ipc::sem::{ParkedSemop, Sembuf, SemctlArg, Timespec};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, Interrupt, Progress, WaitCtx, WakeReason};

const F: WaitCtx<'static> = WaitCtx::FOREVER;

fn root() -> Cred {
    Cred::root(100)
}

/// A fresh namespace and the object `make` creates in it.
fn ns_with(make: fn(&IpcNamespace) -> i32) -> (IpcNamespace, i32) {
    let ns = IpcNamespace::new();
    let id = make(&ns);
    (ns, id)
}

fn sem(ns: &IpcNamespace) -> i32 {
    ns.semget(&root(), IPC_PRIVATE, 1, 0o600).unwrap()
}

fn get(ns: &IpcNamespace, id: i32, cmd: i32) -> i32 {
    ns.semctl(&root(), id, 0, cmd, SemctlArg::None)
        .unwrap()
        .ret()
}

/// The count of a parked call's notifications.
type Told = Arc<AtomicUsize>;

/// A semop -1 on semaphore 0 (timeout `t`), parked, and the count of its notifications
/// (interrupted by `irq` if given).
fn park_down(
    ns: &IpcNamespace,
    id: i32,
    t: Option<Timespec>,
    irq: Option<&Interrupt>,
) -> (ParkedSemop, Told) {
    let (ctx, told) = common::counted(irq);
    let down = ns.semtimedop_start(&root(), id, &[Sembuf::new(0, -1, 0)], t, &ctx);
    (common::parked(down, "semop -1 on 0"), told)
}

#[test]
fn a_parked_semop_is_applied_by_the_waker_which_notifies() {
    let (ns, id) = ns_with(sem);
    let (p, told) = park_down(&ns, id, None, None);
    assert_eq!(get(&ns, id, GETNCNT), 1, "queued like a sleeper");
    assert_eq!(told.load(Ordering::SeqCst), 0);
    let p = common::parked(p.poll(), "a poll before any waker");
    ns.semop(&root(), id, &[Sembuf::new(0, 2, 0)], &F).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert_eq!(get(&ns, id, GETVAL), 1, "the waker applied the -1");
    assert!(matches!(p.poll(), Progress::Done(Ok(()))));
    assert_eq!(get(&ns, id, GETNCNT), 0);
}

#[test]
fn an_interrupt_notifies_and_the_poll_withdraws_the_semop_with_eintr() {
    let (ns, id) = ns_with(sem);
    let irq = Interrupt::new();
    let (p, told) = park_down(&ns, id, None, Some(&irq));
    irq.raise();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(), Progress::Done(Err(Errno::EINTR))));
    assert_eq!(get(&ns, id, GETNCNT), 0, "withdrawn");
    ns.semop(&root(), id, &[Sembuf::new(0, 1, 0)], &F).unwrap();
    assert_eq!(get(&ns, id, GETVAL), 1, "nothing consumed the +1");
}

#[test]
fn an_interrupt_raised_before_parking_notifies_at_once() {
    let (ns, id) = ns_with(sem);
    let irq = Interrupt::new();
    irq.raise();
    let (p, told) = park_down(&ns, id, None, Some(&irq));
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(), Progress::Done(Err(Errno::EINTR))));
}

#[test]
fn semtimedops_timeout_becomes_the_deadline_and_cancel_gives_eagain() {
    let (ns, id) = ns_with(sem);
    let before = Instant::now();
    let t = Timespec {
        tv_sec: 0,
        tv_nsec: 20_000_000,
    };
    let (p, _) = park_down(&ns, id, Some(t), None);
    let at = p.deadline().expect("a timeout gives a deadline");
    assert!(at >= before + Duration::from_millis(20));
    assert!(at <= Instant::now() + Duration::from_millis(20));
    assert_eq!(p.cancel(WakeReason::TimedOut), Err(Errno::EAGAIN));
    assert_eq!(get(&ns, id, GETNCNT), 0);
    let bad = Timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000_000,
    };
    let (ctx, _) = common::counted(None);
    assert!(matches!(
        ns.semtimedop_start(&root(), id, &[Sembuf::new(0, -1, 0)], Some(bad), &ctx),
        Progress::Done(Err(Errno::EINVAL))
    ));
}

#[test]
fn a_semop_completed_before_its_cancel_keeps_its_success() {
    let (ns, id) = ns_with(sem);
    let (p, _) = park_down(&ns, id, None, None);
    ns.semop(&root(), id, &[Sembuf::new(0, 1, 0)], &F).unwrap();
    assert_eq!(p.cancel(WakeReason::Interrupted), Ok(()));
    assert_eq!(get(&ns, id, GETVAL), 0, "the -1 was applied, not undone");
}

fn queue(ns: &IpcNamespace) -> i32 {
    ns.msgget(&root(), IPC_PRIVATE, IPC_CREAT | 0o600).unwrap()
}

/// msgrcv of type `typ` that does not wait.
fn receive_now(ns: &IpcNamespace, id: i32, typ: i64) -> Result<(i64, Vec<u8>), Errno> {
    ns.msgrcv(&root(), id, 100, typ, IPC_NOWAIT, &F)
}

/// A msgrcv of type `typ` on an empty queue, parked, and the count of its notifications
/// (interrupted by `irq` if given).
fn park_rcv(ns: &IpcNamespace, id: i32, typ: i64, irq: Option<&Interrupt>) -> (ParkedMsgrcv, Told) {
    let (ctx, told) = common::counted(irq);
    let rcv = ns.msgrcv_start(&root(), id, 100, typ, 0, &ctx);
    (common::parked(rcv, "msgrcv on an empty queue"), told)
}

#[test]
fn a_parked_msgrcv_is_handed_the_message_by_the_sender() {
    let (ns, id) = ns_with(queue);
    let (p, told) = park_rcv(&ns, id, 7, None);
    ns.msgsnd(&root(), id, 3, b"other", 0, &F).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 0, "not for this receiver");
    let p = common::parked(p.poll(&ns), "a poll after another type's message");
    ns.msgsnd(&root(), id, 7, b"seven", 0, &F).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    match p.poll(&ns) {
        Progress::Done(r) => assert_eq!(r, Ok((7, b"seven".to_vec()))),
        Progress::Parked(_) => panic!("still parked after delivery"),
    }
    assert_eq!(
        receive_now(&ns, id, 7),
        Err(Errno::ENOMSG),
        "handed over, never queued"
    );
}

#[test]
fn an_interrupted_msgrcv_leaves_the_queue_and_later_messages_stay_queued() {
    let (ns, id) = ns_with(queue);
    let irq = Interrupt::new();
    let (p, told) = park_rcv(&ns, id, 0, Some(&irq));
    irq.raise();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(&ns), Progress::Done(Err(Errno::EINTR))));
    ns.msgsnd(&root(), id, 1, b"kept", 0, &F).unwrap();
    assert_eq!(receive_now(&ns, id, 0), Ok((1, b"kept".to_vec())));
}

#[test]
fn a_msgrcv_delivered_before_its_cancel_keeps_the_message_and_a_deadline_gives_eintr() {
    let (ns, id) = ns_with(queue);
    let (p, _) = park_rcv(&ns, id, 0, None);
    ns.msgsnd(&root(), id, 5, b"raced", 0, &F).unwrap();
    assert_eq!(
        p.cancel(WakeReason::Interrupted),
        Ok((5, b"raced".to_vec()))
    );
    let (p, _) = park_rcv(&ns, id, 0, None);
    assert_eq!(p.cancel(WakeReason::TimedOut), Err(Errno::EINTR));
    ns.msgsnd(&root(), id, 6, b"x", 0, &F).unwrap();
    assert_eq!(
        receive_now(&ns, id, 0).map(|m| m.0),
        Ok(6),
        "the cancelled receiver took nothing"
    );
}

#[test]
fn ipc_set_asks_a_parked_msgrcv_to_look_again_and_it_parks_again() {
    let (ns, id) = ns_with(queue);
    let (p, told) = park_rcv(&ns, id, 0, None);
    set_qbytes(&ns, id, 1000);
    assert_eq!(told.load(Ordering::SeqCst), 1);
    let p = common::parked(p.poll(&ns), "a poll after IPC_SET");
    ns.msgsnd(&root(), id, 2, b"after", 0, &F).unwrap();
    assert_eq!(
        told.load(Ordering::SeqCst),
        2,
        "the new waiter notifies too"
    );
    match p.poll(&ns) {
        Progress::Done(r) => assert_eq!(r, Ok((2, b"after".to_vec()))),
        Progress::Parked(_) => panic!("still parked"),
    }
}

fn set_qbytes(ns: &IpcNamespace, id: i32, q: u64) {
    common::msg_set(ns, id, 0o600, q);
}

/// A queue with room for one 4-byte message, holding it.
fn full_queue(ns: &IpcNamespace) -> i32 {
    let id = queue(ns);
    set_qbytes(ns, id, 4);
    ns.msgsnd(&root(), id, 1, b"full", 0, &F).unwrap();
    id
}

/// A msgsnd into a full queue, parked, and the count of its notifications (interrupted by
/// `irq` if given).
fn park_snd(ns: &IpcNamespace, id: i32, irq: Option<&Interrupt>) -> (ParkedMsgsnd, Told) {
    let (ctx, told) = common::counted(irq);
    let snd = ns.msgsnd_start(&root(), id, 2, b"next", 0, &ctx);
    (common::parked(snd, "msgsnd into a full queue"), told)
}

#[test]
fn a_parked_msgsnd_is_woken_to_retry_and_sends_on_poll() {
    let (ns, id) = ns_with(full_queue);
    let (p, told) = park_snd(&ns, id, None);
    assert_eq!(
        ns.msgrcv(&root(), id, 100, 0, 0, &F),
        Ok((1, b"full".to_vec()))
    );
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert_eq!(
        receive_now(&ns, id, 0),
        Err(Errno::ENOMSG),
        "woken, not sent: the sender retries when polled"
    );
    assert!(matches!(p.poll(&ns), Progress::Done(Ok(()))));
    assert_eq!(receive_now(&ns, id, 0), Ok((2, b"next".to_vec())));
}

#[test]
fn a_woken_msgsnd_that_finds_the_queue_full_again_parks_again() {
    let (ns, id) = ns_with(full_queue);
    let (p, told) = park_snd(&ns, id, None);
    ns.msgrcv(&root(), id, 100, 0, 0, &F).unwrap();
    ns.msgsnd(&root(), id, 3, b"took", IPC_NOWAIT, &F).unwrap();
    let p = common::parked(p.poll(&ns), "a retry into a full queue");
    ns.msgrcv(&root(), id, 100, 0, 0, &F).unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 2);
    assert!(matches!(p.poll(&ns), Progress::Done(Ok(()))));
}

#[test]
fn a_msgsnd_cancelled_by_interrupt_or_deadline_gives_eintr_even_if_woken() {
    let (ns, id) = ns_with(full_queue);
    let irq = Interrupt::new();
    let (p, told) = park_snd(&ns, id, Some(&irq));
    irq.raise();
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(matches!(p.poll(&ns), Progress::Done(Err(Errno::EINTR))));
    let (p, _) = park_snd(&ns, id, None);
    assert_eq!(p.cancel(WakeReason::TimedOut), Err(Errno::EINTR));
    let (p, _) = park_snd(&ns, id, None);
    ns.msgrcv(&root(), id, 100, 0, 0, &F).unwrap();
    assert_eq!(
        p.cancel(WakeReason::Interrupted),
        Err(Errno::EINTR),
        "a wake-up only says there may be room"
    );
    assert_eq!(
        receive_now(&ns, id, 0),
        Err(Errno::ENOMSG),
        "nothing was sent"
    );
}
