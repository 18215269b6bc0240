//! SIGEV_THREAD: the C library's notification, where each expiry runs a function on a new
//! thread. glibc builds it on a helper thread that waits for a reserved signal and starts a
//! detached thread (with the attributes of `sigev_notify_attributes`) calling the function
//! with `sigev_value`, all signals unblocked. The timer service does the same without the
//! signal: it starts the thread itself when the engine queues the timer's notification.
//!
//! The thread is a raw `pthread_create` thread, not a Rust one: the function is C code that
//! may call `pthread_exit`, whose unwinding must not cross Rust frames that catch it.

use libc::c_void;

/// A SIGEV_THREAD timer's function and the stack size of the threads that run it.
#[derive(Clone, Copy, Debug)]
pub struct Callback {
    /// `void (*)(union sigval)`.
    pub function: usize,
    /// From `sigev_notify_attributes` (0: the default).
    pub stack_size: usize,
}

/// The stack size set in the caller's `pthread_attr_t` at `attr` (0 for NULL). The attribute
/// object is read by the C library, as glibc copies it at `timer_create`; an unreadable one is
/// EFAULT instead of a crash.
pub fn stack_size_of(attr: usize) -> Result<usize, uipc::Errno> {
    if attr == 0 {
        return Ok(0);
    }
    crate::user::copy_in(attr, std::mem::size_of::<libc::pthread_attr_t>())?;
    let mut size = 0usize;
    // SAFETY: `attr` points to a readable pthread_attr_t-sized object (checked above); the
    // caller promises it is an initialised attribute object, as glibc requires.
    let r =
        unsafe { libc::pthread_attr_getstacksize(attr as *const libc::pthread_attr_t, &mut size) };
    Ok(if r == 0 { size } else { 0 })
}

extern "C" fn run_callback(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the box leaked by `spawn_callback`, taken back once here.
    let (function, value) = *unsafe { Box::from_raw(arg.cast::<(usize, u64)>()) };
    let mut none = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: an empty set, then this thread's mask set to it (glibc unblocks all signals).
    unsafe {
        libc::sigemptyset(none.as_mut_ptr());
        crate::sigmask::set_mask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
    }
    // SAFETY: the program gave this function for SIGEV_THREAD; `union sigval` is 8 bytes and
    // travels in the first integer register on x86-64 and aarch64.
    let f = unsafe { std::mem::transmute::<usize, extern "C" fn(u64)>(function) };
    f(value);
    std::ptr::null_mut()
}

/// Starts a detached thread calling the callback with `value`. A thread that cannot be
/// started is a lost notification, as when glibc's helper fails to start one.
pub fn spawn_callback(cb: Callback, value: u64) {
    if cb.function == 0 {
        return;
    }
    let arg = Box::into_raw(Box::new((cb.function, value)));
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut thread = std::mem::MaybeUninit::<libc::pthread_t>::uninit();
    // SAFETY: a local attribute object, initialised, used once and destroyed; `arg` goes to
    // the new thread, or is freed here if none starts.
    unsafe {
        libc::pthread_attr_init(attr.as_mut_ptr());
        libc::pthread_attr_setdetachstate(attr.as_mut_ptr(), libc::PTHREAD_CREATE_DETACHED);
        if cb.stack_size != 0 {
            libc::pthread_attr_setstacksize(attr.as_mut_ptr(), cb.stack_size);
        }
        let r = libc::pthread_create(thread.as_mut_ptr(), attr.as_ptr(), run_callback, arg.cast());
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        if r != 0 {
            drop(Box::from_raw(arg));
        }
    }
}
