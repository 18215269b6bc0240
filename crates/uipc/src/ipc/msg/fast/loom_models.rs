//! Loom models of the slot protocol: a client's fast msgsnd or msgrcv against the daemon
//! taking the queue back ([`take_back`]): a message is in the queue the daemon takes exactly
//! when the client's call did not complete on the fast path (send), or did not take it
//! (receive), and a message the daemon takes is whole. Two clients against each other and the
//! takeover keep every message exactly once.
//!
//! Checked to fail when broken on purpose: with the commit a plain store of `LOCK` instead of
//! a CAS, the first model finds a send that reports success and is not in the queue taken.

use super::owner::{publish, take_back, MsgArena, Published, Snapshot};
use super::{load_text, store_text, MsgView};
use crate::ipc::perm::IpcPerm;
use crate::ipc::sem::fast::{Fast, TestCaller as Who};
use crate::sync::AtomicU64;
use loom::sync::Arc;

/// A region with queue 0 published holding `messages`.
pub(super) fn region(messages: Vec<(i64, Vec<u8>)>) -> Arc<MsgArena> {
    let a = Arc::new(MsgArena::owned());
    a.set_msgmax(8192);
    let perm = IpcPerm {
        uid: 0,
        gid: 0,
        cuid: 0,
        cgid: 0,
        mode: 0o600,
    };
    let snap = Snapshot {
        messages,
        ..Snapshot::default()
    };
    let p = Published {
        id: 0,
        perm: &perm,
        qbytes: 100,
        snap: &snap,
    };
    assert!(publish(a.slot(0).0, &p, 1));
    a
}

fn send(v: &MsgView<'_>, pid: u32, text: &[u8]) -> bool {
    let mut fill = |a: &[AtomicU64], b: &[AtomicU64]| {
        store_text(a, b, text);
        true
    };
    v.msgsnd(0, 1, text.len(), 0, &Who(pid), &mut fill) == Fast::Done(Ok(()))
}

fn recv(v: &MsgView<'_>, pid: u32) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut deliver = |_: i64, n: usize, a: &[AtomicU64], b: &[AtomicU64]| {
        got = load_text(a, b, n);
        Ok(())
    };
    match v.msgrcv(0, 64, 0, 0, &Who(pid), &mut deliver) {
        Fast::Done(Ok(_)) => Some(got),
        _ => None,
    }
}

#[test]
fn a_send_is_in_the_queue_taken_back_exactly_when_it_completed() {
    loom::model(|| {
        let a = region(Vec::new());
        let c = a.clone();
        let t = loom::thread::spawn(move || send(&c.view(), 7, b"0123456789"));
        let snap = take_back(a.slot(0).0);
        let sent = t.join().unwrap();
        assert_eq!(snap.messages.len(), usize::from(sent));
        if sent {
            assert_eq!(snap.messages[0], (1, b"0123456789".to_vec()));
            assert_eq!(snap.lspid, 7);
        }
    });
}

#[test]
fn a_receive_took_the_message_exactly_when_it_is_not_in_the_queue_taken_back() {
    loom::model(|| {
        let a = region(vec![(1, b"abc".to_vec())]);
        let c = a.clone();
        let t = loom::thread::spawn(move || recv(&c.view(), 8));
        let snap = take_back(a.slot(0).0);
        let got = t.join().unwrap();
        match got {
            Some(text) => {
                assert_eq!(text, b"abc");
                assert!(snap.messages.is_empty());
                assert_eq!(snap.lrpid, 8);
            }
            None => assert_eq!(snap.messages, vec![(1, b"abc".to_vec())]),
        }
    });
}

#[test]
fn a_sender_and_a_receiver_against_a_takeover_keep_every_message_once() {
    loom::model(|| {
        let a = region(vec![(1, b"old".to_vec())]);
        let (s, r) = (a.clone(), a.clone());
        let ts = loom::thread::spawn(move || send(&s.view(), 7, b"new"));
        let tr = loom::thread::spawn(move || recv(&r.view(), 8));
        let snap = take_back(a.slot(0).0);
        let sent = ts.join().unwrap();
        let got = tr.join().unwrap();
        let mut all: Vec<Vec<u8>> = snap.messages.into_iter().map(|m| m.1).collect();
        all.extend(got);
        let mut want = vec![b"old".to_vec()];
        if sent {
            want.push(b"new".to_vec());
        }
        all.sort();
        want.sort();
        assert_eq!(all, want);
    });
}
