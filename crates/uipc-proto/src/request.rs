//! Requests, client to daemon: one variant per SysV IPC call, plus the session's own
//! (hello, cancel, fork, the shm mapping bookkeeping).
//!
//! A request carries the call's arguments as the client read them from its caller's memory.
//! Where reading failed (a bad pointer) or the data cannot travel (more semaphore operations
//! than [`MAX_SOPS`]), the argument is absent and the daemon answers with the errno Linux
//! gives at that point of its checks (E2BIG or EINVAL before EFAULT, as the kernel copies the
//! user buffer only after its size and id checks).

use crate::codec::{DecodeError, Reader, Writer};
use crate::tag::request as tag;
use crate::wire::{get_option, Wire};
use uipc_abi::ipc::msg::MsqidSet;
use uipc_abi::ipc::sem::{Sembuf, Timespec};
use uipc_abi::ipc::shm::ShmSet;

/// The most semaphore operations one request carries.
pub const MAX_SOPS: u64 = 1 << 16;
/// The longest message text one request carries.
pub const MAX_TEXT: u64 = 8 << 20;

/// semctl's fourth argument as the client read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SemArg {
    /// No argument, or one the client could not read (the engine answers EFAULT for a
    /// command that needs it).
    None,
    /// SETVAL.
    Val(i32),
    /// SETALL's values.
    Array(Vec<u16>),
    /// IPC_SET's fields.
    Set {
        /// New owner.
        uid: u32,
        /// New group.
        gid: u32,
        /// New mode.
        mode: u32,
    },
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// First message of every connection.
    Hello {
        /// [`crate::VERSION`] of the client.
        version: u32,
        /// The first connection since the library was loaded into a new program image: if the
        /// daemon already knows this process, the process has called execve.
        new_image: bool,
    },
    /// The client was interrupted by a signal while waiting for the reply to a blocking call.
    /// The daemon ends that call (EINTR unless it completed) and sends its reply; `Cancel`
    /// itself gets no reply.
    Cancel,
    /// semget(2).
    Semget { key: i32, nsems: i32, flag: i32 },
    /// semtimedop(2) (semop(2) without a timeout). `sops` is `None` when the client could not
    /// read `nsops` operations.
    Semtimedop {
        semid: i32,
        nsops: u64,
        sops: Option<Vec<Sembuf>>,
        timeout: Option<Timespec>,
    },
    /// The number of semaphores in a set (to know how many SETALL values to read).
    SemNsems { semid: i32 },
    /// semctl(2).
    Semctl {
        semid: i32,
        semnum: i32,
        cmd: i32,
        arg: SemArg,
    },
    /// msgget(2).
    Msgget { key: i32, flag: i32 },
    /// msgsnd(2). `text` is `None` when the client could not read `msgsz` bytes.
    Msgsnd {
        msqid: i32,
        mtype: i64,
        msgsz: u64,
        text: Option<Vec<u8>>,
        flags: i32,
    },
    /// msgrcv(2).
    Msgrcv {
        msqid: i32,
        maxsize: i64,
        msgtyp: i64,
        flags: i32,
    },
    /// msgctl(2). `set` is IPC_SET's buffer (`None` if unreadable or another command).
    Msgctl {
        msqid: i32,
        cmd: i32,
        set: Option<MsqidSet>,
    },
    /// shmget(2).
    Shmget { key: i32, size: u64, flag: i32 },
    /// shmat(2). The reply carries the segment's memfd.
    Shmat { shmid: i32, addr: u64, flags: i32 },
    /// After an attach at address 0: the client mapped the segment at `to`, not at the
    /// placeholder address `from` the daemon recorded.
    ShmMoved { from: u64, to: u64 },
    /// shmdt(2) of the attachment starting at `addr`.
    Shmdt { addr: u64 },
    /// remap_file_pages(2) inside the attachment starting at `addr`: Linux closes the old
    /// mapping of the range and maps the segment again. `last`: the range held the
    /// attachment's last mapped pages (see `IpcNamespace::shm_remap`).
    ShmRemap { addr: u64, last: bool },
    /// shmctl(2). `set` is IPC_SET's buffer.
    Shmctl {
        shmid: i32,
        cmd: i32,
        set: Option<ShmSet>,
    },
    /// Sent by a parent right after fork(2), before its child runs on: `child` inherits the
    /// parent's attachments.
    ForkChild { child: i32 },
    /// The semaphore fast path's arena of the connection's namespace: `Ret(pid)` (the
    /// caller's pid as the daemon numbers it) with the arena's memfd, or an error (ENOSYS:
    /// no fast path on this daemon).
    SemArena,
    /// A file-lock call ([`crate::locks`]); the descriptor travels beside it.
    Lock(crate::locks::LockRequest),
    /// A `/proc` view ([`crate::procfs`]).
    Proc(crate::procfs::ProcRequest),
}

mod put;

pub use put::{put_msgsnd, put_sem_arg, put_sem_arg_array, put_semctl_head, put_semtimedop};

impl Request {
    /// The message bytes (without the frame header).
    pub fn encode(&self) -> Vec<u8> {
        Writer::encoded(|w| self.encode_into(w))
    }

    /// Writes the message bytes into `w` (a fixed buffer's writer allocates nothing).
    pub fn encode_into(&self, w: &mut Writer<'_>) {
        match self {
            Request::Hello { version, new_image } => {
                w.u8(tag::HELLO);
                w.u32(*version);
                w.bool(*new_image);
            }
            Request::Cancel => w.u8(tag::CANCEL),
            Request::SemArena => w.u8(tag::SEM_ARENA),
            Request::Semget { key, nsems, flag } => {
                w.u8(tag::SEMGET);
                w.i32(*key);
                w.i32(*nsems);
                w.i32(*flag);
            }
            Request::Semtimedop {
                semid,
                nsops,
                sops,
                timeout,
            } => put_semtimedop(
                w,
                *semid,
                *nsops,
                sops.as_ref().map(|s| s.iter().copied()),
                *timeout,
            ),
            Request::SemNsems { semid } => {
                w.u8(tag::SEM_NSEMS);
                w.i32(*semid);
            }
            Request::Semctl {
                semid,
                semnum,
                cmd,
                arg,
            } => {
                put_semctl_head(w, *semid, *semnum, *cmd);
                put_sem_arg(w, arg);
            }
            Request::Msgget { key, flag } => {
                w.u8(tag::MSGGET);
                w.i32(*key);
                w.i32(*flag);
            }
            Request::Msgsnd {
                msqid,
                mtype,
                msgsz,
                text,
                flags,
            } => put_msgsnd(w, *msqid, *mtype, *msgsz, text.as_deref(), *flags),
            Request::Msgrcv {
                msqid,
                maxsize,
                msgtyp,
                flags,
            } => {
                w.u8(tag::MSGRCV);
                w.i32(*msqid);
                w.i64(*maxsize);
                w.i64(*msgtyp);
                w.i32(*flags);
            }
            Request::Msgctl { msqid, cmd, set } => {
                w.u8(tag::MSGCTL);
                w.i32(*msqid);
                w.i32(*cmd);
                set.put(w);
            }
            Request::Shmget { key, size, flag } => {
                w.u8(tag::SHMGET);
                w.i32(*key);
                w.u64(*size);
                w.i32(*flag);
            }
            Request::Shmat { shmid, addr, flags } => {
                w.u8(tag::SHMAT);
                w.i32(*shmid);
                w.u64(*addr);
                w.i32(*flags);
            }
            Request::ShmMoved { from, to } => {
                w.u8(tag::SHM_MOVED);
                w.u64(*from);
                w.u64(*to);
            }
            Request::Shmdt { addr } => {
                w.u8(tag::SHMDT);
                w.u64(*addr);
            }
            Request::ShmRemap { addr, last } => {
                w.u8(tag::SHM_REMAP);
                w.u64(*addr);
                w.bool(*last);
            }
            Request::Shmctl { shmid, cmd, set } => {
                w.u8(tag::SHMCTL);
                w.i32(*shmid);
                w.i32(*cmd);
                set.put(w);
            }
            Request::ForkChild { child } => {
                w.u8(tag::FORK_CHILD);
                w.i32(*child);
            }
            Request::Lock(lock) => {
                w.u8(tag::LOCK);
                lock.encode_into(w);
            }
            Request::Proc(p) => {
                w.u8(tag::PROC);
                p.encode_into(w);
            }
        }
    }

    /// Decodes a whole message; any malformed input is an error.
    pub fn decode(buf: &[u8]) -> Result<Request, DecodeError> {
        let mut r = Reader::new(buf);
        let req = match r.u8()? {
            tag::HELLO => Request::Hello {
                version: r.u32()?,
                new_image: r.bool()?,
            },
            tag::CANCEL => Request::Cancel,
            tag::SEM_ARENA => Request::SemArena,
            tag::SEMGET => Request::Semget {
                key: r.i32()?,
                nsems: r.i32()?,
                flag: r.i32()?,
            },
            tag::SEMTIMEDOP => Request::Semtimedop {
                semid: r.i32()?,
                nsops: r.u64()?,
                sops: get_option(&mut r, |r| r.list(6, Sembuf::get))?,
                timeout: Wire::get(&mut r)?,
            },
            tag::SEM_NSEMS => Request::SemNsems { semid: r.i32()? },
            tag::SEMCTL => Request::Semctl {
                semid: r.i32()?,
                semnum: r.i32()?,
                cmd: r.i32()?,
                arg: match r.u8()? {
                    0 => SemArg::None,
                    1 => SemArg::Val(r.i32()?),
                    2 => SemArg::Array(r.list(2, |r| r.u16())?),
                    3 => SemArg::Set {
                        uid: r.u32()?,
                        gid: r.u32()?,
                        mode: r.u32()?,
                    },
                    t => return Err(DecodeError::UnknownTag(t)),
                },
            },
            tag::MSGGET => Request::Msgget {
                key: r.i32()?,
                flag: r.i32()?,
            },
            tag::MSGSND => Request::Msgsnd {
                msqid: r.i32()?,
                mtype: r.i64()?,
                msgsz: r.u64()?,
                text: get_option(&mut r, |r| r.bytes())?,
                flags: r.i32()?,
            },
            tag::MSGRCV => Request::Msgrcv {
                msqid: r.i32()?,
                maxsize: r.i64()?,
                msgtyp: r.i64()?,
                flags: r.i32()?,
            },
            tag::MSGCTL => Request::Msgctl {
                msqid: r.i32()?,
                cmd: r.i32()?,
                set: Wire::get(&mut r)?,
            },
            tag::SHMGET => Request::Shmget {
                key: r.i32()?,
                size: r.u64()?,
                flag: r.i32()?,
            },
            tag::SHMAT => Request::Shmat {
                shmid: r.i32()?,
                addr: r.u64()?,
                flags: r.i32()?,
            },
            tag::SHM_MOVED => Request::ShmMoved {
                from: r.u64()?,
                to: r.u64()?,
            },
            tag::SHMDT => Request::Shmdt { addr: r.u64()? },
            tag::SHM_REMAP => Request::ShmRemap {
                addr: r.u64()?,
                last: r.bool()?,
            },
            tag::SHMCTL => Request::Shmctl {
                shmid: r.i32()?,
                cmd: r.i32()?,
                set: Wire::get(&mut r)?,
            },
            tag::FORK_CHILD => Request::ForkChild { child: r.i32()? },
            tag::LOCK => Request::Lock(crate::locks::LockRequest::decode_from(&mut r)?),
            tag::PROC => Request::Proc(crate::procfs::ProcRequest::decode_from(&mut r)?),
            t => return Err(DecodeError::UnknownTag(t)),
        };
        r.finish()?;
        Ok(req)
    }

    /// Whether the daemon may sleep serving this request (a Cancel can end it early).
    pub fn may_block(&self) -> bool {
        const IPC_NOWAIT: i32 = uipc_abi::ipc::consts::IPC_NOWAIT;
        match self {
            Request::Semtimedop { sops, .. } => sops
                .as_ref()
                .is_some_and(|s| s.iter().any(|b| i32::from(b.sem_flg) & IPC_NOWAIT == 0)),
            Request::Msgsnd { flags, .. } | Request::Msgrcv { flags, .. } => {
                flags & IPC_NOWAIT == 0
            }
            Request::Lock(lock) => lock.may_block(),
            _ => false,
        }
    }
}
