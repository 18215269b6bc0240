//! The lock engine's vocabulary: Linux's constants and `struct flock` (from `uipc-abi`), the
//! caller's view of an open file, owners, and held locks.

pub use uipc_abi::locks::*;

use crate::Tgid;

/// Which file a lock is on: the caller's stable identity for an inode (device and inode number,
/// or anything else unique among the files the caller shows the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// Device number (`st_dev`), shown in `/proc/locks` as `major:minor` in hex.
    pub dev: u64,
    /// Inode number (`st_ino`).
    pub ino: u64,
}

impl FileId {
    /// `major(dev)`, as glibc computes it.
    pub fn major(&self) -> u32 {
        (((self.dev >> 32) & 0xffff_f000) | ((self.dev >> 8) & 0x0000_0fff)) as u32
    }

    /// `minor(dev)`, as glibc computes it.
    pub fn minor(&self) -> u32 {
        (((self.dev >> 12) & 0xffff_ff00) | (self.dev & 0x0000_00ff)) as u32
    }
}

/// An open file description's identity (Linux's `struct file *`): what `open` creates and
/// `dup` and `fork` share. OFD and flock locks belong to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfdId(pub u64);

/// Who owns a lock: a process for POSIX record locks (Linux's `files_struct`, shared by the
/// threads of a process), an open file description for OFD and flock locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// POSIX record locks: the process.
    Process(Tgid),
    /// OFD locks and flock: the open file description.
    Description(OfdId),
}

/// The three lock families, kept on separate lists as Linux does (§6.1): POSIX and OFD locks
/// share one list and conflict with each other; flock locks never conflict with either.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// `fcntl(F_SETLK)`, `lockf`: owned by the process.
    Posix,
    /// `fcntl(F_OFD_SETLK)`: owned by the open file description; pid shown as -1.
    Ofd,
    /// `flock(2)`: owned by the open file description, whole file.
    Flock,
}

/// Read (shared) or write (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockType {
    /// Shared: conflicts only with write locks of other owners.
    Read,
    /// Exclusive: conflicts with every lock of another owner.
    Write,
}

impl LockType {
    /// The `l_type` value.
    pub fn raw(self) -> i16 {
        match self {
            LockType::Read => F_RDLCK,
            LockType::Write => F_WRLCK,
        }
    }
}

/// The caller's view of one file descriptor: which file, which open file description, its
/// access mode, and the two offsets `l_whence` may need. The engine keeps no file descriptors;
/// a caller with a bad or `O_PATH` descriptor passes `None` where an `Option<&OpenFile>` is
/// taken, so that each call can give EBADF at the step where Linux gives it.
#[derive(Clone, Copy, Debug)]
pub struct OpenFile {
    /// The file (inode).
    pub file: FileId,
    /// The open file description the descriptor refers to.
    pub ofd: OfdId,
    /// Opened for reading (`FMODE_READ`): needed for read locks.
    pub readable: bool,
    /// Opened for writing (`FMODE_WRITE`): needed for write locks.
    pub writable: bool,
    /// The description's current offset, for `SEEK_CUR`.
    pub offset: i64,
    /// The file's size, for `SEEK_END`.
    pub size: i64,
}

/// One held lock, as listings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The file.
    pub file: FileId,
    /// Which family.
    pub kind: LockKind,
    /// Read or write.
    pub ty: LockType,
    /// Its owner.
    pub owner: Owner,
    /// The pid that set it (shown as -1 for OFD locks in `/proc/locks` and F_GETLK).
    pub pid: i32,
    /// First byte.
    pub start: i64,
    /// Last byte, inclusive; [`OFFSET_MAX`] means to EOF.
    pub end: i64,
    /// `None` for a held lock; for a blocked request, the position (in this listing) of the held
    /// lock or the earlier blocked request it waits behind in Linux's waiter tree.
    pub blocked_behind: Option<usize>,
}
