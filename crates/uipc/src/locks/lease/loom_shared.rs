//! Loom models of shared mode's owner word: processes' lock and unlock against the daemon's
//! take-back (the lock is never held by two, nor lost, nor duplicated: the take-back imports
//! exactly the owner whose lock stands), and a sleeper against the unlock that must wake it.

use super::book::NotTaken;
use super::shared::*;
use super::*;
use crate::sync::model;
use std::sync::Arc;

fn file() -> FileId {
    (0..)
        .map(|ino| FileId { dev: 1, ino })
        .find(|&f| group_of(f) == 0)
        .expect("some inode hashes to group 0")
}

/// An area of one group and a few per-process words, `file()` in shared mode with no owner.
fn shared() -> Arc<Leases> {
    let l = Leases::owned_words(GROUP * SLOT_WORDS + 8);
    l.enter(file(), 1, false, |_, _| {});
    l.leave(file(), Some(1), |_| Ok(vec![]), || None);
    // Taken back for another process: contended.
    l.enter(file(), 2, false, |_, _| {});
    l.leave(file(), Some(2), |_| Err(NotTaken::Contended), || Some(0));
    assert!(LeaseView::new(l.words()).is_shared(file()));
    Arc::new(l)
}

/// A futex whose wait returns at once (a spurious wake-up) after yielding.
struct Spin;

impl Futex for Spin {
    fn wait(&mut self, word: &AtomicU64, expect: u32) -> Result<(), crate::Errno> {
        if word.load(Acquire) as u32 == expect {
            loom::thread::yield_now();
        }
        Ok(())
    }
    fn wake_one(&mut self, _: &AtomicU64) {}
    fn alive(&mut self, _: i32) -> bool {
        true
    }
}

#[test]
fn lock_and_unlock_against_a_take_back_keep_exactly_one_owner() {
    model(|| {
        let l = shared();
        let l2 = l.clone();
        let a = loom::thread::spawn(move || {
            let v = LeaseView::new(l2.words());
            let locked = v.shared_lock(file(), 3, false, &mut Spin);
            let unlocked = match locked {
                Some(Ok(())) => {
                    v.shared_unlock(file(), 3, (0, crate::locks::types::OFFSET_MAX), &mut Spin)
                }
                _ => None,
            };
            (locked, unlocked)
        });
        let mut imported = None;
        l.enter(file(), 4, false, |pid, p| imported = Some((pid, p.len())));
        let (locked, unlocked) = a.join().unwrap();
        // The daemon's engine holds 3's lock iff 3 took it and its unlock did not complete
        // here (it then goes to the daemon, which finds the lock to drop).
        let holds = locked == Some(Ok(())) && unlocked.is_none();
        assert_eq!(imported.filter(|&(_, n)| n > 0), holds.then_some((3, 1)));
        assert!(!LeaseView::new(l.words()).is_shared(file()));
    });
}

#[test]
fn a_sleeper_gets_the_lock_its_owner_drops() {
    model(|| {
        let l = shared();
        let v = LeaseView::new(l.words());
        assert_eq!(v.shared_lock(file(), 3, false, &mut Spin), Some(Ok(())));
        let l2 = l.clone();
        let b = loom::thread::spawn(move || {
            LeaseView::new(l2.words()).shared_lock(file(), 5, true, &mut Spin)
        });
        assert_eq!(
            v.shared_unlock(file(), 3, (0, crate::locks::types::OFFSET_MAX), &mut Spin),
            Some(())
        );
        assert_eq!(b.join().unwrap(), Some(Ok(())));
        assert_eq!(v.shared_owner(file(), 6), Some(5));
    });
}
