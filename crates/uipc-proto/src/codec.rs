//! The primitive encoding: little-endian integers, length-prefixed byte strings and counted
//! lists, written into a `Vec<u8>` and read back by a bounds-checked cursor.
//!
//! Every read checks the bytes left before touching them, and a count read from the wire is
//! checked against the bytes left (times the smallest element size) before anything is
//! allocated, so a hostile length can neither panic nor make the reader allocate more than
//! the message's own size.

use std::fmt;

/// Why a message could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The message ended inside a field.
    Truncated,
    /// Bytes were left after the last field.
    TrailingBytes(usize),
    /// An unknown message or variant tag.
    UnknownTag(u8),
    /// A frame longer than [`crate::MAX_FRAME`].
    Oversized(u64),
    /// A field held a value outside its domain (a bool that is neither 0 nor 1, ...).
    BadValue(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "message truncated"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} bytes after the message"),
            DecodeError::UnknownTag(t) => write!(f, "unknown tag {t}"),
            DecodeError::Oversized(n) => write!(f, "frame of {n} bytes is too large"),
            DecodeError::BadValue(what) => write!(f, "bad value in {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Builds a message.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty message.
    pub fn new() -> Writer {
        Writer::default()
    }
    /// The bytes written.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// A bool as one byte, 0 or 1.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }
    /// A u16, little-endian.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// An i16, little-endian.
    pub fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// A u32, little-endian.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// An i32, little-endian.
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// A u64, little-endian.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// An i64, little-endian.
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// A byte string: u32 length, then the bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
    }
    /// A list: u32 count, then each element.
    pub fn list<T>(&mut self, items: &[T], mut each: impl FnMut(&mut Writer, &T)) {
        self.u32(items.len() as u32);
        for item in items {
            each(self, item);
        }
    }
}

/// Reads a message.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.buf.len()))
        }
    }
    /// One byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    /// A bool: exactly 0 or 1.
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::BadValue("bool")),
        }
    }
    /// A u16.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }
    /// An i16.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        self.array().map(i16::from_le_bytes)
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }
    /// An i32.
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_le_bytes)
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }
    /// An i64.
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_le_bytes)
    }
    /// A byte string.
    pub fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    /// A list whose elements take at least `min_size` bytes each.
    pub fn list<T>(
        &mut self,
        min_size: usize,
        mut each: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.buf.len() {
            return Err(DecodeError::Truncated);
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(each(self)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_little_endian() {
        let mut w = Writer::new();
        w.u16(0x0102);
        w.i32(-2);
        w.u64(u64::MAX - 1);
        w.bytes(b"abc");
        let buf = w.finish();
        assert_eq!(&buf[..2], &[2, 1]);
        let mut r = Reader::new(&buf);
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.i32(), Ok(-2));
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.bytes(), Ok(b"abc".to_vec()));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let mut w = Writer::new();
        w.u32(u32::MAX);
        let buf = w.finish();
        assert_eq!(
            Reader::new(&buf).list(6, |r| r.u16()),
            Err(DecodeError::Truncated)
        );
        assert_eq!(Reader::new(&buf).bytes(), Err(DecodeError::Truncated));
    }

    #[test]
    fn bools_other_than_zero_and_one_are_refused() {
        assert_eq!(Reader::new(&[2]).bool(), Err(DecodeError::BadValue("bool")));
    }
}
