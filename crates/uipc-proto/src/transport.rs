//! Frames on a Unix stream socket, with the sender's credentials and a descriptor.
//!
//! A frame is a u32 little-endian payload length (at most [`MAX_FRAME`]) followed by the
//! payload. Each frame is written with one `sendmsg` (continued while partial) whose first
//! chunk carries SCM_CREDENTIALS when asked (the client's pid, effective uid and effective
//! gid, from [`set_pid_source`] and [`set_id_source`] if given: the kernel refuses ids the
//! sender does not hold, and a refused frame is sent once more with ids asked afresh, then,
//! if its user namespace maps none of them, without SCM_CREDENTIALS: the receiver's
//! SO_PASSCRED then gets the kernel's pid, real uid and real gid) and SCM_RIGHTS when a
//! descriptor goes along. The reader keeps the credentials of the frame's
//! first chunk; the kernel never merges chunks from different senders into one read.
//!
//! Signals: [`recv_frame`] reports EINTR only before the first byte of a frame, so a caller
//! can cancel a call it is waiting for; within a frame, and in [`send_frame`], EINTR is
//! retried.
//!
//! Allocation: [`send_frame`], [`recv_head`], [`recv_reply_start`] and [`recv_payload`] use
//! only the stack (the control-message buffer included), so a client in a signal handler can
//! use them; [`recv_frame`] puts the payload in a new vector. EAGAIN (an SO_RCVTIMEO timeout,
//! set by clients so that a signal handler interrupts the read even with SA_RESTART) is
//! retried too.

use crate::codec::DecodeError;
pub use crate::sender::{kernel_effective_ids, set_id_source, set_pid_source};
use crate::sender::{own_ids, own_pid};
use crate::MAX_FRAME;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Sets socket option `name` at `level` of socket `fd` to `value` (an `int`, a `timeval`: the
/// option's own C type).
pub fn set_sockopt<T>(fd: RawFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: passes a live `T` and its size; the kernel reads at most that many bytes.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Kernel-verified identity of a frame's sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// The sending process (0 if it has died since).
    pub pid: i32,
    /// The uid it sent (one of its real, effective or saved uids).
    pub uid: u32,
    /// The gid it sent.
    pub gid: u32,
}

/// A frame read from the socket.
#[derive(Debug)]
pub struct Received {
    /// The payload.
    pub payload: Vec<u8>,
    /// The sender's credentials, if it sent them (or the socket has SO_PASSCRED).
    pub cred: Option<PeerCred>,
    /// A descriptor sent with the frame.
    pub fd: Option<OwnedFd>,
    /// What the payload costs its reader's budget ([`crate::reader`]), given back on drop.
    pub charge: crate::reader::Charge,
}

/// Why reading a frame failed.
#[derive(Debug)]
pub enum RecvError {
    /// The peer closed the connection between frames.
    Closed,
    /// The socket failed (EINTR: interrupted before the frame began).
    Io(io::Error),
    /// The frame is malformed (too long, or cut short by the peer closing).
    Bad(DecodeError),
}

impl From<io::Error> for RecvError {
    fn from(e: io::Error) -> RecvError {
        RecvError::Io(e)
    }
}

// Room for one `ucred` and one descriptor, aligned for `cmsghdr`.
const CMSG_SPACE: usize = 128;

#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE]);

/// Writes one frame. `cred` sends SCM_CREDENTIALS with the caller's pid, euid and egid;
/// `fd` is passed with SCM_RIGHTS.
pub fn send_frame(sock: RawFd, payload: &[u8], cred: bool, fd: Option<RawFd>) -> io::Result<()> {
    send_from(sock, payload, cred, fd, 0, 0).map(|_| ())
}

/// Writes as much of one frame as the socket takes now (MSG_DONTWAIT, no credentials sent):
/// the bytes of the frame (its 4-byte length included) written, the whole frame's
/// `payload.len() + 4` once done. Continue with [`send_frame_rest`].
pub fn send_frame_nowait(sock: RawFd, payload: &[u8], fd: Option<RawFd>) -> io::Result<usize> {
    send_from(sock, payload, false, fd, 0, libc::MSG_DONTWAIT)
}

/// Writes the rest of a frame of which `sent` bytes were written, waiting as the socket
/// allows (its SO_SNDTIMEO bounds each wait).
pub fn send_frame_rest(sock: RawFd, payload: &[u8], sent: usize) -> io::Result<()> {
    send_from(sock, payload, false, None, sent, 0).map(|_| ())
}

/// Writes the frame from byte `sent`; with MSG_DONTWAIT in `flags`, stops at EAGAIN and
/// returns the bytes written so far.
fn send_from(
    sock: RawFd,
    payload: &[u8],
    cred: bool,
    fd: Option<RawFd>,
    mut sent: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    if payload.len() as u64 > u64::from(MAX_FRAME) {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    let header = (payload.len() as u32).to_le_bytes();
    let total = header.len() + payload.len();
    // After a refusal, the ids are read afresh; after a second EINVAL (ids the sender's user
    // namespace does not map, as between unshare(CLONE_NEWUSER) and the writing of its
    // uid_map) the frame goes without SCM_CREDENTIALS, and the receiver's SO_PASSCRED gets
    // the kernel's own (the pid, real uid and real gid).
    let mut fresh_ids = false;
    let mut kernel_ids = false;
    while sent < total {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let mut n_iov = 0;
        if sent < header.len() {
            iov[0] = libc::iovec {
                iov_base: header[sent..].as_ptr() as *mut _,
                iov_len: header.len() - sent,
            };
            iov[1] = libc::iovec {
                iov_base: payload.as_ptr() as *mut _,
                iov_len: payload.len(),
            };
            n_iov = 2;
        } else {
            let off = sent - header.len();
            iov[0] = libc::iovec {
                iov_base: payload[off..].as_ptr() as *mut _,
                iov_len: payload.len() - off,
            };
            n_iov += 1;
        }
        let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
        // SAFETY: msghdr is plain data; zeroed is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n_iov;
        let send_ids = cred && !kernel_ids;
        if sent == 0 && (send_ids || fd.is_some()) {
            fill_control(
                &mut msg,
                &mut cbuf,
                send_ids.then(|| own_ids(fresh_ids)),
                fd,
            );
        }
        // SAFETY: `msg` points at live iovecs and a control buffer sized by `msg_controllen`.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL | flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Ids from a cache the process changed under it: once more, asked afresh.
                Some(libc::EPERM) | Some(libc::EINVAL) if cred && sent == 0 && !fresh_ids => {
                    fresh_ids = true;
                    continue;
                }
                Some(libc::EINVAL) if cred && sent == 0 && !kernel_ids => {
                    kernel_ids = true;
                    continue;
                }
                Some(libc::EAGAIN) if flags & libc::MSG_DONTWAIT != 0 => return Ok(sent),
                _ => return Err(e),
            }
        }
        sent += n as usize;
    }
    Ok(sent)
}

/// The control messages: SCM_CREDENTIALS with `ids` (effective uid and gid) and the cached
/// pid, SCM_RIGHTS with `fd`.
fn fill_control(
    msg: &mut libc::msghdr,
    cbuf: &mut CmsgBuf,
    ids: Option<(u32, u32)>,
    fd: Option<RawFd>,
) {
    // SAFETY: the CMSG_* macros only compute sizes.
    let cred_space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::ucred>() as u32) };
    // SAFETY: as above.
    let fd_space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) };
    let mut len = 0;
    if ids.is_some() {
        len += cred_space;
    }
    if fd.is_some() {
        len += fd_space;
    }
    debug_assert!(len as usize <= CMSG_SPACE);
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = len as usize;
    // SAFETY: the control buffer is aligned, zeroed and `len` bytes long, which holds the
    // headers written below (CMSG_NXTHDR stays within msg_controllen).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        if let Some((uid, gid)) = ids {
            let me = libc::ucred {
                pid: own_pid(),
                uid,
                gid,
            };
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_CREDENTIALS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::ucred>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>(), me);
            c = libc::CMSG_NXTHDR(msg, c);
        }
        if let Some(fd) = fd {
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
}

/// One `recvmsg` into `buf` with `flags` (MSG_CMSG_CLOEXEC is added), collecting credentials
/// and descriptors. Returns the byte count.
pub(crate) fn recv_some(
    sock: RawFd,
    buf: &mut [u8],
    cred: &mut Option<PeerCred>,
    fd: &mut Option<OwnedFd>,
    flags: libc::c_int,
) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }];
    recv_iov(sock, &mut iov, cred, fd, flags)
}

/// [`recv_some`] into the buffers `iov` describes (live, writable, of their stated lengths).
pub(crate) fn recv_iov(
    sock: RawFd,
    iov: &mut [libc::iovec],
    cred: &mut Option<PeerCred>,
    fd: &mut Option<OwnedFd>,
    flags: libc::c_int,
) -> io::Result<usize> {
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: zeroed msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len();
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE;
    // SAFETY: `msg` points at the caller's live buffers and a control buffer of the stated
    // sizes.
    let n = unsafe { libc::recvmsg(sock, &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of well-formed headers; CMSG_NXTHDR
    // stops at the end. Descriptors received are owned by this process from now on.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let data_len = (*c).cmsg_len - (data as usize - c as usize);
            if (*c).cmsg_level == libc::SOL_SOCKET {
                if (*c).cmsg_type == libc::SCM_CREDENTIALS
                    && data_len >= std::mem::size_of::<libc::ucred>()
                {
                    let u = std::ptr::read_unaligned(data.cast::<libc::ucred>());
                    if cred.is_none() {
                        *cred = Some(PeerCred {
                            pid: u.pid,
                            uid: u.uid,
                            gid: u.gid,
                        });
                    }
                } else if (*c).cmsg_type == libc::SCM_RIGHTS {
                    let count = data_len / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        let owned = OwnedFd::from_raw_fd(raw);
                        if fd.is_none() {
                            *fd = Some(owned);
                        }
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(n as usize)
}

/// Reads into `buf` from `start` until it is full. EINTR before the first byte ends it when
/// `interruptible`; otherwise EINTR and EAGAIN are retried.
fn fill(
    sock: RawFd,
    buf: &mut [u8],
    start: usize,
    cred: &mut Option<PeerCred>,
    fd: &mut Option<OwnedFd>,
    interruptible: bool,
) -> Result<(), RecvError> {
    let mut got = start;
    while got < buf.len() {
        match recv_some(sock, &mut buf[got..], cred, fd, 0) {
            Ok(0) if got == 0 => return Err(RecvError::Closed),
            Ok(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
            Ok(n) => got += n,
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) if interruptible && got == 0 => return Err(RecvError::Io(e)),
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => return Err(RecvError::Io(e)),
            },
        }
    }
    Ok(())
}

/// The start of a frame: its payload's length, and what came with the bytes read so far.
#[derive(Debug)]
pub struct FrameHead {
    /// The payload's length (at most [`MAX_FRAME`]).
    pub len: usize,
    /// The sender's credentials, if it sent them (or the socket has SO_PASSCRED).
    pub cred: Option<PeerCred>,
    /// A descriptor sent with the frame.
    pub fd: Option<OwnedFd>,
}

/// Reads a frame's length. With `interruptible`, a signal before the frame's first byte
/// returns `RecvError::Io(EINTR)`; otherwise signals are retried. The payload follows with
/// [`recv_payload`]. Allocates nothing.
pub fn recv_head(sock: RawFd, interruptible: bool) -> Result<FrameHead, RecvError> {
    let mut head = FrameHead {
        len: 0,
        cred: None,
        fd: None,
    };
    let mut header = [0u8; 4];
    fill(
        sock,
        &mut header,
        0,
        &mut head.cred,
        &mut head.fd,
        interruptible,
    )?;
    let len = u32::from_le_bytes(header);
    if len > MAX_FRAME {
        return Err(RecvError::Bad(DecodeError::Oversized(u64::from(len))));
    }
    head.len = len as usize;
    Ok(head)
}

/// The start of a reply from a peer that sends one frame per exchange (the daemon's
/// replies): one `recvmsg` takes the length into a header of its own and as much of the
/// payload as `room` holds, so a reply that fits arrives in one system call. Returns the head
/// and how many payload bytes are in `room`; the rest follows with [`recv_payload`]. With
/// `interruptible`, a signal before the frame's first byte returns `RecvError::Io(EINTR)`.
/// Bytes past the frame's end (a peer sending more than it should) are an error. Allocates
/// nothing.
pub fn recv_reply_start(
    sock: RawFd,
    interruptible: bool,
    room: &mut [u8],
) -> Result<(FrameHead, usize), RecvError> {
    let mut head = FrameHead {
        len: 0,
        cred: None,
        fd: None,
    };
    let mut header = [0u8; 4];
    let mut header_got = 0;
    let body = loop {
        let mut iov = [
            libc::iovec {
                iov_base: header[header_got..].as_mut_ptr().cast(),
                iov_len: 4 - header_got,
            },
            libc::iovec {
                iov_base: room.as_mut_ptr().cast(),
                iov_len: room.len(),
            },
        ];
        match recv_iov(sock, &mut iov, &mut head.cred, &mut head.fd, 0) {
            Ok(0) if header_got == 0 => return Err(RecvError::Closed),
            Ok(0) => return Err(RecvError::Bad(DecodeError::Truncated)),
            Ok(n) if header_got + n < 4 => header_got += n,
            Ok(n) => break n - (4 - header_got),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) if interruptible && header_got == 0 => {
                    return Err(RecvError::Io(e))
                }
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => return Err(RecvError::Io(e)),
            },
        }
    };
    let len = u32::from_le_bytes(header);
    if len > MAX_FRAME {
        return Err(RecvError::Bad(DecodeError::Oversized(u64::from(len))));
    }
    head.len = len as usize;
    if body > head.len {
        return Err(RecvError::Bad(DecodeError::TrailingBytes(body - head.len)));
    }
    Ok((head, body))
}

/// Reads `buf.len()` payload bytes of the frame `head` began (signals are retried), adding
/// credentials and a descriptor that come with them to `head`. Allocates nothing.
pub fn recv_payload(sock: RawFd, head: &mut FrameHead, buf: &mut [u8]) -> Result<(), RecvError> {
    if buf.is_empty() {
        return Ok(());
    }
    match fill(sock, buf, 0, &mut head.cred, &mut head.fd, false) {
        Err(RecvError::Closed) => Err(RecvError::Bad(DecodeError::Truncated)),
        r => r,
    }
}

/// Reads one frame. With `interruptible`, a signal before the frame's first byte returns
/// `RecvError::Io(EINTR)`; otherwise signals are retried.
pub fn recv_frame(sock: RawFd, interruptible: bool) -> Result<Received, RecvError> {
    let mut head = recv_head(sock, interruptible)?;
    let mut payload = vec![0u8; head.len];
    recv_payload(sock, &mut head, &mut payload)?;
    Ok(Received {
        payload,
        cred: head.cred,
        fd: head.fd,
        charge: Default::default(),
    })
}

/// Takes ownership of a raw descriptor (for callers that hold one from elsewhere).
///
/// # Safety
/// `fd` must be open and owned by nobody else.
pub unsafe fn own_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller's obligation.
    unsafe { OwnedFd::from_raw_fd(fd) }
}
