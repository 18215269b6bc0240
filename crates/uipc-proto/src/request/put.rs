//! The request encoders that take their data from iterators or borrowed slices: a sender
//! that must not allocate (the preload library) writes a request with data (semaphore
//! operations, semctl values, a message's text) straight from its caller's memory into a
//! fixed buffer, without building a [`Request`](super::Request) first. They are the only
//! encoders of these requests: `Request::encode_into` writes semtimedop, semctl and msgsnd
//! through them, so the bytes of a borrowed and an owned request are the same.

use super::{tag, SemArg};
use crate::codec::Writer;
use crate::wire::{put_option, Wire};
use uipc_abi::ipc::sem::{Sembuf, Timespec};

/// semtimedop's request with its operations taken from an iterator: a sender that reads them
/// from its caller's memory encodes them as they come, without collecting them first.
pub fn put_semtimedop(
    w: &mut Writer<'_>,
    semid: i32,
    nsops: u64,
    sops: Option<impl ExactSizeIterator<Item = Sembuf>>,
    timeout: Option<Timespec>,
) {
    w.u8(tag::SEMTIMEDOP);
    w.i32(semid);
    w.u64(nsops);
    match sops {
        None => w.u8(0),
        Some(ops) => {
            w.u8(1);
            w.list_of(ops, |w, b| b.put(w));
        }
    }
    timeout.put(w);
}

/// semctl's request up to its argument, which follows: [`put_sem_arg`] or
/// [`put_sem_arg_array`].
pub fn put_semctl_head(w: &mut Writer<'_>, semid: i32, semnum: i32, cmd: i32) {
    w.u8(tag::SEMCTL);
    w.i32(semid);
    w.i32(semnum);
    w.i32(cmd);
}

/// semctl's argument.
pub fn put_sem_arg(w: &mut Writer<'_>, arg: &SemArg) {
    match arg {
        SemArg::None => w.u8(0),
        SemArg::Val(v) => {
            w.u8(1);
            w.i32(*v);
        }
        SemArg::Array(a) => put_sem_arg_array(w, a.iter().copied()),
        SemArg::Set { uid, gid, mode } => {
            w.u8(3);
            w.u32(*uid);
            w.u32(*gid);
            w.u32(*mode);
        }
    }
}

/// semctl's [`SemArg::Array`] with its values taken from an iterator.
pub fn put_sem_arg_array(w: &mut Writer<'_>, values: impl ExactSizeIterator<Item = u16>) {
    w.u8(2);
    w.list_of(values, |w, v| w.u16(v));
}

/// msgsnd's request with its text borrowed.
pub fn put_msgsnd(
    w: &mut Writer<'_>,
    msqid: i32,
    mtype: i64,
    msgsz: u64,
    text: Option<&[u8]>,
    flags: i32,
) {
    w.u8(tag::MSGSND);
    w.i32(msqid);
    w.i64(mtype);
    w.u64(msgsz);
    put_option(w, &text, |w, t| w.bytes(t));
    w.i32(flags);
}
