//! POSIX and OFD record locks: ranges, split and merge, F_GETLK answers, errnos in Linux's
//! order, and close/exit semantics (reference §6.2-§6.6, §6.10). Expected values are the ones
//! observed on Linux in the reference.

mod common;

use uipc::locks::*;
use uipc::{Cred, Errno, Tgid, WaitCtx};

const FILE: FileId = FileId {
    dev: 0xfe00,
    ino: 42,
};

fn fd(ofd: u64) -> OpenFile {
    common::rw_open(FILE, ofd, 1000)
}

fn set(
    m: &LockManager,
    pid: i32,
    f: &OpenFile,
    cmd: i32,
    ty: i16,
    start: i64,
    len: i64,
) -> Result<(), Errno> {
    m.fcntl(
        &Cred::root(pid),
        Some(f),
        cmd,
        &mut Flock::new(ty, start, len),
        &WaitCtx::FOREVER,
    )
}

/// F_SETLK by `pid` through description 1 of the file.
fn setlk(m: &LockManager, pid: i32, ty: i16, start: i64, len: i64) -> Result<(), Errno> {
    set(m, pid, &fd(1), F_SETLK, ty, start, len)
}

/// The answer to `cmd` (F_GETLK or F_OFD_GETLK) by `pid` through `f`, asking for `ty` over the
/// whole file.
fn getlk(m: &LockManager, pid: i32, f: &OpenFile, cmd: i32, ty: i16) -> Flock {
    let mut fl = Flock::new(ty, 0, 0);
    m.fcntl(&Cred::root(pid), Some(f), cmd, &mut fl, &WaitCtx::FOREVER)
        .unwrap();
    fl
}

/// Asserts that each request (pid, description, command, type, start, len) fails with `err`.
fn refused(m: &LockManager, err: Errno, requests: &[(i32, &OpenFile, i32, i16, i64, i64)]) {
    for &(pid, f, cmd, ty, start, len) in requests {
        let got = set(m, pid, f, cmd, ty, start, len);
        assert_eq!(
            got,
            Err(err),
            "pid {pid} ofd {:?} cmd {cmd} type {ty} {start}+{len}",
            f.ofd
        );
    }
}

/// (type, start, end) of each lock of the file, in list order.
fn ranges(m: &LockManager) -> Vec<(LockType, i64, i64)> {
    m.list_file(FILE)
        .iter()
        .map(|l| (l.ty, l.start, l.end))
        .collect()
}

use LockType::{Read as R, Write as W};

#[test]
fn same_type_neighbours_merge_and_a_retype_in_the_middle_splits_in_three() {
    let m = LockManager::new();
    setlk(&m, 10, F_RDLCK, 0, 10).unwrap();
    setlk(&m, 10, F_RDLCK, 10, 10).unwrap();
    assert_eq!(ranges(&m), vec![(R, 0, 19)]);
    setlk(&m, 10, F_WRLCK, 0, 100).unwrap();
    setlk(&m, 10, F_RDLCK, 10, 5).unwrap();
    assert_eq!(ranges(&m), vec![(W, 0, 9), (R, 10, 14), (W, 15, 99)]);
}

#[test]
fn unlocking_a_middle_part_splits_and_relocking_merges_back() {
    let m = LockManager::new();
    setlk(&m, 10, F_WRLCK, 0, 100).unwrap();
    setlk(&m, 10, F_UNLCK, 40, 20).unwrap();
    assert_eq!(ranges(&m), vec![(W, 0, 39), (W, 60, 99)]);
    setlk(&m, 10, F_WRLCK, 40, 20).unwrap();
    assert_eq!(ranges(&m), vec![(W, 0, 99)]);
    setlk(&m, 10, F_UNLCK, 500, 5).unwrap();
    setlk(&m, 11, F_UNLCK, 0, 0).unwrap();
    assert_eq!(
        ranges(&m),
        vec![(W, 0, 99)],
        "unlocking nothing, or another's range, is 0"
    );
}

#[test]
fn conflicts_need_another_owner_overlap_and_a_write() {
    let m = LockManager::new();
    setlk(&m, 10, F_RDLCK, 0, 10).unwrap();
    setlk(&m, 11, F_RDLCK, 5, 10).unwrap();
    assert_eq!(setlk(&m, 11, F_WRLCK, 0, 1), Err(Errno::EAGAIN));
    setlk(&m, 11, F_WRLCK, 10, 5).unwrap();
    setlk(&m, 10, F_WRLCK, 0, 5).unwrap();
    assert_eq!(setlk(&m, 12, F_RDLCK, 0, 1), Err(Errno::EAGAIN));
    // The same process through another description is the same POSIX owner: it unlocks them.
    set(&m, 10, &fd(2), F_SETLK, F_UNLCK, 0, 0).unwrap();
    setlk(&m, 12, F_WRLCK, 0, 5).unwrap();
}

#[test]
fn getlk_reports_the_first_conflict_with_pid_and_eof_length() {
    let m = LockManager::new();
    let f = fd(1);
    set(&m, 10, &f, F_SETLK, F_WRLCK, 100, 0).unwrap();
    let fl = getlk(&m, 11, &f, F_GETLK, F_RDLCK);
    assert_eq!(
        (fl.l_type, fl.l_whence, fl.l_start, fl.l_len, fl.l_pid),
        (F_WRLCK, SEEK_SET, 100, 0, 10)
    );
    let mut probe = Flock::new(F_RDLCK, 0, 50);
    probe.l_pid = 77;
    m.fcntl(
        &Cred::root(11),
        Some(&f),
        F_GETLK,
        &mut probe,
        &WaitCtx::FOREVER,
    )
    .unwrap();
    assert_eq!(
        (probe.l_type, probe.l_start, probe.l_len, probe.l_pid),
        (F_UNLCK, 0, 50, 77),
        "untouched but l_type"
    );
    let own = getlk(&m, 10, &f, F_GETLK, F_WRLCK);
    assert_eq!(own.l_type, F_UNLCK, "an owner's own locks never conflict");
}

#[test]
fn ofd_locks_conflict_with_posix_locks_and_report_pid_minus_one() {
    let m = LockManager::new();
    let (a, b) = (fd(1), fd(2));
    set(&m, 10, &a, F_OFD_SETLK, F_WRLCK, 5, 10).unwrap();
    let requests = [
        (10, &a, F_SETLK, F_RDLCK, 0, 6), // POSIX against OFD of the same process
        (10, &b, F_OFD_SETLK, F_RDLCK, 0, 6),
    ];
    refused(&m, Errno::EAGAIN, &requests);
    let fl = getlk(&m, 10, &b, F_GETLK, F_RDLCK);
    assert_eq!(
        (fl.l_type, fl.l_start, fl.l_len, fl.l_pid),
        (F_WRLCK, 5, 10, -1)
    );
    // F_OFD_GETLK with F_UNLCK reports the description's own overlapping lock.
    let fl = getlk(&m, 10, &a, F_OFD_GETLK, F_UNLCK);
    assert_eq!(
        (fl.l_type, fl.l_start, fl.l_len, fl.l_pid),
        (F_WRLCK, 5, 10, -1)
    );
    assert_eq!(getlk(&m, 10, &b, F_OFD_GETLK, F_UNLCK).l_type, F_UNLCK);
}

#[test]
fn errnos_come_in_linux_order() {
    let m = LockManager::new();
    let me = Cred::root(10);
    let w = &WaitCtx::FOREVER;
    let run = |f: Option<&OpenFile>, cmd: i32, mut fl: Flock| m.fcntl(&me, f, cmd, &mut fl, w);
    let f = fd(1);
    let fl = |ty: i16, whence: i16, start: i64, len: i64, pid: i32| Flock {
        l_type: ty,
        l_whence: whence,
        l_start: start,
        l_len: len,
        l_pid: pid,
    };
    let ro = OpenFile {
        writable: false,
        ..f
    };
    let wo = OpenFile {
        readable: false,
        ..f
    };
    let (rw, ro, wo) = (Some(&f), Some(&ro), Some(&wo));
    let (ebadf, einval) = (Err(Errno::EBADF), Err(Errno::EINVAL));
    let eoverflow = Err(Errno::EOVERFLOW);
    // (description, command, request, result), in the order Linux checks them.
    let cases = [
        // The descriptor first, then the command.
        (None, 99, fl(9, 9, -1, 0, 0), ebadf),
        (rw, 99, Flock::default(), einval),
        // The range before the type, except for GETLK.
        (rw, F_SETLK, fl(9, SEEK_SET, OFFSET_MAX, 2, 0), eoverflow),
        (rw, F_SETLK, fl(9, SEEK_SET, 0, 1, 0), einval),
        (rw, F_GETLK, fl(F_UNLCK, SEEK_SET, OFFSET_MAX, 2, 0), einval),
        (rw, F_SETLK, fl(F_RDLCK, 7, 0, 1, 0), einval),
        (rw, F_SETLK, fl(F_RDLCK, SEEK_SET, -1, 1, 0), einval),
        // The open mode, which an unlock and GETLK do not need.
        (ro, F_SETLK, Flock::new(F_WRLCK, 0, 1), ebadf),
        (wo, F_SETLK, Flock::new(F_RDLCK, 0, 1), ebadf),
        (ro, F_SETLK, Flock::new(F_UNLCK, 0, 1), Ok(())),
        (ro, F_GETLK, Flock::new(F_WRLCK, 0, 1), Ok(())),
        // The mode before an OFD command's l_pid, which must be 0.
        (ro, F_OFD_SETLK, fl(F_WRLCK, 0, 0, 1, 5), ebadf),
        (rw, F_OFD_SETLK, fl(F_WRLCK, 0, 0, 1, 5), einval),
        (rw, F_OFD_GETLK, fl(F_WRLCK, 0, 0, 1, -1), einval),
        (rw, F_OFD_GETLK, fl(3, 0, 0, 1, 0), einval),
    ];
    for (i, (file, cmd, req, want)) in cases.into_iter().enumerate() {
        assert_eq!(run(file, cmd, req), want, "case {i}: cmd {cmd} {req:?}");
    }
}

#[test]
fn enolck_when_the_per_file_limit_is_reached_and_nothing_is_lost() {
    let m = LockManager::with_config(LockConfig {
        max_locks_per_file: 2,
        ..LockConfig::default()
    });
    let f = fd(1);
    set(&m, 10, &f, F_SETLK, F_WRLCK, 0, 100).unwrap();
    set(&m, 11, &f, F_SETLK, F_WRLCK, 200, 100).unwrap();
    let requests = [
        (10, &f, F_SETLK, F_UNLCK, 40, 10), // a split needs a record
        (12, &f, F_SETLK, F_WRLCK, 500, 1),
    ];
    refused(&m, Errno::ENOLCK, &requests);
    assert_eq!(ranges(&m), vec![(W, 0, 99), (W, 200, 299)]);
    set(&m, 10, &f, F_SETLK, F_WRLCK, 100, 50).unwrap();
    assert_eq!(
        ranges(&m),
        vec![(W, 0, 149), (W, 200, 299)],
        "a merge needs none"
    );
}

#[test]
fn any_close_drops_the_processs_posix_locks_and_the_last_close_the_descriptions() {
    let m = LockManager::new();
    let (a, b) = (fd(1), fd(2));
    set(&m, 10, &a, F_SETLK, F_WRLCK, 0, 10).unwrap();
    set(&m, 11, &b, F_OFD_SETLK, F_WRLCK, 20, 10).unwrap();
    m.flock(&Cred::root(11), Some(&b), LOCK_EX, &WaitCtx::FOREVER)
        .unwrap();
    // Process 10 closes an unrelated second descriptor of the file: its locks go.
    m.close(Tgid::new(10), FILE, OfdId(3), false);
    assert_eq!(m.list_file(FILE).len(), 2);
    m.close(Tgid::new(11), FILE, OfdId(2), false);
    assert_eq!(
        m.list_file(FILE).len(),
        2,
        "not the last reference: OFD and flock stay"
    );
    m.close(Tgid::new(11), FILE, OfdId(2), true);
    assert!(m.list_file(FILE).is_empty());
}

#[test]
fn exit_drops_every_posix_lock_of_the_process_on_every_file() {
    let m = LockManager::new();
    let other = common::rw_open(FileId { dev: 1, ino: 2 }, 9, 1000);
    set(&m, 10, &fd(1), F_SETLK, F_WRLCK, 0, 10).unwrap();
    set(&m, 10, &other, F_SETLK, F_RDLCK, 0, 10).unwrap();
    set(&m, 11, &other, F_SETLK, F_RDLCK, 0, 10).unwrap();
    m.process_exit(Tgid::new(10));
    let left: Vec<_> = m.list().iter().map(|l| l.owner).collect();
    assert_eq!(left, vec![Owner::Process(Tgid::new(11))]);
}

#[test]
fn seek_cur_and_seek_end_use_the_callers_offset_and_size() {
    let m = LockManager::new();
    let f = OpenFile {
        offset: 300,
        size: 1000,
        ..fd(1)
    };
    for (whence, start, len) in [(SEEK_CUR, -100, 10), (SEEK_END, 0, -10)] {
        let mut fl = Flock {
            l_whence: whence,
            ..Flock::new(F_WRLCK, start, len)
        };
        let me = Cred::root(1);
        m.fcntl(&me, Some(&f), F_SETLK, &mut fl, &WaitCtx::FOREVER)
            .unwrap();
    }
    assert_eq!(ranges(&m), vec![(W, 200, 209), (W, 990, 999)]);
}

#[test]
fn proc_locks_lines_match_the_kernel_format() {
    let m = LockManager::new();
    let f = common::rw_open(FileId { dev: 0x1b, ino: 3 }, 1, 1000);
    let g = OpenFile { ofd: OfdId(2), ..f };
    m.flock(&Cred::root(7552), Some(&f), LOCK_SH, &WaitCtx::FOREVER)
        .unwrap();
    set(&m, 7552, &g, F_OFD_SETLK, F_WRLCK, 20, 10).unwrap();
    set(&m, 7552, &f, F_SETLK, F_RDLCK, 0, 10).unwrap();
    set(&m, 7552, &f, F_SETLK, F_WRLCK, 100, 0).unwrap();
    let text = m.proc_locks();
    // Lines as a 6.x host printed them for the same locks (order differs, numbering follows it).
    let mut lines: Vec<&str> = text
        .lines()
        .map(|l| l.split_once(": ").unwrap().1)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "FLOCK  ADVISORY  READ 7552 00:1b:3 0 EOF",
            "OFDLCK ADVISORY  WRITE -1 00:1b:3 20 29",
            "POSIX  ADVISORY  READ 7552 00:1b:3 0 9",
            "POSIX  ADVISORY  WRITE 7552 00:1b:3 100 EOF",
        ]
    );
    assert!(text.starts_with("1: ") && text.contains("\n4: "));
}
