//! Tests of [`super`]: descriptions told apart, and the search for other references.

use super::*;
use std::fs::File;
use std::os::fd::{AsFd, FromRawFd};

/// # Safety
/// `fd` must be open and owned by nobody else.
unsafe fn adopt(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller's obligation.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Held by each test here ([`crate::serial_scans_and_forks`]).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    crate::serial_scans_and_forks()
}

fn me() -> i32 {
    std::process::id() as i32
}

fn temp() -> File {
    tempfile_in_dev_shm()
}

/// A fresh temporary file and the identity of the file it is.
fn temp_and_id() -> (File, FileId) {
    let f = temp();
    let id = open_file_of(f.as_raw_fd()).unwrap().file;
    (f, id)
}

/// `f`'s description (of `file`) entered in `d` by a lock call of `caller`, as the call's end
/// leaves it: kept, and in no call's use.
fn entered(d: &Descriptions, f: &File, file: FileId, caller: i32) -> OfdId {
    let id = d
        .acquire(&f.as_fd().try_clone_to_owned().unwrap(), file, caller)
        .unwrap();
    d.users_zero_for_test(id);
    id
}

fn tempfile_in_dev_shm() -> File {
    let path = std::env::temp_dir().join(format!(
        "uipc-desc-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

#[test]
fn a_dup_is_the_same_description_and_a_second_open_is_not() {
    let _serial = serial();
    let locks = LockManager::new();
    let d = Descriptions::new();
    let (a, file) = temp_and_id();
    let dup = a.as_fd().try_clone_to_owned().unwrap();
    let reopened = File::open(format!("/proc/self/fd/{}", a.as_raw_fd())).unwrap();
    let id = d
        .acquire(&a.as_fd().try_clone_to_owned().unwrap(), file, me())
        .unwrap();
    assert_eq!(d.acquire(&dup, file, me()).unwrap(), id);
    let other = d
        .acquire(&reopened.as_fd().try_clone_to_owned().unwrap(), file, me())
        .unwrap();
    assert_ne!(other, id);
    assert_eq!(d.find(dup.as_raw_fd()), Some(id));
    d.release(id, &locks);
    d.release(id, &locks);
    d.release(other, &locks);
    // No locks: nothing is kept.
    assert_eq!(d.len(), 0);
    assert_eq!(d.find(dup.as_raw_fd()), None);
}

#[test]
fn o_path_descriptors_are_not_lockable() {
    let _serial = serial();
    let f = temp();
    let p = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    // SAFETY: opens a NUL-terminated path.
    let raw = unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    assert!(raw >= 0);
    // SAFETY: a fresh descriptor.
    let o = unsafe { adopt(raw) };
    assert!(open_file_of(o.as_raw_fd()).is_none());
    let of = open_file_of(f.as_raw_fd()).unwrap();
    assert!(of.readable && of.writable);
}

/// Checks that `other`, holding description `id` of `file` as its descriptor `fd`, is its
/// last reference beside `mine`: excepting that descriptor too (its close) leaves none, and
/// so does `other`'s death (this kills and reaps it).
fn last_reference_is(
    d: &Descriptions,
    (id, file): (OfdId, FileId),
    mine: (i32, RawFd),
    other: &mut std::process::Child,
    fd: RawFd,
) {
    let pid = other.id() as i32;
    let none = vec![(id, file, false)];
    assert_eq!(d.referenced(Scope::All, &[mine, (pid, fd)]), none);
    other.kill().unwrap();
    other.wait().unwrap();
    assert_eq!(d.referenced(Scope::All, &[mine]), none);
}

#[test]
fn another_process_holding_the_description_counts_as_a_reference() {
    let _serial = serial();
    let d = Descriptions::new();
    let (f, file) = temp_and_id();
    let id = entered(&d, &f, file, me());
    // This process holds it through `f`; without `f`, only the table's copy is left.
    let me = std::process::id() as i32;
    let mine = [(me, f.as_raw_fd())];
    assert_eq!(d.referenced(Scope::All, &[]), vec![(id, file, true)]);
    assert_eq!(d.referenced(Scope::All, &mine), vec![(id, file, false)]);
    // A child holding it (inherited across fork) is a reference.
    let mut child = std::process::Command::new("sleep")
        .arg("5")
        .stdin(std::process::Stdio::from(
            f.as_fd().try_clone_to_owned().unwrap(),
        ))
        .spawn()
        .unwrap();
    assert_eq!(d.referenced(Scope::All, &mine), vec![(id, file, true)]);
    last_reference_is(&d, (id, file), mine[0], &mut child, 0);
    d.forget(id);
    assert_eq!(d.len(), 0);
}

/// `sh` holding `f` as its descriptor 4; each line on its stdin runs the next command of
/// `steps`, and it says `ok` after each.
fn holder(f: &File, steps: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let raw = f.as_raw_fd();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("echo ok; {steps}; read x"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    // SAFETY: dup2 is async-signal-safe; it gives the child `f` as descriptor 4.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let mut child = cmd.spawn().unwrap();
    next_ok(&mut child);
    child
}

fn next_ok(child: &mut std::process::Child) {
    use std::io::Read;
    let mut b = [0u8; 3];
    child.stdout.as_mut().unwrap().read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok\n");
}

fn step(child: &mut std::process::Child) {
    use std::io::Write;
    child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    next_ok(child);
}

#[test]
fn a_witness_is_checked_again_at_each_use_and_never_decides_alone() {
    let _serial = serial();
    let d = Descriptions::new();
    let (f, file) = temp_and_id();
    let mine = [(me(), f.as_raw_fd())];
    // A caller holding it as descriptor 4: found among the callers' descriptors.
    let mut caller = holder(&f, "read x; exec 4</dev/null; echo ok");
    let pid = caller.id() as i32;
    let id = entered(&d, &f, file, pid);
    assert_eq!(d.referenced(Scope::All, &mine), vec![(id, file, true)]);
    assert_eq!(d.witness_for_test(id), Some((pid, 4)));
    // Other scopes leave it out.
    let other = temp();
    let other_file = open_file_of(other.as_raw_fd()).unwrap().file;
    assert_eq!(d.referenced(Scope::File(other_file), &mine), vec![]);
    assert_eq!(d.referenced(Scope::One(OfdId(id.0 + 1)), &mine), vec![]);
    assert_eq!(
        d.referenced(Scope::File(file), &mine),
        vec![(id, file, true)]
    );
    // The witness's descriptor number now names another file: no longer a reference.
    step(&mut caller);
    assert_eq!(d.referenced(Scope::One(id), &mine), vec![(id, file, false)]);
    assert_eq!(d.witness_for_test(id), None);
    // A process that never called is found by the complete scan, and becomes the witness.
    let mut bystander = holder(&f, "true");
    let by = bystander.id() as i32;
    assert_eq!(d.referenced(Scope::All, &mine), vec![(id, file, true)]);
    assert_eq!(d.witness_for_test(id), Some((by, 4)));
    // Its close (excepting its descriptor) or its exit leaves no reference.
    last_reference_is(&d, (id, file), mine[0], &mut bystander, 4);
    caller.kill().unwrap();
    caller.wait().unwrap();
}

#[test]
fn a_sweep_looks_only_for_descriptions_that_hold_a_lock() {
    use uipc::locks::flockfast::{FlockSlots, FLOCK_MAY_REDO, REDO};
    use uipc::locks::{LOCK_EX, LOCK_NB, LOCK_UN};
    use uipc::{Cred, WaitCtx};
    let _serial = serial();
    let locks = LockManager::new().with_flock_slots(FlockSlots::owned());
    let d = Descriptions::new();
    let (f1, file) = temp_and_id();
    let path = format!("/proc/self/fd/{}", f1.as_raw_fd());
    let f2 = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // Two descriptions of one file, entered as a lock call through each would, and named.
    let flock = |f: &File, pid: i32, cmd: i32| {
        let ofd = d
            .acquire(&f.as_fd().try_clone_to_owned().unwrap(), file, me())
            .unwrap();
        let slots = locks.flock_slots().unwrap();
        slots.name(ofd, d.copy_of(ofd).unwrap());
        let mut open = open_file_of(f.as_raw_fd()).unwrap();
        open.ofd = ofd;
        let r = locks.flock(&Cred::root(pid), Some(&open), cmd, &WaitCtx::FOREVER);
        slots.unname(ofd);
        d.users_zero_for_test(ofd);
        (ofd, r)
    };
    // The first is leased the file (no lock held); the second becomes a member.
    let (o1, r) = flock(&f1, me(), LOCK_UN);
    r.unwrap();
    let (_, r) = flock(&f2, me() + 1, LOCK_EX | LOCK_NB | FLOCK_MAY_REDO);
    assert_eq!(r, Err(REDO));
    assert_eq!(locks.flock_slots().unwrap().holder(file), Some(o1));
    let scans = std::cell::Cell::new(0);
    let count = || scans.set(scans.get() + 1);
    // The member's last descriptor goes silently: it held nothing, so the sweep (of an exit)
    // looks for neither description (no scan of every process), and both stay members.
    drop(f2);
    assert!(!crate::lockserve::sweep(&locks, &d, Scope::All, &count));
    assert_eq!(scans.get(), 0);
    assert_eq!(d.len(), 2);
    // The first takes the lock, then its last descriptor goes: the sweep finds nobody holds
    // it and drops its lock.
    flock(&f1, me(), LOCK_EX).1.unwrap();
    drop(f1);
    assert!(crate::lockserve::sweep(&locks, &d, Scope::All, &count));
    assert_eq!(scans.get(), 1);
    assert!(!locks.owns_any(file, Owner::Description(o1)));
    assert!(locks.list_file(file).is_empty());
}

impl Descriptions {
    fn users_zero_for_test(&self, ofd: OfdId) {
        let mut t = self.table();
        for e in t.entries.iter_mut().filter(|e| e.ofd == ofd) {
            e.users = 0;
        }
    }

    fn witness_for_test(&self, ofd: OfdId) -> Option<(i32, RawFd)> {
        let t = self.table();
        t.entries
            .iter()
            .find(|e| e.ofd == ofd)
            .and_then(|e| e.witness)
    }
}

#[test]
fn searches_side_by_side_do_not_count_each_others_copies() {
    let _serial = serial();
    let d = std::sync::Arc::new(Descriptions::new());
    let (f, file) = temp_and_id();
    let id = entered(&d, &f, file, me());
    // Only the table's copy is left: every search, however many run at once, must find
    // nobody (a search's own copy of the description is the daemon's, not a reference).
    drop(f);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || {
                (0..50)
                    .filter(|_| d.referenced(Scope::All, &[]) != vec![(id, file, false)])
                    .count()
            })
        })
        .collect();
    let wrong: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        wrong, 0,
        "searches that saw another search's copy as a reference"
    );
}

#[test]
fn a_description_that_stopped_holding_during_the_search_is_kept_without_a_complete_scan() {
    let _serial = serial();
    let d = Descriptions::new();
    let (f, file) = temp_and_id();
    let id = entered(&d, &f, file, me());
    drop(f);
    // Only the table's copy is left. Asked once (it held a lock then) and not again (its
    // lock went while the search ran): nothing to drop, so it counts as referenced.
    let asks = std::cell::Cell::new(0);
    let held_once = |_: FileId, _: OfdId| {
        asks.set(asks.get() + 1);
        asks.get() == 1
    };
    let r = d.referenced_then(Scope::All, &[], &held_once, &|| {});
    assert_eq!(r, vec![(id, file, true)]);
    assert_eq!(asks.get(), 2);
    // Still holding when asked again: the complete scan finds nobody.
    let r = d.referenced_then(Scope::All, &[], &|_, _| true, &|| {});
    assert_eq!(r, vec![(id, file, false)]);
}
