//! The numbers of the SysV IPC ABI (`<linux/ipc.h>`, `<linux/sem.h>`, `<linux/msg.h>`,
//! `<linux/shm.h>`), as the engine's callers pass them.
#![allow(missing_docs)]

pub const IPC_PRIVATE: i32 = 0;
pub const IPC_CREAT: i32 = 0o1000;
pub const IPC_EXCL: i32 = 0o2000;
pub const IPC_NOWAIT: i32 = 0o4000;

pub const IPC_RMID: i32 = 0;
pub const IPC_SET: i32 = 1;
pub const IPC_STAT: i32 = 2;
pub const IPC_INFO: i32 = 3;
/// The version flag some architectures' C libraries OR into `*ctl` commands. x86-64 has one
/// layout and does not parse it: a command carrying it is EINVAL there (checked on the host),
/// and the engine follows x86-64.
pub const IPC_64: i32 = 0x100;

pub const GETPID: i32 = 11;
pub const GETVAL: i32 = 12;
pub const GETALL: i32 = 13;
pub const GETNCNT: i32 = 14;
pub const GETZCNT: i32 = 15;
pub const SETVAL: i32 = 16;
pub const SETALL: i32 = 17;
pub const SEM_STAT: i32 = 18;
pub const SEM_INFO: i32 = 19;
pub const SEM_STAT_ANY: i32 = 20;
pub const SEM_UNDO: i16 = 0x1000;

pub const MSG_STAT: i32 = 11;
pub const MSG_INFO: i32 = 12;
pub const MSG_STAT_ANY: i32 = 13;
pub const MSG_NOERROR: i32 = 0o10000;
pub const MSG_EXCEPT: i32 = 0o20000;
pub const MSG_COPY: i32 = 0o40000;

pub const SHM_LOCK: i32 = 11;
pub const SHM_UNLOCK: i32 = 12;
pub const SHM_STAT: i32 = 13;
pub const SHM_INFO: i32 = 14;
pub const SHM_STAT_ANY: i32 = 15;
pub const SHM_RDONLY: i32 = 0o10000;
pub const SHM_RND: i32 = 0o20000;
pub const SHM_REMAP: i32 = 0o40000;
pub const SHM_EXEC: i32 = 0o100000;
pub const SHM_HUGETLB: i32 = 0o4000;
pub const SHM_NORESERVE: i32 = 0o10000;
/// Mode bit: marked for destruction (`shm_perm.mode`).
pub const SHM_DEST: u32 = 0o1000;
/// Mode bit: locked in memory.
pub const SHM_LOCKED: u32 = 0o2000;

pub const SEMVMX: i32 = 32767;
pub const SEMAEM: i32 = 32767;
pub const SEMUME: i32 = 500;
pub const SEMMNU: i32 = 1_024_000_000;
pub const SEMMAP: i32 = 1_024_000_000;
pub const SEMUSZ: i32 = 20;
pub const MSGPOOL: i32 = 512_000;
pub const MSGMAP: i32 = 16384;
pub const MSGTQL: i32 = 16384;
pub const MSGSSZ: i32 = 16;
pub const MSGSEG: i32 = 0xffff;
pub const SHMMIN: u64 = 1;
pub const SHMSEG: u64 = 4096;
pub const PAGE_SIZE: u64 = 4096;
/// SHMLBA on x86-64.
pub const SHMLBA: u64 = PAGE_SIZE;
