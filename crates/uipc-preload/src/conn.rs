//! The calling thread's calls to the daemon, usable from a signal handler.
//!
//! [`call_with`] takes one of the thread's connection slots ([`crate::slots`]: slot 0 for the
//! thread's own calls, another for a signal handler that interrupted one, a one-off deeper
//! or in a vforked child), encodes the request into the slot's buffer with the caller's
//! encoder, sends it, reads the reply into the same buffer and hands the caller a borrowed
//! view of it. Nothing on this path allocates or takes a lock: connections are opened with
//! socket/connect system calls ([`client::connect_raw`], [`client::hello`]), frames built with
//! uipc-proto's fixed-buffer forms, and `$UIPC_SOCKET` is read and the thread-exit key made
//! in the library's constructor ([`prepare`]), not in a first call that might come from a
//! handler. A handler's call never touches the socket of the exchange it interrupted, which
//! goes on when the handler returns (a wait that was interruptible sees EINTR and cancels,
//! as Linux's semop would).
//!
//! Fork: a child must not talk on its parent's connections (the daemon would mix the two
//! processes' replies). A `pthread_atfork` child handler bumps [`GENERATION`](crate::slots::GENERATION) (an atomic add,
//! safe right after fork); a slot's connection made under an older generation is closed
//! without a word (if its descriptor number still names the socket) and replaced. Exec: the
//! first connection after the library is loaded tells the daemon it is a new program image
//! ([`Request::Hello`]); a vforked child's never does ([`crate::vfork`]).
//!
//! A new session's Hello is not waited for: the call that opens it sends its frame right
//! behind (when the frame is small), then reads the Hello's reply and its own, so a
//! thread's or process's first call is one exchange. A lock call's Hello asks for the lock
//! area its fast path needs ([`Asking`]), which comes with the Hello's reply.
//!
//! Lock order: none; nothing here takes a lock.

use crate::guard::guarded;
use crate::slots::{sys_close, Lease, GENERATION, SLOTS};
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use uipc::Errno;
use uipc_proto::client::{self, Greeting, WaitMode};
use uipc_proto::codec::Writer;
use uipc_proto::transport::send_frame;
use uipc_proto::{HelloArea, Request, Response, ResponseView};

/// No connection made yet by this program image.
static NEW_IMAGE: AtomicBool = AtomicBool::new(true);

/// Room for a request's own fields beside the data it carries (the largest without data,
/// semctl's IPC_SET, takes under 40 bytes).
const FRAME_ROOM: usize = 256;

/// One call to the daemon. `encode` writes the request into a writer over a fixed buffer,
/// with `scratch` bytes beside it for copying the caller's data first, and says how the reply
/// is awaited; `decode` reads the reply (borrowed from the buffer) and the descriptor sent with
/// it. `pass` travels with the request (SCM_RIGHTS); if it is not an open descriptor the call
/// fails with EBADF and the daemon hears nothing.
///
/// `encode` and `decode` run with cancellation held off and panics caught; the exchange in
/// between runs with the caller's cancelability (see `crate::guard::guard_blocking`). A daemon that
/// cannot be reached, or that drops the connection, gives [`DAEMON_GONE`].
pub fn call_with<T>(
    scratch: usize,
    pass: Option<RawFd>,
    encode: impl FnMut(&mut Writer<'_>, &mut [u8]) -> Result<WaitMode, Errno>,
    decode: impl FnOnce(ResponseView<'_>, Option<OwnedFd>) -> Result<T, Errno>,
) -> Result<T, Errno> {
    call_asking(Asking::NONE, scratch, pass, encode, decode)
}

/// What a call's Hello asks for, if the call opens its session: a lock area, and where its
/// grant goes (the lock module's; this module knows neither).
#[derive(Clone, Copy)]
pub struct Asking {
    /// The area.
    pub area: HelloArea,
    /// Takes the Hello's reply.
    pub greeted: fn(HelloArea, Greeting),
}

impl Asking {
    /// No area.
    pub const NONE: Asking = Asking {
        area: HelloArea::None,
        greeted: |_, _| {},
    };
}

/// The largest frame sent behind a Hello before its reply (the daemon's bound on a frame
/// that comes before its Hello is answered, less the Hello).
const BEHIND_HELLO: usize = 48;

/// [`call_with`]; if the call opens the thread's session, the call's frame goes right behind
/// the Hello (when it is small), which asks for `asking`'s lock area, and both replies are
/// read in order: the greeting goes to `asking.greeted` before `decode` runs.
fn call_asking<T>(
    asking: Asking,
    scratch: usize,
    pass: Option<RawFd>,
    mut encode: impl FnMut(&mut Writer<'_>, &mut [u8]) -> Result<WaitMode, Errno>,
    decode: impl FnOnce(ResponseView<'_>, Option<OwnedFd>) -> Result<T, Errno>,
) -> Result<T, Errno> {
    // First: in a child the atfork handler did not see, this adopts the memory and bumps the
    // generation, which must be read after.
    let vforked = crate::vfork::on_borrowed_memory();
    let generation = GENERATION.load(Ordering::SeqCst);
    SLOTS.with(|slots| {
        let mut lease = if vforked {
            Lease::vforked()
        } else {
            Lease::take(slots)
        };
        let mut room = scratch.saturating_mul(2).saturating_add(FRAME_ROOM);
        let (mut space, frame_len, mode) = loop {
            let mut space = lease.space(room)?;
            let bytes = space.bytes();
            let (frame, scratch_area) = bytes.split_at_mut(bytes.len() - scratch);
            let mut w = Writer::fixed(frame);
            let mode = guarded(|| encode(&mut w, scratch_area))?;
            match w.written() {
                Ok(n) => break (space, n, mode),
                Err(short) if short.needed + scratch > room => room = short.needed + scratch,
                Err(_) => return Err(Errno::from_raw(libc::EIO)),
            }
        };
        let slot = space.slot();
        // Behind a Hello: a small frame, not in a vforked child (whose sessions are
        // one-offs and whose memory is its parent's, so it asks for no area either).
        let behind = !vforked && frame_len <= BEHIND_HELLO;
        let area = if behind { asking.area } else { HelloArea::None };
        let mut greeting = None;
        let fd = guarded(|| {
            space.connection(generation, |may_announce| {
                if !behind {
                    return open_session(may_announce);
                }
                let (fd, new_image) = open_unanswered(may_announce, area)?;
                greeting = Some(new_image);
                Ok(fd)
            })
        })?;
        let sent = send_frame(fd, &space.bytes()[..frame_len], true, pass);
        if let Some(new_image) = greeting {
            // The Hello's reply comes first; a daemon that refused it closed the session.
            match client::read_greeting(fd, area) {
                Ok(g) => (asking.greeted)(area, g),
                Err(_) => {
                    slot.drop_connection();
                    return Err(not_reached(new_image));
                }
            }
        }
        let reply = match sent {
            // Nothing was sent: the descriptor to pass is not open (the kernel looks it up
            // before taking any byte).
            Err(e)
                if e.raw_os_error() == Some(libc::EBADF) && pass.is_some_and(|p| !is_open(p)) =>
            {
                return Err(Errno::EBADF)
            }
            sent => sent
                .and_then(|()| client::await_reply_on(fd, mode, &mut space, slot.timeout_lifted())),
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => return Err(Errno::ENOMEM),
            Err(_) => {
                slot.drop_connection();
                return Err(daemon_gone());
            }
        };
        match ResponseView::decode(&space.bytes()[..reply.len]) {
            Ok(view) => guarded(|| decode(view, reply.fd)),
            Err(_) => {
                slot.drop_connection();
                Err(daemon_gone())
            }
        }
    })
}

/// Whether `fd` is open (the kernel's answer, not a possibly wrapped fcntl).
pub fn is_open(fd: RawFd) -> bool {
    crate::kernel::kernel_sys!(libc::SYS_fcntl, fd, libc::F_GETFD) >= 0
}

/// Sends `req` and returns the daemon's response and descriptor.
pub fn call(req: &Request) -> Result<(Response, Option<OwnedFd>), Errno> {
    call_passing(req, None, false)
}

/// [`call`], sending descriptor `pass` with the request; with `restartable`, a wait follows
/// the interrupting handler's SA_RESTART (file-lock calls).
pub fn call_passing(
    req: &Request,
    pass: Option<RawFd>,
    restartable: bool,
) -> Result<(Response, Option<OwnedFd>), Errno> {
    call_passing_asking(Asking::NONE, req, pass, restartable)
}

/// [`call_passing`], whose Hello, if the call opens the thread's session, asks for what
/// `asking` says (a lock call: the area its fast path needs).
pub fn call_passing_asking(
    asking: Asking,
    req: &Request,
    pass: Option<RawFd>,
    restartable: bool,
) -> Result<(Response, Option<OwnedFd>), Errno> {
    let mode = WaitMode::of(req.may_block(), restartable);
    call_asking(
        asking,
        0,
        pass,
        |w, _| {
            req.encode_into(w);
            Ok(mode)
        },
        |view, fd| Ok((view.into_owned(), fd)),
    )
}

/// `$UIPC_SOCKET` as bytes for a `sockaddr_un` (an empty one if it does not fit: connecting
/// then fails, and every call is ENOSYS).
struct SocketPath {
    bytes: [u8; 108],
    len: usize,
}

/// `$UIPC_SOCKET` as this program image started with it (read once, by the constructor):
/// without it the library passes calls to the kernel.
fn socket_path() -> Option<&'static SocketPath> {
    static PATH: OnceLock<Option<SocketPath>> = OnceLock::new();
    PATH.get_or_init(|| {
        let value = std::env::var_os("UIPC_SOCKET").filter(|s| !s.is_empty())?;
        let value = value.as_encoded_bytes();
        let mut path = SocketPath {
            bytes: [0; 108],
            len: 0,
        };
        if value.len() < path.bytes.len() {
            path.bytes[..value.len()].copy_from_slice(value);
            path.len = value.len();
        }
        Some(path)
    })
    .as_ref()
}

/// Whether calls go to the daemon.
pub fn enabled() -> bool {
    socket_path().is_some()
}

/// A new connection to the daemon, hello said (announcing a new program image if this is the
/// image's first and `may_announce`). [`DAEMON_GONE`] if the daemon cannot be reached.
pub fn open_session(may_announce: bool) -> Result<RawFd, Errno> {
    let (fd, new_image) = connect(may_announce)?;
    if client::hello(fd, new_image).is_err() {
        sys_close(fd);
        return Err(not_reached(new_image));
    }
    Ok(fd)
}

/// A new connection to the daemon whose Hello, asking for lock area `area`, is sent but not
/// answered yet ([`client::read_greeting`] reads the answer); whether the Hello announced a
/// new program image.
fn open_unanswered(may_announce: bool, area: HelloArea) -> Result<(RawFd, bool), Errno> {
    let (fd, new_image) = connect(may_announce)?;
    if client::send_hello(fd, new_image, area).is_err() {
        sys_close(fd);
        return Err(not_reached(new_image));
    }
    Ok((fd, new_image))
}

/// A new connection to the daemon (with room for its descriptor at the soft descriptor
/// limit, `crate::fdroom`; never on descriptor 0, 1 or 2), and whether its Hello is to
/// announce a new program image.
fn connect(may_announce: bool) -> Result<(RawFd, bool), Errno> {
    let path = socket_path().ok_or(Errno::ENOSYS)?;
    let new_image = may_announce && NEW_IMAGE.swap(false, Ordering::SeqCst);
    let emfile = |r: &std::io::Result<OwnedFd>| {
        r.as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EMFILE))
    };
    match crate::fdroom::with_room(|| client::connect_raw(&path.bytes[..path.len]), emfile) {
        Ok(sock) => Ok((crate::fdroom::out_of_the_way(sock.into_raw_fd()), new_image)),
        // Out of descriptors even with the room the hard limit allows: said as such, not as
        // a daemon that does not answer.
        Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
            if new_image {
                NEW_IMAGE.store(true, Ordering::SeqCst);
            }
            Err(Errno::from_raw(libc::EMFILE))
        }
        Err(_) => Err(not_reached(new_image)),
    }
}

/// Whether the calling thread's next call goes over a session this process opened already
/// (else it opens one, whose Hello may bring a lock area along).
pub fn has_session() -> bool {
    let generation = GENERATION.load(Ordering::SeqCst);
    SLOTS.with(|slots| Lease::take(slots).has_session(generation))
}

fn not_reached(new_image: bool) -> Errno {
    if new_image {
        NEW_IMAGE.store(true, Ordering::SeqCst);
    }
    daemon_gone()
}

/// The errno of a call the daemon does not answer (it died, or refuses this process): never
/// one of the SysV calls' own, so no program takes it for an answer about its objects, and
/// `perror` names what happened. The first such call of the process says so on stderr.
pub const DAEMON_GONE: Errno = Errno::from_raw(libc::ECONNREFUSED);

/// [`DAEMON_GONE`], after one line on stderr the first time in this process (a plain write
/// from a stack buffer: safe in a signal handler).
fn daemon_gone() -> Errno {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::SeqCst) {
        let mut line = [0u8; 256];
        let mut len = 0;
        let path = socket_path().map_or(&[][..], |p| &p.bytes[..p.len]);
        for part in [
            &b"uipc: the daemon at "[..],
            path,
            &b" does not answer (gone, or refusing this process): SysV IPC calls fail with ECONNREFUSED\n"[..],
        ] {
            let n = part.len().min(line.len() - len);
            line[len..len + n].copy_from_slice(&part[..n]);
            len += n;
        }
        // SAFETY: writes `len` initialised bytes of a live stack buffer to stderr.
        unsafe { libc::write(2, line.as_ptr().cast(), len) };
    }
    DAEMON_GONE
}

/// The constructor's part: reads `$UIPC_SOCKET` and makes the thread-exit key.
pub fn prepare() {
    if enabled() {
        crate::slots::exit_key();
    }
}

/// Maps an errno response to `Err`, anything else to `Ok`.
pub fn check(resp: Response) -> Result<Response, Errno> {
    match resp {
        Response::Error(e) => Err(Errno::from_raw(e)),
        r => Ok(r),
    }
}

/// The return value of a call answered with `Ret`.
pub fn ret_of(req: Request) -> Result<i64, Errno> {
    ret_value(call(&req)?.0)
}

/// The return value in a `Ret` response (or its errno).
pub fn ret_value(resp: Response) -> Result<i64, Errno> {
    match check(resp)? {
        Response::Ret(v) => Ok(v),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}

/// [`ret_value`] of a borrowed response.
pub fn ret_view(view: ResponseView<'_>) -> Result<i64, Errno> {
    match view {
        ResponseView::Other(resp) => ret_value(resp),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}
