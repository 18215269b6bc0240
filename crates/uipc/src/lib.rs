//! # uipc: Linux's SysV IPC, file locks and POSIX timers in user space
//!
//! The engine: no sockets, no processes, no global state. Each Linux call is one method taking
//! the caller's identity ([`Cred`]) and returning `Result<_, Errno>` with exactly the errno
//! Linux gives, checked in Linux's order. Anything that blocks takes a [`WaitCtx`] so the caller
//! can time it out or interrupt it, or is started without sleeping (`*_start`, with a
//! [`ParkCtx`]) and finished later by polling the parked call it returns ([`wait`]).
//!
//! - [`ipc`]: SysV semaphores, message queues and shared memory, in any number of isolated
//!   [`ipc::IpcNamespace`]s.
//! - [`locks`]: POSIX record locks, OFD locks and flock.
//! - [`timers`]: POSIX per-process timers.
//!
//! The seeds' tables (the cyclic id allocator, the id and key maps, the timer table) are
//! internals: public only under the `internals` feature, for the bench that measures them
//! alone.
//!
//! ## Semaphores
//! ```
//! use uipc::ipc::{consts::{IPC_CREAT, IPC_NOWAIT}, sem::Sembuf, IpcNamespace};
//! use uipc::{Cred, Errno, WaitCtx};
//!
//! let ns = IpcNamespace::new();
//! let me = Cred::root(1234);
//! let id = ns.semget(&me, 0x1234, 1, IPC_CREAT | 0o600)?;
//! ns.semop(&me, id, &[Sembuf::new(0, 1, 0)], &WaitCtx::FOREVER)?; // V
//! ns.semop(&me, id, &[Sembuf::new(0, -1, 0)], &WaitCtx::FOREVER)?; // P
//! let again = [Sembuf::new(0, -1, IPC_NOWAIT as i16)];
//! assert_eq!(ns.semop(&me, id, &again, &WaitCtx::FOREVER), Err(Errno::EAGAIN));
//! # Ok::<(), Errno>(())
//! ```
//!
//! ## Message queues
//! ```
//! use uipc::ipc::{consts::{IPC_CREAT, IPC_PRIVATE}, IpcNamespace};
//! use uipc::{Cred, WaitCtx};
//!
//! let ns = IpcNamespace::new();
//! let me = Cred::root(1234);
//! let q = ns.msgget(&me, IPC_PRIVATE, IPC_CREAT | 0o600)?;
//! ns.msgsnd(&me, q, 7, b"hello", 0, &WaitCtx::FOREVER)?;
//! assert_eq!(ns.msgrcv(&me, q, 64, 7, 0, &WaitCtx::FOREVER)?, (7, b"hello".to_vec()));
//! # Ok::<(), uipc::Errno>(())
//! ```
//!
//! ## Shared memory
//! ```
//! use uipc::ipc::{consts::{IPC_CREAT, IPC_PRIVATE}, IpcNamespace};
//! use uipc::Cred;
//!
//! let ns = IpcNamespace::new();
//! let me = Cred::root(1234);
//! let seg = ns.shmget(&me, IPC_PRIVATE, 4096, IPC_CREAT | 0o600)?;
//! let at = ns.shmat(&me, seg, 0, 0)?; // the memory is the embedder's `ShmBacking`
//! at.write(0, b"shared")?;
//! let mut back = [0u8; 6];
//! at.read(0, &mut back)?;
//! assert_eq!(&back, b"shared");
//! ns.shmdt(&me, at.addr)?;
//! # Ok::<(), uipc::Errno>(())
//! ```
//!
//! ## File locks
//! ```
//! use uipc::locks::{FileId, Flock, LockManager, OfdId, OpenFile, F_SETLK, F_WRLCK};
//! use uipc::{Cred, Errno, Tgid, WaitCtx};
//!
//! let locks = LockManager::new();
//! let open = |ofd| OpenFile {
//!     file: FileId { dev: 1, ino: 42 },
//!     ofd: OfdId(ofd),
//!     readable: true,
//!     writable: true,
//!     offset: 0,
//!     size: 0,
//! };
//! let whole = || Flock::new(F_WRLCK, 0, 0);
//! let (a, b) = (Cred::root(100), Cred::root(200));
//! locks.fcntl(&a, Some(&open(1)), F_SETLK, &mut whole(), &WaitCtx::FOREVER)?;
//! let busy = locks.fcntl(&b, Some(&open(2)), F_SETLK, &mut whole(), &WaitCtx::FOREVER);
//! assert_eq!(busy, Err(Errno::EAGAIN));
//! locks.process_exit(Tgid::new(100)); // its POSIX locks go
//! locks.fcntl(&b, Some(&open(2)), F_SETLK, &mut whole(), &WaitCtx::FOREVER)?;
//! # Ok::<(), Errno>(())
//! ```
//!
//! ## POSIX timers
//! ```
//! use std::sync::Arc;
//! use uipc::timers::{ItimerSpec, NoNotifier, SigEvent, Timers, Timespec, UserPtr};
//! use uipc::timers::CLOCK_MONOTONIC;
//! use uipc::{Cred, ManualClock};
//!
//! let clock = Arc::new(ManualClock::new(1000));
//! let timers = Timers::new(clock.clone(), Arc::new(NoNotifier));
//! let me = Cred::root(100);
//! let ev = UserPtr::Valid(SigEvent::NONE);
//! let id = timers.timer_create(&me, CLOCK_MONOTONIC, ev, UserPtr::Valid(0))?;
//! let every_ms = Timespec::from_nanos(1_000_000);
//! let spec = ItimerSpec { interval: every_ms, value: every_ms };
//! timers.timer_settime(&me, id, 0, UserPtr::Valid(spec))?;
//! clock.advance(5_500_000); // 5.5 ms later
//! timers.run_expired();
//! assert_eq!(timers.timer_gettime(&me, id)?.value, Timespec::from_nanos(500_000));
//! # Ok::<(), uipc::Errno>(())
//! ```
//!
//! ## Not supported
//! What uipc leaves out on purpose. The engine-wide items are here; each subsystem's module doc
//! ends with its own "Not supported" list, and this is their index:
//! [`ipc::sem`], [`ipc::msg`], [`ipc::shm`], [`locks`], [`timers`]; what the preload library
//! adds (a program's calls routed to the daemon) is in `crates/uipc-preload/src/lib.rs`.
//! - Linux Security Modules: the LSM hooks after `ipcperms` always allow.
//! - User and pid namespaces: uids, gids and pids are reported as given, untranslated.
//! - `SHM_HUGETLB` / `SHM_NORESERVE` sizing: accepted as flags, pages are always 4096 bytes.
//! - 32-bit layouts: `/proc/sysvipc/shm` is rendered in its 64-bit format.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod clock;
pub mod cred;
pub mod errno;
pub mod ids;
pub mod ipc;
pub mod locks;
pub(crate) mod sync;
// The seeds' tables and the registry built on them are the engine's internals: public (hidden
// from the docs) only under the `internals` feature, which the bench turns on to measure them
// alone; they are not the embedder API.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod table;
#[cfg(not(feature = "internals"))]
#[allow(dead_code, unused_imports)] // what only the bench and the tests call
pub(crate) mod table;
pub mod timers;
pub mod wait;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cred::{Cap, CapSet, Cred, Lazy};
pub use errno::{Errno, Result};
pub use ids::{IpcId, IpcIdx, IpcKey, Tgid};
pub use wait::{Interrupt, Notifier, ParkCtx, Progress, WaitCtx, Waiter, WakeReason};
