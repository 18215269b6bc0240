//! Before seed 000: `semget` found keys by walking every index up to the highest in use,
//! comparing each object's key, all under the registry's writer lock (`ipc_findkey` before
//! Linux 4.14). Creation took the first free index. Everything else (permission checks, a
//! zeroed set of semaphores) is done as in the engine, so the columns differ by the lookup.

use std::sync::{Mutex, RwLock};
use uipc::ipc::consts::{IPC_CREAT, IPC_EXCL};
use uipc::ipc::IpcPerm;
use uipc::{Cred, Errno};

struct Set {
    key: i32,
    id: i32,
    perm: Mutex<IpcPerm>,
    #[allow(dead_code)]
    values: Vec<u16>,
}

/// A semaphore registry with a linear key search.
#[derive(Default)]
pub struct LinearSemRegistry {
    slots: RwLock<Vec<Option<Set>>>,
}

impl LinearSemRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// `semget` with the pre-4.14 key search.
    pub fn semget(&self, cred: &Cred, key: i32, nsems: i32, flag: i32) -> Result<i32, Errno> {
        let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let found = if key == 0 {
            None
        } else {
            slots.iter().flatten().find(|s| s.key == key)
        };
        match found {
            Some(_) if flag & IPC_CREAT != 0 && flag & IPC_EXCL != 0 => Err(Errno::EEXIST),
            Some(set) => {
                if nsems > set.values.len() as i32 {
                    return Err(Errno::EINVAL);
                }
                set.perm
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .check(cred, flag)?;
                Ok(set.id)
            }
            None if key != 0 && flag & IPC_CREAT == 0 => Err(Errno::ENOENT),
            None => {
                if nsems < 1 {
                    return Err(Errno::EINVAL);
                }
                let idx = slots
                    .iter()
                    .position(Option::is_none)
                    .unwrap_or(slots.len());
                if idx == slots.len() {
                    slots.push(None);
                }
                let id = idx as i32;
                slots[idx] = Some(Set {
                    key,
                    id,
                    perm: Mutex::new(IpcPerm::new(cred, flag)),
                    values: vec![0; nsems as usize],
                });
                Ok(id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_semget_for_the_benchmarked_calls() {
        let r = LinearSemRegistry::new();
        let root = Cred::root(1);
        let a = r.semget(&root, 10, 1, IPC_CREAT | 0o600).unwrap();
        assert_eq!(r.semget(&root, 10, 1, 0o600), Ok(a));
        assert_eq!(r.semget(&root, 11, 1, 0), Err(Errno::ENOENT));
        assert_eq!(
            r.semget(&root, 10, 1, IPC_CREAT | IPC_EXCL),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            r.semget(&Cred::user(2, 1000, 1000), 10, 1, 0o600),
            Err(Errno::EACCES)
        );
        assert_ne!(r.semget(&root, 12, 1, IPC_CREAT | 0o600).unwrap(), a);
    }
}
