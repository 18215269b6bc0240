//! Shared memory: `struct shmid64_ds`, `struct shminfo64`, `struct shm_info` and the fields
//! IPC_SET reads.

use super::IpcPermStat;

/// `struct shmid64_ds` as IPC_STAT / SHM_STAT / SHM_STAT_ANY return it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShmidDs {
    /// Owner, creator, mode (with SHM_DEST / SHM_LOCKED), key, seq.
    pub perm: IpcPermStat,
    /// Size in bytes, as asked for.
    pub segsz: u64,
    /// Last attach time (0: never).
    pub atime: i64,
    /// Last detach time (0: never).
    pub dtime: i64,
    /// Creation or last IPC_SET time.
    pub ctime: i64,
    /// Creator's pid.
    pub cpid: i32,
    /// Pid of the last shmat / shmdt.
    pub lpid: i32,
    /// Current attachments.
    pub nattch: u64,
}

/// `struct shminfo64` (IPC_INFO).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShmInfo {
    /// Largest segment, bytes.
    pub shmmax: u64,
    /// Smallest segment, bytes (1).
    pub shmmin: u64,
    /// Most segments.
    pub shmmni: u64,
    /// Most attachments per process: Linux reports shmmni here.
    pub shmseg: u64,
    /// Most pages in all segments.
    pub shmall: u64,
}

/// `struct shm_info` (SHM_INFO).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShmUsage {
    /// Segments in use.
    pub used_ids: i32,
    /// Pages charged to all segments.
    pub shm_tot: u64,
    /// Resident pages.
    pub shm_rss: u64,
    /// Swapped pages.
    pub shm_swp: u64,
    /// Always 0.
    pub swap_attempts: u64,
    /// Always 0.
    pub swap_successes: u64,
}

/// IPC_SET's input (the fields of `shmid_ds` it reads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmSet {
    /// New owner uid.
    pub uid: u32,
    /// New owner gid.
    pub gid: u32,
    /// New mode; only the low 9 bits are used.
    pub mode: u32,
}
