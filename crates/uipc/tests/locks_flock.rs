//! flock(2): commands, errnos in Linux's order, non-atomic conversion, and independence from
//! POSIX locks (reference §6.9).

mod common;

use uipc::locks::*;
use uipc::{Cred, Errno, WaitCtx};

const FILE: FileId = FileId { dev: 8, ino: 1 };

/// Description `ofd` of the file, open for reading only (flock needs no mode).
fn fd(ofd: u64) -> OpenFile {
    OpenFile {
        writable: false,
        ..common::rw_open(FILE, ofd, 0)
    }
}

fn flock(m: &LockManager, pid: i32, f: Option<&OpenFile>, cmd: i32) -> Result<(), Errno> {
    m.flock(&Cred::root(pid), f, cmd, &WaitCtx::FOREVER)
}

fn held(m: &LockManager) -> Vec<(OfdId, LockType)> {
    m.list_file(FILE)
        .iter()
        .filter(|l| l.blocked_behind.is_none())
        .map(|l| match l.owner {
            Owner::Description(d) => (d, l.ty),
            Owner::Process(_) => unreachable!("flock owners are descriptions"),
        })
        .collect()
}

/// The shared locks of descriptions `ofds`, in that order.
fn shared(ofds: &[u64]) -> Vec<(OfdId, LockType)> {
    ofds.iter().map(|&d| (OfdId(d), LockType::Read)).collect()
}

#[test]
fn commands_are_checked_before_the_descriptor_and_lock_mand_is_ignored() {
    let m = LockManager::new();
    assert_eq!(flock(&m, 1, None, LOCK_MAND | 77), Ok(()));
    for bad in [0, LOCK_SH | LOCK_EX, LOCK_NB, 16, !LOCK_MAND] {
        assert_eq!(flock(&m, 1, None, bad), Err(Errno::EINVAL), "cmd {bad}");
    }
    assert_eq!(flock(&m, 1, None, LOCK_UN), Err(Errno::EBADF));
    let path_like = OpenFile {
        readable: false,
        ..fd(1)
    };
    assert_eq!(flock(&m, 1, Some(&path_like), LOCK_SH), Err(Errno::EBADF));
    assert_eq!(flock(&m, 1, Some(&path_like), LOCK_UN), Ok(()));
}

#[test]
fn shared_locks_coexist_and_an_exclusive_one_gets_ewouldblock() {
    let m = LockManager::new();
    flock(&m, 1, Some(&fd(1)), LOCK_SH).unwrap();
    flock(&m, 2, Some(&fd(2)), LOCK_SH | LOCK_NB).unwrap();
    assert_eq!(
        flock(&m, 3, Some(&fd(3)), LOCK_EX | LOCK_NB),
        Err(Errno::EWOULDBLOCK)
    );
    flock(&m, 1, Some(&fd(1)), LOCK_SH).unwrap();
    assert_eq!(
        held(&m).len(),
        2,
        "asking again for the held type changes nothing"
    );
}

#[test]
fn a_failed_nonblocking_upgrade_leaves_no_lock() {
    let m = LockManager::new();
    flock(&m, 1, Some(&fd(1)), LOCK_SH).unwrap();
    flock(&m, 2, Some(&fd(2)), LOCK_SH).unwrap();
    assert_eq!(
        flock(&m, 1, Some(&fd(1)), LOCK_EX | LOCK_NB),
        Err(Errno::EAGAIN)
    );
    assert_eq!(held(&m), shared(&[2]));
}

#[test]
fn one_description_is_one_owner_across_processes() {
    let m = LockManager::new();
    flock(&m, 1, Some(&fd(1)), LOCK_EX).unwrap();
    // A forked child sharing the description converts and unlocks the parent's lock.
    flock(&m, 2, Some(&fd(1)), LOCK_SH).unwrap();
    assert_eq!(held(&m), shared(&[1]));
    flock(&m, 2, Some(&fd(1)), LOCK_UN).unwrap();
    assert!(held(&m).is_empty());
}

#[test]
fn flock_and_posix_locks_never_conflict() {
    let m = LockManager::new();
    let rw = OpenFile {
        writable: true,
        ..fd(1)
    };
    flock(&m, 1, Some(&rw), LOCK_EX).unwrap();
    let mut fl = Flock::new(F_WRLCK, 0, 0);
    m.fcntl(
        &Cred::root(2),
        Some(&OpenFile {
            writable: true,
            ..fd(2)
        }),
        F_SETLK,
        &mut fl,
        &WaitCtx::FOREVER,
    )
    .unwrap();
    let mut probe = Flock::new(F_WRLCK, 0, 0);
    m.fcntl(
        &Cred::root(3),
        Some(&rw),
        F_GETLK,
        &mut probe,
        &WaitCtx::FOREVER,
    )
    .unwrap();
    assert_eq!(
        probe.l_pid, 2,
        "F_GETLK sees the POSIX lock, not the flock one"
    );
}

#[test]
fn owns_any_sees_an_owners_held_lock_and_its_blocked_request() {
    let m = std::sync::Arc::new(LockManager::new());
    let d = |n| Owner::Description(OfdId(n));
    assert!(!m.owns_any(FILE, d(1)));
    flock(&m, 1, Some(&fd(1)), LOCK_EX).unwrap();
    assert!(m.owns_any(FILE, d(1)));
    assert!(!m.owns_any(FILE, d(2)));
    assert!(!m.owns_any(FileId { dev: 8, ino: 2 }, d(1)));
    let m2 = m.clone();
    let waiter = std::thread::spawn(move || flock(&m2, 2, Some(&fd(2)), LOCK_EX));
    // Only its blocked request is on the file: owns_any must see it.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !m.owns_any(FILE, d(2)) {
        assert!(
            std::time::Instant::now() < until,
            "the blocked request is not seen"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(held(&m), vec![(OfdId(1), LockType::Write)]);
    flock(&m, 1, Some(&fd(1)), LOCK_UN).unwrap();
    waiter.join().unwrap().unwrap();
    assert!(!m.owns_any(FILE, d(1)));
    assert!(m.owns_any(FILE, d(2)));
}

#[test]
fn the_record_limit_applies_to_flock_and_a_conversion_frees_its_record_first() {
    let m = LockManager::with_config(LockConfig {
        max_locks_per_file: 1,
        ..LockConfig::default()
    });
    flock(&m, 1, Some(&fd(1)), LOCK_SH).unwrap();
    assert_eq!(
        flock(&m, 2, Some(&fd(2)), LOCK_SH | LOCK_NB),
        Err(Errno::ENOLCK),
        "a second description's lock needs a second record"
    );
    flock(&m, 1, Some(&fd(1)), LOCK_EX | LOCK_NB).unwrap();
    assert_eq!(held(&m), vec![(OfdId(1), LockType::Write)]);
    flock(&m, 1, Some(&fd(1)), LOCK_UN).unwrap();
    flock(&m, 2, Some(&fd(2)), LOCK_SH).unwrap();
    assert_eq!(held(&m), shared(&[2]));
}

#[test]
fn a_conversion_appends_the_new_lock_after_the_others() {
    let m = LockManager::new();
    for ofd in 1..=3 {
        flock(&m, ofd as i32, Some(&fd(ofd)), LOCK_SH).unwrap();
    }
    flock(&m, 1, Some(&fd(1)), LOCK_SH).unwrap();
    assert_eq!(
        held(&m),
        shared(&[1, 2, 3]),
        "asking for the type held changes nothing"
    );
    flock(&m, 1, Some(&fd(1)), LOCK_UN).unwrap();
    flock(&m, 1, Some(&fd(1)), LOCK_SH).unwrap();
    assert_eq!(held(&m), shared(&[2, 3, 1]));
}
