//! The semaphore fast path's arenas: one memfd per engine namespace, mapped by the daemon and
//! by every client that asks (`Request::SemArena`).
//!
//! The memfd is made as segment memfds are (`memfd::sealed_memfd`: mode 0600, owned by the
//! daemon's user, sealed against shrinking and growing), [`uipc::ipc::msg::fast::MAPPING_BYTES`]
//! long (pages are allocated only where a slot or an entry is written): the semaphore arena's
//! slots, then at [`uipc::ipc::keytable::OFFSET`] the key table, then at
//! [`uipc::ipc::msg::fast::OFFSET`] the message queue region. The protocols on it are the
//! engine's (`uipc::ipc::sem::fast`, `uipc::ipc::keytable` and `uipc::ipc::msg::fast`,
//! ARCHITECTURE.md "The semaphore fast path", "The key table" and "The message queue fast
//! path"). It is made
//! only for a `uipc run`'s private daemon without `UIPC_FASTPATH=0`; the daemon never trusts
//! what clients write there (values taken back are clamped to SEMVMX).
//!
//! The file lock leases (ARCHITECTURE.md "File lock leases") live on a memfd of their own
//! ([`new_leases`], `LockRequest::Leases`), one per daemon as the lock manager is, under the
//! same conditions; the flock leases (ARCHITECTURE.md "flock leases") on another
//! ([`new_flock_slots`], `LockRequest::FlockSlots`).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use uipc::ipc::keytable::{writer::KeyTable, OFFSET};
use uipc::ipc::msg::fast::owner::MsgArena;
use uipc::ipc::msg::fast::MAPPING_BYTES;
use uipc::ipc::sem::fast::{map_arena, owner::SemArena, ARENA_BYTES};
use uipc::locks::flockfast::{map_flock_slots, FlockSlots, FLOCK_BYTES};
use uipc::locks::lease::{map_leases, Leases, LEASE_BYTES};

/// Whether `UIPC_FASTPATH` in the environment turns the fast path off ("0").
pub fn switched_off() -> bool {
    std::env::var_os("UIPC_FASTPATH").is_some_and(|v| v == "0")
}

/// The memfd and the daemon's mapping of it; unmapped when the arena and the key table go
/// (each keeps an `Arc` of it).
pub struct Mapping {
    fd: OwnedFd,
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is shared memory used only through atomics; the pointer is unmapped
// once, in `drop`, when nobody holds the arena any more.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once; the arena that used it is
        // being dropped.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// A sealed memfd of `len` bytes named `name`, mapped by `map`, kept with its mapping.
fn mapped_memfd(
    name: &std::ffi::CStr,
    len: usize,
    map: fn(RawFd) -> Option<std::ptr::NonNull<std::sync::atomic::AtomicU64>>,
) -> Option<(Arc<Mapping>, *mut libc::c_void)> {
    let fd = crate::memfd::sealed_memfd(name, len as u64, false).ok()?;
    let ptr = map(fd.as_raw_fd())?.as_ptr().cast::<libc::c_void>();
    Some((Arc::new(Mapping { fd, ptr, len }), ptr))
}

/// The fast path's shared memory of one namespace: the semaphore arena, the key table and the
/// message queue region, on one memfd.
pub struct Fast {
    pub sem: Arc<SemArena>,
    pub keys: Arc<KeyTable>,
    pub msg: Arc<MsgArena>,
}

/// A new arena, key table and message region on one memfd, or `None` if the memory cannot be
/// had (the namespace then runs without any).
pub fn new_arena() -> Option<Fast> {
    let map: fn(RawFd) -> _ = |fd| map_arena(fd, MAPPING_BYTES);
    let (keep, ptr) = mapped_memfd(c"uipc-sem-arena", MAPPING_BYTES, map)?;
    // SAFETY: a fresh page-aligned mapping of MAPPING_BYTES zeroed bytes, kept mapped by `keep`
    // for the arena's life; clients use it only through atomics. The arena takes the first
    // ARENA_BYTES, the table the rest.
    let arena = unsafe { SemArena::from_raw(ptr.cast(), ARENA_BYTES, Box::new(keep.clone())) };
    // SAFETY: as above; the table is TABLE_BYTES at OFFSET (a multiple of 8), within the mapping.
    let table = unsafe { KeyTable::from_raw(ptr.cast::<u8>().add(OFFSET), Box::new(keep.clone())) };
    // SAFETY: as above; the region is the last REGION_BYTES of the mapping, at a multiple of 8.
    let msg = unsafe {
        MsgArena::from_raw(
            ptr.cast::<u8>().add(uipc::ipc::msg::fast::OFFSET),
            Box::new(keep),
        )
    };
    // Clients answer from the table only in the daemon's user namespace (0 if unknown: never).
    let userns = std::fs::metadata("/proc/self/ns/user")
        .map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m));
    table.set_user_ns(userns);
    Some(Fast {
        sem: Arc::new(arena),
        keys: Arc::new(table),
        msg: Arc::new(msg),
    })
}

/// A file lock lease area (`uipc::locks::lease`) on a memfd of its own, or `None` if the
/// memory cannot be had (locks then always take the daemon path).
pub fn new_leases() -> Option<Leases> {
    let (keep, ptr) = mapped_memfd(c"uipc-lock-leases", LEASE_BYTES, map_leases)?;
    // SAFETY: a fresh page-aligned mapping of LEASE_BYTES zeroed bytes, kept mapped by `keep`
    // for the area's life; clients use it only through atomics.
    Some(unsafe { Leases::from_raw(ptr.cast(), Box::new(keep)) })
}

/// The memfd behind a lease area made by [`new_leases`].
pub fn leases_fd(leases: &Leases) -> Option<RawFd> {
    mapping_fd(leases.keeper())
}

/// A flock lease area (`uipc::locks::flockfast`) on a memfd of its own, or `None` if the
/// memory cannot be had (flock then always takes the daemon path).
pub fn new_flock_slots() -> Option<FlockSlots> {
    let (keep, ptr) = mapped_memfd(c"uipc-flock-leases", FLOCK_BYTES, map_flock_slots)?;
    // SAFETY: a fresh page-aligned mapping of FLOCK_BYTES zeroed bytes, kept mapped by `keep`
    // for the area's life; clients use it only through atomics.
    Some(unsafe { FlockSlots::from_raw(ptr.cast(), Box::new(keep)) })
}

/// The memfd behind a flock lease area made by [`new_flock_slots`].
pub fn flock_slots_fd(slots: &FlockSlots) -> Option<RawFd> {
    mapping_fd(slots.keeper())
}

fn mapping_fd(keeper: Option<&(dyn std::any::Any + Send + Sync)>) -> Option<RawFd> {
    keeper
        .and_then(|k| k.downcast_ref::<Arc<Mapping>>())
        .map(|m| m.fd.as_raw_fd())
}

/// The memfd behind a namespace's arena, if it has one made here.
pub fn fd_of(arena: &SemArena) -> Option<RawFd> {
    arena
        .keeper()
        .and_then(|k| k.downcast_ref::<Arc<Mapping>>())
        .map(|m| m.fd.as_raw_fd())
}
