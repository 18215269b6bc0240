//! Open file descriptions seen through the descriptors clients send with their lock calls.
//!
//! OFD and flock locks belong to an open file description (what `open` creates and `dup` and
//! `fork` share), so the daemon must recognise one description behind different descriptors,
//! in different processes, over time. Each lock call carries the client's descriptor
//! (SCM_RIGHTS); the daemon's copy refers to the same description. Two descriptors of the
//! daemon are compared with `kcmp(KCMP_FILE)` (always allowed within one process), whose result
//! orders descriptions, so the table is a vector sorted by that order and found by binary
//! search.
//!
//! The table keeps its own descriptor for a description only while the description may own
//! locks: from the first lock call through it (counted in `users` while calls are in
//! flight) until a call, close or sweep finds it owns no OFD or flock lock and no blocked
//! request. Keeping the descriptor keeps the description alive, so `kcmp`'s order of two
//! entries never changes and a description's [`OfdId`] is never reused while it matters.
//!
//! Last close: Linux drops a description's OFD and flock locks when its last descriptor
//! closes. The daemon holds a reference of its own, so it looks for the others
//! ([`Descriptions::referenced`], through [`crate::fdscan`]) for the candidates of a close (minus
//! the descriptor being closed), of a process exit, of an exec, and of a conflicting call (the
//! descriptions of that call's file only; a sweep asks only about descriptions that hold a
//! lock or wait for one, `lockserve::sweep`). Proof of a reference is cheap and proof of none is
//! not, so the search goes from cheap to complete and stops at the first proof:
//! - the entry's witness, the `(pid, fd)` where the description was last seen (one `kcmp`);
//! - the descriptors of the processes that made lock calls through it (the last few callers);
//! - every process's `/proc/PID/fd` entries of the same file (`stat` through the link), the
//!   daemon's own process included except for the table's copies and the copies the search
//!   made (a descriptor received for a call in flight elsewhere in the daemon counts, which
//!   only keeps locks a little longer). One search at a time (the search gate): the copies
//!   of a search running beside it would count, and two sweeps of one description, each
//!   seeing the other's copy, would both keep its locks with nothing left to look again.
//!
//! Before that last step a sweep asks again whether the description still holds a lock or
//! waits for one: the search may have lost its core for a while, and one whose lock went
//! meanwhile (its holder unlocked, then exited) has nothing to drop, so it is kept without a
//! scan of every process.
//!
//! Only a `kcmp` that says "equal" is a witness, and it is checked again at each use, so a
//! witness never decides alone that a description is gone: the answer "unreferenced" always
//! comes from the complete scan, as exact as before the cheaper steps. Witnesses in the daemon's
//! own process are not kept (its descriptor numbers are reused by the table's copies). A
//! process whose descriptors the daemon may not read (another user's, without privilege) is
//! not seen; a `kcmp` refused for one that matched by file counts as a reference (locks are
//! kept rather than dropped wrongly).
//!
//! Lock order: the search gate -> the table's mutex -> a file's lock state (through
//! [`LockManager::owns_any`]); nothing else is taken under the table's mutex. Witness checks
//! (one `kcmp` each) run under it; the `/proc` scans run without it.

use crate::fdscan::{kcmp_file, Search};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use uipc::locks::{FileId, LockManager, OfdId, OpenFile, Owner};
use uipc::Errno;

fn fstat(fd: RawFd) -> Option<libc::stat> {
    // SAFETY: zeroed stat is valid output space; any descriptor number is safe to pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
}

/// The file and access of descriptor `fd` as the lock engine needs them; `None` for an
/// `O_PATH` descriptor (EBADF for lock calls, as on Linux). `ofd` is filled in later.
pub fn open_file_of(fd: RawFd) -> Option<OpenFile> {
    // SAFETY: F_GETFL on our own descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || flags & libc::O_PATH != 0 {
        return None;
    }
    let st = fstat(fd)?;
    // SAFETY: reads the shared offset of our own descriptor's description; unseekable files
    // (pipes, sockets) report an error and count as offset 0.
    let offset = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) }.max(0);
    let mode = flags & libc::O_ACCMODE;
    Some(OpenFile {
        file: FileId {
            dev: st.st_dev,
            ino: st.st_ino,
        },
        ofd: OfdId(0),
        readable: mode == libc::O_RDONLY || mode == libc::O_RDWR,
        writable: mode == libc::O_WRONLY || mode == libc::O_RDWR,
        offset,
        size: st.st_size,
    })
}

struct Entry {
    ofd: OfdId,
    file: FileId,
    fd: OwnedFd,
    users: usize,
    /// Where another process was last seen holding the description (checked at each use).
    witness: Option<(i32, RawFd)>,
    /// The last few processes that made lock calls through it, most recent first.
    callers: Vec<i32>,
}

/// How many recent callers an entry remembers.
const CALLERS: usize = 4;

/// Which unused entries [`Descriptions::referenced`] looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// All of them.
    All,
    /// Those of one file.
    File(FileId),
    /// One description.
    One(OfdId),
}

impl Scope {
    fn covers(self, e: &Entry) -> bool {
        match self {
            Scope::All => true,
            Scope::File(f) => e.file == f,
            Scope::One(o) => e.ofd == o,
        }
    }
}

struct Table {
    entries: Vec<Entry>,
    next: u64,
}

impl Table {
    /// Where `fd`'s description is (Ok) or would go (Err).
    fn search(&self, fd: RawFd) -> Result<Result<usize, usize>, Errno> {
        let me = std::process::id() as i32;
        let (mut lo, mut hi) = (0, self.entries.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match kcmp_file(me, self.entries[mid].fd.as_raw_fd(), me, fd)? {
                std::cmp::Ordering::Equal => return Ok(Ok(mid)),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        Ok(Err(lo))
    }
}

/// The descriptions that may own locks; see the module doc.
pub struct Descriptions {
    table: Mutex<Table>,
    /// Held through [`Descriptions::referenced_then`]: one search at a time.
    search_gate: Mutex<()>,
    /// Close-on-exec descriptors of processes about to exec.
    pub exec: crate::execclose::ExecCloses,
}

impl Default for Descriptions {
    fn default() -> Descriptions {
        Descriptions::new()
    }
}

fn owns_locks(locks: &LockManager, file: FileId, ofd: OfdId) -> bool {
    locks.owns_any(file, Owner::Description(ofd))
}

impl Descriptions {
    /// An empty table.
    pub fn new() -> Descriptions {
        Descriptions {
            table: Mutex::new(Table {
                entries: Vec::new(),
                next: 1,
            }),
            search_gate: Mutex::new(()),
            exec: Default::default(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        crate::sync::lock(&self.table)
    }

    /// The id of `fd`'s description, entered in the table if new, and counted as in use until
    /// [`Descriptions::release`]; `caller` (the calling process) is remembered as a place to
    /// look for the description. ENOLCK if the descriptor cannot be compared or kept.
    pub fn acquire(&self, fd: &OwnedFd, file: FileId, caller: i32) -> Result<OfdId, Errno> {
        let mut t = self.table();
        match t.search(fd.as_raw_fd()).map_err(|_| Errno::ENOLCK)? {
            Ok(i) => {
                let e = &mut t.entries[i];
                e.users += 1;
                if e.callers.first() != Some(&caller) {
                    e.callers.retain(|&p| p != caller);
                    e.callers.truncate(CALLERS - 1);
                    e.callers.insert(0, caller);
                }
                Ok(e.ofd)
            }
            Err(at) => {
                let kept = fd.as_fd().try_clone_to_owned().map_err(|_| Errno::ENOLCK)?;
                let ofd = OfdId(t.next);
                t.next += 1;
                t.entries.insert(
                    at,
                    Entry {
                        ofd,
                        file,
                        fd: kept,
                        users: 1,
                        witness: None,
                        callers: vec![caller],
                    },
                );
                Ok(ofd)
            }
        }
    }

    /// Ends a use begun by [`Descriptions::acquire`]; the entry goes if no call uses it and its
    /// description owns no lock or blocked request.
    pub fn release(&self, ofd: OfdId, locks: &LockManager) {
        let mut t = self.table();
        if let Some(i) = t.entries.iter().position(|e| e.ofd == ofd) {
            t.entries[i].users -= 1;
            if t.entries[i].users == 0 && !owns_locks(locks, t.entries[i].file, ofd) {
                t.entries.remove(i);
            }
        }
    }

    /// The id of `fd`'s description if the table has it.
    pub fn find(&self, fd: RawFd) -> Option<OfdId> {
        let t = self.table();
        match t.search(fd) {
            Ok(Ok(i)) => Some(t.entries[i].ofd),
            _ => None,
        }
    }

    /// The number of the table's own descriptor of `ofd`, while the table keeps it (a flock
    /// lease names the description by it: see `uipc::locks::flockfast`).
    pub fn copy_of(&self, ofd: OfdId) -> Option<RawFd> {
        let t = self.table();
        t.entries
            .iter()
            .find(|e| e.ofd == ofd)
            .map(|e| e.fd.as_raw_fd())
    }

    /// Whether the table holds anything (a sweep has work only then).
    pub fn is_empty(&self) -> bool {
        self.table().entries.is_empty()
    }

    /// For each description in `scope` not in use by a call: whether a descriptor other than
    /// the table's own copies refers to it, in any process (the daemon's included, so that a
    /// daemon embedded in a client process counts that process's descriptors), not counting
    /// the descriptors in `except` (pid, fd). Returns the ids, files and answers. See the
    /// module doc for the order of the search.
    pub fn referenced(&self, scope: Scope, except: &[(i32, RawFd)]) -> Vec<(OfdId, FileId, bool)> {
        self.referenced_then(scope, except, &|_, _| true, &|| {})
    }

    /// [`Descriptions::referenced`] of the entries in `scope` for which `asked` (called with
    /// the table's mutex held, so it may take a file's lock state but nothing that leads back
    /// to the table; and once more, without it, before every process's descriptors are
    /// read) says yes (an entry it no longer says yes to by then counts as referenced: kept),
    /// running `before_search` first if any description needs more than its witness's one
    /// kcmp (its callers' descriptors or every process's are read): what may take a while.
    pub fn referenced_then(
        &self,
        scope: Scope,
        except: &[(i32, RawFd)],
        asked: &dyn Fn(FileId, OfdId) -> bool,
        before_search: &dyn Fn(),
    ) -> Vec<(OfdId, FileId, bool)> {
        let _one_search = crate::sync::lock(&self.search_gate);
        let me = std::process::id() as i32;
        let mut out = Vec::new();
        let mut own: Vec<RawFd> = Vec::new();
        let mut pending: Vec<(OfdId, FileId, OwnedFd, Vec<i32>)> = Vec::new();
        {
            let mut t = self.table();
            own.extend(t.entries.iter().map(|e| e.fd.as_raw_fd()));
            for e in t.entries.iter_mut() {
                if e.users > 0 || !scope.covers(e) || !asked(e.file, e.ofd) {
                    continue;
                }
                if let Some(w) = e.witness {
                    let sought = [(e.fd.as_raw_fd(), e.file)];
                    if Search::new(&sought, except, &own).check(0, w) {
                        out.push((e.ofd, e.file, true));
                        continue;
                    }
                    e.witness = None;
                }
                if let Ok(fd) = e.fd.try_clone() {
                    pending.push((e.ofd, e.file, fd, e.callers.clone()));
                }
            }
        }
        if pending.is_empty() {
            return out;
        }
        before_search();
        // The copies made for this search are the daemon's own too.
        own.extend(pending.iter().map(|p| p.2.as_raw_fd()));
        let sought: Vec<(RawFd, FileId)> = pending.iter().map(|p| (p.2.as_raw_fd(), p.1)).collect();
        let mut search = Search::new(&sought, except, &own);
        for (k, p) in pending.iter().enumerate() {
            for &pid in p.3.iter().filter(|&&pid| pid != me) {
                if search.in_process(k, pid) {
                    break;
                }
            }
            // Asked again before the scan of every process: the search may have been
            // descheduled since the first ask, and a lock dropped since (by an unlock, or by
            // its holder's exit) leaves nothing to look for. Kept, it costs nothing.
            if search.found[k].is_none() && !asked(p.1, p.0) {
                search.found[k] = Some(None);
            }
        }
        search.everywhere();
        let found = search.found;
        let mut t = self.table();
        for (p, seen) in pending.iter().zip(&found) {
            if let Some(Some((pid, fd))) = *seen {
                if pid != me {
                    if let Some(e) = t.entries.iter_mut().find(|e| e.ofd == p.0) {
                        e.witness = Some((pid, fd));
                    }
                }
            }
            out.push((p.0, p.1, seen.is_some()));
        }
        out
    }

    /// Drops the entry of `ofd` if no call uses it (its locks were just dropped).
    pub fn forget(&self, ofd: OfdId) {
        let mut t = self.table();
        if let Some(i) = t.entries.iter().position(|e| e.ofd == ofd && e.users == 0) {
            t.entries.remove(i);
        }
    }

    /// Drops every unused entry whose description no longer owns a lock.
    pub fn prune(&self, locks: &LockManager) {
        let mut t = self.table();
        t.entries
            .retain(|e| e.users > 0 || owns_locks(locks, e.file, e.ofd));
    }

    /// How many descriptions the table keeps (tests).
    pub fn len(&self) -> usize {
        self.table().entries.len()
    }
}

#[cfg(test)]
mod tests;
