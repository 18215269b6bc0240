//! timer_create(2), timer_settime(2), timer_gettime(2), timer_getoverrun(2), timer_delete(2),
//! served in the process by [`crate::timer_service`] when `$UIPC_TIMERS` is `1` (`uipc run
//! --timers`, read once per program image); otherwise each export calls the C library's own
//! function (`dlsym(RTLD_NEXT)`) unchanged.
//!
//! Two ABIs reach the service:
//! - glibc's (these exports): `timer_t` is pointer-sized; the kernel id is stored in it, and
//!   read back truncated to an `int`, as glibc does for timers that are not SIGEV_THREAD.
//!   SIGEV_THREAD runs a function on a new thread (`timer_thread`); its `sigev_signo` is
//!   ignored, as glibc ignores it.
//! - the kernel's (`syscall(SYS_timer_create, ...)`, see `syscall.rs`): the id is an `int`,
//!   and SIGEV_THREAD is just a signal to the process, as the kernel treats it.
//!
//! Errors are the kernel's, in its order (the engine's `timers::create` doc): a NULL or
//! unreadable out pointer for the id is EFAULT where glibc would crash.
//!
//! Signal handlers: timer_settime, timer_gettime and timer_getoverrun are async-signal-safe
//! (POSIX), and programs call them from the timer's own handler. Each export keeps signal
//! handlers off its thread while it runs ([`SignalsBlocked`]: the program's handlers run
//! behind the trampoline of `timer_handlers.rs`, which holds a signal off until the export
//! returns, with no system call), so no handler runs on a thread that holds one of the
//! service's or the engine's locks; those three allocate nothing (the itimerspec is read
//! into a stack buffer, the service's and the engine's containers get their room at
//! timer_create: see `timer_service`). timer_create and timer_delete allocate (POSIX does not
//! list them).

use crate::sigmask::SignalsBlocked;
use crate::timer_abi::{itimerspec_bytes, read_itimerspec, read_sigevent};
use crate::timer_service::{current, get_or_make};
use crate::timer_thread::{stack_size_of, Callback};
use crate::user::copy_out;
use libc::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use uipc::timers::{SigEvent, UserPtr, SIGALRM, SIGEV_THREAD};
use uipc::Errno;

/// glibc's SIGTIMER, the reserved signal its SIGEV_THREAD timers use; the engine needs a
/// valid signal number for the notification it queues.
const SIGTIMER: i32 = 32;

/// Whether timers are served here (`$UIPC_TIMERS=1` when the image started).
pub use crate::exec_env::timers_routed as routed;

/// The counter to hand to the next image of this process: its service's, else what its own
/// previous image handed over; 0 when timers are not routed.
pub fn next_to_carry() -> u32 {
    if !routed() {
        return 0;
    }
    match current() {
        Some(svc) => svc.next_id(),
        None => crate::exec_env::inherited_next_id(crate::exec_env::getpid()),
    }
}

/// Which ABI a call came in by.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// The C library's: `timer_t` (8 bytes), SIGEV_THREAD runs a function.
    Libc,
    /// The system call's: `int` ids, SIGEV_THREAD is a signal.
    Kernel,
}

/// `timer_create` for either ABI; the id is written to `out`, the result is 0.
pub fn create(clock: i32, evp: usize, out: usize, abi: Abi) -> Result<i64, Errno> {
    let _held = SignalsBlocked::new();
    if crate::vfork::on_borrowed_memory() {
        // A vforked child: a service made here would replace its parent's (`crate::vfork`).
        return Err(Errno::EAGAIN);
    }
    let (event, callback) = match read_sigevent(evp) {
        UserPtr::Valid(raw) if abi == Abi::Libc && raw.event.notify == SIGEV_THREAD => {
            let callback = Callback {
                function: raw.function,
                stack_size: stack_size_of(raw.attributes)?,
            };
            let event = SigEvent {
                signo: SIGTIMER,
                ..raw.event
            };
            (UserPtr::Valid(event), Some(callback))
        }
        UserPtr::Valid(raw) => (UserPtr::Valid(raw.event), None),
        // glibc replaces a NULL sigevent with its own: SIGALRM, value 0 (observed, 2.36).
        UserPtr::Null if abi == Abi::Libc => (UserPtr::Valid(SigEvent::signal(SIGALRM, 0)), None),
        UserPtr::Null => (UserPtr::Null, None),
        UserPtr::Fault => (UserPtr::Fault, None),
    };
    let len = if abi == Abi::Libc { 8 } else { 4 };
    get_or_make()
        .create(clock, event, callback, out, len)
        .map(|_| 0)
}

/// `timer_settime` for either ABI.
pub fn settime(id: i32, flags: i32, new: usize, old: usize) -> Result<i64, Errno> {
    let _held = SignalsBlocked::new();
    let new = read_itimerspec(new);
    if let UserPtr::Null | UserPtr::Fault = new {
        // The kernel refuses these before it looks at the id.
        return Err(if new == UserPtr::Null {
            Errno::EINVAL
        } else {
            Errno::EFAULT
        });
    }
    let svc = current().ok_or(Errno::EINVAL)?;
    let previous = svc.settime(id, flags, new)?;
    if old != 0 {
        copy_out(old, &itimerspec_bytes(&previous))?;
    }
    Ok(0)
}

/// `timer_gettime` for either ABI.
pub fn gettime(id: i32, curr: usize) -> Result<i64, Errno> {
    let _held = SignalsBlocked::new();
    let spec = current().ok_or(Errno::EINVAL)?.gettime(id)?;
    copy_out(curr, &itimerspec_bytes(&spec))?;
    Ok(0)
}

/// `timer_getoverrun` for either ABI.
pub fn getoverrun(id: i32) -> Result<i64, Errno> {
    let _held = SignalsBlocked::new();
    current()
        .ok_or(Errno::EINVAL)?
        .getoverrun(id)
        .map(i64::from)
}

/// `timer_delete` for either ABI.
pub fn delete(id: i32) -> Result<i64, Errno> {
    let _held = SignalsBlocked::new();
    current().ok_or(Errno::EINVAL)?.delete(id).map(|()| 0)
}

/// The C library's timer functions, looked up by [`prepare`] (the library's constructor):
/// `dlsym` may allocate, and a first call may come from a signal handler.
static NEXT: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];
const NAMES: [&std::ffi::CStr; 5] = [
    c"timer_create",
    c"timer_settime",
    c"timer_gettime",
    c"timer_getoverrun",
    c"timer_delete",
];

/// Looks up the C library's own timer functions when timers are not routed here.
pub fn prepare() {
    if routed() {
        return;
    }
    for (slot, name) in NEXT.iter().zip(NAMES) {
        slot.store(crate::kernel::next_symbol(name), Ordering::Relaxed);
    }
}

/// Calls the C library's own function number `$index` of [`NAMES`], of type `$ty`, with
/// `$args`, or fails with ENOSYS if there is none.
macro_rules! pass_through {
    ($index:expr, $ty:ty, $($arg:expr),*) => {{
        match NEXT[$index].load(Ordering::Relaxed) {
            0 => {
                // SAFETY: writes this thread's errno.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                -1
            }
            // SAFETY: the symbol is the C library's function of this type.
            p => unsafe { std::mem::transmute::<usize, $ty>(p)($($arg),*) },
        }
    }};
}

/// glibc's `timer_t`, as the id it carries.
fn id_of(timer: *mut c_void) -> i32 {
    timer as usize as i32
}

/// timer_create(2).
#[no_mangle]
pub extern "C" fn timer_create(
    clock: libc::clockid_t,
    evp: *mut c_void,
    timer: *mut *mut c_void,
) -> c_int {
    if !routed() {
        type F = unsafe extern "C" fn(libc::clockid_t, *mut c_void, *mut *mut c_void) -> c_int;
        return pass_through!(0, F, clock, evp, timer);
    }
    crate::guard::guard(|| create(clock, evp as usize, timer as usize, Abi::Libc)) as c_int
}

/// timer_settime(2).
#[no_mangle]
pub extern "C" fn timer_settime(
    timer: *mut c_void,
    flags: c_int,
    new: *const c_void,
    old: *mut c_void,
) -> c_int {
    if !routed() {
        type F = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, *mut c_void) -> c_int;
        return pass_through!(1, F, timer, flags, new, old);
    }
    crate::guard::guard(|| settime(id_of(timer), flags, new as usize, old as usize)) as c_int
}

/// timer_gettime(2).
#[no_mangle]
pub extern "C" fn timer_gettime(timer: *mut c_void, curr: *mut c_void) -> c_int {
    if !routed() {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
        return pass_through!(2, F, timer, curr);
    }
    crate::guard::guard(|| gettime(id_of(timer), curr as usize)) as c_int
}

/// A call whose one argument is the timer: the C library's (`NEXT[index]`) when not routed,
/// else `op` of the timer's id.
fn on_timer_only(index: usize, timer: *mut c_void, op: fn(i32) -> Result<i64, Errno>) -> c_int {
    if !routed() {
        type F = unsafe extern "C" fn(*mut c_void) -> c_int;
        return pass_through!(index, F, timer);
    }
    crate::guard::guard(|| op(id_of(timer))) as c_int
}

/// timer_getoverrun(2).
#[no_mangle]
pub extern "C" fn timer_getoverrun(timer: *mut c_void) -> c_int {
    on_timer_only(3, timer, getoverrun)
}

/// timer_delete(2).
#[no_mangle]
pub extern "C" fn timer_delete(timer: *mut c_void) -> c_int {
    on_timer_only(4, timer, delete)
}
