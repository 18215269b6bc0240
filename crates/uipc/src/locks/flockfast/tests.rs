//! flock leases inside a lock manager: grant after a named description's lone flock, the
//! caller's operations through the view, revoke by another description's call (which then
//! conflicts with the imported lock), the last close, listings, what is never leased.

use super::*;
use crate::locks::lease::Leases;
use crate::locks::types::*;
use crate::locks::LockManager;
use crate::sync::AtomicU64;
use crate::{Cred, Errno, Tgid, WaitCtx};

const F: FileId = FileId { dev: 7, ino: 43 };

fn open(ofd: u64) -> OpenFile {
    OpenFile {
        file: F,
        ofd: OfdId(ofd),
        readable: true,
        writable: true,
        offset: 0,
        size: 0,
    }
}

fn manager() -> LockManager {
    LockManager::new()
        .with_leases(Leases::owned())
        .with_flock_slots(FlockSlots::owned())
}

/// flock through the daemon path by description `ofd` of process `pid`, named for the call.
fn flock(m: &LockManager, pid: i32, ofd: u64, cmd: i32) -> crate::Result<()> {
    let slots = m.flock_slots().unwrap();
    slots.name(OfdId(ofd), ofd as i32 + 10);
    let r = m.flock(&Cred::root(pid), Some(&open(ofd)), cmd, &WaitCtx::FOREVER);
    slots.unname(OfdId(ofd));
    r
}

/// Futex calls that return at once (the tests never block).
struct NoSleep;
impl Futex for NoSleep {
    fn wait(&self, _: &AtomicU64, _: u32) -> bool {
        false
    }
    fn wake_one(&self, _: &AtomicU64) {}
}

/// The caller's operation by `pid` through description `ofd` (`same` compares tokens as the
/// client's kcmp would).
fn local(m: &LockManager, pid: i32, ofd: u64, cmd: i32) -> Flocked {
    let view = FlockView::new(m.flock_slots().unwrap().words());
    let want = Mode::of_cmd(cmd).unwrap();
    let mine = Token {
        pid: std::process::id() as i32,
        fd: ofd as i32 + 10,
    };
    for k in view.candidates(F).collect::<Vec<_>>() {
        if let Some((i, e, _)) = view.find(k, pid, |t| t == mine) {
            return view.flock((k, i, e), pid, want, cmd & LOCK_NB != 0, &NoSleep);
        }
    }
    Flocked::Slow
}

fn lines(m: &LockManager) -> Vec<(LockKind, LockType, i32)> {
    m.list().iter().map(|l| (l.kind, l.ty, l.pid)).collect()
}

#[test]
fn a_lone_description_is_leased_and_flocks_in_place() {
    let m = manager();
    flock(&m, 100, 1, LOCK_EX).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), Some(OfdId(1)));
    assert!(m.owns_any(F, Owner::Description(OfdId(1))));
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Done);
    assert_eq!(local(&m, 100, 1, LOCK_SH), Flocked::Done);
    // A fork child shares the description: named with its own pid by one daemon call, it
    // then acts on the same lock.
    assert_eq!(local(&m, 101, 1, LOCK_EX | LOCK_NB), Flocked::Slow);
    assert_eq!(
        flock(&m, 101, 1, LOCK_EX | LOCK_NB | FLOCK_MAY_REDO),
        Err(REDO)
    );
    assert_eq!(local(&m, 101, 1, LOCK_EX | LOCK_NB), Flocked::Done);
    // Another description's token does not match.
    assert_eq!(local(&m, 100, 2, LOCK_EX), Flocked::Slow);
    // The listing takes the lease back: the child set the lock.
    assert_eq!(lines(&m), vec![(LockKind::Flock, LockType::Write, 101)]);
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Slow);
}

#[test]
fn another_description_revokes_and_conflicts_with_the_imported_lock() {
    let m = manager();
    flock(&m, 100, 1, LOCK_SH).unwrap();
    assert_eq!(local(&m, 100, 1, LOCK_EX), Flocked::Done);
    assert_eq!(flock(&m, 200, 2, LOCK_SH | LOCK_NB), Err(Errno::EAGAIN));
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
    // Back on the daemon path: the first description unlocks there, the second gets it.
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Slow);
    flock(&m, 100, 1, LOCK_UN).unwrap();
    flock(&m, 200, 2, LOCK_SH | LOCK_NB).unwrap();
    assert_eq!(lines(&m), vec![(LockKind::Flock, LockType::Read, 200)]);
}

#[test]
fn a_contended_file_is_not_leased_again_at_once() {
    let m = manager();
    flock(&m, 100, 1, LOCK_EX).unwrap();
    flock(&m, 200, 2, LOCK_EX | LOCK_NB).unwrap_err();
    flock(&m, 100, 1, LOCK_UN).unwrap();
    flock(&m, 200, 2, LOCK_EX).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
}

#[test]
fn only_a_named_description_without_other_locks_is_leased() {
    let m = manager();
    m.flock(&Cred::root(100), Some(&open(1)), LOCK_EX, &WaitCtx::FOREVER)
        .unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
    m.flock(&Cred::root(100), Some(&open(1)), LOCK_UN, &WaitCtx::FOREVER)
        .unwrap();
    // A POSIX lock on the file keeps flock with the daemon.
    let mut fl = Flock {
        l_type: F_RDLCK,
        l_whence: SEEK_SET,
        l_start: 0,
        l_len: 1,
        l_pid: 0,
    };
    m.fcntl(
        &Cred::root(300),
        Some(&open(3)),
        F_SETLK,
        &mut fl,
        &WaitCtx::FOREVER,
    )
    .unwrap();
    flock(&m, 100, 1, LOCK_EX).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
}

#[test]
fn the_last_close_drops_a_leased_lock_and_another_close_does_not() {
    let m = manager();
    flock(&m, 100, 1, LOCK_EX).unwrap();
    m.close(Tgid::new(100), F, OfdId(1), false);
    assert_eq!(local(&m, 100, 1, LOCK_EX), Flocked::Done);
    m.close(Tgid::new(100), F, OfdId(1), true);
    assert!(!m.owns_any(F, Owner::Description(OfdId(1))));
    assert_eq!(lines(&m), vec![]);
    flock(&m, 200, 2, LOCK_EX | LOCK_NB).unwrap();
}

#[test]
fn a_stray_write_imports_nothing_invalid() {
    let m = manager();
    flock(&m, 100, 1, LOCK_EX).unwrap();
    let view_words = m.flock_slots().unwrap().words();
    let k = FlockView::new(view_words).candidates(F).next().unwrap();
    view_words[k * SLOT_WORDS + STATE].fetch_add(1 << EPOCH_SHIFT, AcqRel);
    assert_eq!(lines(&m), vec![]);
}

/// A manager whose file is leased to description 1 (process 100, holding LOCK_EX), with
/// description 2 (process 200) made a member by its daemon call with the client's bit.
fn two_members() -> LockManager {
    let m = manager();
    flock(&m, 100, 1, LOCK_EX).unwrap();
    // With the client's bit the daemon makes description 2 a member (the lease stays) and
    // answers REDO.
    assert_eq!(
        flock(&m, 200, 2, LOCK_EX | LOCK_NB | FLOCK_MAY_REDO),
        Err(REDO)
    );
    m
}

#[test]
fn a_second_description_becomes_a_member_and_they_exclude_each_other() {
    let m = two_members();
    assert_eq!(m.flock_slots().unwrap().holder(F), Some(OfdId(1)));
    assert_eq!(local(&m, 200, 2, LOCK_EX | LOCK_NB), Flocked::WouldBlock);
    assert_eq!(local(&m, 200, 2, LOCK_UN), Flocked::Done);
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Done);
    assert_eq!(local(&m, 200, 2, LOCK_EX | LOCK_NB), Flocked::Done);
    assert_eq!(local(&m, 100, 1, LOCK_EX | LOCK_NB), Flocked::WouldBlock);
    // Two members: LOCK_SH is the daemon's, and a shared request makes no member.
    assert_eq!(local(&m, 100, 1, LOCK_SH | LOCK_NB), Flocked::Slow);
    assert_eq!(
        flock(&m, 300, 3, LOCK_SH | LOCK_NB | FLOCK_MAY_REDO),
        Err(Errno::EAGAIN)
    );
    assert!(m.owns_any(F, Owner::Description(OfdId(2))));
    // That call took the lease back: description 2's lock is in the engine.
    assert_eq!(lines(&m), vec![(LockKind::Flock, LockType::Write, 200)]);
    assert!(!m.owns_any(F, Owner::Description(OfdId(1))));
}

#[test]
fn only_the_member_holding_the_lock_holds_or_waits() {
    let m = two_members();
    let (d1, d2) = (Owner::Description(OfdId(1)), Owner::Description(OfdId(2)));
    // Both are members (their names are kept); only the owner holds what a close drops.
    assert!(m.owns_any(F, d1) && m.owns_any(F, d2));
    assert!(m.holds_or_waits(F, d1));
    assert!(!m.holds_or_waits(F, d2));
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Done);
    assert!(!m.holds_or_waits(F, d1) && !m.holds_or_waits(F, d2));
    assert_eq!(local(&m, 200, 2, LOCK_EX | LOCK_NB), Flocked::Done);
    assert!(!m.holds_or_waits(F, d1));
    assert!(m.holds_or_waits(F, d2));
    // A word the book cannot read (written by someone else): every member may hold it.
    let words = m.flock_slots().unwrap().words();
    let k = FlockView::new(words).candidates(F).next().unwrap();
    words[k * SLOT_WORDS + STATE].fetch_add(1 << EPOCH_SHIFT, AcqRel);
    assert!(m.holds_or_waits(F, d1) && m.holds_or_waits(F, d2));
}

#[test]
fn a_held_file_is_not_leased_until_every_hold_ends() {
    let m = manager();
    m.hold_grants(F);
    m.hold_grants(F);
    // However many successful calls of a lone description (more than a cooldown's worth).
    for _ in 0..2 * crate::locks::books::COOLDOWN {
        flock(&m, 100, 1, LOCK_EX).unwrap();
    }
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
    m.release_grants(F);
    flock(&m, 100, 1, LOCK_EX).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
    m.release_grants(F);
    flock(&m, 100, 1, LOCK_EX).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), Some(OfdId(1)));
    // A hold takes the lease back (its lock into the engine).
    m.hold_grants(F);
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
    assert_eq!(lines(&m), vec![(LockKind::Flock, LockType::Write, 100)]);
    m.release_grants(F);
}

/// Parks a LOCK_EX of description `ofd` (process `pid`, named) that waits in the engine.
fn parked_ex(m: &LockManager, pid: i32, ofd: u64, cmd: i32) -> crate::locks::ParkedLock {
    m.flock_slots().unwrap().name(OfdId(ofd), ofd as i32 + 10);
    let park = crate::wait::ParkCtx::new(std::sync::Arc::new(|| {}), None);
    match m.flock_start(&Cred::root(pid), Some(&open(ofd)), cmd, &park) {
        crate::locks::Progress::Parked(p) => p,
        crate::locks::Progress::Done(r) => panic!("LOCK_EX of {ofd} did not wait: {r:?}"),
    }
}

#[test]
fn a_file_contended_in_the_engine_from_the_start_is_leased_with_its_waiters_as_members() {
    use crate::locks::Progress;
    let m = manager();
    // Description 1 is not named: its lock stays in the engine, and 2 and 3 wait there.
    m.flock(&Cred::root(100), Some(&open(1)), LOCK_EX, &WaitCtx::FOREVER)
        .unwrap();
    let p2 = parked_ex(&m, 200, 2, LOCK_EX | FLOCK_MAY_REDO);
    let p3 = parked_ex(&m, 300, 3, LOCK_EX | FLOCK_MAY_REDO);
    m.flock(&Cred::root(100), Some(&open(1)), LOCK_UN, &WaitCtx::FOREVER)
        .unwrap();
    // A fourth description takes the free lock before the woken ones retry: the file is
    // leased to it although two requests are queued, since both can redo on the slot.
    flock(&m, 400, 4, LOCK_EX | FLOCK_MAY_REDO).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), Some(OfdId(4)));
    for p in [p2, p3] {
        match p.poll(&m) {
            Progress::Done(r) => assert_eq!(r, Err(REDO)),
            Progress::Parked(_) => panic!("the woken request waits in the engine again"),
        }
    }
    // Now members: they wait for 4 on the slot and take the lock there once it lets go.
    assert_eq!(local(&m, 200, 2, LOCK_EX | LOCK_NB), Flocked::WouldBlock);
    assert_eq!(local(&m, 400, 4, LOCK_UN), Flocked::Done);
    assert_eq!(local(&m, 200, 2, LOCK_EX | LOCK_NB), Flocked::Done);
    assert_eq!(local(&m, 300, 3, LOCK_EX | LOCK_NB), Flocked::WouldBlock);
    assert_eq!(lines(&m), vec![(LockKind::Flock, LockType::Write, 200)]);
}

#[test]
fn a_queued_request_that_cannot_redo_keeps_the_file_in_the_engine() {
    let m = manager();
    m.flock(&Cred::root(100), Some(&open(1)), LOCK_EX, &WaitCtx::FOREVER)
        .unwrap();
    let p2 = parked_ex(&m, 200, 2, LOCK_EX);
    m.flock(&Cred::root(100), Some(&open(1)), LOCK_UN, &WaitCtx::FOREVER)
        .unwrap();
    flock(&m, 400, 4, LOCK_EX | FLOCK_MAY_REDO).unwrap();
    assert_eq!(m.flock_slots().unwrap().holder(F), None);
    assert!(matches!(p2.poll(&m), crate::locks::Progress::Parked(_)));
}

#[test]
fn an_exit_drops_the_processs_members_that_hold_nothing_and_keeps_the_owner() {
    let m = two_members();
    let (d1, d2) = (Owner::Description(OfdId(1)), Owner::Description(OfdId(2)));
    // Process 100 (description 1) holds LOCK_EX: its exit keeps the member, which may hold.
    m.process_exit(Tgid::new(100));
    assert!(m.owns_any(F, d1) && m.holds_or_waits(F, d1));
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Done);
    // Process 200 (description 2) holds nothing: its exit drops the member, whose token
    // then names nobody, not even a caller with its pid and descriptor.
    m.process_exit(Tgid::new(200));
    assert!(!m.owns_any(F, d2));
    assert_eq!(local(&m, 200, 2, LOCK_EX | LOCK_NB), Flocked::Slow);
    // Description 1 is still a member and locks there.
    assert_eq!(local(&m, 100, 1, LOCK_EX | LOCK_NB), Flocked::Done);
    assert!(m.holds_or_waits(F, d1));
    // Description 2, still open somewhere, asks the daemon again and joins anew, at a new
    // index: both work, and exclude each other.
    assert_eq!(
        flock(&m, 300, 2, LOCK_EX | LOCK_NB | FLOCK_MAY_REDO),
        Err(REDO)
    );
    assert_eq!(local(&m, 300, 2, LOCK_EX | LOCK_NB), Flocked::WouldBlock);
    assert_eq!(local(&m, 100, 1, LOCK_UN), Flocked::Done);
    assert_eq!(local(&m, 300, 2, LOCK_EX | LOCK_NB), Flocked::Done);
    assert_eq!(m.flock_slots().unwrap().holder(F), Some(OfdId(1)));
    // A revoke hands back the lock of the new member.
    assert_eq!(lines(&m), vec![(LockKind::Flock, LockType::Write, 300)]);
}

/// A proof of description `ofd` (the caller `pid`'s descriptor `ofd + 10`), made as the
/// client makes it.
fn proven(m: &LockManager, pid: i32, ofd: u64) -> Proof {
    let view = FlockView::new(m.flock_slots().unwrap().words());
    let mine = Token {
        pid: std::process::id() as i32,
        fd: ofd as i32 + 10,
    };
    let k = view.candidates(F).next().unwrap();
    let (i, epoch, token) = view.find(k, pid, |t| t == mine).unwrap();
    Proof {
        fd: ofd as i32 + 10,
        slot: k,
        member: i,
        token,
        epoch,
        closes: 0,
    }
}

#[test]
fn a_remembered_proof_stands_until_its_member_or_its_epoch_changes() {
    let m = two_members();
    let view = FlockView::new(m.flock_slots().unwrap().words());
    let (p1, p2) = (proven(&m, 100, 1), proven(&m, 200, 2));
    assert_eq!(view.still(&p1, 100), Some(p1.epoch));
    assert_eq!(view.still(&p2, 200), Some(p2.epoch));
    // Another process (a child that inherited the descriptor) proves nothing with it.
    assert_eq!(view.still(&p1, 101), None);
    // Process 200's exit drops its member: the proof falls with it.
    m.process_exit(Tgid::new(200));
    assert_eq!(view.still(&p2, 200), None);
    assert_eq!(view.still(&p1, 100), Some(p1.epoch));
    // A revoke (another description's call) ends the epoch.
    assert_eq!(
        flock(&m, 300, 3, LOCK_SH | LOCK_NB | FLOCK_MAY_REDO),
        Err(Errno::EAGAIN)
    );
    assert_eq!(view.still(&p1, 100), None);
}
