//! `uipc ipcs`: util-linux's listing, against a uipc daemon.
//!
//! The daemon is the one at `--socket`, else `$UIPC_SOCKET` (so it works inside
//! `uipc run -- sh`), else the default socket. The listing walks each type's indices with
//! `*_STAT_ANY` up to the highest index in use (from `*_INFO`), which is what util-linux's
//! ipcs does when /proc/sysvipc is missing, and prints util-linux's default format, column for
//! column (scripts/test-run.sh compares the two on the same objects).
//!
//! ## Not supported
//! - ipcs's other formats (`-t -p -c -l -u -i --human -b`).

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use uipc::ipc::consts::*;
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response};

/// Which daemon to talk to.
pub fn socket(explicit: Option<PathBuf>) -> PathBuf {
    explicit
        .or_else(|| {
            std::env::var_os("UIPC_SOCKET")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(uipc_server::default_socket_path)
}

pub(crate) fn connect(path: &Path) -> Result<Connection, String> {
    Connection::connect(path, false)
        .map_err(|e| format!("no uipc daemon answers on {}: {e}", path.display()))
}

pub(crate) fn call(c: &Connection, req: Request) -> Result<Response, String> {
    c.call(&req, false)
        .map(|(r, _)| r)
        .map_err(|e| format!("daemon: {e}"))
}

fn owner(uid: u32) -> String {
    // SAFETY: getpwuid returns a pointer to static storage or null; this is single-threaded.
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        return format!("{uid:<10}");
    }
    // SAFETY: a non-null passwd entry has a NUL-terminated name.
    let name = unsafe { CStr::from_ptr((*pw).pw_name) }.to_string_lossy();
    let short: String = name.chars().take(10).collect();
    format!("{short:<10}")
}

/// Which types a command covers.
#[derive(Clone, Copy)]
pub struct Types {
    /// Message queues.
    pub msg: bool,
    /// Shared memory.
    pub shm: bool,
    /// Semaphores.
    pub sem: bool,
}

fn max_index(c: &Connection, req: Request) -> Result<i32, String> {
    Ok(match call(c, req)? {
        Response::MsgInfo { ret, .. }
        | Response::SemInfo { ret, .. }
        | Response::ShmUsage { ret, .. } => ret,
        Response::Error(e) => return Err(format!("info: errno {e}")),
        other => return Err(format!("info: unexpected {other:?}")),
    })
}

/// Every object of a type as the daemon's `*_STAT_ANY` returns it.
fn each(
    c: &Connection,
    info: Request,
    stat: impl Fn(i32) -> Request,
) -> Result<Vec<Response>, String> {
    let max = max_index(c, info)?;
    let mut out = Vec::new();
    for idx in 0..=max {
        match call(c, stat(idx))? {
            Response::Error(_) => {}
            r => out.push(r),
        }
    }
    Ok(out)
}

pub(crate) fn list_msg(c: &Connection) -> Result<Vec<(i32, Response)>, String> {
    let info = Request::Msgctl {
        msqid: 0,
        cmd: MSG_INFO,
        set: None,
    };
    let all = each(c, info, |i| Request::Msgctl {
        msqid: i,
        cmd: MSG_STAT_ANY,
        set: None,
    })?;
    Ok(all
        .into_iter()
        .filter_map(|r| match &r {
            Response::MsgStat { ret, .. } => Some((*ret, r)),
            _ => None,
        })
        .collect())
}

pub(crate) fn list_shm(c: &Connection) -> Result<Vec<(i32, Response)>, String> {
    let info = Request::Shmctl {
        shmid: 0,
        cmd: SHM_INFO,
        set: None,
    };
    let all = each(c, info, |i| Request::Shmctl {
        shmid: i,
        cmd: SHM_STAT_ANY,
        set: None,
    })?;
    Ok(all
        .into_iter()
        .filter_map(|r| match &r {
            Response::ShmStat { ret, .. } => Some((*ret, r)),
            _ => None,
        })
        .collect())
}

pub(crate) fn list_sem(c: &Connection) -> Result<Vec<(i32, Response)>, String> {
    let info = Request::Semctl {
        semid: 0,
        semnum: 0,
        cmd: SEM_INFO,
        arg: uipc_proto::SemArg::None,
    };
    let all = each(c, info, |i| Request::Semctl {
        semid: i,
        semnum: 0,
        cmd: SEM_STAT_ANY,
        arg: uipc_proto::SemArg::None,
    })?;
    Ok(all
        .into_iter()
        .filter_map(|r| match &r {
            Response::SemStat { ret, .. } => Some((*ret, r)),
            _ => None,
        })
        .collect())
}

fn render(c: &Connection, t: Types) -> Result<String, String> {
    let mut s = String::new();
    if t.msg {
        s += "\n------ Message Queues --------\n";
        s += &format!(
            "{:<10} {:<10} {:<10} {:<10} {:<12} {:<12}\n",
            "key", "msqid", "owner", "perms", "used-bytes", "messages"
        );
        for (id, r) in list_msg(c)? {
            if let Response::MsgStat { ds, .. } = r {
                s += &format!(
                    "0x{:08x} {:<10} {} {:<10o} {:<12} {:<12}\n",
                    ds.perm.key,
                    id,
                    owner(ds.perm.uid),
                    ds.perm.mode & 0o777,
                    ds.cbytes,
                    ds.qnum
                );
            }
        }
    }
    if t.shm {
        s += "\n------ Shared Memory Segments --------\n";
        s += &format!(
            "{:<10} {:<10} {:<10} {:<10} {:<10} {:<10} {:<12}\n",
            "key", "shmid", "owner", "perms", "bytes", "nattch", "status"
        );
        for (id, r) in list_shm(c)? {
            if let Response::ShmStat { ds, .. } = r {
                let dest = if ds.perm.mode & SHM_DEST != 0 {
                    "dest"
                } else {
                    " "
                };
                let locked = if ds.perm.mode & SHM_LOCKED != 0 {
                    "locked"
                } else {
                    " "
                };
                s += &format!(
                    "0x{:08x} {:<10} {} {:<10o} {:<10} {:<10} {:<6} {:<6}\n",
                    ds.perm.key,
                    id,
                    owner(ds.perm.uid),
                    ds.perm.mode & 0o777,
                    ds.segsz,
                    ds.nattch,
                    dest,
                    locked
                );
            }
        }
    }
    if t.sem {
        s += "\n------ Semaphore Arrays --------\n";
        s += &format!(
            "{:<10} {:<10} {:<10} {:<10} {:<10}\n",
            "key", "semid", "owner", "perms", "nsems"
        );
        for (id, r) in list_sem(c)? {
            if let Response::SemStat { ds, .. } = r {
                s += &format!(
                    "0x{:08x} {:<10} {} {:<10o} {:<10}\n",
                    ds.perm.key,
                    id,
                    owner(ds.perm.uid),
                    ds.perm.mode & 0o777,
                    ds.nsems
                );
            }
        }
    }
    s += "\n";
    Ok(s)
}

/// `uipc ipcs`.
pub fn ipcs(socket_path: Option<PathBuf>, t: Types) -> ExitCode {
    let path = socket(socket_path);
    match connect(&path).and_then(|c| render(&c, t)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uipc ipcs: {e}");
            ExitCode::FAILURE
        }
    }
}
