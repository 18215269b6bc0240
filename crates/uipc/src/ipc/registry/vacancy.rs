//! [`Vacancy`]: a free key found under the registry's writer lock, and `ipc_addid`.

use super::spare::SpareList;
use super::{IpcObject, KeyEntry, Registry};
use crate::ipc::perm::IpcPerm;
use crate::ipc::perm_table::PermTable;
use crate::table::hash::KeyBuildHasher;
use crate::table::CyclicIdAllocator;
use crate::{Errno, IpcId, IpcKey, Result};
use hashbrown::hash_map::VacantEntry;
use std::sync::Arc;

/// A free key (or IPC_PRIVATE) found under the registry's writer lock, with what creating an
/// object there needs: [`Registry::get_or_create`] hands one to the type's `create`. Entering
/// the object puts it where the lookup found the key free, without probing the key map again.
pub struct Vacancy<'a, T: IpcObject> {
    pub(super) reg: &'a Registry<T>,
    /// The key's place in the key map; `None` for IPC_PRIVATE, which is never entered.
    pub(super) place: Option<VacantEntry<'a, IpcKey, KeyEntry<T::KeyInfo>, KeyBuildHasher>>,
    pub(super) perms: &'a mut PermTable,
    pub(super) alloc: &'a mut CyclicIdAllocator,
    pub(super) next_id: &'a mut Option<IpcId>,
    /// Allocations to build the object in (`spare`).
    pub(super) spares: &'a mut SpareList<T>,
}

impl<T: IpcObject> Vacancy<'_, T> {
    /// `ipc_addid`: ENOSPC at the count limit (`min(limit, IPCMNI)`); then the id, consuming a
    /// pending `*_next_id`; then `build(id)` makes the object, which is published under its
    /// index, and under its key with the permissions and info in `opens` (what opening the key
    /// checks from then on). The type's own checks (sizes, semmns, shmall) must have passed
    /// already: failures before this point leave `*_next_id` pending, as on Linux.
    pub fn add(
        self,
        limit: i32,
        opens: (&IpcPerm, T::KeyInfo),
        build: impl FnOnce(IpcId) -> T,
    ) -> Result<Arc<T>> {
        self.add_then(limit, opens, build, Arc::clone)
    }

    /// [`Vacancy::add`], returning `then(&object)` instead of a new reference to the object
    /// (a creation that only needs the id then costs no reference count traffic beyond the
    /// one reference the registry keeps, in its id map).
    pub fn add_then<R>(
        self,
        limit: i32,
        (perm, info): (&IpcPerm, T::KeyInfo),
        build: impl FnOnce(IpcId) -> T,
        then: impl FnOnce(&Arc<T>) -> R,
    ) -> Result<R> {
        let layout = self.reg.layout;
        let limit = (limit.max(0) as u32).min(layout.ipcmni());
        if self.alloc.in_use() >= limit {
            return Err(Errno::ENOSPC);
        }
        let id = match self.next_id.take() {
            Some(wanted) => self.alloc.alloc_at(wanted)?,
            None => self.alloc.alloc()?,
        };
        let obj = self.spares.fill(T::spare_pool(), build(id));
        debug_assert_eq!(obj.header().id(), id);
        let out = then(&obj);
        let key = self.place.as_ref().map(|place| *place.key());
        if let Some(place) = self.place {
            let perm = self.perms.intern(perm);
            place.insert(KeyEntry { id, perm, info });
        }
        let replaced = self.reg.objects.insert(layout.idx(id), obj);
        debug_assert!(replaced.is_none(), "the allocator gave a used index");
        // Published only once the object can be found by its id: a client that opens the key
        // from the table may use the id at once.
        if let (Some(key), Some(region)) = (key, self.reg.published.get()) {
            region.put(key, id, perm, T::key_info_word(info));
        }
        Ok(out)
    }
}
