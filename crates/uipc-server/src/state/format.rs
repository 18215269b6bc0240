//! The state file's bytes: a header, records, an end record, a checksum.
//!
//! ```text
//! "UIPCSTATE" u32:version           header (version 2)
//! u8:tag fields...                  records, in the order they are restored
//! 0xFF u64:file_length u32:crc32    end record: the whole file's length, then the CRC-32
//!                                   (IEEE) of every byte before it
//! ```
//!
//! Integers are little-endian; `bytes` is a u64 length and the bytes. [`Out`] writes through a
//! running CRC, so nothing is held in memory but a write buffer; [`verify`] reads the file
//! once through the CRC before anything is restored, so a damaged file restores nothing;
//! [`In`] then reads it again, never allocating more than the bytes left in the file.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};

/// The first bytes of every state file (version 1 files start with them too).
pub const MAGIC: &[u8; 9] = b"UIPCSTATE";
/// The format written and read.
pub const VERSION: u32 = 2;
/// The end record's tag.
pub const END: u8 = 0xFF;
/// The end record's length: tag, file length, checksum.
const TRAILER: u64 = 1 + 8 + 4;
const HEADER: u64 = MAGIC.len() as u64 + 4;

/// A writer that keeps the CRC and the length of everything written.
pub struct Out {
    w: BufWriter<File>,
    crc: crc32fast::Hasher,
    len: u64,
}

impl Out {
    /// Starts a state file on `file` (empty, at offset 0) with its header.
    pub fn new(file: File) -> io::Result<Out> {
        let mut out = Out {
            w: BufWriter::with_capacity(1 << 16, file),
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        out.raw(MAGIC)?;
        out.u32(VERSION)?;
        Ok(out)
    }

    /// Bytes as they are.
    pub fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.crc.update(b);
        self.len += b.len() as u64;
        self.w.write_all(b)
    }

    /// One byte.
    pub fn u8(&mut self, v: u8) -> io::Result<()> {
        self.raw(&[v])
    }

    /// A little-endian u16.
    pub fn u16(&mut self, v: u16) -> io::Result<()> {
        self.raw(&v.to_le_bytes())
    }

    /// A little-endian u32.
    pub fn u32(&mut self, v: u32) -> io::Result<()> {
        self.raw(&v.to_le_bytes())
    }

    /// A little-endian u64.
    pub fn u64(&mut self, v: u64) -> io::Result<()> {
        self.raw(&v.to_le_bytes())
    }

    /// A little-endian i32.
    pub fn i32(&mut self, v: i32) -> io::Result<()> {
        self.raw(&v.to_le_bytes())
    }

    /// A little-endian i64.
    pub fn i64(&mut self, v: i64) -> io::Result<()> {
        self.raw(&v.to_le_bytes())
    }

    /// A length, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.u64(b.len() as u64)?;
        self.raw(b)
    }

    /// Writes the end record and the checksum; returns the file (not yet synced).
    pub fn finish(mut self) -> io::Result<File> {
        self.u8(END)?;
        let total = self.len + 8 + 4;
        self.u64(total)?;
        let crc = std::mem::take(&mut self.crc).finalize();
        self.w.write_all(&crc.to_le_bytes())?;
        self.w.into_inner().map_err(|e| e.into_error())
    }
}

/// What is wrong with a file that is not a state file this daemon can restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage(pub String);

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn damage(what: String) -> Result<(), Damage> {
    Err(Damage(what))
}

fn read_at(file: &File, buf: &mut [u8], at: u64) -> Result<(), Damage> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, at)
        .map_err(|e| Damage(format!("cannot be read at byte {at}: {e}")))
}

/// Checks `file` from end to end: the magic, the end record at the very end, the checksum,
/// the version. Reads it in 64 KiB pieces.
pub fn verify(file: &File) -> Result<(), Damage> {
    let len = file
        .metadata()
        .map_err(|e| Damage(format!("cannot be read: {e}")))?
        .len();
    let mut head = [0u8; HEADER as usize];
    let have = head.len().min(len as usize);
    read_at(file, &mut head[..have], 0)?;
    if head[..have.min(MAGIC.len())] != MAGIC[..have.min(MAGIC.len())] {
        return damage(
            "it does not start with uipc's magic: not a uipc state file, or its \
                       first bytes were overwritten"
                .into(),
        );
    }
    if len < HEADER + TRAILER {
        return damage(format!(
            "truncated: {len} bytes, shorter than an empty state file"
        ));
    }
    let version = u32::from_le_bytes(head[MAGIC.len()..].try_into().expect("4 bytes"));
    let mut tail = [0u8; TRAILER as usize];
    read_at(file, &mut tail, len - TRAILER)?;
    let said = u64::from_le_bytes(tail[1..9].try_into().expect("8 bytes"));
    if tail[0] != END || said != len {
        let what = if version == 1 {
            format!("version 1, written by an older uipc (this one reads version {VERSION})")
        } else if tail[0] == END && said > len {
            format!("truncated: {len} bytes, its end record says {said}")
        } else if tail[0] == END {
            format!("{len} bytes, its end record says {said}: truncated, extended or damaged")
        } else {
            format!("truncated (or extended): {len} bytes, and no end record at its end")
        };
        return damage(what);
    }
    let stored = u32::from_le_bytes(tail[9..].try_into().expect("4 bytes"));
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0;
    while at < len - 4 {
        let n = buf.len().min((len - 4 - at) as usize);
        read_at(file, &mut buf[..n], at)?;
        crc.update(&buf[..n]);
        at += n as u64;
    }
    let computed = crc.finalize();
    if computed != stored {
        return damage(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): its \
             contents changed after it was written"
        ));
    }
    if version != VERSION {
        return damage(format!(
            "version {version}, which this uipc does not read (it reads version {VERSION})"
        ));
    }
    Ok(())
}

/// A reader of a verified file, after the header. Every read is bounded by the bytes left
/// before the end record, so a malformed length fails instead of allocating.
pub struct In {
    r: BufReader<File>,
    left: u64,
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "state file malformed (its checksum is right: written by another program?): {what}"
        ),
    )
}

impl In {
    /// Reads `file`, which [`verify`] accepted.
    pub fn new(mut file: File) -> io::Result<In> {
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(HEADER))?;
        Ok(In {
            r: BufReader::with_capacity(1 << 16, file),
            left: len - HEADER - (TRAILER - 1),
        })
    }

    /// Fills `buf` from the file.
    pub fn raw(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() as u64 > self.left {
            return Err(malformed("a record runs past the end record"));
        }
        self.left -= buf.len() as u64;
        self.r.read_exact(buf)
    }

    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.raw(&mut b)?;
        Ok(b)
    }

    /// One byte.
    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> io::Result<u16> {
        self.array().map(u16::from_le_bytes)
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> io::Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    /// `N` little-endian u32s in a row.
    pub fn u32s<const N: usize>(&mut self) -> io::Result<[u32; N]> {
        let mut v = [0; N];
        for x in &mut v {
            *x = self.u32()?;
        }
        Ok(v)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> io::Result<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// A little-endian i32.
    pub fn i32(&mut self) -> io::Result<i32> {
        self.array().map(i32::from_le_bytes)
    }

    /// A little-endian i64.
    pub fn i64(&mut self) -> io::Result<i64> {
        self.array().map(i64::from_le_bytes)
    }

    /// A count of items of at least `each` bytes, checked against what is left.
    pub fn count(&mut self, each: u64) -> io::Result<u64> {
        let n = self.u64()?;
        if n.saturating_mul(each.max(1)) > self.left {
            return Err(malformed("a count larger than the file"));
        }
        Ok(n)
    }

    /// A length and that many bytes.
    pub fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.count(1)?;
        let mut v = vec![0u8; n as usize];
        self.raw(&mut v)?;
        Ok(v)
    }

    /// After the end record's tag: true if it came where the end record is (the records
    /// filled the file exactly).
    pub fn at_end(&self) -> bool {
        self.left == 0
    }
}
