//! The records: each object read as root would read it, and recreated through the engine's
//! own calls.
//!
//! ```text
//! TUNABLE  u8:which  bytes:text                        a sysctl, as /proc/sys shows it
//! SEM      perm  u64:nsems  u16 * nsems                  GETALL's values
//! QUEUE    perm  u64:qbytes  u64:count  (i64:mtype bytes:text) * count, in queue order
//! SEGMENT  perm  u64:segsz  u8:locked  extents (sparse.rs)
//! perm  =  i32:id i32:key u32:uid u32:gid u32:cuid u32:cgid u32:mode
//! ```
//!
//! Saving reads with `*_STAT_ANY` over every index, GETALL, msgrcv with MSG_COPY (one message
//! at a time) and a read-only attach whose memfd is streamed. Restoring sets `*_next_id` to
//! the saved id, then `*get` with IPC_CREAT|IPC_EXCL as the saved creator (cuid/cgid),
//! IPC_SET for the owner and mode (and msg_qbytes), SETALL, msgsnd in queue order, and the
//! segment's extents written through an attach.

use super::format::{In, Out};
use super::sparse;
use crate::memfd::MemfdBacking;
use std::io;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidSet};
use uipc::ipc::sem::{SemctlArg, SemctlOut};
use uipc::ipc::shm::{ShmSet, ShmctlOut};
use uipc::ipc::{IpcNamespace, IpcPermStat, Sysctl};
use uipc::{CapSet, Cred, WaitCtx};

pub const TUNABLE: u8 = 1;
pub const SEM: u8 = 2;
pub const QUEUE: u8 = 3;
pub const SEGMENT: u8 = 4;

/// The sysctls saved, by their index in the file.
pub const TUNABLES: &[Sysctl] = Sysctl::LIMITS;

fn root() -> Cred {
    Cred::root(std::process::id() as i32)
}

fn engine(what: String) -> impl FnOnce(uipc::Errno) -> io::Error {
    move |e| io::Error::other(format!("{what}: {e:?}"))
}

fn put_perm(out: &mut Out, id: i32, p: &IpcPermStat) -> io::Result<()> {
    out.i32(id)?;
    out.i32(p.key)?;
    for v in [p.uid, p.gid, p.cuid, p.cgid, p.mode & 0o777] {
        out.u32(v)?;
    }
    Ok(())
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

fn get_perm(inp: &mut In) -> io::Result<Perm> {
    let id = inp.i32()?;
    let key = inp.i32()?;
    let [uid, gid, cuid, cgid, mode] = inp.u32s()?;
    Ok(Perm {
        id,
        key,
        uid,
        gid,
        cuid,
        cgid,
        mode,
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
            ..root()
        }
    }
}

fn indices(max: Result<i32, uipc::Errno>) -> std::ops::RangeInclusive<i32> {
    0..=max.unwrap_or(-1)
}

/// How many semaphore sets, queues and segments `ns` holds.
pub fn count_all(ns: &IpcNamespace) -> [usize; 3] {
    let root = root();
    let sets = indices(
        ns.semctl(&root, 0, 0, SEM_INFO, SemctlArg::None)
            .map(|o| o.ret()),
    )
    .filter(|&i| {
        ns.semctl(&root, i, 0, SEM_STAT_ANY, SemctlArg::None)
            .is_ok()
    })
    .count();
    let queues = indices(
        ns.msgctl(&root, 0, MSG_INFO, MsgctlArg::None)
            .map(|o| o.ret()),
    )
    .filter(|&i| ns.msgctl(&root, i, MSG_STAT_ANY, MsgctlArg::None).is_ok())
    .count();
    let segments = indices(ns.shmctl(&root, 0, SHM_INFO, None).map(|o| o.ret()))
        .filter(|&i| ns.shmctl(&root, i, SHM_STAT_ANY, None).is_ok())
        .count();
    [sets, queues, segments]
}

/// Writes the tunables and every semaphore set, queue and segment of `ns`.
pub fn save_all(ns: &IpcNamespace, backing: &MemfdBacking, out: &mut Out) -> io::Result<()> {
    let root = root();
    for (i, t) in TUNABLES.iter().enumerate() {
        out.u8(TUNABLE)?;
        out.u8(i as u8)?;
        out.bytes(ns.sysctl_read(*t).as_bytes())?;
    }
    let max = ns.semctl(&root, 0, 0, SEM_INFO, SemctlArg::None);
    for idx in indices(max.map(|o| o.ret())) {
        let Ok(SemctlOut::Stat(id, ds)) = ns.semctl(&root, idx, 0, SEM_STAT_ANY, SemctlArg::None)
        else {
            continue;
        };
        let values = match ns.semctl(&root, id, 0, GETALL, SemctlArg::None) {
            Ok(SemctlOut::All(v)) => v,
            other => return Err(io::Error::other(format!("semaphore set {id}: {other:?}"))),
        };
        out.u8(SEM)?;
        put_perm(out, id, &ds.perm)?;
        out.u64(values.len() as u64)?;
        for v in values {
            out.u16(v)?;
        }
    }
    // MSG_COPY copies at most msgmax bytes (EINVAL for a longer message, as on Linux), and
    // msgmax may have been lowered below queued messages: lifted while copying.
    let msgmax = ns.sysctl_read(Sysctl::MsgMax);
    apply_tunable(ns, Sysctl::MsgMax, &i32::MAX.to_string())?;
    let copied = save_queues(ns, out);
    apply_tunable(ns, Sysctl::MsgMax, msgmax.trim())?;
    copied?;
    save_segments(ns, backing, out)
}

fn save_queues(ns: &IpcNamespace, out: &mut Out) -> io::Result<()> {
    let root = root();
    let max = ns.msgctl(&root, 0, MSG_INFO, MsgctlArg::None);
    for idx in indices(max.map(|o| o.ret())) {
        let Ok(MsgctlOut::Stat { ret: id, ds }) =
            ns.msgctl(&root, idx, MSG_STAT_ANY, MsgctlArg::None)
        else {
            continue;
        };
        out.u8(QUEUE)?;
        put_perm(out, id, &ds.perm)?;
        out.u64(ds.qbytes)?;
        out.u64(ds.qnum)?;
        for n in 0..ds.qnum as i64 {
            let flags = MSG_COPY | IPC_NOWAIT | MSG_NOERROR;
            let (mtype, text) = ns
                .msgrcv(&root, id, i64::MAX, n, flags, &WaitCtx::FOREVER)
                .map_err(engine(format!("message {n} of queue {id}")))?;
            out.i64(mtype)?;
            out.bytes(&text)?;
        }
    }
    Ok(())
}

fn save_segments(ns: &IpcNamespace, backing: &MemfdBacking, out: &mut Out) -> io::Result<()> {
    let root = root();
    let mut buf = vec![0u8; sparse::CHUNK];
    let max = ns.shmctl(&root, 0, SHM_INFO, None);
    for idx in indices(max.map(|o| o.ret())) {
        let Ok(ShmctlOut::Stat(id, ds)) = ns.shmctl(&root, idx, SHM_STAT_ANY, None) else {
            continue;
        };
        // Marked for removal: gone once its attachers are, and they do not outlive the daemon.
        if ds.perm.mode & SHM_DEST != 0 {
            continue;
        }
        let fail = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("segment {id} (key {:#x}): {e}", ds.perm.key),
            )
        };
        let at = ns
            .shmat(&root, id, 0, SHM_RDONLY)
            .map_err(engine(format!("attaching segment {id}")))?;
        let saved = (|| {
            let fd = backing
                .fd_of(&at.memory)
                .ok_or_else(|| io::Error::other("its memory is not a memfd of this daemon"))?;
            out.u8(SEGMENT)?;
            put_perm(out, id, &ds.perm)?;
            out.u64(ds.segsz)?;
            out.u8(u8::from(ds.perm.mode & SHM_LOCKED != 0))?;
            sparse::save(out, fd, at.memory.len(), &mut buf)
        })();
        let _ = ns.shmdt(&root, at.addr);
        saved.map_err(fail)?;
    }
    Ok(())
}

fn apply_tunable(ns: &IpcNamespace, t: Sysctl, text: &str) -> io::Result<()> {
    ns.sysctl_write(&root(), t, text)
        .map_err(engine(format!("{t:?} = {text}")))
}

/// Before the objects: limits no restored object can exceed (the saved ones come after).
pub fn roomy_limits(ns: &IpcNamespace) -> io::Result<()> {
    // The largest number of ids a namespace may have: IPCMNI, or its extended value.
    let ids = ["16777216", "32768"]
        .into_iter()
        .find(|n| ns.sysctl_write(&root(), Sysctl::MsgMni, n).is_ok())
        .ok_or_else(|| io::Error::other("msgmni cannot be raised"))?;
    let max = i32::MAX.to_string();
    let huge = (u64::MAX - (1 << 24)).to_string();
    apply_tunable(ns, Sysctl::Sem, &format!("{max} {max} {max} {ids}"))?;
    apply_tunable(ns, Sysctl::MsgMax, &max)?;
    apply_tunable(ns, Sysctl::MsgMnb, &max)?;
    apply_tunable(ns, Sysctl::ShmMni, ids)?;
    apply_tunable(ns, Sysctl::ShmMax, &huge)?;
    apply_tunable(ns, Sysctl::ShmAll, &huge)
}

/// After the objects: the saved limits.
pub fn apply_tunables(ns: &IpcNamespace, tunables: &[(Sysctl, String)]) -> io::Result<()> {
    for (t, text) in tunables {
        apply_tunable(ns, *t, text)?;
    }
    Ok(())
}

fn next_id(ns: &IpcNamespace, which: Sysctl, id: i32) -> io::Result<()> {
    ns.sysctl_write(&root(), which, &id.to_string())
        .map_err(engine(format!("{which:?} = {id}")))
}

fn same_id(got: Result<i32, uipc::Errno>, want: i32) -> io::Result<()> {
    match got {
        Ok(id) if id == want => Ok(()),
        other => Err(io::Error::other(format!(
            "recreating id {want} gave {other:?}"
        ))),
    }
}

/// Recreates the object of the record tagged `tag` (read already).
/// The limits, all but shm_rmid_forced, wait in `tunables` until every object is back
/// ([`apply_tunables`]): a limit lowered below what was in use must not stop the restore.
pub fn restore_record(
    ns: &IpcNamespace,
    tag: u8,
    inp: &mut In,
    buf: &mut [u8],
    tunables: &mut Vec<(Sysctl, String)>,
) -> io::Result<()> {
    let root = root();
    match tag {
        TUNABLE => {
            let which = inp.u8()?;
            let text = inp.bytes()?;
            let Some(t) = TUNABLES.get(which as usize) else {
                return Err(io::Error::other(format!("unknown tunable {which}")));
            };
            let text = String::from_utf8_lossy(&text).into_owned();
            if *t == Sysctl::ShmRmidForced {
                apply_tunable(ns, *t, &text)
            } else {
                tunables.push((*t, text));
                Ok(())
            }
        }
        SEM => {
            let p = get_perm(inp)?;
            let n = inp.count(2)?;
            let values = (0..n).map(|_| inp.u16()).collect::<io::Result<Vec<_>>>()?;
            next_id(ns, Sysctl::SemNextId, p.id)?;
            let flag = IPC_CREAT | IPC_EXCL | p.mode as i32;
            same_id(ns.semget(&p.creator(), p.key, n as i32, flag), p.id)?;
            let set = SemctlArg::Set {
                uid: p.uid,
                gid: p.gid,
                mode: p.mode,
            };
            let what = || format!("semaphore set {}", p.id);
            ns.semctl(&root, p.id, 0, IPC_SET, set)
                .map_err(engine(what()))?;
            ns.semctl(&root, p.id, 0, SETALL, SemctlArg::Array(&values))
                .map_err(engine(what()))
                .map(drop)
        }
        QUEUE => {
            let p = get_perm(inp)?;
            let qbytes = inp.u64()?;
            let count = inp.count(16)?;
            next_id(ns, Sysctl::MsgNextId, p.id)?;
            let flag = IPC_CREAT | IPC_EXCL | p.mode as i32;
            same_id(ns.msgget(&p.creator(), p.key, flag), p.id)?;
            let set = MsqidSet {
                uid: p.uid,
                gid: p.gid,
                mode: p.mode,
                qbytes,
            };
            let what = || format!("queue {}", p.id);
            // Room for every message first: msg_qbytes may have been lowered below what the
            // queue held.
            let roomy = MsqidSet {
                qbytes: i32::MAX as u64,
                ..set
            };
            ns.msgctl(&root, p.id, IPC_SET, MsgctlArg::Set(roomy))
                .map_err(engine(what()))?;
            for _ in 0..count {
                let mtype = inp.i64()?;
                let text = inp.bytes()?;
                ns.msgsnd(&root, p.id, mtype, &text, IPC_NOWAIT, &WaitCtx::FOREVER)
                    .map_err(engine(what()))?;
            }
            ns.msgctl(&root, p.id, IPC_SET, MsgctlArg::Set(set))
                .map_err(engine(what()))
                .map(drop)
        }
        SEGMENT => {
            let p = get_perm(inp)?;
            let size = inp.u64()?;
            let locked = inp.u8()? != 0;
            next_id(ns, Sysctl::ShmNextId, p.id)?;
            let flag = IPC_CREAT | IPC_EXCL | p.mode as i32;
            same_id(ns.shmget(&p.creator(), p.key, size, flag), p.id)?;
            let what = || format!("segment {}", p.id);
            let at = ns.shmat(&root, p.id, 0, 0).map_err(engine(what()))?;
            let wrote = sparse::restore(inp, at.memory.as_ref(), buf);
            let _ = ns.shmdt(&root, at.addr);
            wrote?;
            let set = ShmSet {
                uid: p.uid,
                gid: p.gid,
                mode: p.mode,
            };
            ns.shmctl(&root, p.id, IPC_SET, Some(&set))
                .map_err(engine(what()))?;
            if locked {
                ns.shmctl(&root, p.id, SHM_LOCK, None)
                    .map_err(engine(what()))?;
            }
            Ok(())
        }
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("state file malformed: unknown record {other:#x}"),
        )),
    }
}
