//! One stripe of the timer table: an open-addressing map from a *group* (eight consecutive ids
//! of one process) to the slots of those ids. The caller holds the stripe's lock around every
//! method; nothing here is shared or atomic.
//!
//! Layout:
//! - A group's key is `(owner, id >> 3)` mixed by SplitMix64's finaliser ([`group_hash`]). The
//!   mix is a bijection, so a cell stores only the mixed value: it identifies the group, its low
//!   bits give the home cell, and the table uses its top bits to pick the stripe.
//! - Cells are probed linearly; the map keeps at most 3/4 of them in use (so a probe always
//!   meets a vacant cell and stops) and removes by backward shift, so there are no tombstones.
//! - A cell holds its group in one of two shapes. While one id of the group holds a slot, the
//!   cell keeps that id's index and value inline ([`Group::One`]): sparse ids (checkpoint/restore
//!   can place timers 512 ids apart) cost one 24-byte cell each, and a create/delete loop
//!   allocates nothing. A second id promotes the group to a *leaf* ([`Group::Many`]): a bitmap
//!   of held ids in the cell and a boxed array of eight values, one cache line, so consecutive
//!   ids share a probe and a line. A leaf is freed when its last id goes (it is not demoted to
//!   the inline shape when one id is left, so two ids of a group created and deleted in turn do
//!   not allocate and free the leaf each time).
//! - Growth doubles the cell array when a new group would pass 3/4 load; a removal that leaves
//!   at most 1/8 in use shrinks it to twice the groups left. An emptied map keeps its smallest
//!   array (two cells), so a stripe used once costs 48 bytes until the table is dropped.
//!
//! A slot is *reserved* while its id is held without a value (see `TimerTable`): lookups return
//! only values, so a reserved-only id is invisible to them.
//!
//! Kept by hand rather than on hashbrown: groups in std's (hashbrown) map per stripe made
//! `timer_getoverrun` lookups about 15% slower at 100k timers (control bytes, then the entry:
//! two dependent cache lines per probe; `uipc bench timers --runs 3` and a scratch harness,
//! 2026-11-23, module doc of `table`), and the seed's bar (at least 5x faster than mainline at
//! 100k, 6.1x in the quiet run of BENCHMARKS.md) leaves little room for it. A build with
//! `hashbrown::HashTable` in its place was run against this one on 2026-11-27 (`uipc bench
//! timers --runs 3`, once each, on a 2-core machine shared with about seven compiling agents,
//! load average 17-27): both runs' deviations exceeded their medians, so that run decides
//! nothing (BENCHMARKS.md, "The table layer on crates").

use crate::sync::Arc;

/// Ids per group: `id >> GROUP_BITS` names the group, `id & (GROUP_IDS - 1)` the slot in it.
pub(crate) const GROUP_BITS: u32 = 3;
const GROUP_IDS: usize = 1 << GROUP_BITS;
/// The smallest cell array a map that held a group keeps.
const MIN_CELLS: usize = 2;

/// The mixed key of `(owner, id)`'s group (SplitMix64's finaliser: every input bit reaches
/// every output bit, and xor-shifts and odd multiplications invert, so distinct groups never
/// share a mixed key).
pub(crate) fn group_hash(owner: i32, id: i32) -> u64 {
    let mut h = ((owner as u32 as u64) << 32) | (id as u32 >> GROUP_BITS) as u64;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// `id`'s slot within its group.
pub(crate) fn slot_index(id: i32) -> u8 {
    (id as u32 & (GROUP_IDS as u32 - 1)) as u8
}

type Values<T> = [Option<Arc<T>>; GROUP_IDS];

/// What a cell holds. A value is `None` while its id is only reserved.
enum Group<T> {
    Vacant,
    /// One id of the group holds a slot: its index in the group and its value.
    One {
        index: u8,
        value: Option<Arc<T>>,
    },
    /// Two or more ids did: bit `i` of `held` says whether index `i` holds a slot.
    Many {
        held: u8,
        values: Box<Values<T>>,
    },
}

struct Cell<T> {
    hash: u64,
    group: Group<T>,
}

fn vacant_cells<T>(n: usize) -> Box<[Cell<T>]> {
    (0..n)
        .map(|_| Cell {
            hash: 0,
            group: Group::Vacant,
        })
        .collect()
}

/// A stripe's groups. See the module doc.
pub(crate) struct GroupMap<T> {
    cells: Box<[Cell<T>]>,
    /// Occupied cells.
    groups: u32,
    /// Ids holding a slot (reserved or published) across all groups.
    ids: u32,
}

impl<T> GroupMap<T> {
    /// An empty map; allocates nothing.
    pub(crate) fn new() -> GroupMap<T> {
        GroupMap {
            cells: vacant_cells(0),
            groups: 0,
            ids: 0,
        }
    }

    fn find(&self, hash: u64) -> Option<usize> {
        let mask = self.cells.len().checked_sub(1)?;
        let mut i = hash as usize & mask;
        loop {
            let cell = &self.cells[i];
            if let Group::Vacant = cell.group {
                return None;
            }
            if cell.hash == hash {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Takes the slot of `index` in group `hash` if no id holds it. Returns whether it did.
    pub(crate) fn reserve(&mut self, hash: u64, index: u8) -> bool {
        let bit = 1u8 << index;
        let Some(i) = self.find(hash) else {
            self.insert(hash, Group::One { index, value: None });
            self.ids += 1;
            return true;
        };
        let group = &mut self.cells[i].group;
        *group = match std::mem::replace(group, Group::Vacant) {
            Group::One {
                index: other,
                value,
            } if other != index => {
                let mut values: Box<Values<T>> = Box::new(std::array::from_fn(|_| None));
                values[other as usize] = value;
                Group::Many {
                    held: bit | 1 << other,
                    values,
                }
            }
            Group::Many { held, values } if held & bit == 0 => Group::Many {
                held: held | bit,
                values,
            },
            unchanged => {
                *group = unchanged;
                return false;
            }
        };
        self.ids += 1;
        true
    }

    /// Stores `value` in the reserved slot of `index`. False if the slot is not held or
    /// already has a value.
    pub(crate) fn publish(&mut self, hash: u64, index: u8, value: Arc<T>) -> bool {
        let Some(i) = self.find(hash) else {
            return false;
        };
        let slot = match &mut self.cells[i].group {
            Group::One { index: held, value } if *held == index => value,
            Group::Many { held, values } if *held & 1 << index != 0 => &mut values[index as usize],
            _ => return false,
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(value);
        true
    }

    /// `f` of the value of `index`, if published.
    pub(crate) fn get_with<R>(
        &self,
        hash: u64,
        index: u8,
        f: impl FnOnce(&Arc<T>) -> R,
    ) -> Option<R> {
        let i = self.find(hash)?;
        match &self.cells[i].group {
            Group::One { index: held, value } if *held == index => value.as_ref().map(f),
            Group::Many { values, .. } => values[index as usize].as_ref().map(f),
            _ => None,
        }
    }

    /// Whether `index` holds a slot, reserved or published.
    pub(crate) fn holds(&self, hash: u64, index: u8) -> bool {
        self.find(hash).is_some_and(|i| match &self.cells[i].group {
            Group::One { index: held, .. } => *held == index,
            Group::Many { held, .. } => held & 1 << index != 0,
            Group::Vacant => false,
        })
    }

    /// Frees the slot of `index`, returning its value if it was published.
    pub(crate) fn remove(&mut self, hash: u64, index: u8) -> Option<Arc<T>> {
        let i = self.find(hash)?;
        let bit = 1u8 << index;
        let (value, emptied) = match &mut self.cells[i].group {
            Group::One { index: held, value } if *held == index => (value.take(), true),
            Group::Many { held, values } if *held & bit != 0 => {
                *held &= !bit;
                (values[index as usize].take(), *held == 0)
            }
            _ => return None,
        };
        self.ids -= 1;
        if emptied {
            self.vacate(i);
        }
        value
    }

    /// Ids holding a slot.
    pub(crate) fn ids(&self) -> usize {
        self.ids as usize
    }

    /// Heap bytes: the cell array and the leaves.
    pub(crate) fn heap_bytes(&self) -> usize {
        let leaves = self
            .cells
            .iter()
            .filter(|c| matches!(c.group, Group::Many { .. }))
            .count();
        self.cells.len() * std::mem::size_of::<Cell<T>>()
            + leaves * std::mem::size_of::<Values<T>>()
    }

    fn insert(&mut self, hash: u64, group: Group<T>) {
        if (self.groups as usize + 1) * 4 > self.cells.len() * 3 {
            self.rebuild((self.cells.len() * 2).max(MIN_CELLS));
        }
        self.groups += 1;
        Self::place(&mut self.cells, Cell { hash, group });
    }

    /// Puts `cell` in the first vacant cell from its home. The caller keeps a vacant cell.
    fn place(cells: &mut [Cell<T>], cell: Cell<T>) {
        let mask = cells.len() - 1;
        let mut i = cell.hash as usize & mask;
        while !matches!(cells[i].group, Group::Vacant) {
            i = (i + 1) & mask;
        }
        cells[i] = cell;
    }

    fn rebuild(&mut self, cells: usize) {
        let old = std::mem::replace(&mut self.cells, vacant_cells(cells));
        for cell in old.into_vec() {
            if !matches!(cell.group, Group::Vacant) {
                Self::place(&mut self.cells, cell);
            }
        }
    }

    /// Empties cell `hole` (its group holds no id any more) and shifts later cells of the probe
    /// run back, so every remaining group stays reachable from its home without tombstones.
    fn vacate(&mut self, mut hole: usize) {
        let mask = self.cells.len() - 1;
        self.cells[hole].group = Group::Vacant;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if let Group::Vacant = self.cells[j].group {
                break;
            }
            let home = self.cells[j].hash as usize & mask;
            // The cell at `j` may move into the hole unless its home lies cyclically in
            // (hole, j]: moving it before its home would hide it from its probe.
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.cells.swap(hole, j);
                hole = j;
            }
        }
        self.groups -= 1;
        let groups = self.groups as usize;
        if self.cells.len() > MIN_CELLS && groups * 8 <= self.cells.len() {
            self.rebuild((groups * 2).next_power_of_two().max(MIN_CELLS));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn group_hash_is_shared_by_eight_consecutive_ids_and_differs_across_groups_and_owners() {
        assert_eq!(group_hash(5, 16), group_hash(5, 23));
        assert_ne!(group_hash(5, 23), group_hash(5, 24));
        assert_ne!(group_hash(5, 16), group_hash(6, 16));
        assert_eq!((slot_index(16), slot_index(23)), (0, 7));
        assert_eq!(slot_index(i32::MAX), 7);
    }

    #[test]
    fn a_second_id_promotes_the_group_to_a_leaf_keeping_the_first_value() {
        let mut m = GroupMap::new();
        let h = group_hash(1, 0);
        assert!(m.reserve(h, 3));
        assert!(m.publish(h, 3, Arc::new(30)));
        assert_eq!(m.heap_bytes(), MIN_CELLS * std::mem::size_of::<Cell<u32>>());
        assert!(m.reserve(h, 5));
        assert!(m.heap_bytes() > MIN_CELLS * std::mem::size_of::<Cell<u32>>());
        assert_eq!(m.get_with(h, 3, |v| **v), Some(30));
        assert_eq!(m.get_with(h, 5, |v| **v), None, "reserved, not published");
        assert!(!m.reserve(h, 3) && !m.reserve(h, 5));
        assert!(m.publish(h, 5, Arc::new(50)));
        assert!(!m.publish(h, 5, Arc::new(51)), "published once");
        assert!(
            !m.publish(h, 6, Arc::new(60)),
            "publish needs a reservation"
        );
        assert_eq!(m.remove(h, 3).as_deref(), Some(&30));
        assert!(!m.holds(h, 3) && m.holds(h, 5));
        assert_eq!(m.remove(h, 5).as_deref(), Some(&50));
        assert_eq!((m.ids(), m.groups), (0, 0));
        assert_eq!(m.heap_bytes(), MIN_CELLS * std::mem::size_of::<Cell<u32>>());
    }

    #[test]
    fn cells_stay_at_24_bytes_and_leaves_at_one_cache_line() {
        assert_eq!(std::mem::size_of::<Cell<u64>>(), 24);
        assert_eq!(std::mem::size_of::<Values<u64>>(), 64);
    }

    /// Random reserve/publish/remove/lookup over few groups (so cells collide, grow, shift
    /// back and shrink), checked against a plain map.
    #[test]
    fn operations_agree_with_a_plain_map_under_churn() {
        let mut m = GroupMap::new();
        let mut model: HashMap<(i32, i32), Option<u32>> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Phases of mostly-insert and mostly-remove, so the map grows and shrinks.
            let filling = (step / 20_000) % 2 == 0;
            let (owner, id) = ((x % 3) as i32, ((x >> 8) % 400) as i32);
            let (h, i) = (group_hash(owner, id), slot_index(id));
            match (x >> 40) % 8 {
                0..=2 if filling => assert_eq!(
                    m.reserve(h, i),
                    !model.contains_key(&(owner, id)) && model.insert((owner, id), None).is_none()
                ),
                0..=3 => {
                    let want = match model.get(&(owner, id)) {
                        Some(None) => {
                            model.insert((owner, id), Some(step));
                            true
                        }
                        _ => false,
                    };
                    assert_eq!(m.publish(h, i, Arc::new(step)), want);
                }
                4 | 5 => assert_eq!(
                    m.remove(h, i).map(|v| *v),
                    model.remove(&(owner, id)).flatten()
                ),
                _ => {
                    assert_eq!(
                        m.get_with(h, i, |v| **v),
                        model.get(&(owner, id)).copied().flatten()
                    );
                    assert_eq!(m.holds(h, i), model.contains_key(&(owner, id)));
                }
            }
            assert_eq!(m.ids(), model.len());
            assert!(m.groups as usize * 4 <= m.cells.len() * 3);
        }
        for (&(owner, id), value) in &model {
            let (h, i) = (group_hash(owner, id), slot_index(id));
            assert_eq!(m.get_with(h, i, |v| **v), *value, "({owner}, {id})");
        }
    }
}
