//! IPC namespaces: one engine [`IpcNamespace`] per kernel IPC namespace the clients live in.
//!
//! The kernel does the bookkeeping: a client's `unshare(CLONE_NEWIPC)`, `clone(CLONE_NEWIPC)`
//! or `setns` moves it into another kernel IPC namespace, and the daemon reads which one from
//! `/proc/PID/ns/ipc` (its inode number) when a connection says Hello ([`Namespaces::join`]).
//! The connection serves that namespace for its whole life; the library opens new connections
//! after an unshare or setns (and a cloned child has connections of its own). So the
//! namespace a call acts on is the one the kernel says its process is in, never the client's
//! word, and a call costs nothing more.
//!
//! The daemon's own kernel namespace maps to the namespace it was started with (`home`, the
//! one `--state` saves), never dropped; any other is made, empty with Linux's defaults, at its
//! first client, and dropped when the last process that used it exits (its segments' memory
//! goes with it, as Linux frees an IPC namespace's objects at its end). If `/proc/PID/ns/ipc`
//! cannot be read (a daemon not allowed to look at another user's process), the connection
//! serves `home`.
//!
//! Lock: the map's mutex is a leaf (no engine call is made while holding it; the engine's
//! exit rules run after it is released).

use crate::memfd::MemfdBacking;
use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use uipc::ipc::{IpcNamespace, NamespaceOptions};

/// A kernel IPC namespace's inode number.
type NsId = u64;

struct Entry {
    ns: Arc<IpcNamespace>,
    /// Processes that connected from it and have not exited.
    members: HashSet<i32>,
}

struct Map {
    by_id: HashMap<NsId, Entry>,
    /// The namespaces each live process used, last one last.
    of_pid: HashMap<i32, Vec<NsId>>,
}

/// Every namespace the daemon serves.
pub struct Namespaces {
    home_id: Option<NsId>,
    home: Arc<IpcNamespace>,
    backing: Arc<MemfdBacking>,
    /// Each namespace made gets a semaphore fast-path arena (`crate::arena`).
    fast: bool,
    map: Mutex<Map>,
}

/// The kernel IPC namespace of process `pid` (`self` for the daemon).
/// An empty engine namespace whose segments live in `backing`, with a semaphore fast-path
/// arena and a key table (`crate::arena`) if `fast` and they can be made: the daemon's first namespace and every
/// one made later are made alike.
pub fn engine_namespace(backing: &Arc<MemfdBacking>, fast: bool) -> IpcNamespace {
    let f = fast.then(crate::arena::new_arena).flatten();
    IpcNamespace::with_options(NamespaceOptions {
        shm_backing: Some(backing.clone()),
        sem_arena: f.as_ref().map(|f| f.sem.clone()),
        msg_arena: f.as_ref().map(|f| f.msg.clone()),
        key_table: f.map(|f| f.keys),
        ..Default::default()
    })
}

/// The kernel IPC namespace of the process of `pidfd` (the inode number `/proc/PID/ns/ipc`
/// names), read through the pidfd (`PIDFD_GET_IPC_NAMESPACE`, Linux 6.11: no path walk
/// through `/proc`); `None` if the kernel cannot tell (an older kernel, a process gone).
pub fn ns_of_pidfd(pidfd: std::os::fd::BorrowedFd<'_>) -> Option<NsId> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    /// `_IO(PIDFS_IOCTL_MAGIC, 2)`.
    const PIDFD_GET_IPC_NAMESPACE: libc::c_ulong = 0xFF02;
    // SAFETY: an ioctl without argument on a live pidfd; it returns a new descriptor.
    let ns = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_IPC_NAMESPACE, 0) };
    if ns < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let ns = unsafe { OwnedFd::from_raw_fd(ns) };
    // SAFETY: a zeroed `stat` is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of our descriptor into a live `stat`.
    (unsafe { libc::fstat(ns.as_raw_fd(), &mut st) } == 0).then_some(st.st_ino)
}

fn ns_of(pid: &str) -> Option<NsId> {
    std::fs::metadata(format!("/proc/{pid}/ns/ipc"))
        .ok()
        .map(|m| m.ino())
}

impl Namespaces {
    /// Serves `home` for the daemon's own kernel namespace; `fast`: the namespaces made later
    /// get a semaphore fast-path arena.
    pub fn new(home: IpcNamespace, backing: Arc<MemfdBacking>, fast: bool) -> Namespaces {
        Namespaces {
            home_id: ns_of("self"),
            home: Arc::new(home),
            backing,
            fast,
            map: Mutex::new(Map {
                by_id: HashMap::new(),
                of_pid: HashMap::new(),
            }),
        }
    }

    /// The namespace the daemon started with.
    pub fn home(&self) -> &Arc<IpcNamespace> {
        &self.home
    }

    /// A connection of process `pid` starts: the namespace it serves, that of kernel IPC
    /// namespace `id` (its inode number, read through the process's pidfd) or, if that could
    /// not be read, of `/proc/PID/ns/ipc`. If the process used another namespace before (it
    /// ran unshare or setns since), the namespace it left applies its SEM_UNDO list, as
    /// Linux's unshare(CLONE_NEWIPC) does.
    pub fn join(&self, pid: i32, id: Option<NsId>) -> Arc<IpcNamespace> {
        let id = id.or_else(|| ns_of(&pid.to_string()));
        self.note(pid, id.filter(|&id| Some(id) != self.home_id))
    }

    fn note(&self, pid: i32, id: Option<NsId>) -> Arc<IpcNamespace> {
        let key = id.unwrap_or(0);
        let (ns, left) = {
            let mut map = lock(&self.map);
            let ns = match id {
                None => self.home.clone(),
                Some(id) => {
                    let entry = map.by_id.entry(id).or_insert_with(|| Entry {
                        ns: Arc::new(engine_namespace(&self.backing, self.fast)),
                        members: HashSet::new(),
                    });
                    entry.members.insert(pid);
                    entry.ns.clone()
                }
            };
            let used = map.of_pid.entry(pid).or_default();
            let left = match used.last() {
                Some(&last) if last != key => Some(last),
                _ => None,
            };
            used.retain(|&u| u != key);
            used.push(key);
            let left = left.map(|l| self.get(&map, l));
            (ns, left)
        };
        if let Some(old) = left {
            old.process_left(pid);
        }
        ns
    }

    /// Fork: `child` is in its parent's namespace (the last one the parent used).
    pub fn fork(&self, parent: i32, child: i32) {
        let mut map = lock(&self.map);
        let key = map
            .of_pid
            .get(&parent)
            .and_then(|u| u.last().copied())
            .unwrap_or(0);
        if let Some(e) = map.by_id.get_mut(&key).filter(|_| key != 0) {
            e.members.insert(child);
        }
        map.of_pid.insert(child, vec![key]);
    }

    fn get(&self, map: &Map, key: NsId) -> Arc<IpcNamespace> {
        match map.by_id.get(&key) {
            Some(e) if key != 0 => e.ns.clone(),
            _ => self.home.clone(),
        }
    }

    /// Process `pid` exited: the exit rules of every namespace it used; a namespace other
    /// than `home` that has no process left is dropped.
    pub fn process_exit(&self, pid: i32) {
        let (used, dropped) = {
            let mut map = lock(&self.map);
            let keys = map.of_pid.remove(&pid).unwrap_or_default();
            let used: Vec<_> = keys.iter().map(|&k| self.get(&map, k)).collect();
            let mut dropped = Vec::new();
            for k in keys.into_iter().filter(|&k| k != 0) {
                if let Some(e) = map.by_id.get_mut(&k) {
                    e.members.remove(&pid);
                    if e.members.is_empty() {
                        dropped.extend(map.by_id.remove(&k));
                    }
                }
            }
            (used, dropped)
        };
        if used.is_empty() {
            self.home.process_exit(pid);
        }
        for ns in used {
            ns.process_exit(pid);
        }
        // Dropped outside the lock: freeing segments closes their memfds.
        drop(dropped);
    }

    /// The namespaces other than `home`: each one's kernel inode and live processes.
    pub fn others_listed(&self) -> Vec<(u64, usize, Arc<IpcNamespace>)> {
        lock(&self.map)
            .by_id
            .iter()
            .map(|(&id, e)| (id, e.members.len(), e.ns.clone()))
            .collect()
    }

    /// How many namespaces other than `home` are alive (tests).
    pub fn others(&self) -> usize {
        lock(&self.map).by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procs::pidfd_open;
    use uipc::Cred;

    #[test]
    fn the_daemons_own_namespace_is_home_and_exits_apply_there() {
        let backing = Arc::new(MemfdBacking::new());
        let nss = Namespaces::new(IpcNamespace::new(), backing, false);
        let me = std::process::id() as i32;
        let ns = nss.join(me, None);
        assert!(Arc::ptr_eq(&ns, nss.home()));
        assert_eq!(nss.others(), 0);
        ns.semget(&Cred::root(me), 5, 1, 0o1600).unwrap();
        nss.process_exit(me);
        assert_eq!(nss.home().proc_sysvipc_sem().lines().count(), 2);
    }

    #[test]
    fn the_pidfd_names_the_namespace_proc_names() {
        use std::os::fd::AsFd;
        // Its child holds copies of the test process's descriptors until its close_range.
        let _serial = crate::serial_scans_and_forks();
        let me = std::process::id() as i32;
        let mine = ns_of_pidfd(pidfd_open(me).unwrap().as_fd());
        assert_eq!(mine, ns_of("self"));
        // A child in a new IPC namespace (root only; elsewhere unshare fails and the child
        // stays in ours, which the comparison with /proc still checks).
        let mut go = [0i32; 2];
        // SAFETY: a pipe into a live array, then a fork whose child only makes system calls.
        let child = unsafe {
            assert_eq!(libc::pipe(go.as_mut_ptr()), 0);
            libc::fork()
        };
        if child == 0 {
            // SAFETY: the child keeps only the pipe's read end (so that it holds no copy of
            // a descriptor another test counts references to), unshares, waits for the pipe's
            // end of file and exits.
            unsafe {
                let keep = go[0] as u32;
                libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
                libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
                libc::unshare(libc::CLONE_NEWIPC);
                let mut b = 0u8;
                libc::read(go[0], (&mut b as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        let fd = pidfd_open(child).unwrap();
        // Wait until the child has unshared (if it can): its /proc link changes.
        let unshared = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            ns_of(&child.to_string()) != mine
        });
        let theirs = ns_of_pidfd(fd.as_fd());
        assert_eq!(theirs, ns_of(&child.to_string()));
        // SAFETY: our own descriptors and child.
        unsafe {
            libc::close(go[1]);
            libc::close(go[0]);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        if unshared {
            assert_ne!(theirs, mine);
        }
        assert!(
            mine.is_some(),
            "this kernel has PIDFD_GET_IPC_NAMESPACE (6.11+)"
        );
    }
}
