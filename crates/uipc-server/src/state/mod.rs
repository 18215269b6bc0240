//! `--state FILE`: the namespace saved when the daemon stops and restored when it starts, with
//! the same ids, keys, owners, modes, semaphore values, queued messages and segment contents,
//! in the spirit of checkpoint/restore.
//!
//! ## What a saved file holds
//! The namespace as the acknowledged operations left it. The daemon stops serving before it
//! saves ([`crate::stop`]): no new call starts, calls already running finish, and every call
//! a waker completed is answered, so each message is either in the file or in a reply that
//! was sent, never both and never neither; a semop is in the file whole or not at all. A call
//! still parked (nobody completed it) is in the file as what it is: not done. Its client sees
//! the connection close, as for any call the daemon did not answer.
//!
//! ## How it is written and read
//! The format ([`mod@format`]): a magic, a version, records ([`objects`]: the limits, then each
//! semaphore set, queue and segment), an end record with the file's length and a CRC-32 of
//! everything before it. It is written to a temporary file created exclusively beside FILE,
//! synced, renamed over FILE, and the directory synced ([`durable`]). Segment memory is saved
//! sparse and streamed ([`sparse`]); a segment that cannot be saved fails the whole save,
//! which names it. At start, the file is checked end to end before anything is restored; a
//! damaged file (truncated, extended, a flipped bit, another version) is refused with what is
//! wrong, and the daemon does not start, unless told to move it aside and start empty. A
//! restored file is renamed FILE.consumed before the daemon serves: after a crash (no save),
//! the next start finds no FILE, says so, and starts empty rather than bring back messages
//! and semaphore values that were consumed since. A save that fails leaves the daemon up,
//! not serving, with its objects in memory ([`save_failed_message`]): the objects are lost
//! only if an operator says so (SIGQUIT) or the process is killed.
//!
//! ## SEM_UNDO across a restart
//! As on Linux across a checkpoint and restore of an IPC namespace without its processes:
//! Linux has no interface to read or set a process's undo list, and CRIU saves a set's values
//! (GETALL) and restores them with SETALL, which clears every process's adjustments for the
//! set; it saves no undo list. Here too the saved values are those the acknowledged semops
//! left, and the adjustments are not saved. Clients do not survive the daemon (their
//! connections close), so no exit will ever apply them: a process that held a semaphore with
//! SEM_UNDO when the daemon stopped leaves it held after the restore.
//!
//! ## Not supported
//! - Times (otime, ctime, stime, rtime, atime, dtime) and pids (sempid, lspid, lrpid, cpid,
//!   lpid) are those of the restore, not the saved ones.
//! - Segments marked for removal (SHM_DEST) are not saved (their users are gone after a
//!   restart). SHM_LOCK is restored as root's lock (charged to uid 0).
//! - Segment memory is copied (`pread` from the memfd, after the last reply) while clients
//!   may still write to their mappings (the daemon stops its own serving, not the clients):
//!   every store a process made before a call of its that was answered is in the file; a
//!   store racing the save may be in it, missing, or in part, as in any copy of live shared
//!   memory.
//! - Attachments and SEM_UNDO lists belong to processes, which do not survive the daemon.
//! - Only the daemon's own namespace is saved; the save names on stderr every other
//!   namespace that holds objects ([`unsaved_warning`]), which are lost.

pub mod durable;
pub mod format;
pub mod objects;
pub mod sparse;

use crate::memfd::MemfdBacking;
use format::{Damage, In, Out, END};
use std::io;
use std::path::Path;
use uipc::ipc::IpcNamespace;

/// Writes the namespace to `path`: a temporary file beside it, synced and renamed. `ns` must
/// not change meanwhile (the daemon has stopped serving). On failure nothing replaces `path`
/// and the temporary file is removed.
pub fn save(ns: &IpcNamespace, backing: &MemfdBacking, path: &Path) -> io::Result<()> {
    let (file, tmp) = durable::create_temp(path)?;
    let written = (|| {
        let mut out = Out::new(file)?;
        objects::save_all(ns, backing, &mut out)?;
        durable::commit(out.finish()?, &tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The warning for the namespaces a save leaves out: every engine namespace other than the
/// daemon's own (made for clients in other kernel IPC namespaces) that holds objects, named by
/// its kernel namespace (`ipc:[INODE]`, as `/proc/PID/ns/ipc` shows it). None if there is none.
pub fn unsaved_warning(namespaces: &crate::namespaces::Namespaces) -> Option<String> {
    let mut lines = Vec::new();
    for (inode, processes, ns) in namespaces.others_listed() {
        let [sets, queues, segments] = objects::count_all(&ns);
        if sets + queues + segments > 0 {
            lines.push(format!(
                "  ipc:[{inode}] ({processes} processes): {sets} semaphore sets, {queues} \
                 queues, {segments} segments"
            ));
        }
    }
    if lines.is_empty() {
        return None;
    }
    Some(format!(
        "uipc serve: WARNING: --state saves only the daemon's own IPC namespace; the objects \
         of these other IPC namespaces are NOT saved and are lost:\n{}",
        lines.join("\n")
    ))
}

/// What the daemon says when a save failed: nothing replaced FILE, and it stays up, not
/// serving, with its objects in memory, until a later signal's save succeeds or SIGQUIT ends
/// it; the state it started from is still in FILE.consumed, for an operator to move back.
pub fn save_failed_message(path: &Path, e: &io::Error) -> String {
    let shown = path.display();
    let consumed = durable::with_suffix(path, ".consumed");
    format!(
        "uipc serve: saving {shown} FAILED: {e}. Nothing was saved and the objects are still \
         in this daemon's memory: it stays up, not serving. Fix the cause and send SIGTERM \
         (or SIGINT, SIGHUP) again to retry the save; SIGQUIT exits without saving, losing \
         them (the state this daemon started from, if any, is in {}: move it to {shown} to \
         start from it, with the changes made since lost).",
        consumed.display()
    )
}

/// What stopped a restore.
#[derive(Debug)]
pub enum RestoreError {
    /// The file is damaged (or another version): nothing was restored.
    Damaged(Damage),
    /// Reading the file, or recreating an object, failed.
    Failed(io::Error),
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestoreError::Damaged(d) => write!(f, "damaged: {d}"),
            RestoreError::Failed(e) => e.fmt(f),
        }
    }
}

/// Checks the state file at `path`, then recreates its objects in `ns` (which should be
/// empty). A damaged file restores nothing.
pub fn restore(ns: &IpcNamespace, path: &Path) -> Result<(), RestoreError> {
    let file = durable::open_state(path)
        .map_err(RestoreError::Failed)?
        .ok_or_else(|| RestoreError::Failed(io::ErrorKind::NotFound.into()))?;
    restore_file(ns, file)
}

fn restore_file(ns: &IpcNamespace, file: std::fs::File) -> Result<(), RestoreError> {
    format::verify(&file).map_err(RestoreError::Damaged)?;
    let failed = RestoreError::Failed;
    let mut inp = In::new(file).map_err(failed)?;
    objects::roomy_limits(ns).map_err(failed)?;
    let mut buf = vec![0u8; sparse::CHUNK];
    let mut tunables = Vec::new();
    loop {
        let tag = inp.u8().map_err(failed)?;
        if tag == END {
            if !inp.at_end() {
                let e = io::Error::new(io::ErrorKind::InvalidData, "state file malformed");
                return Err(failed(e));
            }
            break;
        }
        objects::restore_record(ns, tag, &mut inp, &mut buf, &mut tunables).map_err(failed)?;
    }
    objects::apply_tunables(ns, &tunables).map_err(failed)
}

/// The daemon's start with `--state path`: restores the file if there is one and renames it
/// FILE.consumed (durably) before returning, so the caller may serve. A damaged file stops
/// the start (the error says why), or with `discard_damaged` is renamed FILE.damaged and the
/// start goes on empty. What it did is told on stderr.
pub fn restore_at_start(ns: &IpcNamespace, path: &Path, discard_damaged: bool) -> io::Result<()> {
    let shown = path.display();
    let Some(file) = durable::open_state(path)? else {
        let consumed = durable::with_suffix(path, ".consumed");
        if consumed.exists() {
            eprintln!(
                "uipc serve: no state in {shown}; {} was consumed by an earlier start and \
                 nothing was saved since (the daemon did not stop cleanly): starting empty",
                consumed.display()
            );
        }
        return Ok(());
    };
    match restore_file(ns, file) {
        Ok(()) => {
            durable::set_aside(path, ".consumed")?;
            Ok(())
        }
        Err(RestoreError::Damaged(d)) if discard_damaged => {
            let aside = durable::set_aside_new(path, ".damaged")?;
            eprintln!(
                "uipc serve: state file {shown} is damaged ({d}); moved to {} and starting \
                 empty",
                aside.display()
            );
            Ok(())
        }
        Err(RestoreError::Damaged(d)) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "state file {shown} is damaged: {d}. It is left as it is; start with \
                 --state-discard-damaged to move it aside and start empty"
            ),
        )),
        Err(RestoreError::Failed(e)) => {
            Err(io::Error::new(e.kind(), format!("restoring {shown}: {e}")))
        }
    }
}
