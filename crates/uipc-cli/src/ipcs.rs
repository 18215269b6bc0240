//! `uipc ipcs` and `uipc ipcrm`: util-linux's listing and removal, against a uipc daemon.
//!
//! The daemon is the one at `--socket`, else `$UIPC_SOCKET` (so both work inside
//! `uipc run -- sh`), else the default socket. The listing walks each type's indices with
//! `*_STAT_ANY` up to the highest index in use (from `*_INFO`), which is what util-linux's
//! ipcs does when /proc/sysvipc is missing, and prints util-linux's default format, column for
//! column. ipcrm removes by id (`-q -s -m`), by key (`-Q -S -M`, found with `*get(key, 0)`), or
//! everything the caller may remove (`--all[=shm|msg|sem]`).
//!
//! ## Not supported
//! - ipcs's other formats (`-t -p -c -l -u -i --human -b`) and ipcrm's `--verbose`.

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

fn connect(path: &Path) -> Result<Connection, String> {
    Connection::connect(path, false)
        .map_err(|e| format!("no uipc daemon answers on {}: {e}", path.display()))
}

fn call(c: &Connection, req: Request) -> Result<Response, String> {
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

fn list_msg(c: &Connection) -> Result<Vec<(i32, Response)>, String> {
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

fn list_shm(c: &Connection) -> Result<Vec<(i32, Response)>, String> {
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

fn list_sem(c: &Connection) -> Result<Vec<(i32, Response)>, String> {
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

/// What `uipc ipcrm` removes.
#[derive(Default)]
pub struct Removals {
    /// `-q`: queue ids.
    pub msg_ids: Vec<String>,
    /// `-Q`: queue keys.
    pub msg_keys: Vec<String>,
    /// `-m`: segment ids.
    pub shm_ids: Vec<String>,
    /// `-M`: segment keys.
    pub shm_keys: Vec<String>,
    /// `-s`: semaphore set ids.
    pub sem_ids: Vec<String>,
    /// `-S`: semaphore set keys.
    pub sem_keys: Vec<String>,
    /// `--all`: every object of these types.
    pub all: Option<Types>,
}

#[derive(Clone, Copy)]
enum Kind {
    Msg,
    Shm,
    Sem,
}

fn rmid(c: &Connection, kind: Kind, id: i32) -> Result<Response, String> {
    call(
        c,
        match kind {
            Kind::Msg => Request::Msgctl {
                msqid: id,
                cmd: IPC_RMID,
                set: None,
            },
            Kind::Shm => Request::Shmctl {
                shmid: id,
                cmd: IPC_RMID,
                set: None,
            },
            Kind::Sem => Request::Semctl {
                semid: id,
                semnum: 0,
                cmd: IPC_RMID,
                arg: uipc_proto::SemArg::None,
            },
        },
    )
}

fn lookup_key(c: &Connection, kind: Kind, key: i32) -> Result<Response, String> {
    call(
        c,
        match kind {
            Kind::Msg => Request::Msgget { key, flag: 0 },
            Kind::Shm => Request::Shmget {
                key,
                size: 0,
                flag: 0,
            },
            Kind::Sem => Request::Semget {
                key,
                nsems: 0,
                flag: 0,
            },
        },
    )
}

fn parse_number(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(hex, 16).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    }
}

fn errno_text(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// `uipc ipcrm`: like util-linux, reports each failure and goes on; exit 1 if any failed.
pub fn ipcrm(socket_path: Option<PathBuf>, r: Removals) -> ExitCode {
    let path = socket(socket_path);
    let c = match connect(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uipc ipcrm: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    let mut report = |what: &str, arg: &str, resp: Result<Response, String>| match resp {
        Ok(Response::Error(e)) => {
            match e {
                libc::EACCES | libc::EPERM => {
                    eprintln!("uipc ipcrm: permission denied for {what} ({arg})")
                }
                libc::EIDRM => eprintln!("uipc ipcrm: already removed {what} ({arg})"),
                libc::EINVAL | libc::ENOENT => eprintln!("uipc ipcrm: invalid {what} ({arg})"),
                _ => eprintln!("uipc ipcrm: {what} ({arg}): {}", errno_text(e)),
            }
            failed = true;
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("uipc ipcrm: {e}");
            failed = true;
        }
    };
    let by_id = [
        (Kind::Msg, &r.msg_ids),
        (Kind::Shm, &r.shm_ids),
        (Kind::Sem, &r.sem_ids),
    ];
    for (kind, list) in by_id {
        for arg in list {
            let resp = match parse_number(arg).and_then(|v| i32::try_from(v).ok()) {
                Some(id) => rmid(&c, kind, id),
                None => Ok(Response::Error(libc::EINVAL)),
            };
            report("id", arg, resp);
        }
    }
    let by_key = [
        (Kind::Msg, &r.msg_keys),
        (Kind::Shm, &r.shm_keys),
        (Kind::Sem, &r.sem_keys),
    ];
    for (kind, list) in by_key {
        for arg in list {
            let key = parse_number(arg).and_then(|v| {
                u32::try_from(v)
                    .ok()
                    .map(|k| k as i32)
                    .or_else(|| i32::try_from(v).ok())
            });
            let resp = match key {
                Some(k) if k != IPC_PRIVATE => match lookup_key(&c, kind, k) {
                    Ok(Response::Ret(id)) => rmid(&c, kind, id as i32),
                    other => other,
                },
                _ => Ok(Response::Error(libc::EINVAL)),
            };
            report("key", arg, resp);
        }
    }
    if let Some(t) = r.all {
        let lists = [
            (t.msg, Kind::Msg, list_msg(&c)),
            (t.shm, Kind::Shm, list_shm(&c)),
            (t.sem, Kind::Sem, list_sem(&c)),
        ];
        for (wanted, kind, list) in lists {
            if !wanted {
                continue;
            }
            match list {
                Ok(objs) => {
                    for (id, _) in objs {
                        report("id", &id.to_string(), rmid(&c, kind, id));
                    }
                }
                Err(e) => report("list", "", Err(e)),
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
