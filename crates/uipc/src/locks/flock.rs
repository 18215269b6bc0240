//! flock(2) (§6.9), checks in Linux's order: `LOCK_MAND` anywhere in `cmd` returns 0 at once;
//! `cmd` without LOCK_NB must be exactly LOCK_SH, LOCK_EX or LOCK_UN (EINVAL); a bad or `O_PATH`
//! descriptor is EBADF; a lock (not an unlock) through a descriptor with neither read nor write
//! access is EBADF.
//!
//! Conversion is not atomic, as on Linux: asking for the type already held returns 0, any other
//! request first drops the description's lock (waking whoever that unblocks), then asks for the
//! new one; a failed `LOCK_EX|LOCK_NB` upgrade therefore leaves no lock.
//!
//! Entry: no lock held. Takes the file's lock (and, to sleep, releases it).

use super::file::Request;
use super::parked::{LockCall, ParkedLock};
use super::types::*;
use super::LockManager;
use crate::wait::{ParkCtx, Progress};
use crate::{Cred, Errno, Result, WaitCtx};

impl LockManager {
    /// `flock(fd, cmd)`. `fd` is `None` for a bad or `O_PATH` descriptor. Without LOCK_NB a
    /// conflicting request sleeps; with it, EWOULDBLOCK.
    pub fn flock(
        &self,
        cred: &Cred,
        fd: Option<&OpenFile>,
        cmd: i32,
        ctx: &WaitCtx<'_>,
    ) -> Result<()> {
        match self.flock_start(cred, fd, cmd, &ParkCtx::default()) {
            Progress::Done(r) => r,
            Progress::Parked(p) => p.wait(self, ctx),
        }
    }

    /// [`LockManager::flock`] without sleeping: a request that must wait is queued and
    /// returned as a [`ParkedLock`], whose waiter runs `park`'s notifier when a release wakes
    /// it to retry (or `park`'s interrupt is raised). With `flockfast::FLOCK_MAY_REDO` in
    /// `cmd`, a description that can use its file's flock lease slot is made a member of it and
    /// answered `flockfast::REDO` (ARCHITECTURE.md "flock leases").
    #[inline]
    pub fn flock_start(
        &self,
        cred: &Cred,
        fd: Option<&OpenFile>,
        cmd: i32,
        park: &ParkCtx,
    ) -> Progress<(), ParkedLock> {
        let may_redo = cmd & super::flockfast::FLOCK_MAY_REDO != 0;
        let cmd = cmd & !super::flockfast::FLOCK_MAY_REDO;
        match Self::flock_call(cred, fd, cmd) {
            Ok(Some(mut call)) => {
                call.may_redo = may_redo;
                if let (true, Owner::Description(o), Some(want)) = (
                    may_redo,
                    call.req.owner,
                    super::flockfast::Mode::of_cmd(cmd),
                ) {
                    if self.flock_register(call.file, o, call.req.pid, want) {
                        return Progress::Done(Err(super::flockfast::REDO));
                    }
                }
                self.request_step(call, cmd & LOCK_NB == 0, None, park)
            }
            Ok(None) => Progress::Done(Ok(())),
            Err(e) => Progress::Done(Err(e)),
        }
    }

    /// flock's checks: the request to make (`None`: nothing to do, LOCK_MAND).
    fn flock_call(cred: &Cred, fd: Option<&OpenFile>, cmd: i32) -> Result<Option<LockCall>> {
        if cmd & LOCK_MAND != 0 {
            return Ok(None);
        }
        let ty = match cmd & !LOCK_NB {
            LOCK_SH => Some(LockType::Read),
            LOCK_EX => Some(LockType::Write),
            LOCK_UN => None,
            _ => return Err(Errno::EINVAL),
        };
        let Some(fd) = fd else {
            return Err(Errno::EBADF);
        };
        if ty.is_some() && !fd.readable && !fd.writable {
            return Err(Errno::EBADF);
        }
        let req = Request {
            kind: LockKind::Flock,
            owner: Owner::Description(fd.ofd),
            pid: cred.tgid,
            ty,
            start: 0,
            end: OFFSET_MAX,
        };
        Ok(Some(LockCall {
            file: fd.file,
            req,
            flock_conversion: true,
            may_redo: false,
        }))
    }
}
