//! The `/proc` views: the preload library asks the daemon for the text of a `/proc` file
//! that shows SysV IPC state (`/proc/sysvipc/{sem,msg,shm}`, `/proc/locks`, the IPC files of
//! `/proc/sys/kernel`), and for writes to the IPC sysctls.
//!
//! A read answers [`crate::Response::Text`] (the whole file, as the kernel would print it for
//! the caller's namespace) or an errno. [`ProcRequest::MayWrite`] is the check Linux makes when
//! such a sysctl file is opened for writing (the file's mode as `ipc_permissions` computes it
//! for the caller); [`ProcRequest::Write`] is one `write(2)` of the text to it.

use crate::codec::{DecodeError, Reader, Writer};
use crate::tag::procfs as tag;
use uipc_abi::ipc::Sysctl;

/// A file the daemon renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcFile {
    /// `/proc/sysvipc/sem`.
    SysvSem,
    /// `/proc/sysvipc/msg`.
    SysvMsg,
    /// `/proc/sysvipc/shm`.
    SysvShm,
    /// uipc's part of `/proc/locks` (numbered from 1; the client adds the kernel's lines).
    Locks,
    /// `/proc/sys/kernel/NAME`.
    Sysctl(Sysctl),
}

/// One `/proc` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcRequest {
    /// The file's whole text.
    Read(ProcFile),
    /// May the caller open this sysctl for writing? `Ret(0)` or EACCES.
    MayWrite(Sysctl),
    /// One write of `text` to the sysctl.
    Write(Sysctl, Vec<u8>),
}

fn put_sysctl(w: &mut Writer<'_>, s: Sysctl) {
    w.u8(code_of(s));
}

fn get_sysctl(r: &mut Reader<'_>) -> Result<Sysctl, DecodeError> {
    Sysctl::ALL
        .get(usize::from(r.u8()?))
        .copied()
        .ok_or(DecodeError::BadValue("sysctl"))
}

/// A sysctl's wire code: its index in [`Sysctl::ALL`].
pub fn code_of(s: Sysctl) -> u8 {
    Sysctl::ALL.iter().position(|&x| x == s).unwrap_or(0) as u8
}

impl ProcRequest {
    /// Appends the message's fields (after the outer tag).
    pub fn encode_into(&self, w: &mut Writer<'_>) {
        match self {
            ProcRequest::Read(file) => {
                w.u8(tag::READ);
                match file {
                    ProcFile::SysvSem => w.u8(tag::SYSV_SEM),
                    ProcFile::SysvMsg => w.u8(tag::SYSV_MSG),
                    ProcFile::SysvShm => w.u8(tag::SYSV_SHM),
                    ProcFile::Locks => w.u8(tag::LOCKS),
                    ProcFile::Sysctl(s) => {
                        w.u8(tag::SYSCTL);
                        put_sysctl(w, *s);
                    }
                }
            }
            ProcRequest::MayWrite(s) => {
                w.u8(tag::MAY_WRITE);
                put_sysctl(w, *s);
            }
            ProcRequest::Write(s, text) => {
                w.u8(tag::WRITE);
                put_sysctl(w, *s);
                w.bytes(text);
            }
        }
    }

    /// Reads the message's fields (after the outer tag).
    pub fn decode_from(r: &mut Reader<'_>) -> Result<ProcRequest, DecodeError> {
        Ok(match r.u8()? {
            tag::READ => ProcRequest::Read(match r.u8()? {
                tag::SYSV_SEM => ProcFile::SysvSem,
                tag::SYSV_MSG => ProcFile::SysvMsg,
                tag::SYSV_SHM => ProcFile::SysvShm,
                tag::LOCKS => ProcFile::Locks,
                tag::SYSCTL => ProcFile::Sysctl(get_sysctl(r)?),
                t => return Err(DecodeError::UnknownTag(t)),
            }),
            tag::MAY_WRITE => ProcRequest::MayWrite(get_sysctl(r)?),
            tag::WRITE => ProcRequest::Write(get_sysctl(r)?, r.bytes()?),
            t => return Err(DecodeError::UnknownTag(t)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Request, Response};

    #[test]
    fn requests_round_trip() {
        let mut all = vec![
            ProcRequest::Read(ProcFile::SysvSem),
            ProcRequest::Read(ProcFile::SysvMsg),
            ProcRequest::Read(ProcFile::SysvShm),
            ProcRequest::Read(ProcFile::Locks),
        ];
        for s in Sysctl::ALL {
            all.push(ProcRequest::Read(ProcFile::Sysctl(s)));
            all.push(ProcRequest::MayWrite(s));
            all.push(ProcRequest::Write(s, b"12 34\n".to_vec()));
        }
        for p in all {
            let req = Request::Proc(p);
            assert_eq!(Request::decode(&req.encode()).unwrap(), req);
            assert!(!req.may_block());
        }
        let text = Response::Text(b"key\n".to_vec());
        assert_eq!(Response::decode(&text.encode()).unwrap(), text);
    }

    #[test]
    fn names_map_both_ways() {
        for s in Sysctl::ALL {
            assert_eq!(Sysctl::by_name(s.name()), Some(s));
            assert_eq!(Sysctl::ALL[usize::from(code_of(s))], s);
        }
        assert_eq!(Sysctl::by_name("shmmaxx"), None);
        let mut w = Writer::new();
        w.u8(tag::MAY_WRITE);
        w.u8(Sysctl::ALL.len() as u8);
        let buf = w.finish();
        assert!(ProcRequest::decode_from(&mut Reader::new(&buf)).is_err());
    }
}
