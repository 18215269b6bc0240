//! The ring of a slot: records, the counters that say where they are, and the selection of
//! msgrcv's modes over them. Everything here reads memory clients can write: positions and
//! lengths are bounded before use, and a record that does not fit ends the walk.

use crate::ipc::msg::store::Selector;
use crate::sync::{AtomicU64, Ordering::Relaxed};

/// Ring words of a slot.
#[cfg(not(loom))]
pub const DATA_WORDS: usize = 8192;
/// Ring words of a slot under the model checker.
#[cfg(loom)]
pub const DATA_WORDS: usize = 8;
/// Slot: the two copies of the counters, at `META[0]` and `META[1]`.
pub(crate) const META: [usize; 2] = [8, 16];
/// Words a message of `len` bytes takes in the ring.
pub(crate) const fn record_words(len: usize) -> usize {
    2 + len.div_ceil(8)
}

/// The ring's words from position `pos` on, `n` of them: at most two pieces (it wraps).
pub(crate) fn pieces(data: &[AtomicU64], pos: u64, n: usize) -> (&[AtomicU64], &[AtomicU64]) {
    let start = (pos % DATA_WORDS as u64) as usize;
    let first = n.min(DATA_WORDS - start);
    (&data[start..start + first], &data[..n - first])
}

/// Stores `text` in the words of `a` then `b`, eight bytes a word in little-endian order, the
/// last word padded with zeros: a record's text in the ring.
pub(crate) fn store_text(a: &[AtomicU64], b: &[AtomicU64], text: &[u8]) {
    for (w, chunk) in a.iter().chain(b).zip(text.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(bytes), Relaxed);
    }
}

/// The first `len` bytes held in the words of `a` then `b` (what [`store_text`] wrote).
pub(crate) fn load_text(a: &[AtomicU64], b: &[AtomicU64], len: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity(len.next_multiple_of(8));
    for w in a.iter().chain(b) {
        text.extend_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    text.truncate(len);
    text
}

/// `Meta` with one field per counter word, in the words' order, and its conversions from and
/// to the words (so the order is written once, here).
macro_rules! counter_words {
    ($($field:ident),*) => {
        /// The counters of one copy, a word each in the order of the fields.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub(crate) struct Meta {
            $(pub(crate) $field: u64,)*
        }

        /// Counter words of a copy.
        pub(crate) const META_WORDS: usize = [$(stringify!($field)),*].len();

        impl Meta {
            fn from_words([$($field),*]: [u64; META_WORDS]) -> Meta {
                Meta { $($field),* }
            }
            fn words(&self) -> [u64; META_WORDS] {
                [$(self.$field),*]
            }
        }
    };
}

counter_words!(head, tail, qnum, cbytes, lspid, lrpid, stime, rtime);

impl Meta {
    pub(crate) fn load(slot: &[AtomicU64], copy: usize) -> Meta {
        let m = &slot[META[copy]..META[copy] + META_WORDS];
        Meta::from_words(std::array::from_fn(|i| m[i].load(Relaxed)))
    }

    /// Written with Relaxed stores: the commit's CAS (or the daemon's Release store of
    /// `LOCK`) publishes them.
    pub(crate) fn store(&self, slot: &[AtomicU64], copy: usize) {
        let m = &slot[META[copy]..META[copy] + META_WORDS];
        for (word, v) in m.iter().zip(self.words()) {
            word.store(v, Relaxed);
        }
    }

    /// Whether the counters can describe a ring (clients can write anything here).
    pub(crate) fn sane(&self) -> bool {
        self.tail >= self.head
            && self.tail - self.head <= DATA_WORDS as u64
            && self.qnum <= DATA_WORDS as u64
    }
}

/// A record of the ring: its position, type and length.
#[derive(Clone, Copy)]
pub(crate) struct Record {
    pub(crate) pos: u64,
    pub(crate) mtype: i64,
    pub(crate) len: usize,
}

/// The records between `m.head` and `m.tail`, in order, until one does not fit (`None` for
/// the rest: the caller treats the ring as damaged).
pub(crate) fn records<'d>(
    data: &'d [AtomicU64],
    m: &Meta,
) -> impl Iterator<Item = Option<Record>> + 'd {
    let (mut pos, tail, mut left) = (m.head, m.tail, m.qnum);
    let mut broken = false;
    std::iter::from_fn(move || {
        if broken || left == 0 {
            return None;
        }
        left -= 1;
        let (a, b) = pieces(data, pos, 2);
        let word = |i: usize| a.get(i).unwrap_or_else(|| &b[i - a.len()]).load(Relaxed);
        let (mtype, len) = (word(0) as i64, word(1));
        let end = usize::try_from(len)
            .ok()
            .filter(|&l| l <= DATA_WORDS * 8)
            .map(|l| pos.saturating_add(record_words(l) as u64));
        match end {
            Some(end) if end <= tail => {
                let r = Record {
                    pos,
                    mtype,
                    len: len as usize,
                };
                pos = end;
                Some(Some(r))
            }
            _ => {
                broken = true;
                Some(None)
            }
        }
    })
}

/// Linux's `find_msg` over the ring: `Some(Some(record))` selected, `Some(None)` nothing
/// matches, `None` a damaged ring.
pub(super) fn select(data: &[AtomicU64], m: &Meta, sel: Selector) -> Option<Option<Record>> {
    let mut found = None;
    for r in records(data, m) {
        let r = r?;
        match sel {
            Selector::LessEqual(bound) => {
                let better = found.is_none_or(|f: Record| r.mtype < f.mtype);
                if r.mtype <= bound && better {
                    found = Some(r);
                }
            }
            other if other.matches(r.mtype) => return Some(Some(r)),
            _ => {}
        }
    }
    Some(found)
}
