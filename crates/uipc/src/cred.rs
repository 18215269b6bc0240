//! Who is calling: the identity every engine call is judged by.
//!
//! A `Cred` is the part of a Linux task's credentials that SysV IPC, file locks and POSIX timers
//! look at: pids, the three uids and gids, supplementary groups, the capabilities that override
//! permission checks, and the two resource limits these subsystems read. The embedder fills it
//! from wherever it learns identities (kernel-verified socket credentials in the daemon, its own
//! task model in a sandbox); capabilities and supplementary groups may instead be read when a
//! check first needs them ([`Lazy`]).

/// A Linux capability number, as in `<linux/capability.h>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(u8);

impl Cap {
    /// SHM_LOCK / SHM_UNLOCK without owning the segment or an RLIMIT_MEMLOCK.
    pub const IPC_LOCK: Cap = Cap(14);
    /// Bypass SysV IPC mode checks (`ipcperms`).
    pub const IPC_OWNER: Cap = Cap(15);
    /// IPC_SET / IPC_RMID on objects one does not own; writable `*_next_id`.
    pub const SYS_ADMIN: Cap = Cap(21);
    /// Raise `msg_qbytes` above `msgmnb`.
    pub const SYS_RESOURCE: Cap = Cap(24);
    /// Take leases on files one does not own.
    pub const LEASE: Cap = Cap(28);
    /// Use the `_ALARM` clocks.
    pub const WAKE_ALARM: Cap = Cap(35);
    /// Writable `*_next_id` and timer id restore.
    pub const CHECKPOINT_RESTORE: Cap = Cap(40);

    /// The capability's number.
    pub const fn number(self) -> u8 {
        self.0
    }
}

/// A set of capabilities (the effective set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSet(u64);

impl CapSet {
    /// No capabilities.
    pub const EMPTY: CapSet = CapSet(0);
    /// Every capability, as root has by default.
    pub const ALL: CapSet = CapSet((1u64 << 41) - 1);

    /// Builds a set from a raw bit mask (bit n = capability n), as in `/proc/PID/status` CapEff.
    pub const fn from_bits(bits: u64) -> CapSet {
        CapSet(bits)
    }

    /// The raw bit mask.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Whether `cap` is in the set.
    pub const fn has(self, cap: Cap) -> bool {
        self.0 & (1u64 << cap.0) != 0
    }

    /// The set with `cap` added.
    pub const fn with(self, cap: Cap) -> CapSet {
        CapSet(self.0 | (1u64 << cap.0))
    }

    /// The set with `cap` removed.
    pub const fn without(self, cap: Cap) -> CapSet {
        CapSet(self.0 & !(1u64 << cap.0))
    }
}

/// A part of the identity an embedder reads only when a check needs it (the daemon reads the
/// caller's capabilities and supplementary groups from the kernel at that moment, rather than
/// on every call): [`Cred::has_cap`] and [`Cred::in_group`] call `read` with the caller's
/// `Cred` the first time the known part does not decide, and keep the answer for the rest of
/// the call. Most calls never look: the owner's check stops before the groups, and a mode
/// that grants the request before CAP_IPC_OWNER.
#[derive(Clone, Debug)]
pub struct Lazy<T> {
    read: fn(&Cred) -> T,
    // Not `crate::sync`: a plain one-time cell, never part of a loom model.
    once: std::sync::OnceLock<T>,
}

impl<T> Lazy<T> {
    /// A value to be read by `read` at the first check that needs it.
    pub fn new(read: fn(&Cred) -> T) -> Lazy<T> {
        Lazy {
            read,
            once: std::sync::OnceLock::new(),
        }
    }

    fn get(&self, cred: &Cred) -> &T {
        self.once.get_or_init(|| (self.read)(cred))
    }
}

/// Two are the same if they read the same way (what they read depends on the `Cred`).
impl<T> PartialEq for Lazy<T> {
    fn eq(&self, other: &Lazy<T>) -> bool {
        std::ptr::fn_addr_eq(self.read, other.read)
    }
}

impl<T> Eq for Lazy<T> {}

/// `RLIM_INFINITY`.
pub const RLIM_INFINITY: u64 = u64::MAX;

/// The calling task's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    /// Thread id (`gettid`).
    pub tid: i32,
    /// Process id (`getpid`, the thread group id). Recorded as `sempid`, `lspid`, lock pids.
    pub tgid: crate::Tgid,
    /// Real user id.
    pub uid: u32,
    /// Effective user id: owner checks and ipcperms use it.
    pub euid: u32,
    /// Saved user id.
    pub suid: u32,
    /// Real group id.
    pub gid: u32,
    /// Effective group id.
    pub egid: u32,
    /// Saved group id.
    pub sgid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// More supplementary groups, read when a check first needs them (see [`Lazy`]).
    pub lazy_groups: Option<Lazy<Vec<u32>>>,
    /// Effective capabilities, within the IPC namespace's user namespace.
    pub caps: CapSet,
    /// More effective capabilities, read when a check first needs them (see [`Lazy`]).
    pub lazy_caps: Option<Lazy<CapSet>>,
    /// `RLIMIT_MEMLOCK` (bytes), read by SHM_LOCK.
    pub rlimit_memlock: u64,
    /// `RLIMIT_SIGPENDING`, read by timer_create.
    pub rlimit_sigpending: u64,
}

impl Cred {
    /// Root with every capability, in process `pid` (its only thread).
    pub fn root(pid: i32) -> Cred {
        Cred {
            tid: pid,
            tgid: crate::Tgid::new(pid),
            uid: 0,
            euid: 0,
            suid: 0,
            gid: 0,
            egid: 0,
            sgid: 0,
            groups: Vec::new(),
            lazy_groups: None,
            caps: CapSet::ALL,
            lazy_caps: None,
            rlimit_memlock: 8 << 20,
            rlimit_sigpending: 63_000,
        }
    }

    /// An unprivileged user `uid`/`gid` with no capabilities, in process `pid`.
    pub fn user(pid: i32, uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            euid: uid,
            suid: uid,
            gid,
            egid: gid,
            sgid: gid,
            caps: CapSet::EMPTY,
            ..Cred::root(pid)
        }
    }

    /// The same identity, in another thread of the same process.
    pub fn in_thread(&self, tid: i32) -> Cred {
        Cred {
            tid,
            ..self.clone()
        }
    }

    /// Whether the effective capability set holds `cap`.
    pub fn has_cap(&self, cap: Cap) -> bool {
        self.caps.has(cap)
            || self
                .lazy_caps
                .as_ref()
                .is_some_and(|lazy| lazy.get(self).has(cap))
    }

    /// `in_group_p`: the effective gid or a supplementary group is `gid`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.egid == gid
            || self.groups.contains(&gid)
            || self
                .lazy_groups
                .as_ref()
                .is_some_and(|lazy| lazy.get(self).contains(&gid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_has_every_ipc_capability_and_users_none() {
        let root = Cred::root(1);
        for cap in [
            Cap::IPC_OWNER,
            Cap::SYS_ADMIN,
            Cap::IPC_LOCK,
            Cap::SYS_RESOURCE,
            Cap::CHECKPOINT_RESTORE,
        ] {
            assert!(root.has_cap(cap));
            assert!(!Cred::user(2, 1000, 1000).has_cap(cap));
        }
        let u = Cred {
            groups: vec![7],
            ..Cred::user(2, 1000, 100)
        };
        assert!(u.in_group(100) && u.in_group(7) && !u.in_group(0));
        fn read_once(cred: &Cred) -> Vec<u32> {
            assert!(
                !READ.swap(true, std::sync::atomic::Ordering::SeqCst),
                "read twice"
            );
            vec![cred.euid + 1]
        }
        static READ: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let lazy = Cred {
            lazy_groups: Some(Lazy::new(read_once)),
            ..Cred::user(2, 1000, 100)
        };
        assert!(lazy.in_group(100), "the effective gid needs no read");
        assert!(!READ.load(std::sync::atomic::Ordering::SeqCst));
        assert!(lazy.in_group(1001) && !lazy.in_group(7) && lazy.in_group(1001));
        let caps = Cred {
            lazy_caps: Some(Lazy::new(|_| CapSet::EMPTY.with(Cap::IPC_OWNER))),
            ..Cred::user(2, 1000, 100)
        };
        assert!(caps.has_cap(Cap::IPC_OWNER) && !caps.has_cap(Cap::SYS_ADMIN));
        assert!(!CapSet::ALL.without(Cap::SYS_ADMIN).has(Cap::SYS_ADMIN));
    }
}
