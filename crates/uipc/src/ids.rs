//! The engine's typed numbers: SysV IPC ids, indices and keys, and process ids.
//!
//! Linux passes all of them as `int`, and the engine's syscall-shaped methods (`semget`,
//! `semop`, `shmat`, `timer_create`, ...) still take and return `i32`, so callers see Linux's
//! signatures. Inside the engine each kind has its own type, so an index cannot be passed where
//! a full id is meant, nor a key where an id is:
//! - [`IpcId`]: a full id, `(seq << shift) + idx` (see [`crate::table::IdLayout`]);
//! - [`IpcIdx`]: the index part of an id, the object's place in its registry;
//! - [`IpcKey`]: the key a `*get` names (0 is `IPC_PRIVATE`);
//! - [`Tgid`]: a process (thread group) id, as the engine's callers number processes.
//!
//! Each is `repr(transparent)` over the integer Linux uses, converts with `new`/`get` (and
//! `From` both ways), and prints as that integer.

use std::fmt;

macro_rules! typed_int {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name($int);

        impl $name {
            /// The typed value of `raw`.
            pub const fn new(raw: $int) -> $name {
                $name(raw)
            }

            /// The integer Linux uses.
            pub const fn get(self) -> $int {
                self.0
            }
        }

        impl From<$int> for $name {
            fn from(raw: $int) -> $name {
                $name(raw)
            }
        }

        impl From<$name> for $int {
            fn from(v: $name) -> $int {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

typed_int!(
    /// A full SysV IPC id, `(seq << shift) + idx`, as `semget` returns it.
    IpcId(i32)
);
typed_int!(
    /// The index part of an [`IpcId`]: where the object sits in its registry (`*_STAT` and
    /// `/proc/sysvipc` number objects by it).
    IpcIdx(u32)
);
typed_int!(
    /// A SysV IPC key (`key_t`); [`IpcKey::PRIVATE`] is `IPC_PRIVATE`.
    IpcKey(i32)
);
typed_int!(
    /// A process (thread group) id, as the caller numbers processes.
    Tgid(i32)
);

impl IpcKey {
    /// `IPC_PRIVATE`: always creates, never entered in a key map.
    pub const PRIVATE: IpcKey = IpcKey(0);

    /// Whether this is `IPC_PRIVATE`.
    pub const fn is_private(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_ids_are_their_integers_in_memory_and_in_print() {
        assert_eq!(std::mem::size_of::<IpcId>(), 4);
        assert_eq!(std::mem::size_of::<Option<Tgid>>(), 8);
        assert_eq!(IpcId::new(-1).get(), -1);
        assert_eq!(i32::from(IpcKey::from(0x1234)), 0x1234);
        assert_eq!(IpcIdx::new(7).to_string(), "7");
        assert!(IpcKey::PRIVATE.is_private() && !IpcKey::new(1).is_private());
    }
}
