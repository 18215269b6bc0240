//! execve(2) and the C library's exec functions: execve, execv, execvp, execvpe, fexecve,
//! execveat, execl, execle, execlp, and `syscall(SYS_execve / SYS_execveat)` (`syscall.rs`).
//! With `--timers`, each hands the process's POSIX timer id counter to the new program image
//! in its environment ([`crate::exec_env`]), and each puts back the library's variables
//! (`LD_PRELOAD`, `UIPC_*`) that the new environment lacks, so the new image stays a client;
//! otherwise each is the C library's call with the caller's arguments.
//!
//! The C library's exec functions call its internal execve, out of a wrapper's reach, so
//! each is wrapped: execv and execvp become execve and execvpe with `environ` (what glibc's
//! do), the rest keep their own function with the new environment. execl, execle and execlp
//! are variadic: their exports are naked functions jumping to C (`csrc/exec_variadic.c`),
//! which gathers the arguments and calls execv, execve or execvp here.
//!
//! These run in vforked children (vfork or posix_spawn, then exec) and may run in signal
//! handlers: nothing here allocates or takes a lock the child could find held, except the
//! timer service's registry lock when this very process has a service (never in a vforked
//! child, whose pid differs). The C library's definitions are looked up when the library is
//! loaded ([`prepare`]). A failed exec returns -1 with the C library's errno and leaves the
//! caller's environment and timers as they were.

use crate::exec_check::{warn_if_unpreloadable, warn_if_unpreloadable_in_path};
use crate::exec_env::CarriedEnv;
use crate::guard::set_errno;
use crate::kernel::kernel_sys;
use crate::timer::next_to_carry;
use libc::{c_char, c_int, c_long};
use std::panic::{catch_unwind, AssertUnwindSafe};
use uipc::ipc::Sysctl;
use uipc_proto::{ProcFile, ProcRequest, Request};

type Argv = *const *const c_char;

extern "C" {
    static environ: Argv;
}

crate::kernel::next_symbols! {
    /// The C library's exec functions (0: absent).
    struct Real, fn real { execve, execvpe, fexecve, execveat }
}

/// Looks up the C library's functions and takes the counter a previous image handed over;
/// called when the library is loaded.
pub fn prepare() {
    let _ = real();
    let _ = crate::timer::routed();
    crate::exec_env::take_inherited();
    crate::exec_env::keep_own_vars();
    if take_detach() && crate::conn::enabled() {
        // The previous image held attachments: a first call now says this image is new, so
        // the daemon detaches them (its answer does not matter).
        let read = ProcRequest::Read(ProcFile::Sysctl(Sysctl::MsgMax));
        let _ = crate::guard::guarded(|| crate::conn::call(&Request::Proc(read)).map(|_| 0));
    }
}

/// Reads `UIPC_EXEC_DETACH` and removes it from `environ`: whether the previous image of
/// this very process held attachments (the constructor then tells the daemon of the exec
/// at once).
fn take_detach() -> bool {
    let name = c"UIPC_EXEC_DETACH";
    // SAFETY: getenv with a NUL-terminated name, at load time (no other thread yet).
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return false;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string in the environment.
    let value = unsafe { std::ffi::CStr::from_ptr(value) };
    let ours = std::str::from_utf8(value.to_bytes())
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        == Some(crate::exec_env::getpid());
    // SAFETY: unsetenv with a NUL-terminated name, at load time; removes every entry.
    unsafe { libc::unsetenv(name.as_ptr()) };
    ours
}

/// Runs `exec` with the environment the new image gets (its close-on-exec descriptors of
/// locked files reported first: [`crate::locks::before_exec`]): `envp` with the timer id counter in
/// front when there is one to carry, the sysctl descriptors open for writing
/// (`procwrite.rs`), and the library's variables it lacks, else `envp` itself
/// (also if it cannot be read: the call then fails as the kernel decides).
fn with_counter(envp: Argv, exec: impl FnOnce(Argv) -> c_long) -> c_long {
    let carried = catch_unwind(AssertUnwindSafe(|| {
        let next = next_to_carry();
        // SAFETY: getpid takes no arguments (raw: other preloads may wrap it).
        let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
        let mut writes = [0u8; crate::exec_env::WRITES_ROOM];
        let len = crate::procwrite::carried_var(&mut writes);
        CarriedEnv::new(
            envp as usize,
            (next != 0).then_some((pid, next)),
            &writes[..len],
            crate::attach::any_to_drop_at_exec().then_some(pid),
        )
    }))
    .ok()
    .flatten();
    let reported = crate::locks::before_exec();
    let r = match carried {
        Some(env) => exec(env.envp()),
        None => exec(envp),
    };
    if reported {
        crate::locks::exec_failed();
    }
    r
}

/// Calls the C library's function at `p` of type `$ty`, or fails with ENOSYS.
macro_rules! call_real {
    ($p:expr, $ty:ty, $($arg:expr),*) => {{
        match $p {
            0 => {
                set_errno(libc::ENOSYS);
                -1
            }
            // SAFETY: a non-null address is the C library's function of this type, called
            // with the caller's arguments (the environment possibly replaced by ours).
            p => c_long::from(unsafe { std::mem::transmute::<usize, $ty>(p)($($arg),*) }),
        }
    }};
}

type ExecveFn = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;

fn execve_with(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    warn_if_unpreloadable(libc::AT_FDCWD, path, None);
    with_counter(envp, |env| match real().execve {
        0 => kernel_sys!(libc::SYS_execve, path, argv, env),
        p => call_real!(p, ExecveFn, path, argv, env),
    }) as c_int
}

/// execve(2).
#[no_mangle]
pub extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    execve_with(path, argv, envp)
}

/// execv(3): execve with `environ`.
#[no_mangle]
pub extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    // SAFETY: reads the C library's `environ` pointer.
    execve_with(path, argv, unsafe { environ })
}

fn execvpe_with(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    warn_if_unpreloadable_in_path(file);
    with_counter(envp, |env| {
        call_real!(real().execvpe, ExecveFn, file, argv, env)
    }) as c_int
}

/// execvp(3): execvpe with `environ`.
#[no_mangle]
pub extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    // SAFETY: reads the C library's `environ` pointer.
    execvpe_with(file, argv, unsafe { environ })
}

/// execvpe(3).
#[no_mangle]
pub extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    execvpe_with(file, argv, envp)
}

/// fexecve(3).
#[no_mangle]
pub extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(c_int, Argv, Argv) -> c_int;
    warn_if_unpreloadable(fd, std::ptr::null(), Some(fd));
    with_counter(envp, |env| call_real!(real().fexecve, F, fd, argv, env)) as c_int
}

/// execveat(2) (the C library's since glibc 2.34; the system call where it has none).
#[no_mangle]
pub extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const c_char, Argv, Argv, c_int) -> c_int;
    warn_execveat(dirfd, path, flags);
    with_counter(envp, |env| match real().execveat {
        0 => kernel_sys!(libc::SYS_execveat, dirfd, path, argv, env, flags),
        p => call_real!(p, F, dirfd, path, argv, env, flags),
    }) as c_int
}

/// `syscall(SYS_execve, ...)` and `syscall(SYS_execveat, ...)`: the
/// kernel's call with the environment argument replaced as above.
pub fn syscall_routed(nr: c_long, a: [c_long; 6]) -> c_long {
    let env_arg = if nr == libc::SYS_execveat { 3 } else { 2 };
    if nr == libc::SYS_execveat {
        warn_execveat(a[0] as c_int, a[1] as *const c_char, a[4] as c_int);
    } else {
        warn_if_unpreloadable(libc::AT_FDCWD, a[0] as *const c_char, None);
    }
    with_counter(a[env_arg] as Argv, |env| {
        let mut args = a;
        args[env_arg] = env as c_long;
        crate::kernel::sys(nr, args)
    })
}

/// execveat's image: the descriptor itself with AT_EMPTY_PATH and an empty path.
fn warn_execveat(dirfd: c_int, path: *const c_char, flags: c_int) {
    // SAFETY: a non-null `path` is the caller's NUL-terminated path (the exec reads it too).
    let empty = !path.is_null() && unsafe { *path } == 0;
    if flags & libc::AT_EMPTY_PATH != 0 && empty {
        warn_if_unpreloadable(dirfd, path, Some(dirfd));
    } else {
        warn_if_unpreloadable(dirfd, path, None);
    }
}

/// Whether `nr` is an exec system call.
pub fn is_exec_number(nr: c_long) -> bool {
    nr == libc::SYS_execve || nr == libc::SYS_execveat
}

extern "C" {
    fn uipc_execl();
    fn uipc_execle();
    fn uipc_execlp();
}

/// Exports `$name` as a jump to the C function `$target`, which receives the caller's
/// registers and stack untouched (the variadic arguments included).
macro_rules! variadic_export {
    ($(#[$doc:meta])* $name:ident => $target:ident) => {
        $(#[$doc])*
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {}", sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {}", sym $target);
        }
    };
}

variadic_export!(
    /// execl(3): `execl(path, arg, ..., NULL)`.
    execl => uipc_execl
);
variadic_export!(
    /// execle(3): `execle(path, arg, ..., NULL, envp)`.
    execle => uipc_execle
);
variadic_export!(
    /// execlp(3): `execlp(file, arg, ..., NULL)`.
    execlp => uipc_execlp
);
