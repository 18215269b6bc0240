//! fcntl(2)'s lock commands: F_GETLK / F_SETLK / F_SETLKW and their OFD forms, with Linux's
//! checks in Linux's order (`do_fcntl`, `fcntl_getlk`, `fcntl_setlk`, §6.2-§6.6):
//!
//! 1. a bad or `O_PATH` descriptor: EBADF; an unknown command: EINVAL;
//! 2. F_GETLK only: an `l_type` other than F_RDLCK / F_WRLCK: EINVAL (F_OFD_GETLK also takes
//!    F_UNLCK, which asks about the caller's own description's locks);
//! 3. the range (`flock_range`): EINVAL / EOVERFLOW; then an unknown `l_type`: EINVAL;
//! 4. set commands: a read lock without read access or a write lock without write access: EBADF;
//! 5. OFD commands: `l_pid != 0`: EINVAL;
//! 6. the lock itself: EAGAIN on conflict, EDEADLK, EINTR, ENOLCK.
//!
//! Entry: no lock held. The set commands take the file's lock (and, to sleep, release it).

use super::file::{conflicts, Request};
use super::parked::{LockCall, ParkedLock};
use super::range::{flock_range, overlaps, reported_len};
use super::types::*;
use super::LockManager;
use crate::wait::{ParkCtx, Progress};
use crate::{Cred, Errno, Result, WaitCtx};

fn lock_type(raw: i16) -> Result<Option<LockType>> {
    match raw {
        F_RDLCK => Ok(Some(LockType::Read)),
        F_WRLCK => Ok(Some(LockType::Write)),
        F_UNLCK => Ok(None),
        _ => Err(Errno::EINVAL),
    }
}

impl LockManager {
    /// `fcntl(fd, cmd, &fl)` for the six lock commands. `fd` is `None` for a bad or `O_PATH`
    /// descriptor. The GETLK commands write their answer into `fl`: `l_type` F_UNLCK if nothing
    /// conflicts (the rest untouched), else the first conflicting lock with `l_whence` SEEK_SET,
    /// `l_len` 0 for "to EOF", and `l_pid` -1 for an OFD lock. The SETLKW commands may sleep.
    pub fn fcntl(
        &self,
        cred: &Cred,
        fd: Option<&OpenFile>,
        cmd: i32,
        fl: &mut Flock,
        ctx: &WaitCtx<'_>,
    ) -> Result<()> {
        match self.fcntl_start(cred, fd, cmd, fl, &ParkCtx::default()) {
            Progress::Done(r) => r,
            Progress::Parked(p) => p.wait(self, ctx),
        }
    }

    /// [`LockManager::fcntl`] without sleeping: a SETLKW command that must wait is queued
    /// and returned as a [`ParkedLock`], whose waiter runs `park`'s notifier when a release
    /// wakes it to retry (or `park`'s interrupt is raised).
    #[inline]
    pub fn fcntl_start(
        &self,
        cred: &Cred,
        fd: Option<&OpenFile>,
        cmd: i32,
        fl: &mut Flock,
        park: &ParkCtx,
    ) -> Progress<(), ParkedLock> {
        let Some(fd) = fd else {
            return Progress::Done(Err(Errno::EBADF));
        };
        match cmd {
            F_GETLK | F_OFD_GETLK => Progress::Done(self.getlk(cred, fd, cmd == F_OFD_GETLK, fl)),
            F_SETLK | F_SETLKW | F_OFD_SETLK | F_OFD_SETLKW => {
                let ofd = cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
                let wait = cmd == F_SETLKW || cmd == F_OFD_SETLKW;
                match self.setlk(cred, fd, ofd, fl) {
                    Ok(call) => self.request_step(call, wait, None, park),
                    Err(e) => Progress::Done(Err(e)),
                }
            }
            _ => Progress::Done(Err(Errno::EINVAL)),
        }
    }

    /// The request a fcntl lock command makes: POSIX locks belong to the process, OFD locks
    /// to the description.
    fn fcntl_request(
        cred: &Cred,
        fd: &OpenFile,
        ofd: bool,
        ty: Option<LockType>,
        (start, end): (i64, i64),
    ) -> Request {
        let (kind, owner) = if ofd {
            (LockKind::Ofd, Owner::Description(fd.ofd))
        } else {
            (LockKind::Posix, Owner::Process(cred.tgid))
        };
        Request {
            kind,
            owner,
            pid: cred.tgid,
            ty,
            start,
            end,
        }
    }

    fn getlk(&self, cred: &Cred, fd: &OpenFile, ofd: bool, fl: &mut Flock) -> Result<()> {
        if !ofd && fl.l_type != F_RDLCK && fl.l_type != F_WRLCK {
            return Err(Errno::EINVAL);
        }
        let (start, end) = flock_range(fl, fd)?;
        let ty = lock_type(fl.l_type)?;
        if ofd && fl.l_pid != 0 {
            return Err(Errno::EINVAL);
        }
        let probe = Self::fcntl_request(cred, fd, ofd, ty, (start, end));
        self.lease_enter(fd.file, cred.tgid, false);
        let found = self
            .files
            .with(fd.file, false, |_, st| {
                st.posix
                    .iter()
                    .find(|h| match ty {
                        // F_OFD_GETLK with F_UNLCK: the caller's own overlapping lock.
                        None => h.owner == probe.owner && overlaps((start, end), (h.start, h.end)),
                        Some(_) => conflicts(&probe, h),
                    })
                    .copied()
            })
            .flatten();
        self.lease_leave(fd.file, None);
        match found {
            None => fl.l_type = F_UNLCK,
            Some(h) => {
                fl.l_type = h.ty.raw();
                fl.l_whence = SEEK_SET;
                fl.l_start = h.start;
                fl.l_len = reported_len(h.start, h.end);
                fl.l_pid = if h.kind == LockKind::Ofd {
                    -1
                } else {
                    h.pid.get()
                };
            }
        }
        Ok(())
    }

    /// The checks of a set command; the request to make.
    #[inline]
    fn setlk(&self, cred: &Cred, fd: &OpenFile, ofd: bool, fl: &Flock) -> Result<LockCall> {
        let (start, end) = flock_range(fl, fd)?;
        let ty = lock_type(fl.l_type)?;
        match ty {
            Some(LockType::Read) if !fd.readable => return Err(Errno::EBADF),
            Some(LockType::Write) if !fd.writable => return Err(Errno::EBADF),
            _ => {}
        }
        if ofd && fl.l_pid != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(LockCall {
            file: fd.file,
            req: Self::fcntl_request(cred, fd, ofd, ty, (start, end)),
            flock_conversion: false,
            may_redo: false,
        })
    }
}
