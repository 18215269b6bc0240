//! An IPC namespace: three registries, their limits, a clock, and the process hooks.
//!
//! Any number of namespaces can live in one process, fully isolated, each with Linux's default
//! limits. Limits are tunable at run time with the same validation as the `/proc/sys/kernel`
//! files ([`IpcNamespace::sysctl_write`]); the id layout (`ipcmni_extend` or not) is chosen per
//! namespace at creation.
//!
//! Locks: limits are atomics read without a lock; each registry has its own writer lock.

use super::proc_int;
use super::registry::{IpcObject, Registry};
use super::{msg, sem, shm};
use crate::sync::{AtomicBool, AtomicI32, AtomicU64, Ordering::Relaxed};
use crate::table::IdLayout;
use crate::{Cap, Clock, Cred, Errno, Result, SystemClock, Tgid};
use std::sync::Arc;

/// How a namespace is built.
#[derive(Clone)]
pub struct NamespaceOptions {
    /// `ipcmni_extend`: 24 index bits, 7 sequence bits, minimum cycle 4096.
    pub extended_ids: bool,
    /// Where recorded times come from.
    pub clock: Arc<dyn Clock>,
    /// Where shared-memory segments get their memory (`None`: the heap).
    pub shm_backing: Option<Arc<dyn shm::ShmBacking>>,
    /// The semaphore fast path's arena (`None`: every call through the engine alone).
    pub sem_arena: Option<Arc<sem::fast::owner::SemArena>>,
    /// The message queue fast path's region (`None`: every call through the engine alone).
    pub msg_arena: Option<Arc<msg::fast::owner::MsgArena>>,
    /// The key table (`None`: every `*get` through the engine alone). Its keys are this
    /// namespace's from its creation on, so it must be new.
    pub key_table: Option<Arc<super::keytable::writer::KeyTable>>,
}

impl Default for NamespaceOptions {
    fn default() -> Self {
        NamespaceOptions {
            extended_ids: false,
            clock: Arc::new(SystemClock),
            shm_backing: None,
            sem_arena: None,
            msg_arena: None,
            key_table: None,
        }
    }
}

/// Declares [`Limits`]: each limit's atomic field, its default (Linux's) and its getter.
macro_rules! limits {
    ($($(#[$doc:meta])* $name:ident: $atomic:ident -> $ty:ty = $default:expr;)*) => {
        /// The per-namespace limits (`/proc/sys/kernel/{sem,msg*,shm*}`).
        #[derive(Debug)]
        pub struct Limits {
            $(pub(crate) $name: $atomic,)*
        }

        impl Default for Limits {
            fn default() -> Self {
                Limits {
                    $($name: $atomic::new($default),)*
                }
            }
        }

        impl Limits {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> $ty {
                    self.$name.load(Relaxed)
                }
            )*
        }
    };
}

/// Linux's default `shmmax` and `shmall`.
const SHM_DEFAULT: u64 = u64::MAX - (1 << 24);

limits! {
    /// The most semaphores in a set (`kernel.sem`, first field).
    semmsl: AtomicI32 -> i32 = 32000;
    /// The most semaphores in the namespace (`kernel.sem`, second field).
    semmns: AtomicI32 -> i32 = 1_024_000_000;
    /// The most operations in one semop (`kernel.sem`, third field).
    semopm: AtomicI32 -> i32 = 500;
    /// The most semaphore sets (`kernel.sem`, fourth field).
    semmni: AtomicI32 -> i32 = 32000;
    /// The largest message, in bytes (`kernel.msgmax`).
    msgmax: AtomicI32 -> i32 = 8192;
    /// A new queue's `msg_qbytes` (`kernel.msgmnb`).
    msgmnb: AtomicI32 -> i32 = 16384;
    /// The most message queues (`kernel.msgmni`).
    msgmni: AtomicI32 -> i32 = 32000;
    /// The largest segment, in bytes (`kernel.shmmax`).
    shmmax: AtomicU64 -> u64 = SHM_DEFAULT;
    /// The most shared memory in the namespace, in pages (`kernel.shmall`).
    shmall: AtomicU64 -> u64 = SHM_DEFAULT;
    /// The most segments (`kernel.shmmni`).
    shmmni: AtomicI32 -> i32 = 4096;
    /// Whether every segment is destroyed once its creator is gone and nothing attaches it, as
    /// if IPC_RMID had been called (`kernel.shm_rmid_forced`).
    shm_rmid_forced: AtomicBool -> bool = false;
}

pub use uipc_abi::ipc::Sysctl;

/// An IPC namespace.
pub struct IpcNamespace {
    pub(crate) limits: Limits,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) layout: IdLayout,
    pub(crate) sem: sem::SemIds,
    pub(crate) msg: msg::MsgIds,
    pub(crate) shm: shm::ShmIds,
    /// The key table the registries publish in, if any.
    pub(crate) key_table: Option<Arc<super::keytable::writer::KeyTable>>,
}

impl Default for IpcNamespace {
    fn default() -> Self {
        IpcNamespace::new()
    }
}

impl IpcNamespace {
    /// A namespace with default limits, normal ids, the system clock and heap-backed segments.
    pub fn new() -> IpcNamespace {
        IpcNamespace::with_options(NamespaceOptions::default())
    }

    /// A namespace built from `opts`.
    pub fn with_options(opts: NamespaceOptions) -> IpcNamespace {
        let layout = if opts.extended_ids {
            IdLayout::EXTENDED
        } else {
            IdLayout::DEFAULT
        };
        let ns = IpcNamespace {
            limits: Limits::default(),
            clock: opts.clock,
            layout,
            sem: sem::SemIds::new(layout, opts.sem_arena),
            msg: msg::MsgIds::new(layout, opts.msg_arena),
            shm: shm::ShmIds::new(layout, opts.shm_backing),
            key_table: opts.key_table,
        };
        if let Some(a) = &ns.msg.arena {
            a.set_msgmax(ns.limits.msgmax());
        }
        if let Some(t) = &ns.key_table {
            use super::keytable::{writer::KeyRegion, Kind};
            t.set_semmsl(ns.limits.semmsl());
            ns.sem
                .registry()
                .publish_keys(KeyRegion::new(Arc::clone(t), Kind::Sem));
            ns.msg
                .registry()
                .publish_keys(KeyRegion::new(Arc::clone(t), Kind::Msg));
            ns.shm
                .registry()
                .publish_keys(KeyRegion::new(Arc::clone(t), Kind::Shm));
        }
        ns
    }

    /// The current limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The id layout.
    pub fn layout(&self) -> IdLayout {
        self.layout
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_secs()
    }

    /// Reads a tunable as its `/proc/sys/kernel` file shows it (without the newline).
    pub fn sysctl_read(&self, which: Sysctl) -> String {
        let l = &self.limits;
        match which {
            Sysctl::Sem => format!(
                "{}\t{}\t{}\t{}",
                l.semmsl(),
                l.semmns(),
                l.semopm(),
                l.semmni()
            ),
            Sysctl::MsgMax => l.msgmax().to_string(),
            Sysctl::MsgMnb => l.msgmnb().to_string(),
            Sysctl::MsgMni => l.msgmni().to_string(),
            Sysctl::ShmMax => l.shmmax().to_string(),
            Sysctl::ShmAll => l.shmall().to_string(),
            Sysctl::ShmMni => l.shmmni().to_string(),
            Sysctl::ShmRmidForced => u8::from(l.shm_rmid_forced()).to_string(),
            Sysctl::SemNextId => self.sem.registry().read().next_id().to_string(),
            Sysctl::MsgNextId => self.msg.registry().read().next_id().to_string(),
            Sysctl::ShmNextId => self.shm.registry().read().next_id().to_string(),
        }
    }

    /// Writes a tunable with the kernel's validation. The `*_next_id` files need
    /// CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN (else EACCES, as opening a 0444 file for write);
    /// the others are root's files and the embedder decides who may write them.
    ///
    /// The text is parsed as the kernel parses it (see `proc_int`: `strtoul` base 0, extra
    /// numbers ignored, an empty text changes nothing). `sem` stores its values one by one, so
    /// a bad third value leaves the first two written; a SEMMNI outside `[0, IPCMNI]` is ERANGE
    /// and only SEMMNI is put back.
    pub fn sysctl_write(&self, cred: &Cred, which: Sysctl, text: &str) -> Result<()> {
        let r = self.sysctl_store(cred, which, text);
        if let (Sysctl::Sem, Some(t)) = (which, &self.key_table) {
            // semget's check before the lookup reads it from the table: published after each
            // write, and again if another write moved it meanwhile, so the last one stands.
            loop {
                let semmsl = self.limits.semmsl();
                t.set_semmsl(semmsl);
                if self.limits.semmsl() == semmsl {
                    break;
                }
            }
        }
        if let (Sysctl::MsgMax, Some(a)) = (which, &self.msg.arena) {
            // msgsnd's first check reads it from the region: as `semmsl` above.
            loop {
                let msgmax = self.limits.msgmax();
                a.set_msgmax(msgmax);
                if self.limits.msgmax() == msgmax {
                    break;
                }
            }
        }
        r
    }

    /// [`IpcNamespace::sysctl_write`], returning what `write(2)` of `text` returns on Linux:
    /// the bytes taken (the numbers the file holds and the spaces after the last one; a text
    /// with more numbers is taken only in part).
    pub fn sysctl_write_taken(&self, cred: &Cred, which: Sysctl, text: &str) -> Result<usize> {
        self.sysctl_write(cred, which, text)?;
        Ok(proc_int::taken(
            text,
            if which == Sysctl::Sem { 4 } else { 1 },
        ))
    }

    /// [`IpcNamespace::sysctl_write`]'s checks and stores.
    fn sysctl_store(&self, cred: &Cred, which: Sysctl, text: &str) -> Result<()> {
        let is_next_id = matches!(
            which,
            Sysctl::SemNextId | Sysctl::MsgNextId | Sysctl::ShmNextId
        );
        if is_next_id && !cred.has_cap(Cap::CHECKPOINT_RESTORE) && !cred.has_cap(Cap::SYS_ADMIN) {
            return Err(Errno::EACCES);
        }
        if text.is_empty() {
            return Ok(());
        }
        let l = &self.limits;
        let ipcmni = self.layout.ipcmni() as i32;
        let (values, parse_error) = proc_int::parse(text, if which == Sysctl::Sem { 4 } else { 1 });
        if which == Sysctl::Sem {
            let cells = [&l.semmsl, &l.semmns, &l.semopm, &l.semmni];
            let old_semmni = l.semmni();
            for (cell, value) in cells.iter().zip(&values) {
                cell.store(value.to_i32()?, Relaxed);
            }
            if let Some(e) = parse_error {
                return Err(e);
            }
            if !(0..=ipcmni).contains(&l.semmni()) {
                l.semmni.store(old_semmni, Relaxed);
                return Err(Errno::ERANGE);
            }
            return Ok(());
        }
        if let Some(e) = parse_error {
            return Err(e);
        }
        let value = values[0];
        let in_range = |lo: i32, hi: i32| -> Result<i32> {
            let v = value.to_i32()?;
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(Errno::EINVAL)
            }
        };
        match which {
            Sysctl::Sem => unreachable!("handled above"),
            Sysctl::MsgMax => l.msgmax.store(in_range(0, i32::MAX)?, Relaxed),
            Sysctl::MsgMnb => l.msgmnb.store(in_range(0, i32::MAX)?, Relaxed),
            Sysctl::MsgMni => l.msgmni.store(in_range(0, ipcmni)?, Relaxed),
            Sysctl::ShmMni => l.shmmni.store(in_range(0, ipcmni)?, Relaxed),
            Sysctl::ShmMax => l.shmmax.store(value.to_u64()?, Relaxed),
            Sysctl::ShmAll => l.shmall.store(value.to_u64()?, Relaxed),
            Sysctl::ShmRmidForced => {
                let on = in_range(0, 1)? == 1;
                l.shm_rmid_forced.store(on, Relaxed);
                if on {
                    self.shm_destroy_orphans();
                }
            }
            Sysctl::SemNextId => self
                .sem
                .registry()
                .set_next_id(in_range(0, i32::MAX)?.into())?,
            Sysctl::MsgNextId => self
                .msg
                .registry()
                .set_next_id(in_range(0, i32::MAX)?.into())?,
            Sysctl::ShmNextId => self
                .shm
                .registry()
                .set_next_id(in_range(0, i32::MAX)?.into())?,
        }
        Ok(())
    }

    /// Process exit (the last thread of `tgid`): applies its SEM_UNDO list, detaches its
    /// segments and applies the orphan rules, as Linux's `exit_sem` and `exit_shm`.
    pub fn process_exit(&self, tgid: i32) {
        self.msg_fast_holder_gone(tgid);
        self.msg_fast_sleepers_gone(tgid);
        let tgid = Tgid::new(tgid);
        let _fast = self.sem_fast_exit(tgid);
        self.sem_process_exit(tgid);
        self.shm_process_exit(tgid);
    }

    /// The process moved to another IPC namespace (unshare or setns with CLONE_NEWIPC): as
    /// Linux's unshare (which implies CLONE_SYSVSEM), its SEM_UNDO list is applied here. Its
    /// attachments stay, as its mappings do, until it detaches, execs or exits.
    pub fn process_left(&self, tgid: i32) {
        let tgid = Tgid::new(tgid);
        let _fast = self.sem_fast_exit(tgid);
        self.sem_process_exit(tgid);
    }

    /// Fork: the child starts with no SEM_UNDO list; its inherited attachments count in
    /// nattch.
    pub fn process_fork(&self, parent: i32, child: i32) {
        self.shm_process_fork(Tgid::new(parent), Tgid::new(child));
    }

    /// Execve: SEM_UNDO is kept; attachments are detached.
    pub fn process_exec(&self, tgid: i32) {
        self.msg_fast_holder_gone(tgid);
        // Its other threads ended: one asleep on the message fast path is withdrawn.
        self.msg_fast_sleepers_gone(tgid);
        // The exec killed the process's other threads: one asleep on the semaphore fast path
        // has its operation withdrawn, as their exit does on Linux (the adjustments it holds
        // go into the engine, not applied: exec keeps them).
        let tgid = Tgid::new(tgid);
        drop(self.sem_fast_exit(tgid));
        self.shm_process_exec(tgid);
    }
}

/// Gives the registry behind each per-type table, for code shared across types.
pub(crate) trait HasRegistry<T: IpcObject> {
    fn registry(&self) -> &Registry<T>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_linux() {
        let ns = IpcNamespace::new();
        assert_eq!(ns.sysctl_read(Sysctl::Sem), "32000\t1024000000\t500\t32000");
        assert_eq!(ns.sysctl_read(Sysctl::MsgMax), "8192");
        assert_eq!(ns.sysctl_read(Sysctl::MsgMnb), "16384");
        assert_eq!(ns.sysctl_read(Sysctl::ShmMni), "4096");
        assert_eq!(ns.sysctl_read(Sysctl::ShmMax), "18446744073692774399");
        assert_eq!(ns.sysctl_read(Sysctl::SemNextId), "-1");
    }

    #[test]
    fn sysctl_writes_validate_like_the_kernel() {
        let ns = IpcNamespace::new();
        let root = Cred::root(1);
        assert_eq!(
            ns.sysctl_write(&root, Sysctl::Sem, "250 32000 32 40000"),
            Err(Errno::ERANGE)
        );
        assert_eq!(
            ns.sysctl_read(Sysctl::Sem),
            "250\t32000\t32\t32000",
            "only SEMMNI is put back, as on Linux"
        );
        ns.sysctl_write(&root, Sysctl::Sem, "250 32000 32 128")
            .unwrap();
        assert_eq!(ns.limits().semopm(), 32);
        for (which, text) in [
            (Sysctl::MsgMni, "32769"),
            (Sysctl::MsgMax, "-1"),
            (Sysctl::ShmRmidForced, "2"),
            (Sysctl::SemNextId, "-1"),
        ] {
            assert_eq!(
                ns.sysctl_write(&root, which, text),
                Err(Errno::EINVAL),
                "{which:?} = {text}"
            );
        }
        assert_eq!(
            ns.sysctl_write(&Cred::user(2, 1000, 1000), Sysctl::SemNextId, "5"),
            Err(Errno::EACCES)
        );
        ns.sysctl_write(&root, Sysctl::SemNextId, "5").unwrap();
        assert_eq!(ns.sysctl_read(Sysctl::SemNextId), "5");
        let ext = IpcNamespace::with_options(NamespaceOptions {
            extended_ids: true,
            ..Default::default()
        });
        ext.sysctl_write(&root, Sysctl::MsgMni, "16777216").unwrap();
        assert_eq!(ext.layout().ipcmni(), 1 << 24);
    }

    #[test]
    fn sysctl_texts_parse_like_proc_dointvec() {
        let ns = IpcNamespace::new();
        let root = Cred::root(1);
        let write = |which, text: &str| ns.sysctl_write(&root, which, text);
        assert_eq!(write(Sysctl::MsgMax, "010"), Ok(()));
        assert_eq!(ns.limits().msgmax(), 8, "a leading 0 is octal");
        assert_eq!(write(Sysctl::MsgMax, "0x10 99"), Ok(()));
        assert_eq!(
            ns.limits().msgmax(),
            16,
            "hex, and the extra number ignored"
        );
        assert_eq!(
            write(Sysctl::MsgMax, ""),
            Ok(()),
            "an empty write changes nothing"
        );
        assert_eq!(ns.limits().msgmax(), 16);
        assert_eq!(write(Sysctl::MsgMax, "+5"), Err(Errno::EINVAL));
        assert_eq!(write(Sysctl::MsgMax, " \n"), Err(Errno::EINVAL));
        assert_eq!(write(Sysctl::MsgMax, "-0"), Ok(()));
        assert_eq!(ns.limits().msgmax(), 0);
        assert_eq!(
            write(Sysctl::ShmMax, "-0"),
            Err(Errno::EINVAL),
            "unsigned long files"
        );
        assert_eq!(write(Sysctl::ShmMax, "18446744073709551615"), Ok(()));
        assert_eq!(write(Sysctl::ShmRmidForced, "1 2"), Ok(()));
        assert!(ns.limits().shm_rmid_forced());
        assert_eq!(write(Sysctl::MsgNextId, "12 13"), Ok(()));
        assert_eq!(ns.sysctl_read(Sysctl::MsgNextId), "12");
        assert_eq!(
            ns.sysctl_write(&Cred::user(2, 1000, 1000), Sysctl::MsgNextId, ""),
            Err(Errno::EACCES),
            "the permission check comes first (it is the open)"
        );
        assert_eq!(write(Sysctl::Sem, "1 2 x"), Err(Errno::EINVAL));
        assert_eq!(
            ns.sysctl_read(Sysctl::Sem),
            "1\t2\t500\t32000",
            "values before the bad one stay written"
        );
        assert_eq!(write(Sysctl::Sem, "5 6 7 -1"), Err(Errno::ERANGE));
        assert_eq!(ns.sysctl_read(Sysctl::Sem), "5\t6\t7\t32000");
        assert_eq!(write(Sysctl::Sem, "-5 1 2 3 4"), Ok(()));
        assert_eq!(ns.sysctl_read(Sysctl::Sem), "-5\t1\t2\t3");
    }
}
