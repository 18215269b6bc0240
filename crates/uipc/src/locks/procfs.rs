//! Listings: `/proc/locks` (§7), byte-identical in format, and the same data structured.
//!
//! Each held lock gets the next ordinal; each blocked request follows the held lock it waits
//! behind (its first conflict) as a `-> ` line with that lock's ordinal. The kernel nests a
//! waiter under another waiter when they conflict (its waiter tree), which prints deeper
//! ` -> ` lines; uipc grants waiters directly (see `file.rs`), keeps no such tree, and prints
//! every waiter at depth 1. Line order is unspecified on Linux too (per-CPU lists); here it is
//! file by file, POSIX/OFD list then flock list.
//!
//! Each file is read under its own mutex, one at a time: like Linux's, the listing is not a
//! snapshot of all files at one instant.

use super::file::{FileState, Held, Request};
use super::types::{FileId, LockInfo, LockKind, LockType, OFFSET_MAX};
use std::fmt::Write as _;

/// Appends one file's locks to `out`, numbering held locks from `out.len()`.
pub(crate) fn list_file(file: FileId, st: &FileState, out: &mut Vec<LockInfo>) {
    let info = |h: &Held, behind: Option<usize>| LockInfo {
        file,
        kind: h.kind,
        ty: h.ty,
        owner: h.owner,
        pid: h.pid,
        start: h.start,
        end: h.end,
        blocked_behind: behind,
    };
    for list in [&st.posix, &st.flocks] {
        for held in list.iter() {
            let at = out.len();
            out.push(info(held, None));
            for b in &st.blocked {
                let r: &Request = &b.req;
                let Some(ty) = r.ty else { continue };
                if st.first_conflict(r) == Some(held) {
                    let as_held = Held {
                        kind: r.kind,
                        owner: r.owner,
                        pid: r.pid,
                        ty,
                        start: r.start,
                        end: r.end,
                    };
                    out.push(info(&as_held, Some(at)));
                }
            }
        }
    }
}

/// Renders a listing in `/proc/locks` format.
pub(crate) fn render(locks: &[LockInfo]) -> String {
    let mut s = String::new();
    let mut ordinal = 0;
    for l in locks {
        if l.blocked_behind.is_none() {
            ordinal += 1;
            let _ = write!(s, "{ordinal}: ");
        } else {
            let _ = write!(s, "{ordinal}: -> ");
        }
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
    s
}
