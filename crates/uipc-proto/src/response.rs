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
use uipc_abi::ipc::msg::{MsgInfo, MsqidDs};
use uipc_abi::ipc::sem::{SemInfo, SemidDs};
use uipc_abi::ipc::shm::{ShmInfo, ShmUsage, ShmidDs};
use uipc_abi::ipc::IpcPermStat;

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

mod tag {
    pub const HELLO: u8 = 1;
    pub const ERROR: u8 = 2;
    pub const RET: u8 = 3;
    pub const SEM_STAT: u8 = 10;
    pub const SEM_INFO: u8 = 11;
    pub const SEM_ALL: u8 = 12;
    pub const MSG_STAT: u8 = 20;
    pub const MSG_INFO: u8 = 21;
    pub const MSG: u8 = 22;
    pub const SHM_STAT: u8 = 30;
    pub const SHM_INFO: u8 = 31;
    pub const SHM_USAGE: u8 = 32;
    pub const SHM_ATTACHED: u8 = 33;
    pub const LOCK: u8 = 50;
    pub const TEXT: u8 = 60;
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

fn put_perm(w: &mut Writer<'_>, p: &IpcPermStat) {
    w.i32(p.key);
    w.u32(p.uid);
    w.u32(p.gid);
    w.u32(p.cuid);
    w.u32(p.cgid);
    w.u32(p.mode);
    w.u32(p.seq);
}

fn get_perm(r: &mut Reader<'_>) -> Result<IpcPermStat, DecodeError> {
    Ok(IpcPermStat {
        key: r.i32()?,
        uid: r.u32()?,
        gid: r.u32()?,
        cuid: r.u32()?,
        cgid: r.u32()?,
        mode: r.u32()?,
        seq: r.u32()?,
    })
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
            Response::SemStat { ret, ds } => {
                w.u8(tag::SEM_STAT);
                w.i32(*ret);
                put_perm(w, &ds.perm);
                w.i64(ds.otime);
                w.i64(ds.ctime);
                w.u64(ds.nsems);
            }
            Response::SemInfo { ret, info: i } => {
                w.u8(tag::SEM_INFO);
                w.i32(*ret);
                for v in [
                    i.semmap, i.semmni, i.semmns, i.semmnu, i.semmsl, i.semopm, i.semume, i.semusz,
                    i.semvmx, i.semaem,
                ] {
                    w.i32(v);
                }
            }
            Response::SemAll(vals) => {
                w.u8(tag::SEM_ALL);
                w.list(vals, |w, v| w.u16(*v));
            }
            Response::MsgStat { ret, ds } => {
                w.u8(tag::MSG_STAT);
                w.i32(*ret);
                put_perm(w, &ds.perm);
                w.i64(ds.stime);
                w.i64(ds.rtime);
                w.i64(ds.ctime);
                w.u64(ds.cbytes);
                w.u64(ds.qnum);
                w.u64(ds.qbytes);
                w.i32(ds.lspid);
                w.i32(ds.lrpid);
            }
            Response::MsgInfo { ret, info: i } => {
                w.u8(tag::MSG_INFO);
                w.i32(*ret);
                for v in [
                    i.msgpool, i.msgmap, i.msgmax, i.msgmnb, i.msgmni, i.msgssz, i.msgtql,
                ] {
                    w.i32(v);
                }
                w.u16(i.msgseg);
            }
            Response::Msg { mtype, text } => {
                w.u8(tag::MSG);
                w.i64(*mtype);
                w.bytes(text);
            }
            Response::ShmStat { ret, ds } => {
                w.u8(tag::SHM_STAT);
                w.i32(*ret);
                put_perm(w, &ds.perm);
                w.u64(ds.segsz);
                w.i64(ds.atime);
                w.i64(ds.dtime);
                w.i64(ds.ctime);
                w.i32(ds.cpid);
                w.i32(ds.lpid);
                w.u64(ds.nattch);
            }
            Response::ShmInfo { ret, info: i } => {
                w.u8(tag::SHM_INFO);
                w.i32(*ret);
                for v in [i.shmmax, i.shmmin, i.shmmni, i.shmseg, i.shmall] {
                    w.u64(v);
                }
            }
            Response::ShmUsage { ret, usage: u } => {
                w.u8(tag::SHM_USAGE);
                w.i32(*ret);
                w.i32(u.used_ids);
                for v in [
                    u.shm_tot,
                    u.shm_rss,
                    u.shm_swp,
                    u.swap_attempts,
                    u.swap_successes,
                ] {
                    w.u64(v);
                }
            }
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
                ds: SemidDs {
                    perm: get_perm(&mut r)?,
                    otime: r.i64()?,
                    ctime: r.i64()?,
                    nsems: r.u64()?,
                },
            },
            tag::SEM_INFO => Response::SemInfo {
                ret: r.i32()?,
                info: SemInfo {
                    semmap: r.i32()?,
                    semmni: r.i32()?,
                    semmns: r.i32()?,
                    semmnu: r.i32()?,
                    semmsl: r.i32()?,
                    semopm: r.i32()?,
                    semume: r.i32()?,
                    semusz: r.i32()?,
                    semvmx: r.i32()?,
                    semaem: r.i32()?,
                },
            },
            tag::MSG_STAT => Response::MsgStat {
                ret: r.i32()?,
                ds: MsqidDs {
                    perm: get_perm(&mut r)?,
                    stime: r.i64()?,
                    rtime: r.i64()?,
                    ctime: r.i64()?,
                    cbytes: r.u64()?,
                    qnum: r.u64()?,
                    qbytes: r.u64()?,
                    lspid: r.i32()?,
                    lrpid: r.i32()?,
                },
            },
            tag::MSG_INFO => Response::MsgInfo {
                ret: r.i32()?,
                info: MsgInfo {
                    msgpool: r.i32()?,
                    msgmap: r.i32()?,
                    msgmax: r.i32()?,
                    msgmnb: r.i32()?,
                    msgmni: r.i32()?,
                    msgssz: r.i32()?,
                    msgtql: r.i32()?,
                    msgseg: r.u16()?,
                },
            },
            tag::SHM_STAT => Response::ShmStat {
                ret: r.i32()?,
                ds: ShmidDs {
                    perm: get_perm(&mut r)?,
                    segsz: r.u64()?,
                    atime: r.i64()?,
                    dtime: r.i64()?,
                    ctime: r.i64()?,
                    cpid: r.i32()?,
                    lpid: r.i32()?,
                    nattch: r.u64()?,
                },
            },
            tag::SHM_INFO => Response::ShmInfo {
                ret: r.i32()?,
                info: ShmInfo {
                    shmmax: r.u64()?,
                    shmmin: r.u64()?,
                    shmmni: r.u64()?,
                    shmseg: r.u64()?,
                    shmall: r.u64()?,
                },
            },
            tag::SHM_USAGE => Response::ShmUsage {
                ret: r.i32()?,
                usage: ShmUsage {
                    used_ids: r.i32()?,
                    shm_tot: r.u64()?,
                    shm_rss: r.u64()?,
                    shm_swp: r.u64()?,
                    swap_attempts: r.u64()?,
                    swap_successes: r.u64()?,
                },
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
