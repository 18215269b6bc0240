//! Fixed-layout values on the wire: integers and the Linux ABI structs (`uipc_abi`) that
//! requests and responses carry. A struct is written as its fields in the order listed in
//! [`wire_structs!`] below and read back in the same order; an `Option` as a 0/1 byte and
//! then the value.

use crate::codec::{DecodeError, Reader, Writer};
use crate::procfs::ProcRequest;
use uipc_abi::ipc::msg::{MsgInfo, MsqidDs, MsqidSet};
use uipc_abi::ipc::sem::{SemInfo, Sembuf, SemidDs, Timespec};
use uipc_abi::ipc::shm::{ShmInfo, ShmSet, ShmUsage, ShmidDs};
use uipc_abi::ipc::IpcPermStat;
use uipc_abi::locks::Flock;

/// A value with a fixed wire layout.
pub trait Wire: Sized {
    /// Appends the value.
    fn put(&self, w: &mut Writer<'_>);
    /// Reads one value.
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

/// Integers and bools, with the [`Writer`] and [`Reader`] method of their own name.
macro_rules! wire_scalars {
    ($($t:ident)*) => {$(
        impl Wire for $t {
            fn put(&self, w: &mut Writer<'_>) {
                w.$t(*self)
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                r.$t()
            }
        }
    )*};
}

wire_scalars!(bool u8 u16 i16 u32 i32 u64 i64);

/// A byte string ([`Writer::bytes`]).
impl Wire for Vec<u8> {
    fn put(&self, w: &mut Writer<'_>) {
        w.bytes(self);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.bytes()
    }
}

/// Nested messages (file locks, `/proc`), as their own `encode_into` and `decode_from` write
/// and read them (the lock messages' module invokes it for its own types).
macro_rules! wire_nested {
    ($($ty:ty),*) => {$(
        impl Wire for $ty {
            fn put(&self, w: &mut Writer<'_>) {
                self.encode_into(w);
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                <$ty>::decode_from(r)
            }
        }
    )*};
}

wire_nested!(ProcRequest);

/// Structs as their fields, in the order listed (a field missing from a list does not compile).
macro_rules! wire_structs {
    ($($ty:ident { $($field:ident),* })*) => {$(
        impl Wire for $ty {
            fn put(&self, w: &mut Writer<'_>) {
                $(self.$field.put(w);)*
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok($ty { $($field: Wire::get(r)?,)* })
            }
        }
    )*};
}

wire_structs! {
    IpcPermStat { key, uid, gid, cuid, cgid, mode, seq }
    SemidDs { perm, otime, ctime, nsems }
    SemInfo { semmap, semmni, semmns, semmnu, semmsl, semopm, semume, semusz, semvmx, semaem }
    MsqidDs { perm, stime, rtime, ctime, cbytes, qnum, qbytes, lspid, lrpid }
    MsgInfo { msgpool, msgmap, msgmax, msgmnb, msgmni, msgssz, msgtql, msgseg }
    ShmidDs { perm, segsz, atime, dtime, ctime, cpid, lpid, nattch }
    ShmInfo { shmmax, shmmin, shmmni, shmseg, shmall }
    ShmUsage { used_ids, shm_tot, shm_rss, shm_swp, swap_attempts, swap_successes }
    MsqidSet { uid, gid, mode, qbytes }
    ShmSet { uid, gid, mode }
    Sembuf { sem_num, sem_op, sem_flg }
    Timespec { tv_sec, tv_nsec }
    Flock { l_type, l_whence, l_start, l_len, l_pid }
}

/// A message enum's `encode_into` and `decode_from` from one table of its plain variants:
/// each is its tag byte (a constant of the caller's `tag` module), then its fields as
/// [`Wire`] values in the order listed (a braced variant with no fields is its tag alone);
/// a variant of the `wrapping` list holds one [`Wire`] value, written after the tag.
/// The variants with another encoding follow the tables as ordinary match arms, `encode`'s
/// over `self` writing into `w`, `decode`'s over the tag byte reading from `r` (any
/// other tag is [`DecodeError::UnknownTag`]). A variant of the optional `decoded` list is
/// read as a plain one is, and written by an `encode` arm: the one encoder of a request
/// that a sender which must not allocate also writes (`request::put`) is its `put_*`
/// function. The encoding match must stay exhaustive, so a variant missing from the tables
/// and the arms does not compile.
macro_rules! wire_enum {
    (
        $enum:ident {
            $($tag:ident => $variant:ident { $($field:ident),* },)*
        }
        wrapping {
            $($wtag:ident => $wvariant:ident,)*
        }
        $(decoded {
            $($dtag:ident => $dvariant:ident { $($dfield:ident),* },)*
        })?
        encode($w:ident) { $($encode:tt)* }
        decode($r:ident) { $($decode:tt)* }
    ) => {
        impl $enum {
            /// Writes the message bytes into `w` (a fixed buffer's writer allocates nothing).
            pub fn encode_into(&self, $w: &mut $crate::codec::Writer<'_>) {
                match self {
                    $($enum::$variant { $($field),* } => {
                        $w.u8(tag::$tag);
                        $($crate::wire::Wire::put($field, $w);)*
                    })*
                    $($enum::$wvariant(v) => {
                        $w.u8(tag::$wtag);
                        $crate::wire::Wire::put(v, $w);
                    })*
                    $($encode)*
                }
            }

            /// Reads one message (its tag, then its fields) from `r`, leaving what follows.
            fn decode_from(
                $r: &mut $crate::codec::Reader<'_>,
            ) -> Result<$enum, $crate::codec::DecodeError> {
                Ok(match $r.u8()? {
                    $(tag::$tag => $enum::$variant {
                        $($field: $crate::wire::Wire::get($r)?),*
                    },)*
                    $(tag::$wtag => $enum::$wvariant($crate::wire::Wire::get($r)?),)*
                    $($(tag::$dtag => $enum::$dvariant {
                        $($dfield: $crate::wire::Wire::get($r)?),*
                    },)*)?
                    $($decode)*
                    t => return Err($crate::codec::DecodeError::UnknownTag(t)),
                })
            }
        }
    };
}

pub(crate) use wire_enum;
pub(crate) use wire_nested;

/// Writes an option: 0, or 1 and the value as `each` writes it.
pub(crate) fn put_option<T>(
    w: &mut Writer<'_>,
    v: &Option<T>,
    each: impl FnOnce(&mut Writer<'_>, &T),
) {
    match v {
        None => w.u8(0),
        Some(x) => {
            w.u8(1);
            each(w, x);
        }
    }
}

/// Reads an option written by [`put_option`], the value as `each` reads it.
pub(crate) fn get_option<'a, T>(
    r: &mut Reader<'a>,
    each: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => each(r).map(Some),
        _ => Err(DecodeError::BadValue("option")),
    }
}

impl<T: Wire> Wire for Option<T> {
    fn put(&self, w: &mut Writer<'_>) {
        put_option(w, self, |w, v| v.put(w));
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        get_option(r, T::get)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_is_its_fields_in_order_and_an_option_a_flag_byte_first() {
        let f = Flock {
            l_type: 1,
            l_whence: 2,
            l_start: 3,
            l_len: 4,
            l_pid: 5,
        };
        let bytes = Writer::encoded(|w| Some(f).put(w));
        let mut want = vec![1u8];
        want.extend_from_slice(&1i16.to_le_bytes());
        want.extend_from_slice(&2i16.to_le_bytes());
        want.extend_from_slice(&3i64.to_le_bytes());
        want.extend_from_slice(&4i64.to_le_bytes());
        want.extend_from_slice(&5i32.to_le_bytes());
        assert_eq!(bytes, want);
        let mut r = Reader::new(&bytes);
        assert_eq!(Option::<Flock>::get(&mut r), Ok(Some(f)));
        assert_eq!(
            Option::<Flock>::get(&mut Reader::new(&[2])),
            Err(DecodeError::BadValue("option"))
        );
    }
}
