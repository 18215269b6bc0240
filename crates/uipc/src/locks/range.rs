//! Byte ranges: `struct flock` to an inclusive `[start, end]` (§6.2), and the per-owner range
//! algebra of `posix_lock_inode` (§6.4).
//!
//! An owner's POSIX (or OFD) locks on one file never overlap and are kept sorted by start, with
//! neighbours of the same type merged (`end + 1 == start` merges, as on Linux). Setting a lock or
//! unlocking a range is therefore a pure function from the owner's old list to its new list:
//! cut the request's range out of every old lock (keeping the parts on either side, which is
//! where a middle unlock or retype splits one lock in two), add the request if it is a lock, and
//! merge same-type neighbours. The result is the unique normal form Linux's in-place editing
//! also reaches; `tests` checks it against a per-byte model.
//!
//! All arithmetic is on `i64` with `start >= 0` and `end <= OFFSET_MAX`, so `start - 1` never
//! underflows and nothing computes `end + 1` when `end` may be `OFFSET_MAX`.

use super::types::{Flock, LockType, OpenFile, OFFSET_MAX, SEEK_CUR, SEEK_END, SEEK_SET};
use crate::{Errno, Result};

/// Converts `fl`'s whence/start/len into an inclusive range, with Linux's errors and their order
/// (`flock64_to_posix_lock`): bad whence EINVAL, start past `OFFSET_MAX` EOVERFLOW, negative start
/// EINVAL, end past `OFFSET_MAX` EOVERFLOW, a negative length reaching before 0 EINVAL.
pub(crate) fn flock_range(fl: &Flock, fd: &OpenFile) -> Result<(i64, i64)> {
    let base = match fl.l_whence {
        SEEK_SET => 0,
        SEEK_CUR => fd.offset,
        SEEK_END => fd.size,
        _ => return Err(Errno::EINVAL),
    };
    if fl.l_start > OFFSET_MAX - base {
        return Err(Errno::EOVERFLOW);
    }
    let start = base + fl.l_start;
    if start < 0 {
        return Err(Errno::EINVAL);
    }
    if fl.l_len > 0 {
        if fl.l_len - 1 > OFFSET_MAX - start {
            return Err(Errno::EOVERFLOW);
        }
        Ok((start, start + (fl.l_len - 1)))
    } else if fl.l_len < 0 {
        // start >= 0 and l_len >= i64::MIN, so the sum cannot wrap.
        if start + fl.l_len < 0 {
            return Err(Errno::EINVAL);
        }
        Ok((start + fl.l_len, start - 1))
    } else {
        Ok((start, OFFSET_MAX))
    }
}

/// `l_len` as F_GETLK reports it: 0 for a lock running to EOF.
pub(crate) fn reported_len(start: i64, end: i64) -> i64 {
    if end == OFFSET_MAX {
        0
    } else {
        end - start + 1
    }
}

/// Whether two inclusive ranges share a byte.
pub(crate) fn overlaps(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// One piece of an owner's coverage: a type over an inclusive range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub ty: LockType,
    pub start: i64,
    pub end: i64,
}

/// What applying a request did to the owner's old pieces.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Some byte went from locked to unlocked, or from write to read: waiters may now proceed.
    pub released: bool,
}

/// Applies a lock of type `ty` (or an unlock, `None`) over `[start, end]` to one owner's pieces,
/// which must be sorted, disjoint and merged; the result is too.
pub(crate) fn apply(
    old: &[Piece],
    ty: Option<LockType>,
    start: i64,
    end: i64,
) -> (Vec<Piece>, Applied) {
    let mut out: Vec<Piece> = Vec::with_capacity(old.len() + 2);
    let mut applied = Applied::default();
    let mut inserted = false;
    let push = |out: &mut Vec<Piece>, p: Piece| {
        if let Some(last) = out.last_mut() {
            if last.ty == p.ty && last.end >= p.start - 1 {
                last.end = last.end.max(p.end);
                return;
            }
        }
        out.push(p);
    };
    for &p in old {
        if p.end < start {
            push(&mut out, p);
            continue;
        }
        if p.start > end {
            if let (Some(ty), false) = (ty, inserted) {
                push(&mut out, Piece { ty, start, end });
                inserted = true;
            }
            push(&mut out, p);
            continue;
        }
        // p overlaps the request: its bytes inside [start, end] take the request's type.
        if ty.is_none() || (p.ty == LockType::Write && ty == Some(LockType::Read)) {
            applied.released = true;
        }
        if p.start < start {
            push(
                &mut out,
                Piece {
                    end: start - 1,
                    ..p
                },
            );
        }
        if p.end > end {
            if let (Some(ty), false) = (ty, inserted) {
                push(&mut out, Piece { ty, start, end });
                inserted = true;
            }
            push(
                &mut out,
                Piece {
                    start: end + 1,
                    ..p
                },
            );
        }
    }
    if let (Some(ty), false) = (ty, inserted) {
        push(&mut out, Piece { ty, start, end });
    }
    (out, applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::types::{FileId, OfdId, F_RDLCK};
    use proptest::prelude::*;
    use LockType::{Read as R, Write as W};

    fn fd(offset: i64, size: i64) -> OpenFile {
        OpenFile {
            file: FileId { dev: 1, ino: 1 },
            ofd: OfdId(1),
            readable: true,
            writable: true,
            offset,
            size,
        }
    }

    fn range(whence: i16, start: i64, len: i64) -> Result<(i64, i64)> {
        let fl = Flock {
            l_type: F_RDLCK,
            l_whence: whence,
            l_start: start,
            l_len: len,
            l_pid: 0,
        };
        flock_range(&fl, &fd(50, 1000))
    }

    #[test]
    fn flock_ranges_follow_linux_including_negative_lengths_and_overflow() {
        assert_eq!(range(SEEK_SET, 0, 0), Ok((0, OFFSET_MAX)));
        assert_eq!(range(SEEK_SET, 100, -10), Ok((90, 99)));
        assert_eq!(range(SEEK_SET, 5, -10), Err(Errno::EINVAL));
        assert_eq!(range(SEEK_CUR, -10, 5), Ok((40, 44)));
        assert_eq!(range(SEEK_CUR, -51, 5), Err(Errno::EINVAL));
        assert_eq!(range(SEEK_END, 0, 1), Ok((1000, 1000)));
        assert_eq!(range(3, 0, 1), Err(Errno::EINVAL));
        assert_eq!(range(SEEK_SET, OFFSET_MAX, 1), Ok((OFFSET_MAX, OFFSET_MAX)));
        assert_eq!(range(SEEK_SET, OFFSET_MAX, 2), Err(Errno::EOVERFLOW));
        assert_eq!(range(SEEK_CUR, OFFSET_MAX, 1), Err(Errno::EOVERFLOW));
        assert_eq!(range(SEEK_SET, i64::MIN, 1), Err(Errno::EINVAL));
        assert_eq!(range(SEEK_SET, 0, i64::MIN), Err(Errno::EINVAL));
    }

    fn p(ty: LockType, start: i64, end: i64) -> Piece {
        Piece { ty, start, end }
    }

    #[test]
    fn same_type_neighbours_merge_and_retypes_split_in_three() {
        let (a, _) = apply(&[p(R, 0, 9)], Some(R), 10, 19);
        assert_eq!(a, vec![p(R, 0, 19)]);
        let (b, rel) = apply(&[p(W, 0, 99)], Some(R), 10, 14);
        assert_eq!(b, vec![p(W, 0, 9), p(R, 10, 14), p(W, 15, 99)]);
        assert!(rel.released, "a downgrade releases");
        let (c, rel) = apply(&[p(W, 0, 99)], None, 40, 59);
        assert_eq!(c, vec![p(W, 0, 39), p(W, 60, 99)]);
        assert!(rel.released);
        let (d, rel) = apply(&c, Some(W), 40, 59);
        assert_eq!(d, vec![p(W, 0, 99)]);
        assert!(!rel.released);
        let (e, rel) = apply(&[p(R, 0, OFFSET_MAX)], None, 5, OFFSET_MAX);
        assert_eq!(e, vec![p(R, 0, 4)]);
        assert!(rel.released);
        let (f, rel) = apply(&[], None, 0, OFFSET_MAX);
        assert!(f.is_empty() && !rel.released, "unlocking nothing is fine");
    }

    /// The model: one optional type per byte of a small file.
    fn model_apply(bytes: &mut [Option<LockType>], ty: Option<LockType>, s: i64, e: i64) -> bool {
        let mut released = false;
        for b in &mut bytes[s as usize..=e as usize] {
            if b.is_some() && (ty.is_none() || (*b == Some(W) && ty == Some(R))) {
                released = true;
            }
            *b = ty;
        }
        released
    }

    fn model_pieces(bytes: &[Option<LockType>]) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for (i, b) in bytes.iter().enumerate() {
            let Some(ty) = *b else { continue };
            let i = i as i64;
            match out.last_mut() {
                Some(last) if last.ty == ty && last.end == i - 1 => last.end = i,
                _ => out.push(p(ty, i, i)),
            }
        }
        out
    }

    fn op() -> impl Strategy<Value = (Option<LockType>, i64, i64)> {
        (
            prop_oneof![Just(None), Just(Some(R)), Just(Some(W))],
            0i64..40,
            0i64..12,
        )
            .prop_map(|(ty, s, len)| (ty, s, (s + len).min(39)))
    }

    proptest! {
        #[test]
        fn apply_matches_a_per_byte_model(ops in proptest::collection::vec(op(), 1..40)) {
            let mut bytes = vec![None; 40];
            let mut pieces = Vec::new();
            for (ty, s, e) in ops {
                let released = model_apply(&mut bytes, ty, s, e);
                let (next, applied) = apply(&pieces, ty, s, e);
                pieces = next;
                prop_assert_eq!(&pieces, &model_pieces(&bytes));
                prop_assert_eq!(applied.released, released);
            }
        }
    }
}
