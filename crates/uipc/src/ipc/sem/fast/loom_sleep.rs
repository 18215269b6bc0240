//! Loom models of the sleeper record (`sleep`, `adopt`): a sleeper's cancel against a
//! waker's hand-off (exactly one wins: the +1 is either taken by the sleeper, or left in the
//! value with the call failing), and a sleeper arming against the daemon's takeover, adoption
//! and IPC_RMID's EIDRM (an armed sleeper is adopted exactly when the takeover saw WAITED, and
//! one that is not armed has given its record back).
//!
//! Checked to fail when broken on purpose: with the cancel freeing the record before it
//! clears WAITED (and without checking its CAS), the first model fails (a waker finds an
//! armed word with a free record, or both sides win).

use super::adopt::finish;
use super::owner::{publish, take_back, Published};
use super::sleep::{free, record, state_of, ADOPTED, FREE, SLEEPER};
use super::{ArenaView, Cancel, Fast, Sleep, TestCaller as Pid, Wait, SLOT_WORDS};
use crate::errno::Errno;
use crate::ipc::consts::GETVAL;
use crate::ipc::perm::IpcPerm;
use crate::ipc::sem::Sembuf;
use crate::sync::{AtomicU64, Ordering::Acquire};
use loom::sync::Arc;

/// A slot with set 0 of one semaphore of `value` published (epoch 1), record FREE.
fn slot_with(value: i32) -> Arc<Vec<AtomicU64>> {
    let slot: Arc<Vec<AtomicU64>> = Arc::new((0..SLOT_WORDS).map(|_| AtomicU64::new(0)).collect());
    let p = Published {
        id: 0,
        perm: IpcPerm {
            uid: 0,
            gid: 0,
            cuid: 0,
            cgid: 0,
            mode: 0o600,
        },
        otime: 0,
        vals: &[(value, 1)],
        undo: None,
    };
    publish(&slot, &p, 1);
    slot
}

/// Process 9's -1 on semaphore 0 of value 0: armed.
fn armed(slot: &[AtomicU64]) -> super::Ticket {
    match ArenaView::new(slot).semop_sleep(0, Sembuf::new(0, -1, 0), &Pid(9)) {
        Sleep::Armed(t) => t,
        other => panic!("not armed: {other:?}"),
    }
}

/// The sleeper's cancel, retried while it says so (a bounded number of times).
fn cancel(v: &ArenaView<'_>, t: &super::Ticket) -> Cancel {
    for _ in 0..3 {
        match v.cancel(t) {
            Cancel::Retry => loom::thread::yield_now(),
            c => return c,
        }
    }
    Cancel::Retry
}

#[test]
fn a_cancel_and_a_handoff_never_both_win() {
    loom::model(|| {
        let slot = slot_with(0);
        let t = armed(&slot);
        let s2 = slot.clone();
        let waker = loom::thread::spawn(move || {
            ArenaView::new(&s2).semop(0, Sembuf::new(0, 1, 0), &Pid(7))
        });
        let v = ArenaView::new(&slot);
        let c = cancel(&v, &t);
        assert_eq!(waker.join().unwrap(), Fast::Done(Ok(())));
        let value = v.semctl_get(0, 0, GETVAL, &Pid(1));
        let pid = v.semctl_get(0, 0, crate::ipc::consts::GETPID, &Pid(1));
        match c {
            Cancel::Cancelled => {
                assert_eq!((value, pid), (Fast::Done(Ok(1)), Fast::Done(Ok(7))));
            }
            Cancel::Done(Ok(())) => {
                assert_eq!((value, pid), (Fast::Done(Ok(0)), Fast::Done(Ok(9))));
            }
            other => panic!("cancel gave {other:?}"),
        }
        // Whoever won, the record is free for the next sleeper.
        assert_eq!(state_of(slot[SLEEPER].load(Acquire)), FREE);
    });
}

#[test]
fn an_armed_sleeper_is_adopted_exactly_when_the_takeover_sees_it() {
    loom::model(|| {
        let slot = slot_with(0);
        let s2 = slot.clone();
        let sleeper = loom::thread::spawn(move || {
            ArenaView::new(&s2).semop_sleep(0, Sembuf::new(0, -1, 0), &Pid(9))
        });
        // The daemon: takeover; an armed record is adopted, then IPC_RMID finishes it.
        let (_, _, _, waited) = take_back(&slot, 1);
        let rec = &slot[SLEEPER];
        let r = rec.load(Acquire);
        let adopted = waited & 1 != 0;
        if adopted {
            let a = record(ADOPTED, 9, super::sleep::seq_of(r), 0, 1);
            assert_eq!(rec.compare_exchange(r, a, Acquire, Acquire), Ok(r));
            finish(&slot, super::sleep::seq_of(r), Errno::EIDRM.raw() as u64);
        }
        let got = sleeper.join().unwrap();
        let v = ArenaView::new(&slot);
        match got {
            Sleep::Armed(t) => {
                assert!(adopted, "armed but the takeover did not see it");
                assert_eq!(v.wait_state(&t), Wait::Done(Err(Errno::EIDRM)));
                assert_eq!(rec.load(Acquire), free(super::sleep::seq_of(r) + 1));
            }
            Sleep::Slow => {
                assert!(!adopted, "adopted a sleeper that went to the daemon");
                assert_eq!(state_of(rec.load(Acquire)), FREE);
            }
            other => panic!("semop gave {other:?}"),
        }
    });
}
