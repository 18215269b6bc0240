//! Client processes: who they are and when they die.
//!
//! The first request from a pid opens a pidfd for it (`pidfd_open`) and watches it with the
//! [`Poller`]. Each request is served inside [`Procs::enter`] / [`ProcGuard`]: it counts as
//! in flight and registers the session's [`Interrupt`]. When the pidfd fires, the exit thread
//! marks the process dead (no new request enters), raises the interrupts of its requests in
//! flight (their blocking calls end with EINTR), waits for them to leave, and only then calls
//! the namespace's `process_exit`, so no request of the process can create SEM_UNDO state or
//! an attachment after its exit was applied. The record is then dropped; a later frame
//! carrying the same pid opens a new pidfd (and fails with ESRCH if nothing runs under it).
//!
//! Credentials: the kernel verifies the pid, effective uid and effective gid each frame
//! carries; the real and saved ids, supplementary groups, effective capabilities and
//! RLIMIT_MEMLOCK come from `/proc/PID/status` and `prlimit`, read when the frame's ids
//! differ from the cached ones. If the status file's effective ids do not match the verified
//! ones (the process changed ids since), the daemon trusts only the verified ids: no
//! capabilities, no supplementary groups.
//!
//! Lock order: `Procs::map` -> one `ProcState::inner`; the exit thread takes them one at a time.

use crate::poller::Poller;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use uipc::{CapSet, Cred, Errno, Interrupt};
use uipc_proto::transport::PeerCred;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One client process.
pub struct ProcState {
    /// Its pid (thread group id).
    pub pid: i32,
    pidfd: OwnedFd,
    inner: Mutex<ProcInner>,
    idle: Condvar,
}

struct ProcInner {
    dead: bool,
    inflight: u32,
    /// Interrupts of the requests in flight, by session id.
    interrupts: HashMap<u64, Interrupt>,
    /// Credentials built for the last verified ids seen.
    cred: Option<(PeerCred, Cred)>,
}

/// The table of client processes.
pub struct Procs {
    map: Mutex<HashMap<i32, Arc<ProcState>>>,
    poller: Arc<Poller>,
    exits: Sender<Arc<ProcState>>,
}

/// A request in flight for a process; leaving drops it.
pub struct ProcGuard {
    proc: Arc<ProcState>,
    session: u64,
}

impl Drop for ProcGuard {
    fn drop(&mut self) {
        let mut g = lock(&self.proc.inner);
        g.inflight -= 1;
        g.interrupts.remove(&self.session);
        if g.inflight == 0 {
            self.proc.idle.notify_all();
        }
    }
}

impl ProcGuard {
    /// The process.
    pub fn proc(&self) -> &Arc<ProcState> {
        &self.proc
    }
}

fn pidfd_open(pid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: plain syscall; a negative result is an error.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(Errno::ESRCH);
    }
    // SAFETY: a fresh pidfd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// Whether the process behind `pidfd` has exited (non-blocking).
fn has_exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

impl Procs {
    /// An empty table; exits are sent to `exits` (the exit thread, see [`Procs::finish_exit`]).
    pub fn new(poller: Arc<Poller>, exits: Sender<Arc<ProcState>>) -> Procs {
        Procs {
            map: Mutex::new(HashMap::new()),
            poller,
            exits,
        }
    }

    /// The live record of `pid`, if any.
    pub fn get(&self, pid: i32) -> Option<Arc<ProcState>> {
        let p = lock(&self.map).get(&pid).cloned()?;
        (!has_exited(&p.pidfd)).then_some(p)
    }

    /// Starts a request of process `pid` from session `session`: ESRCH if the process is gone.
    pub fn enter(&self, pid: i32, session: u64, irq: &Interrupt) -> Result<ProcGuard, Errno> {
        if pid <= 0 {
            return Err(Errno::ESRCH);
        }
        let proc = {
            let mut map = lock(&self.map);
            match map.get(&pid) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(ProcState {
                        pid,
                        pidfd: pidfd_open(pid)?,
                        inner: Mutex::new(ProcInner {
                            dead: false,
                            inflight: 0,
                            interrupts: HashMap::new(),
                            cred: None,
                        }),
                        idle: Condvar::new(),
                    });
                    let (p2, exits) = (p.clone(), self.exits.clone());
                    self.poller.watch(p.pidfd.as_raw_fd(), move || {
                        let _ = exits.send(p2);
                    });
                    map.insert(pid, p.clone());
                    p
                }
            }
        };
        let mut g = lock(&proc.inner);
        if g.dead {
            return Err(Errno::ESRCH);
        }
        g.inflight += 1;
        g.interrupts.insert(session, irq.clone());
        drop(g);
        Ok(ProcGuard { proc, session })
    }

    /// Run by the exit thread for a process whose pidfd fired: stops its requests, waits for
    /// them, applies `on_exit` (the namespace's exit rules) and forgets the process.
    pub fn finish_exit(&self, proc: &Arc<ProcState>, on_exit: impl FnOnce(i32)) {
        let mut g = lock(&proc.inner);
        g.dead = true;
        for irq in g.interrupts.values() {
            irq.raise();
        }
        while g.inflight > 0 {
            g = proc.idle.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        drop(g);
        on_exit(proc.pid);
        let mut map = lock(&self.map);
        if map.get(&proc.pid).is_some_and(|p| Arc::ptr_eq(p, proc)) {
            map.remove(&proc.pid);
        }
    }
}

impl ProcState {
    /// The engine identity for a frame with verified ids `peer`.
    pub fn cred(&self, peer: PeerCred) -> Cred {
        let mut g = lock(&self.inner);
        if let Some((p, c)) = &g.cred {
            if *p == peer {
                return c.clone();
            }
        }
        let c = read_cred(peer);
        g.cred = Some((peer, c.clone()));
        c
    }
}

/// Parses `/proc/PID/status` (ids, groups, CapEff) into a `Cred` for `peer`.
fn read_cred(peer: PeerCred) -> Cred {
    let mut cred = Cred {
        caps: CapSet::EMPTY,
        ..Cred::user(peer.pid, peer.uid, peer.gid)
    };
    let Ok(text) = std::fs::read_to_string(format!("/proc/{}/status", peer.pid)) else {
        return cred;
    };
    let ids = |line: &str| -> Vec<u32> {
        line.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let (mut uids, mut gids, mut groups, mut caps) = (vec![], vec![], vec![], None);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Uid:") {
            uids = ids(rest);
        } else if let Some(rest) = line.strip_prefix("Gid:") {
            gids = ids(rest);
        } else if let Some(rest) = line.strip_prefix("Groups:") {
            groups = ids(rest);
        } else if let Some(rest) = line.strip_prefix("CapEff:") {
            caps = u64::from_str_radix(rest.trim(), 16).ok();
        }
    }
    if uids.len() < 3 || gids.len() < 3 || uids[1] != peer.uid || gids[1] != peer.gid {
        return cred;
    }
    cred.uid = uids[0];
    cred.suid = uids[2];
    cred.gid = gids[0];
    cred.sgid = gids[2];
    cred.groups = groups;
    cred.caps = CapSet::from_bits(caps.unwrap_or(0));
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads another process's limit into a live struct; no new limit is set.
    if unsafe { libc::prlimit(peer.pid, libc::RLIMIT_MEMLOCK, std::ptr::null(), &mut lim) } == 0 {
        cred.rlimit_memlock = lim.rlim_cur;
    }
    cred
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_status_gives_root_caps_and_a_mismatched_euid_gives_none() {
        // SAFETY: plain getters.
        let (pid, euid, egid) = unsafe { (libc::getpid(), libc::geteuid(), libc::getegid()) };
        let me = read_cred(PeerCred {
            pid,
            uid: euid,
            gid: egid,
        });
        assert_eq!((me.euid, me.egid, me.tgid), (euid, egid, pid));
        if euid == 0 {
            assert!(me.has_cap(uipc::Cap::SYS_ADMIN));
        }
        let other = read_cred(PeerCred {
            pid,
            uid: euid + 1,
            gid: egid,
        });
        assert_eq!(other.caps, CapSet::EMPTY);
        assert_eq!(other.euid, euid + 1);
    }
}
