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
//! - [`table`]: the scalable structures the seeds are about, usable on their own.
//!
//! ## Not supported
//! What uipc leaves out on purpose. The engine-wide items are here; each subsystem's module doc
//! ends with its own "Not supported" list, and this is their index:
//! [`ipc::sem`], [`ipc::msg`], [`ipc::shm`], [`locks`], [`timers`].
//! - Linux Security Modules: the LSM hooks after `ipcperms` always allow.
//! - User and pid namespaces: uids, gids and pids are reported as given, untranslated.
//! - `SHM_HUGETLB` / `SHM_NORESERVE` sizing: accepted as flags, pages are always 4096 bytes.
//! - 32-bit layouts: `/proc/sysvipc/shm` is rendered in its 64-bit format.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod clock;
pub mod cred;
pub mod errno;
pub mod ipc;
pub mod locks;
pub(crate) mod sync;
pub mod table;
pub mod timers;
pub mod wait;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cred::{Cap, CapSet, Cred, Lazy};
pub use errno::{Errno, Result};
pub use wait::{Interrupt, Notifier, ParkCtx, Progress, WaitCtx, Waiter, WakeReason};
