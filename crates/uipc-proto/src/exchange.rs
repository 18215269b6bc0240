//! One request and its reply on a client's socket, without allocating: the pieces
//! [`crate::client::Connection`] is made of, used directly by the preload library, whose calls
//! may come from a signal handler that interrupted `malloc` (so the frames live in its
//! buffers, [`ReplySpace`], and errors are `io::Error`s made from errnos and kinds only).
//!
//! A call sends its request with the caller's credentials and reads the reply. While a
//! blocking call waits, a signal handler that interrupts the read (the socket has a receive
//! timeout, so the kernel never restarts the read, whatever SA_RESTART says) makes the client
//! send [`Request::Cancel`] and wait again: the reply is then EINTR, or the call's result if it
//! completed first, as Linux lets a completion race a signal. A wait left by unwinding (thread
//! cancellation) withdraws the request the same way.

use crate::codec::Writer;
use crate::transport::{
    recv_head, recv_payload, recv_reply_start, send_frame, set_sockopt, FrameHead, RecvError,
};
use crate::{HelloArea, Request, Response, VERSION};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// How a call waits for its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// The daemon answers without sleeping: signals during the wait are retried.
    Immediate,
    /// semop, msgsnd, msgrcv: a signal handler ends the wait (the call is cancelled and
    /// fails with EINTR unless it completed), whatever SA_RESTART says.
    Interruptible,
    /// F_SETLKW, flock: the socket's receive timeout is lifted for the wait, so the kernel
    /// restarts the read after a handler with SA_RESTART, and only a handler without it
    /// interrupts the read (and cancels the call).
    Restartable,
}

impl WaitMode {
    /// The mode of a call that may sleep (`interruptible`) and follows SA_RESTART
    /// (`restartable`).
    pub fn of(interruptible: bool, restartable: bool) -> WaitMode {
        match (interruptible, restartable) {
            (false, _) => WaitMode::Immediate,
            (true, false) => WaitMode::Interruptible,
            (true, true) => WaitMode::Restartable,
        }
    }
}

/// Where a reply's payload goes.
pub trait ReplySpace {
    /// The buffer a reply is read into first: a reply that fits arrives with its length in
    /// one system call.
    fn room(&mut self) -> &mut [u8];
    /// A buffer of at least `len` bytes (more than [`ReplySpace::room`] holds) that begins
    /// with the room's first `keep` bytes, or `None` if there is no room for it (the payload
    /// is then read and dropped, and the exchange fails with ENOMEM).
    fn grow(&mut self, len: usize, keep: usize) -> Option<&mut [u8]>;
}

/// What a vector offers before a reply's length is known.
const VEC_ROOM: usize = 4096;

impl ReplySpace for Vec<u8> {
    fn room(&mut self) -> &mut [u8] {
        if self.len() < VEC_ROOM {
            self.resize(VEC_ROOM, 0);
        }
        self
    }

    fn grow(&mut self, len: usize, _keep: usize) -> Option<&mut [u8]> {
        self.resize(len, 0);
        Some(self)
    }
}

impl ReplySpace for [u8] {
    fn room(&mut self) -> &mut [u8] {
        self
    }

    fn grow(&mut self, len: usize, _keep: usize) -> Option<&mut [u8]> {
        self.get_mut(..len)
    }
}

/// A reply received: the payload's length (in the [`ReplySpace`]) and a descriptor sent
/// with it.
#[derive(Debug)]
pub struct Reply {
    /// The payload's length.
    pub len: usize,
    /// A descriptor that came with the reply (a segment's memfd).
    pub fd: Option<OwnedFd>,
}

fn send_cancel(fd: RawFd) -> io::Result<()> {
    let mut frame = [0u8; 8];
    let mut w = Writer::fixed(&mut frame);
    Request::Cancel.encode_into(&mut w);
    let len = w.written().unwrap_or(0);
    send_frame(fd, &frame[..len], true, None)
}

/// Reads one frame and drops it, in pieces through a small buffer on the stack.
pub fn discard_frame(fd: RawFd) -> Result<(), RecvError> {
    let mut head = recv_head(fd, false)?;
    discard_payload(fd, &mut head)
}

fn discard_payload(fd: RawFd, head: &mut FrameHead) -> Result<(), RecvError> {
    let mut chunk = [0u8; 256];
    let mut left = head.len;
    while left > 0 {
        let n = left.min(chunk.len());
        recv_payload(fd, head, &mut chunk[..n])?;
        left -= n;
    }
    Ok(())
}

/// A request sent and not yet answered. If the wait is left by unwinding (the thread was
/// cancelled with `pthread_cancel` in the read, a cancellation point), the request is
/// withdrawn before the unwinding goes on: Cancel, then the reply is read and dropped, so the
/// daemon holds no sleeping request of a thread that is gone.
struct Waiting {
    fd: RawFd,
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            let _ = send_cancel(self.fd);
            let _ = discard_frame(self.fd);
        }
    }
}

/// Long, but set: a receive timeout makes signal handlers interrupt reads.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(3600);

/// Sets (or with `None` lifts) socket `fd`'s receive timeout (SO_RCVTIMEO).
pub fn set_read_timeout(fd: RawFd, timeout: Option<Duration>) -> io::Result<()> {
    let t = timeout.unwrap_or(Duration::ZERO);
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    set_sockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
}

/// Sends one request frame (`request`: its encoded payload) on socket `fd` with the caller's
/// credentials and descriptor `pass`, and reads the reply into `reply`. A signal during an
/// `Interruptible` or `Restartable` wait sends [`Request::Cancel`] and waits again (see the
/// module doc). Allocates nothing itself (`reply` decides where the payload goes).
pub fn exchange<S: ReplySpace + ?Sized>(
    fd: RawFd,
    request: &[u8],
    pass: Option<RawFd>,
    mode: WaitMode,
    reply: &mut S,
) -> io::Result<Reply> {
    send_frame(fd, request, true, pass)?;
    await_reply(fd, mode, reply)
}

/// The second half of [`exchange`], for a caller that sent the request itself with
/// [`send_frame`] (from a buffer the reply then goes into). The socket's receive timeout is
/// what [`connect_raw`] set when this returns.
pub fn await_reply<S: ReplySpace + ?Sized>(
    fd: RawFd,
    mode: WaitMode,
    reply: &mut S,
) -> io::Result<Reply> {
    let lifted = std::cell::Cell::new(false);
    let result = await_reply_on(fd, mode, reply, &lifted);
    if lifted.get() {
        set_read_timeout(fd, Some(READ_TIMEOUT))?;
    }
    result
}

/// [`await_reply`] on a socket whose receive timeout is lifted if `lifted` says so (the
/// caller keeps that state with the socket, starting `false` after [`connect_raw`]): a
/// `Restartable` wait lifts it, an `Interruptible` one sets it again, an `Immediate` one
/// takes it as it is; `lifted` follows each change. So a run of calls of one mode changes
/// nothing on the socket.
pub fn await_reply_on<S: ReplySpace + ?Sized>(
    fd: RawFd,
    mode: WaitMode,
    reply: &mut S,
    lifted: &std::cell::Cell<bool>,
) -> io::Result<Reply> {
    match mode {
        WaitMode::Restartable if !lifted.get() => {
            set_read_timeout(fd, None)?;
            lifted.set(true);
        }
        WaitMode::Interruptible if lifted.get() => {
            set_read_timeout(fd, Some(READ_TIMEOUT))?;
            lifted.set(false);
        }
        _ => {}
    }
    let mut waiting = Waiting { fd, done: false };
    let result = wait_reply(fd, mode != WaitMode::Immediate, reply);
    waiting.done = true;
    result
}

fn wait_reply<S: ReplySpace + ?Sized>(
    fd: RawFd,
    interruptible: bool,
    reply: &mut S,
) -> io::Result<Reply> {
    let mut cancelled = false;
    loop {
        let room = reply.room();
        let room_len = room.len();
        let (mut head, got) = match recv_reply_start(fd, interruptible && !cancelled, room) {
            Ok(start) => start,
            Err(RecvError::Io(e)) if e.raw_os_error() == Some(libc::EINTR) => {
                send_cancel(fd)?;
                cancelled = true;
                continue;
            }
            Err(e) => return Err(recv_error(e)),
        };
        let len = head.len;
        let buf = if len <= room_len {
            Some(&mut reply.room()[..len])
        } else {
            reply.grow(len, got)
        };
        let Some(buf) = buf else {
            head.len -= got;
            discard_payload(fd, &mut head).map_err(recv_error)?;
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        };
        recv_payload(fd, &mut head, &mut buf[got..len]).map_err(recv_error)?;
        return Ok(Reply { len, fd: head.fd });
    }
}

/// An io::Error for a failed read, made without allocating.
fn recv_error(e: RecvError) -> io::Error {
    match e {
        RecvError::Io(e) => e,
        RecvError::Closed => io::Error::from(io::ErrorKind::ConnectionAborted),
        RecvError::Bad(_) => io::Error::from(io::ErrorKind::InvalidData),
    }
}

/// Opens a connection to the daemon's socket at `path` (bytes, without a NUL) with plain
/// system calls, and gives it the clients' receive timeout. Allocates nothing; says no hello
/// ([`hello`] does).
pub fn connect_raw(path: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: sockaddr_un is plain data; zeroed is a valid empty address.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if path.is_empty() || path.len() >= addr.sun_path.len() || path.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &b) in addr.sun_path.iter_mut().zip(path) {
        *dst = b as libc::c_char;
    }
    // SAFETY: creates a socket; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
    loop {
        // SAFETY: `addr` is a live sockaddr_un of at least `len` bytes.
        let r = unsafe {
            libc::connect(
                raw,
                (&addr as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
    set_read_timeout(raw, Some(READ_TIMEOUT))?;
    Ok(sock)
}

/// The session's first exchange on a new connection `fd`: [`Request::Hello`], answered by
/// the daemon's Hello of the same version (else `InvalidData`, or the daemon's errno).
/// Allocates nothing.
pub fn hello(fd: RawFd, new_image: bool) -> io::Result<()> {
    hello_asking(fd, new_image, HelloArea::None).map(drop)
}

/// What a Hello's reply brought: the caller's pid as the daemon numbers it, and the lock
/// area asked for (its memfd, or the errno its own request would have given).
pub struct Greeting {
    /// The caller as the daemon numbers it.
    pub pid: i32,
    /// The area's memfd, or the errno; `Err(0)` when none was asked.
    pub area: Result<OwnedFd, i32>,
}

/// [`hello`] asking for lock area `area` too. Allocates nothing.
pub fn hello_asking(fd: RawFd, new_image: bool, area: HelloArea) -> io::Result<Greeting> {
    send_hello(fd, new_image, area)?;
    read_greeting(fd, area)
}

/// The Hello of [`hello_asking`], sent; its reply is read with [`read_greeting`], which a
/// client may do after sending its first request behind it (the daemon answers in order).
/// Allocates nothing.
pub fn send_hello(fd: RawFd, new_image: bool, area: HelloArea) -> io::Result<()> {
    let mut frame = [0u8; 16];
    let mut w = Writer::fixed(&mut frame);
    Request::Hello {
        version: VERSION,
        new_image,
        area: area as u8,
    }
    .encode_into(&mut w);
    let len = w
        .written()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    send_frame(fd, &frame[..len], true, None)
}

/// Reads the reply to a Hello that asked for `area` ([`send_hello`]): exactly its frame, not
/// a byte of a reply that may follow it. Signals are retried. Allocates nothing.
pub fn read_greeting(fd: RawFd, area: HelloArea) -> io::Result<Greeting> {
    let bad = || io::Error::from(io::ErrorKind::InvalidData);
    let mut head = recv_head(fd, false).map_err(recv_error)?;
    let mut space = [0u8; 64];
    let body = space.get_mut(..head.len).ok_or_else(bad)?;
    recv_payload(fd, &mut head, body).map_err(recv_error)?;
    match Response::decode(body) {
        Ok(Response::Hello {
            version,
            pid,
            area: err,
        }) if version == VERSION => Ok(Greeting {
            pid,
            area: match (head.fd, err) {
                (Some(fd), 0) if area != HelloArea::None => Ok(fd),
                (_, 0) if area == HelloArea::None => Err(0),
                (_, 0) => Err(libc::EIO),
                (_, e) => Err(e),
            },
        }),
        Ok(Response::Error(e)) => Err(io::Error::from_raw_os_error(e)),
        _ => Err(bad()),
    }
}
