//! The table follows the registries, and [`decide`] answers as the engine's `*get` does.

use super::writer::KeyTable;
use super::{decide, Get, Kind, TableView, Who};
use crate::ipc::consts::{IPC_CREAT, IPC_EXCL, IPC_RMID, IPC_SET};
use crate::ipc::msg::{MsgctlArg, MsqidSet};
use crate::ipc::sem::fast::Fast;
use crate::ipc::sem::SemctlArg;
use crate::ipc::{IpcNamespace, NamespaceOptions, Sysctl};
use crate::{Cap, CapSet, Cred, Errno};
use std::sync::Arc;

fn ns_with(entries: usize) -> (IpcNamespace, Arc<KeyTable>) {
    let t = Arc::new(KeyTable::owned(entries));
    t.set_user_ns(NS);
    let ns = IpcNamespace::with_options(NamespaceOptions {
        key_table: Some(Arc::clone(&t)),
        ..NamespaceOptions::default()
    });
    (ns, t)
}

/// The caller as the engine sees it.
struct As<'a>(&'a Cred);

/// The user namespace the tables of these tests say is the daemon's.
const NS: u64 = 4026531837;

impl Who for As<'_> {
    fn user_ns(&self) -> Option<u64> {
        Some(NS)
    }
    fn euid(&self) -> u32 {
        self.0.euid
    }
    fn in_group(&self, a: u32, b: u32) -> Option<bool> {
        Some(self.0.in_group(a) || self.0.in_group(b))
    }
    fn has_ipc_owner(&self) -> Option<bool> {
        Some(self.0.has_cap(Cap::IPC_OWNER))
    }
}

fn fast(view: &TableView<'_>, get: Get, key: i32, flag: i32, cred: &Cred) -> Fast<i32> {
    decide(view, get, key, flag, &As(cred))
}

#[test]
fn creation_ipc_set_removal_and_recreation_are_published() {
    let (ns, t) = ns_with(64);
    let root = Cred::root(1);
    let id = ns.semget(&root, 0x51, 3, IPC_CREAT | 0o640).unwrap();
    let e = t.view().lookup(Kind::Sem, 0x51).unwrap();
    assert_eq!((e.id, e.mode, e.uid, e.cuid, e.info), (id, 0o640, 0, 0, 3));
    assert_eq!(t.view().lookup(Kind::Msg, 0x51), None);
    let set = SemctlArg::Set {
        uid: 7,
        gid: 8,
        mode: 0o600,
    };
    ns.semctl(&root, id, 0, IPC_SET, set).unwrap();
    let e = t.view().lookup(Kind::Sem, 0x51).unwrap();
    assert_eq!((e.mode, e.uid, e.gid, e.cuid, e.cgid), (0o600, 7, 8, 0, 0));
    ns.semctl(&root, id, 0, IPC_RMID, SemctlArg::None).unwrap();
    assert_eq!(t.view().lookup(Kind::Sem, 0x51), None);
    let again = ns.semget(&root, 0x51, 1, IPC_CREAT | 0o600).unwrap();
    assert_ne!(again, id);
    assert_eq!(t.view().lookup(Kind::Sem, 0x51).unwrap().id, again);
    // IPC_PRIVATE is never published.
    ns.semget(&root, 0, 1, IPC_CREAT).unwrap();
    assert_eq!(t.view().lookup(Kind::Sem, 0), None);
}

#[test]
fn queues_and_segments_are_published_and_shm_dest_unpublishes() {
    let (ns, t) = ns_with(64);
    let root = Cred::root(1);
    let q = ns.msgget(&root, 0x77, IPC_CREAT | 0o600).unwrap();
    assert_eq!(t.view().lookup(Kind::Msg, 0x77).unwrap().id, q);
    let set = MsqidSet {
        uid: 5,
        gid: 5,
        mode: 0o644,
        qbytes: 16384,
    };
    ns.msgctl(&root, q, IPC_SET, MsgctlArg::Set(set)).unwrap();
    assert_eq!(t.view().lookup(Kind::Msg, 0x77).unwrap().mode, 0o644);
    ns.msgctl(&root, q, IPC_RMID, MsgctlArg::None).unwrap();
    assert_eq!(t.view().lookup(Kind::Msg, 0x77), None);

    let s = ns.shmget(&root, 0x78, 8192, IPC_CREAT | 0o600).unwrap();
    let e = t.view().lookup(Kind::Shm, 0x78).unwrap();
    assert_eq!((e.id, e.info), (s, 8192));
    let at = ns.shmat(&root, s, 0, 0).unwrap();
    // Removed while attached: the key becomes private and opens no more.
    ns.shmctl(&root, s, IPC_RMID, None).unwrap();
    assert_eq!(t.view().lookup(Kind::Shm, 0x78), None);
    ns.shmdt(&root, at.addr).unwrap();
}

#[test]
fn a_full_window_publishes_nothing_and_a_freed_entry_is_reused() {
    // Eight entries per region: every key's window is the whole region.
    let (ns, t) = ns_with(8);
    let root = Cred::root(1);
    let ids: Vec<i32> = (1..=9)
        .map(|k| ns.msgget(&root, k, IPC_CREAT | 0o600).unwrap())
        .collect();
    for k in 1..=8 {
        assert_eq!(
            t.view().lookup(Kind::Msg, k).unwrap().id,
            ids[k as usize - 1]
        );
    }
    assert_eq!(t.view().lookup(Kind::Msg, 9), None);
    assert_eq!(fast(&t.view(), Get::Msg, 9, 0, &root), Fast::Slow);
    ns.msgctl(&root, ids[0], IPC_RMID, MsgctlArg::None).unwrap();
    let ten = ns.msgget(&root, 10, IPC_CREAT | 0o600).unwrap();
    assert_eq!(t.view().lookup(Kind::Msg, 10).unwrap().id, ten);
}

#[test]
fn semmsl_is_published_after_each_write() {
    let (ns, t) = ns_with(64);
    let root = Cred::root(1);
    ns.semget(&root, 0x9, 4, IPC_CREAT | 0o600).unwrap();
    assert_eq!(t.view().semmsl(), 32000);
    ns.sysctl_write(&root, Sysctl::Sem, "2 32000 32 128")
        .unwrap();
    assert_eq!(t.view().semmsl(), 2);
    // semmsl now below the set's size: EINVAL before the lookup, as the engine says.
    assert_eq!(ns.semget(&root, 0x9, 3, 0), Err(Errno::EINVAL));
    assert_eq!(
        fast(&t.view(), Get::Sem(3), 0x9, 0, &root),
        Fast::Done(Err(Errno::EINVAL))
    );
}

#[test]
fn a_dropped_table_is_dead_to_readers() {
    // Memory that outlives the table, as a client's mapping outlives the daemon's namespace.
    let mem: &'static [std::sync::atomic::AtomicU64] = Box::leak(
        (0..super::TABLE_WORDS)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    // SAFETY: a leaked, 8-byte aligned buffer of TABLE_BYTES bytes, alive for ever.
    let mapped = unsafe { KeyTable::from_raw(mem.as_ptr() as *mut u8, Box::new(())) };
    mapped.set_user_ns(NS);
    assert!(TableView::new(mem).live());
    drop(mapped);
    assert!(!TableView::new(mem).live());
    assert_eq!(
        decide(&TableView::new(mem), Get::Msg, 5, 0, &As(&Cred::root(1))),
        Fast::Slow
    );
}

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn decide_answers_as_the_engine_whenever_it_answers() {
    let (ns, t) = ns_with(1024);
    let root = Cred::root(1);
    let mut r = Lcg(7);
    let mut answered = 0;
    for round in 0..4000 {
        let key = 1 + r.next(24) as i32;
        // Objects of assorted owners and modes, changed by IPC_SET now and then.
        let owner = [0, 1000, 2000][r.next(3) as usize];
        let group = [0, 100, 200][r.next(3) as usize];
        let mut maker = Cred::user(2, owner, group);
        if owner == 0 {
            maker = Cred::root(2);
        }
        let mode = r.next(0o1000) as i32;
        let which = r.next(3);
        let _ = match which {
            0 => ns.semget(&maker, key, 1 + r.next(4) as i32, IPC_CREAT | mode),
            1 => ns.msgget(&maker, key, IPC_CREAT | mode),
            _ => ns.shmget(&maker, key, 4096 * (1 + r.next(3)), IPC_CREAT | mode),
        };
        if round % 7 == 0 {
            if let Ok(id) = ns.msgget(&root, key, 0) {
                let set = MsqidSet {
                    uid: owner,
                    gid: group,
                    mode: r.next(0o1000) as u32,
                    qbytes: 16384,
                };
                ns.msgctl(&root, id, IPC_SET, MsgctlArg::Set(set)).unwrap();
            }
        }
        if round % 11 == 0 {
            if let Ok(id) = ns.semget(&root, key, 0, 0) {
                ns.semctl(&root, id, 0, IPC_RMID, SemctlArg::None).unwrap();
            }
        }
        // A caller: owner, group member (by egid or a supplementary group), or stranger;
        // with or without CAP_IPC_OWNER.
        let uid = [0, 1000, 2000, 3000][r.next(4) as usize];
        let mut caller = Cred::user(3, uid, [0, 100, 200, 300][r.next(4) as usize]);
        if r.next(3) == 0 {
            caller.groups = vec![[100, 200, 400][r.next(3) as usize]];
        }
        if r.next(4) == 0 {
            caller.caps = CapSet::EMPTY.with(Cap::IPC_OWNER);
        }
        let flag = r.next(0o1000) as i32 | [0, IPC_CREAT, IPC_CREAT | IPC_EXCL][r.next(3) as usize];
        let (get, engine) = match r.next(3) {
            0 => {
                let nsems = r.next(7) as i32 - 1;
                (
                    Get::Sem(nsems),
                    ns.semget(&caller, key, nsems, flag & !IPC_CREAT),
                )
            }
            1 => (Get::Msg, ns.msgget(&caller, key, flag & !IPC_CREAT)),
            _ => {
                let size = 4096 * r.next(5);
                (
                    Get::Shm(size),
                    ns.shmget(&caller, key, size, flag & !IPC_CREAT),
                )
            }
        };
        // Without IPC_CREAT nothing is created, so the engine's answer stands for the key's
        // state; IPC_EXCL alone has no effect.
        let flag = flag & !IPC_CREAT;
        match fast(&t.view(), get, key, flag, &caller) {
            Fast::Done(got) => {
                assert_eq!(
                    got, engine,
                    "round {round}: {get:?} key {key} flag {flag:o}"
                );
                answered += 1;
            }
            Fast::Slow => {
                // Only for a key the table lacks, or a denial CAP_IPC_OWNER may lift.
                let kind = match get {
                    Get::Sem(_) => Kind::Sem,
                    Get::Msg => Kind::Msg,
                    Get::Shm(_) => Kind::Shm,
                };
                let found = t.view().lookup(kind, key).is_some();
                assert!(!found || caller.has_cap(Cap::IPC_OWNER), "round {round}");
            }
        }
    }
    assert!(answered > 1000, "only {answered} answered");
}

#[test]
fn exclusive_creation_of_an_existing_key_is_eexist_before_size_and_permission() {
    let (ns, t) = ns_with(64);
    let root = Cred::root(1);
    ns.semget(&root, 0x33, 2, IPC_CREAT | 0o600).unwrap();
    let nobody = Cred::user(9, 65534, 65534);
    let excl = IPC_CREAT | IPC_EXCL | 0o600;
    for (nsems, want) in [
        (5, Errno::EEXIST),
        (40000, Errno::EINVAL),
        (-1, Errno::EINVAL),
    ] {
        assert_eq!(ns.semget(&nobody, 0x33, nsems, excl), Err(want));
        assert_eq!(
            fast(&t.view(), Get::Sem(nsems), 0x33, excl, &nobody),
            Fast::Done(Err(want))
        );
    }
    // Then nsems above the set's (EINVAL) before the permission (EACCES).
    assert_eq!(
        fast(&t.view(), Get::Sem(3), 0x33, 0o600, &nobody),
        Fast::Done(Err(Errno::EINVAL))
    );
    assert_eq!(
        fast(&t.view(), Get::Sem(0), 0x33, 0o600, &nobody),
        Fast::Done(Err(Errno::EACCES))
    );
    assert_eq!(
        fast(&t.view(), Get::Sem(0), 0x33, 0, &nobody),
        Fast::Done(ns.semget(&nobody, 0x33, 0, 0))
    );
    // Denied by the mode with CAP_IPC_OWNER in the effective set: the daemon decides.
    assert_eq!(
        fast(
            &t.view(),
            Get::Sem(0),
            0x33,
            0o600,
            &Cred {
                euid: 5,
                ..root.clone()
            }
        ),
        Fast::Slow
    );
}

/// A caller in a user namespace of its own (as after `unshare -U`).
struct Elsewhere<'a>(&'a Cred);

impl Who for Elsewhere<'_> {
    fn user_ns(&self) -> Option<u64> {
        Some(NS + 1)
    }
    fn euid(&self) -> u32 {
        self.0.euid
    }
    fn in_group(&self, a: u32, b: u32) -> Option<bool> {
        As(self.0).in_group(a, b)
    }
    fn has_ipc_owner(&self) -> Option<bool> {
        As(self.0).has_ipc_owner()
    }
}

#[test]
fn a_caller_in_another_user_namespace_is_the_daemons_to_judge() {
    let (ns, t) = ns_with(64);
    let root = Cred::root(1);
    let id = ns.semget(&root, 0x44, 1, IPC_CREAT | 0o600).unwrap();
    assert_eq!(
        fast(&t.view(), Get::Sem(1), 0x44, 0o600, &root),
        Fast::Done(Ok(id))
    );
    // Its euid 0 is not the daemon's uid 0.
    assert_eq!(
        decide(&t.view(), Get::Sem(1), 0x44, 0o600, &Elsewhere(&root)),
        Fast::Slow
    );
    // Nor is a table whose daemon did not say its namespace answered from.
    t.set_user_ns(0);
    assert_eq!(fast(&t.view(), Get::Sem(1), 0x44, 0o600, &root), Fast::Slow);
}
