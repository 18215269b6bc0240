//! The primitive encoding: little-endian integers, length-prefixed byte strings and counted
//! lists, written into a `Vec<u8>` or a fixed buffer (which never allocates) and read back by
//! a bounds-checked cursor (whose `*_ref` reads borrow from the message instead of copying).
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

/// `Writer` methods appending each integer type little-endian, one method per type name.
macro_rules! le_writers {
    ($($t:ident),*) => {$(
        #[doc = concat!("A ", stringify!($t), ", little-endian.")]
        pub fn $t(&mut self, v: $t) {
            self.raw(&v.to_le_bytes());
        }
    )*};
}

/// `Reader` methods taking each integer type little-endian, one method per type name.
macro_rules! le_readers {
    ($($t:ident),*) => {$(
        #[doc = concat!("A little-endian ", stringify!($t), ".")]
        pub fn $t(&mut self) -> Result<$t, DecodeError> {
            self.array().map($t::from_le_bytes)
        }
    )*};
}

/// Builds a message, in a vector that grows ([`Writer::new`]) or in a caller's buffer that
/// does not ([`Writer::fixed`]: no allocation at all, for senders in signal handlers).
///
/// A fixed writer that runs out of room keeps counting: [`Writer::written`] then reports how
/// many bytes the message needs, and nothing past the buffer's end is touched.
pub struct Writer<'a> {
    out: Out<'a>,
}

enum Out<'a> {
    Grow(Vec<u8>),
    Fixed { buf: &'a mut [u8], len: usize },
}

/// A fixed buffer was too small for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// The bytes the whole message needs.
    pub needed: usize,
}

impl Default for Writer<'_> {
    fn default() -> Self {
        Writer {
            out: Out::Grow(Vec::new()),
        }
    }
}

impl Writer<'static> {
    /// An empty message in a growing vector.
    pub fn new() -> Writer<'static> {
        Writer::default()
    }
}

impl Writer<'static> {
    /// The bytes `put` writes into a new growing writer.
    pub fn encoded(put: impl FnOnce(&mut Writer<'static>)) -> Vec<u8> {
        let mut w = Writer::new();
        put(&mut w);
        w.finish()
    }
}

impl<'a> Writer<'a> {
    /// An empty message written into `buf`, which never grows.
    pub fn fixed(buf: &'a mut [u8]) -> Writer<'a> {
        Writer {
            out: Out::Fixed { buf, len: 0 },
        }
    }
    /// The bytes written (of a fixed writer: the ones that fitted, copied into a vector).
    pub fn finish(self) -> Vec<u8> {
        match self.out {
            Out::Grow(v) => v,
            Out::Fixed { buf, len } => buf[..len.min(buf.len())].to_vec(),
        }
    }
    /// The message's length so far, counting what did not fit in a fixed buffer.
    pub fn len(&self) -> usize {
        match &self.out {
            Out::Grow(v) => v.len(),
            Out::Fixed { len, .. } => *len,
        }
    }
    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The message's length, or how long it needed to be if the buffer was too small.
    pub fn written(&self) -> Result<usize, BufferTooSmall> {
        match &self.out {
            Out::Grow(v) => Ok(v.len()),
            Out::Fixed { buf, len } if *len <= buf.len() => Ok(*len),
            Out::Fixed { len, .. } => Err(BufferTooSmall { needed: *len }),
        }
    }
    /// Raw bytes, as they are.
    pub fn raw(&mut self, v: &[u8]) {
        match &mut self.out {
            Out::Grow(buf) => buf.extend_from_slice(v),
            Out::Fixed { buf, len } => {
                let end = len.saturating_add(v.len());
                if let Some(dst) = buf.get_mut(*len..end) {
                    dst.copy_from_slice(v);
                }
                *len = end;
            }
        }
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.raw(&[v]);
    }
    /// A bool as one byte, 0 or 1.
    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    le_writers!(u16, i16, u32, i32, u64, i64);
    /// A byte string: u32 length, then the bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.raw(v);
    }
    /// A list: u32 count, then each element.
    pub fn list<T>(&mut self, items: &[T], each: impl FnMut(&mut Writer<'a>, &T)) {
        self.list_of(items.iter(), each);
    }
    /// A list from an iterator that knows its length: u32 count, then each element.
    pub fn list_of<T>(
        &mut self,
        items: impl ExactSizeIterator<Item = T>,
        mut each: impl FnMut(&mut Writer<'a>, T),
    ) {
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
    le_readers!(u16, i16, u32, i32, u64, i64);
    /// A byte string.
    pub fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.bytes_ref().map(<[u8]>::to_vec)
    }
    /// A byte string, borrowed from the message.
    pub fn bytes_ref(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A list of `count` elements of `size` bytes each, borrowed as it is on the wire.
    pub fn list_ref(&mut self, size: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n.checked_mul(size).ok_or(DecodeError::Truncated)?)
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
    fn a_fixed_writer_writes_what_a_growing_one_does() {
        let fill = |w: &mut Writer<'_>| {
            w.u8(7);
            w.i64(-3);
            w.bytes(b"text");
            w.list_of([1u16, 2, 3].into_iter(), |w, v| w.u16(v));
        };
        let mut grown = Writer::new();
        fill(&mut grown);
        let grown = grown.finish();
        let mut buf = [0xaau8; 64];
        let mut fixed = Writer::fixed(&mut buf);
        fill(&mut fixed);
        assert_eq!(fixed.written(), Ok(grown.len()));
        assert_eq!(&buf[..grown.len()], &grown[..]);
        assert!(buf[grown.len()..].iter().all(|&b| b == 0xaa));
    }

    #[test]
    fn a_fixed_writer_past_its_end_reports_the_size_needed_and_stops_writing() {
        let mut buf = [0u8; 8];
        let mut w = Writer::fixed(&mut buf[..5]);
        w.u32(0x0403_0201);
        w.u32(0x0807_0605);
        w.u8(9);
        assert_eq!(w.written(), Err(BufferTooSmall { needed: 9 }));
        assert_eq!(buf, [1, 2, 3, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn borrowed_reads_see_the_same_bytes_as_copies() {
        let mut w = Writer::new();
        w.bytes(b"abc");
        w.list(&[5u16, 6], |w, v| w.u16(*v));
        let buf = w.finish();
        let mut r = Reader::new(&buf);
        assert_eq!(r.bytes_ref(), Ok(&b"abc"[..]));
        assert_eq!(r.list_ref(2), Ok(&[5u8, 0, 6, 0][..]));
        assert_eq!(r.finish(), Ok(()));
        let mut huge = Writer::new();
        huge.u32(u32::MAX);
        assert_eq!(
            Reader::new(&huge.finish()).list_ref(8),
            Err(DecodeError::Truncated)
        );
    }

    #[test]
    fn bools_other_than_zero_and_one_are_refused() {
        assert_eq!(Reader::new(&[2]).bool(), Err(DecodeError::BadValue("bool")));
    }
}
