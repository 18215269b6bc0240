//! File locks: fcntl's lock commands, `struct flock`'s values and `struct flock` itself
//! (`<asm-generic/fcntl.h>`, x86-64), flock(2)'s operations.

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
