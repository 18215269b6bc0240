//! The semaphore calls' argument and result types: `union semun` and what semctl returns
//! here, the C structures (`struct sembuf`, `struct timespec`, `struct semid64_ds`,
//! `struct seminfo`) from `uipc-abi`.

pub use uipc_abi::ipc::sem::{SemInfo, Sembuf, SemidDs, Timespec};

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
