//! Client processes: who they are and when they die.
//!
//! The first request from a pid opens a pidfd for it (`pidfd_open`) and adds it to an epoll
//! set. Each request is served inside [`Procs::enter`] / [`ProcGuard`]: it counts as in flight
//! and registers the connection's (session's) [`Interrupt`]. A process's exit is handled by
//! whoever first sees its pidfd ready: the exit thread (blocked on the epoll set) or a worker,
//! which checks the set without waiting ([`Procs::reap_ready`]) before serving a request that
//! may follow an exit not yet applied (`crate::exits`).
//! The latter gives
//! Linux's ordering: a process that learns of an exit (its child was reaped, say) and then
//! calls finds the exit's effects applied, because its pidfd is ready before the parent can
//! reap it.
//!
//! Handling an exit: mark the process exiting (no new request enters), raise the interrupts
//! of its requests in flight, cancel its parked calls (each parked call registers a canceller
//! with its guard, [`ProcGuard::set_canceller`]; the exit handler runs it itself, so ending a
//! parked call never waits for a free worker), wait for the requests to leave, and only then
//! call the namespace's `process_exit`, so no request of the process can create SEM_UNDO
//! state or an attachment after its exit was applied. A call parked after the exit began
//! registers its canceller while the handler waits, which wakes the handler to run it. Then the record is dropped;
//! a thread that found the exit already claimed waits until it is done. A later frame
//! carrying the same pid opens a new pidfd (ESRCH if nothing runs under it; a zombie's
//! pidfd is ready at once, so its record is cleaned again right away).
//!
//! Credentials ([`cred_of`]), read for each call, nothing cached: the kernel verifies the pid,
//! effective uid and effective gid each frame carries; effective capabilities (`capget`, and
//! `/proc/PID/ns/user` to count them only within the daemon's user namespace) and
//! supplementary groups (`/proc/PID/status`) are read when a check of the call first needs
//! them, the real and saved ids and RLIMIT_MEMLOCK only for SHM_LOCK. If the status file's
//! effective ids do not match the verified ones (the process changed ids since, or the calling
//! thread's differ from the main thread's), the daemon trusts only the verified ids: no
//! supplementary groups.
//!
//! Lock order: `Procs::map` -> one `ProcState::inner`. An exit is handled with no guard held
//! by the handling thread, and cancellers run with no lock of this module held (they take a
//! connection's call slot, then drop a guard, which takes `inner`).

use crate::admission::Admission;
use crate::sync::lock;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex};
use uipc::{Cap, CapSet, Cred, Errno, Interrupt};
use uipc_proto::transport::PeerCred;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Life {
    Alive,
    Exiting,
    Gone,
}

/// One client process.
pub struct ProcState {
    /// Its pid (thread group id).
    pub pid: i32,
    pidfd: OwnedFd,
    inner: Mutex<ProcInner>,
    changed: Condvar,
}

struct ProcInner {
    life: Life,
    inflight: u32,
    /// Interrupts of the requests in flight, by session id.
    interrupts: HashMap<u64, Interrupt>,
    /// How to end the parked calls among them, by session id.
    cancellers: HashMap<u64, Canceller>,
}

/// The table of client processes.
pub struct Procs {
    map: Mutex<HashMap<i32, Arc<ProcState>>>,
    epoll: OwnedFd,
    admission: Admission,
}

/// Ends a parked call at once (EINTR) and answers it.
pub type Canceller = Arc<dyn Fn() + Send + Sync>;

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
        g.cancellers.remove(&self.session);
        // Only an exit waits on `changed` (for the last request in flight), and only once the
        // process is no longer alive: no wake-up system call per request otherwise.
        if g.inflight == 0 && g.life != Life::Alive {
            self.proc.changed.notify_all();
        }
    }
}

impl ProcState {
    /// The process's pidfd.
    pub fn pidfd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.pidfd)
    }
}

impl ProcGuard {
    /// The process.
    pub fn proc(&self) -> &Arc<ProcState> {
        &self.proc
    }

    /// The request is parked: an exit of the process runs `cancel` (with no lock held) to end
    /// it. Dropping the guard withdraws it.
    pub fn set_canceller(&self, cancel: Canceller) {
        let mut g = lock(&self.proc.inner);
        g.cancellers.insert(self.session, cancel);
        if g.life == Life::Exiting {
            self.proc.changed.notify_all();
        }
    }
}

/// A pidfd of process `pid` (ESRCH if there is none).
pub(crate) fn pidfd_open(pid: i32) -> Result<OwnedFd, Errno> {
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
    /// An empty table, which takes in the processes `admission` admits.
    pub fn new(admission: Admission) -> std::io::Result<Procs> {
        // SAFETY: plain syscall.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Procs {
            map: Mutex::new(HashMap::new()),
            // SAFETY: a fresh epoll descriptor owned by nobody else.
            epoll: unsafe { OwnedFd::from_raw_fd(raw) },
            admission,
        })
    }

    /// The live record of `pid`, if any.
    pub fn get(&self, pid: i32) -> Option<Arc<ProcState>> {
        let p = lock(&self.map).get(&pid).cloned()?;
        (!has_exited(&p.pidfd)).then_some(p)
    }

    /// Starts a request of process `pid` from session `session`: ESRCH if the process is gone.
    /// A process met for the first time must be admitted ([`Admission`]): `uid` is its
    /// verified effective uid, or None for a child its admitted parent announced (EACCES if
    /// refused).
    pub fn enter(
        &self,
        pid: i32,
        uid: Option<u32>,
        session: u64,
        irq: &Interrupt,
    ) -> Result<ProcGuard, Errno> {
        if pid <= 0 {
            return Err(Errno::ESRCH);
        }
        let proc = {
            let mut map = lock(&self.map);
            match map.get(&pid) {
                Some(p) => p.clone(),
                None => {
                    if let Some(uid) = uid {
                        let peer = PeerCred { pid, uid, gid: 0 };
                        if !self.admission.admits(peer) {
                            return Err(Errno::EACCES);
                        }
                    }
                    let p = Arc::new(ProcState {
                        pid,
                        pidfd: pidfd_open(pid)?,
                        inner: Mutex::new(ProcInner {
                            life: Life::Alive,
                            inflight: 0,
                            interrupts: HashMap::new(),
                            cancellers: HashMap::new(),
                        }),
                        changed: Condvar::new(),
                    });
                    let mut ev = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: pid as u32 as u64,
                    };
                    // SAFETY: registers a live pidfd with our epoll set.
                    let added = unsafe {
                        libc::epoll_ctl(
                            self.epoll.as_raw_fd(),
                            libc::EPOLL_CTL_ADD,
                            p.pidfd.as_raw_fd(),
                            &mut ev,
                        )
                    };
                    if added != 0 {
                        return Err(Errno::ENOMEM);
                    }
                    map.insert(pid, p.clone());
                    p
                }
            }
        };
        let mut g = lock(&proc.inner);
        if g.life != Life::Alive {
            return Err(Errno::ESRCH);
        }
        g.inflight += 1;
        g.interrupts.insert(session, irq.clone());
        drop(g);
        Ok(ProcGuard { proc, session })
    }

    /// Waits up to `timeout_ms` (-1: forever, 0: not at all) for exits and handles them with
    /// `on_exit` (the namespace's exit rules), after calling `before` once if there is any
    /// (handling one may wait for the process's requests in flight). Call with no
    /// [`ProcGuard`] held.
    /// Returns how many exits it found.
    pub fn reap_ready(&self, timeout_ms: i32, before: &dyn Fn(), on_exit: &dyn Fn(i32)) -> usize {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: `evs` is a live array of 16 events.
        let n =
            unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), evs.as_mut_ptr(), 16, timeout_ms) };
        if n > 0 {
            before();
        }
        for ev in evs.iter().take(n.max(0) as usize) {
            let pid = ev.u64 as u32 as i32;
            let proc = lock(&self.map).get(&pid).cloned();
            if let Some(p) = proc {
                if has_exited(&p.pidfd) {
                    self.finish_exit(&p, on_exit);
                }
            }
        }
        n.max(0) as usize
    }

    /// The exit set (an epoll set of pidfds), for the event loop to watch.
    pub fn exit_set(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn finish_exit(&self, proc: &Arc<ProcState>, on_exit: &dyn Fn(i32)) {
        let mut g = lock(&proc.inner);
        if g.life != Life::Alive {
            while g.life != Life::Gone {
                g = proc.changed.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            return;
        }
        g.life = Life::Exiting;
        for irq in g.interrupts.values() {
            irq.raise();
        }
        loop {
            let cancel: Vec<Canceller> = g.cancellers.drain().map(|(_, c)| c).collect();
            if !cancel.is_empty() {
                drop(g);
                for c in cancel {
                    c();
                }
                g = lock(&proc.inner);
                continue;
            }
            if g.inflight == 0 {
                break;
            }
            g = proc.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        drop(g);
        on_exit(proc.pid);
        // SAFETY: removes our pidfd from our epoll set (both live).
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                proc.pidfd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
        {
            let mut map = lock(&self.map);
            if map.get(&proc.pid).is_some_and(|p| Arc::ptr_eq(p, proc)) {
                map.remove(&proc.pid);
            }
        }
        lock(&proc.inner).life = Life::Gone;
        proc.changed.notify_all();
    }
}

/// The engine identity of a frame with verified ids `peer`, as the kernel judges the call now.
///
/// The effective uid and gid are the frame's (SCM_CREDENTIALS: the sending thread's, checked
/// by the kernel at the send). Capabilities and supplementary groups are read from the kernel
/// when a check first needs them ([`uipc::Lazy`]: [`read_caps`], [`read_groups`]), so a
/// capset(), setgroups() or change of user namespace counts from the next call, and most calls
/// (an owner using its object, a mode that grants the request) read nothing. With `full`
/// (SHM_LOCK, which charges the real uid and reads RLIMIT_MEMLOCK) the real and saved ids and
/// the limit are read from `/proc/PID/status` and `prlimit` too; otherwise they are the
/// effective ones, which no other call looks at.
pub fn cred_of(peer: PeerCred, full: bool) -> Cred {
    let mut cred = Cred {
        caps: CapSet::EMPTY,
        lazy_caps: Some(uipc::Lazy::new(read_caps)),
        lazy_groups: Some(uipc::Lazy::new(read_groups)),
        ..Cred::user(peer.pid, peer.uid, peer.gid)
    };
    if full {
        if let Some(status) = Status::read(&cred) {
            cred.uid = status.uid;
            cred.suid = status.suid;
            cred.gid = status.gid;
            cred.sgid = status.sgid;
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: reads another process's limit into a live struct; no new limit is set.
        if unsafe { libc::prlimit(peer.pid, libc::RLIMIT_MEMLOCK, std::ptr::null(), &mut lim) } == 0
        {
            cred.rlimit_memlock = lim.rlim_cur;
        }
    }
    cred
}

/// The capabilities that matter to the engine: none of them counts outside the daemon's user
/// namespace.
const ENGINE_CAPS: [Cap; 7] = [
    Cap::IPC_LOCK,
    Cap::IPC_OWNER,
    Cap::SYS_ADMIN,
    Cap::SYS_RESOURCE,
    Cap::LEASE,
    Cap::WAKE_ALARM,
    Cap::CHECKPOINT_RESTORE,
];

/// The caller's effective capabilities over the daemon's objects, now: its effective set
/// (`capget` of the process, which reads its main thread's) if it lives in the daemon's user
/// namespace, which owns the namespace served; none otherwise (Linux's `ns_capable` against
/// the IPC namespace's owner: capabilities a process holds in a user namespace of its own, as
/// after `unshare -Ur`, give nothing over the daemon's objects). A process in an ancestor of
/// the daemon's user namespace also gets none here (Linux would grant its capabilities there).
pub fn read_caps(cred: &Cred) -> CapSet {
    let mut head = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: cred.tgid.get(),
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with a v3 header and room for the two data structs it fills; it only
    // reads the target's sets.
    if unsafe { libc::syscall(libc::SYS_capget, &mut head, data.as_mut_ptr()) } != 0 {
        return CapSet::EMPTY;
    }
    let caps =
        CapSet::from_bits(u64::from(data[0].effective) | (u64::from(data[1].effective) << 32));
    if !ENGINE_CAPS.iter().any(|&c| caps.has(c)) || !in_daemon_user_ns(cred.tgid.get()) {
        return CapSet::EMPTY;
    }
    caps
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, in two halves.
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`: one 32-bit half of each set.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Whether process `pid` is in the daemon's user namespace (`/proc/PID/ns/user` names the
/// same namespace as the daemon's own; unreadable: no).
fn in_daemon_user_ns(pid: i32) -> bool {
    static OURS: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let ours = OURS.get_or_init(|| user_ns_of("self"));
    ours.is_some() && *ours == user_ns_of(&pid.to_string())
}

/// The target of `/proc/WHO/ns/user` (`user:[INODE]`).
fn user_ns_of(who: &str) -> Option<String> {
    std::fs::read_link(format!("/proc/{who}/ns/user"))
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
}

/// The caller's supplementary groups, now (`/proc/PID/status`); none if its effective ids
/// there are not the frame's (the main thread's differ from the calling thread's, or the
/// process changed ids since it sent the frame).
pub fn read_groups(cred: &Cred) -> Vec<u32> {
    Status::read(cred).map(|s| s.groups).unwrap_or_default()
}

/// What the daemon reads from `/proc/PID/status`.
struct Status {
    uid: u32,
    suid: u32,
    gid: u32,
    sgid: u32,
    groups: Vec<u32>,
}

impl Status {
    /// `/proc/PID/status` of `cred`'s process, if its effective ids are `cred`'s.
    fn read(cred: &Cred) -> Option<Status> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", cred.tgid)).ok()?;
        let ids = |line: &str| -> Vec<u32> {
            line.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        };
        let (mut uids, mut gids, mut groups) = (vec![], vec![], vec![]);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("Uid:") {
                uids = ids(rest);
            } else if let Some(rest) = line.strip_prefix("Gid:") {
                gids = ids(rest);
            } else if let Some(rest) = line.strip_prefix("Groups:") {
                groups = ids(rest);
            }
        }
        if uids.len() < 3 || gids.len() < 3 || uids[1] != cred.euid || gids[1] != cred.egid {
            return None;
        }
        Some(Status {
            uid: uids[0],
            suid: uids[2],
            gid: gids[0],
            sgid: gids[2],
            groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_identity_is_read_when_asked_and_a_mismatched_euid_reads_no_groups() {
        // SAFETY: plain getters.
        let (pid, euid, egid) = unsafe { (libc::getpid(), libc::geteuid(), libc::getegid()) };
        let peer = PeerCred {
            pid,
            uid: euid,
            gid: egid,
        };
        let me = cred_of(peer, true);
        assert_eq!(
            (me.euid, me.egid, me.tgid),
            (euid, egid, uipc::Tgid::new(pid))
        );
        assert_eq!(me.caps, CapSet::EMPTY, "nothing read before a check asks");
        assert_eq!(me.has_cap(Cap::SYS_ADMIN), euid == 0);
        // SAFETY: plain getter.
        assert_eq!(me.uid, unsafe { libc::getuid() });
        let other = Cred {
            euid: euid + 1,
            ..me.clone()
        };
        assert!(read_groups(&other).is_empty());
    }
}
