//! The listings, one line per object: the default columns, `-c` (creators and owners), `-t`
//! (times) and `-p` (pids), each with util-linux's title, header and column widths.

use super::fmt::{self, owner, size, time_col, Unit};
use super::Format;
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

fn creator_header(what: &str) -> String {
    format!(
        "{what:<10} {:<10} {:<10} {:<10} {:<10} {:<10}\n",
        "perms", "cuid", "cgid", "uid", "gid"
    )
}

/// The message queues section.
pub fn msg(list: &[(i32, MsqidDs)], format: Format, unit: Unit) -> String {
    let mut s = match format {
        Format::Creator => "------ Message Queues Creators/Owners --------\n".to_string() + &creator_header("msqid"),
        Format::Time => format!(
            "------ Message Queues Send/Recv/Change Times --------\n{:<8} {:<10} {:<20} {:<20} {:<20}\n",
            "msqid", "owner", "send", "recv", "change"
        ),
        Format::Pid => format!(
            "------ Message Queues PIDs --------\n{:<10} {:<10} {:<10} {:<10}\n",
            "msqid", "owner", "lspid", "lrpid"
        ),
        _ => format!(
            "------ Message Queues --------\n{:<10} {:<10} {:<10} {:<10} {:<12} {:<12}\n",
            "key",
            "msqid",
            "owner",
            "perms",
            if unit == Unit::Human { "size" } else { "used-bytes" },
            "messages"
        ),
    };
    for (id, ds) in list {
        let p = &ds.perm;
        s += &match format {
            Format::Creator => creator_line(*id, p),
            Format::Time => format!(
                "{id:<8} {} {} {} {}\n",
                owner(p.uid),
                time_col(ds.stime, 4, 16, 20),
                time_col(ds.rtime, 4, 16, 20),
                time_col(ds.ctime, 4, 16, 20)
            ),
            Format::Pid => format!(
                "{id:<8} {}  {:>5}     {:>5}\n",
                owner(p.uid),
                ds.lspid,
                ds.lrpid
            ),
            _ => {
                let bytes = if unit == Unit::Human {
                    size(unit, None, ds.cbytes, "      ", 6)
                } else {
                    size(unit, None, ds.cbytes, "", -12)
                };
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
        Format::Creator => "------ Shared Memory Segment Creators/Owners --------\n".to_string() + &creator_header("shmid"),
        Format::Time => format!(
            "------ Shared Memory Attach/Detach/Change Times --------\n{:<10} {:<10} {:<20} {:<20} {:<20}\n",
            "shmid", "owner", "attached", "detached", "changed"
        ),
        Format::Pid => format!(
            "------ Shared Memory Creator/Last-op PIDs --------\n{:<10} {:<10} {:<10} {:<10}\n",
            "shmid", "owner", "cpid", "lpid"
        ),
        _ => format!(
            "------ Shared Memory Segments --------\n{:<10} {:<10} {:<10} {:<10} {:<10} {:<10} {:<12}\n",
            "key",
            "shmid",
            "owner",
            "perms",
            if unit == Unit::Human { "size" } else { "bytes" },
            "nattch",
            "status"
        ),
    };
    for (id, ds) in list {
        let p = &ds.perm;
        s += &match format {
            Format::Creator => creator_line(*id, p),
            Format::Time => format!(
                "{id:<10} {} {} {} {}\n",
                owner(p.uid),
                time_col(ds.atime, 4, 16, 20),
                time_col(ds.dtime, 4, 16, 20),
                time_col(ds.ctime, 4, 16, 20)
            ),
            Format::Pid => format!(
                "{id:<10} {} {:<10} {:<10}\n",
                owner(p.uid),
                ds.cpid,
                ds.lpid
            ),
            _ => {
                let bytes = if unit == Unit::Human {
                    size(unit, None, ds.segsz, "    ", 6)
                } else {
                    size(unit, None, ds.segsz, "", -10)
                };
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
        Format::Creator => {
            "------ Semaphore Arrays Creators/Owners --------\n".to_string()
                + &creator_header("semid")
        }
        Format::Time => format!(
            "------ Semaphore Operation/Change Times --------\n{:<8} {:<10} {:<26} {:<26}\n",
            "semid", "owner", "last-op", "last-changed"
        ),
        Format::Pid => return String::new(),
        _ => format!(
            "------ Semaphore Arrays --------\n{:<10} {:<10} {:<10} {:<10} {:<10}\n",
            "key", "semid", "owner", "perms", "nsems"
        ),
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
