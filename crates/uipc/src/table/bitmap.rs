//! A sparse, hierarchical bitmap of used indices.
//!
//! Level 0 holds one bit per index; a bit at level k+1 says that word of level k is full. A
//! level of at most `DENSE_WORDS` words is a plain array (Linux's default 32768 indices: 512
//! words, 4 KiB, indexed directly on every allocation); a larger one stores only its non-zero
//! words, in a hash map, so memory follows the number of set bits, not the largest index (an
//! index at 15777204 costs a few sparse words and the small top levels, not 2 MiB). Finding the first
//! clear index at or after a position walks up past full words and back down: O(levels), at
//! most 4 levels for 2^24 indices. An ordered set of the non-zero level-0 words gives the
//! maximum and ordered walks; it changes only when a word becomes empty or non-empty, so
//! dense allocation touches it once per 64 indices.
//!
//! Not synchronized: the owner (the registry, under its writer lock) serializes all access.

use super::hash::IntBuildHasher;
use std::collections::{BTreeSet, HashMap};

const BITS: u32 = 64;
/// Levels of up to this many words are arrays; larger ones are sparse.
const DENSE_WORDS: u32 = 1024;

/// One level's words: an array when small, the non-zero words only when large.
#[derive(Debug, Clone)]
enum Words {
    Dense(Vec<u64>),
    Sparse(HashMap<u32, u64, IntBuildHasher>),
}

impl Words {
    fn new(words: u32) -> Words {
        if words <= DENSE_WORDS {
            Words::Dense(vec![0; words as usize])
        } else {
            Words::Sparse(HashMap::default())
        }
    }

    fn get(&self, w: u32) -> u64 {
        match self {
            Words::Dense(v) => v.get(w as usize).copied().unwrap_or(0),
            Words::Sparse(m) => m.get(&w).copied().unwrap_or(0),
        }
    }

    /// The word, to be set (`w` must be below the level's size).
    fn get_mut(&mut self, w: u32) -> &mut u64 {
        match self {
            Words::Dense(v) => &mut v[w as usize],
            Words::Sparse(m) => m.entry(w).or_insert(0),
        }
    }

    /// Forgets a word that became zero.
    fn clear(&mut self, w: u32) {
        match self {
            Words::Dense(v) => v[w as usize] = 0,
            Words::Sparse(m) => {
                m.remove(&w);
            }
        }
    }

    /// Words held in memory.
    #[cfg(test)]
    fn stored(&self) -> usize {
        match self {
            Words::Dense(v) => v.len(),
            Words::Sparse(m) => m.len(),
        }
    }
}

/// A set of indices in `[0, capacity)`.
#[derive(Debug, Clone)]
pub struct SparseBitmap {
    /// `levels[0]`: index bits; `levels[k]`: full-word bits of `levels[k-1]`.
    levels: Vec<Words>,
    /// The level-0 words that are not zero, in order.
    nonzero: BTreeSet<u32>,
    capacity: u32,
    count: u32,
}

impl SparseBitmap {
    /// An empty set of indices below `capacity` (at most 2^31).
    pub fn new(capacity: u32) -> SparseBitmap {
        let mut levels = vec![Words::new(capacity.div_ceil(BITS))];
        let mut positions = capacity.div_ceil(BITS);
        while positions > 1 {
            positions = positions.div_ceil(BITS);
            levels.push(Words::new(positions));
        }
        SparseBitmap {
            levels,
            nonzero: BTreeSet::new(),
            capacity,
            count: 0,
        }
    }

    /// How many indices are set.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether `idx` is set.
    pub fn contains(&self, idx: u32) -> bool {
        self.word(0, idx / BITS) & (1 << (idx % BITS)) != 0
    }

    fn word(&self, level: usize, w: u32) -> u64 {
        self.levels[level].get(w)
    }

    /// Sets `idx` (`< capacity`). Returns `false` if it was already set.
    pub fn insert(&mut self, idx: u32) -> bool {
        assert!(
            idx < self.capacity,
            "index {idx} beyond capacity {}",
            self.capacity
        );
        if self.contains(idx) {
            return false;
        }
        self.count += 1;
        let mut pos = idx;
        for level in 0..self.levels.len() {
            let word = self.levels[level].get_mut(pos / BITS);
            if level == 0 && *word == 0 {
                self.nonzero.insert(pos / BITS);
            }
            *word |= 1 << (pos % BITS);
            if *word != u64::MAX {
                break;
            }
            pos /= BITS;
        }
        true
    }

    /// Clears `idx`. Returns `false` if it was not set.
    pub fn remove(&mut self, idx: u32) -> bool {
        if idx >= self.capacity || !self.contains(idx) {
            return false;
        }
        self.count -= 1;
        let mut pos = idx;
        for level in 0..self.levels.len() {
            let w = pos / BITS;
            let word = self.levels[level].get_mut(w);
            let was_full = *word == u64::MAX;
            *word &= !(1 << (pos % BITS));
            if *word == 0 {
                self.levels[level].clear(w);
                if level == 0 {
                    self.nonzero.remove(&w);
                }
            }
            if !was_full {
                break;
            }
            pos = w;
        }
        true
    }

    /// The first clear index in `[from, end)`, if any (`end <= capacity`).
    pub fn first_clear_in(&self, from: u32, end: u32) -> Option<u32> {
        if from >= end {
            return None;
        }
        self.first_clear(0, from).filter(|&i| i < end)
    }

    /// Sets the first clear index in `[from, end)` and returns it (what [`Self::first_clear_in`]
    /// finds, then [`Self::insert`]), or `None` if every one is set.
    ///
    /// The common case of cyclic allocation takes a shortcut: on a dense level 0, a word that
    /// already has a bit set and keeps a clear one after this claim changes nothing but itself
    /// and the count (the ordered set of non-zero words and the upper levels move only when a
    /// word turns non-zero or full, once per 64 claims in a row). That case reads one word.
    pub fn claim_first_clear_in(&mut self, from: u32, end: u32) -> Option<u32> {
        if from < end {
            if let Words::Dense(v) = &mut self.levels[0] {
                let w = from / BITS;
                let word = v[w as usize];
                let free = !word & !((1u64 << (from % BITS)) - 1);
                let idx = w * BITS + free.trailing_zeros();
                let claimed = word | (free & free.wrapping_neg());
                if word != 0 && free != 0 && claimed != u64::MAX && idx < end {
                    v[w as usize] = claimed;
                    self.count += 1;
                    return Some(idx);
                }
            }
        }
        let idx = self.first_clear_in(from, end)?;
        self.insert(idx);
        Some(idx)
    }

    /// The first clear position at or after `from` on `level`.
    fn first_clear(&self, level: usize, from: u32) -> Option<u32> {
        let w = from / BITS;
        let below_from = (1u64 << (from % BITS)) - 1;
        let word = self.word(level, w) | below_from;
        if word != u64::MAX {
            return Some(w * BITS + word.trailing_ones());
        }
        if level + 1 == self.levels.len() {
            return None; // the top level is one word: nothing after it
        }
        let next = self.first_clear(level + 1, w + 1)?;
        Some(next * BITS + self.word(level, next).trailing_ones())
    }

    /// The largest set index.
    pub fn max(&self) -> Option<u32> {
        let &w = self.nonzero.last()?;
        Some(w * BITS + (BITS - 1 - self.word(0, w).leading_zeros()))
    }

    /// The set indices in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.nonzero.iter().flat_map(|&w| {
            let word = self.word(0, w);
            (0..BITS)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w * BITS + b)
        })
    }

    /// The first set index at or after `from`.
    pub fn next_set(&self, from: u32) -> Option<u32> {
        let w0 = from / BITS;
        self.nonzero.range(w0..).find_map(|&w| {
            let word = self.word(0, w);
            let word = if w == w0 {
                word & !((1u64 << (from % BITS)) - 1)
            } else {
                word
            };
            (word != 0).then(|| w * BITS + word.trailing_zeros())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn memory_follows_set_bits_not_the_largest_index() {
        let mut b = SparseBitmap::new(1 << 24);
        assert_eq!(b.levels.len(), 4);
        b.insert(15_777_204);
        // Sparse level 0 holds one word, sparse level 1 none (no word is full), the dense top
        // levels 64 and 1: 528 bytes where a flat bitmap would take 2 MiB.
        let words: usize = b.levels.iter().map(Words::stored).sum();
        assert_eq!(words, 1 + 64 + 1);
        assert_eq!(b.max(), Some(15_777_204));
        assert_eq!(b.first_clear_in(15_777_204, 1 << 24), Some(15_777_205));
    }

    #[test]
    fn finds_past_long_full_runs_through_the_summary_levels() {
        let mut b = SparseBitmap::new(1 << 15);
        for i in 0..10_000 {
            b.insert(i);
        }
        assert_eq!(b.first_clear_in(0, 1 << 15), Some(10_000));
        assert_eq!(b.first_clear_in(0, 10_000), None);
        b.remove(4097);
        assert_eq!(b.first_clear_in(0, 1 << 15), Some(4097));
        assert_eq!(b.first_clear_in(4098, 1 << 15), Some(10_000));
        for i in 10_000..(1 << 15) {
            b.insert(i);
        }
        b.insert(4097);
        assert_eq!(b.first_clear_in(0, 1 << 15), None);
        assert_eq!(b.count(), 1 << 15);
    }

    proptest! {
        #[test]
        fn agrees_with_a_btreeset(ops in proptest::collection::vec((any::<bool>(), 0u32..5000, 0u32..5000), 1..400)) {
            let cap = 4500;
            let mut b = SparseBitmap::new(cap);
            let mut m = BTreeSet::new();
            for (ins, i, from) in ops {
                let i = i % cap;
                if ins { prop_assert_eq!(b.insert(i), m.insert(i)); } else { prop_assert_eq!(b.remove(i), m.remove(&i)); }
                let from = from % cap;
                let want = (from..cap).find(|x| !m.contains(x));
                prop_assert_eq!(b.first_clear_in(from, cap), want);
                // Claiming below a bound that cuts `want` off claims nothing.
                let end = (from + i % 97).min(cap);
                let claim = (from..end).find(|x| !m.contains(x));
                prop_assert_eq!(b.claim_first_clear_in(from, end), claim);
                if let Some(c) = claim { m.insert(c); }
                prop_assert_eq!(b.max(), m.iter().next_back().copied());
                prop_assert_eq!(b.next_set(from), m.range(from..).next().copied());
                prop_assert_eq!(b.count() as usize, m.len());
            }
            prop_assert_eq!(b.iter().collect::<Vec<_>>(), m.iter().copied().collect::<Vec<_>>());
        }
    }
}
