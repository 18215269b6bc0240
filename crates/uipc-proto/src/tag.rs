//! Every tag byte of the wire format, one list per message family, so that the values a
//! frame may start with (and the nested tags of file-lock and `/proc` messages) can be read
//! and kept unique in one place. The outer tags are grouped by tens: semaphores 1x, message
//! queues 2x, shared memory 3x, fork and the semaphore arena 4x, locks 50, `/proc` 60.

/// The first byte of a [`Request`](crate::Request).
pub(crate) mod request {
    pub(crate) const HELLO: u8 = 1;
    pub(crate) const CANCEL: u8 = 2;
    pub(crate) const SEMGET: u8 = 10;
    pub(crate) const SEMTIMEDOP: u8 = 11;
    pub(crate) const SEM_NSEMS: u8 = 12;
    pub(crate) const SEMCTL: u8 = 13;
    pub(crate) const MSGGET: u8 = 20;
    pub(crate) const MSGSND: u8 = 21;
    pub(crate) const MSGRCV: u8 = 22;
    pub(crate) const MSGCTL: u8 = 23;
    pub(crate) const SHMGET: u8 = 30;
    pub(crate) const SHMAT: u8 = 31;
    pub(crate) const SHM_MOVED: u8 = 32;
    pub(crate) const SHMDT: u8 = 33;
    pub(crate) const SHMCTL: u8 = 34;
    pub(crate) const SHM_REMAP: u8 = 35;
    pub(crate) const FORK_CHILD: u8 = 40;
    pub(crate) const SEM_ARENA: u8 = 41;
    pub(crate) const LOCK: u8 = 50;
    pub(crate) const PROC: u8 = 60;
}

/// The first byte of a [`Response`](crate::Response).
pub(crate) mod response {
    pub(crate) const HELLO: u8 = 1;
    pub(crate) const ERROR: u8 = 2;
    pub(crate) const RET: u8 = 3;
    pub(crate) const SEM_STAT: u8 = 10;
    pub(crate) const SEM_INFO: u8 = 11;
    pub(crate) const SEM_ALL: u8 = 12;
    pub(crate) const MSG_STAT: u8 = 20;
    pub(crate) const MSG_INFO: u8 = 21;
    pub(crate) const MSG: u8 = 22;
    pub(crate) const SHM_STAT: u8 = 30;
    pub(crate) const SHM_INFO: u8 = 31;
    pub(crate) const SHM_USAGE: u8 = 32;
    pub(crate) const SHM_ATTACHED: u8 = 33;
    pub(crate) const LOCK: u8 = 50;
    pub(crate) const TEXT: u8 = 60;
}

/// The byte after [`request::LOCK`] or [`response::LOCK`]: `FCNTL`..`FDINFO` begin a
/// [`LockRequest`](crate::LockRequest), `R_*` a [`LockResponse`](crate::LockResponse).
pub(crate) mod locks {
    pub(crate) const FCNTL: u8 = 1;
    pub(crate) const FLOCK: u8 = 2;
    pub(crate) const CLOSE: u8 = 3;
    pub(crate) const LIST: u8 = 4;
    pub(crate) const HINTS: u8 = 5;
    pub(crate) const LEASES: u8 = 6;
    pub(crate) const FLOCK_SLOTS: u8 = 7;
    pub(crate) const EXEC_CLOSE: u8 = 8;
    pub(crate) const EXEC_FAILED: u8 = 9;
    pub(crate) const FDINFO: u8 = 10;
    pub(crate) const R_FLOCK: u8 = 1;
    pub(crate) const R_LIST: u8 = 2;
}

/// The bytes after [`request::PROC`]: a [`ProcRequest`](crate::ProcRequest)'s access (`READ`,
/// `MAY_WRITE`, `WRITE`), then for `READ` the file (`SYSV_SEM`..`SYSCTL`).
pub(crate) mod procfs {
    pub(crate) const SYSV_SEM: u8 = 1;
    pub(crate) const SYSV_MSG: u8 = 2;
    pub(crate) const SYSV_SHM: u8 = 3;
    pub(crate) const LOCKS: u8 = 4;
    pub(crate) const SYSCTL: u8 = 5;
    pub(crate) const READ: u8 = 1;
    pub(crate) const MAY_WRITE: u8 = 2;
    pub(crate) const WRITE: u8 = 3;
}
