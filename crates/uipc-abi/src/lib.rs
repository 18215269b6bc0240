//! Linux's ABI as uipc speaks it: the numbers of the SysV IPC and file-lock calls (x86-64),
//! `struct flock`, and the structures the `*ctl` calls read and fill, as plain values.
//!
//! The engine (`uipc`) re-exports every item here at its own paths (`uipc::ipc::consts`,
//! `uipc::ipc::sem::Sembuf`, `uipc::locks::Flock`, ...); the wire format (`uipc-proto`)
//! depends on this crate alone, so a client of the daemon does not compile the engine.
//! Nothing here has behaviour beyond a constructor: the checks live in the engine.
//!
//! ```
//! use uipc_abi::ipc::{consts::IPC_CREAT, sem::Sembuf};
//! use uipc_abi::locks::{Flock, F_WRLCK};
//!
//! let take = Sembuf::new(0, -1, 0);
//! let whole_file = Flock::new(F_WRLCK, 0, 0);
//! assert_eq!((take.sem_op, whole_file.l_len, IPC_CREAT), (-1, 0, 0o1000));
//! ```

#![warn(missing_docs)]

pub mod ipc;
pub mod locks;
