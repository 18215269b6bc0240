//! Each thread's connections to the daemon and their buffers, kept so that a signal handler
//! can use them: the storage behind [`crate::conn`].
//!
//! Slots: each thread keeps up to [`CACHED_SLOTS`] connections in a thread-local, each with a
//! `busy` flag (the thread's "in the library" marker). A call takes the first slot that is not
//! busy ([`Lease::take`]): slot 0 for the thread's own calls, slot 1 for a call from a signal
//! handler that interrupted one on slot 0. If every slot is busy (a handler interrupted a
//! handler inside the library), the call gets a one-off slot whose connection is closed at its
//! end; so does every call of a vforked child, which runs on its parent's memory (its
//! thread-locals are its parent's thread's) and must leave them alone. So a handler never
//! touches the socket of the exchange it interrupted, and that exchange goes on when the
//! handler returns. Taking and releasing a slot are single stores with compiler fences around
//! them: a handler that interrupts in between finds the slot's state consistent and leaves it
//! as it found it.
//!
//! No allocation and no lock: the thread-local is const-initialised and has no destructor
//! (plain values in `Cell`s), so reaching it registers nothing; a slot's buffer is an
//! anonymous mapping of [`SLOT_BUF`] bytes made at its first use ([`Space`] adds a mapping
//! of the call's own when a frame or reply is larger).
//!
//! Thread exit: the first connection a thread caches sets a pthread key (made in the
//! library's constructor, so its number is small: glibc stores keys below 32 in the thread's
//! descriptor without allocating) whose destructor closes the thread's sockets and unmaps its
//! buffers.
//!
//! A program may close descriptors it does not know about, and the number may then name its
//! own file; a slot whose descriptor no longer names its socket (another inode) forgets the
//! number and connects again. The check (an fstat) is made only when a descriptor may have
//! been closed or replaced since the slot last checked: the library's close, dup2, dup3,
//! fclose, close_range, closefrom and `syscall()` with those numbers bump [`CLOSES`] before
//! they act, and a slot remembers the count it last checked at. (A descriptor closed by a
//! system call the program issues with its own instructions is not seen: listed in the crate
//! doc's limits.) A connection made before a
//! fork (an older [`GENERATION`]) is closed without a word and replaced.

use crate::mapbuf::{self, MapBuf};
use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::atomic::{compiler_fence, AtomicU64, AtomicUsize, Ordering};
use uipc::Errno;
use uipc_proto::client::{inode_of, ReplySpace};

/// Bumped in every forked child and after a change of IPC namespace: a connection made
/// under an older generation is closed without a word and replaced.
pub static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The child side of fork, run by `pthread_atfork`.
pub extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Calls that may have closed or replaced a descriptor, counted (see the module doc).
static CLOSES: AtomicU64 = AtomicU64::new(0);

/// Says that a descriptor may be closed or replaced now: the next call of every slot checks
/// its socket again. Called before the close happens.
pub fn descriptors_may_change() {
    CLOSES.fetch_add(1, Ordering::SeqCst);
}

/// How many close-family calls were counted: a descriptor the library opened is still its own
/// while this has not moved.
pub fn closes() -> u64 {
    CLOSES.load(Ordering::SeqCst)
}

/// Connections a thread keeps: its own calls', and one level of signal handler.
pub const CACHED_SLOTS: usize = 2;
/// Each slot's buffer: requests and replies up to this size need no mapping of their own.
pub const SLOT_BUF: usize = 64 << 10;

/// One connection and its buffer. Used only by the thread that owns it, while `busy`.
pub struct Slot {
    fd: Cell<RawFd>,
    inode: Cell<u64>,
    generation: Cell<u64>,
    /// [`CLOSES`] when the descriptor was last checked.
    checked_at: Cell<u64>,
    busy: Cell<bool>,
    buf: Cell<*mut u8>,
    /// The socket's receive timeout is lifted (see `client::await_reply_on`).
    timeout_lifted: Cell<bool>,
}

impl Slot {
    /// A slot with no connection and no buffer yet.
    pub const fn empty() -> Slot {
        Slot {
            fd: Cell::new(-1),
            inode: Cell::new(0),
            generation: Cell::new(0),
            checked_at: Cell::new(0),
            busy: Cell::new(false),
            buf: Cell::new(std::ptr::null_mut()),
            timeout_lifted: Cell::new(false),
        }
    }

    /// Whether the socket's receive timeout is lifted now (kept with the connection).
    pub fn timeout_lifted(&self) -> &Cell<bool> {
        &self.timeout_lifted
    }

    /// Whether the slot holds a connection made in this process (`generation`).
    fn has_session(&self, generation: u64) -> bool {
        self.fd.get() >= 0 && self.generation.get() == generation
    }

    /// Closes the connection if its descriptor still names the socket (a program that
    /// closed it may have reused the number: then it is only forgotten).
    pub fn drop_connection(&self) {
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
    ///
    /// # Safety
    /// No other reference to the buffer may live while the result does: the caller holds the
    /// slot's [`Lease`] and its `BufferClaim` borrowed mutably ([`Lease::space`], the only
    /// caller).
    #[allow(clippy::mut_from_ref)] // exclusive by the contract above
    unsafe fn buffer(&self) -> Result<&mut [u8], Errno> {
        if self.buf.get().is_null() {
            self.buf.set(mapbuf::map(SLOT_BUF)?);
        }
        // SAFETY: a mapping of SLOT_BUF bytes that lives until thread exit (or the one-off
        // slot's end); the caller's contract makes this the only reference to it.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.buf.get(), SLOT_BUF) })
    }

    /// The slot's socket, connected by `open` (which says hello) if it had none or one from before a
    /// fork. Only with `may_announce` can the hello say that the image is new.
    fn connection(
        &self,
        generation: u64,
        may_announce: bool,
        open: impl FnOnce(bool) -> Result<RawFd, Errno>,
    ) -> Result<RawFd, Errno> {
        let fd = self.fd.get();
        // Read before any check, so that a close counted after it is seen next time.
        let closes = CLOSES.load(Ordering::SeqCst);
        if fd >= 0 {
            if self.generation.get() == generation
                && (self.checked_at.get() == closes || inode_of(fd) == Some(self.inode.get()))
            {
                self.checked_at.set(closes);
                return Ok(fd);
            }
            self.drop_connection();
        }
        let fd = open(may_announce)?;
        self.fd.set(fd);
        self.timeout_lifted.set(false);
        self.inode.set(inode_of(fd).unwrap_or(0));
        self.generation.set(generation);
        self.checked_at.set(closes);
        Ok(fd)
    }
}

/// close(2) straight to the kernel: not through the C library's `close` nor `syscall`, which
/// this library wraps (for file locks, and a close there may ask the daemon).
pub fn sys_close(fd: RawFd) {
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
    /// This thread's slots.
    pub static SLOTS: [Slot; CACHED_SLOTS] = const { [Slot::empty(), Slot::empty()] };
    static EXIT_HOOKED: Cell<bool> = const { Cell::new(false) };
}

/// A slot held for one call: one of the thread's, or a one-off (for a call nested in
/// handlers deeper than the thread's slots, or from a vforked child). Only [`Lease::take`]
/// and [`Lease::vforked`] make one, so a lease is the one holder of its slot: a cached slot
/// is marked busy (no other lease takes it until this one drops), a one-off belongs to it.
pub struct Lease<'t> {
    held: Held<'t>,
    claim: BufferClaim,
}

enum Held<'t> {
    Cached(&'t Slot),
    OneOff(Slot),
    Vforked(Slot),
}

/// The right to use a lease's slot buffer: one per lease, neither `Clone` nor constructible
/// outside this module. [`Lease::space`] borrows it mutably, so one [`Space`] at a time
/// reaches the buffer.
struct BufferClaim(());

impl<'t> Lease<'t> {
    /// The first of `slots` not busy, marked busy; a one-off if all are.
    pub fn take(slots: &'t [Slot]) -> Lease<'t> {
        for slot in slots {
            if !slot.busy.get() {
                slot.busy.set(true);
                compiler_fence(Ordering::SeqCst);
                return Lease::new(Held::Cached(slot));
            }
        }
        Lease::new(Held::OneOff(Slot::empty()))
    }

    /// A one-off slot for a vforked child, which must leave its parent's slots alone.
    pub fn vforked() -> Lease<'static> {
        Lease::new(Held::Vforked(Slot::empty()))
    }

    fn new(held: Held<'t>) -> Lease<'t> {
        Lease {
            held,
            claim: BufferClaim(()),
        }
    }

    /// Whether the lease's slot holds a connection made in this process (`generation`).
    pub fn has_session(&self, generation: u64) -> bool {
        self.held.slot().has_session(generation)
    }

    /// At least `len` bytes for the call: the slot's buffer, or a mapping of the call's own.
    pub fn space(&mut self, len: usize) -> Result<Space<'_, 't>, Errno> {
        let Lease { held, claim } = self;
        // SAFETY: `claim` is borrowed mutably for the Space's life, and the lease is its
        // slot's only holder (see the type's doc), so no other reference to the buffer lives.
        let slot_buf = unsafe { held.slot().buffer() }?;
        let own = (len > slot_buf.len())
            .then(|| MapBuf::new(len))
            .transpose()?;
        Ok(Space {
            held,
            _claim: claim,
            slot_buf,
            own,
        })
    }
}

impl Held<'_> {
    fn slot(&self) -> &Slot {
        match self {
            Held::Cached(slot) => slot,
            Held::OneOff(slot) | Held::Vforked(slot) => slot,
        }
    }

    /// The slot's socket, connecting it first with `open` if needed (see [`Slot`]'s
    /// `connection`).
    fn connection(
        &self,
        generation: u64,
        open: impl FnOnce(bool) -> Result<RawFd, Errno>,
    ) -> Result<RawFd, Errno> {
        // A vforked child leaves the image's hello to its parent.
        let may_announce = !matches!(self, Held::Vforked(_));
        let fd = self.slot().connection(generation, may_announce, open)?;
        if let Held::Cached(_) = self {
            hook_thread_exit();
        }
        Ok(fd)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        match &self.held {
            Held::Cached(slot) => {
                compiler_fence(Ordering::SeqCst);
                slot.busy.set(false);
            }
            Held::OneOff(slot) | Held::Vforked(slot) => {
                slot.drop_connection();
                slot.free_buffer();
            }
        }
    }
}

/// A call's buffer (the slot's, or a mapping of the call's own when more room is needed)
/// and its slot, borrowed from the [`Lease`] for the call.
pub struct Space<'s, 't> {
    held: &'s Held<'t>,
    _claim: &'s mut BufferClaim,
    slot_buf: &'s mut [u8],
    own: Option<MapBuf>,
}

impl<'s> Space<'s, '_> {
    /// The whole buffer in use (the call's own mapping if there is one).
    pub fn bytes(&mut self) -> &mut [u8] {
        match &mut self.own {
            Some(own) => own.as_mut_slice(),
            None => self.slot_buf,
        }
    }

    /// The slot held (borrowed from the lease, not from the space).
    pub fn slot(&self) -> &'s Slot {
        let held: &'s Held<'_> = self.held;
        held.slot()
    }

    /// The slot's socket, connecting it first with `open` (`conn::open_session`) if needed
    /// (see [`Slot`]'s `connection`).
    pub fn connection(
        &self,
        generation: u64,
        open: impl FnOnce(bool) -> Result<RawFd, Errno>,
    ) -> Result<RawFd, Errno> {
        self.held.connection(generation, open)
    }
}

impl ReplySpace for Space<'_, '_> {
    fn room(&mut self) -> &mut [u8] {
        self.bytes()
    }

    fn grow(&mut self, len: usize, keep: usize) -> Option<&mut [u8]> {
        if len > self.bytes().len() {
            let mut bigger = MapBuf::new(len).ok()?;
            bigger.as_mut_slice()[..keep].copy_from_slice(&self.bytes()[..keep]);
            self.own = Some(bigger);
        }
        self.bytes().get_mut(..len)
    }
}

const NO_KEY: usize = usize::MAX;
/// The pthread key whose destructor closes a thread's connections.
static EXIT_KEY: AtomicUsize = AtomicUsize::new(NO_KEY);

/// The key, made at the first use (by the library's constructor).
pub fn exit_key() -> Option<libc::pthread_key_t> {
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

/// Makes sure this thread's connections (and its cached pidfd, `crate::semfast`) are closed
/// when it exits.
pub fn hook_thread_exit() {
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
    crate::semfast::thread_exit();
    SLOTS.with(|slots| {
        for slot in slots.iter().filter(|s| !s.busy.get()) {
            slot.drop_connection();
            slot.free_buffer();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn which(lease: &Lease<'_>, slots: &[Slot]) -> Option<usize> {
        match lease.held {
            Held::Cached(s) => slots.iter().position(|x| std::ptr::eq(x, s)),
            Held::OneOff(_) | Held::Vforked(_) => None,
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
        let slots = [Slot::empty()];
        let mut lease = Lease::take(&slots);
        let mut space = lease.space(100).unwrap();
        assert_eq!(space.bytes().len(), SLOT_BUF);
        assert_eq!(space.room().len(), SLOT_BUF);
        assert!(space.own.is_none());
        space.room()[..3].copy_from_slice(b"abc");
        let big = space.grow(SLOT_BUF + 1, 3).unwrap();
        assert_eq!(&big[..3], b"abc", "the bytes read so far come along");
        big[SLOT_BUF] = 1;
        assert_eq!(space.bytes().len(), SLOT_BUF + 1);
        assert_eq!(space.bytes()[SLOT_BUF], 1);
        drop(space);
        let room = lease.space(3 * SLOT_BUF).unwrap();
        assert!(room.own.is_some());
        drop(room);
        drop(lease);
        slots[0].free_buffer();
        assert!(slots[0].buf.get().is_null());
    }
}
