//! The numbers of the SysV IPC ABI (`<linux/ipc.h>`, `<linux/sem.h>`, `<linux/msg.h>`,
//! `<linux/shm.h>`), as the engine's callers pass them.

/// The key that always makes a new object.
pub const IPC_PRIVATE: i32 = 0;
/// `*get`: create the object if the key has none.
pub const IPC_CREAT: i32 = 0o1000;
/// `*get` with IPC_CREAT: fail with EEXIST if the key has an object.
pub const IPC_EXCL: i32 = 0o2000;
/// Fail with EAGAIN (ENOMSG for msgrcv) instead of sleeping.
pub const IPC_NOWAIT: i32 = 0o4000;

/// `*ctl`: remove the object.
pub const IPC_RMID: i32 = 0;
/// `*ctl`: set owner, group and mode (and `msg_qbytes`).
pub const IPC_SET: i32 = 1;
/// `*ctl`: the object's `*id_ds`.
pub const IPC_STAT: i32 = 2;
/// `*ctl`: the namespace's limits.
pub const IPC_INFO: i32 = 3;
/// The version flag some architectures' C libraries OR into `*ctl` commands. x86-64 has one
/// layout and does not parse it: a command carrying it is EINVAL there (checked on the host),
/// and the engine follows x86-64.
pub const IPC_64: i32 = 0x100;

/// semctl: the pid of the last semop on one semaphore.
pub const GETPID: i32 = 11;
/// semctl: one semaphore's value.
pub const GETVAL: i32 = 12;
/// semctl: every value of the set.
pub const GETALL: i32 = 13;
/// semctl: the tasks waiting for one semaphore to grow.
pub const GETNCNT: i32 = 14;
/// semctl: the tasks waiting for one semaphore to be zero.
pub const GETZCNT: i32 = 15;
/// semctl: set one semaphore's value.
pub const SETVAL: i32 = 16;
/// semctl: set every value of the set.
pub const SETALL: i32 = 17;
/// semctl: IPC_STAT by index, with read permission.
pub const SEM_STAT: i32 = 18;
/// semctl: the limits and the namespace's use.
pub const SEM_INFO: i32 = 19;
/// semctl: SEM_STAT without the permission check.
pub const SEM_STAT_ANY: i32 = 20;
/// `sem_flg`: undo the operation when the process exits.
pub const SEM_UNDO: i16 = 0x1000;

/// msgctl: IPC_STAT by index, with read permission.
pub const MSG_STAT: i32 = 11;
/// msgctl: the limits and the namespace's use.
pub const MSG_INFO: i32 = 12;
/// msgctl: MSG_STAT without the permission check.
pub const MSG_STAT_ANY: i32 = 13;
/// msgrcv: truncate a longer message instead of failing with E2BIG.
pub const MSG_NOERROR: i32 = 0o10000;
/// msgrcv: the first message whose type is not `msgtyp`.
pub const MSG_EXCEPT: i32 = 0o20000;
/// msgrcv: copy the message at position `msgtyp`, leaving it queued.
pub const MSG_COPY: i32 = 0o40000;

/// shmctl: lock the segment in memory.
pub const SHM_LOCK: i32 = 11;
/// shmctl: unlock the segment.
pub const SHM_UNLOCK: i32 = 12;
/// shmctl: IPC_STAT by index, with read permission.
pub const SHM_STAT: i32 = 13;
/// shmctl: the namespace's use (`struct shm_info`).
pub const SHM_INFO: i32 = 14;
/// shmctl: SHM_STAT without the permission check.
pub const SHM_STAT_ANY: i32 = 15;
/// shmat: attach read-only.
pub const SHM_RDONLY: i32 = 0o10000;
/// shmat: round the address down to SHMLBA.
pub const SHM_RND: i32 = 0o20000;
/// shmat: replace any mapping at the address.
pub const SHM_REMAP: i32 = 0o40000;
/// shmat: attach executable.
pub const SHM_EXEC: i32 = 0o100000;
/// shmget: huge pages (accepted, pages stay 4096 bytes).
pub const SHM_HUGETLB: i32 = 0o4000;
/// shmget: no swap reservation (accepted).
pub const SHM_NORESERVE: i32 = 0o10000;
/// Mode bit: marked for destruction (`shm_perm.mode`).
pub const SHM_DEST: u32 = 0o1000;
/// Mode bit: locked in memory.
pub const SHM_LOCKED: u32 = 0o2000;

/// Largest semaphore value.
pub const SEMVMX: i32 = 32767;
/// Largest SEM_UNDO adjustment.
pub const SEMAEM: i32 = 32767;
/// `seminfo.semume` (reported by IPC_INFO, not enforced).
pub const SEMUME: i32 = 500;
/// `seminfo.semmnu` (reported by IPC_INFO, not enforced).
pub const SEMMNU: i32 = 1_024_000_000;
/// `seminfo.semmap` (reported by IPC_INFO, not enforced).
pub const SEMMAP: i32 = 1_024_000_000;
/// `seminfo.semusz` for IPC_INFO.
pub const SEMUSZ: i32 = 20;
/// `msginfo.msgpool` for IPC_INFO, KiB.
pub const MSGPOOL: i32 = 512_000;
/// `msginfo.msgmap` for IPC_INFO.
pub const MSGMAP: i32 = 16384;
/// `msginfo.msgtql` for IPC_INFO.
pub const MSGTQL: i32 = 16384;
/// `msginfo.msgssz`.
pub const MSGSSZ: i32 = 16;
/// `msginfo.msgseg`.
pub const MSGSEG: i32 = 0xffff;
/// Smallest segment, bytes.
pub const SHMMIN: u64 = 1;
/// `shminfo.shmseg` (Linux reports shmmni instead).
pub const SHMSEG: u64 = 4096;
/// The page size segments are counted in.
pub const PAGE_SIZE: u64 = 4096;
/// SHMLBA on x86-64.
pub const SHMLBA: u64 = PAGE_SIZE;
