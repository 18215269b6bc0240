//! Loom models of the lease's `STATE` word: a holder's operation (whole, or stopped after any
//! step, which is what a SIGKILL leaves) against the daemon's revoke. A revoke imports exactly
//! the locks of the last committed operation: the ones after a holder's call that returned
//! `Done`, the ones before a call that returned `Slow` or never finished.

use super::book::NotTaken;
use super::*;
use crate::sync::model;
use std::sync::Arc;

fn file() -> FileId {
    // A file whose group is the first, so that a model's area is one group long.
    (0..)
        .map(|ino| FileId { dev: 1, ino })
        .find(|&f| group_of(f) == 0)
        .expect("some inode hashes to group 0")
}

const BEFORE: Piece = Piece {
    write: true,
    start: 0,
    end: 9,
};

fn leased() -> Arc<Leases> {
    let l = Leases::owned_words(GROUP * SLOT_WORDS);
    l.enter(file(), 100, false, |_, _| {});
    l.leave(file(), Some(100), |_| Ok(vec![BEFORE]), || None);
    Arc::new(l)
}

#[test]
fn a_holders_unlock_against_a_revoke_is_all_or_nothing() {
    model(|| {
        let l = leased();
        let l2 = l.clone();
        let holder =
            loom::thread::spawn(move || LeaseView::new(l2.words()).set(file(), 100, None, 0, 9));
        let mut imported = None;
        l.enter(file(), 200, false, |pid, p| {
            imported = Some((pid, p.to_vec()))
        });
        let r = holder.join().unwrap();
        let (pid, pieces) = imported.expect("the lease was revoked");
        assert_eq!(pid, 100);
        match r {
            Leased::Done => assert!(pieces.is_empty()),
            Leased::Slow => assert_eq!(pieces, vec![BEFORE]),
        }
    });
}

#[test]
fn a_holder_killed_after_any_step_leaves_the_locks_before_its_call() {
    for stop in 0..5 {
        model(move || {
            let l = leased();
            let l2 = l.clone();
            let holder = loom::thread::spawn(move || {
                LeaseView::new(l2.words()).set_steps(file(), 100, Some(false), (0, 19), stop)
            });
            let mut imported = None;
            l.enter(file(), 200, false, |_, p| imported = Some(p.to_vec()));
            assert_eq!(holder.join().unwrap(), Leased::Slow);
            assert_eq!(imported, Some(vec![BEFORE]));
            // The holder is dead: its slot is free again, and a new grant is seen whole.
            l.exit(100);
            l.leave(file(), None, |_| Err(NotTaken::Unfit), || None);
            l.enter(file(), 300, false, |_, _| {});
            l.leave(file(), Some(300), |_| Ok(vec![]), || None);
        });
    }
}
