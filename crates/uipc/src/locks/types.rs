//! The lock engine's vocabulary: Linux's constants and `struct flock`, the caller's view of an
//! open file, owners, and held locks.

/// `F_GETLK` (x86-64, where it is the 64-bit `F_GETLK64`).
pub const F_GETLK: i32 = 5;
/// `F_SETLK`.
pub const F_SETLK: i32 = 6;
/// `F_SETLKW`.
pub const F_SETLKW: i32 = 7;
/// `F_OFD_GETLK`.
pub const F_OFD_GETLK: i32 = 36;
/// `F_OFD_SETLK`.
pub const F_OFD_SETLK: i32 = 37;
/// `F_OFD_SETLKW`.
pub const F_OFD_SETLKW: i32 = 38;

/// `l_type` of a read (shared) lock.
pub const F_RDLCK: i16 = 0;
/// `l_type` of a write (exclusive) lock.
pub const F_WRLCK: i16 = 1;
/// `l_type` of an unlock.
pub const F_UNLCK: i16 = 2;

/// `l_whence`: from the start of the file.
pub const SEEK_SET: i16 = 0;
/// `l_whence`: from the description's current offset.
pub const SEEK_CUR: i16 = 1;
/// `l_whence`: from the end of the file.
pub const SEEK_END: i16 = 2;

/// flock(2): shared lock.
pub const LOCK_SH: i32 = 1;
/// flock(2): exclusive lock.
pub const LOCK_EX: i32 = 2;
/// flock(2): do not block.
pub const LOCK_NB: i32 = 4;
/// flock(2): unlock.
pub const LOCK_UN: i32 = 8;
/// flock(2): the old mandatory-lock flag, ignored (the call returns 0).
pub const LOCK_MAND: i32 = 32;

/// The largest file offset: a lock ending here runs to EOF (`OFFSET_MAX`).
pub const OFFSET_MAX: i64 = i64::MAX;

/// Linux's `struct flock` (the 64-bit layout), as fcntl reads and writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flock {
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub l_type: i16,
    /// `SEEK_SET`, `SEEK_CUR` or `SEEK_END`.
    pub l_whence: i16,
    /// Start, relative to `l_whence`.
    pub l_start: i64,
    /// Length; 0 means "to EOF", negative means the bytes before the start.
    pub l_len: i64,
    /// The holder's pid (F_GETLK), -1 for an OFD lock; must be 0 for the `F_OFD_*` commands.
    pub l_pid: i32,
}

impl Flock {
    /// A request over `[start, start + len)` from the start of the file (`len` 0: to EOF).
    pub fn new(l_type: i16, l_start: i64, l_len: i64) -> Flock {
        Flock {
            l_type,
            l_whence: SEEK_SET,
            l_start,
            l_len,
            l_pid: 0,
        }
    }
}

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
    /// POSIX record locks: the process (tgid).
    Process(i32),
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
