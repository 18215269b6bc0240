//! Listings: `/proc/locks` (§7), byte-identical in format, the same data structured, and the
//! `lock:` lines of `/proc/PID/fdinfo/FD`.
//!
//! Each held lock gets the next ordinal; the requests blocked in its subtree of Linux's waiter
//! tree (`FileState::waiter_tree`) follow it with the same ordinal, depth first, each line
//! indented one more space per level (`-> `, ` -> `, ...). Line order between held locks is
//! unspecified on Linux too (per-CPU lists); here it is file by file, POSIX/OFD list then flock
//! list.
//!
//! Each file is read under its own mutex, one at a time: like Linux's, the listing is not a
//! snapshot of all files at one instant.

use super::file::{FileState, Held, Parent, Request};
use super::types::{FileId, LockInfo, LockKind, LockType, Owner, OFFSET_MAX};
use std::fmt::Write as _;

/// Appends one file's locks to `out`: each held lock (POSIX/OFD list, then flock list), then
/// the requests of its subtree in the waiter tree, depth first, oldest child first (the order
/// `/proc/locks` prints them in).
pub(crate) fn list_file(file: FileId, st: &FileState, out: &mut Vec<LockInfo>) {
    let info = |h: &Held, behind: Option<usize>| LockInfo {
        file,
        kind: h.kind,
        ty: h.ty,
        owner: h.owner,
        pid: h.pid.get(),
        start: h.start,
        end: h.end,
        blocked_behind: behind,
    };
    let tree = st.waiter_tree();
    let no_children = Vec::new();
    for (flock, list) in [(false, &st.posix), (true, &st.flocks)] {
        for (index, held) in list.iter().enumerate() {
            out.push(info(held, None));
            // An explicit stack (node, its line in `out`, next child to visit): the tree can
            // be as deep as there are waiters.
            let mut stack = vec![(Parent::Held { flock, index }, out.len() - 1, 0)];
            while let Some(top) = stack.last_mut() {
                let (node, line, next) = *top;
                let children = tree.children.get(&node).unwrap_or(&no_children);
                let Some(&j) = children.get(next) else {
                    stack.pop();
                    continue;
                };
                top.2 += 1;
                let r: &Request = &st.blocked[j].req;
                let as_held = Held {
                    kind: r.kind,
                    owner: r.owner,
                    pid: r.pid,
                    ty: r.ty.unwrap_or(LockType::Read),
                    start: r.start,
                    end: r.end,
                };
                out.push(info(&as_held, Some(line)));
                stack.push((Parent::Waiting(j), out.len() - 1, 0));
            }
        }
    }
}

/// How many `blocked_behind` links lead from `l` to a held lock.
fn depth(locks: &[LockInfo], l: &LockInfo) -> usize {
    let mut d = 0;
    let mut at = l.blocked_behind;
    while let Some(i) = at {
        d += 1;
        at = locks.get(i).and_then(|p| p.blocked_behind);
    }
    d
}

/// Renders a listing in `/proc/locks` format.
pub(crate) fn render(locks: &[LockInfo]) -> String {
    let mut s = String::new();
    let mut ordinal = 0;
    for l in locks {
        match depth(locks, l) {
            0 => {
                ordinal += 1;
                let _ = write!(s, "{ordinal}: ");
            }
            // Linux: "%*s" of "-> " in a field of depth - 1 + 3 characters.
            d => {
                let _ = write!(s, "{ordinal}: {:>width$}", "-> ", width = d + 2);
            }
        }
        body(&mut s, l);
    }
    s
}

/// One lock's line after its ordinal (kind, type, pid, file, range), as Linux's
/// `lock_get_status` prints it.
fn body(s: &mut String, l: &LockInfo) {
    s.push_str(match l.kind {
        LockKind::Posix => "POSIX  ADVISORY  ",
        LockKind::Ofd => "OFDLCK ADVISORY  ",
        LockKind::Flock => "FLOCK  ADVISORY  ",
    });
    s.push_str(match l.ty {
        LockType::Write => "WRITE ",
        LockType::Read => "READ ",
    });
    let pid = if l.kind == LockKind::Ofd { -1 } else { l.pid };
    let _ = write!(
        s,
        "{pid} {:02x}:{:02x}:{} ",
        l.file.major(),
        l.file.minor(),
        l.file.ino
    );
    if l.kind == LockKind::Flock || l.end == OFFSET_MAX {
        let start = if l.kind == LockKind::Flock {
            0
        } else {
            l.start
        };
        let _ = writeln!(s, "{start} EOF");
    } else {
        let _ = writeln!(s, "{} {}", l.start, l.end);
    }
}

/// The `lock:` lines of `/proc/PID/fdinfo/FD`: the held locks (no blocked requests) of
/// `locks` (one file's listing) that `process` or description `ofd` owns, flock locks first,
/// then the POSIX/OFD list, numbered from 1, as Linux's `show_fd_locks` prints them.
pub(crate) fn render_fdinfo(locks: &[LockInfo], process: Owner, ofd: Option<Owner>) -> String {
    let mine =
        |l: &&LockInfo| l.blocked_behind.is_none() && (l.owner == process || Some(l.owner) == ofd);
    let flocks = locks
        .iter()
        .filter(mine)
        .filter(|l| l.kind == LockKind::Flock);
    let others = locks
        .iter()
        .filter(mine)
        .filter(|l| l.kind != LockKind::Flock);
    let mut s = String::new();
    for (i, l) in flocks.chain(others).enumerate() {
        let _ = write!(s, "lock:\t{}: ", i + 1);
        body(&mut s, l);
    }
    s
}
