//! Reading frames without blocking, for a server that watches many sockets from one thread.
//!
//! A [`FrameReader`] keeps one socket's partial frame between calls. [`FrameReader::read`]
//! reads with MSG_DONTWAIT, never more than the rest of the current frame (first the 4-byte
//! length, then the payload), so it never takes bytes, credentials or descriptors of the next
//! frame; it returns a whole frame, `None` when the socket has nothing more for now, or the
//! same errors as [`crate::transport::recv_frame`] (Closed between frames, Bad for an
//! oversized length or a frame cut short by a hang-up). Like `recv_frame`, a frame keeps the
//! credentials of its first chunk and the first descriptor that came with it.

use crate::codec::DecodeError;
use crate::transport::{recv_some, PeerCred, Received, RecvError};
use crate::MAX_FRAME;
use std::os::fd::{OwnedFd, RawFd};

/// One socket's frame in progress.
#[derive(Debug, Default)]
pub struct FrameReader {
    header: [u8; 4],
    /// Bytes of the header read so far (4: reading the payload).
    header_got: usize,
    payload: Vec<u8>,
    payload_got: usize,
    cred: Option<PeerCred>,
    fd: Option<OwnedFd>,
}

impl FrameReader {
    /// A reader at a frame boundary.
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// Reads what `sock` has of the current frame without waiting: `Ok(Some(frame))` once it
    /// is whole, `Ok(None)` if the socket has no more bytes now.
    pub fn read(&mut self, sock: RawFd) -> Result<Option<Received>, RecvError> {
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
                if len > MAX_FRAME {
                    return Err(RecvError::Bad(DecodeError::Oversized(u64::from(len))));
                }
                self.payload = vec![0; len as usize];
                self.payload_got = 0;
            }
        }
        while self.payload_got < self.payload.len() {
            match self.chunk(sock, true)? {
                None => return Ok(None),
                Some(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
                Some(n) => self.payload_got += n,
            }
        }
        let frame = Received {
            payload: std::mem::take(&mut self.payload),
            cred: self.cred.take(),
            fd: self.fd.take(),
        };
        self.header_got = 0;
        self.payload_got = 0;
        Ok(Some(frame))
    }

    /// One non-blocking receive into the rest of the header or payload; `None` on EAGAIN.
    fn chunk(&mut self, sock: RawFd, payload: bool) -> Result<Option<usize>, RecvError> {
        let buf = if payload {
            &mut self.payload[self.payload_got..]
        } else {
            &mut self.header[self.header_got..]
        };
        loop {
            match recv_some(sock, buf, &mut self.cred, &mut self.fd, libc::MSG_DONTWAIT) {
                Ok(n) => return Ok(Some(n)),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => return Ok(None),
                    _ => return Err(RecvError::Io(e)),
                },
            }
        }
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
        assert!(r.read(b.as_raw_fd()).unwrap().is_none());
        (&a).write_all(&3u32.to_le_bytes()[..2]).unwrap();
        assert!(r.read(b.as_raw_fd()).unwrap().is_none());
        (&a).write_all(&3u32.to_le_bytes()[2..]).unwrap();
        (&a).write_all(b"ab").unwrap();
        assert!(r.read(b.as_raw_fd()).unwrap().is_none());
        (&a).write_all(b"c").unwrap();
        send_frame(a.as_raw_fd(), b"next", false, None).unwrap();
        assert_eq!(r.read(b.as_raw_fd()).unwrap().unwrap().payload, b"abc");
        assert_eq!(r.read(b.as_raw_fd()).unwrap().unwrap().payload, b"next");
        assert!(r.read(b.as_raw_fd()).unwrap().is_none());
        drop(a);
        assert!(matches!(r.read(b.as_raw_fd()), Err(RecvError::Closed)));
    }

    #[test]
    fn an_oversized_length_and_a_cut_frame_are_bad() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert!(matches!(
            FrameReader::new().read(b.as_raw_fd()),
            Err(RecvError::Bad(DecodeError::Oversized(_)))
        ));
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&5u32.to_le_bytes()).unwrap();
        (&a).write_all(b"ab").unwrap();
        drop(a);
        assert!(matches!(
            FrameReader::new().read(b.as_raw_fd()),
            Err(RecvError::Bad(DecodeError::Truncated))
        ));
    }
}
