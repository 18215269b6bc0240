//! Loom models of a flock lease slot's `STATE` word: a member's operation against the
//! daemon's revoke (a revoke imports exactly the lock of the last committed operation), a
//! member's operation racing the slot's move to another description (it never commits on a
//! lease it is not a member of), two members excluding each other, one sleeping until the
//! other unlocks, and a caller's proof against the drop of a departed member whose descriptor
//! number the daemon then reuses.

use super::book::Taken;
use super::*;
use crate::locks::types::{LockType, OfdId};
use crate::sync::model;
use crate::Tgid;
use loom::thread::JoinHandle;
use std::sync::Arc;

fn file() -> FileId {
    // A file whose group is the first, so that a model's area is one group long.
    (0..)
        .map(|ino| FileId { dev: 1, ino })
        .find(|&f| group_of(f) == 0)
        .expect("some inode hashes to group 0")
}

/// The daemon's descriptor of description `ofd`, as the models name it.
fn fd(ofd: u64) -> i32 {
    ofd as i32 + 10
}

/// A futex whose wait yields and returns (a spurious wake-up: the caller looks again).
struct Yield;
impl Futex for Yield {
    fn wait(&self, _: &AtomicU64, _: u32) -> bool {
        loom::thread::yield_now();
        false
    }
    fn wake_one(&self, _: &AtomicU64) {}
}

/// The daemon names description `ofd` and leases the file to it, with LOCK_EX set by `pid`.
fn lease_to(l: &FlockSlots, ofd: u64, pid: i32) {
    l.name(OfdId(ofd), fd(ofd));
    l.enter(file(), Some(OfdId(ofd)), |_| {});
    let pid = Tgid::new(pid);
    l.leave(file(), Some((OfdId(ofd), pid)), |_| {
        Some(Some((LockType::Write, pid)))
    });
    assert_eq!(l.holder(file()), Some(OfdId(ofd)));
}

/// An area whose lease is held by description 1 with LOCK_EX set by pid 100.
fn leased() -> Arc<FlockSlots> {
    let l = FlockSlots::owned_words(GROUP * SLOT_WORDS);
    lease_to(&l, 1, 100);
    Arc::new(l)
}

/// [`leased`], with description 2 (pid 200) made a member by a registration.
fn leased_with_a_second_member() -> Arc<FlockSlots> {
    let l = leased();
    l.name(OfdId(2), fd(2));
    assert!(l.register(file(), OfdId(2), Tgid::new(200), Mode::Exclusive));
    l
}

/// A daemon call of description `ofd` entering the slot: the lock it imports, if any.
fn daemon_enter(l: &FlockSlots, ofd: u64) -> Option<Taken> {
    let mut imported = None;
    l.enter(file(), Some(OfdId(ofd)), |t| imported = Some(t));
    imported
}

/// [`leased`], and on a new model thread the caller of description 1 (pid 100) unlocking.
fn leased_and_unlocking() -> (Arc<FlockSlots>, JoinHandle<Flocked>) {
    let l = leased();
    let caller = spawn_call(&l, 1, 100, Mode::Unlocked);
    (l, caller)
}

/// [`call`] on a new model thread.
fn spawn_call(l: &Arc<FlockSlots>, ofd: u64, pid: i32, want: Mode) -> JoinHandle<Flocked> {
    let l = l.clone();
    loom::thread::spawn(move || call(&l, ofd, pid, want, false))
}

/// The caller's operation through description `ofd` by `pid`.
fn call(l: &FlockSlots, ofd: u64, pid: i32, want: Mode, nb: bool) -> Flocked {
    let view = FlockView::new(l.words());
    for k in 0..GROUP {
        if let Some((i, e, _)) = view.find(k, pid, |t| t.fd == fd(ofd)) {
            return view.flock((k, i, e), pid, want, nb, &Yield);
        }
    }
    Flocked::Slow
}

#[test]
fn an_unlock_against_a_revoke_is_all_or_nothing() {
    model(|| {
        let (l, caller) = leased_and_unlocking();
        let imported = daemon_enter(&l, 2);
        match caller.join().unwrap() {
            Flocked::Done => assert_eq!(imported, None),
            Flocked::Slow => assert_eq!(
                imported,
                Some((OfdId(1), Some(LockType::Write), Tgid::new(100)))
            ),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn a_caller_never_commits_on_another_descriptions_lease() {
    model(|| {
        // Description 1's caller, racing the lease's move to description 2.
        let (l, caller) = leased_and_unlocking();
        // A daemon call of description 1 takes the lease back (no cooldown: a member), and
        // the daemon then leases the file to description 2 (named with the same pid).
        let first = daemon_enter(&l, 1);
        l.leave(file(), None, |_| None);
        lease_to(&l, 2, 100);
        let r = caller.join().unwrap();
        assert_eq!(first.is_none(), r == Flocked::Done);
        // Description 2's lock is untouched by description 1's caller.
        let second = daemon_enter(&l, 3);
        assert_eq!(
            second,
            Some((OfdId(2), Some(LockType::Write), Tgid::new(100)))
        );
    });
}

#[test]
fn two_members_exclude_each_other_and_a_sleeper_gets_the_lock() {
    model(|| {
        let l = leased_with_a_second_member();
        let waiter = spawn_call(&l, 2, 200, Mode::Exclusive);
        assert_eq!(call(&l, 1, 100, Mode::Unlocked, false), Flocked::Done);
        assert_eq!(waiter.join().unwrap(), Flocked::Done);
        assert_eq!(call(&l, 1, 100, Mode::Exclusive, true), Flocked::WouldBlock);
        let imported = daemon_enter(&l, 3);
        assert_eq!(
            imported,
            Some((OfdId(2), Some(LockType::Write), Tgid::new(200)))
        );
    });
}

#[test]
fn a_dropped_members_reused_descriptor_number_proves_nothing() {
    model(|| {
        let l = leased_with_a_second_member();
        // What the daemon's descriptor fd(2) refers to: description 2, until the daemon
        // closes it and the number comes back for description 3.
        let table = Arc::new(AtomicU64::new(2));
        let caller = {
            let (l, table) = (l.clone(), table.clone());
            // A process given pid 200 anew, holding description 3: its kcmp of fd(2) says
            // "same" only once that number refers to description 3.
            loom::thread::spawn(move || {
                let view = FlockView::new(l.words());
                (0..GROUP).any(|k| {
                    view.find(k, 200, |t| {
                        t.fd == fd(2) && table.load(crate::sync::Ordering::Acquire) == 3
                    })
                    .is_some()
                })
            })
        };
        // Process 200's exit drops its member (it holds nothing); then the daemon closes
        // its descriptor, whose number is reused.
        l.exit(Tgid::new(200));
        table.store(3, crate::sync::Ordering::Release);
        assert!(!caller.join().unwrap());
    });
}
