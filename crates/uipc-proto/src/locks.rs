//! File-lock messages: fcntl's lock commands, flock(2), a descriptor's close, and the listing
//! `uipc locks` prints. They travel inside [`crate::Request::Lock`] and
//! [`crate::Response::Lock`] (one tag each in the outer enums, so the lock messages grow here
//! without touching the IPC ones).
//!
//! The descriptor a call acts through travels beside the message as SCM_RIGHTS (one per
//! frame); a frame without one means the client's descriptor was not open, and the daemon
//! answers EBADF where Linux would. The daemon reads everything else it needs about the file
//! (device and inode, access mode, offset, size) from its copy of the descriptor, and tells
//! open file descriptions apart with `kcmp(KCMP_FILE)`.

use crate::codec::{DecodeError, Reader, Writer};
use crate::tag::locks as tag;
use crate::wire::{wire_nested, Wire};
use uipc_abi::locks::{Flock, F_OFD_SETLK, F_OFD_SETLKW, F_SETLK, F_SETLKW, LOCK_MAND, LOCK_NB};

/// A file-lock request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockRequest {
    /// `fcntl(fd, cmd, &flock)` for one of the six lock commands. `flock` is `None` when the
    /// client could not read the caller's `struct flock` (EFAULT).
    Fcntl { cmd: i32, flock: Option<Flock> },
    /// `flock(fd, cmd)`.
    Flock { cmd: i32 },
    /// The client is about to close the descriptor sent with this message (close, dup2 or
    /// dup3 over it, fclose): the process's POSIX locks on its file go, and the description's
    /// OFD and flock locks too if no process holds it open any more once the close is done.
    /// `fd` is the descriptor's number in the client (not counted as a remaining reference).
    Close { fd: i32 },
    /// Every lock and blocked request, for `uipc locks`.
    List,
    /// The lock hints: answered with `Ret(len)` and a read-only memfd of `len` bytes, where
    /// byte [`hint_slot`] of a file is nonzero once the daemon has been asked to lock it.
    Hints,
    /// The file lock lease area: answered with `Ret(pid)` (the caller's pid as the daemon
    /// numbers it) and the area's memfd, to map shared and writable; ENOSYS if the daemon has
    /// none.
    Leases,
    /// The flock lease slots: answered as [`LockRequest::Leases`] is, with the slots' memfd.
    FlockSlots,
    /// The client is about to exec, and the descriptor sent with this message (number `fd`
    /// in the client) is close-on-exec: if the exec succeeds, the kernel closes it, which
    /// drops the process's POSIX locks on its file. The daemon keeps the descriptor and drops
    /// those locks once it sees `fd` no longer refers to that description in the client.
    ExecClose { fd: i32 },
    /// The client's exec failed: the descriptors of its [`LockRequest::ExecClose`] stay open
    /// and its locks stay.
    ExecFailed,
    /// The `lock:` lines of `/proc/PID/fdinfo/FD` for the descriptor sent with this message
    /// (the reader's copy of FD's description): process `pid`'s POSIX locks on its file (0:
    /// the caller's) and the description's OFD and flock locks, answered with `Text`.
    FdInfo { pid: i32 },
}

/// How many bytes the lock hints have.
pub const HINT_SLOTS: usize = 1 << 16;

/// The byte of the lock hints that stands for the file (`st_dev`, `st_ino`). A zero byte
/// means no lock was ever asked for on any file that maps there, so closing a descriptor of
/// the file cannot drop a lock and the client need not tell the daemon.
pub fn hint_slot(dev: u64, ino: u64) -> usize {
    let h = (dev.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ino).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (h >> 48) as usize % HINT_SLOTS
}

/// Maps the lock hints' memfd `fd` whole and shared, with protection `prot` (clients:
/// `PROT_READ`); `None` if the kernel refuses (a read-only descriptor mapped writable, for
/// one). The mapping lives until unmapped (`munmap` of [`HINT_SLOTS`] bytes).
pub fn map_hints(fd: std::os::fd::RawFd, prot: libc::c_int) -> Option<std::ptr::NonNull<u8>> {
    // SAFETY: a new shared mapping of the descriptor; nothing existing is touched, and the
    // result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            HINT_SLOTS,
            prot,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    std::ptr::NonNull::new(p.cast())
}

/// One lock or blocked request in a listing (the engine's `LockInfo`, flattened).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockLine {
    /// 0 POSIX, 1 OFD, 2 flock.
    pub kind: u8,
    /// `F_RDLCK` or `F_WRLCK`.
    pub l_type: i16,
    /// The pid that set it.
    pub pid: i32,
    /// The file's `st_dev`.
    pub dev: u64,
    /// The file's `st_ino`.
    pub ino: u64,
    /// First byte.
    pub start: i64,
    /// Last byte, inclusive (`i64::MAX`: to EOF).
    pub end: i64,
    /// For a blocked request, the line it waits behind.
    pub blocked_behind: Option<u32>,
}

/// A file-lock response (errors and plain return values use the outer `Error` and `Ret`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockResponse {
    /// F_GETLK / F_OFD_GETLK's answer, to copy back into the caller's `struct flock`.
    Flock(Flock),
    /// The listing.
    List(Vec<LockLine>),
}

wire_nested!(LockRequest, LockResponse);

impl LockRequest {
    /// Appends the message's fields (after the outer tag).
    pub fn encode_into(&self, w: &mut Writer) {
        match self {
            LockRequest::Fcntl { cmd, flock } => {
                w.u8(tag::FCNTL);
                w.i32(*cmd);
                flock.put(w);
            }
            LockRequest::Flock { cmd } => {
                w.u8(tag::FLOCK);
                w.i32(*cmd);
            }
            LockRequest::Close { fd } => {
                w.u8(tag::CLOSE);
                w.i32(*fd);
            }
            LockRequest::List => w.u8(tag::LIST),
            LockRequest::Hints => w.u8(tag::HINTS),
            LockRequest::Leases => w.u8(tag::LEASES),
            LockRequest::FlockSlots => w.u8(tag::FLOCK_SLOTS),
            LockRequest::ExecClose { fd } => {
                w.u8(tag::EXEC_CLOSE);
                w.i32(*fd);
            }
            LockRequest::ExecFailed => w.u8(tag::EXEC_FAILED),
            LockRequest::FdInfo { pid } => {
                w.u8(tag::FDINFO);
                w.i32(*pid);
            }
        }
    }

    /// Reads the message's fields (after the outer tag).
    pub fn decode_from(r: &mut Reader<'_>) -> Result<LockRequest, DecodeError> {
        Ok(match r.u8()? {
            tag::FCNTL => LockRequest::Fcntl {
                cmd: r.i32()?,
                flock: Wire::get(r)?,
            },
            tag::FLOCK => LockRequest::Flock { cmd: r.i32()? },
            tag::CLOSE => LockRequest::Close { fd: r.i32()? },
            tag::LIST => LockRequest::List,
            tag::HINTS => LockRequest::Hints,
            tag::LEASES => LockRequest::Leases,
            tag::FLOCK_SLOTS => LockRequest::FlockSlots,
            tag::EXEC_CLOSE => LockRequest::ExecClose { fd: r.i32()? },
            tag::EXEC_FAILED => LockRequest::ExecFailed,
            tag::FDINFO => LockRequest::FdInfo { pid: r.i32()? },
            t => return Err(DecodeError::UnknownTag(t)),
        })
    }

    /// Whether serving it may sleep: F_SETLKW, F_OFD_SETLKW, and flock without LOCK_NB.
    pub fn may_block(&self) -> bool {
        match self {
            LockRequest::Fcntl { cmd, flock } => {
                flock.is_some() && (*cmd == F_SETLKW || *cmd == F_OFD_SETLKW)
            }
            LockRequest::Flock { cmd } => cmd & (LOCK_NB | LOCK_MAND) == 0,
            _ => false,
        }
    }

    /// The same request without sleeping (F_SETLK, F_OFD_SETLK, LOCK_NB), for a request that
    /// [`LockRequest::may_block`]. It fails with EAGAIN where the original would sleep.
    pub fn without_sleeping(&self) -> Option<LockRequest> {
        if !self.may_block() {
            return None;
        }
        Some(match self {
            LockRequest::Fcntl { cmd, flock } => LockRequest::Fcntl {
                cmd: if *cmd == F_SETLKW {
                    F_SETLK
                } else {
                    F_OFD_SETLK
                },
                flock: *flock,
            },
            LockRequest::Flock { cmd } => LockRequest::Flock { cmd: cmd | LOCK_NB },
            _ => return None,
        })
    }
}

impl LockResponse {
    /// Appends the message's fields (after the outer tag).
    pub fn encode_into(&self, w: &mut Writer) {
        match self {
            LockResponse::Flock(f) => {
                w.u8(tag::R_FLOCK);
                f.put(w);
            }
            LockResponse::List(lines) => {
                w.u8(tag::R_LIST);
                w.list(lines, |w, l| {
                    w.u8(l.kind);
                    w.i16(l.l_type);
                    w.i32(l.pid);
                    w.u64(l.dev);
                    w.u64(l.ino);
                    w.i64(l.start);
                    w.i64(l.end);
                    match l.blocked_behind {
                        None => w.u8(0),
                        Some(b) => {
                            w.u8(1);
                            w.u32(b);
                        }
                    }
                });
            }
        }
    }

    /// Reads the message's fields (after the outer tag).
    pub fn decode_from(r: &mut Reader<'_>) -> Result<LockResponse, DecodeError> {
        Ok(match r.u8()? {
            tag::R_FLOCK => LockResponse::Flock(Wire::get(r)?),
            tag::R_LIST => LockResponse::List(r.list(40, |r| {
                Ok(LockLine {
                    kind: r.u8()?,
                    l_type: r.i16()?,
                    pid: r.i32()?,
                    dev: r.u64()?,
                    ino: r.u64()?,
                    start: r.i64()?,
                    end: r.i64()?,
                    blocked_behind: match r.u8()? {
                        0 => None,
                        1 => Some(r.u32()?),
                        _ => return Err(DecodeError::BadValue("option")),
                    },
                })
            })?),
            t => return Err(DecodeError::UnknownTag(t)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Request, Response};
    use uipc_abi::locks::{F_GETLK, F_WRLCK, LOCK_EX, LOCK_SH};

    #[test]
    fn lock_requests_round_trip_inside_the_outer_request() {
        let fl = Flock {
            l_type: F_WRLCK,
            l_whence: 1,
            l_start: -5,
            l_len: i64::MIN,
            l_pid: 7,
        };
        for lr in [
            LockRequest::Fcntl {
                cmd: F_SETLKW,
                flock: Some(fl),
            },
            LockRequest::Fcntl {
                cmd: F_GETLK,
                flock: None,
            },
            LockRequest::Flock { cmd: LOCK_EX },
            LockRequest::Close { fd: 3 },
            LockRequest::List,
            LockRequest::Hints,
            LockRequest::Leases,
            LockRequest::FlockSlots,
            LockRequest::ExecClose { fd: 4 },
            LockRequest::ExecFailed,
            LockRequest::FdInfo { pid: 7 },
        ] {
            let req = Request::Lock(lr);
            let bytes = req.encode();
            assert_eq!(Request::decode(&bytes), Ok(req.clone()));
            for cut in 0..bytes.len() {
                assert!(Request::decode(&bytes[..cut]).is_err(), "{req:?} cut {cut}");
            }
        }
    }

    #[test]
    fn lock_responses_round_trip_inside_the_outer_response() {
        let line = LockLine {
            kind: 2,
            l_type: 0,
            pid: 42,
            dev: u64::MAX,
            ino: 9,
            start: 0,
            end: i64::MAX,
            blocked_behind: Some(3),
        };
        for lr in [
            LockResponse::Flock(Flock::new(F_WRLCK, 1, 2)),
            LockResponse::List(vec![]),
            LockResponse::List(vec![
                line.clone(),
                LockLine {
                    blocked_behind: None,
                    ..line
                },
            ]),
        ] {
            let resp = Response::Lock(lr);
            let bytes = resp.encode();
            assert_eq!(Response::decode(&bytes), Ok(resp.clone()));
            for cut in 0..bytes.len() {
                assert!(Response::decode(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn hint_slots_stay_in_range_and_spread() {
        let mut seen = std::collections::HashSet::new();
        for ino in 0..1000u64 {
            let slot = hint_slot(0xfe00, ino);
            assert!(slot < HINT_SLOTS);
            seen.insert(slot);
        }
        assert!(seen.len() > 990, "{}", seen.len());
        assert_eq!(hint_slot(1, 2), hint_slot(1, 2));
    }

    #[test]
    fn only_waiting_commands_may_block_and_their_quick_form_does_not() {
        let fl = Some(Flock::new(F_WRLCK, 0, 0));
        let setlkw = LockRequest::Fcntl {
            cmd: F_SETLKW,
            flock: fl,
        };
        assert!(setlkw.may_block());
        assert_eq!(
            setlkw.without_sleeping(),
            Some(LockRequest::Fcntl {
                cmd: F_SETLK,
                flock: fl
            })
        );
        let ofd = LockRequest::Fcntl {
            cmd: F_OFD_SETLKW,
            flock: fl,
        };
        assert_eq!(
            ofd.without_sleeping(),
            Some(LockRequest::Fcntl {
                cmd: F_OFD_SETLK,
                flock: fl
            })
        );
        // An unreadable struct fails with EFAULT at once.
        assert!(!LockRequest::Fcntl {
            cmd: F_SETLKW,
            flock: None
        }
        .may_block());
        assert!(!LockRequest::Fcntl {
            cmd: F_SETLK,
            flock: fl
        }
        .may_block());
        let sh = LockRequest::Flock { cmd: LOCK_SH };
        assert_eq!(
            sh.without_sleeping(),
            Some(LockRequest::Flock {
                cmd: LOCK_SH | LOCK_NB
            })
        );
        assert!(!LockRequest::Flock {
            cmd: LOCK_SH | LOCK_NB
        }
        .may_block());
        assert!(!LockRequest::Flock {
            cmd: LOCK_EX | LOCK_MAND
        }
        .may_block());
        assert!(!LockRequest::Close { fd: 0 }.may_block());
        assert!(!LockRequest::List.may_block());
    }
}
