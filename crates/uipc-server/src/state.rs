//! `--state PATH`: the namespace saved when the daemon stops and restored when it starts, with
//! the same ids, keys, owners, modes, semaphore values, queued messages and segment contents,
//! in the spirit of checkpoint/restore.
//!
//! Saving reads the namespace as root would (`*_STAT_ANY` over every index, GETALL, msgrcv with
//! MSG_COPY, a read-only attach for segment memory). Restoring recreates each object through
//! the engine's own calls: `*_next_id` set to the saved id, then `*get` with IPC_CREAT|IPC_EXCL
//! as the saved creator (cuid/cgid), IPC_SET for the owner and mode (and msg_qbytes), SETALL,
//! msgsnd in queue order, and a write through an attach. The file is the wire format's codec:
//! a magic, a version, the tunables, then the three lists. It is written to a temporary file
//! and renamed, so a crash while saving leaves the previous state.
//!
//! ## Not supported
//! - Times (otime, ctime, stime, rtime, atime, dtime) and pids (sempid, lspid, lrpid, cpid,
//!   lpid) are those of the restore, not the saved ones.
//! - Segments marked for removal (SHM_DEST) are not saved (their users are gone after a
//!   restart); segments over 1 GiB are not saved (a warning says so). SHM_LOCK is restored
//!   as root's lock (charged to uid 0).
//! - SEM_UNDO lists and attachments belong to processes, which do not survive the daemon.

use std::io;
use std::path::Path;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidSet};
use uipc::ipc::sem::{SemctlArg, SemctlOut};
use uipc::ipc::shm::{ShmSet, ShmctlOut};
use uipc::ipc::{IpcNamespace, IpcPermStat, Sysctl};
use uipc::{CapSet, Cred, WaitCtx};
use uipc_proto::codec::{DecodeError, Reader, Writer};

const MAGIC: &[u8] = b"UIPCSTATE";
const VERSION: u32 = 1;
const MAX_SEGMENT: u64 = 1 << 30;
const TUNABLES: [Sysctl; 8] = [
    Sysctl::Sem,
    Sysctl::MsgMax,
    Sysctl::MsgMnb,
    Sysctl::MsgMni,
    Sysctl::ShmMax,
    Sysctl::ShmAll,
    Sysctl::ShmMni,
    Sysctl::ShmRmidForced,
];

fn me() -> i32 {
    std::process::id() as i32
}

fn put_perm(w: &mut Writer, id: i32, p: &IpcPermStat) {
    w.i32(id);
    w.i32(p.key);
    for v in [p.uid, p.gid, p.cuid, p.cgid, p.mode & 0o777] {
        w.u32(v);
    }
}

struct Perm {
    id: i32,
    key: i32,
    uid: u32,
    gid: u32,
    cuid: u32,
    cgid: u32,
    mode: u32,
}

fn get_perm(r: &mut Reader<'_>) -> Result<Perm, DecodeError> {
    Ok(Perm {
        id: r.i32()?,
        key: r.i32()?,
        uid: r.u32()?,
        gid: r.u32()?,
        cuid: r.u32()?,
        cgid: r.u32()?,
        mode: r.u32()?,
    })
}

impl Perm {
    /// The saved creator, with every capability (limits and ids are the restore's business).
    fn creator(&self) -> Cred {
        Cred {
            uid: self.cuid,
            euid: self.cuid,
            suid: self.cuid,
            gid: self.cgid,
            egid: self.cgid,
            sgid: self.cgid,
            caps: CapSet::ALL,
            ..Cred::root(me())
        }
    }
}

fn saved_indices(max: Result<i32, uipc::Errno>) -> std::ops::RangeInclusive<i32> {
    0..=max.unwrap_or(-1)
}

/// Writes the namespace to `path` (atomically: a temporary file, then a rename).
pub fn save(ns: &IpcNamespace, path: &Path) -> io::Result<()> {
    let root = Cred::root(me());
    let mut w = Writer::new();
    for b in MAGIC {
        w.u8(*b);
    }
    w.u32(VERSION);
    w.list(&TUNABLES, |w, t| w.bytes(ns.sysctl_read(*t).as_bytes()));

    let mut sems = Vec::new();
    let max = ns
        .semctl(&root, 0, 0, SEM_INFO, SemctlArg::None)
        .map(|o| o.ret());
    for idx in saved_indices(max) {
        if let Ok(SemctlOut::Stat(id, ds)) = ns.semctl(&root, idx, 0, SEM_STAT_ANY, SemctlArg::None)
        {
            if let Ok(SemctlOut::All(values)) = ns.semctl(&root, id, 0, GETALL, SemctlArg::None) {
                sems.push((id, ds.perm, values));
            }
        }
    }
    w.list(&sems, |w, (id, perm, values)| {
        put_perm(w, *id, perm);
        w.list(values, |w, v| w.u16(*v));
    });

    let mut queues = Vec::new();
    let max = ns
        .msgctl(&root, 0, MSG_INFO, MsgctlArg::None)
        .map(|o| o.ret());
    for idx in saved_indices(max) {
        if let Ok(MsgctlOut::Stat { ret: id, ds }) =
            ns.msgctl(&root, idx, MSG_STAT_ANY, MsgctlArg::None)
        {
            let mut msgs = Vec::new();
            for n in 0..ds.qnum as i64 {
                let flags = MSG_COPY | IPC_NOWAIT | MSG_NOERROR;
                if let Ok(m) = ns.msgrcv(&root, id, i64::MAX, n, flags, &WaitCtx::FOREVER) {
                    msgs.push(m);
                }
            }
            queues.push((id, ds.perm, ds.qbytes, msgs));
        }
    }
    w.list(&queues, |w, (id, perm, qbytes, msgs)| {
        put_perm(w, *id, perm);
        w.u64(*qbytes);
        w.list(msgs, |w, (mtype, text)| {
            w.i64(*mtype);
            w.bytes(text);
        });
    });

    let mut segments = Vec::new();
    let max = ns.shmctl(&root, 0, SHM_INFO, None).map(|o| o.ret());
    for idx in saved_indices(max) {
        let Ok(ShmctlOut::Stat(id, ds)) = ns.shmctl(&root, idx, SHM_STAT_ANY, None) else {
            continue;
        };
        if ds.perm.mode & SHM_DEST != 0 {
            continue;
        }
        if ds.segsz > MAX_SEGMENT {
            eprintln!(
                "uipc serve: segment {id} ({} bytes) is too large to save",
                ds.segsz
            );
            continue;
        }
        let Ok(at) = ns.shmat(&root, id, 0, SHM_RDONLY) else {
            continue;
        };
        let mut bytes = vec![0u8; ds.segsz as usize];
        let read = at.read(0, &mut bytes);
        let _ = ns.shmdt(&root, at.addr);
        if read.is_ok() {
            segments.push((id, ds.perm.clone(), ds.perm.mode & SHM_LOCKED != 0, bytes));
        }
    }
    w.list(&segments, |w, (id, perm, locked, bytes)| {
        put_perm(w, *id, perm);
        w.bool(*locked);
        w.bytes(bytes);
    });

    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, w.finish())?;
    std::fs::rename(&tmp, path)
}

fn bad(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("state file: {what}"))
}

fn next_id(ns: &IpcNamespace, which: Sysctl, id: i32) -> io::Result<()> {
    ns.sysctl_write(&Cred::root(me()), which, &id.to_string())
        .map_err(|e| bad(format!("id {id}: {e:?}")))
}

fn same_id(got: Result<i32, uipc::Errno>, want: i32) -> io::Result<()> {
    match got {
        Ok(id) if id == want => Ok(()),
        other => Err(bad(format!("recreating id {want} gave {other:?}"))),
    }
}

/// Recreates the objects saved in `path` in `ns` (which should be empty).
pub fn restore(ns: &IpcNamespace, path: &Path) -> io::Result<()> {
    let data = std::fs::read(path)?;
    let mut r = Reader::new(&data);
    for b in MAGIC {
        if r.u8().map_err(bad)? != *b {
            return Err(bad("not a uipc state file"));
        }
    }
    let version = r.u32().map_err(bad)?;
    if version != VERSION {
        return Err(bad(format!("version {version}, expected {VERSION}")));
    }
    let root = Cred::root(me());
    let tunables = r.list(4, |r| r.bytes()).map_err(bad)?;
    for (t, text) in TUNABLES.iter().zip(&tunables) {
        let text = String::from_utf8_lossy(text);
        ns.sysctl_write(&root, *t, &text)
            .map_err(|e| bad(format!("{t:?} = {text}: {e:?}")))?;
    }
    let sems = r
        .list(32, |r| Ok((get_perm(r)?, r.list(2, |r| r.u16())?)))
        .map_err(bad)?;
    for (p, values) in sems {
        next_id(ns, Sysctl::SemNextId, p.id)?;
        let flag = IPC_CREAT | IPC_EXCL | p.mode as i32;
        same_id(
            ns.semget(&p.creator(), p.key, values.len() as i32, flag),
            p.id,
        )?;
        let set = SemctlArg::Set {
            uid: p.uid,
            gid: p.gid,
            mode: p.mode,
        };
        ns.semctl(&root, p.id, 0, IPC_SET, set)
            .map_err(|e| bad(format!("{e:?}")))?;
        ns.semctl(&root, p.id, 0, SETALL, SemctlArg::Array(&values))
            .map_err(|e| bad(format!("{e:?}")))?;
    }
    let queues = r
        .list(40, |r| {
            Ok((
                get_perm(r)?,
                r.u64()?,
                r.list(12, |r| Ok((r.i64()?, r.bytes()?)))?,
            ))
        })
        .map_err(bad)?;
    for (p, qbytes, msgs) in queues {
        next_id(ns, Sysctl::MsgNextId, p.id)?;
        same_id(
            ns.msgget(&p.creator(), p.key, IPC_CREAT | IPC_EXCL | p.mode as i32),
            p.id,
        )?;
        let set = MsqidSet {
            uid: p.uid,
            gid: p.gid,
            mode: p.mode,
            qbytes,
        };
        ns.msgctl(&root, p.id, IPC_SET, MsgctlArg::Set(set))
            .map_err(|e| bad(format!("{e:?}")))?;
        for (mtype, text) in msgs {
            ns.msgsnd(&root, p.id, mtype, &text, IPC_NOWAIT, &WaitCtx::FOREVER)
                .map_err(|e| bad(format!("message of queue {}: {e:?}", p.id)))?;
        }
    }
    let segments = r
        .list(33, |r| Ok((get_perm(r)?, r.bool()?, r.bytes()?)))
        .map_err(bad)?;
    r.finish().map_err(bad)?;
    for (p, locked, bytes) in segments {
        next_id(ns, Sysctl::ShmNextId, p.id)?;
        let flag = IPC_CREAT | IPC_EXCL | p.mode as i32;
        same_id(
            ns.shmget(&p.creator(), p.key, bytes.len() as u64, flag),
            p.id,
        )?;
        let at = ns
            .shmat(&root, p.id, 0, 0)
            .map_err(|e| bad(format!("{e:?}")))?;
        let wrote = at.write(0, &bytes);
        let _ = ns.shmdt(&root, at.addr);
        wrote.map_err(|e| bad(format!("{e:?}")))?;
        let set = ShmSet {
            uid: p.uid,
            gid: p.gid,
            mode: p.mode,
        };
        ns.shmctl(&root, p.id, IPC_SET, Some(&set))
            .map_err(|e| bad(format!("{e:?}")))?;
        if locked {
            ns.shmctl(&root, p.id, SHM_LOCK, None)
                .map_err(|e| bad(format!("{e:?}")))?;
        }
    }
    Ok(())
}
