//! Where segment memory comes from: the [`ShmBacking`] trait and the default [`HeapBacking`].
//!
//! The engine only keeps the books (sizes, attachments, owners); the bytes live behind a
//! [`ShmMemory`]. An embedder that maps real memory (a daemon handing out memfds) implements
//! both traits and may expose a raw pointer; the engine itself only ever calls `read_at`,
//! `write_at` and the page counters, so the memory need not be in this process.
//!
//! [`HeapMemory`] is sparse: a page exists once it is first touched, read or written, which is
//! what Linux's shmem does for a mapping (a read fault allocates the page too). Its
//! [`ShmMemory::resident_pages`] is therefore the count of touched pages, the same number
//! `/proc/sysvipc/shm` reports as rss for a segment touched through a mapping.
//!
//! Locks: one mutex per memory object around its page map; it is a leaf lock.

use super::super::consts::PAGE_SIZE;
use crate::sync::{lock, Mutex};
use crate::{Errno, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// The memory of one segment: `len()` bytes (the size rounded up to whole pages), zero-filled
/// at creation.
pub trait ShmMemory: Send + Sync {
    /// Length in bytes: a whole number of pages.
    fn len(&self) -> u64;
    /// Whether the memory has no bytes (never true for a segment).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies bytes out at `offset`. EFAULT if the range leaves the memory.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Copies bytes in at `offset`. EFAULT if the range leaves the memory.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Pages currently resident (`shm_rss`, in pages).
    fn resident_pages(&self) -> u64;
    /// Pages swapped out (`shm_swp`, in pages). The heap never swaps.
    fn swapped_pages(&self) -> u64 {
        0
    }
    /// The start of the memory in this process, when it is mapped here contiguously.
    fn as_ptr(&self) -> Option<*mut u8> {
        None
    }
}

/// Makes the memory for new segments.
pub trait ShmBacking: Send + Sync {
    /// Memory for a segment of `size` bytes (`1 <= size`), created for `key`. The result must
    /// be at least `size` rounded up to a page long. An error (ENOMEM) fails the `shmget`.
    fn create(&self, key: i32, size: u64) -> Result<Arc<dyn ShmMemory>>;
}

/// The default backing: sparse memory on the heap.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeapBacking;

impl ShmBacking for HeapBacking {
    fn create(&self, _key: i32, size: u64) -> Result<Arc<dyn ShmMemory>> {
        Ok(Arc::new(HeapMemory::new(size)))
    }
}

/// Sparse heap memory: pages appear on first touch.
pub struct HeapMemory {
    len: u64,
    pages: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl HeapMemory {
    /// `size` bytes rounded up to whole pages, none resident yet.
    pub fn new(size: u64) -> HeapMemory {
        HeapMemory {
            len: size.div_ceil(PAGE_SIZE).saturating_mul(PAGE_SIZE),
            pages: Mutex::new(HashMap::new()),
        }
    }

    /// Visits `len` bytes from `offset` page by page, materializing each page.
    fn each_chunk(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut [u8], usize),
    ) -> Result<()> {
        let end = offset.checked_add(len as u64).ok_or(Errno::EFAULT)?;
        if end > self.len {
            return Err(Errno::EFAULT);
        }
        let mut pages = lock(&self.pages);
        let (mut pos, mut done) = (offset, 0usize);
        while done < len {
            let page = pos / PAGE_SIZE;
            let in_page = (pos % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - in_page).min(len - done);
            let bytes = pages
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE_SIZE as usize].into_boxed_slice());
            f(&mut bytes[in_page..in_page + n], done);
            pos += n as u64;
            done += n;
        }
        Ok(())
    }
}

impl ShmMemory for HeapMemory {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        self.each_chunk(offset, len, |page, at| {
            buf[at..at + page.len()].copy_from_slice(page)
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.each_chunk(offset, data.len(), |page, at| {
            let n = page.len();
            page.copy_from_slice(&data[at..at + n])
        })
    }

    fn resident_pages(&self) -> u64 {
        lock(&self.pages).len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_memory_is_zeroed_sparse_and_bounded() {
        let m = HeapMemory::new(5000);
        assert_eq!(m.len(), 8192);
        assert_eq!(m.resident_pages(), 0);
        m.write_at(4090, b"0123456789").unwrap();
        assert_eq!(
            m.resident_pages(),
            2,
            "a write across a page boundary touches both"
        );
        let mut buf = [9u8; 12];
        m.read_at(4089, &mut buf).unwrap();
        assert_eq!(&buf, b"\x000123456789\x00");
        assert_eq!(m.write_at(8190, b"abc"), Err(Errno::EFAULT));
        assert_eq!(m.read_at(u64::MAX, &mut buf), Err(Errno::EFAULT));
        let mut one = [1u8];
        m.read_at(8191, &mut one).unwrap();
        assert_eq!(one, [0]);
        assert_eq!(m.resident_pages(), 2);
    }
}
