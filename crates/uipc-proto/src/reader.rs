//! Reading frames without blocking, for a server that watches many sockets from one thread.
//!
//! A [`FrameReader`] keeps one socket's partial frame between calls. [`FrameReader::read`]
//! reads with MSG_DONTWAIT, never more than the rest of the current frame (first the 4-byte
//! length, then the payload), so it never takes bytes, credentials or descriptors of the next
//! frame; it returns a whole frame, `None` when the socket has nothing more for now, or the
//! same errors as [`crate::transport::recv_frame`] (Closed between frames, Bad for an
//! oversized length or a frame cut short by a hang-up). Like `recv_frame`, a frame keeps the
//! credentials of its first chunk and the first descriptor that came with it.
//!
//! Memory follows the bytes that arrived, not the length a header announced: the payload
//! grows (fallibly, `try_reserve`) as chunks come in, at most doubling, and each growth is
//! first charged to the reader's [`Budget`] (shared, for instance, by all connections of one
//! user). A length above the caller's limit, a growth the budget refuses or an allocation
//! that fails is an error (the caller drops the connection). The finished frame carries its
//! [`Charge`], which gives the bytes back to the budget when the frame is dropped.

use crate::codec::DecodeError;
use crate::transport::{recv_some, PeerCred, Received, RecvError};
use crate::MAX_FRAME;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The first allocation for a payload, and the least growth step.
const FIRST_CHUNK: usize = 4096;

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

    /// Reads what `sock` has of the current frame without waiting: `Ok(Some(frame))` once it
    /// is whole, `Ok(None)` if the socket has no more bytes now. A length above `max` (at most
    /// [`MAX_FRAME`] counts) is `Bad(Oversized)`; a growth the budget refuses, or memory that
    /// cannot be had, is `Io(ENOMEM)`.
    pub fn read(&mut self, sock: RawFd, max: u32) -> Result<Option<Received>, RecvError> {
        while self.header_got < 4 {
            let got = self.header_got;
            match self.chunk(sock, false)? {
                None => return Ok(None),
                Some(0) if got == 0 => return Err(RecvError::Closed),
                Some(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
                Some(n) => self.header_got += n,
            }
            if self.header_got == 4 {
                let len = u32::from_le_bytes(self.header);
                if len > max.min(MAX_FRAME) {
                    return Err(RecvError::Bad(DecodeError::Oversized(u64::from(len))));
                }
                self.len = len as usize;
                self.payload.clear();
            }
        }
        while self.payload.len() < self.len {
            self.grow()?;
            match self.chunk(sock, true)? {
                None => return Ok(None),
                Some(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
                Some(_) => {}
            }
        }
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
        Ok(Some(frame))
    }

    /// Makes room for more of the payload: at least a page, at most doubling, never past the
    /// announced length; charged first.
    fn grow(&mut self) -> Result<(), RecvError> {
        if self.payload.len() < self.payload.capacity() {
            return Ok(());
        }
        let cap = self.payload.capacity();
        let want = (cap.max(FIRST_CHUNK)).min(self.len - self.payload.len());
        let enomem = || RecvError::Io(std::io::Error::from_raw_os_error(libc::ENOMEM));
        if let Some(b) = &self.charge.budget {
            if !b.try_charge(want as u64) {
                return Err(enomem());
            }
            self.charge.bytes += want as u64;
        }
        self.payload.try_reserve_exact(want).map_err(|_| enomem())
    }

    /// One non-blocking receive into the rest of the header or the payload's spare room;
    /// `None` on EAGAIN.
    fn chunk(&mut self, sock: RawFd, payload: bool) -> Result<Option<usize>, RecvError> {
        let start = self.payload.len();
        let buf = if payload {
            // Zero the spare room so it can be handed to the kernel as a plain slice.
            self.payload
                .resize(self.payload.capacity().min(self.len), 0);
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
mod tests {
    use super::*;
    use crate::transport::send_frame;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn frames_arrive_whole_across_partial_writes_and_stop_at_their_boundary() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = FrameReader::new();
        assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
        (&a).write_all(&3u32.to_le_bytes()[..2]).unwrap();
        assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
        (&a).write_all(&3u32.to_le_bytes()[2..]).unwrap();
        (&a).write_all(b"ab").unwrap();
        assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
        (&a).write_all(b"c").unwrap();
        send_frame(a.as_raw_fd(), b"next", false, None).unwrap();
        assert_eq!(
            r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap().payload,
            b"abc"
        );
        assert_eq!(
            r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap().payload,
            b"next"
        );
        assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
        drop(a);
        assert!(matches!(
            r.read(b.as_raw_fd(), MAX_FRAME),
            Err(RecvError::Closed)
        ));
    }

    #[test]
    fn an_oversized_length_and_a_cut_frame_are_bad() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert!(matches!(
            FrameReader::new().read(b.as_raw_fd(), MAX_FRAME),
            Err(RecvError::Bad(DecodeError::Oversized(_)))
        ));
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&5u32.to_le_bytes()).unwrap();
        (&a).write_all(b"ab").unwrap();
        drop(a);
        assert!(matches!(
            FrameReader::new().read(b.as_raw_fd(), MAX_FRAME),
            Err(RecvError::Bad(DecodeError::Truncated))
        ));
    }

    #[test]
    fn memory_follows_the_bytes_sent_and_the_budget_bounds_it() {
        let budget = Budget::new(64 << 10);
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = FrameReader::with_budget(budget.clone());
        // A 16 MiB frame announced, 10 bytes sent: a page is charged, not 16 MiB.
        (&a).write_all(&MAX_FRAME.to_le_bytes()).unwrap();
        (&a).write_all(&[7; 10]).unwrap();
        assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
        assert_eq!(budget.used(), FIRST_CHUNK as u64);
        assert!(r.in_frame());
        // More bytes than the budget allows: refused.
        let chunk = vec![1u8; 100 << 10];
        std::thread::spawn(move || {
            let _ = (&a).write_all(&chunk);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut res = Ok(None);
        for _ in 0..100 {
            res = r.read(b.as_raw_fd(), MAX_FRAME);
            if res.is_err() {
                break;
            }
        }
        assert!(matches!(res, Err(RecvError::Io(e)) if e.raw_os_error() == Some(libc::ENOMEM)));
        assert!(budget.used() <= 64 << 10);
        drop(r);
        assert_eq!(budget.used(), 0, "a dropped reader gives its bytes back");
        // A whole frame keeps its charge until dropped; a limit below the length is refused.
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = FrameReader::with_budget(budget.clone());
        send_frame(a.as_raw_fd(), &[5; 5000], false, None).unwrap();
        let f = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
        assert_eq!(f.payload, vec![5; 5000]);
        assert_eq!(budget.used(), 5000);
        drop(f);
        assert_eq!(budget.used(), 0);
        send_frame(a.as_raw_fd(), &[5; 65], false, None).unwrap();
        assert!(matches!(
            r.read(b.as_raw_fd(), 64),
            Err(RecvError::Bad(DecodeError::Oversized(65)))
        ));
    }
}
