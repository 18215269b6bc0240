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
use crate::wire::Wire;
use uipc_abi::ipc::msg::{MsgInfo, MsqidDs};
use uipc_abi::ipc::sem::{SemInfo, SemidDs};
use uipc_abi::ipc::shm::{ShmInfo, ShmUsage, ShmidDs};

/// One response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// The daemon accepts the session and speaks `version`.
    Hello { version: u32 },
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

/// A response of a return value and a struct (the *ctl calls' STAT and INFO commands).
fn put_ret_and(w: &mut Writer<'_>, tag: u8, ret: i32, v: &impl Wire) {
    w.u8(tag);
    w.i32(ret);
    v.put(w);
}

impl Response {
    /// The message bytes (without the frame header).
    pub fn encode(&self) -> Vec<u8> {
        Writer::encoded(|w| self.encode_into(w))
    }

    /// Writes the message bytes into `w`.
    pub fn encode_into(&self, w: &mut Writer<'_>) {
        match self {
            Response::Hello { version } => {
                w.u8(tag::HELLO);
                w.u32(*version);
            }
            Response::Error(e) => {
                w.u8(tag::ERROR);
                w.i32(*e);
            }
            Response::Ret(v) => {
                w.u8(tag::RET);
                w.i64(*v);
            }
            Response::SemStat { ret, ds } => put_ret_and(w, tag::SEM_STAT, *ret, ds),
            Response::SemInfo { ret, info } => put_ret_and(w, tag::SEM_INFO, *ret, info),
            Response::SemAll(vals) => {
                w.u8(tag::SEM_ALL);
                w.list(vals, |w, v| w.u16(*v));
            }
            Response::MsgStat { ret, ds } => put_ret_and(w, tag::MSG_STAT, *ret, ds),
            Response::MsgInfo { ret, info } => put_ret_and(w, tag::MSG_INFO, *ret, info),
            Response::Msg { mtype, text } => {
                w.u8(tag::MSG);
                w.i64(*mtype);
                w.bytes(text);
            }
            Response::ShmStat { ret, ds } => put_ret_and(w, tag::SHM_STAT, *ret, ds),
            Response::ShmInfo { ret, info } => put_ret_and(w, tag::SHM_INFO, *ret, info),
            Response::ShmUsage { ret, usage } => put_ret_and(w, tag::SHM_USAGE, *ret, usage),
            Response::ShmAttached {
                shmid,
                addr,
                size,
                len,
                read_only,
            } => {
                w.u8(tag::SHM_ATTACHED);
                w.i32(*shmid);
                w.u64(*addr);
                w.u64(*size);
                w.u64(*len);
                w.bool(*read_only);
            }
            Response::Lock(lock) => {
                w.u8(tag::LOCK);
                lock.encode_into(w);
            }
            Response::Text(text) => {
                w.u8(tag::TEXT);
                w.bytes(text);
            }
        }
    }

    /// Decodes a whole message; any malformed input is an error.
    pub fn decode(buf: &[u8]) -> Result<Response, DecodeError> {
        ResponseView::decode(buf).map(ResponseView::into_owned)
    }

    /// Decodes the responses [`ResponseView`] does not borrow from (the others are its).
    fn decode_fixed(buf: &[u8]) -> Result<Response, DecodeError> {
        let mut r = Reader::new(buf);
        let resp = match r.u8()? {
            tag::HELLO => Response::Hello { version: r.u32()? },
            tag::ERROR => Response::Error(r.i32()?),
            tag::RET => Response::Ret(r.i64()?),
            tag::SEM_STAT => Response::SemStat {
                ret: r.i32()?,
                ds: Wire::get(&mut r)?,
            },
            tag::SEM_INFO => Response::SemInfo {
                ret: r.i32()?,
                info: Wire::get(&mut r)?,
            },
            tag::MSG_STAT => Response::MsgStat {
                ret: r.i32()?,
                ds: Wire::get(&mut r)?,
            },
            tag::MSG_INFO => Response::MsgInfo {
                ret: r.i32()?,
                info: Wire::get(&mut r)?,
            },
            tag::SHM_STAT => Response::ShmStat {
                ret: r.i32()?,
                ds: Wire::get(&mut r)?,
            },
            tag::SHM_INFO => Response::ShmInfo {
                ret: r.i32()?,
                info: Wire::get(&mut r)?,
            },
            tag::SHM_USAGE => Response::ShmUsage {
                ret: r.i32()?,
                usage: Wire::get(&mut r)?,
            },
            tag::SHM_ATTACHED => Response::ShmAttached {
                shmid: r.i32()?,
                addr: r.u64()?,
                size: r.u64()?,
                len: r.u64()?,
                read_only: r.bool()?,
            },
            tag::LOCK => Response::Lock(crate::locks::LockResponse::decode_from(&mut r)?),
            tag::TEXT => Response::Text(r.bytes()?),
            t => return Err(DecodeError::UnknownTag(t)),
        };
        r.finish()?;
        Ok(resp)
    }
}
