//! Waiting in msgsnd / msgrcv: pipelined send, E2BIG to waiting receivers, EINTR, EIDRM,
//! wakeups.
//!
//! Each waiting call is started in its parked form (`msgsnd_start`, `msgrcv_start`): it is
//! queued exactly as a sleeper would be before the test goes on, and its notifier counts the
//! wake-ups, so "not woken" is read from the engine (no notification, still parked on poll)
//! instead of guessed after a head start. A sleeping call is the same start followed by the
//! same retry (`ParkedMsg*::wait`); the sleeping threads themselves are exercised by the
//! engine's msg unit tests and by ipc_msg_stress.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidDs, ParkedMsgrcv, ParkedMsgsnd};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, Interrupt, Progress, WaitCtx};

const F: WaitCtx<'static> = WaitCtx::FOREVER;

fn setup() -> (Arc<IpcNamespace>, i32) {
    let ns = Arc::new(IpcNamespace::new());
    let id = ns.msgget(&Cred::root(1), IPC_PRIVATE, 0o666).unwrap();
    (ns, id)
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

fn qbytes(ns: &IpcNamespace, id: i32, q: u64) {
    common::msg_set(ns, id, 0o666, q);
}

/// The two parked calls, polled the same way.
trait Poll: Sized {
    type Out;
    fn poll_on(self, ns: &IpcNamespace) -> Progress<Self::Out, Self>;
}

impl Poll for ParkedMsgrcv {
    type Out = (i64, Vec<u8>);
    fn poll_on(self, ns: &IpcNamespace) -> Progress<Self::Out, Self> {
        self.poll(ns)
    }
}

impl Poll for ParkedMsgsnd {
    type Out = ();
    fn poll_on(self, ns: &IpcNamespace) -> Progress<(), Self> {
        self.poll(ns)
    }
}

/// A queued call and the number of times the engine notified it.
struct Waiting<P> {
    p: P,
    told: Arc<AtomicUsize>,
}

fn waiting<P: Poll>(start: Progress<P::Out, P>, told: Arc<AtomicUsize>) -> Waiting<P>
where
    P::Out: std::fmt::Debug,
{
    match start {
        Progress::Parked(p) => Waiting { p, told },
        Progress::Done(r) => panic!("expected to wait, finished: {r:?}"),
    }
}

impl<P: Poll> Waiting<P>
where
    P::Out: std::fmt::Debug,
{
    /// Asserts the call was not woken: no notification, and a poll leaves it queued.
    fn still_waiting(self, ns: &IpcNamespace, why: &str) -> Waiting<P> {
        assert_eq!(self.told.load(SeqCst), 0, "notified: {why}");
        match self.p.poll_on(ns) {
            Progress::Parked(p) => Waiting { p, told: self.told },
            Progress::Done(r) => panic!("finished: {r:?}: {why}"),
        }
    }

    /// Asserts the call was woken (notified once) and returns what its poll finishes with.
    fn finish(self, ns: &IpcNamespace) -> Result<P::Out, Errno> {
        assert_eq!(self.told.load(SeqCst), 1, "woken once");
        match self.p.poll_on(ns) {
            Progress::Done(r) => r,
            Progress::Parked(_) => panic!("woken, but the poll left it waiting"),
        }
    }
}

/// A waiting msgrcv by thread `tid + 1` of process `tid`, interruptible by `irq` if given.
fn receiver(
    ns: &IpcNamespace,
    id: i32,
    tid: i32,
    (max, typ, flags): (i64, i64, i32),
    irq: Option<&Interrupt>,
) -> Waiting<ParkedMsgrcv> {
    let (ctx, told) = common::counted(irq);
    let cred = Cred::root(tid).in_thread(tid + 1);
    waiting(ns.msgrcv_start(&cred, id, max, typ, flags, &ctx), told)
}

/// A waiting msgsnd of `text` (type `mtype`) by `cred`, interruptible by `irq` if given.
fn sender(
    ns: &IpcNamespace,
    id: i32,
    cred: &Cred,
    (mtype, text): (i64, &[u8]),
    irq: Option<&Interrupt>,
) -> Waiting<ParkedMsgsnd> {
    let (ctx, told) = common::counted(irq);
    waiting(ns.msgsnd_start(cred, id, mtype, text, 0, &ctx), told)
}

#[test]
fn send_hands_the_message_to_a_waiting_receiver_without_queueing_it() {
    let (ns, id) = setup();
    let r = receiver(&ns, id, 500, (100, 7, 0), None);
    ns.msgsnd(&Cred::root(9), id, 3, b"other", 0, &F).unwrap();
    let r = r.still_waiting(&ns, "type 3 is not what it asked for");
    assert_eq!(stat(&ns, id).qnum, 1, "type 3 queued");
    ns.msgsnd(&Cred::root(9), id, 7, b"seven", 0, &F).unwrap();
    let ds = stat(&ns, id);
    assert_eq!(
        (ds.qnum, ds.cbytes, ds.lspid),
        (1, 5, 9),
        "type 7 went straight to the receiver"
    );
    assert_eq!(
        ds.lrpid, 501,
        "a pipelined receive records the receiver's thread id"
    );
    assert!(ds.rtime > 0);
    assert_eq!(r.finish(&ns), Ok((7, b"seven".to_vec())));
}

#[test]
fn too_small_receiver_gets_e2big_and_the_next_receiver_gets_the_message() {
    let (ns, id) = setup();
    let small = receiver(&ns, id, 600, (2, 0, 0), None);
    let big = receiver(&ns, id, 700, (100, 0, 0), None);
    ns.msgsnd(&Cred::root(9), id, 1, b"hello", 0, &F).unwrap();
    assert_eq!(small.finish(&ns), Err(Errno::E2BIG));
    assert_eq!(big.finish(&ns), Ok((1, b"hello".to_vec())));
    assert_eq!(stat(&ns, id).qnum, 0);
}

#[test]
fn waiting_receiver_with_msg_noerror_gets_a_truncated_message() {
    let (ns, id) = setup();
    let r = receiver(&ns, id, 600, (2, -5, MSG_NOERROR), None);
    ns.msgsnd(&Cred::root(9), id, 6, b"no", 0, &F).unwrap();
    let r = r.still_waiting(&ns, "type 6 is above -5");
    ns.msgsnd(&Cred::root(9), id, 5, b"hello", 0, &F).unwrap();
    assert_eq!(r.finish(&ns), Ok((5, b"he".to_vec())));
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
    let s = sender(&ns, id, &Cred::root(2), (2, b"ef"), None);
    let s = s.still_waiting(&ns, "the queue is full");
    assert_eq!(
        ns.msgrcv(&Cred::root(3), id, 10, 0, 0, &F),
        Ok((1, b"abcd".to_vec()))
    );
    assert_eq!(s.finish(&ns), Ok(()));
    assert_eq!(stat(&ns, id).lspid, 2);
}

#[test]
fn queue_full_by_message_count_blocks_the_sender_until_a_receive_frees_a_slot() {
    let (ns, id) = setup();
    qbytes(&ns, id, 2);
    ns.msgsnd(&Cred::root(1), id, 1, b"", 0, &F).unwrap();
    ns.msgsnd(&Cred::root(1), id, 1, b"", 0, &F).unwrap();
    let s = sender(&ns, id, &Cred::root(2), (2, b""), None);
    let s = s.still_waiting(
        &ns,
        "zero bytes fit, but qbytes 2 also caps the queue at 2 messages",
    );
    assert_eq!(stat(&ns, id).qnum, 2);
    assert_eq!(
        ns.msgrcv(&Cred::root(3), id, 10, 0, 0, &F),
        Ok((1, Vec::new()))
    );
    assert_eq!(s.finish(&ns), Ok(()));
    let ds = stat(&ns, id);
    assert_eq!((ds.qnum, ds.lspid), (2, 2));
}

#[test]
fn raising_qbytes_wakes_a_blocked_sender() {
    let (ns, id) = setup();
    qbytes(&ns, id, 1);
    let s = sender(&ns, id, &Cred::root(2), (2, b"xyz"), None);
    let s = s.still_waiting(&ns, "3 bytes never fit in qbytes 1");
    qbytes(&ns, id, 100);
    assert_eq!(s.finish(&ns), Ok(()));
}

#[test]
fn interrupt_ends_waiting_senders_and_receivers_with_eintr() {
    let (ns, id) = setup();
    qbytes(&ns, id, 0);
    let irq = Interrupt::new();
    let s = sender(&ns, id, &Cred::root(2), (1, b""), Some(&irq));
    let r = receiver(&ns, id, 3, (10, 0, 0), Some(&irq));
    irq.raise();
    assert_eq!(s.finish(&ns), Err(Errno::EINTR));
    assert_eq!(r.finish(&ns), Err(Errno::EINTR));
    // The interrupted calls are gone: a send now reaches no stale receiver and queues.
    irq.clear();
    qbytes(&ns, id, 100);
    ns.msgsnd(&Cred::root(4), id, 1, b"x", 0, &F).unwrap();
    assert_eq!(stat(&ns, id).qnum, 1);
}

#[test]
fn rmid_wakes_every_waiting_call_with_eidrm() {
    let (ns, id) = setup();
    qbytes(&ns, id, 0);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for i in 0..2 {
        senders.push(sender(&ns, id, &Cred::root(10 + i), (1, b""), None));
        receivers.push(receiver(&ns, id, 20 + i, (10, i as i64, 0), None));
    }
    ns.msgctl(&Cred::root(1), id, IPC_RMID, MsgctlArg::None)
        .unwrap();
    for s in senders {
        assert_eq!(s.finish(&ns), Err(Errno::EIDRM));
    }
    for r in receivers {
        assert_eq!(r.finish(&ns), Err(Errno::EIDRM));
    }
    assert_eq!(
        ns.msgsnd(&Cred::root(1), id, 1, b"", 0, &F),
        Err(Errno::EINVAL)
    );
}

#[test]
fn ipc_set_makes_waiting_receivers_recheck_permission() {
    let (ns, id) = setup();
    let (ctx, told) = common::counted(None);
    let start = ns.msgrcv_start(&Cred::user(5, 1000, 1000), id, 10, 0, 0, &ctx);
    let r = waiting(start, told);
    common::msg_set(&ns, id, 0o600, 100);
    assert_eq!(r.finish(&ns), Err(Errno::EACCES));
}

#[test]
fn woken_sender_rechecks_permission_after_ipc_set() {
    let (ns, id) = setup();
    qbytes(&ns, id, 0);
    let s = sender(&ns, id, &Cred::user(5, 1000, 1000), (1, b"x"), None);
    common::msg_set(&ns, id, 0o600, 0);
    let s = s.still_waiting(&ns, "still no room: not woken");
    common::msg_set(&ns, id, 0o600, 100);
    assert_eq!(
        s.finish(&ns),
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
