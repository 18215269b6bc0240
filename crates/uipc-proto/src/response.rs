//! Responses, daemon to client: one per request (except [`crate::Request::Cancel`]).
//!
//! `ShmAttached` travels with the segment's memfd as SCM_RIGHTS ancillary data on the same
//! `sendmsg`; the other responses carry no descriptor.
//!
//! [`ResponseView::decode`] decodes without allocating (for the preload library, which may run
//! in a signal handler): the two responses with data of any length (a message's text,
//! GETALL's values) borrow it from the frame, and every other response but a lock listing
//! holds only fixed-size fields (and a `/proc` text). [`Response::decode`] is the same decoder, copying.

use crate::codec::{DecodeError, Reader, Writer};
use crate::tag::response as tag;
use crate::wire::wire_enum;
use uipc_abi::ipc::msg::{MsgInfo, MsqidDs};
use uipc_abi::ipc::sem::{SemInfo, SemidDs};
use uipc_abi::ipc::shm::{ShmInfo, ShmUsage, ShmidDs};

/// One response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// The daemon accepts the session and speaks `version`. `pid`: the caller as the daemon
    /// numbers it. `area`: for a Hello that asked for a lock area, 0 when its memfd comes with
    /// this reply, else the errno the area's own request would have given (ENOSYS: the daemon
    /// has none); 0 when none was asked.
    Hello { version: u32, pid: i32, area: i32 },
    /// The call failed with this errno.
    Error(i32),
    /// The call's return value.
    Ret(i64),
    /// IPC_STAT / SEM_STAT / SEM_STAT_ANY.
    SemStat { ret: i32, ds: SemidDs },
    /// IPC_INFO / SEM_INFO.
    SemInfo { ret: i32, info: SemInfo },
    /// GETALL's values.
    SemAll(Vec<u16>),
    /// IPC_STAT / MSG_STAT / MSG_STAT_ANY.
    MsgStat { ret: i32, ds: MsqidDs },
    /// IPC_INFO / MSG_INFO.
    MsgInfo { ret: i32, info: MsgInfo },
    /// A received message.
    Msg { mtype: i64, text: Vec<u8> },
    /// IPC_STAT / SHM_STAT / SHM_STAT_ANY.
    ShmStat { ret: i32, ds: ShmidDs },
    /// IPC_INFO on shm.
    ShmInfo { ret: i32, info: ShmInfo },
    /// SHM_INFO.
    ShmUsage { ret: i32, usage: ShmUsage },
    /// shmat succeeded; the memfd comes with this message.
    ShmAttached {
        shmid: i32,
        /// The attach address recorded (the caller's, or a placeholder to replace with
        /// [`crate::Request::ShmMoved`] once mapped).
        addr: u64,
        size: u64,
        /// Length to map: `size` rounded up to whole pages.
        len: u64,
        read_only: bool,
    },
    /// A file-lock answer ([`crate::locks`]).
    Lock(crate::locks::LockResponse),
    /// A `/proc` file's text ([`crate::procfs`]).
    Text(Vec<u8>),
}

/// A response decoded without copying its variable-length data out of the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseView<'a> {
    /// [`Response::Msg`], its text borrowed.
    Msg {
        /// The message's type.
        mtype: i64,
        /// The message's text.
        text: &'a [u8],
    },
    /// [`Response::SemAll`], the values borrowed as they travel: a little-endian u16 each,
    /// which is the layout of GETALL's `unsigned short` array on little-endian machines.
    SemAll(&'a [u8]),
    /// Any other response. None of them allocates in decoding, except a lock listing
    /// ([`crate::LockResponse::List`]) and a `/proc` text.
    Other(Response),
}

impl<'a> ResponseView<'a> {
    /// Decodes a whole message; any malformed input is an error.
    pub fn decode(buf: &'a [u8]) -> Result<ResponseView<'a>, DecodeError> {
        let mut r = Reader::new(buf);
        let view = match r.u8()? {
            tag::MSG => ResponseView::Msg {
                mtype: r.i64()?,
                text: r.bytes_ref()?,
            },
            tag::SEM_ALL => ResponseView::SemAll(r.list_ref(2)?),
            _ => return Response::decode_fixed(buf).map(ResponseView::Other),
        };
        r.finish()?;
        Ok(view)
    }

    /// The owned response.
    pub fn into_owned(self) -> Response {
        match self {
            ResponseView::Msg { mtype, text } => Response::Msg {
                mtype,
                text: text.to_vec(),
            },
            ResponseView::SemAll(values) => Response::SemAll(
                values
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            ResponseView::Other(resp) => resp,
        }
    }
}

wire_enum! {
    Response {
        HELLO => Hello { version, pid, area },
        SEM_STAT => SemStat { ret, ds },
        SEM_INFO => SemInfo { ret, info },
        MSG_STAT => MsgStat { ret, ds },
        MSG_INFO => MsgInfo { ret, info },
        MSG => Msg { mtype, text },
        SHM_STAT => ShmStat { ret, ds },
        SHM_INFO => ShmInfo { ret, info },
        SHM_USAGE => ShmUsage { ret, usage },
        SHM_ATTACHED => ShmAttached { shmid, addr, size, len, read_only },
    }
    wrapping {
        ERROR => Error,
        RET => Ret,
        LOCK => Lock,
        TEXT => Text,
    }
    encode(w) {
        Response::SemAll(vals) => {
            w.u8(tag::SEM_ALL);
            w.list(vals, |w, v| w.u16(*v));
        }
    }
    // `SemAll` is decoded by `ResponseView::decode` (which also borrows `Msg`'s text).
    decode(_r) {}
}

impl Response {
    /// The message bytes (without the frame header).
    pub fn encode(&self) -> Vec<u8> {
        Writer::encoded(|w| self.encode_into(w))
    }

    /// Decodes a whole message; any malformed input is an error.
    pub fn decode(buf: &[u8]) -> Result<Response, DecodeError> {
        ResponseView::decode(buf).map(ResponseView::into_owned)
    }

    /// Decodes a response other than `SemAll`, copying (the [`ResponseView`] of every
    /// response but `Msg` and `SemAll`).
    fn decode_fixed(buf: &[u8]) -> Result<Response, DecodeError> {
        let mut r = Reader::new(buf);
        let resp = Response::decode_from(&mut r)?;
        r.finish()?;
        Ok(resp)
    }
}
