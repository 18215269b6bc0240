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

    /// A connection of process `pid` starts: the namespace it serves. If the process used
    /// another namespace before (it ran unshare or setns since), the namespace it left applies
    /// its SEM_UNDO list, as Linux's unshare(CLONE_NEWIPC) does.
    pub fn join(&self, pid: i32) -> Arc<IpcNamespace> {
        self.note(
            pid,
            ns_of(&pid.to_string()).filter(|&id| Some(id) != self.home_id),
        )
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
    use uipc::Cred;

    #[test]
    fn the_daemons_own_namespace_is_home_and_exits_apply_there() {
        let backing = Arc::new(MemfdBacking::new());
        let nss = Namespaces::new(IpcNamespace::new(), backing, false);
        let me = std::process::id() as i32;
        let ns = nss.join(me);
        assert!(Arc::ptr_eq(&ns, nss.home()));
        assert_eq!(nss.others(), 0);
        ns.semget(&Cred::root(me), 5, 1, 0o1600).unwrap();
        nss.process_exit(me);
        assert_eq!(nss.home().proc_sysvipc_sem().lines().count(), 2);
    }
}
