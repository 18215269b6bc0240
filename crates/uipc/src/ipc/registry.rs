//! One registry per object type: ids, keys and the lookups every call starts with
//! (`ipc/util.c`: `ipc_addid`, `ipc_findkey`, `ipcget`, `ipc_obtain_object_check`, `ipc_rmid`).
//!
//! - Ids come from a [`CyclicIdAllocator`] (seed 002), with `*_next_id` restore.
//! - Keys live in a hash map (seed 000; hashbrown's table hashed by
//!   [`KeyHasher`](crate::table::hash::KeyHasher), which keeps runs of consecutive keys in runs
//!   of buckets): `semget` on 31900 keys does not scan; IPC_PRIVATE objects are never in it.
//!   Beside each key the map keeps what opening the key checks (the id, the permissions and
//!   the type's size: nsems, segment size), so a `*get` that finds its key reads one map
//!   entry and never the object: 31900 opens read 31900 map entries, not one line of each of
//!   3.9 MiB of semaphore sets. The permissions are interned (a 4-byte reference into a
//!   `PermTable` of the distinct values), so an entry is 16 bytes (24 for segments). IPC_SET,
//!   the only call that changes them, updates the entry under the writer lock
//!   ([`Registry::set_key_perm`]). Why not a concurrent map: a creation needs the writer lock
//!   anyway (the key and the id allocation are one step), and on the seed's loop
//!   (`uipc-bench`'s `keymap_loop`) a dashmap behind that lock opened keys 2.5 times slower
//!   and created them slower too; dashmap or scc alone opened 1.3-1.9 times slower on one
//!   thread. Opens from every core contend on the lock's word instead (`bench peers`, key
//!   lookups; both measurements in BENCHMARKS.md, "ipc-keys").
//! - Objects are found by id in a [`DirectMap`] from index to object without any registry
//!   lock (a slot per index, in chunks made on first use; one slot read lock): the cost is the
//!   same for every index, and consecutive indices, which the cyclic allocator hands out in
//!   runs, sit in consecutive slots. Only creation and removal, under the writer lock, change
//!   it.
//! - A new object is built in the allocation of an object of a dropped namespace when its
//!   type keeps them ([`spare`]; semaphore sets do), else in a fresh `Arc`. Creating
//!   ([`Vacancy`], in `vacancy`) is Linux's `ipc_addid`.
//!
//! Locks: `state` is the kernel's `rwsem`. Creation and removal hold it for writing; a `*get`
//! that finds its key, `*_INFO`, `*_STAT` by index and `/proc` listings hold it for reading
//! (Linux's `ipcget` takes it for writing even to open a key; readers in parallel give the
//! same results, as any creation or removal still excludes them). Operations
//! on an existing id (semop, msgsnd, shmat, the *ctl calls) take no registry lock at all.
//! Lock order: `state` -> the object's own lock; `state` -> a slot lock of `objects`, which
//! is a leaf (held only to clone, insert or take out an `Arc`; a removed object is dropped
//! after the slot lock is released); `state` -> the type's spare pool (a leaf). Code holding
//! an object lock must never take `state`.

use super::consts::{IPC_CREAT, IPC_EXCL, IPC_PRIVATE};
use super::keytable::writer::KeyRegion;
use super::perm::IpcPerm;
use super::perm_table::{PermId, PermTable};
use crate::sync::{
    read, try_write, write, AtomicI32, Ordering, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use crate::table::hash::KeyBuildHasher;
use crate::table::{CyclicIdAllocator, DirectMap, IdLayout};
use crate::{Errno, IpcId, IpcIdx, IpcKey, Result};
use hashbrown::hash_map::{Entry, HashMap};
use spare::{SpareList, SparePool};
use std::sync::Arc;

/// The part of an object the registry reads without the object's lock.
#[derive(Debug)]
pub struct IpcHeader {
    id: IpcId,
    key: AtomicI32,
}

impl IpcHeader {
    /// The header of a new object.
    pub fn new(id: IpcId, key: IpcKey) -> IpcHeader {
        IpcHeader {
            id,
            key: AtomicI32::new(key.get()),
        }
    }
    /// The full id (`(seq << shift) + idx`).
    pub fn id(&self) -> IpcId {
        self.id
    }
    /// The key; IPC_PRIVATE for private objects and for segments made private by SHM_DEST.
    pub fn key(&self) -> IpcKey {
        IpcKey::new(self.key.load(Ordering::Relaxed))
    }
}

/// An object kept in a registry.
pub trait IpcObject: Send + Sync + 'static {
    /// What opening an existing key checks besides the permissions (semget's nsems,
    /// shmget's size), fixed at creation.
    type KeyInfo: Copy + Send + Sync + 'static;
    /// The object's id and key.
    fn header(&self) -> &IpcHeader;
    /// `info` as the key table's `INFO` word (`keytable`): 0 unless the type says otherwise.
    fn key_info_word(info: Self::KeyInfo) -> u64 {
        let _ = info;
        0
    }
    /// Where this type's allocations wait between namespaces (`spare`), if it keeps any.
    fn spare_pool() -> Option<&'static SparePool<Self>>
    where
        Self: Sized,
    {
        None
    }
}

/// What the key map keeps for one key: everything `*get` needs to open it.
#[derive(Clone, Copy, Debug)]
struct KeyEntry<I> {
    /// The object's full id.
    id: IpcId,
    /// The object's permissions in the registry's `PermTable`, kept equal to the object's by
    /// IPC_SET ([`Registry::set_key_perm`]).
    perm: PermId,
    /// The type's own part ([`IpcObject::KeyInfo`]).
    info: I,
}

/// The key map: hashbrown's table with the run-preserving
/// [`KeyHasher`](crate::table::hash::KeyHasher).
type KeyMap<I> = HashMap<IpcKey, KeyEntry<I>, KeyBuildHasher>;

/// What a `*get` of an existing key checks (the type's `existing` closure gets it).
#[derive(Debug)]
pub struct KeyView<'a, I> {
    /// The object's permissions.
    pub perm: &'a IpcPerm,
    /// The type's own part ([`IpcObject::KeyInfo`]).
    pub info: I,
}

/// The registry's writer-locked state (the kernel's `ipc_ids` under `rwsem`).
pub struct RegistryState<T: IpcObject> {
    /// Key -> what opening it checks: `*get` on an existing key then costs one hash probe
    /// under the lock, with no id-table walk, no read of the object and no reference count
    /// traffic.
    /// It grows fourfold when full (hashbrown alone would double): creating n keys then moves
    /// about n/3 entries in rehashes instead of n, for at most four times the entries' room
    /// right after a growth (at most 32000 keys by default: semmni, msgmni, shmmni).
    keys: KeyMap<T::KeyInfo>,
    /// The distinct permissions the key entries name.
    perms: PermTable,
    alloc: CyclicIdAllocator,
    /// A pending `*_next_id` restore.
    next_id: Option<IpcId>,
    /// Allocations for the next objects (`spare`).
    spares: SpareList<T>,
}

impl<T: IpcObject> RegistryState<T> {
    /// Live objects.
    pub fn in_use(&self) -> u32 {
        self.alloc.in_use()
    }
    /// The highest index in use, or 0 when empty (what `*_INFO` returns).
    pub fn max_idx(&self) -> i32 {
        self.alloc.max_idx().map_or(0, |i| i.get() as i32)
    }
    /// The pending `*_next_id` restore value, or -1.
    pub fn next_id(&self) -> i32 {
        self.next_id.map_or(-1, IpcId::get)
    }
}

/// The registry of one object type in one namespace.
pub struct Registry<T: IpcObject> {
    state: RwLock<RegistryState<T>>,
    /// Index -> object, for every live object: changed only under the writer lock of `state`,
    /// read without it.
    objects: DirectMap<T>,
    layout: IdLayout,
    /// Where keys are published for clients (`keytable`), if the embedder gave a table: the
    /// key map's changes are copied there under the writer lock.
    published: std::sync::OnceLock<KeyRegion>,
}

impl<T: IpcObject> Registry<T> {
    /// An empty registry with the given id layout.
    pub fn new(layout: IdLayout) -> Registry<T> {
        Registry {
            state: RwLock::new(RegistryState {
                keys: HashMap::default(),
                perms: PermTable::default(),
                alloc: CyclicIdAllocator::new(layout),
                next_id: None,
                spares: SpareList::default(),
            }),
            objects: DirectMap::new(layout.ipcmni()),
            layout,
            published: std::sync::OnceLock::new(),
        }
    }

    /// Publishes this registry's keys in `region` from now on (once, before any key exists).
    pub(crate) fn publish_keys(&self, region: KeyRegion) {
        let _ = self.published.set(region);
    }

    /// The id layout.
    pub fn layout(&self) -> IdLayout {
        self.layout
    }

    /// Takes the registry lock for writing (creation, removal, key changes).
    pub fn write(&self) -> RwLockWriteGuard<'_, RegistryState<T>> {
        write(&self.state)
    }

    /// Takes the registry lock for reading (info, listings, stat by index).
    pub fn read(&self) -> RwLockReadGuard<'_, RegistryState<T>> {
        read(&self.state)
    }

    /// The object with this full id, lock-free. EINVAL for a negative id, an empty index or a
    /// stale sequence number. The caller must still check, under the object's lock, that the
    /// object was not removed meanwhile (EIDRM).
    pub fn lookup(&self, id: IpcId) -> Result<Arc<T>> {
        if id.get() < 0 {
            return Err(Errno::EINVAL);
        }
        let obj = self.object_at(self.layout.idx(id)).ok_or(Errno::EINVAL)?;
        if obj.header().id() != id {
            return Err(Errno::EINVAL);
        }
        Ok(obj)
    }

    /// The object at an index (`*_STAT` take an index, not an id). EINVAL if empty or past
    /// IPCMNI.
    pub fn lookup_index(&self, idx: IpcIdx) -> Result<Arc<T>> {
        if idx.get() >= self.layout.ipcmni() {
            return Err(Errno::EINVAL);
        }
        self.object_at(idx).ok_or(Errno::EINVAL)
    }

    /// The object at `idx`, if any.
    fn object_at(&self, idx: IpcIdx) -> Option<Arc<T>> {
        self.objects.get(idx)
    }

    /// `ipcget`, Linux's decision order for `*get(key, flag)` (after the type's own pre-checks):
    /// IPC_PRIVATE always creates; a missing key without IPC_CREAT is ENOENT; a missing key
    /// with it creates; IPC_CREAT|IPC_EXCL on a present key is EEXIST; then `existing` runs the
    /// type's "more checks" and `ipcperms`, in that order, on what the key map keeps (a
    /// [`KeyView`]). Returns the id.
    ///
    /// Opening an existing key under contention takes the lock for reading only (Linux takes
    /// its rwsem for writing every time), so `*get` calls that find their key run in
    /// parallel; a call that may create takes it for writing and looks the key up again, so
    /// two creators of one key still get one object. A call with IPC_CREAT that finds the lock
    /// free takes it for writing at once and looks up only once. `create` gets the free key
    /// (a [`Vacancy`], with the writer lock held), must call [`Vacancy::add`] or
    /// [`Vacancy::add_then`] and returns the new id.
    pub fn get_or_create(
        &self,
        key: IpcKey,
        flag: i32,
        create: impl FnOnce(Vacancy<'_, T>) -> Result<IpcId>,
        existing: impl FnOnce(&KeyView<'_, T::KeyInfo>) -> Result<()>,
    ) -> Result<IpcId> {
        if key.is_private() {
            // Never in the key map: this always creates.
            return self.open_or_create_locked(&mut self.write(), key, flag, create, existing);
        }
        if flag & IPC_CREAT != 0 {
            // A lock nobody holds is taken for writing at once (it costs what a read lock
            // costs, and a creation may follow); only when others hold it, as parallel opens
            // do, is the key looked up under a shared lock first.
            if let Some(mut st) = try_write(&self.state) {
                return self.open_or_create_locked(&mut st, key, flag, create, existing);
            }
        }
        let st = self.read();
        if let Some(entry) = st.keys.get(&key) {
            return Self::opened(entry, &st.perms, flag, existing);
        }
        if flag & IPC_CREAT == 0 {
            return Err(Errno::ENOENT);
        }
        drop(st);
        // Someone may have created it between the two locks: look again.
        self.open_or_create_locked(&mut self.write(), key, flag, create, existing)
    }

    /// The writer-locked end of `ipcget`: open `key` if present, else create it (one probe of
    /// the key map either way).
    fn open_or_create_locked(
        &self,
        st: &mut RegistryState<T>,
        key: IpcKey,
        flag: i32,
        create: impl FnOnce(Vacancy<'_, T>) -> Result<IpcId>,
        existing: impl FnOnce(&KeyView<'_, T::KeyInfo>) -> Result<()>,
    ) -> Result<IpcId> {
        match self.vacancy_in(st, key) {
            Ok(free) => create(free),
            Err((entry, perms)) => Self::opened(entry, perms, flag, existing),
        }
    }

    /// `key`'s place in the key map if it is free (IPC_PRIVATE always is), else its entry
    /// (with the permissions table it refers to). A full map grows first, fourfold (see
    /// `RegistryState::keys`), so that entering the key cannot make hashbrown double it; an
    /// open that finds the map exactly full so grows it one creation early.
    fn vacancy_in<'a>(
        &'a self,
        st: &'a mut RegistryState<T>,
        key: IpcKey,
    ) -> std::result::Result<Vacancy<'a, T>, (&'a KeyEntry<T::KeyInfo>, &'a PermTable)> {
        let RegistryState {
            keys,
            perms,
            alloc,
            next_id,
            spares,
        } = st;
        let place = if key.is_private() {
            None
        } else {
            if keys.len() == keys.capacity() {
                keys.reserve(3 * keys.capacity().max(4));
            }
            match keys.entry(key) {
                Entry::Occupied(taken) => return Err((taken.into_mut(), perms)),
                Entry::Vacant(place) => Some(place),
            }
        };
        Ok(Vacancy {
            reg: self,
            place,
            perms,
            alloc,
            next_id,
            spares,
        })
    }

    /// `key`, free, for [`Vacancy::add`]: EEXIST if an object holds it. (`*get` finds its
    /// vacancies itself; this is for callers that fill a registry directly.)
    pub fn vacancy<'a>(
        &'a self,
        st: &'a mut RegistryState<T>,
        key: IpcKey,
    ) -> Result<Vacancy<'a, T>> {
        self.vacancy_in(st, key).map_err(|_| Errno::EEXIST)
    }

    /// The tail of `ipcget` for a key that exists: EEXIST, then the type's checks.
    fn opened(
        entry: &KeyEntry<T::KeyInfo>,
        perms: &PermTable,
        flag: i32,
        existing: impl FnOnce(&KeyView<'_, T::KeyInfo>) -> Result<()>,
    ) -> Result<IpcId> {
        if flag & IPC_CREAT != 0 && flag & IPC_EXCL != 0 {
            return Err(Errno::EEXIST);
        }
        existing(&KeyView {
            perm: perms.get(entry.perm),
            info: entry.info,
        })?;
        Ok(entry.id)
    }

    /// `ipc_rmid`: unhashes the key, frees the index and unpublishes the object. Lookups after
    /// this get EINVAL; holders of the object must see its own "removed" mark (EIDRM), which
    /// the caller sets under the object's lock.
    pub fn remove(&self, st: &mut RegistryState<T>, obj: &T) {
        let h = obj.header();
        let idx = self.layout.idx(h.id());
        self.unhash(st, h);
        st.alloc.free(idx);
        let removed = self.objects.remove(idx);
        drop(removed);
    }

    /// `ipc_set_key_private`: the object can no longer be found by key and shows key 0.
    pub fn set_key_private(&self, st: &mut RegistryState<T>, obj: &T) {
        let h = obj.header();
        self.unhash(st, h);
        h.key.store(IPC_PRIVATE, Ordering::Relaxed);
    }

    /// IPC_SET's half in the key map: opening `h`'s key checks `perm` from now on. The caller
    /// holds the writer lock and has just stored `perm` in the object.
    pub fn set_key_perm(&self, st: &mut RegistryState<T>, h: &IpcHeader, perm: &IpcPerm) {
        let Some(entry) = Self::key_entry(&mut st.keys, h) else {
            return;
        };
        let old = std::mem::replace(&mut entry.perm, st.perms.intern(perm));
        let (id, info) = (entry.id, entry.info);
        st.perms.release(old);
        if let Some(region) = self.published.get() {
            region.put(h.key(), id, perm, T::key_info_word(info));
        }
    }

    /// `h`'s own entry in the key map, if its key (not private) is still its.
    fn key_entry<'s>(
        keys: &'s mut KeyMap<T::KeyInfo>,
        h: &IpcHeader,
    ) -> Option<&'s mut KeyEntry<T::KeyInfo>> {
        let entry = keys.get_mut(&h.key())?;
        (entry.id == h.id()).then_some(entry)
    }

    fn unhash(&self, st: &mut RegistryState<T>, h: &IpcHeader) {
        if let Some(&mut KeyEntry { perm, .. }) = Self::key_entry(&mut st.keys, h) {
            st.keys.remove(&h.key());
            st.perms.release(perm);
            if let Some(region) = self.published.get() {
                region.remove(h.key());
            }
        }
    }

    /// Every live object in increasing index order (for `/proc/sysvipc` and namespace-wide
    /// walks). Takes the lock for reading while it collects.
    pub fn snapshot(&self) -> Vec<Arc<T>> {
        let st = self.read();
        st.alloc
            .used()
            .filter_map(|idx| self.object_at(idx))
            .collect()
    }

    /// Sets `*_next_id` (the caller checked privilege). Linux accepts `[0, INT_MAX]` only;
    /// -1 cannot be written back.
    pub fn set_next_id(&self, value: i64) -> Result<()> {
        if !(0..=i64::from(i32::MAX)).contains(&value) {
            return Err(Errno::EINVAL);
        }
        self.write().next_id = Some(IpcId::new(value as i32));
        Ok(())
    }
}

impl<T: IpcObject> Drop for Registry<T> {
    /// Keeps the allocations of the objects only the registry still holds, if the type has a
    /// pool (`spare`); the others are dropped as usual.
    fn drop(&mut self) {
        let Some(pool) = T::spare_pool() else {
            return;
        };
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let spares = &mut st.spares;
        self.objects.drain(|obj| spares.recycle(obj));
        spares.give_back(pool);
    }
}

pub mod spare;
#[cfg(test)]
mod tests;
mod vacancy;

pub use vacancy::Vacancy;
