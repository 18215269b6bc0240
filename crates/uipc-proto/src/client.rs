//! One client connection: connect, hello, then calls in order ([`Connection`], a
//! `UnixStream`, requests and replies as owned messages), built on the non-allocating pieces
//! of [`crate::exchange`] (re-exported here), which the preload library uses directly.

use crate::exchange::READ_TIMEOUT;
pub use crate::exchange::{
    await_reply, await_reply_on, connect_raw, discard_frame, exchange, hello, hello_asking,
    read_greeting, send_hello, set_read_timeout, Greeting, Reply, ReplySpace, WaitMode,
};
use crate::{Request, Response};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The inode behind descriptor `fd`. A raw system call: a preloaded library such as fakeroot
/// wraps libc's `fstat` (and would call back into uipc from inside it).
pub fn inode_of(fd: RawFd) -> Option<u64> {
    // SAFETY: zeroed stat is valid output space.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on any descriptor number is safe; failure is reported.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0).then_some(st.st_ino)
}

/// A session with the daemon.
pub struct Connection {
    sock: UnixStream,
}

impl Connection {
    /// Connects to the daemon at `path` and says hello. `new_image`: see
    /// [`Request::Hello`].
    pub fn connect(path: &Path, new_image: bool) -> io::Result<Connection> {
        let sock = UnixStream::connect(path)?;
        sock.set_read_timeout(Some(READ_TIMEOUT))?;
        hello(sock.as_raw_fd(), new_image).map_err(|e| {
            if e.kind() == io::ErrorKind::InvalidData {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "daemon speaks another protocol version",
                )
            } else {
                e
            }
        })?;
        Ok(Connection { sock })
    }

    /// The inode of the socket (to recognise the descriptor later).
    pub fn inode(&self) -> Option<u64> {
        inode_of(self.sock.as_raw_fd())
    }

    /// The socket's descriptor number.
    pub fn raw_fd(&self) -> RawFd {
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
    /// F_SETLKW and flock do on Linux ([`WaitMode::Restartable`]).
    pub fn call_passing(
        &self,
        req: &Request,
        pass: Option<RawFd>,
        interruptible: bool,
        restartable: bool,
    ) -> io::Result<(Response, Option<OwnedFd>)> {
        let mut payload = Vec::new();
        let reply = exchange(
            self.sock.as_raw_fd(),
            &req.encode(),
            pass,
            WaitMode::of(interruptible, restartable),
            &mut payload,
        )?;
        let resp = Response::decode(&payload[..reply.len])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok((resp, reply.fd))
    }
}
