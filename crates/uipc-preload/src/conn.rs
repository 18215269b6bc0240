//! The calling thread's sessions with the daemon, usable from a signal handler.
//!
//! Slots: each thread keeps up to [`CACHED_SLOTS`] connections in a thread-local, each with a
//! `busy` flag (the thread's "in the library" marker). A call takes the first slot that is not
//! busy: slot 0 for the thread's own calls, slot 1 for a call from a signal handler that
//! interrupted one on slot 0. If every slot is busy (a handler interrupted a handler inside
//! the library), the call opens a one-off connection and closes it at its end. So a handler
//! never touches the socket of the exchange it interrupted, and that exchange goes on when the
//! handler returns (a wait that was interruptible sees EINTR and cancels, as Linux's semop
//! would). Taking and releasing a slot are single stores with compiler fences around them:
//! a handler that interrupts in between finds the slot's state consistent and leaves it as it
//! found it.
//!
//! No allocation and no lock on this path: the thread-local is const-initialised and has no
//! destructor (plain values in `Cell`s), so reaching it registers nothing. Connections are
//! opened with socket/connect system calls ([`client::connect_raw`]), requests encoded into
//! the slot's buffer (an anonymous mapping of [`SLOT_BUF`] bytes made at the slot's first
//! use), and replies read into it; a frame or reply larger than that gets a mapping of its own
//! for the call. `$UIPC_SOCKET` is read and the thread-exit key made in the library's
//! constructor ([`prepare`]), not in a first call that might come from a handler.
//!
//! Thread exit: the first connection a thread caches sets a pthread key (made in the
//! constructor, so its number is small: glibc stores keys below 32 in the thread's descriptor
//! without allocating) whose destructor closes the thread's sockets and unmaps its buffers.
//!
//! Fork: a child must not talk on its parent's connections (the daemon would mix the two
//! processes' replies). A `pthread_atfork` child handler bumps [`GENERATION`] (an atomic add,
//! safe right after fork); a connection made under an older generation is closed without a
//! word (if its descriptor number still names the socket) and replaced. Exec: the first
//! connection after the library is loaded tells the daemon it is a new program image
//! ([`Request::Hello`]). A vforked child, which runs on its parent's memory (its thread-local
//! slots are its parent's thread's), talks on a one-off connection for each call and never
//! announces a new image ([`crate::vfork`]).
//!
//! Before each call the descriptor is checked to still be the socket (same inode): a program
//! may close descriptors it does not know about, and the number may then name its own file.
//!
//! Lock order: none; nothing here takes a lock.

use crate::guarded;
use crate::mapbuf::{self, MapBuf};
use std::cell::Cell;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use uipc::Errno;
use uipc_proto::client::{self, inode_of, ReplySpace, WaitMode};
use uipc_proto::codec::Writer;
use uipc_proto::transport::send_frame;
use uipc_proto::{Request, Response, ResponseView};

/// Bumped in every forked child.
pub static GENERATION: AtomicU64 = AtomicU64::new(0);
/// No connection made yet by this program image.
static NEW_IMAGE: AtomicBool = AtomicBool::new(true);

/// Connections a thread keeps: its own calls', and one level of signal handler.
const CACHED_SLOTS: usize = 2;
/// Each slot's buffer: requests and replies up to this size need no mapping of their own.
const SLOT_BUF: usize = 64 << 10;
/// Room for a request's own fields beside the data it carries (the largest without data,
/// semctl's IPC_SET, takes under 40 bytes).
const FRAME_ROOM: usize = 256;

/// One connection and its buffer. Used only by the thread that owns it, while `busy`.
struct Slot {
    fd: Cell<RawFd>,
    inode: Cell<u64>,
    generation: Cell<u64>,
    busy: Cell<bool>,
    buf: Cell<*mut u8>,
}

impl Slot {
    const fn empty() -> Slot {
        Slot {
            fd: Cell::new(-1),
            inode: Cell::new(0),
            generation: Cell::new(0),
            busy: Cell::new(false),
            buf: Cell::new(std::ptr::null_mut()),
        }
    }

    /// Closes the connection if its descriptor still names the socket (a program that
    /// closed it may have reused the number: then it is only forgotten).
    fn drop_connection(&self) {
        let fd = self.fd.replace(-1);
        if fd >= 0 && inode_of(fd) == Some(self.inode.get()) {
            sys_close(fd);
        }
    }

    fn free_buffer(&self) {
        let p = self.buf.replace(std::ptr::null_mut());
        if !p.is_null() {
            // SAFETY: the slot's own mapping of SLOT_BUF bytes, no longer referred to.
            unsafe { mapbuf::unmap(p, SLOT_BUF) };
        }
    }

    /// The slot's buffer, mapped at its first use.
    #[allow(clippy::mut_from_ref)] // exclusive: only the call holding the slot reaches it
    fn buffer(&self) -> Result<&mut [u8], Errno> {
        if self.buf.get().is_null() {
            self.buf.set(mapbuf::map(SLOT_BUF)?);
        }
        // SAFETY: a mapping of SLOT_BUF bytes that lives until thread exit (or the one-off
        // slot's end); only the call that holds the slot (busy) uses it.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.buf.get(), SLOT_BUF) })
    }

    /// The slot's socket, connected (and hello said) if it had none or one from before a
    /// fork. Only with `may_announce` can the hello say that the image is new.
    fn connection(&self, generation: u64, may_announce: bool) -> Result<RawFd, Errno> {
        let fd = self.fd.get();
        if fd >= 0 {
            if self.generation.get() == generation && inode_of(fd) == Some(self.inode.get()) {
                return Ok(fd);
            }
            self.drop_connection();
        }
        let path = socket_path().ok_or(Errno::ENOSYS)?;
        let new_image = may_announce && NEW_IMAGE.swap(false, Ordering::SeqCst);
        let fd = match client::connect_raw(&path.bytes[..path.len]) {
            Ok(sock) => sock.into_raw_fd(),
            Err(_) => return Err(not_reached(new_image)),
        };
        if client::hello(fd, new_image).is_err() {
            sys_close(fd);
            return Err(not_reached(new_image));
        }
        self.fd.set(fd);
        self.inode.set(inode_of(fd).unwrap_or(0));
        self.generation.set(generation);
        Ok(fd)
    }
}

fn not_reached(new_image: bool) -> Errno {
    if new_image {
        NEW_IMAGE.store(true, Ordering::SeqCst);
    }
    Errno::ENOSYS
}

/// close(2) straight to the kernel: not through the C library's `close` nor `syscall`, which
/// this library wraps (for file locks, and a close there may ask the daemon).
fn sys_close(fd: RawFd) {
    crate::kernel::kernel_sys!(libc::SYS_close, fd);
}

/// A descriptor the library owns, closed by number when dropped (see [`sys_close`]).
pub struct ClosedQuietly(pub RawFd);

impl Drop for ClosedQuietly {
    fn drop(&mut self) {
        sys_close(self.0);
    }
}

thread_local! {
    static SLOTS: [Slot; CACHED_SLOTS] = const { [Slot::empty(), Slot::empty()] };
    static EXIT_HOOKED: Cell<bool> = const { Cell::new(false) };
}

/// A slot held for one call: one of the thread's, or a one-off (for a call nested in
/// handlers deeper than the thread's slots, or from a vforked child).
enum Lease<'t> {
    Cached(&'t Slot),
    OneOff(Slot),
    Vforked(Slot),
}

impl<'t> Lease<'t> {
    fn take(slots: &'t [Slot]) -> Lease<'t> {
        for slot in slots {
            if !slot.busy.get() {
                slot.busy.set(true);
                compiler_fence(Ordering::SeqCst);
                return Lease::Cached(slot);
            }
        }
        Lease::OneOff(Slot::empty())
    }

    fn slot(&self) -> &Slot {
        match self {
            Lease::Cached(slot) => slot,
            Lease::OneOff(slot) | Lease::Vforked(slot) => slot,
        }
    }

    fn connection(&self, generation: u64) -> Result<RawFd, Errno> {
        // A vforked child leaves the image's hello to its parent.
        let may_announce = !matches!(self, Lease::Vforked(_));
        let fd = self.slot().connection(generation, may_announce)?;
        if let Lease::Cached(_) = self {
            hook_thread_exit();
        }
        Ok(fd)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        match self {
            Lease::Cached(slot) => {
                compiler_fence(Ordering::SeqCst);
                slot.busy.set(false);
            }
            Lease::OneOff(slot) | Lease::Vforked(slot) => {
                slot.drop_connection();
                slot.free_buffer();
            }
        }
    }
}

/// A call's buffer: the slot's, or a mapping of the call's own when more room is needed.
struct Space<'s> {
    slot_buf: &'s mut [u8],
    own: Option<MapBuf>,
}

impl<'s> Space<'s> {
    fn with_room(slot: &'s Slot, len: usize) -> Result<Space<'s>, Errno> {
        let slot_buf = slot.buffer()?;
        let own = (len > slot_buf.len())
            .then(|| MapBuf::new(len))
            .transpose()?;
        Ok(Space { slot_buf, own })
    }

    fn bytes(&mut self) -> &mut [u8] {
        match &mut self.own {
            Some(own) => own.as_mut_slice(),
            None => self.slot_buf,
        }
    }
}

impl ReplySpace for Space<'_> {
    fn space(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > self.bytes().len() {
            self.own = Some(MapBuf::new(len).ok()?);
        }
        self.bytes().get_mut(..len)
    }
}

/// One call to the daemon. `encode` writes the request into a writer over a fixed buffer,
/// with `scratch` bytes beside it for copying the caller's data first, and says how the reply
/// is awaited; `decode` reads the reply (borrowed from the buffer) and the descriptor sent with
/// it. `pass` travels with the request (SCM_RIGHTS).
///
/// `encode` and `decode` run with cancellation held off and panics caught; the exchange in
/// between runs with the caller's cancelability (see `crate::guard_blocking`). A daemon that
/// cannot be reached, or that drops the connection, gives ENOSYS (as a kernel without SysV
/// IPC).
pub fn call_with<T>(
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
        let lease = if vforked {
            Lease::Vforked(Slot::empty())
        } else {
            Lease::take(slots)
        };
        let slot = lease.slot();
        let mut room = scratch.saturating_mul(2).saturating_add(FRAME_ROOM);
        let (mut space, frame_len, mode) = loop {
            let mut space = Space::with_room(slot, room)?;
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
        let fd = guarded(|| lease.connection(generation))?;
        let reply = send_frame(fd, &space.bytes()[..frame_len], true, pass)
            .and_then(|()| client::await_reply(fd, mode, &mut space));
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => return Err(Errno::ENOMEM),
            Err(_) => {
                slot.drop_connection();
                return Err(Errno::ENOSYS);
            }
        };
        match ResponseView::decode(&space.bytes()[..reply.len]) {
            Ok(view) => guarded(|| decode(view, reply.fd)),
            Err(_) => {
                slot.drop_connection();
                Err(Errno::ENOSYS)
            }
        }
    })
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
    let mode = WaitMode::of(req.may_block(), restartable);
    call_with(
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

const NO_KEY: usize = usize::MAX;
/// The pthread key whose destructor closes a thread's connections.
static EXIT_KEY: AtomicUsize = AtomicUsize::new(NO_KEY);

fn exit_key() -> Option<libc::pthread_key_t> {
    let key = EXIT_KEY.load(Ordering::Acquire);
    if key != NO_KEY {
        return Some(key as libc::pthread_key_t);
    }
    let mut new = 0;
    // SAFETY: creates a key whose destructor is `thread_exit`.
    if unsafe { libc::pthread_key_create(&mut new, Some(thread_exit)) } != 0 {
        return None;
    }
    match EXIT_KEY.compare_exchange(NO_KEY, new as usize, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(new),
        Err(other) => {
            // SAFETY: deletes the key made just above, which no thread has set.
            unsafe { libc::pthread_key_delete(new) };
            Some(other as libc::pthread_key_t)
        }
    }
}

/// Makes sure this thread's connections are closed when it exits.
fn hook_thread_exit() {
    EXIT_HOOKED.with(|hooked| {
        if hooked.get() {
            return;
        }
        if let Some(key) = exit_key() {
            // SAFETY: sets this thread's value of our key (any non-null value).
            if unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<u8>().cast()) } == 0 {
                hooked.set(true);
            }
        }
    });
}

/// The key's destructor: closes the exiting thread's connections and frees its buffers (a
/// slot still busy, left by a handler that never returned into the library, is left alone).
extern "C" fn thread_exit(_: *mut libc::c_void) {
    EXIT_HOOKED.with(|hooked| hooked.set(false));
    SLOTS.with(|slots| {
        for slot in slots.iter().filter(|s| !s.busy.get()) {
            slot.drop_connection();
            slot.free_buffer();
        }
    });
}

/// The constructor's part: reads `$UIPC_SOCKET` and makes the thread-exit key.
pub fn prepare() {
    if enabled() {
        exit_key();
    }
}

/// The child side of fork, run by `pthread_atfork`.
pub extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn which(lease: &Lease<'_>, slots: &[Slot]) -> Option<usize> {
        match lease {
            Lease::Cached(s) => slots.iter().position(|x| std::ptr::eq(x, *s)),
            Lease::OneOff(_) | Lease::Vforked(_) => None,
        }
    }

    #[test]
    fn a_busy_slot_sends_a_nested_call_to_the_next_slot_and_deeper_ones_to_one_offs() {
        SLOTS.with(|slots| {
            let outer = Lease::take(slots);
            assert_eq!(which(&outer, slots), Some(0));
            let handler = Lease::take(slots);
            assert_eq!(which(&handler, slots), Some(1));
            let nested = Lease::take(slots);
            assert_eq!(which(&nested, slots), None);
            drop(nested);
            drop(handler);
            let again = Lease::take(slots);
            assert_eq!(which(&again, slots), Some(1), "slot 0 is still busy");
            drop(again);
            drop(outer);
            assert!(slots.iter().all(|s| !s.busy.get()));
            assert_eq!(which(&Lease::take(slots), slots), Some(0));
        });
    }

    #[test]
    fn a_reply_larger_than_the_slot_buffer_gets_a_mapping_of_its_own() {
        let slot = Slot::empty();
        let mut space = Space::with_room(&slot, 100).unwrap();
        assert_eq!(space.bytes().len(), SLOT_BUF);
        assert_eq!(space.space(10).map(|b| b.len()), Some(10));
        assert!(space.own.is_none());
        let big = space.space(SLOT_BUF + 1).unwrap();
        big[SLOT_BUF] = 1;
        assert_eq!(space.bytes().len(), SLOT_BUF + 1);
        assert_eq!(space.bytes()[SLOT_BUF], 1);
        drop(space);
        let room = Space::with_room(&slot, 3 * SLOT_BUF).unwrap();
        assert!(room.own.is_some());
        drop(room);
        slot.free_buffer();
        assert!(slot.buf.get().is_null());
    }
}
