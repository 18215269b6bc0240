//! `uipc locks`: util-linux lslocks's default listing of the file locks a uipc daemon holds
//! (the locks taken by programs under `uipc run --locks`, which the host's `/proc/locks` never
//! sees).
//!
//! The daemon is the one at `--socket`, else `$UIPC_SOCKET`, else the default socket. The
//! columns are lslocks's default ones, in its order and alignment: COMMAND (`/proc/PID/comm`),
//! PID, TYPE (POSIX, OFDLCK, FLOCK), SIZE (the file's size, 1-letter binary suffixes, empty
//! for 0), MODE (READ or WRITE, with `*` for a request still waiting), M (0: mandatory locking
//! is gone), START, END (0 for "to EOF") and PATH (the first descriptor of the holder that
//! names the file, from `/proc/PID/fd`; empty if none does).
//!
//! ## Differences from lslocks
//! - Column widths are each column's widest cell; lslocks (libsmartcols) also spreads spare
//!   terminal width over some columns, so spacing may differ, never the cells.
//! - OFD locks show the pid and command of the process that set the lock; lslocks reads
//!   `/proc/locks`, where the pid of an OFD lock is -1.
//! - Only `-p/--pid` and `-n/--noheadings`; no `-o`, `-J`, `-r`, `-b`, `-u`.

use crate::ipcs::{call, connect, human, socket};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use uipc::locks::{F_RDLCK, OFFSET_MAX};
use uipc_proto::{LockLine, LockRequest, LockResponse, Request, Response};

fn command_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The path of a descriptor of `pid` on the file (dev, ino), and the file's size.
fn path_of(pid: i32, dev: u64, ino: u64) -> (String, u64) {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (String::new(), 0);
    };
    let mut fds: Vec<(i32, PathBuf)> = fds
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    fds.sort();
    for (_, link) in fds {
        let Ok(st) = std::fs::metadata(&link) else {
            continue;
        };
        if st.dev() == dev && st.ino() == ino {
            let path = std::fs::read_link(&link)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            return (path, st.size());
        }
    }
    (String::new(), 0)
}

/// util-linux's `size_to_human_string` with one-letter suffixes (`ipcs`'s [`human`]), empty
/// for 0 as lslocks prints it.
pub fn human_size(bytes: u64) -> String {
    if bytes == 0 {
        return String::new();
    }
    human(bytes)
}

/// One listing line's cells.
pub fn cells(l: &LockLine, command: String, size: u64, path: String) -> [String; 9] {
    let kind = match l.kind {
        0 => "POSIX",
        1 => "OFDLCK",
        _ => "FLOCK",
    };
    let mut mode = if l.l_type == F_RDLCK { "READ" } else { "WRITE" }.to_string();
    if l.blocked_behind.is_some() {
        mode.push('*');
    }
    let end = if l.end == OFFSET_MAX { 0 } else { l.end };
    [
        command,
        l.pid.to_string(),
        kind.to_string(),
        human_size(size),
        mode,
        "0".to_string(),
        l.start.to_string(),
        end.to_string(),
        path,
    ]
}

/// Lays out rows under lslocks's headers: right-aligned numbers, left-aligned text, the last
/// column unpadded.
pub fn render(rows: &[[String; 9]], headings: bool) -> String {
    const HEAD: [&str; 9] = [
        "COMMAND", "PID", "TYPE", "SIZE", "MODE", "M", "START", "END", "PATH",
    ];
    const RIGHT: [bool; 9] = [false, true, true, true, false, true, true, true, false];
    let head: [String; 9] = HEAD.map(String::from);
    let mut all: Vec<&[String; 9]> = Vec::new();
    if headings {
        all.push(&head);
    }
    all.extend(rows.iter());
    let mut width = [0usize; 9];
    for r in &all {
        for (w, c) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in all {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            let pad = width[i] - c.chars().count();
            if RIGHT[i] {
                line.push_str(&" ".repeat(pad));
                line.push_str(c);
            } else if i == 8 {
                line.push_str(c);
            } else {
                line.push_str(c);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Prints the daemon's locks (all, or those of `pid`).
pub fn locks(explicit: Option<PathBuf>, pid: Option<i32>, headings: bool) -> ExitCode {
    let path = socket(explicit);
    let listing = connect(&path).and_then(|c| call(&c, Request::Lock(LockRequest::List)));
    let lines = match listing {
        Ok(Response::Lock(LockResponse::List(lines))) => lines,
        Ok(Response::Error(e)) => {
            eprintln!(
                "uipc locks: the daemon refused: {}",
                std::io::Error::from_raw_os_error(e)
            );
            return ExitCode::FAILURE;
        }
        Ok(other) => {
            eprintln!("uipc locks: unexpected answer {other:?}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("uipc locks: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows: Vec<[String; 9]> = lines
        .iter()
        .filter(|l| pid.is_none_or(|p| p == l.pid))
        .map(|l| {
            let (p, size) = path_of(l.pid, l.dev, l.ino);
            cells(l, command_of(l.pid), size, p)
        })
        .collect();
    print!("{}", render(&rows, headings));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_util_linux_prints_them() {
        let cases = [
            (0, ""),
            (100, "100B"),
            (1023, "1023B"),
            (1024, "1K"),
            (1536, "1.5K"),
            (4 << 20, "4M"),
        ];
        for (bytes, shown) in cases {
            assert_eq!(human_size(bytes), shown, "{bytes} bytes");
        }
    }

    #[test]
    fn rows_align_as_lslocks_aligns_them() {
        let l = LockLine {
            kind: 0,
            l_type: 1,
            pid: 4840,
            dev: 0,
            ino: 0,
            start: 5,
            end: 14,
            blocked_behind: None,
        };
        let f = LockLine {
            kind: 2,
            l_type: 0,
            pid: 17,
            end: OFFSET_MAX,
            start: 0,
            blocked_behind: Some(0),
            ..l.clone()
        };
        let rows = [
            cells(&l, "python3".into(), 100, "/tmp/lk2".into()),
            cells(&f, "flock".into(), 0, "/tmp/lk1".into()),
        ];
        assert_eq!(
            render(&rows, true),
            "COMMAND  PID  TYPE SIZE MODE  M START END PATH\n\
             python3 4840 POSIX 100B WRITE 0     5  14 /tmp/lk2\n\
             flock     17 FLOCK      READ* 0     0   0 /tmp/lk1\n"
        );
    }
}
