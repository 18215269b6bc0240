//! Linux error numbers.
//!
//! Every engine call returns `Result<_, Errno>`, where the number is exactly the one the Linux
//! system call would put in `errno` (x86-64/generic numbering, which is the same for every
//! number used here on all Linux architectures uipc targets).

use core::fmt;

/// A Linux `errno` value. The newtype keeps engine results from mixing with other integers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(i32);

macro_rules! errnos {
    ($($name:ident = $num:literal, $text:literal;)*) => {
        impl Errno {
            $(#[doc = $text] pub const $name: Errno = Errno($num);)*

            /// The symbolic name (`"EINVAL"`), or `None` for a number this table does not know.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($num => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// The C library's message for this number.
            fn text(self) -> &'static str {
                match self.0 {
                    $($num => $text,)*
                    _ => "Unknown error",
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    ESRCH = 3, "No such process";
    EINTR = 4, "Interrupted system call";
    E2BIG = 7, "Argument list too long";
    EBADF = 9, "Bad file descriptor";
    EAGAIN = 11, "Resource temporarily unavailable";
    ENOMEM = 12, "Cannot allocate memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    EINVAL = 22, "Invalid argument";
    EFBIG = 27, "File too large";
    ENOSPC = 28, "No space left on device";
    ERANGE = 34, "Numerical result out of range";
    EDEADLK = 35, "Resource deadlock avoided";
    ENOLCK = 37, "No locks available";
    ENOSYS = 38, "Function not implemented";
    ENOMSG = 42, "No message of desired type";
    EIDRM = 43, "Identifier removed";
    EOVERFLOW = 75, "Value too large for defined data type";
    EOPNOTSUPP = 95, "Operation not supported";
    ETIMEDOUT = 110, "Connection timed out";
}

impl Errno {
    /// `EWOULDBLOCK` is `EAGAIN` on Linux.
    pub const EWOULDBLOCK: Errno = Errno::EAGAIN;

    /// Wraps a raw number, as read from the host's `errno`.
    pub const fn from_raw(raw: i32) -> Errno {
        Errno(raw)
    }

    /// The raw number, for `errno` or a wire format.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.text(), self)
    }
}

impl std::error::Error for Errno {}

/// The engine's result type.
pub type Result<T, E = Errno> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_match_linux() {
        assert_eq!(Errno::EIDRM.raw(), 43);
        assert_eq!(Errno::ENOMSG.raw(), 42);
        assert_eq!(Errno::EWOULDBLOCK, Errno::EAGAIN);
        assert_eq!(format!("{:?}", Errno::EINVAL), "EINVAL");
        assert_eq!(format!("{:?}", Errno::from_raw(999)), "Errno(999)");
        assert!(Errno::EFBIG.to_string().contains("File too large"));
    }
}
