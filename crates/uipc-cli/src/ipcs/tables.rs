//! The listings, one line per object: the default columns, `-c` (creators and owners), `-t`
//! (times) and `-p` (pids), each with util-linux's title, header and column widths.

use super::fmt::{self, owner, size, time_col, Format, Unit};
use uipc::ipc::consts::{SHM_DEST, SHM_LOCKED};
use uipc::ipc::msg::MsqidDs;
use uipc::ipc::sem::SemidDs;
use uipc::ipc::shm::ShmidDs;
use uipc::ipc::IpcPermStat;

/// `-c`'s line: id, perms, then creator and owner by name (uncut) or number.
fn creator_line(id: i32, p: &IpcPermStat) -> String {
    let user = |u: u32| fmt::user(u).unwrap_or_else(|| u.to_string());
    let group = |g: u32| fmt::group(g).unwrap_or_else(|| g.to_string());
    format!(
        "{id:<10} {:<10o} {:<10} {:<10} {:<10} {:<10}\n",
        p.mode & 0o777,
        user(p.cuid),
        group(p.cgid),
        user(p.uid),
        group(p.gid)
    )
}

/// A section's title line, then its column names, each left-aligned in its width.
fn heading(title: &str, columns: &[(&str, usize)]) -> String {
    let names: Vec<String> = columns.iter().map(|(n, w)| format!("{n:<w$}")).collect();
    format!("------ {title} --------\n{}\n", names.join(" "))
}

/// A heading of the id column (name and width), the owner, then `rest`, each `width` wide.
fn id_owner_heading(title: &str, id: (&str, usize), rest: &[&str], width: usize) -> String {
    let mut columns = vec![id, ("owner", 10)];
    columns.extend(rest.iter().map(|n| (*n, width)));
    heading(title, &columns)
}

/// The default listing's heading: key, id, owner and perms, each 10 wide, then `rest`.
fn default_heading(title: &str, id: &str, rest: &[(&str, usize)]) -> String {
    let mut columns = vec![("key", 10), (id, 10), ("owner", 10), ("perms", 10)];
    columns.extend_from_slice(rest);
    heading(title, &columns)
}

/// `-c`'s heading.
fn creator_heading(title: &str, id: &str) -> String {
    let names = [id, "perms", "cuid", "cgid", "uid", "gid"];
    heading(title, &names.map(|n| (n, 10)))
}

/// `-t`'s line of a queue or segment: the id left-aligned in `id_width`, the owner, three times.
fn times_line(id: i32, id_width: usize, uid: u32, times: [i64; 3]) -> String {
    let [a, b, c] = times.map(|t| time_col(t, 4, 16, 20));
    format!("{id:<id_width$} {} {a} {b} {c}\n", owner(uid))
}

/// The default listing's size column: with `--human` right-aligned in 6 and followed by
/// `human_pad`, otherwise left-aligned in `width`.
fn size_col(unit: Unit, bytes: u64, human_pad: &str, width: i32) -> String {
    if unit == Unit::Human {
        size(unit, None, bytes, human_pad, 6)
    } else {
        size(unit, None, bytes, "", -width)
    }
}

/// The message queues section.
pub fn msg(list: &[(i32, MsqidDs)], format: Format, unit: Unit) -> String {
    let mut s = match format {
        Format::Creator => creator_heading("Message Queues Creators/Owners", "msqid"),
        Format::Time => id_owner_heading(
            "Message Queues Send/Recv/Change Times",
            ("msqid", 8),
            &["send", "recv", "change"],
            20,
        ),
        Format::Pid => id_owner_heading(
            "Message Queues PIDs",
            ("msqid", 10),
            &["lspid", "lrpid"],
            10,
        ),
        _ => {
            let size = if unit == Unit::Human {
                "size"
            } else {
                "used-bytes"
            };
            default_heading("Message Queues", "msqid", &[(size, 12), ("messages", 12)])
        }
    };
    for (id, ds) in list {
        let p = &ds.perm;
        s += &match format {
            Format::Creator => creator_line(*id, p),
            Format::Time => times_line(*id, 8, p.uid, [ds.stime, ds.rtime, ds.ctime]),
            Format::Pid => format!(
                "{id:<8} {}  {:>5}     {:>5}\n",
                owner(p.uid),
                ds.lspid,
                ds.lrpid
            ),
            _ => {
                let bytes = size_col(unit, ds.cbytes, "      ", 12);
                format!(
                    "0x{:08x} {id:<10} {} {:<10o} {bytes} {:<12}\n",
                    p.key,
                    owner(p.uid),
                    p.mode & 0o777,
                    ds.qnum
                )
            }
        };
    }
    s
}

/// The shared memory section.
pub fn shm(list: &[(i32, ShmidDs)], format: Format, unit: Unit) -> String {
    let mut s = match format {
        Format::Creator => creator_heading("Shared Memory Segment Creators/Owners", "shmid"),
        Format::Time => id_owner_heading(
            "Shared Memory Attach/Detach/Change Times",
            ("shmid", 10),
            &["attached", "detached", "changed"],
            20,
        ),
        Format::Pid => id_owner_heading(
            "Shared Memory Creator/Last-op PIDs",
            ("shmid", 10),
            &["cpid", "lpid"],
            10,
        ),
        _ => {
            let size = if unit == Unit::Human { "size" } else { "bytes" };
            let rest = [(size, 10), ("nattch", 10), ("status", 12)];
            default_heading("Shared Memory Segments", "shmid", &rest)
        }
    };
    for (id, ds) in list {
        let p = &ds.perm;
        s += &match format {
            Format::Creator => creator_line(*id, p),
            Format::Time => times_line(*id, 10, p.uid, [ds.atime, ds.dtime, ds.ctime]),
            Format::Pid => format!(
                "{id:<10} {} {:<10} {:<10}\n",
                owner(p.uid),
                ds.cpid,
                ds.lpid
            ),
            _ => {
                let bytes = size_col(unit, ds.segsz, "    ", 10);
                let flag =
                    |bit: u32, word: &'static str| if p.mode & bit != 0 { word } else { " " };
                format!(
                    "0x{:08x} {id:<10} {} {:<10o} {bytes} {:<10} {:<6} {:<6}\n",
                    p.key,
                    owner(p.uid),
                    p.mode & 0o777,
                    ds.nattch,
                    flag(SHM_DEST, "dest"),
                    flag(SHM_LOCKED, "locked")
                )
            }
        };
    }
    s
}

/// The semaphores section (`-p` has none: semaphore sets keep no pid of their own).
pub fn sem(list: &[(i32, SemidDs)], format: Format) -> String {
    let mut s = match format {
        Format::Creator => creator_heading("Semaphore Arrays Creators/Owners", "semid"),
        Format::Time => id_owner_heading(
            "Semaphore Operation/Change Times",
            ("semid", 8),
            &["last-op", "last-changed"],
            26,
        ),
        Format::Pid => return String::new(),
        _ => default_heading("Semaphore Arrays", "semid", &[("nsems", 10)]),
    };
    for (id, ds) in list {
        let p = &ds.perm;
        s += &match format {
            Format::Creator => creator_line(*id, p),
            Format::Time => format!(
                "{id:<8} {}  {} {}\n",
                owner(p.uid),
                time_col(ds.otime, 0, 24, 26),
                time_col(ds.ctime, 0, 24, 26)
            ),
            _ => format!(
                "0x{:08x} {id:<10} {} {:<10o} {:<10}\n",
                p.key,
                owner(p.uid),
                p.mode & 0o777,
                ds.nsems
            ),
        };
    }
    s
}
