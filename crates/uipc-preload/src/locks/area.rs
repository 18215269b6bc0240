//! A memory area the daemon shares for a lock fast path (the POSIX leases, `lease.rs`; the
//! flock leases, `flockfast.rs`): asked for once per process (answered with our pid as the
//! daemon numbers it and the area's memfd) and mapped shared; a forked child keeps the
//! mapping and asks again only to learn its pid; a new program image maps it again. A
//! process without a session lets its lock call go to the daemon, whose new session asks for
//! the area in its Hello, with the call's frame right behind it (one exchange for both);
//! a process with a session asks with a lock request of its own.
//! The area is off for good in the image when the daemon has none (ENOSYS, `uipc serve`,
//! `UIPC_FASTPATH=0`) or numbers our pid differently (a nested pid namespace), and for the call
//! in a vforked child. Nothing here allocates after the first grant, so callers stay
//! async-signal-safe.

use crate::conn::{call_passing, check};
use crate::guard::guarded;
use crate::slots::ClosedQuietly;
use std::os::fd::{IntoRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use uipc::Errno;
use uipc_proto::client::Greeting;
use uipc_proto::{HelloArea, LockRequest, Request, Response};

/// One area: its request, length and mapping function, and what this image learned.
pub(super) struct Area {
    request: LockRequest,
    bytes: usize,
    map: fn(RawFd) -> Option<NonNull<AtomicU64>>,
    /// Off in this program image.
    off: AtomicBool,
    /// The pid the area was granted to (0: not asked yet in this process).
    pid: AtomicI32,
    /// The mapping (null before the first grant); never unmapped.
    ptr: AtomicPtr<AtomicU64>,
}

impl Area {
    /// An area asked for with `request`, `bytes` long, mapped by `map`.
    pub(super) const fn new(
        request: LockRequest,
        bytes: usize,
        map: fn(RawFd) -> Option<NonNull<AtomicU64>>,
    ) -> Area {
        Area {
            request,
            bytes,
            map,
            off: AtomicBool::new(false),
            pid: AtomicI32::new(0),
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Reads `UIPC_FASTPATH` (the library's constructor).
    pub(super) fn prepare(&self) {
        if std::env::var_os("UIPC_FASTPATH").is_some_and(|v| v == "0") {
            self.turn_off();
        }
    }

    /// Turns the area off in this program image.
    pub(super) fn turn_off(&self) {
        self.off.store(true, Ordering::Relaxed);
    }

    /// The Hello area of the same name as this area's request.
    fn hello(&self) -> HelloArea {
        match self.request {
            LockRequest::Leases => HelloArea::Leases,
            LockRequest::FlockSlots => HelloArea::FlockSlots,
            _ => HelloArea::None,
        }
    }

    /// The area a session opened now should ask for in its Hello: this one, if this process
    /// may use it and has not been granted it yet.
    pub(super) fn for_hello(&self) -> HelloArea {
        let wanted = !self.off.load(Ordering::Relaxed)
            && !crate::vfork::on_borrowed_memory()
            && self.pid.load(Ordering::Acquire) != crate::vfork::pid();
        if wanted {
            self.hello()
        } else {
            HelloArea::None
        }
    }

    /// The reply to a Hello that asked for this area: its grant, taken as a request's.
    pub(super) fn greeted(&self, g: Greeting) {
        let answer = match g.area {
            Ok(fd) => (Ok(i64::from(g.pid)), Some(ClosedQuietly(fd.into_raw_fd()))),
            Err(e) => (Err(Errno::from_raw(e)), None),
        };
        self.take(answer, crate::vfork::pid());
    }

    /// Asks for the area with a request of its own (this process has a session already).
    fn grant(&self, pid: i32) -> Option<()> {
        let req = Request::Lock(self.request.clone());
        let (resp, fd) = guarded(|| call_passing(&req, None, false)).ok()?;
        let answer = check(resp).and_then(|r| match r {
            Response::Ret(p) => Ok(p),
            _ => Err(Errno::from_raw(libc::EIO)),
        });
        self.take((answer, fd.map(|fd| ClosedQuietly(fd.into_raw_fd()))), pid)
    }

    /// The daemon's answer for the area (the pid it numbers us with, or its errno, and the
    /// area's memfd), taken for process `pid`: mapped if it is the first, off for good in
    /// this image if the daemon has none or numbers us differently.
    fn take(
        &self,
        (answer, fd): (Result<i64, Errno>, Option<ClosedQuietly>),
        pid: i32,
    ) -> Option<()> {
        match answer {
            Ok(p) if p == i64::from(pid) => {}
            Ok(_) => {
                self.turn_off();
                return None;
            }
            Err(e) if e.raw() == libc::ENOSYS => {
                self.turn_off();
                return None;
            }
            _ => return None,
        }
        let fd = fd?;
        if self.ptr.load(Ordering::Acquire).is_null() {
            let p = (self.map)(fd.0)?;
            if self
                .ptr
                .compare_exchange(
                    std::ptr::null_mut(),
                    p.as_ptr(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                // SAFETY: our own mapping, never published.
                unsafe { crate::kernel::kernel_munmap(p.as_ptr().cast(), self.bytes) };
            }
        }
        self.pid.store(pid, Ordering::Release);
        Some(())
    }

    /// The area's words and our pid, if the area may serve this call.
    pub(super) fn words(&self) -> Option<(&'static [AtomicU64], i32)> {
        if self.off.load(Ordering::Relaxed) || crate::vfork::on_borrowed_memory() {
            return None;
        }
        let pid = crate::vfork::pid();
        if self.pid.load(Ordering::Acquire) != pid {
            // Without a session, the daemon call this one goes to next opens one, whose
            // Hello brings the area (`for_hello`): no exchange of its own for it.
            if !crate::conn::has_session() {
                return None;
            }
            self.grant(pid)?;
        }
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` is a shared mapping of `bytes` that is never unmapped, used only through
        // atomics (by us, the daemon and the other clients).
        Some((
            unsafe { std::slice::from_raw_parts(p, self.bytes / 8) },
            pid,
        ))
    }
}
