//! SysV IPC: the calls' numbers, and the structures the `*ctl` calls read and fill, as values
//! (field by field; the C layouts are the preload's business).

pub mod consts;
pub mod msg;
pub mod sem;
pub mod shm;
mod sysctl;

pub use sysctl::Sysctl;

/// `ipc64_perm` as IPC_STAT returns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpcPermStat {
    /// The key (0 once private).
    pub key: i32,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Creator user id.
    pub cuid: u32,
    /// Creator group id.
    pub cgid: u32,
    /// Mode, with SHM_DEST / SHM_LOCKED for segments.
    pub mode: u32,
    /// The sequence number (`id >> shift`).
    pub seq: u32,
}
