//! Reading frames without blocking, for a server that watches many sockets from one thread.
//!
//! A [`FrameReader`] keeps one socket's partial frame between calls. [`FrameReader::read`]
//! reads with MSG_DONTWAIT. At a frame boundary one `recvmsg` takes the 4-byte length and up
//! to [`AHEAD`] bytes after it (no more than the longest frame the caller allows), so a
//! small frame arrives whole in one system call; within a frame it reads never more than the
//! frame's rest. It returns a whole frame, `None` when the socket has nothing more for now,
//! or the same errors as [`crate::transport::recv_frame`] (Closed between frames, Bad for an
//! oversized length or a frame cut short by a hang-up).
//!
//! Bytes read past a frame's end (a client that sent its next frame, a Cancel, before this
//! one was read) are kept, charged like a payload, and are the next frames' first bytes:
//! [`FrameReader::has_ahead`] tells the caller to call `read` again, as the socket may have
//! nothing more to report. Credentials and descriptors: a frame keeps the credentials of its
//! first chunk; the kernel never joins bytes of different credentials in one read, so bytes
//! read ahead carry the credentials of the read that took them. A descriptor goes with the
//! frame that holds the last byte of the read that brought it: a client sends a descriptor
//! with a frame's first bytes, and the kernel ends a read with the chunk that carried one, so
//! a request read whole behind another frame (a Hello whose reply the client has not waited
//! for) keeps its own, and a Cancel after it comes in a later read.
//!
//! Memory follows the bytes that arrived, not the length a header announced: the payload
//! grows (fallibly, `try_reserve`) as chunks come in, at most doubling, and each growth is
//! first charged to the reader's [`Budget`] (shared, for instance, by all connections of one
//! user). A length above the caller's limit, a growth the budget refuses or an allocation
//! that fails is an error (the caller drops the connection). The finished frame carries its
//! [`Charge`], which gives the bytes back to the budget when the frame is dropped.

use crate::codec::DecodeError;
use crate::transport::{recv_iov, recv_some, PeerCred, Received, RecvError};
use crate::MAX_FRAME;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The first allocation for a payload, and the least growth step.
const FIRST_CHUNK: usize = 4096;
/// The most bytes after a length that one read at a frame boundary takes.
pub const AHEAD: usize = 4096 - 4;

/// Bytes that frames may hold at once, shared by the readers given it.
#[derive(Debug)]
pub struct Budget {
    used: AtomicU64,
    limit: u64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            used: AtomicU64::new(0),
            limit,
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn try_charge(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }
}

/// Bytes charged to a [`Budget`], given back when dropped.
#[derive(Debug, Default)]
pub struct Charge {
    budget: Option<Arc<Budget>>,
    bytes: u64,
}

impl Charge {
    /// Charges `n` more bytes to the budget (if any): ENOMEM if it refuses.
    fn add(&mut self, n: usize) -> Result<(), RecvError> {
        if let Some(b) = &self.budget {
            if !b.try_charge(n as u64) {
                return Err(enomem());
            }
            self.bytes += n as u64;
        }
        Ok(())
    }
}

/// The error of a refused charge or a failed allocation.
fn enomem() -> RecvError {
    RecvError::Io(std::io::Error::from_raw_os_error(libc::ENOMEM))
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.used.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

/// One socket's frame in progress.
#[derive(Debug, Default)]
pub struct FrameReader {
    header: [u8; 4],
    /// Bytes of the header read so far (4: reading the payload).
    header_got: usize,
    /// The announced payload length.
    len: usize,
    /// The payload so far (its length is the bytes received).
    payload: Vec<u8>,
    cred: Option<PeerCred>,
    fd: Option<OwnedFd>,
    charge: Charge,
    /// Bytes read past the last frame's end, their credentials, and the descriptor that came
    /// with their read (the frame of their last byte's).
    ahead: Vec<u8>,
    ahead_cred: Option<PeerCred>,
    ahead_fd: Option<OwnedFd>,
    /// What `ahead` holds charged.
    ahead_charge: Charge,
}

impl FrameReader {
    /// A reader at a frame boundary, with no budget.
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// A reader whose payloads are charged to `budget`.
    pub fn with_budget(budget: Arc<Budget>) -> FrameReader {
        FrameReader {
            charge: Charge {
                budget: Some(budget.clone()),
                bytes: 0,
            },
            ahead_charge: Charge {
                budget: Some(budget),
                bytes: 0,
            },
            ..FrameReader::default()
        }
    }

    /// Whether a frame is partly read.
    pub fn in_frame(&self) -> bool {
        self.header_got > 0
    }

    /// Whether a frame's length is whole and its payload not (the reads [`read_at_most`]
    /// bounds).
    ///
    /// [`read_at_most`]: FrameReader::read_at_most
    pub fn in_payload(&self) -> bool {
        self.header_got == 4 && self.payload.len() < self.len
    }

    /// Whether bytes read past the last frame wait: `read` may find a frame without the
    /// socket reporting anything.
    pub fn has_ahead(&self) -> bool {
        !self.ahead.is_empty()
    }

    /// Reads what `sock` has of the current frame without waiting: `Ok(Some(frame))` once it
    /// is whole, `Ok(None)` if the socket has no more bytes now. A length above `max` (at most
    /// [`MAX_FRAME`] counts) is `Bad(Oversized)`; a growth the budget refuses, or memory that
    /// cannot be had, is `Io(ENOMEM)`.
    pub fn read(&mut self, sock: RawFd, max: u32) -> Result<Option<Received>, RecvError> {
        self.read_at_most(sock, max, usize::MAX)
    }

    /// [`FrameReader::read`], taking at most about `cap` payload bytes from the socket past the
    /// first read (never less than one page): `Ok(None)` when the cap is reached with the
    /// frame unfinished, though the socket may hold more. Bounds the work of one call, so a
    /// caller serving many sockets can take turns among them.
    pub fn read_at_most(
        &mut self,
        sock: RawFd,
        max: u32,
        cap: usize,
    ) -> Result<Option<Received>, RecvError> {
        let max = max.min(MAX_FRAME);
        if !self.ahead.is_empty() {
            let ahead = std::mem::take(&mut self.ahead);
            if self.cred.is_none() {
                self.cred = self.ahead_cred;
            }
            let used = self.take(&ahead, max);
            let ahead = self.keep_ahead(ahead, used.as_ref().map_or(0, |&n| n));
            if ahead.is_empty() && self.fd.is_none() {
                // This frame took the read's last byte.
                self.fd = self.ahead_fd.take();
            }
            self.ahead = ahead;
            used?;
            if self.complete() {
                return Ok(Some(self.finish()));
            }
        }
        if self.header_got == 0 {
            match self.first_read(sock, max)? {
                None => return Ok(None),
                Some(()) if self.complete() => return Ok(Some(self.finish())),
                Some(()) => {}
            }
        }
        while self.header_got < 4 {
            match self.chunk(sock, 0)? {
                None => return Ok(None),
                Some(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
                Some(n) => self.header_got += n,
            }
            if self.header_got == 4 {
                self.start_payload(max)?;
            }
        }
        let mut left = cap.max(FIRST_CHUNK);
        while self.payload.len() < self.len {
            if left == 0 {
                return Ok(None);
            }
            self.grow()?;
            match self.chunk(sock, left)? {
                None => return Ok(None),
                Some(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
                Some(n) => left = left.saturating_sub(n),
            }
        }
        Ok(Some(self.finish()))
    }

    /// At a frame boundary: one read of the length and up to [`AHEAD`] bytes after it (no
    /// more than `max`), taken into the frame; what is past its end is kept ahead. `None` if
    /// the socket has nothing now.
    fn first_read(&mut self, sock: RawFd, max: u32) -> Result<Option<()>, RecvError> {
        let mut buf = [0u8; 4 + AHEAD];
        let want = 4 + AHEAD.min(max as usize);
        let mut fd = None;
        let got = loop {
            let mut iov = [libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: want,
            }];
            match recv_iov(sock, &mut iov, &mut self.cred, &mut fd, libc::MSG_DONTWAIT) {
                Ok(0) => return Err(RecvError::Closed),
                Ok(n) => break n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => return Ok(None),
                    _ => return Err(RecvError::Io(e)),
                },
            }
        };
        let used = self.take(&buf[..got], max)?;
        if used == got {
            if self.fd.is_none() {
                self.fd = fd;
            }
        } else {
            self.ahead_fd = fd;
            self.ahead_cred = self.cred;
            let mut rest = Vec::new();
            let n = got - used;
            self.ahead_charge.add(n)?;
            rest.try_reserve_exact(n).map_err(|_| enomem())?;
            rest.extend_from_slice(&buf[used..got]);
            self.ahead = rest;
        }
        Ok(Some(()))
    }

    /// `ahead` less its first `used` bytes, its charge lowered to match.
    fn keep_ahead(&mut self, mut ahead: Vec<u8>, used: usize) -> Vec<u8> {
        let used = used.min(ahead.len());
        ahead.drain(..used);
        let keep = ahead.len() as u64;
        if let Some(b) = &self.ahead_charge.budget {
            let give_back = self.ahead_charge.bytes.saturating_sub(keep);
            b.used.fetch_sub(give_back, Ordering::Relaxed);
            self.ahead_charge.bytes -= give_back;
        }
        if ahead.is_empty() {
            self.ahead_cred = None;
        }
        ahead
    }

    /// Takes bytes of the frame in progress from the front of `bytes` (the length, then the
    /// payload, never past the frame's end); returns how many.
    fn take(&mut self, bytes: &[u8], max: u32) -> Result<usize, RecvError> {
        let mut used = 0;
        if self.header_got < 4 {
            let n = (4 - self.header_got).min(bytes.len());
            self.header[self.header_got..self.header_got + n].copy_from_slice(&bytes[..n]);
            self.header_got += n;
            used = n;
            if self.header_got < 4 {
                return Ok(used);
            }
            self.start_payload(max)?;
        }
        let n = (self.len - self.payload.len()).min(bytes.len() - used);
        if n > 0 {
            self.reserve(n)?;
            self.payload.extend_from_slice(&bytes[used..used + n]);
            used += n;
        }
        Ok(used)
    }

    /// The length is whole: checks it against `max` and starts the payload.
    fn start_payload(&mut self, max: u32) -> Result<(), RecvError> {
        let len = u32::from_le_bytes(self.header);
        if len > max {
            return Err(RecvError::Bad(DecodeError::Oversized(u64::from(len))));
        }
        self.len = len as usize;
        self.payload.clear();
        Ok(())
    }

    fn complete(&self) -> bool {
        self.header_got == 4 && self.payload.len() == self.len
    }

    /// The whole frame, handed over; the reader is at a boundary again.
    fn finish(&mut self) -> Received {
        let charge = Charge {
            budget: self.charge.budget.clone(),
            bytes: std::mem::take(&mut self.charge.bytes),
        };
        let frame = Received {
            payload: std::mem::take(&mut self.payload),
            cred: self.cred.take(),
            fd: self.fd.take(),
            charge,
        };
        self.header_got = 0;
        self.len = 0;
        frame
    }

    /// Room for `n` more payload bytes (a page at least, never past the announced length),
    /// charged first.
    fn reserve(&mut self, n: usize) -> Result<(), RecvError> {
        let spare = self.payload.capacity() - self.payload.len();
        if spare >= n {
            return Ok(());
        }
        let n = n.max(FIRST_CHUNK.min(self.len - self.payload.len()));
        let want = n - spare;
        self.charge.add(want)?;
        self.payload.try_reserve_exact(n).map_err(|_| enomem())
    }

    /// Makes room for more of the payload: at least a page, at most doubling, never past the
    /// announced length; charged first.
    fn grow(&mut self) -> Result<(), RecvError> {
        if self.payload.len() < self.payload.capacity() {
            return Ok(());
        }
        let cap = self.payload.capacity();
        let want = (cap.max(FIRST_CHUNK)).min(self.len - self.payload.len());
        self.charge.add(want)?;
        self.payload.try_reserve_exact(want).map_err(|_| enomem())
    }

    /// One non-blocking receive into the rest of the header (`want` 0) or into at most
    /// `want` bytes of the payload's spare room; `None` on EAGAIN.
    fn chunk(&mut self, sock: RawFd, want: usize) -> Result<Option<usize>, RecvError> {
        let start = self.payload.len();
        let payload = want > 0;
        let buf = if payload {
            // Zero the spare room so it can be handed to the kernel as a plain slice.
            let end = self
                .payload
                .capacity()
                .min(self.len)
                .min(start.saturating_add(want));
            self.payload.resize(end, 0);
            &mut self.payload[start..]
        } else {
            &mut self.header[self.header_got..]
        };
        let got = loop {
            match recv_some(sock, buf, &mut self.cred, &mut self.fd, libc::MSG_DONTWAIT) {
                Ok(n) => break Ok(Some(n)),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => break Ok(None),
                    _ => break Err(RecvError::Io(e)),
                },
            }
        };
        if payload {
            self.payload
                .truncate(start + got.as_ref().map_or(0, |n| n.unwrap_or(0)));
        }
        got
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
