//! Loom models of a flock lease's `STATE` word: a caller's operation (whole, or stopped before
//! any step, which is what a SIGKILL leaves) against the daemon's revoke, and against a revoke
//! and a new grant to another description. A revoke imports exactly the lock of the last
//! committed operation; a caller never commits on a lease of a description that is not its
//! own.

use super::*;
use crate::locks::types::{LockType, OfdId};
use crate::sync::model;
use std::sync::Arc;

fn file() -> FileId {
    // A file whose group is the first, so that a model's area is one group long.
    (0..)
        .map(|ino| FileId { dev: 1, ino })
        .find(|&f| group_of(f) == 0)
        .expect("some inode hashes to group 0")
}

fn token(ofd: u64) -> Token {
    Token {
        pid: 1,
        fd: ofd as i32,
    }
}

/// An area whose lease is held by description 1 with LOCK_EX set by pid 100.
fn leased() -> Arc<FlockSlots> {
    let l = FlockSlots::owned_words(GROUP * SLOT_WORDS);
    l.name(OfdId(1), token(1));
    l.enter(file(), Some(OfdId(1)), |_| {});
    l.leave(file(), Some((OfdId(1), 100)), |_| {
        Some(Some((LockType::Write, 100)))
    });
    assert_eq!(l.holder(file()), Some(OfdId(1)));
    Arc::new(l)
}

/// The caller's operation through description `ofd` on every slot of the group.
fn call(l: &FlockSlots, ofd: u64, pid: i32, want: Mode, stop: usize) -> Flocked {
    let view = FlockView::new(l.words());
    for k in 0..GROUP {
        if view.flock_steps(k, pid, want, |t| t == token(ofd), stop) == Flocked::Done {
            return Flocked::Done;
        }
    }
    Flocked::Slow
}

#[test]
fn an_unlock_against_a_revoke_is_all_or_nothing() {
    model(|| {
        let l = leased();
        let l2 = l.clone();
        let caller = loom::thread::spawn(move || call(&l2, 1, 101, Mode::Unlocked, usize::MAX));
        let mut imported = None;
        l.enter(file(), Some(OfdId(2)), |t| imported = Some(t));
        let r = caller.join().unwrap();
        let (ofd, ty, pid) = imported.expect("the lease was revoked");
        assert_eq!(ofd, OfdId(1));
        match r {
            Flocked::Done => assert_eq!(ty, None),
            Flocked::Slow => assert_eq!((ty, pid), (Some(LockType::Write), 100)),
        }
    });
}

#[test]
fn a_caller_killed_before_any_step_leaves_the_lock_before_its_call() {
    for stop in 0..4 {
        model(move || {
            let l = leased();
            let l2 = l.clone();
            let caller = loom::thread::spawn(move || call(&l2, 1, 101, Mode::Shared, stop));
            let mut imported = None;
            l.enter(file(), Some(OfdId(2)), |t| imported = Some(t));
            assert_eq!(caller.join().unwrap(), Flocked::Slow);
            assert_eq!(imported, Some((OfdId(1), Some(LockType::Write), 100)));
        });
    }
}

#[test]
fn a_caller_never_commits_on_another_descriptions_lease() {
    model(|| {
        let l = leased();
        let l2 = l.clone();
        // Description 1's caller, racing the lease's move to description 2.
        let caller = loom::thread::spawn(move || call(&l2, 1, 101, Mode::Unlocked, usize::MAX));
        // A daemon call of description 1 takes the lease back (no cooldown: its own), and the
        // daemon then leases the file to description 2.
        let mut first = None;
        l.enter(file(), Some(OfdId(1)), |t| first = Some(t));
        l.leave(file(), None, |_| None);
        l.name(OfdId(2), token(2));
        l.enter(file(), Some(OfdId(2)), |_| {});
        l.leave(file(), Some((OfdId(2), 200)), |_| Some(None));
        assert_eq!(l.holder(file()), Some(OfdId(2)));
        let r = caller.join().unwrap();
        let (_, ty, _) = first.expect("the first lease was revoked");
        assert_eq!(ty.is_none(), r == Flocked::Done);
        // Description 2's lease is untouched by description 1's caller.
        let mut second = None;
        l.enter(file(), Some(OfdId(3)), |t| second = Some(t));
        assert_eq!(second, Some((OfdId(2), None, 200)));
    });
}
