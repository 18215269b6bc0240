//! Semaphores: `struct sembuf`, semtimedop's `struct timespec`, `struct semid64_ds` and
//! `struct seminfo`.

use super::IpcPermStat;

/// One semaphore operation (`struct sembuf`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sembuf {
    /// Index of the semaphore in the set.
    pub sem_num: u16,
    /// Amount to add (> 0), take (< 0), or 0 to wait for zero.
    pub sem_op: i16,
    /// IPC_NOWAIT and/or SEM_UNDO.
    pub sem_flg: i16,
}

impl Sembuf {
    /// A sop.
    pub const fn new(sem_num: u16, sem_op: i16, sem_flg: i16) -> Sembuf {
        Sembuf {
            sem_num,
            sem_op,
            sem_flg,
        }
    }
}

/// semtimedop's relative timeout (`struct timespec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    /// Seconds.
    pub tv_sec: i64,
    /// Nanoseconds, `[0, 1e9)`.
    pub tv_nsec: i64,
}

/// `struct semid64_ds` as IPC_STAT and SEM_STAT(_ANY) return it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SemidDs {
    /// Owner, creator, mode, key and sequence number.
    pub perm: IpcPermStat,
    /// Last semop (the latest over the semaphores), 0 if never.
    pub otime: i64,
    /// Last change by creation, IPC_SET, SETVAL or SETALL.
    pub ctime: i64,
    /// Semaphores in the set.
    pub nsems: u64,
}

/// `struct seminfo` (IPC_INFO, SEM_INFO).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SemInfo {
    pub semmap: i32,
    pub semmni: i32,
    pub semmns: i32,
    pub semmnu: i32,
    pub semmsl: i32,
    pub semopm: i32,
    pub semume: i32,
    /// SEM_INFO: the number of sets.
    pub semusz: i32,
    pub semvmx: i32,
    /// SEM_INFO: the number of semaphores in all sets.
    pub semaem: i32,
}
