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
use crate::wire::{get_option, wire_enum, Wire};
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

/// The lock area a [`Request::Hello`] asks for: its memfd comes with the reply, as the
/// answer to the [`LockRequest`](crate::LockRequest) of the same name would bring it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum HelloArea {
    /// None.
    None = 0,
    /// [`LockRequest::Leases`](crate::LockRequest::Leases)'s.
    Leases = 1,
    /// [`LockRequest::FlockSlots`](crate::LockRequest::FlockSlots)'s.
    FlockSlots = 2,
}

impl HelloArea {
    /// The area of byte `b` (an unknown byte asks for none).
    pub fn of(b: u8) -> HelloArea {
        match b {
            1 => HelloArea::Leases,
            2 => HelloArea::FlockSlots,
            _ => HelloArea::None,
        }
    }
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
        /// A lock area the reply brings along ([`HelloArea`] as a byte), so that a new
        /// process's first lock call needs no exchange of its own for it.
        area: u8,
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

impl Wire for SemArg {
    fn put(&self, w: &mut Writer<'_>) {
        put_sem_arg(w, self);
    }
    fn get(r: &mut Reader<'_>) -> Result<SemArg, DecodeError> {
        Ok(match r.u8()? {
            0 => SemArg::None,
            1 => SemArg::Val(r.i32()?),
            2 => SemArg::Array(r.list(2, |r| r.u16())?),
            3 => SemArg::Set {
                uid: r.u32()?,
                gid: r.u32()?,
                mode: r.u32()?,
            },
            t => return Err(DecodeError::UnknownTag(t)),
        })
    }
}

wire_enum! {
    Request {
        HELLO => Hello { version, new_image, area },
        CANCEL => Cancel {},
        SEM_ARENA => SemArena {},
        SEMGET => Semget { key, nsems, flag },
        SEM_NSEMS => SemNsems { semid },
        MSGGET => Msgget { key, flag },
        MSGRCV => Msgrcv { msqid, maxsize, msgtyp, flags },
        MSGCTL => Msgctl { msqid, cmd, set },
        SHMGET => Shmget { key, size, flag },
        SHMAT => Shmat { shmid, addr, flags },
        SHM_MOVED => ShmMoved { from, to },
        SHMDT => Shmdt { addr },
        SHM_REMAP => ShmRemap { addr, last },
        SHMCTL => Shmctl { shmid, cmd, set },
        FORK_CHILD => ForkChild { child },
    }
    wrapping {
        LOCK => Lock,
        PROC => Proc,
    }
    // Written by `put`'s functions, which the preload calls with borrowed data.
    decoded {
        SEMCTL => Semctl { semid, semnum, cmd, arg },
        MSGSND => Msgsnd { msqid, mtype, msgsz, text, flags },
    }
    encode(w) {
        Request::Semtimedop { semid, nsops, sops, timeout } => {
            put_semtimedop(w, *semid, *nsops, sops.as_ref().map(|s| s.iter().copied()), *timeout)
        }
        Request::Semctl { semid, semnum, cmd, arg } => {
            put_semctl_head(w, *semid, *semnum, *cmd);
            put_sem_arg(w, arg);
        }
        Request::Msgsnd { msqid, mtype, msgsz, text, flags } => {
            put_msgsnd(w, *msqid, *mtype, *msgsz, text.as_deref(), *flags)
        }
    }
    decode(r) {
        tag::SEMTIMEDOP => Request::Semtimedop {
            semid: r.i32()?,
            nsops: r.u64()?,
            sops: get_option(r, |r| r.list(6, Sembuf::get))?,
            timeout: Wire::get(r)?,
        },
    }
}

impl Request {
    /// The message bytes (without the frame header).
    pub fn encode(&self) -> Vec<u8> {
        Writer::encoded(|w| self.encode_into(w))
    }

    /// Decodes a whole message; any malformed input is an error.
    pub fn decode(buf: &[u8]) -> Result<Request, DecodeError> {
        let mut r = Reader::new(buf);
        let req = Request::decode_from(&mut r)?;
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
