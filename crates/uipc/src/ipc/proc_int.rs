//! Parsing of numbers written to `/proc/sys/kernel` files, as Linux's `proc_dointvec` family
//! parses them, so that [`IpcNamespace::sysctl_write`](super::IpcNamespace::sysctl_write)
//! accepts and rejects exactly the texts the kernel does.
//!
//! The rules (checked against the host kernel by writing each case to its files):
//! - Before each number, any `isspace` bytes are skipped (space, `\t`..`\r`, and Latin-1 0xA0).
//!   A text of only such bytes is EINVAL; an empty text changes nothing and succeeds (the VFS
//!   never calls the handler for a zero-length write), which the caller handles.
//! - A number is an optional `-` (only if more text follows) and then a digit; the digits are
//!   read like `strtoul(s, 0)`: `0x`/`0X` followed by a hex digit means hexadecimal, a leading
//!   `0` octal, else decimal. Overflow of 64 bits is EINVAL.
//! - Only the first 21 bytes of what remains are looked at; a number that fills all of them is
//!   EINVAL (it might go on).
//! - After a number, the next byte (if any) must be a space, `\t` or `\n`, else EINVAL.
//! - Numbers beyond what the file holds are ignored, as is anything after them.
//! - A successful write returns the bytes taken: up to the end of the last number read plus
//!   the spaces after it, so extra numbers make `write(2)` return less than it was given.
//! - Values are converted and stored one by one, so a multi-value file (`sem`) keeps the values
//!   stored before the one that failed; [`parse`] hands back those values and the error.
//!
//! No locks: pure functions on the text.

use crate::Errno;

/// One number as the kernel reads it, before conversion to the file's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcNumber {
    /// A leading `-` was given (even for zero).
    pub negative: bool,
    /// The digits' value.
    pub magnitude: u64,
}

impl ProcNumber {
    /// The value as an `int` file stores it (`proc_dointvec`): EINVAL outside `i32`.
    pub fn to_i32(self) -> Result<i32, Errno> {
        if self.negative {
            if self.magnitude > 1 << 31 {
                return Err(Errno::EINVAL);
            }
            Ok((-(self.magnitude as i64)) as i32)
        } else if self.magnitude > i32::MAX as u64 {
            Err(Errno::EINVAL)
        } else {
            Ok(self.magnitude as i32)
        }
    }

    /// The value as an `unsigned long` file stores it (`proc_doulongvec_minmax`): any
    /// negative number, even `-0`, is EINVAL.
    pub fn to_u64(self) -> Result<u64, Errno> {
        if self.negative {
            Err(Errno::EINVAL)
        } else {
            Ok(self.magnitude)
        }
    }
}

/// The kernel's `isspace`.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r' | 0xa0)
}

/// Bytes allowed right after a number.
fn is_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n')
}

/// Reads up to `max_values` numbers from `text`. Returns the numbers read before the first
/// error, and that error. A non-empty text without any number is EINVAL.
pub(crate) fn parse(text: &str, max_values: usize) -> (Vec<ProcNumber>, Option<Errno>) {
    let (values, err, _) = scan(text, max_values);
    (values, err)
}

/// What a successful write of `text` to a file of `max_values` numbers returns: the bytes up
/// to the end of the last number read and the `isspace` bytes after it. Numbers beyond the
/// file's count, and what follows them, are not taken (the kernel's `*lenp -= left`).
pub(crate) fn taken(text: &str, max_values: usize) -> usize {
    let (_, _, mut pos) = scan(text, max_values);
    let bytes = text.as_bytes();
    while pos < bytes.len() && is_space(bytes[pos]) {
        pos += 1;
    }
    pos
}

/// [`parse`], also giving the position after the last number read.
fn scan(text: &str, max_values: usize) -> (Vec<ProcNumber>, Option<Errno>, usize) {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut values = Vec::new();
    while values.len() < max_values && pos < bytes.len() {
        while pos < bytes.len() && is_space(bytes[pos]) {
            pos += 1;
        }
        if pos == bytes.len() {
            break;
        }
        match parse_one(&bytes[pos..]) {
            Ok((number, used)) => {
                values.push(number);
                pos += used;
            }
            Err(e) => return (values, Some(e), pos),
        }
    }
    if values.is_empty() {
        return (values, Some(Errno::EINVAL), pos);
    }
    (values, None, pos)
}

/// The kernel keeps 21 bytes of a number (its buffer is 22 with the NUL).
const WINDOW: usize = 21;

/// One number at the start of `rest` (no leading space): the number and the bytes it used.
fn parse_one(rest: &[u8]) -> Result<(ProcNumber, usize), Errno> {
    let window = &rest[..rest.len().min(WINDOW)];
    let mut at = 0;
    let negative = window[0] == b'-' && rest.len() > 1;
    if negative {
        at = 1;
    }
    if !window.get(at).is_some_and(u8::is_ascii_digit) {
        return Err(Errno::EINVAL);
    }
    let radix = if window[at] == b'0'
        && window.get(at + 1).is_some_and(|&b| b == b'x' || b == b'X')
        && window.get(at + 2).is_some_and(u8::is_ascii_hexdigit)
    {
        at += 2;
        16
    } else if window[at] == b'0' {
        8
    } else {
        10
    };
    let mut magnitude: u64 = 0;
    while let Some(digit) = window.get(at).and_then(|&b| (b as char).to_digit(radix)) {
        magnitude = magnitude
            .checked_mul(u64::from(radix))
            .and_then(|m| m.checked_add(u64::from(digit)))
            .ok_or(Errno::EINVAL)?;
        at += 1;
    }
    if at == WINDOW {
        return Err(Errno::EINVAL);
    }
    if at < rest.len() && !is_separator(rest[at]) {
        return Err(Errno::EINVAL);
    }
    Ok((
        ProcNumber {
            negative,
            magnitude,
        },
        at,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(text: &str, max: usize) -> Result<Vec<i32>, Errno> {
        let (values, err) = parse(text, max);
        match err {
            Some(e) => Err(e),
            None => values.into_iter().map(ProcNumber::to_i32).collect(),
        }
    }

    #[test]
    fn numbers_read_like_strtoul_base_zero() {
        assert_eq!(ints("12", 1), Ok(vec![12]));
        assert_eq!(ints("010", 1), Ok(vec![8]));
        assert_eq!(ints("0x10", 1), Ok(vec![16]));
        assert_eq!(ints("0X1F", 1), Ok(vec![31]));
        assert_eq!(ints("-0", 1), Ok(vec![0]));
        assert_eq!(ints("-2147483648", 1), Ok(vec![i32::MIN]));
        assert_eq!(ints("0x7fffffff", 1), Ok(vec![i32::MAX]));
        assert_eq!(ints("+5", 1), Err(Errno::EINVAL));
        assert_eq!(ints("-", 1), Err(Errno::EINVAL));
        assert_eq!(ints("0x", 1), Err(Errno::EINVAL), "octal 0, then 'x'");
        assert_eq!(ints("08", 1), Err(Errno::EINVAL), "octal 0, then '8'");
        assert_eq!(ints("2147483648", 1), Err(Errno::EINVAL));
        assert_eq!(ints("-2147483649", 1), Err(Errno::EINVAL));
        assert_eq!(ints("18446744073709551616", 1), Err(Errno::EINVAL));
    }

    #[test]
    fn spaces_separators_and_extra_numbers_follow_the_kernel() {
        assert_eq!(ints(" 7", 1), Ok(vec![7]));
        assert_eq!(ints("\x0b5", 1), Ok(vec![5]), "vertical tab is a space");
        assert_eq!(ints("5\n", 1), Ok(vec![5]));
        assert_eq!(ints("12\t", 1), Ok(vec![12]));
        assert_eq!(ints("12 13", 1), Ok(vec![12]), "extra numbers ignored");
        assert_eq!(ints("1 2 x", 1), Ok(vec![1]), "anything after them too");
        assert_eq!(
            ints("5\r", 1),
            Err(Errno::EINVAL),
            "\\r is a space but no separator"
        );
        assert_eq!(ints("7x", 1), Err(Errno::EINVAL));
        assert_eq!(ints("1,2", 1), Err(Errno::EINVAL));
        assert_eq!(ints("   ", 1), Err(Errno::EINVAL));
        assert_eq!(ints("\n", 1), Err(Errno::EINVAL));
        assert_eq!(ints("1 2 3 4 5", 4), Ok(vec![1, 2, 3, 4]));
        assert_eq!(ints("1 2", 4), Ok(vec![1, 2]));
    }

    #[test]
    fn a_write_takes_the_numbers_read_and_the_spaces_after_them() {
        assert_eq!(taken("100", 1), 3);
        assert_eq!(taken("100\n\n", 1), 5);
        assert_eq!(taken(" 100 ", 1), 5);
        assert_eq!(taken("100 200", 1), 4);
        assert_eq!(taken("100\n200", 1), 4);
        assert_eq!(taken("4 x", 1), 2);
        assert_eq!(taken("1 2 3 4 5", 4), 8);
        assert_eq!(taken("1 2 3 4\n5 6 7 8", 4), 8);
        assert_eq!(taken("1 2 3", 4), 5);
        assert_eq!(taken("250 32000 32 128 5", 4), 17);
    }

    #[test]
    fn a_number_filling_the_21_byte_window_is_einval() {
        assert_eq!(
            ints("00000000000000000012", 1),
            Ok(vec![10]),
            "20 bytes, octal"
        );
        assert_eq!(ints("000000000000000000012", 1), Err(Errno::EINVAL));
    }

    #[test]
    fn a_failing_value_keeps_the_ones_before_it() {
        let (values, err) = parse("1 2 x", 4);
        assert_eq!(values.len(), 2);
        assert_eq!(err, Some(Errno::EINVAL));
    }

    #[test]
    fn unsigned_long_files_reject_every_negative() {
        let (v, _) = parse("-0", 1);
        assert_eq!(v[0].to_u64(), Err(Errno::EINVAL));
        let (v, _) = parse("18446744073709551615", 1);
        assert_eq!(v[0].to_u64(), Ok(u64::MAX));
    }
}
