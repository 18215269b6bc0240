use super::*;

struct Obj(IpcHeader);
impl IpcObject for Obj {
    type KeyInfo = ();
    fn header(&self) -> &IpcHeader {
        &self.0
    }
}

fn perm() -> IpcPerm {
    IpcPerm::new(&crate::Cred::root(1), 0o600)
}

fn create(r: &Registry<Obj>, st: &mut RegistryState<Obj>, key: i32) -> Result<Arc<Obj>> {
    let key = IpcKey::new(key);
    r.vacancy(st, key)?
        .add(32000, (&perm(), ()), |id| Obj(IpcHeader::new(id, key)))
}

/// A `create` for `get_or_create`: an object under `key`, returning its id.
fn add_obj(free: Vacancy<'_, Obj>, key: IpcKey) -> Result<IpcId> {
    let obj = |id| Obj(IpcHeader::new(id, key));
    free.add_then(32000, (&perm(), ()), obj, |o| o.header().id())
}

fn open_or_create(r: &Registry<Obj>, key: i32) -> Result<IpcId> {
    let key = IpcKey::new(key);
    r.get_or_create(key, IPC_CREAT, |free| add_obj(free, key), |_| Ok(()))
}

#[test]
fn an_ipc_creat_open_of_an_existing_key_runs_beside_a_reader() {
    let r = Arc::new(Registry::<Obj>::new(IdLayout::DEFAULT));
    let id = open_or_create(&r, 42).unwrap();
    let reader = r.read();
    let (tx, rx) = std::sync::mpsc::channel();
    let opener = {
        let r = r.clone();
        std::thread::spawn(move || tx.send(open_or_create(&r, 42)).unwrap())
    };
    // Taking the lock for writing would wait for `reader`, held until the open answered.
    let opened = rx.recv_timeout(std::time::Duration::from_secs(5));
    drop(reader);
    opener.join().unwrap();
    assert_eq!(opened, Ok(Ok(id)), "the open waited for the reader");
}

#[test]
fn racing_creators_of_one_key_get_one_object() {
    for round in 0..200 {
        let r = Arc::new(Registry::<Obj>::new(IdLayout::DEFAULT));
        let ids: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || open_or_create(&r, 7 + round))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect();
        assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
        assert_eq!(r.read().in_use(), 1);
    }
}

#[test]
fn get_follows_linux_decision_order() {
    let r = Registry::<Obj>::new(IdLayout::DEFAULT);
    let get = |key, flag| {
        let key = IpcKey::new(key);
        r.get_or_create(key, flag, |free| add_obj(free, key), |_| Ok(()))
    };
    assert_eq!(get(5, 0), Err(Errno::ENOENT));
    let id = get(5, IPC_CREAT).unwrap();
    assert_eq!(get(5, 0), Ok(id));
    assert_eq!(get(5, IPC_CREAT), Ok(id));
    assert_eq!(get(5, IPC_CREAT | IPC_EXCL), Err(Errno::EEXIST));
    assert_eq!(get(5, IPC_EXCL), Ok(id), "IPC_EXCL alone is ignored");
    let p1 = get(IPC_PRIVATE, IPC_CREAT | IPC_EXCL).unwrap();
    let p2 = get(IPC_PRIVATE, 0).unwrap();
    assert!(p1 != p2 && p1 != id);
    let denied = r.get_or_create(
        IpcKey::new(5),
        0,
        |_| unreachable!(),
        |_| Err(Errno::EACCES),
    );
    assert_eq!(denied, Err(Errno::EACCES));
}

#[test]
fn stale_and_negative_ids_are_einval_and_removal_frees_key_and_index() {
    let r = Registry::<Obj>::new(IdLayout::DEFAULT);
    let obj = create(&r, &mut r.write(), 9).unwrap();
    let id = obj.header().id();
    assert!(r.lookup(id).is_ok());
    assert_eq!(r.lookup(IpcId::new(-1)).err(), Some(Errno::EINVAL));
    assert_eq!(
        r.lookup(IpcId::new(id.get() + 32768)).err(),
        Some(Errno::EINVAL),
        "wrong seq"
    );
    r.remove(&mut r.write(), &obj);
    assert_eq!(r.lookup(id).err(), Some(Errno::EINVAL));
    assert_eq!(
        r.get_or_create(IpcKey::new(9), 0, |_| unreachable!(), |_| Ok(())),
        Err(Errno::ENOENT)
    );
    assert_eq!(r.read().in_use(), 0);
}

#[test]
fn count_limit_gives_enospc_but_existing_keys_still_open() {
    let r = Registry::<Obj>::new(IdLayout::DEFAULT);
    let mk = |key| {
        let key = IpcKey::new(key);
        r.get_or_create(
            key,
            IPC_CREAT,
            |free| {
                let obj = |id| Obj(IpcHeader::new(id, key));
                free.add_then(2, (&perm(), ()), obj, |o| o.header().id())
            },
            |_| Ok(()),
        )
    };
    let a = mk(1).unwrap();
    mk(2).unwrap();
    assert_eq!(mk(3), Err(Errno::ENOSPC));
    assert_eq!(mk(1), Ok(a));
}

#[test]
fn next_id_is_consumed_by_the_next_add_even_when_it_fails() {
    let r = Registry::<Obj>::new(IdLayout::DEFAULT);
    assert_eq!(r.set_next_id(-1), Err(Errno::EINVAL));
    r.set_next_id((7 << 15) | 1000).unwrap();
    assert_eq!(
        create(&r, &mut r.write(), 0).unwrap().header().id().get(),
        230376
    );
    assert_eq!(r.read().next_id(), -1);
    create(&r, &mut r.write(), 0).unwrap();
    r.set_next_id(32767).unwrap();
    assert_eq!(
        create(&r, &mut r.write(), 0).unwrap().header().id().get(),
        32767
    );
    r.set_next_id(32767).unwrap();
    assert_eq!(create(&r, &mut r.write(), 0).err(), Some(Errno::ENOSPC));
    assert_eq!(r.read().next_id(), -1, "consumed although the add failed");
}

#[test]
fn private_key_objects_vanish_from_the_key_table_only() {
    let r = Registry::<Obj>::new(IdLayout::DEFAULT);
    let obj = create(&r, &mut r.write(), 77).unwrap();
    r.set_key_private(&mut r.write(), &obj);
    assert_eq!(obj.header().key(), IpcKey::PRIVATE);
    assert_eq!(
        r.get_or_create(IpcKey::new(77), 0, |_| unreachable!(), |_| Ok(())),
        Err(Errno::ENOENT)
    );
    assert!(r.lookup(obj.header().id()).is_ok());
    assert_eq!(
        r.lookup_index(r.layout().idx(obj.header().id()))
            .unwrap()
            .header()
            .id(),
        obj.header().id()
    );
    let again = create(&r, &mut r.write(), 77).unwrap();
    r.remove(&mut r.write(), &obj);
    assert!(
        r.get_or_create(IpcKey::new(77), 0, |_| unreachable!(), |_| Ok(()))
            .is_ok(),
        "removing the old one keeps the new key"
    );
    assert_eq!(r.snapshot().len(), 1);
    drop(again);
}

/// An object type with a spare pool of its own.
#[cfg(not(loom))]
struct Pooled(IpcHeader);
#[cfg(not(loom))]
impl IpcObject for Pooled {
    type KeyInfo = ();
    fn header(&self) -> &IpcHeader {
        &self.0
    }
    fn spare_pool() -> Option<&'static SparePool<Pooled>> {
        static POOL: SparePool<Pooled> = SparePool::new();
        Some(&POOL)
    }
}

#[test]
#[cfg(not(loom))]
fn a_dropped_registry_leaves_its_objects_allocations_to_the_next_one_unless_still_held() {
    let make = |r: &Registry<Pooled>, key: i32| {
        let key = IpcKey::new(key);
        r.vacancy(&mut r.write(), key)
            .unwrap()
            .add(32000, (&perm(), ()), |id| Pooled(IpcHeader::new(id, key)))
            .unwrap()
    };
    let first = Registry::new(IdLayout::DEFAULT);
    let kept: Vec<usize> = (1..=3)
        .map(|k| Arc::as_ptr(&make(&first, k)) as usize)
        .collect();
    let held = make(&first, 4);
    drop(first);
    assert_eq!(
        held.header().key(),
        IpcKey::new(4),
        "a held object outlives its registry"
    );
    assert_eq!(Arc::strong_count(&held), 1);
    let second = Registry::new(IdLayout::DEFAULT);
    let reused: Vec<usize> = (1..=3)
        .map(|k| {
            let obj = make(&second, 10 + k);
            assert_eq!(obj.header().key(), IpcKey::new(10 + k));
            assert_eq!(
                obj.header().id(),
                second.lookup(obj.header().id()).unwrap().header().id()
            );
            Arc::as_ptr(&obj) as usize
        })
        .collect();
    for at in reused {
        assert!(kept.contains(&at), "a new object in a kept allocation");
    }
}
