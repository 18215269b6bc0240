//! `uipc ipcs`: util-linux's ipcs, against a uipc daemon.
//!
//! The daemon is the one at `--socket`, else `$UIPC_SOCKET` (so it works inside
//! `uipc run -- sh`), else the default socket. The listing walks each type's indices with
//! `*_STAT_ANY` up to the highest index in use (from `*_INFO`), which is what util-linux's
//! ipcs does when /proc/sysvipc is missing; `-l` asks each type's IPC_INFO, `-u` its `*_INFO`,
//! `-s -i` each semaphore's GETVAL, GETNCNT, GETZCNT and GETPID. Every format is util-linux's
//! (2.38), column for column: the default, `-c`, `-t`, `-p`, `-l`, `-u`, `-i ID`, each with
//! `-b` or `--human` where util-linux takes them, sections in its order (queues, segments,
//! semaphores). As in util-linux, the last format option and the last unit option given win.
//! scripts/test-run.sh compares each with util-linux's on the same objects.

mod fmt;
mod summary;
mod tables;

pub use fmt::{human, Format, Unit};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgInfo, MsqidDs};
use uipc::ipc::sem::{SemInfo, SemidDs};
use uipc::ipc::shm::ShmidDs;
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

/// Connects to the daemon at `explicit` (or the usual socket); on failure says why as
/// `uipc {command}` and returns `None`.
pub(crate) fn connect_or_say(command: &str, explicit: Option<PathBuf>) -> Option<Connection> {
    connect(&socket(explicit))
        .inspect_err(|e| eprintln!("uipc {command}: {e}"))
        .ok()
}

pub(crate) fn call(c: &Connection, req: Request) -> Result<Response, String> {
    c.call(&req, false)
        .map(|(r, _)| r)
        .map_err(|e| format!("daemon: {e}"))
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

/// A SysV IPC object type.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Msg,
    Shm,
    Sem,
}

impl Kind {
    /// The type's `*ctl(id, cmd)` request with no argument.
    pub(crate) fn ctl(self, id: i32, cmd: i32) -> Request {
        match self {
            Kind::Msg => Request::Msgctl {
                msqid: id,
                cmd,
                set: None,
            },
            Kind::Shm => Request::Shmctl {
                shmid: id,
                cmd,
                set: None,
            },
            Kind::Sem => Request::Semctl {
                semid: id,
                semnum: 0,
                cmd,
                arg: uipc_proto::SemArg::None,
            },
        }
    }
}

/// Every object of type `kind` as the daemon's `*_STAT_ANY` returns it, with its id.
pub(crate) fn list(c: &Connection, kind: Kind) -> Result<Vec<(i32, Response)>, String> {
    let (info, stat_any) = match kind {
        Kind::Msg => (MSG_INFO, MSG_STAT_ANY),
        Kind::Shm => (SHM_INFO, SHM_STAT_ANY),
        Kind::Sem => (SEM_INFO, SEM_STAT_ANY),
    };
    let max = max_index(c, kind.ctl(0, info))?;
    let mut out = Vec::new();
    for idx in 0..=max {
        if let r @ (Response::MsgStat { ret, .. }
        | Response::ShmStat { ret, .. }
        | Response::SemStat { ret, .. }) = call(c, kind.ctl(idx, stat_any))?
        {
            out.push((ret, r));
        }
    }
    Ok(out)
}

/// What `uipc ipcs` was asked.
pub struct Ask {
    /// The object types.
    pub types: Types,
    /// The format.
    pub format: Format,
    /// `-b` / `--human`.
    pub unit: Unit,
    /// `-i ID`.
    pub id: Option<i32>,
}

/// The status each `(id, response)` of a listing carries, where `pick` finds one.
fn stats<T>(list: Vec<(i32, Response)>, pick: fn(Response) -> Option<T>) -> Vec<(i32, T)> {
    list.into_iter()
        .filter_map(|(id, r)| pick(r).map(|ds| (id, ds)))
        .collect()
}

fn msgs(c: &Connection) -> Result<Vec<(i32, MsqidDs)>, String> {
    Ok(stats(list(c, Kind::Msg)?, |r| match r {
        Response::MsgStat { ds, .. } => Some(ds),
        _ => None,
    }))
}

fn segments(c: &Connection) -> Result<Vec<(i32, ShmidDs)>, String> {
    Ok(stats(list(c, Kind::Shm)?, |r| match r {
        Response::ShmStat { ds, .. } => Some(ds),
        _ => None,
    }))
}

fn sems(c: &Connection) -> Result<Vec<(i32, SemidDs)>, String> {
    Ok(stats(list(c, Kind::Sem)?, |r| match r {
        Response::SemStat { ds, .. } => Some(ds),
        _ => None,
    }))
}

fn unexpected(what: &str, r: Response) -> String {
    match r {
        Response::Error(e) => format!("{what}: errno {e}"),
        other => format!("{what}: unexpected {other:?}"),
    }
}

fn msg_info(c: &Connection, cmd: i32) -> Result<MsgInfo, String> {
    match call(
        c,
        Request::Msgctl {
            msqid: 0,
            cmd,
            set: None,
        },
    )? {
        Response::MsgInfo { info, .. } => Ok(info),
        r => Err(unexpected("msgctl", r)),
    }
}

fn sem_info(c: &Connection, cmd: i32) -> Result<SemInfo, String> {
    let arg = uipc_proto::SemArg::None;
    match call(
        c,
        Request::Semctl {
            semid: 0,
            semnum: 0,
            cmd,
            arg,
        },
    )? {
        Response::SemInfo { info, .. } => Ok(info),
        r => Err(unexpected("semctl", r)),
    }
}

fn shm_call(c: &Connection, cmd: i32) -> Result<Response, String> {
    call(
        c,
        Request::Shmctl {
            shmid: 0,
            cmd,
            set: None,
        },
    )
}

fn sections(c: &Connection, t: Types, format: Format, unit: Unit) -> Result<String, String> {
    let mut s = String::from("\n");
    if t.msg {
        s += &match format {
            Format::Limits => summary::msg_limits(&msg_info(c, IPC_INFO)?, unit),
            Format::Status => summary::msg_status(&msg_info(c, MSG_INFO)?, unit),
            _ => tables::msg(&msgs(c)?, format, unit),
        };
        s += "\n";
    }
    if t.shm {
        s += &match format {
            Format::Limits => match shm_call(c, IPC_INFO)? {
                Response::ShmInfo { info, .. } => summary::shm_limits(&info, unit),
                r => return Err(unexpected("shmctl", r)),
            },
            Format::Status => match shm_call(c, SHM_INFO)? {
                Response::ShmUsage { usage, .. } => summary::shm_status(&usage),
                r => return Err(unexpected("shmctl", r)),
            },
            _ => tables::shm(&segments(c)?, format, unit),
        };
        s += "\n";
    }
    if t.sem {
        s += &match format {
            Format::Limits => summary::sem_limits(&sem_info(c, IPC_INFO)?),
            Format::Status => summary::sem_status(&sem_info(c, SEM_INFO)?),
            _ => tables::sem(&sems(c)?, format),
        };
        s += "\n";
    }
    Ok(s)
}

fn sem_value(c: &Connection, semid: i32, semnum: i32, cmd: i32) -> Result<i64, String> {
    let arg = uipc_proto::SemArg::None;
    match call(
        c,
        Request::Semctl {
            semid,
            semnum,
            cmd,
            arg,
        },
    )? {
        Response::Ret(v) => Ok(v),
        r => Err(unexpected("semctl failed", r)),
    }
}

/// `-i ID`: the object in full, or `None` if no object of the type has that id.
fn detail(c: &Connection, t: Types, id: i32, unit: Unit) -> Result<Option<String>, String> {
    if t.msg {
        let found = msgs(c)?.into_iter().find(|(i, _)| *i == id);
        return Ok(found.map(|(_, ds)| summary::msg_detail(id, &ds, unit)));
    }
    if t.shm {
        let found = segments(c)?.into_iter().find(|(i, _)| *i == id);
        return Ok(found.map(|(_, ds)| summary::shm_detail(id, &ds, unit)));
    }
    let Some((_, ds)) = sems(c)?.into_iter().find(|(i, _)| *i == id) else {
        return Ok(None);
    };
    let mut lines = Vec::new();
    for n in 0..ds.nsems as i32 {
        let mut line = [0; 4];
        for (v, cmd) in line.iter_mut().zip([GETVAL, GETNCNT, GETZCNT, GETPID]) {
            *v = sem_value(c, id, n, cmd)?;
        }
        lines.push(line);
    }
    Ok(Some(summary::sem_detail(id, &ds, &lines)))
}

/// `uipc ipcs`.
pub fn ipcs(socket_path: Option<PathBuf>, ask: Ask) -> ExitCode {
    let t = ask.types;
    if ask.id.is_some() && [t.msg, t.shm, t.sem].iter().filter(|b| **b).count() != 1 {
        eprintln!("uipc ipcs: when using an ID, a single resource must be specified");
        return ExitCode::FAILURE;
    }
    let Some(c) = connect_or_say("ipcs", socket_path) else {
        return ExitCode::FAILURE;
    };
    let text = match ask.id {
        Some(id) => detail(&c, t, id, ask.unit).map(|found| {
            found.unwrap_or_else(|| {
                eprintln!("uipc ipcs: id {id} not found");
                String::new()
            })
        }),
        None => sections(&c, t, ask.format, ask.unit),
    };
    match text {
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
