//! The host side of `uipc conform locks`: worker processes that hold descriptors on the test
//! file and make the lock calls the driver asks for.
//!
//! Each worker is a forked child connected to the driver by a `SOCK_SEQPACKET` socket pair:
//! one message is one [`Request`] (twelve `i64`s), answered by one [`Reply`] (eight `i64`s).
//! Descriptors travel between processes as `SCM_RIGHTS` attachments, so the driver can make a
//! worker share an open file description another worker holds (a `dup` across processes, as
//! `fork` gives) at any point of the run.
//!
//! A worker keeps [`SLOTS`] descriptor slots. A lock call on an empty slot uses fd -1, which
//! the kernel answers with EBADF. Nothing here can hang: blocking calls are only made with an
//! `alarm` armed (its handler does nothing, so the call ends with EINTR), a worker dies with
//! the driver (`PR_SET_PDEATHSIG`), and the driver waits at most [`REPLY_TIMEOUT_SECS`] for
//! any answer.

use std::os::fd::RawFd;

/// Descriptor slots per worker that the random operations use.
pub const SLOTS: usize = 6;
/// One more slot, for the blocking scenarios' descriptor on the second file.
pub const SCENARIO_SLOT: usize = SLOTS;
/// How long the driver waits for a worker's answer before giving up on the run.
pub const REPLY_TIMEOUT_SECS: i64 = 30;

/// `fcntl(slot, cmd, &flock)`; `seek >= 0` first moves the description's offset there;
/// `alarm > 0` arms a `SIGALRM` timer of that many milliseconds around the call (for blocking
/// commands: a call still waiting when it fires ends with EINTR).
pub const REQ_FCNTL: i64 = 0;
/// `flock(slot, cmd)`; `alarm` as for fcntl.
pub const REQ_FLOCK: i64 = 1;
/// `close(slot)`.
pub const REQ_CLOSE: i64 = 2;
/// `open(path, flags)` into an empty slot; `b` 1 opens the second file.
pub const REQ_OPEN: i64 = 3;
/// `dup(from)` into an empty slot.
pub const REQ_DUP: i64 = 4;
/// Send the slot's descriptor to the driver (attached to the reply).
pub const REQ_SEND: i64 = 5;
/// Store the attached descriptor in an empty slot.
pub const REQ_RECV: i64 = 6;
/// Exit (`_exit(0)`): the kernel closes every descriptor and drops every POSIX lock.
pub const REQ_EXIT: i64 = 7;

/// One request: `[kind, slot, a, b, seek, alarm, l_type, l_whence, l_start, l_len, l_pid, 0]`;
/// for fcntl `a` is the command, for flock the command, for open the flags, for dup the source
/// slot.
pub type Request = [i64; 12];
/// One reply: `[ret, errno, l_type, l_whence, l_start, l_len, l_pid, 0]`.
pub type Reply = [i64; 8];

/// Builds a request.
pub fn request(kind: i64, slot: usize, a: i64) -> Request {
    let mut r = [0; 12];
    r[0] = kind;
    r[1] = slot as i64;
    r[2] = a;
    r[4] = -1;
    r
}

/// Builds an fcntl request on `slot`: the command and the `struct flock` in words 6..11.
pub fn fcntl_request(slot: usize, cmd: i32, fl: &uipc::locks::Flock) -> Request {
    let mut req = request(REQ_FCNTL, slot, cmd as i64);
    req[6..11].copy_from_slice(&[
        fl.l_type as i64,
        fl.l_whence as i64,
        fl.l_start,
        fl.l_len,
        fl.l_pid as i64,
    ]);
    req
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Sends `words` as one message, with `fd` attached when given.
pub fn send(sock: RawFd, words: &[i64], fd: Option<RawFd>) -> Result<(), String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one cmsghdr carrying one int, u64-aligned.
    let mut control = [0u64; 4];
    // SAFETY: an all-zero msghdr is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: `control` is large and aligned enough for one cmsghdr with one int
        // (CMSG_SPACE(4) = 24 bytes); the pointers come from CMSG_FIRSTHDR/CMSG_DATA on it.
        unsafe {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
        }
    }
    // SAFETY: `msg` points to live buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n != bytes.len() as isize {
        return Err(format!("sendmsg failed (errno {})", errno()));
    }
    Ok(())
}

/// A message: its words and the descriptor attached to it, if any.
pub type Message<const N: usize> = ([i64; N], Option<RawFd>);

/// Receives one message of `N` words, with the descriptor attached to it, if any. `Ok(None)`
/// at end of file (the peer is gone).
pub fn recv<const N: usize>(sock: RawFd) -> Result<Option<Message<N>>, String> {
    let mut bytes = vec![0u8; N * 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: an all-zero msghdr is valid; the buffers below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: `msg` describes writable buffers of the stated sizes.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        break n;
    };
    if n == 0 {
        return Ok(None);
    }
    if n != bytes.len() as isize {
        return Err(format!(
            "recvmsg failed or short (n {n}, errno {})",
            errno()
        ));
    }
    let mut fd = None;
    // SAFETY: the kernel filled `control` and `msg_controllen`; CMSG_FIRSTHDR/CMSG_DATA stay
    // inside it, and an SCM_RIGHTS message of ours carries exactly one int.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            fd = Some(std::ptr::read_unaligned(
                libc::CMSG_DATA(cmsg).cast::<i32>(),
            ));
        }
    }
    let mut words = [0i64; N];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        *w = i64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
    }
    Ok(Some((words, fd)))
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// Arms the real-time interval timer to fire every `ms` milliseconds (0: disarms it). It
/// repeats because a first expiry may land before the call has started to wait (the worker
/// was not scheduled in time); the next one then interrupts it.
fn arm(ms: i64) {
    let ms = ms.max(0);
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: ms / 1000,
            tv_usec: (ms % 1000) * 1000,
        },
        it_value: libc::timeval {
            tv_sec: ms / 1000,
            tv_usec: (ms % 1000) * 1000,
        },
    };
    // SAFETY: a valid itimerval; no old value wanted.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
}

/// A running worker, as the driver sees it.
#[derive(Debug)]
pub struct Worker {
    /// Its pid.
    pub pid: i32,
    /// The driver's end of its socket.
    pub sock: RawFd,
}

impl Worker {
    /// Forks a worker serving requests on the file at `path`. Every descriptor of the driver
    /// other than the standard ones is closed in the child, so it holds nothing on the test
    /// file until asked.
    ///
    /// The caller must be single-threaded (the child keeps using the allocator).
    pub fn spawn(paths: [&std::ffi::CStr; 2]) -> Result<Worker, String> {
        let mut pair = [0; 2];
        // SAFETY: `pair` has room for the two descriptors.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(format!("socketpair failed (errno {})", errno()));
        }
        // SAFETY: the driver is single-threaded when it spawns workers (see above).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork failed (errno {})", errno()));
        }
        if pid == 0 {
            let sock = pair[1];
            // SAFETY: closing descriptors this fresh child inherited and does not use; setting
            // its own signal disposition and death signal.
            unsafe {
                libc::syscall(libc::SYS_close_range, 3, sock - 1, 0);
                libc::syscall(libc::SYS_close_range, sock + 1, u32::MAX, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as usize;
                libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
                libc::_exit(serve(sock, paths));
            }
        }
        // SAFETY: closing the child's end in the driver; setting a receive timeout on ours.
        unsafe {
            libc::close(pair[1]);
            let tv = libc::timeval {
                tv_sec: REPLY_TIMEOUT_SECS,
                tv_usec: 0,
            };
            libc::setsockopt(
                pair[0],
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
        }
        Ok(Worker { pid, sock: pair[0] })
    }

    /// Sends a request (with `fd` attached if given) without waiting for the reply.
    pub fn post(&self, req: &Request, fd: Option<RawFd>) -> Result<(), String> {
        send(self.sock, req, fd)
    }

    /// Waits for the reply to a posted request.
    pub fn reply(&self) -> Result<Message<8>, String> {
        match recv::<8>(self.sock)? {
            Some(r) => Ok(r),
            None => Err(format!("worker {} went away", self.pid)),
        }
    }

    /// Sends a request and waits for its reply.
    pub fn call(&self, req: &Request, fd: Option<RawFd>) -> Result<Message<8>, String> {
        self.post(req, fd)?;
        self.reply()
    }

    /// Asks the worker to exit and reaps it (killing it if it has not gone within two
    /// seconds).
    pub fn exit(self) {
        let _ = self.post(&request(REQ_EXIT, 0, 0), None);
        for _ in 0..200 {
            let mut status = 0;
            // SAFETY: polling our own child.
            if unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) } == self.pid {
                // SAFETY: closing our own socket end.
                unsafe { libc::close(self.sock) };
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.kill_and_reap();
    }

    /// Kills the worker and reaps it.
    pub fn kill_and_reap(self) {
        // SAFETY: signalling and reaping our own child; closing our own socket end.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            libc::close(self.sock);
        }
    }
}

/// The worker's loop. Returns the exit status.
fn serve(sock: RawFd, paths: [&std::ffi::CStr; 2]) -> i32 {
    let mut slots: [Option<RawFd>; SLOTS + 1] = [None; SLOTS + 1];
    loop {
        let (req, passed) = match recv::<12>(sock) {
            Ok(Some(m)) => m,
            _ => return 1,
        };
        let slot = (req[1] as usize).min(SLOTS);
        let fd = slots[slot].unwrap_or(-1);
        let mut reply: Reply = [0; 8];
        let mut attach = None;
        let ret: libc::c_long = match req[0] {
            REQ_FCNTL => {
                let mut fl = libc::flock {
                    l_type: req[6] as i16,
                    l_whence: req[7] as i16,
                    l_start: req[8],
                    l_len: req[9],
                    l_pid: req[10] as i32,
                };
                // SAFETY: lseek/alarm take integers; `fl` is a live struct flock of the
                // kernel's 64-bit layout for the whole call.
                let r = unsafe {
                    if req[4] >= 0 {
                        libc::lseek(fd, req[4], libc::SEEK_SET);
                    }
                    arm(req[5]);
                    let r = libc::syscall(libc::SYS_fcntl, fd, req[2] as i32, &mut fl);
                    arm(0);
                    r
                };
                reply[1] = errno() as i64;
                reply[2..7].copy_from_slice(&[
                    fl.l_type as i64,
                    fl.l_whence as i64,
                    fl.l_start,
                    fl.l_len,
                    fl.l_pid as i64,
                ]);
                r
            }
            REQ_FLOCK => {
                arm(req[5]);
                // SAFETY: flock takes integers only.
                let r = unsafe { libc::syscall(libc::SYS_flock, fd, req[2] as i32) };
                arm(0);
                r
            }
            REQ_CLOSE => {
                slots[slot] = None;
                // SAFETY: closing a descriptor this worker owns (or -1: EBADF).
                unsafe { libc::close(fd) as libc::c_long }
            }
            REQ_OPEN => {
                // SAFETY: `path` is a valid C string; the flags are plain integers.
                let path = paths[(req[3] == 1) as usize];
                let r = unsafe { libc::open(path.as_ptr(), req[2] as i32 | libc::O_CLOEXEC) };
                if r >= 0 {
                    slots[slot] = Some(r);
                }
                r as libc::c_long
            }
            REQ_DUP => {
                let from = slots[(req[2] as usize).min(SLOTS)].unwrap_or(-1);
                // SAFETY: dup takes an integer.
                let r = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 0) };
                if r >= 0 {
                    slots[slot] = Some(r);
                }
                r as libc::c_long
            }
            REQ_SEND => {
                attach = slots[slot];
                0
            }
            REQ_RECV => match passed {
                Some(p) => {
                    slots[slot] = Some(p);
                    0
                }
                None => -1,
            },
            // SAFETY: leaving without the parent's exit handlers; the kernel closes everything.
            _ => unsafe { libc::_exit(0) },
        };
        reply[0] = ret;
        if ret >= 0 {
            reply[1] = 0;
        } else if req[0] != REQ_FCNTL {
            reply[1] = errno() as i64;
        }
        if send(sock, &reply, attach).is_err() {
            return 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_and_its_attached_descriptor_cross_a_socket_pair() {
        let (mut pair, mut pipe) = ([0; 2], [0; 2]);
        // SAFETY: both arrays have room for the two descriptors the calls write.
        unsafe {
            assert_eq!(
                libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, pair.as_mut_ptr()),
                0
            );
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
        }
        let words: Reply = [1, -2, 3, i64::MAX, i64::MIN, 0, 7, 8];
        send(pair[0], &words, Some(pipe[1])).unwrap();
        send(pair[0], &words, None).unwrap();
        let (got, fd) = recv::<8>(pair[1]).unwrap().unwrap();
        assert_eq!(got, words);
        let fd = fd.expect("a descriptor came with the first message");
        let mut byte = [0u8];
        // SAFETY: writing one byte through the received copy of the pipe's write end and
        // reading it from the read end; closing descriptors this test owns.
        unsafe {
            assert_eq!(libc::write(fd, b"x".as_ptr().cast(), 1), 1);
            assert_eq!(libc::read(pipe[0], byte.as_mut_ptr().cast(), 1), 1);
        }
        assert_eq!(&byte, b"x");
        assert_eq!(recv::<8>(pair[1]).unwrap().unwrap(), (words, None));
        // SAFETY: closing descriptors this test owns.
        unsafe {
            for d in [fd, pipe[0], pipe[1], pair[0]] {
                libc::close(d);
            }
        }
        assert_eq!(
            recv::<8>(pair[1]).unwrap(),
            None,
            "end of file once the peer is gone"
        );
        // SAFETY: as above.
        unsafe { libc::close(pair[1]) };
    }
}
