//! Shared mode, the library's side: a whole-file write lock of a contended file is taken,
//! dropped and tested here, on the slot the daemon put the file's lease in for several
//! processes at once, and a conflicting F_SETLKW sleeps on a futex of the slot
//! (`uipc::locks::lease::shared`; ARCHITECTURE.md "Shared mode"). Every other case goes to the
//! daemon as before.
//!
//! The sleep is an untimed FUTEX_WAIT, so it behaves as the kernel's F_SETLKW does around a
//! signal: a handler with SA_RESTART restarts it, one without ends the call with EINTR, a stop
//! and continue without a handler goes on sleeping. Nothing here allocates or takes a lock.

use std::sync::atomic::AtomicU64;
use uipc::locks::lease::shared::Futex;
use uipc::locks::lease::LeaseView;
use uipc::locks::types::OFFSET_MAX;
use uipc::locks::{FileId, Flock, F_GETLK, F_SETLKW, F_UNLCK, F_WRLCK, SEEK_SET};
use uipc::Errno;

/// The library's futex calls on a slot's owner word.
struct Futexes;

impl Futex for Futexes {
    fn wait(&mut self, word: &AtomicU64, expect: u32) -> Result<(), Errno> {
        if crate::futex::wait(word, expect) {
            return Err(Errno::EINTR);
        }
        Ok(())
    }

    fn wake_one(&mut self, word: &AtomicU64) {
        crate::futex::wake_one(word);
    }

    fn alive(&mut self, pid: i32) -> bool {
        crate::semfast::alive(pid)
    }
}

/// fcntl's `cmd` (F_SETLK, F_SETLKW, F_GETLK) of `pid` over `[start, end]` of `file`,
/// `write` as `lease::fcntl` decoded it, if the file is in shared mode and the call fits it:
/// the result (F_GETLK's answer written into `fl`), or `None` for the other paths.
pub(super) fn fcntl(
    view: &LeaseView<'_>,
    pid: i32,
    file: FileId,
    cmd: libc::c_int,
    fl: &mut Flock,
    (start, end): (i64, i64),
    write: Option<bool>,
) -> Option<Result<(), Errno>> {
    if cmd == F_GETLK {
        let owner = view.shared_owner(file, pid)?;
        if owner != 0 && !Futexes.alive(owner) {
            return None;
        }
        if owner == 0 {
            fl.l_type = F_UNLCK;
        } else {
            *fl = Flock {
                l_type: F_WRLCK,
                l_whence: SEEK_SET,
                l_start: 0,
                l_len: 0,
                l_pid: owner,
            };
        }
        return Some(Ok(()));
    }
    match write {
        None => view
            .shared_unlock(file, pid, (start, end), &mut Futexes)
            .map(Ok),
        Some(true) if start == 0 && end == OFFSET_MAX => {
            view.shared_lock(file, pid, cmd == F_SETLKW, &mut Futexes)
        }
        Some(_) => None,
    }
}

/// Before a close of a descriptor of `file`: drops our whole-file lock if we own it in shared
/// mode (then the daemon has nothing to drop). Whether it did.
pub(super) fn close(view: &LeaseView<'_>, pid: i32, file: FileId) -> bool {
    view.shared_close(file, pid, &mut Futexes)
}
