//! Loom models of the word protocol: a client's fast semop or GETVAL against the daemon taking
//! the set back ([`take_back`]), changing it and publishing it again ([`publish`]).
//!
//! Checked to fail when broken on purpose: with `take_back` making a word SLOW by a load and a
//! store instead of `fetch_or`, the first model loses the client's operation and the second
//! sees a client succeed under the new mode.
//!
//! SEM_UNDO: a client's operation stopped after each of its steps (as a SIGKILL stops it)
//! against a takeover, and against a takeover, a publish and a second takeover (the owner's
//! death handled): the value and the adjustments the daemon keeps always add up to the value
//! before, and a completed operation is kept. Checked to fail when broken on purpose: with the
//! client clearing INTENT after its unlock failed, and with the client writing the
//! adjustment before it locks the word.

use super::owner::{publish, take_back, take_back_adjustments, Published};
use super::{ArenaView, Caller, Fast, SLOT_WORDS};
use crate::ipc::consts::SEM_UNDO;
use crate::ipc::perm::IpcPerm;
use crate::ipc::sem::Sembuf;
use crate::sync::AtomicU64;
use loom::sync::Arc;
use std::cell::Cell;

struct Who(u32);

impl Caller for Who {
    fn pid(&self) -> u32 {
        7
    }
    fn euid(&self) -> u32 {
        self.0
    }
    fn now(&self) -> i64 {
        100
    }
}

fn perm(mode: u32) -> IpcPerm {
    IpcPerm {
        uid: 0,
        gid: 0,
        cuid: 0,
        cgid: 0,
        mode,
    }
}

fn slot_with(mode: u32, value: i32) -> Arc<Vec<AtomicU64>> {
    let slot: Arc<Vec<AtomicU64>> = Arc::new((0..SLOT_WORDS).map(|_| AtomicU64::new(0)).collect());
    publish_as(&slot, mode, &[(value, 1)], 1);
    slot
}

/// The daemon publishes set 0 with `mode` and `vals` at `epoch`.
fn publish_as(slot: &[AtomicU64], mode: u32, vals: &[(i32, i32)], epoch: u64) {
    let p = Published {
        id: 0,
        perm: perm(mode),
        otime: 0,
        vals,
        undo: None,
    };
    publish(slot, &p, epoch);
}

/// A client thread running `f` on its own view of `slot`.
fn on_client_thread<R: 'static>(
    slot: &Arc<Vec<AtomicU64>>,
    f: impl FnOnce(ArenaView<'_>) -> R + 'static,
) -> loom::thread::JoinHandle<R> {
    let slot = slot.clone();
    loom::thread::spawn(move || f(ArenaView::new(&slot)))
}

/// A fast -1 on semaphore 0 by `euid`: whether it was done on the fast path.
fn fast_decrement(v: ArenaView<'_>, euid: u32) -> bool {
    v.semop(0, Sembuf::new(0, -1, 0), &Who(euid)) == Fast::Done(Ok(()))
}

/// The daemon's side of IPC_SET: takes the set back and publishes it with `mode`; returns
/// the values it took back.
fn take_back_and_publish(slot: &[AtomicU64], mode: u32) -> Vec<(i32, i32)> {
    let (vals, _, _, _) = take_back(slot, 1);
    publish_as(slot, mode, &vals, 2);
    vals
}

/// A fast decrement racing a takeover and a publish of the value the daemon saw: the result
/// counts the decrement exactly once, whichever side won.
#[test]
fn a_fast_semop_is_never_lost_across_a_takeover() {
    loom::model(|| {
        let slot = slot_with(0o600, 1);
        let client = on_client_thread(&slot, |v| fast_decrement(v, 0));
        take_back_and_publish(&slot, 0o600);
        let fast = client.join().unwrap();
        let v = ArenaView::new(&slot).semctl_get(0, 0, crate::ipc::consts::GETVAL, &Who(0));
        assert_eq!(v, Fast::Done(Ok(if fast { 0 } else { 1 })));
    });
}

/// IPC_SET taking the write permission away: a client that succeeds did so before the
/// daemon took the set (its decrement is in what the daemon took back).
#[test]
fn a_permission_change_applies_to_every_later_fast_call() {
    loom::model(|| {
        let slot = slot_with(0o666, 1);
        let client = on_client_thread(&slot, |v| fast_decrement(v, 1000));
        let vals = take_back_and_publish(&slot, 0o600);
        let fast = client.join().unwrap();
        if fast {
            assert_eq!(vals[0].0, 0, "a fast call after the takeover");
        }
    });
}

/// GETVAL racing a SETVAL (takeover, new value, publish): it answers one of the two values,
/// never the old value under the new header nor a torn one.
#[test]
fn getval_sees_one_value_or_asks_the_daemon() {
    loom::model(|| {
        let slot = slot_with(0o666, 1);
        let client = on_client_thread(&slot, |v| {
            v.semctl_get(0, 0, crate::ipc::consts::GETVAL, &Who(1000))
        });
        let _ = take_back(&slot, 1);
        publish_as(&slot, 0o666, &[(5, 1)], 2);
        let got = client.join().unwrap();
        assert!(matches!(
            got,
            Fast::Slow | Fast::Done(Ok(1)) | Fast::Done(Ok(5))
        ));
    });
}

/// A client killed before its step number `stop` (`usize::MAX`: never).
struct Killed {
    stop: usize,
    steps: Cell<usize>,
}

impl Caller for Killed {
    fn pid(&self) -> u32 {
        7
    }
    fn euid(&self) -> u32 {
        0
    }
    fn now(&self) -> i64 {
        100
    }
    fn proceed(&self) -> bool {
        let n = self.steps.get();
        self.steps.set(n + 1);
        n < self.stop
    }
}

/// The client's operation: -1 with SEM_UNDO on semaphore 0 (value 1, epoch 1). Returns its
/// result and whether it was killed.
fn undo_client(
    slot: Arc<Vec<AtomicU64>>,
    stop: usize,
) -> loom::thread::JoinHandle<(Fast<()>, bool)> {
    loom::thread::spawn(move || {
        let who = Killed {
            stop,
            steps: Cell::new(0),
        };
        let r = ArenaView::new(&slot).semop(0, Sembuf::new(0, -1, SEM_UNDO as i16), &who);
        (r, who.steps.get() > stop)
    })
}

/// Takes the set back and returns its value and the owner's adjustment (0 if none).
fn take_back_undo(slot: &[AtomicU64], epoch: u64) -> (i32, i32) {
    let (vals, _, locked, _) = take_back(slot, 1);
    let adj = take_back_adjustments(slot, 1, epoch, locked).map_or(0, |(pid, a)| {
        assert_eq!(pid, 7);
        a[0]
    });
    (vals[0].0, adj)
}

/// A SEM_UNDO operation killed at each step, racing a takeover (which is also what the
/// owner's death does): the value plus the kept adjustment is the value before.
#[test]
fn a_sem_undo_operation_killed_anywhere_keeps_value_and_adjustment_together() {
    for stop in (0..8).chain([usize::MAX]) {
        loom::model(move || {
            let slot = slot_with(0o600, 1);
            let client = undo_client(slot.clone(), stop);
            let (value, adj) = take_back_undo(&slot, 1);
            let (r, killed) = client.join().unwrap();
            assert_eq!(
                value + adj,
                1,
                "stop {stop}: value {value}, adjustment {adj}"
            );
            if r == Fast::Done(Ok(())) {
                assert_eq!((value, adj), (0, 1), "a completed operation is kept");
            } else if !killed {
                assert_eq!((value, adj), (1, 0), "the daemon serves it: not done here");
            }
        });
    }
}

/// The same with the set published again after the takeover (as the daemon does when the
/// adjustments came back 0) and taken back once more after the client ended: what a stopped
/// client writes late never counts on the new publish, and a retry there counts once (with
/// the preemption bound of `crate::sync::model`: this one has twice the daemon's steps).
#[test]
fn a_sem_undo_operation_across_a_republish_counts_once() {
    for stop in (0..8).chain([usize::MAX]) {
        crate::sync::model(move || {
            let slot = slot_with(0o600, 1);
            let client = undo_client(slot.clone(), stop);
            let (value, adj) = take_back_undo(&slot, 1);
            if adj == 0 {
                publish_as(&slot, 0o600, &[(value, 1)], 2);
            }
            let (r, _) = client.join().unwrap();
            let (value2, adj2) = if adj == 0 {
                take_back_undo(&slot, 2)
            } else {
                (value, 0)
            };
            assert_eq!(
                value2 + adj + adj2,
                1,
                "stop {stop}: {value2} + {adj} + {adj2}"
            );
            if r == Fast::Done(Ok(())) {
                assert_eq!((value2, adj + adj2), (0, 1));
            }
        });
    }
}
