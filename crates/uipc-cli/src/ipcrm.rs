//! `uipc ipcrm`: util-linux's removal, against a uipc daemon (found as for `uipc ipcs`).
//!
//! Removes by id (`-q -s -m`), by key (`-Q -S -M`, found with `*get(key, 0)`), or everything
//! of a type (`--all[=shm|msg|sem]`); like util-linux it reports each failure with its
//! wording, goes on, and exits 1 if any failed.
//!
//! ## Not supported
//! - `--verbose`.

use crate::ipcs::{call, connect_or_say, list, Kind, Types};
use std::path::PathBuf;
use std::process::ExitCode;
use uipc::ipc::consts::*;
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response};

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

fn rmid(c: &Connection, kind: Kind, id: i32) -> Result<Response, String> {
    call(c, kind.ctl(id, IPC_RMID))
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
    let Some(c) = connect_or_say("ipcrm", socket_path) else {
        return ExitCode::FAILURE;
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
    // Every id first, then every key, each in the order msg, shm, sem.
    let kinds = [Kind::Msg, Kind::Shm, Kind::Sem];
    for (kind, list) in kinds.into_iter().zip([&r.msg_ids, &r.shm_ids, &r.sem_ids]) {
        for arg in list {
            let resp = match parse_number(arg).and_then(|v| i32::try_from(v).ok()) {
                Some(id) => rmid(&c, kind, id),
                None => Ok(Response::Error(libc::EINVAL)),
            };
            report("id", arg, resp);
        }
    }
    for (kind, list) in kinds
        .into_iter()
        .zip([&r.msg_keys, &r.shm_keys, &r.sem_keys])
    {
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
            (t.msg, Kind::Msg, list(&c, Kind::Msg)),
            (t.shm, Kind::Shm, list(&c, Kind::Shm)),
            (t.sem, Kind::Sem, list(&c, Kind::Sem)),
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
