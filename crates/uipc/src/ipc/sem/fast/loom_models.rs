//! Loom models of the word protocol: a client's fast semop or GETVAL against the daemon taking
//! the set back ([`take_back`]), changing it and publishing it again ([`publish`]).
//!
//! Checked to fail when broken on purpose: with `take_back` making a word SLOW by a load and a
//! store instead of `fetch_or`, the first model loses the client's operation and the second
//! sees a client succeed under the new mode.

use super::owner::{publish, take_back, Published};
use super::{ArenaView, Caller, Fast, SLOT_WORDS};
use crate::ipc::perm::IpcPerm;
use crate::ipc::sem::Sembuf;
use crate::sync::AtomicU64;
use loom::sync::Arc;

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
    let (vals, _) = take_back(slot, 1);
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
