//! Comparing lock state: `/proc/locks` lines of the test file, normalised, against the
//! engine's `proc_locks()` text and its `list()`.
//!
//! Host and engine processes have different pids, so every pid is replaced by the name of the
//! worker incarnation it belongs to (`p0`, `p1`, ...; [`Pids`]). The ordinal column is dropped
//! (`/proc/locks` prints locks in no defined order), and the lines are sorted, so the comparison
//! is order-independent but otherwise byte for byte: the kind, type, device, inode and range
//! columns keep their exact spacing. Blocked requests keep their `->` prefix (and with it their
//! depth), though not which lock they are numbered under.
//!
//! `list()` entries are rendered into the same line format ([`render_list`]). A lock keeps the
//! pid of the process that set it after that process has exited (a flock lock on a
//! description another worker still holds). In the initial pid namespace `/proc/locks` prints
//! that pid as it is; in a child pid namespace it leaves the lock out (the pid no longer
//! translates). The engine knows no pid namespaces, so when the run is in a child namespace
//! the comparison leaves such locks out of the engine's listings too ([`Pids::shown`]).

use uipc::locks::{FileId, LockInfo, LockKind, LockType, OFFSET_MAX};

/// The pids of every worker incarnation of the run, on both sides.
#[derive(Debug, Default)]
pub struct Pids {
    /// `(host pid, engine pid)`, by incarnation number.
    procs: Vec<(i32, i32)>,
    /// Which incarnations have exited.
    exited: Vec<bool>,
    /// Whether `/proc/locks` leaves out locks set by processes that no longer exist.
    hide_dead: bool,
}

/// Whether this process is in the initial pid namespace, whose `/proc/self/ns/pid` inode
/// number is fixed (`PROC_PID_INIT_INO`, 0xeffffffc).
pub fn in_initial_pid_namespace() -> bool {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|l| l.to_string_lossy() == "pid:[4026531836]")
        .unwrap_or(true)
}

impl Pids {
    /// No incarnations yet; `hide_dead`: see [`Pids::shown`].
    pub fn new(hide_dead: bool) -> Pids {
        Pids {
            hide_dead,
            ..Pids::default()
        }
    }

    /// Records a new incarnation; returns its number.
    pub fn add(&mut self, host: i32, engine: i32) -> usize {
        self.procs.push((host, engine));
        self.exited.push(false);
        self.procs.len() - 1
    }

    /// Marks incarnation `n` as exited.
    pub fn exit(&mut self, n: usize) {
        self.exited[n] = true;
    }

    /// An engine pid's name as `/proc/locks` would show it: `None` for an exited incarnation
    /// when the run is in a child pid namespace.
    pub fn shown(&self, pid: i32) -> Option<String> {
        let dead = self
            .procs
            .iter()
            .position(|p| p.1 == pid)
            .is_some_and(|n| self.exited[n]);
        (!(self.hide_dead && dead)).then(|| self.engine(pid))
    }

    /// How many incarnations there have been.
    pub fn count(&self) -> usize {
        self.procs.len()
    }

    fn name(&self, pid: i32, side: fn(&(i32, i32)) -> i32) -> String {
        if pid == -1 {
            return "-1".into();
        }
        match self.procs.iter().position(|p| side(p) == pid) {
            Some(n) => format!("p{n}"),
            None => format!("#{pid}"),
        }
    }

    /// A host pid's name. Pids of no worker are shown as `#pid` (such a value is echoed back
    /// unchanged by F_GETLK when nothing conflicts).
    pub fn host(&self, pid: i32) -> String {
        self.name(pid, |p| p.0)
    }

    /// An engine pid's name.
    pub fn engine(&self, pid: i32) -> String {
        self.name(pid, |p| p.1)
    }
}

/// Reads `/proc/locks` with one large read; returns the text and whether the kernel produced
/// it in one pass.
///
/// The kernel fills at most one page-sized buffer per `read`, ending it early before a record
/// that does not fit (a lock is one record with all of its waiters: another program's lock
/// with fifty blocked waiters is one 3 KiB record). The next `read` starts a new pass at the
/// next record's index, so a lock taken or dropped anywhere on the host in between shifts the
/// indices and a line of ours can be skipped or shown twice.
fn read_proc_locks() -> Result<(String, bool), String> {
    use std::io::Read;
    let mut file = std::fs::File::open("/proc/locks").map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut len, mut reads) = (0, 0);
    loop {
        let n = file.read(&mut buf[len..]).map_err(|e| e.to_string())?;
        if n == 0 || len + n == buf.len() {
            len += n;
            break;
        }
        len += n;
        reads += 1;
    }
    buf.truncate(len);
    let text = String::from_utf8(buf).map_err(|e| e.to_string())?;
    Ok((text, reads <= 1))
}

/// How many times a multi-pass read of `/proc/locks` is retried.
const PROC_LOCKS_TRIES: usize = 30;

/// The normalised `/proc/locks` lines of `files`. A read made in one pass of the kernel's
/// iteration is consistent and taken as it is; when other programs' locks make every read
/// take several passes, the result most reads agree on is taken.
pub fn host_lines(
    files: &[FileId],
    name: impl Fn(i32) -> Option<String>,
) -> Result<Vec<String>, String> {
    let mut seen: Vec<(Vec<String>, usize)> = Vec::new();
    for attempt in 0..PROC_LOCKS_TRIES {
        let (text, one_pass) = read_proc_locks()?;
        let lines: Vec<String> = files
            .iter()
            .flat_map(|&f| normalise_proc_locks(&text, &dev_ino(f), &name))
            .collect();
        if one_pass {
            return Ok(lines);
        }
        match seen.iter_mut().find(|(l, _)| *l == lines) {
            Some((_, n)) => *n += 1,
            None => seen.push((lines, 1)),
        }
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }
    let best = seen.into_iter().max_by_key(|(_, n)| *n).map(|(l, _)| l);
    Ok(best.unwrap_or_default())
}

/// The `major:minor:inode` column of `file`, as `/proc/locks` prints it.
pub fn dev_ino(file: FileId) -> String {
    format!("{:02x}:{:02x}:{}", file.major(), file.minor(), file.ino)
}

/// The lines of `/proc/locks` text that are about the file `dev_ino`, without their ordinal,
/// with pids named by `name` (lines it gives no name are left out), sorted. A line that cannot
/// be parsed is kept whole.
pub fn normalise_proc_locks(
    text: &str,
    dev_ino: &str,
    name: impl Fn(i32) -> Option<String>,
) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let mut words: Vec<&str> = line.split(' ').collect();
            let at = words.iter().position(|w| *w == dev_ino)?;
            let Some((_, rest)) = line.split_once(": ") else {
                return Some(line.to_string());
            };
            let pid = (at > 0)
                .then(|| words[at - 1].parse::<i32>().ok())
                .flatten();
            let Some(pid) = pid else {
                return Some(line.to_string());
            };
            let named = name(pid)?;
            words[at - 1] = &named;
            let skip = line.len() - rest.len();
            Some(words.join(" ")[skip..].to_string())
        })
        .collect();
    lines.sort();
    lines
}

/// The engine's `list()` entries for `file`, rendered as normalised `/proc/locks` lines
/// (see the module doc), sorted, pids named by `name` (entries it gives no name are left out).
pub fn render_list(
    list: &[LockInfo],
    file: FileId,
    name: impl Fn(i32) -> Option<String>,
) -> Vec<String> {
    let column = dev_ino(file);
    let mut lines: Vec<String> = list
        .iter()
        .filter(|info| info.file == file)
        .filter_map(|info| {
            let mut depth = 0;
            let mut at = info;
            while let Some(behind) = at.blocked_behind {
                depth += 1;
                at = list.get(behind)?;
                if depth > list.len() {
                    break;
                }
            }
            let pid = match info.kind {
                LockKind::Ofd => "-1".to_string(),
                _ => name(info.pid)?,
            };
            let arrow = if depth == 0 {
                String::new()
            } else {
                format!("{:>width$}", "-> ", width = depth - 1 + 3)
            };
            let kind = match info.kind {
                LockKind::Posix => "POSIX  ADVISORY  ",
                LockKind::Ofd => "OFDLCK ADVISORY  ",
                LockKind::Flock => "FLOCK  ADVISORY  ",
            };
            let ty = match info.ty {
                LockType::Read => "READ ",
                LockType::Write => "WRITE ",
            };
            let range = match (info.kind, info.end) {
                (LockKind::Flock, _) => "0 EOF".to_string(),
                (_, OFFSET_MAX) => format!("{} EOF", info.start),
                (_, end) => format!("{} {end}", info.start),
            };
            Some(format!("{arrow}{kind}{ty}{pid} {column} {range}"))
        })
        .collect();
    lines.sort();
    lines
}

/// The lines only in `a` and the lines only in `b`, counting repeated lines (both sorted).
pub fn difference(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut only_a, mut only_b) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => (i, j) = (i + 1, j + 1),
            (Some(x), Some(y)) if x < y => {
                only_a.push(x.clone());
                i += 1;
            }
            (Some(x), None) => {
                only_a.push(x.clone());
                i += 1;
            }
            (_, Some(y)) => {
                only_b.push(y.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    (only_a, only_b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uipc::locks::{OfdId, Owner};

    const FILE: FileId = FileId { dev: 0x1b, ino: 2 };

    fn named(pid: i32) -> Option<String> {
        (pid != 666).then(|| format!("n{pid}"))
    }

    #[test]
    fn proc_locks_lines_keep_only_the_file_drop_ordinals_name_pids_and_sort() {
        let text = "1: POSIX  ADVISORY  WRITE 6660 00:1b:2 0 9\n\
                    2: FLOCK  ADVISORY  READ 12 00:1b:20 0 EOF\n\
                    3: OFDLCK ADVISORY  READ -1 00:1b:2 20 EOF\n\
                    3: -> OFDLCK ADVISORY  WRITE -1 00:1b:2 20 20\n\
                    3:  -> POSIX  ADVISORY  WRITE 7 00:1b:2 20 20\n";
        assert_eq!(
            normalise_proc_locks(text, &dev_ino(FILE), named),
            vec![
                " -> POSIX  ADVISORY  WRITE n7 00:1b:2 20 20",
                "-> OFDLCK ADVISORY  WRITE n-1 00:1b:2 20 20",
                "OFDLCK ADVISORY  READ n-1 00:1b:2 20 EOF",
                "POSIX  ADVISORY  WRITE n6660 00:1b:2 0 9",
            ]
        );
    }

    fn info(kind: LockKind, ty: LockType, pid: i32, start: i64, end: i64) -> LockInfo {
        LockInfo {
            file: FILE,
            kind,
            ty,
            owner: Owner::Description(OfdId(1)),
            pid,
            start,
            end,
            blocked_behind: None,
        }
    }

    #[test]
    fn listing_renders_as_proc_locks_lines_with_depth_only_its_file_only_named_pids() {
        let mut waiter = info(LockKind::Posix, LockType::Write, 8, 0, 4);
        waiter.blocked_behind = Some(0);
        let mut deeper = info(LockKind::Posix, LockType::Write, 9, 2, 3);
        deeper.blocked_behind = Some(1);
        let mut elsewhere = info(LockKind::Posix, LockType::Write, 9, 2, 3);
        elsewhere.file.ino = 3;
        let list = vec![
            info(LockKind::Posix, LockType::Write, 7, 0, OFFSET_MAX),
            waiter,
            deeper,
            info(LockKind::Ofd, LockType::Read, 7, 5, 5),
            info(LockKind::Flock, LockType::Read, 7, 0, OFFSET_MAX),
            info(LockKind::Flock, LockType::Write, 666, 0, OFFSET_MAX),
            elsewhere,
        ];
        let lines = render_list(&list, FILE, named);
        assert_eq!(
            lines,
            vec![
                " -> POSIX  ADVISORY  WRITE n9 00:1b:2 2 3",
                "-> POSIX  ADVISORY  WRITE n8 00:1b:2 0 4",
                "FLOCK  ADVISORY  READ n7 00:1b:2 0 EOF",
                "OFDLCK ADVISORY  READ -1 00:1b:2 5 5",
                "POSIX  ADVISORY  WRITE n7 00:1b:2 0 EOF",
            ]
        );
    }

    #[test]
    fn difference_of_sorted_lines_counts_repeats() {
        let v = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        let (a, b) = difference(&v(&["a", "b", "b", "d"]), &v(&["b", "c", "d", "e"]));
        assert_eq!((a, b), (v(&["a", "b"]), v(&["c", "e"])));
        assert_eq!(difference(&v(&["x"]), &v(&["x"])), (v(&[]), v(&[])));
    }

    #[test]
    fn pids_name_incarnations_the_same_on_both_sides_and_hide_exited_ones_on_request() {
        let mut pids = Pids::new(true);
        assert_eq!(pids.add(4000, 100), 0);
        assert_eq!(pids.add(4001, 101), 1);
        pids.exit(0);
        assert_eq!(pids.shown(100), None);
        assert_eq!(pids.shown(101), Some("p1".into()));
        assert_eq!(pids.shown(-1), Some("-1".into()));
        assert_eq!(Pids::new(false).shown(100), Some("#100".into()));
        assert_eq!(pids.host(4001), "p1");
        assert_eq!(pids.engine(101), "p1");
        assert_eq!(pids.engine(100), "p0");
        assert_eq!(pids.host(100), "#100");
        assert_eq!(pids.host(-1), "-1");
        assert_eq!(pids.host(55), "#55");
    }
}
