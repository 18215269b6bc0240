//! The semaphore calls' argument and result types (`struct sembuf`, `struct timespec`,
//! `struct semid64_ds`, `struct seminfo`, `union semun`).

use crate::ipc::perm::IpcPermStat;

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

/// semctl's fourth argument (`union semun`). A command given the wrong variant gets EFAULT,
/// as a bad pointer would.
#[derive(Clone, Copy, Debug)]
pub enum SemctlArg<'a> {
    /// Commands that read no argument.
    None,
    /// SETVAL's value.
    Val(i32),
    /// SETALL's values (at least nsems of them).
    Array(&'a [u16]),
    /// IPC_SET's uid, gid and mode.
    Set {
        /// New owner.
        uid: u32,
        /// New group.
        gid: u32,
        /// New mode (low 9 bits used).
        mode: u32,
    },
}

/// What semctl gives back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SemctlOut {
    /// The system call's return value (0, a value, a pid, a count).
    Ret(i32),
    /// IPC_STAT (return 0) or SEM_STAT(_ANY) (return the full id) with the buffer.
    Stat(i32, SemidDs),
    /// IPC_INFO / SEM_INFO: the highest index in use, and the buffer.
    Info(i32, SemInfo),
    /// GETALL's values (return 0).
    All(Vec<u16>),
}

impl SemctlOut {
    /// The system call's return value.
    pub fn ret(&self) -> i32 {
        match self {
            SemctlOut::Ret(r) | SemctlOut::Stat(r, _) | SemctlOut::Info(r, _) => *r,
            SemctlOut::All(_) => 0,
        }
    }
}
