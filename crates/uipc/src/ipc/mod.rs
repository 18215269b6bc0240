//! SysV IPC: namespaces, registries, semaphores, message queues and shared memory.
//!
//! Everything is reached through an [`IpcNamespace`]: `ns.semget(&cred, key, nsems, flag)`,
//! `ns.msgsnd(...)`, `ns.shmat(...)` and so on, one method per Linux call, each documented
//! with its man page and returning Linux's errno in Linux's order.

pub use uipc_abi::ipc::consts;
pub mod keytable;
#[cfg(all(test, not(loom)))]
mod lookup_tests;
pub mod msg;
pub mod namespace;
pub mod perm;
mod perm_table;
mod proc_int;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod registry;
#[cfg(not(feature = "internals"))]
#[allow(dead_code, unused_imports)] // what only the bench and the tests call
pub(crate) mod registry;
pub mod sem;
pub(crate) mod shared_words;
pub mod shm;

pub use crate::table::IdLayout;
pub use namespace::{IpcNamespace, Limits, NamespaceOptions, Sysctl};
pub use perm::{IpcPerm, IpcPermStat};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use registry::{IpcHeader, IpcObject, KeyView, Registry, Vacancy};
