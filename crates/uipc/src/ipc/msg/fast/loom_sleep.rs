//! Loom models of the message sleeper records (`sleep`): a sleeper's cancel against a
//! sender's hand-off (the message is exactly once: with the sleeper, queued, or the send was
//! not done on the fast path and the sleeper was cancelled), a receiver arming against the
//! daemon's takeover (the takeover sees it armed exactly when it armed; one that is not armed
//! gave its record back), and a hand-off against the takeover (a hand-off that completed
//! disarmed the record and filled its mailbox; one that did not leaves the record armed for
//! the daemon to adopt, and the message out of the queue).
//!
//! Checked to fail when broken on purpose: with the cancel a plain store of `LOCK` without
//! WAITED instead of a CAS, the first model finds a send that completed while the sleeper was
//! cancelled and the message neither delivered nor queued; with the arming a plain store, the
//! second finds an armed sleeper the takeover did not see.

use super::loom_models::region;
use super::owner::{take_back, MsgArena};
use super::sleep::{rec, state_of, FREE, RECORDS, R_WORD, WAITING};
use super::{load_text, store_text, Cancel, Got, MsgView, Recv, Ticket, Wait};
use crate::ipc::sem::fast::{Fast, TestCaller as Who};
use crate::sync::{AtomicU64, Ordering::Acquire};
use loom::sync::Arc;

/// An empty published queue with process 9 armed on it, and process 7 sending it "hi" on
/// another thread.
fn armed_and_sending() -> (Arc<MsgArena>, Ticket, loom::thread::JoinHandle<bool>) {
    let a = region(Vec::new());
    let Recv::Armed(t) = arm(&a.view()) else {
        panic!("arms on an empty queue");
    };
    let c = a.clone();
    (a, t, loom::thread::spawn(move || send(&c.view(), b"hi")))
}

fn send(v: &MsgView<'_>, text: &[u8]) -> bool {
    let mut fill = |a: &[AtomicU64], b: &[AtomicU64]| {
        store_text(a, b, text);
        true
    };
    v.msgsnd(0, 1, text.len(), 0, &Who(7), &mut fill) == Fast::Done(Ok(()))
}

/// Process 9's blocking receive of any message on the empty queue.
fn arm(v: &MsgView<'_>) -> Recv {
    let tid = || 9;
    let mut deliver = |_: i64, _: usize, _: &[AtomicU64], _: &[AtomicU64]| Ok(());
    v.msgrcv_sleep(0, (0, 64, 0), &Who(9), Some(&tid), &mut deliver)
}

fn collect(v: &MsgView<'_>, t: &Ticket) -> Option<Vec<u8>> {
    let mut got = None;
    let mut deliver = |_: i64, n: usize, a: &[AtomicU64], b: &[AtomicU64]| {
        got = Some(load_text(a, b, n));
        Ok(())
    };
    match v.collect(t, &mut deliver) {
        Got::Done(Ok(_)) => got,
        _ => None,
    }
}

/// The sleeper's cancel, retried while it says so.
fn cancel(v: &MsgView<'_>, t: &Ticket) -> Cancel {
    loop {
        match v.cancel(t) {
            Cancel::Retry => loom::thread::yield_now(),
            c => return c,
        }
    }
}

fn records_free(a: &MsgArena) -> bool {
    (0..RECORDS).all(|j| state_of(rec(a.slot(0).0, j)[R_WORD].load(Acquire)) == FREE)
}

#[test]
fn a_cancel_and_a_hand_off_keep_the_message_exactly_once() {
    loom::model(|| {
        let (a, t, th) = armed_and_sending();
        let v = a.view();
        let delivered = match cancel(&v, &t) {
            Cancel::Cancelled => None,
            Cancel::Ready => collect(&v, &t),
            Cancel::AskDaemon => panic!("nothing adopted it"),
            Cancel::Retry => unreachable!(),
        };
        let sent = th.join().unwrap();
        let snap = take_back(a.slot(0).0);
        assert!(snap.armed.is_none());
        let queued = snap.messages.len();
        if let Some(text) = &delivered {
            assert_eq!(text, b"hi");
        }
        assert_eq!(usize::from(delivered.is_some()) + queued, usize::from(sent));
        assert!(records_free(&a));
    });
}

#[test]
fn a_takeover_sees_a_sleeper_armed_exactly_when_it_armed() {
    loom::model(|| {
        let a = region(Vec::new());
        let c = a.clone();
        let th = loom::thread::spawn(move || arm(&c.view()));
        let snap = take_back(a.slot(0).0);
        let r = th.join().unwrap();
        match r {
            Recv::Armed(t) => {
                assert_eq!(snap.armed, Some(t.j));
                let w = rec(a.slot(0).0, t.j)[R_WORD].load(Acquire);
                assert_eq!(state_of(w), WAITING);
            }
            Recv::Slow => {
                assert_eq!(snap.armed, None);
                assert!(records_free(&a));
            }
            Recv::Done(r) => panic!("an empty queue gave {r:?}"),
        }
    });
}

#[test]
fn a_hand_off_against_a_takeover_is_done_or_left_for_adoption() {
    loom::model(|| {
        let (a, t, th) = armed_and_sending();
        let snap = take_back(a.slot(0).0);
        let sent = th.join().unwrap();
        assert!(snap.messages.is_empty());
        let v = a.view();
        if sent {
            assert_eq!(snap.armed, None);
            assert_eq!(v.wait_state(&t), Wait::Ready);
            assert_eq!(collect(&v, &t).as_deref(), Some(&b"hi"[..]));
        } else {
            assert_eq!(snap.armed, Some(t.j));
            assert!(matches!(v.wait_state(&t), Wait::Sleep(_)));
        }
    });
}
