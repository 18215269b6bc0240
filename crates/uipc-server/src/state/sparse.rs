//! Segment memory in the state file: only what the memory file holds, streamed.
//!
//! A segment's memfd is asked where its data is (`lseek` with SEEK_DATA, then SEEK_HOLE: the
//! pages ever written, resident or swapped); each such extent is written as its offset, its
//! length and its bytes, copied through one buffer of [`CHUNK`] bytes, and a final offset of
//! `u64::MAX` ends the list. A 1 GiB segment of which one page was written costs one page in
//! the file and one buffer in memory. Restoring writes each extent back (the rest stays a
//! hole, as it was). The lseeks move the memfd's shared file offset, which no one uses: every
//! read and write of segment memory, the daemon's and the clients' mappings, is positional.
//!
//! A memory file shorter than its segment (a client shrank it) or one that ends while being
//! read is an error naming the segment: the save fails rather than leave it out.

use super::format::{In, Out};
use std::io;
use std::os::fd::RawFd;
use uipc::ipc::shm::ShmMemory;

/// The copy buffer's size.
pub const CHUNK: usize = 1 << 20;
const NO_MORE: u64 = u64::MAX;

/// Where the next data at or after `from` starts and ends (`None` past the last data).
fn next_extent(fd: RawFd, from: u64, len: u64) -> io::Result<Option<(u64, u64)>> {
    if from >= len {
        return Ok(None);
    }
    // SAFETY: lseek on an open descriptor with a valid whence.
    let start = unsafe { libc::lseek(fd, from as libc::off_t, libc::SEEK_DATA) };
    if start < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        };
    }
    let start = start as u64;
    if start >= len {
        return Ok(None);
    }
    // SAFETY: as above.
    let end = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
    if end < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some((start, (end as u64).min(len))))
}

fn file_size(fd: RawFd) -> io::Result<u64> {
    // SAFETY: zeroed stat is valid output space; the descriptor is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// Writes the data of memfd `fd`, whose segment spans `len` bytes, to `out`.
pub fn save(out: &mut Out, fd: RawFd, len: u64, buf: &mut [u8]) -> io::Result<()> {
    let size = file_size(fd)?;
    if size < len {
        return Err(io::Error::other(format!(
            "its memory file is {size} bytes, shorter than the segment's {len} (shrunk by a \
             client?)"
        )));
    }
    let mut at = 0;
    while let Some((start, end)) = next_extent(fd, at, len)? {
        out.u64(start)?;
        out.u64(end - start)?;
        let mut pos = start;
        while pos < end {
            let n = buf.len().min((end - pos) as usize);
            // SAFETY: reads at most `n` bytes into the live buffer; the descriptor is open.
            let got = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), n, pos as libc::off_t) };
            if got < 0 {
                return Err(io::Error::last_os_error());
            }
            if got == 0 {
                return Err(io::Error::other(format!(
                    "its memory file ended at byte {pos} while being saved (shrunk by a \
                     client?)"
                )));
            }
            out.raw(&buf[..got as usize])?;
            pos += got as u64;
        }
        at = end;
    }
    out.u64(NO_MORE)
}

/// Reads extents from `inp` into `mem` until the end of the list.
pub fn restore(inp: &mut In, mem: &dyn ShmMemory, buf: &mut [u8]) -> io::Result<()> {
    let mut floor = 0;
    loop {
        let start = inp.u64()?;
        if start == NO_MORE {
            return Ok(());
        }
        let n = inp.u64()?;
        let end = start
            .checked_add(n)
            .filter(|&e| start >= floor && e <= mem.len());
        let Some(end) = end else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("state file malformed: extent {start}+{n} outside the segment"),
            ));
        };
        let mut pos = start;
        while pos < end {
            let k = buf.len().min((end - pos) as usize);
            inp.raw(&mut buf[..k])?;
            mem.write_at(pos, &buf[..k])
                .map_err(|e| io::Error::other(format!("writing segment memory: {e:?}")))?;
            pos += k as u64;
        }
        floor = end;
    }
}
