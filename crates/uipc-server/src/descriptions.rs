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
//! closes. The daemon holds a reference of its own, so it looks for the others: every
//! process's `/proc/PID/fd` entries that are the same file (`stat` through the link) are
//! compared with `kcmp` across processes, the daemon's own process included except for the
//! table's copies (a descriptor received for a call in flight elsewhere in the daemon counts,
//! which only keeps locks a little longer). [`Descriptions::referenced`] does this for the
//! candidates of a close (minus the descriptor being closed), of a process exit, and of an
//! exec. A process whose descriptors the daemon may not read (another user's, without
//! privilege) is not seen; a `kcmp` refused for one that matched by file counts as a
//! reference (locks are kept rather than dropped wrongly).
//!
//! Lock order: the table's mutex -> a file's lock state (through
//! [`LockManager::list_file`]); nothing else is taken under the table's mutex. The `/proc`
//! scans run without it.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use uipc::locks::{FileId, LockManager, OfdId, OpenFile, Owner};
use uipc::Errno;

const KCMP_FILE: libc::c_int = 0;

/// `kcmp(pid1, pid2, KCMP_FILE, fd1, fd2)`: `Ok(Ordering)` of the two descriptions.
fn kcmp_file(pid1: i32, fd1: RawFd, pid2: i32, fd2: RawFd) -> Result<std::cmp::Ordering, Errno> {
    // SAFETY: kcmp only reads the two processes' descriptor tables.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid1, pid2, KCMP_FILE, fd1, fd2) };
    match r {
        0 => Ok(std::cmp::Ordering::Equal),
        1 => Ok(std::cmp::Ordering::Less),
        2 => Ok(std::cmp::Ordering::Greater),
        r if r < 0 => Err(Errno::from_raw(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        )),
        _ => Err(Errno::EINVAL),
    }
}

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
}

impl Default for Descriptions {
    fn default() -> Descriptions {
        Descriptions::new()
    }
}

fn owns_locks(locks: &LockManager, file: FileId, ofd: OfdId) -> bool {
    locks
        .list_file(file)
        .iter()
        .any(|l| l.owner == Owner::Description(ofd))
}

impl Descriptions {
    /// An empty table.
    pub fn new() -> Descriptions {
        Descriptions {
            table: Mutex::new(Table {
                entries: Vec::new(),
                next: 1,
            }),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        crate::sync::lock(&self.table)
    }

    /// The id of `fd`'s description, entered in the table if new, and counted as in use until
    /// [`Descriptions::release`]. ENOLCK if the descriptor cannot be compared or kept.
    pub fn acquire(&self, fd: &OwnedFd, file: FileId) -> Result<OfdId, Errno> {
        let mut t = self.table();
        match t.search(fd.as_raw_fd()).map_err(|_| Errno::ENOLCK)? {
            Ok(i) => {
                t.entries[i].users += 1;
                Ok(t.entries[i].ofd)
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

    /// Whether the table holds anything (a sweep has work only then).
    pub fn is_empty(&self) -> bool {
        self.table().entries.is_empty()
    }

    /// For each description in the table not in use by a call: whether a descriptor other
    /// than the table's own copies refers to it, in any process (the daemon's included, so that
    /// a daemon embedded in a client process counts that process's descriptors), not counting
    /// the descriptors in `except` (pid, fd). Returns the ids, files and answers.
    pub fn referenced(&self, except: &[(i32, RawFd)]) -> Vec<(OfdId, FileId, bool)> {
        let me = std::process::id() as i32;
        let mut own: Vec<RawFd> = Vec::new();
        let candidates: Vec<(OfdId, FileId, OwnedFd)> = {
            let t = self.table();
            own.extend(t.entries.iter().map(|e| e.fd.as_raw_fd()));
            t.entries
                .iter()
                .filter(|e| e.users == 0)
                .filter_map(|e| Some((e.ofd, e.file, e.fd.try_clone().ok()?)))
                .collect()
        };
        if candidates.is_empty() {
            return Vec::new();
        }
        // The copies made for this scan are the daemon's own too.
        own.extend(candidates.iter().map(|(_, _, fd)| fd.as_raw_fd()));
        let mut found = vec![false; candidates.len()];
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return candidates
                .into_iter()
                .map(|(o, f, _)| (o, f, true))
                .collect();
        };
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for f in fds.flatten() {
                let Some(n) = f.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                if except.contains(&(pid, n)) || (pid == me && own.contains(&n)) {
                    continue;
                }
                let Ok(st) = std::fs::metadata(f.path()) else {
                    continue;
                };
                use std::os::unix::fs::MetadataExt;
                let id = FileId {
                    dev: st.dev(),
                    ino: st.ino(),
                };
                for (k, (_, file, ours)) in candidates.iter().enumerate() {
                    if found[k] || *file != id {
                        continue;
                    }
                    found[k] = !matches!(
                        kcmp_file(me, ours.as_raw_fd(), pid, n),
                        Ok(o) if o != std::cmp::Ordering::Equal
                    );
                }
            }
        }
        candidates
            .into_iter()
            .zip(found)
            .map(|((o, f, _), r)| (o, f, r))
            .collect()
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
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::{AsFd, FromRawFd};

    /// # Safety
    /// `fd` must be open and owned by nobody else.
    unsafe fn adopt(fd: RawFd) -> OwnedFd {
        // SAFETY: the caller's obligation.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    fn temp() -> File {
        tempfile_in_dev_shm()
    }

    fn tempfile_in_dev_shm() -> File {
        let path = std::env::temp_dir().join(format!(
            "uipc-desc-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    #[test]
    fn a_dup_is_the_same_description_and_a_second_open_is_not() {
        let locks = LockManager::new();
        let d = Descriptions::new();
        let a = temp();
        let file = open_file_of(a.as_raw_fd()).unwrap().file;
        let dup = a.as_fd().try_clone_to_owned().unwrap();
        let reopened = File::open(format!("/proc/self/fd/{}", a.as_raw_fd())).unwrap();
        let id = d
            .acquire(&a.as_fd().try_clone_to_owned().unwrap(), file)
            .unwrap();
        assert_eq!(d.acquire(&dup, file).unwrap(), id);
        let other = d
            .acquire(&reopened.as_fd().try_clone_to_owned().unwrap(), file)
            .unwrap();
        assert_ne!(other, id);
        assert_eq!(d.find(dup.as_raw_fd()), Some(id));
        d.release(id, &locks);
        d.release(id, &locks);
        d.release(other, &locks);
        // No locks: nothing is kept.
        assert_eq!(d.len(), 0);
        assert_eq!(d.find(dup.as_raw_fd()), None);
    }

    #[test]
    fn o_path_descriptors_are_not_lockable() {
        let f = temp();
        let p = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        // SAFETY: opens a NUL-terminated path.
        let raw = unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor.
        let o = unsafe { adopt(raw) };
        assert!(open_file_of(o.as_raw_fd()).is_none());
        let of = open_file_of(f.as_raw_fd()).unwrap();
        assert!(of.readable && of.writable);
    }

    #[test]
    fn another_process_holding_the_description_counts_as_a_reference() {
        let locks = LockManager::new();
        let d = Descriptions::new();
        let f = temp();
        let file = open_file_of(f.as_raw_fd()).unwrap().file;
        let id = d
            .acquire(&f.as_fd().try_clone_to_owned().unwrap(), file)
            .unwrap();
        d.users_zero_for_test(id);
        // This process holds it through `f`; without `f`, only the table's copy is left.
        let me = std::process::id() as i32;
        let mine = [(me, f.as_raw_fd())];
        assert_eq!(d.referenced(&[]), vec![(id, file, true)]);
        assert_eq!(d.referenced(&mine), vec![(id, file, false)]);
        // A child holding it (inherited across fork) is a reference.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .stdin(std::process::Stdio::from(
                f.as_fd().try_clone_to_owned().unwrap(),
            ))
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert_eq!(d.referenced(&mine), vec![(id, file, true)]);
        assert_eq!(d.referenced(&[mine[0], (pid, 0)]), vec![(id, file, false)]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(d.referenced(&mine), vec![(id, file, false)]);
        d.forget(id);
        assert_eq!(d.len(), 0);
        drop(locks);
    }

    impl Descriptions {
        fn users_zero_for_test(&self, ofd: OfdId) {
            let mut t = self.table();
            for e in t.entries.iter_mut().filter(|e| e.ofd == ofd) {
                e.users = 0;
            }
        }
    }
}
