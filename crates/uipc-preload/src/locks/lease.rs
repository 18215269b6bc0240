//! File lock leases, the holder's side: F_SETLK, F_SETLKW and F_GETLK on a regular file whose
//! lease this process holds complete here, on the daemon's lease area
//! (`uipc::locks::lease`; ARCHITECTURE.md "File lock leases"); every other case, and every
//! error, goes to the daemon as before.
//!
//! The area is asked for once per process (`LockRequest::Leases`) and mapped shared, as
//! `area.rs` says.
//!
//! What the call needs of the descriptor comes from the kernel, with raw system calls: `fstat`
//! (the file; a regular file only), `F_GETFL` (the access mode; O_PATH goes to the daemon)
//! and, for SEEK_CUR, `lseek`. The file and the access mode are remembered ([`FdMemo`], with
//! the count of close-family calls read before the two calls) and serve the descriptor's next
//! calls while that count is unchanged: neither can change while the descriptor is not closed
//! (F_SETFL leaves the access mode alone). A SEEK_END range needs the size, so it asks again;
//! so does every call once the process may have children the atfork handler did not see
//! (`crate::vfork`: one made with CLONE_FILES would close our descriptors out of our count).
//! Nothing here allocates or takes a lock (the first call's daemon call and mmap aside), so
//! fcntl stays async-signal-safe.

use super::area::Area;
use crate::kernel::kernel_sys;
use uipc::locks::fdmemo::FdMemo;
use uipc::locks::lease::{map_leases, range_of, LeaseView, Leased, LEASE_BYTES};
use uipc::locks::{FileId, Flock, F_GETLK, F_RDLCK, F_SETLK, F_SETLKW, F_UNLCK, F_WRLCK};
use uipc::locks::{SEEK_CUR, SEEK_END};
use uipc_proto::client::Greeting;
use uipc_proto::{HelloArea, LockRequest};

/// The lease area ([`Area`]).
static AREA: Area = Area::new(LockRequest::Leases, LEASE_BYTES, map_leases);

/// Descriptor -> file, access mode and the close count before they were read (see the
/// module doc).
static DESCS: FdMemo<4> = FdMemo::new();

/// Reads `UIPC_FASTPATH` (the library's constructor).
pub fn prepare() {
    AREA.prepare();
}

/// The area a session opened by an fcntl lock call asks for ([`Area::for_hello`]).
pub(super) fn area_for_hello() -> HelloArea {
    AREA.for_hello()
}

/// The reply to a Hello that asked for the lease area.
pub(super) fn greeted(g: Greeting) {
    AREA.greeted(g);
}

/// The area and our pid, if leases may serve this call.
fn view() -> Option<(LeaseView<'static>, i32)> {
    let (words, pid) = AREA.words()?;
    Some((LeaseView::new(words), pid))
}

/// What a lock call needs of descriptor `fd`: the file, read and write access, its size.
struct Desc {
    file: FileId,
    readable: bool,
    writable: bool,
    size: i64,
}

/// [`Desc`] of `fd`; its size only `with_size` (else 0).
fn describe(fd: libc::c_int, with_size: bool) -> Option<Desc> {
    // Read before the kernel is asked, so that a close counted after it is seen next time.
    let closes = crate::slots::closes();
    let of = |dev, ino, acc: u64, size| {
        let acc = acc as libc::c_int;
        Desc {
            file: FileId { dev, ino },
            readable: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            writable: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            size,
        }
    };
    let trusted = !with_size && !crate::vfork::unseen_children();
    if let Some([dev, ino, acc, _]) = DESCS.get(fd).filter(|m| trusted && m[3] == closes) {
        return Some(of(dev, ino, acc, 0));
    }
    // SAFETY: a zeroed `stat` is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if kernel_sys!(libc::SYS_fstat, fd, &mut st as *mut libc::stat) != 0
        || st.st_mode & libc::S_IFMT != libc::S_IFREG
    {
        return None;
    }
    let fl = kernel_sys!(libc::SYS_fcntl, fd, libc::F_GETFL);
    if fl < 0 || fl as libc::c_int & libc::O_PATH != 0 {
        return None;
    }
    let acc = (fl as libc::c_int & libc::O_ACCMODE) as u64;
    DESCS.remember(fd, [st.st_dev, st.st_ino, acc, closes]);
    Some(of(st.st_dev, st.st_ino, acc, st.st_size))
}

/// fcntl's `cmd` on `fd` with `fl`, if this process holds the file's lease, or the file is in
/// shared mode, and the call is served here: `Some` with its result (F_GETLK's answer written
/// into `fl`), `None` for the daemon.
pub(super) fn fcntl(
    fd: libc::c_int,
    cmd: libc::c_int,
    fl: &mut Flock,
) -> Option<Result<(), uipc::Errno>> {
    if !matches!(cmd, F_SETLK | F_SETLKW | F_GETLK) {
        return None;
    }
    let (view, pid) = view()?;
    let d = describe(fd, fl.l_whence == SEEK_END)?;
    let offset = if fl.l_whence == SEEK_CUR {
        let o = kernel_sys!(libc::SYS_lseek, fd, 0, libc::SEEK_CUR);
        if o < 0 {
            return None;
        }
        o
    } else {
        0
    };
    let (start, end) = range_of(fl, offset, d.size)?;
    let write = match fl.l_type {
        F_RDLCK if cmd == F_GETLK || d.readable => Some(false),
        F_WRLCK if cmd == F_GETLK || d.writable => Some(true),
        F_UNLCK if cmd != F_GETLK => None,
        _ => return None,
    };
    if let Some(r) = super::shared::fcntl(&view, pid, d.file, cmd, fl, (start, end), write) {
        crate::semfast::served();
        return Some(r);
    }
    if cmd == F_GETLK {
        // Only our own locks are on the file: nothing conflicts.
        if !view.holds(d.file, pid) {
            return None;
        }
        fl.l_type = F_UNLCK;
    } else if view.set(d.file, pid, write, start, end) != Leased::Done {
        return None;
    }
    crate::semfast::served();
    Some(Ok(()))
}

/// Before a close of a descriptor of `file`: drops our locks on it here if we hold its lease
/// (then the daemon has nothing to drop). Whether it did.
pub(super) fn close(file: (u64, u64)) -> bool {
    let Some((view, pid)) = view() else {
        return false;
    };
    let file = FileId {
        dev: file.0,
        ino: file.1,
    };
    view.clear(file, pid) == Leased::Done || super::shared::close(&view, pid, file)
}
