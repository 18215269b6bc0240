//! One client connection: connect, hello, then calls in order.
//!
//! A call sends its request with the caller's credentials and reads the reply. While a
//! blocking call waits, a signal handler that interrupts the read (the socket has a receive
//! timeout, so the kernel never restarts the read, whatever SA_RESTART says) makes the client
//! send [`Request::Cancel`] and wait again: the reply is then EINTR, or the call's result if it
//! completed first, as Linux lets a completion race a signal.

use crate::transport::{recv_frame, send_frame, RecvError};
use crate::{DecodeError, Request, Response, VERSION};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The inode behind descriptor `fd`. A raw system call: a preloaded library such as fakeroot
/// wraps libc's `fstat` (and would call back into uipc from inside it).
pub fn inode_of(fd: std::os::fd::RawFd) -> Option<u64> {
    // SAFETY: zeroed stat is valid output space.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on any descriptor number is safe; failure is reported.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0).then_some(st.st_ino)
}

/// A request sent and not yet answered. If the wait is left by unwinding (the thread was
/// cancelled with `pthread_cancel` in the read, a cancellation point), the request is
/// withdrawn before the unwinding goes on: Cancel, then the reply is read and dropped, so the
/// daemon holds no sleeping request of a thread that is gone.
struct Waiting {
    fd: std::os::fd::RawFd,
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            let _ = send_frame(self.fd, &Request::Cancel.encode(), true, None);
            let _ = recv_frame(self.fd, false);
        }
    }
}

/// Long, but set: a receive timeout makes signal handlers interrupt reads.
const READ_TIMEOUT: Duration = Duration::from_secs(3600);

/// The socket's receive timeout lifted for a scope, and [`READ_TIMEOUT`] set again after.
struct NoReadTimeout<'a>(&'a UnixStream);

impl<'a> NoReadTimeout<'a> {
    fn new(sock: &'a UnixStream) -> io::Result<NoReadTimeout<'a>> {
        sock.set_read_timeout(None)?;
        Ok(NoReadTimeout(sock))
    }
}

impl Drop for NoReadTimeout<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_read_timeout(Some(READ_TIMEOUT));
    }
}

/// A session with the daemon.
pub struct Connection {
    sock: UnixStream,
}

fn proto_error(e: DecodeError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Connection {
    /// Connects to the daemon at `path` and says hello. `new_image`: see
    /// [`Request::Hello`].
    pub fn connect(path: &Path, new_image: bool) -> io::Result<Connection> {
        let sock = UnixStream::connect(path)?;
        sock.set_read_timeout(Some(READ_TIMEOUT))?;
        let conn = Connection { sock };
        let (resp, _) = conn.call(
            &Request::Hello {
                version: VERSION,
                new_image,
            },
            false,
        )?;
        match resp {
            Response::Hello { version } if version == VERSION => Ok(conn),
            Response::Error(e) => Err(io::Error::from_raw_os_error(e)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "daemon speaks another protocol version",
            )),
        }
    }

    /// The inode of the socket (to recognise the descriptor later).
    pub fn inode(&self) -> Option<u64> {
        inode_of(self.sock.as_raw_fd())
    }

    /// The socket's descriptor number.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }

    /// The socket (for closing it without a goodbye in a forked child).
    pub fn into_stream(self) -> UnixStream {
        self.sock
    }

    /// Sends `req` and returns the reply and the descriptor sent with it. `interruptible`:
    /// a signal during the wait cancels the call (see the module doc).
    pub fn call(
        &self,
        req: &Request,
        interruptible: bool,
    ) -> io::Result<(Response, Option<OwnedFd>)> {
        self.call_passing(req, None, interruptible, false)
    }

    /// [`Connection::call`], sending descriptor `pass` with the request (file-lock calls).
    /// With `restartable`, the wait follows the interrupting handler's SA_RESTART, as
    /// F_SETLKW and flock do on Linux: the socket's receive timeout is lifted for the wait,
    /// so the kernel restarts the read after a handler with SA_RESTART, and only a handler
    /// without it interrupts the read (and cancels the call).
    pub fn call_passing(
        &self,
        req: &Request,
        pass: Option<std::os::fd::RawFd>,
        interruptible: bool,
        restartable: bool,
    ) -> io::Result<(Response, Option<OwnedFd>)> {
        let fd = self.sock.as_raw_fd();
        send_frame(fd, &req.encode(), true, pass)?;
        // Declared first, dropped last: the timeout comes back however the wait ends (also
        // when a thread cancellation unwinds through it).
        let _timeout = (interruptible && restartable)
            .then(|| NoReadTimeout::new(&self.sock))
            .transpose()?;
        let mut waiting = Waiting { fd, done: false };
        let result = self.wait_reply(fd, interruptible);
        waiting.done = true;
        result
    }

    fn wait_reply(
        &self,
        fd: std::os::fd::RawFd,
        interruptible: bool,
    ) -> io::Result<(Response, Option<OwnedFd>)> {
        let mut cancelled = false;
        loop {
            match recv_frame(fd, interruptible && !cancelled) {
                Ok(got) => {
                    let resp = Response::decode(&got.payload).map_err(proto_error)?;
                    return Ok((resp, got.fd));
                }
                Err(RecvError::Io(e)) if e.raw_os_error() == Some(libc::EINTR) => {
                    send_frame(fd, &Request::Cancel.encode(), true, None)?;
                    cancelled = true;
                }
                Err(RecvError::Io(e)) => return Err(e),
                Err(RecvError::Closed) => {
                    return Err(io::Error::from(io::ErrorKind::ConnectionAborted))
                }
                Err(RecvError::Bad(e)) => return Err(proto_error(e)),
            }
        }
    }
}
