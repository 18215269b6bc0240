//! Looking for descriptors of given open file descriptions in processes' descriptor tables,
//! through `/proc/PID/fd` and `kcmp(KCMP_FILE)`.
//!
//! [`Search`] answers, for a set of descriptions (each known by a descriptor of the daemon's
//! own), which one some other descriptor refers to, and where: a `(pid, fd)` pair that is
//! proof at the moment `kcmp` said "equal". Three ways to look, from cheap to complete:
//! [`Search::check`] one known pair (one `kcmp`), [`Search::in_process`] one process's
//! descriptors (its `/proc/PID/fd` listing and a `kcmp` per descriptor), and
//! [`Search::everywhere`] every process's (a `stat` through each link first, so that only
//! descriptors of the same file are compared). A `kcmp` refused for a descriptor of the same
//! file counts as a reference without a place (locks are kept rather than dropped wrongly).
//!
//! Descriptors listed in `except` and the daemon's own descriptors in `own` are never counted.
//! Nothing here takes a lock.

use std::os::fd::RawFd;
use uipc::locks::FileId;
use uipc::Errno;

const KCMP_FILE: libc::c_int = 0;

/// `kcmp(pid1, pid2, KCMP_FILE, fd1, fd2)`: `Ok(Ordering)` of the two descriptions.
pub fn kcmp_file(
    pid1: i32,
    fd1: RawFd,
    pid2: i32,
    fd2: RawFd,
) -> Result<std::cmp::Ordering, Errno> {
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

/// Where a description was seen: a process and its descriptor number, or nowhere in
/// particular (a refused `kcmp` on a descriptor of the same file).
pub type Seen = Option<(i32, RawFd)>;

/// One search: the descriptions sought (the daemon's descriptor and the file of each) and
/// what was found so far.
pub struct Search<'a> {
    /// The daemon's pid.
    me: i32,
    /// The descriptions sought: the daemon's descriptor of each and its file.
    sought: &'a [(RawFd, FileId)],
    /// Descriptors that do not count.
    except: &'a [(i32, RawFd)],
    /// The daemon's own descriptors that do not count (its table's copies).
    own: &'a [RawFd],
    /// `found[k]`: where `sought[k]` was seen, if it was.
    pub found: Vec<Option<Seen>>,
}

/// A process's descriptor numbers, from its `/proc/PID/fd` listing.
fn fds_of(pid: i32) -> Vec<RawFd> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|f| f.file_name().to_str()?.parse().ok())
        .collect()
}

impl<'a> Search<'a> {
    /// A search with nothing found yet.
    pub fn new(
        sought: &'a [(RawFd, FileId)],
        except: &'a [(i32, RawFd)],
        own: &'a [RawFd],
    ) -> Search<'a> {
        Search {
            me: std::process::id() as i32,
            sought,
            except,
            own,
            found: vec![None; sought.len()],
        }
    }

    /// Whether every description sought has been seen.
    pub fn done(&self) -> bool {
        self.found.iter().all(Option::is_some)
    }

    fn counts(&self, pid: i32, fd: RawFd) -> bool {
        let own = pid == self.me && self.own.contains(&fd);
        !own && !self.except.contains(&(pid, fd))
    }

    /// Whether descriptor `fd` of `pid` is description `k`: proof that it is still referenced.
    pub fn check(&mut self, k: usize, (pid, fd): (i32, RawFd)) -> bool {
        if self.found[k].is_none()
            && self.counts(pid, fd)
            && kcmp_file(self.me, self.sought[k].0, pid, fd) == Ok(std::cmp::Ordering::Equal)
        {
            self.found[k] = Some(Some((pid, fd)));
        }
        self.found[k].is_some()
    }

    /// Looks for description `k` among `pid`'s descriptors (no `stat`: `kcmp` compares
    /// descriptions of any file); whether `k` is found now.
    pub fn in_process(&mut self, k: usize, pid: i32) -> bool {
        for fd in fds_of(pid) {
            if self.check(k, (pid, fd)) {
                return true;
            }
        }
        self.found[k].is_some()
    }

    /// Looks for every description not seen yet in every process's descriptors, the daemon's
    /// own included.
    pub fn everywhere(&mut self) {
        if self.done() {
            return;
        }
        let Ok(procs) = std::fs::read_dir("/proc") else {
            // Nothing can be proved unreferenced: everything counts as referenced.
            for f in self.found.iter_mut().filter(|f| f.is_none()) {
                *f = Some(None);
            }
            return;
        };
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            for n in fds_of(pid) {
                if !self.counts(pid, n) {
                    continue;
                }
                let Ok(st) = std::fs::metadata(format!("/proc/{pid}/fd/{n}")) else {
                    continue;
                };
                use std::os::unix::fs::MetadataExt;
                let id = FileId {
                    dev: st.dev(),
                    ino: st.ino(),
                };
                for (k, (ours, file)) in self.sought.iter().enumerate() {
                    if self.found[k].is_some() || *file != id {
                        continue;
                    }
                    match kcmp_file(self.me, *ours, pid, n) {
                        Ok(std::cmp::Ordering::Equal) => self.found[k] = Some(Some((pid, n))),
                        Ok(_) => {}
                        Err(_) => self.found[k] = Some(None),
                    }
                }
            }
            if self.done() {
                return;
            }
        }
    }
}
