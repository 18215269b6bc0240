//! flock leases, the caller's side: flock LOCK_SH, LOCK_EX or LOCK_UN (with or without
//! LOCK_NB) through a descriptor of the description that holds its file's flock lease
//! completes here, on the daemon's flock lease area (`uipc::locks::flockfast`;
//! ARCHITECTURE.md "flock leases"); every other case, and every error, goes to the daemon.
//!
//! The area is asked for once per process (`LockRequest::FlockSlots`) and mapped shared, as
//! `area.rs` says; it is also off for good in the image when the daemon refuses us `kcmp` on
//! its descriptors.
//!
//! Which slot, and the proof: a descriptor's first use is proven by one `kcmp(KCMP_FILE)` of
//! our descriptor with the daemon's that the member's token numbers, found by an `fstat` and
//! a look at the file's slot group. The proof is remembered ([`Proofs`]) with the count of
//! close-family calls read before it, and serves the descriptor's next calls without a
//! `kcmp` while that count, the lease's epoch and the member's token are unchanged (the
//! engine's `proofs` module says why that is the same proof). A remembered proof that fell
//! is tried again with a `kcmp` on the same member before the group is searched. Once the
//! process may have children the atfork handler did not see (`crate::vfork`: one made with
//! CLONE_FILES would close our descriptors out of our count), every call is proven anew.
//! Nothing here allocates or takes a lock (the first call's daemon call and mmap aside), so
//! flock stays async-signal-safe.

use super::area::Area;
use crate::guard::set_errno;
use crate::kernel::kernel_sys;
use std::sync::atomic::AtomicU64;
use uipc::locks::flockfast::{
    map_flock_slots, FlockView, Flocked, Futex, Mode, Proof, Proofs, Token, FLOCK_BYTES,
};
pub(super) use uipc::locks::flockfast::{FLOCK_MAY_REDO, REDO};
use uipc::locks::FileId;
use uipc::locks::LOCK_NB;
use uipc_proto::client::Greeting;
use uipc_proto::{HelloArea, LockRequest};

/// The flock lease area ([`Area`]).
static AREA: Area = Area::new(LockRequest::FlockSlots, FLOCK_BYTES, map_flock_slots);
/// The proofs of our descriptors (see the module doc).
static PROOFS: Proofs = Proofs::new();

/// `kcmp`'s type for "the same open file description".
const KCMP_FILE: libc::c_long = 0;

/// Reads `UIPC_FASTPATH` (the library's constructor).
pub fn prepare() {
    AREA.prepare();
}

/// The area a session opened by a flock call asks for ([`Area::for_hello`]).
pub(super) fn area_for_hello() -> HelloArea {
    AREA.for_hello()
}

/// The reply to a Hello that asked for the flock lease area.
pub(super) fn greeted(g: Greeting) {
    AREA.greeted(g);
}

/// The area and our pid, if flock leases may serve this call.
fn view() -> Option<(FlockView<'static>, i32)> {
    let (words, pid) = AREA.words()?;
    Some((FlockView::new(words), pid))
}

/// Whether our `fd` refers to the description the daemon's `token` names. A refusal
/// (EPERM: the daemon is not ours to inspect) turns the leases off in this image.
fn same(pid: i32, fd: libc::c_int, token: Token) -> bool {
    let r = kernel_sys!(libc::SYS_kcmp, pid, token.pid, KCMP_FILE, fd, token.fd);
    if r < 0 && crate::guard::errno_now() == libc::EPERM {
        AREA.turn_off();
    }
    r == 0
}

fn file_of(fd: libc::c_int) -> Option<FileId> {
    // SAFETY: a zeroed `stat` is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (kernel_sys!(libc::SYS_fstat, fd, &mut st as *mut libc::stat) == 0).then_some(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// The library's futex calls for a sleeping flock: an untimed FUTEX_WAIT (the kernel restarts
/// it after a handler with SA_RESTART and ends it with EINTR without, which is flock's own
/// rule) and FUTEX_WAKE of one sleeper.
struct Sleeper;

impl Futex for Sleeper {
    fn wait(&self, word: &AtomicU64, expect: u32) -> bool {
        crate::futex::wait(word, expect)
    }

    fn wake_one(&self, word: &AtomicU64) {
        crate::futex::wake_one(word);
    }
}

/// flock(`fd`, `cmd`) here, if `fd`'s description is a member of its file's slot: `Some(0)`
/// done (errno kept), `Some(-1)` with errno EWOULDBLOCK or EINTR, `None` for the daemon (errno
/// kept).
pub(super) fn flock(fd: libc::c_int, cmd: libc::c_int) -> Option<libc::c_int> {
    let want = Mode::of_cmd(cmd)?;
    if fd < 0 {
        return None;
    }
    let saved = crate::guard::errno_now();
    let r = flock_here(fd, want, cmd & LOCK_NB != 0);
    set_errno(saved);
    let ret = match r? {
        Flocked::Done => 0,
        Flocked::WouldBlock => {
            set_errno(libc::EWOULDBLOCK);
            -1
        }
        Flocked::Interrupted => {
            set_errno(libc::EINTR);
            return Some(-1);
        }
        Flocked::Slow => return None,
    };
    crate::semfast::served();
    Some(ret)
}

/// Whether `cmd` is one of flock's operations (LOCK_SH, LOCK_EX or LOCK_UN, with or without
/// LOCK_NB).
pub(super) fn valid_cmd(cmd: libc::c_int) -> bool {
    Mode::of_cmd(cmd).is_some()
}

/// Whether the daemon may answer this flock with `REDO` (the call can be redone here: the
/// area is ours, or the session this call opens brings it).
pub(super) fn may_redo(cmd: libc::c_int) -> bool {
    valid_cmd(cmd)
        && (AREA.words().is_some()
            || AREA.for_hello() != HelloArea::None && !crate::conn::has_session())
}

fn flock_here(fd: libc::c_int, want: Mode, nb: bool) -> Option<Flocked> {
    let (view, pid) = view()?;
    // Read before any proof, so that a close counted after it is seen next time.
    let closes = crate::slots::closes();
    let remembered = PROOFS.get(fd);
    if let Some(p) = remembered {
        let still = (p.closes == closes && !crate::vfork::unseen_children())
            .then(|| view.still(&p, pid))
            .flatten();
        let proven = still.or_else(|| {
            let (epoch, token) = view.prove(p.slot, p.member, pid, |t| same(pid, fd, t))?;
            PROOFS.remember(Proof {
                token,
                epoch,
                closes,
                ..p
            });
            Some(epoch)
        });
        if let Some(e) = proven {
            let r = view.flock((p.slot, p.member, e), pid, want, nb, &Sleeper);
            if r != Flocked::Slow {
                return Some(r);
            }
        }
    }
    let file = file_of(fd)?;
    for k in view.candidates(file) {
        if let Some((i, epoch, token)) = view.find(k, pid, |t| same(pid, fd, t)) {
            PROOFS.remember(Proof {
                fd,
                slot: k,
                member: i,
                token,
                epoch,
                closes,
            });
            let r = view.flock((k, i, epoch), pid, want, nb, &Sleeper);
            if r != Flocked::Slow {
                return Some(r);
            }
        }
    }
    None
}
