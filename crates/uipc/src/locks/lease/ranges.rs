//! The holder's range algebra on a fixed array: one owner's POSIX locks on one file, sorted by
//! start, disjoint, same-type neighbours merged (the normal form of `super::super::range`,
//! whose `apply` is the reference the tests compare with). No allocation: the holder runs it
//! inside fcntl, which may be called from a signal handler.

use super::LEASE_RANGES;

/// Room for a computation: cutting a request out of `LEASE_RANGES` pieces splits at most one
/// of them, and the request itself adds one.
const ROOM: usize = LEASE_RANGES + 2;

/// One lock: write or read, over the inclusive `[start, end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Piece {
    /// A write lock (else a read lock).
    pub write: bool,
    /// First byte.
    pub start: i64,
    /// Last byte, inclusive; `OFFSET_MAX` runs to EOF.
    pub end: i64,
}

impl Piece {
    /// Whether the piece is a range Linux could hold (`end` is at most `OFFSET_MAX`, which
    /// is `i64::MAX`, by its type).
    pub fn valid(&self) -> bool {
        0 <= self.start && self.start <= self.end
    }
}

/// Up to `ROOM` pieces in normal form.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pieces {
    n: usize,
    p: [Piece; ROOM],
}

impl Pieces {
    /// The pieces.
    pub fn as_slice(&self) -> &[Piece] {
        &self.p[..self.n]
    }

    /// Appends `x`, merged into the last piece if it has the same type and touches it.
    /// `false` if there is no room.
    fn push(&mut self, x: Piece) -> bool {
        if self.n > 0 {
            let last = &mut self.p[self.n - 1];
            // x.start > last.end always (the inputs are disjoint), so x.start - 1 >= 0.
            if last.write == x.write && last.end >= x.start - 1 {
                last.end = last.end.max(x.end);
                return true;
            }
        }
        if self.n == ROOM {
            return false;
        }
        self.p[self.n] = x;
        self.n += 1;
        true
    }

    /// Whether `old` is in normal form (sorted, disjoint, valid): what the holder checks before
    /// computing on a buffer anyone in the run tree could have written.
    pub fn normal(old: &[Piece]) -> bool {
        old.iter().all(Piece::valid) && old.windows(2).all(|w| w[0].end < w[1].start)
    }

    /// `old` with a lock of `write` (or an unlock, `None`) set over `[start, end]`; `None` if
    /// the result has more than `LEASE_RANGES` pieces. `old` must be [`Pieces::normal`], and
    /// `0 <= start <= end <= OFFSET_MAX`.
    pub fn apply(old: &[Piece], write: Option<bool>, start: i64, end: i64) -> Option<Pieces> {
        let mut out = Pieces::default();
        let mut inserted = false;
        let mut ok = true;
        // The request's own piece, once, where the pieces after it begin.
        let insert = |out: &mut Pieces, inserted: &mut bool| match (write, *inserted) {
            (Some(w), false) => {
                *inserted = true;
                out.push(Piece {
                    write: w,
                    start,
                    end,
                })
            }
            _ => true,
        };
        for &p in old {
            if p.end < start {
                ok &= out.push(p);
                continue;
            }
            if p.start > end {
                ok &= insert(&mut out, &mut inserted);
                ok &= out.push(p);
                continue;
            }
            if p.start < start {
                ok &= out.push(Piece {
                    end: start - 1,
                    ..p
                });
            }
            if p.end > end {
                ok &= insert(&mut out, &mut inserted);
                // p.end > end, so end < OFFSET_MAX.
                ok &= out.push(Piece {
                    start: end + 1,
                    ..p
                });
            }
        }
        ok &= insert(&mut out, &mut inserted);
        (ok && out.n <= LEASE_RANGES).then_some(out)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::locks::range::{apply, Piece as RefPiece};
    use crate::locks::types::{LockType, OFFSET_MAX};
    use proptest::prelude::*;

    fn to_ref(p: &Piece) -> RefPiece {
        RefPiece {
            ty: if p.write {
                LockType::Write
            } else {
                LockType::Read
            },
            start: p.start,
            end: p.end,
        }
    }

    proptest! {
        #[test]
        fn matches_the_engines_algebra(ops in proptest::collection::vec(
            (0i64..40, 0i64..12, 0u8..3, any::<bool>()), 1..40)) {
            let mut mine = Pieces::default();
            let mut reference: Vec<RefPiece> = Vec::new();
            for (start, len, ty, to_eof) in ops {
                let end = if to_eof { OFFSET_MAX } else { start + len };
                let write = match ty { 0 => None, 1 => Some(false), _ => Some(true) };
                let lt = write.map(|w| if w { LockType::Write } else { LockType::Read });
                let (next_ref, _) = apply(&reference, lt, start, end);
                match Pieces::apply(mine.as_slice(), write, start, end) {
                    Some(next) => {
                        let got: Vec<RefPiece> = next.as_slice().iter().map(to_ref).collect();
                        prop_assert_eq!(&got, &next_ref);
                        prop_assert!(Pieces::normal(next.as_slice()));
                        mine = next;
                        reference = next_ref;
                    }
                    None => {
                        prop_assert!(next_ref.len() > LEASE_RANGES);
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn a_middle_unlock_splits_and_a_relock_merges() {
        let one = Pieces::apply(&[], Some(true), 0, 99).unwrap();
        let split = Pieces::apply(one.as_slice(), None, 40, 59).unwrap();
        assert_eq!(split.as_slice().len(), 2);
        let merged = Pieces::apply(split.as_slice(), Some(true), 40, 59).unwrap();
        assert_eq!(
            merged.as_slice(),
            &[Piece {
                write: true,
                start: 0,
                end: 99
            }]
        );
    }

    #[test]
    fn more_than_the_capacity_is_refused() {
        let mut p = Pieces::default();
        for k in 0..LEASE_RANGES as i64 {
            p = Pieces::apply(p.as_slice(), Some(k % 2 == 0), k * 10, k * 10 + 1).unwrap();
        }
        assert!(Pieces::apply(p.as_slice(), Some(true), 1000, 1001).is_none());
        assert!(!Pieces::normal(&[
            Piece {
                write: true,
                start: 5,
                end: 9
            },
            Piece {
                write: true,
                start: 0,
                end: 3
            }
        ]));
    }
}
