//! Cyclic index allocation with sequence numbers: the id scheme of seed 002.
//!
//! A SysV IPC id is `(seq << shift) + idx`. Linux (since 5.2) picks `idx` cyclically: the first
//! free index in `[0, window)` searching from just after the last one handed out, where
//! `window = min(max(in_use * 3/2, min_cycle), ipcmni)`; `seq` moves on only when the search
//! wraps (`idx <= last_idx`), which makes ids come back as late as possible. A restore request
//! (`*_next_id`) takes the first free index at or above the wanted one with the wanted seq, and
//! leaves the cursor and `seq` alone.
//!
//! The used indices are a [`FixedBitSet`] that grows (to powers of two, at most IPCMNI) only as
//! far as the highest index ever claimed: with cyclic allocation that is at most about 1.5
//! times the peak live count (4 KiB for Linux's default 32768 indices), and only a restore to
//! a high index (`*_next_id`) makes it longer (2 MiB for index 15777204 in the extended
//! layout). Searching for a free index reads the set's words from the cursor: one word in the
//! common case (the index after the last one is free), at most `window / 64` words when the
//! search wraps past live objects.
//!
//! Not synchronized: the registry calls it under its writer lock.

use crate::ids::{IpcId, IpcIdx};
use crate::Errno;
use fixedbitset::FixedBitSet;

/// Bits of one word of the set (`fixedbitset::Block` is `usize`).
const WORD: u32 = usize::BITS;

/// How ids are laid out: the two Linux modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdLayout {
    /// Bits of the index (15, or 24 with `ipcmni_extend`).
    pub shift: u32,
    /// Sequence numbers wrap to 0 on reaching this (`INT_MAX >> shift`).
    pub seq_max: u32,
    /// The smallest cycling window (64, or 4096 extended).
    pub min_cycle: u32,
}

impl IdLayout {
    /// Linux's default layout: 15 index bits, IPCMNI 32768.
    pub const DEFAULT: IdLayout = IdLayout {
        shift: 15,
        seq_max: (i32::MAX >> 15) as u32,
        min_cycle: 64,
    };
    /// The `ipcmni_extend` layout: 24 index bits, 7 sequence bits, IPCMNI 16777216.
    pub const EXTENDED: IdLayout = IdLayout {
        shift: 24,
        seq_max: (i32::MAX >> 24) as u32,
        min_cycle: 4096,
    };

    /// IPCMNI: how many indices exist.
    pub const fn ipcmni(self) -> u32 {
        1 << self.shift
    }

    /// The id for `seq` and `idx`.
    pub const fn id(self, seq: u32, idx: IpcIdx) -> IpcId {
        IpcId::new(((seq << self.shift) + idx.get()) as i32)
    }

    /// The index part of a (non-negative) id.
    pub const fn idx(self, id: IpcId) -> IpcIdx {
        IpcIdx::new(id.get() as u32 & (self.ipcmni() - 1))
    }

    /// The sequence part of a (non-negative) id.
    pub const fn seq(self, id: IpcId) -> u32 {
        id.get() as u32 >> self.shift
    }
}

/// Hands out ids the way Linux's `ipc_idr_alloc` does.
#[derive(Debug, Clone)]
pub struct CyclicIdAllocator {
    layout: IdLayout,
    /// Bit `idx` set: the index is in use. Bits past the set's length are clear.
    used: FixedBitSet,
    /// Set bits in `used`.
    in_use: u32,
    last_idx: i64,
    seq: u32,
}

/// The first index in `[from, end)` whose bit in `words` is clear (bits past `words` are
/// clear).
fn first_clear_in(words: &[usize], from: u32, end: u32) -> Option<u32> {
    let mut w = (from / WORD) as usize;
    let mut mask = !0usize << (from % WORD);
    while (w as u64) * u64::from(WORD) < u64::from(end) {
        let word = words.get(w).copied().unwrap_or(0);
        let hits = !word & mask;
        if hits != 0 {
            let idx = w as u32 * WORD + hits.trailing_zeros();
            return (idx < end).then_some(idx);
        }
        w += 1;
        mask = !0;
    }
    None
}

impl CyclicIdAllocator {
    /// An empty allocator: the first id is 0.
    pub fn new(layout: IdLayout) -> CyclicIdAllocator {
        CyclicIdAllocator {
            layout,
            used: FixedBitSet::new(),
            in_use: 0,
            last_idx: -1,
            seq: 0,
        }
    }

    /// The id layout.
    pub fn layout(&self) -> IdLayout {
        self.layout
    }

    /// Live ids.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// The highest index in use.
    pub fn max_idx(&self) -> Option<IpcIdx> {
        self.used.maximum().map(|i| IpcIdx::new(i as u32))
    }

    /// Indices in use, increasing.
    pub fn used(&self) -> impl Iterator<Item = IpcIdx> + '_ {
        self.used.ones().map(|i| IpcIdx::new(i as u32))
    }

    /// The first free index in `[from, end)`.
    fn first_free(&self, from: u32, end: u32) -> Option<u32> {
        first_clear_in(self.used.as_slice(), from, end)
    }

    /// Marks `idx` used, growing the set to the next power of two past it (at most IPCMNI).
    fn claim(&mut self, idx: u32) {
        let need = idx as usize + 1;
        if need > self.used.len() {
            let len = need
                .next_power_of_two()
                .max(WORD as usize)
                .min(self.layout.ipcmni() as usize);
            self.used.grow(len);
        }
        self.used.insert(idx as usize);
        self.in_use += 1;
    }

    /// A new id by cyclic allocation. ENOSPC if the window is full (the caller checks the
    /// count limit first, so this only happens when every index is taken).
    pub fn alloc(&mut self) -> Result<IpcId, Errno> {
        let l = self.layout;
        let window = (self.in_use.saturating_mul(3) / 2)
            .max(l.min_cycle)
            .min(l.ipcmni());
        let cursor = (self.last_idx + 1) as u32;
        let idx = match self.first_free(cursor, window) {
            Some(idx) => idx,
            None => self.first_free(0, window).ok_or(Errno::ENOSPC)?,
        };
        self.claim(idx);
        if i64::from(idx) <= self.last_idx {
            self.seq += 1;
            if self.seq >= l.seq_max {
                self.seq = 0;
            }
        }
        self.last_idx = i64::from(idx);
        Ok(l.id(self.seq, IpcIdx::new(idx)))
    }

    /// A restored id: `next_id`'s seq and the first free index at or above its index, below
    /// IPCMNI, else ENOSPC. The cursor and the running seq are untouched.
    pub fn alloc_at(&mut self, next_id: IpcId) -> Result<IpcId, Errno> {
        let l = self.layout;
        let idx = self
            .first_free(l.idx(next_id).get(), l.ipcmni())
            .ok_or(Errno::ENOSPC)?;
        self.claim(idx);
        Ok(l.id(l.seq(next_id), IpcIdx::new(idx)))
    }

    /// Frees the index of a removed object.
    pub fn free(&mut self, idx: IpcIdx) {
        let idx = idx.get() as usize;
        if self.used.contains(idx) {
            self.used.remove(idx);
            self.in_use -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(a: &mut CyclicIdAllocator) -> i32 {
        a.alloc().unwrap().get()
    }

    fn alloc_at(a: &mut CyclicIdAllocator, id: i32) -> Result<i32, Errno> {
        a.alloc_at(IpcId::new(id)).map(IpcId::get)
    }

    /// Frees the index of `id`.
    fn free_id(a: &mut CyclicIdAllocator, id: i32) {
        let idx = a.layout().idx(IpcId::new(id));
        a.free(idx);
    }

    #[test]
    fn create_remove_alone_cycles_64_then_bumps_seq() {
        let mut a = CyclicIdAllocator::new(IdLayout::DEFAULT);
        let mut ids = Vec::new();
        for _ in 0..66 {
            let id = alloc(&mut a);
            ids.push(id);
            free_id(&mut a, id);
        }
        assert_eq!(&ids[..3], &[0, 1, 2]);
        assert_eq!(ids[63], 63);
        assert_eq!(ids[64], 32768);
        assert_eq!(ids[65], 32769);
    }

    #[test]
    fn window_follows_in_use_and_wraps_with_seq_plus_one() {
        // Linux, observed: 100 live objects at idx 12..111 give a window of 150.
        let mut a = CyclicIdAllocator::new(IdLayout::DEFAULT);
        for _ in 0..112 {
            alloc(&mut a);
        }
        for idx in 0..12 {
            a.free(IpcIdx::new(idx));
        }
        let mut seen = Vec::new();
        for _ in 0..52 {
            let id = alloc(&mut a);
            seen.push(id);
            free_id(&mut a, id);
        }
        assert_eq!(seen[0], 112);
        assert_eq!(seen[37], 149);
        assert_eq!(seen[38], 32768, "wraps to index 0 with seq 1");
        assert_eq!(seen[49], 32768 + 11);
        assert_eq!(seen[50], 32768 + 112, "then back to 112");
    }

    #[test]
    fn searches_cross_words_and_the_end_of_the_set() {
        let words = [!0usize, 0b1011];
        assert_eq!(first_clear_in(&words, 0, 1000), Some(66));
        assert_eq!(first_clear_in(&words, 67, 1000), Some(68));
        assert_eq!(first_clear_in(&words, 5, 66), None, "end is exclusive");
        assert_eq!(
            first_clear_in(&words, 200, 1000),
            Some(200),
            "past the set: free"
        );
        let mut a = CyclicIdAllocator::new(IdLayout::EXTENDED);
        assert_eq!(alloc_at(&mut a, 15_777_204).unwrap(), 15_777_204);
        assert_eq!(a.max_idx(), Some(IpcIdx::new(15_777_204)));
        assert_eq!(
            a.used().find(|&i| i.get() >= 1),
            Some(IpcIdx::new(15_777_204))
        );
        assert_eq!(alloc(&mut a), 0);
        assert_eq!(
            a.used().map(IpcIdx::get).collect::<Vec<_>>(),
            [0, 15_777_204]
        );
        a.free(IpcIdx::new(15_777_204));
        a.free(IpcIdx::new(15_777_204));
        assert_eq!((a.in_use(), a.max_idx()), (1, Some(IpcIdx::new(0))));
    }

    #[test]
    fn consecutive_creates_get_neighbouring_indices() {
        let mut a = CyclicIdAllocator::new(IdLayout::EXTENDED);
        let x = alloc(&mut a);
        let y = alloc(&mut a);
        assert_eq!(y, x + 1);
    }

    #[test]
    fn restore_takes_the_first_free_index_at_or_above_and_keeps_the_cursor() {
        let mut a = CyclicIdAllocator::new(IdLayout::DEFAULT);
        assert_eq!(alloc(&mut a), 0);
        assert_eq!(
            alloc_at(&mut a, 3 << 15).unwrap(),
            98305,
            "idx 0 busy: seq 3, idx 1"
        );
        assert_eq!(alloc_at(&mut a, (7 << 15) | 1000).unwrap(), 230376);
        assert_eq!(
            alloc_at(&mut a, 65535 << 15).unwrap() as u32 >> 15,
            65535,
            "seq 65535 accepted"
        );
        assert_eq!(
            alloc(&mut a),
            3,
            "cursor still after idx 0: skips the restored idx 1 and 2"
        );
        let mut full = CyclicIdAllocator::new(IdLayout::DEFAULT);
        assert_eq!(alloc_at(&mut full, 32767).unwrap(), 32767);
        assert_eq!(
            alloc_at(&mut full, 32767),
            Err(Errno::ENOSPC),
            "the search stops at IPCMNI"
        );
    }

    #[test]
    fn seven_sequence_bits_reuse_an_id_after_128_pairs_when_the_table_is_full() {
        // Seed 002: with 2^24 - 1 objects live, get/remove of the last index repeats its id
        // after 128 pairs. Only the 7 sequence bits matter, so a 10-bit index space with the
        // extended mode's seq_max shows the same cycle without 16 million objects.
        let l = IdLayout {
            shift: 10,
            seq_max: 127,
            min_cycle: 64,
        };
        let mut a = CyclicIdAllocator::new(l);
        for _ in 0..(l.ipcmni() - 1) {
            alloc(&mut a);
        }
        let first = alloc(&mut a);
        free_id(&mut a, first);
        let mut pairs = 1;
        loop {
            let id = alloc(&mut a);
            free_id(&mut a, id);
            pairs += 1;
            if id == first {
                break;
            }
        }
        assert_eq!(pairs, 128);
    }
}
