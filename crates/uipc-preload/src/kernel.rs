//! The library's own way to the kernel: the C library's `syscall`, found with
//! `dlsym(RTLD_NEXT)`, never the `syscall` this library exports.
//!
//! Why not `libc::syscall`: in this cdylib the C library's `syscall` and our export are the
//! same dynamic symbol, and the library's references to it go through its GOT
//! (`R_X86_64_GLOB_DAT syscall`), which the dynamic linker fills with the first definition
//! in the global scope, ours under `LD_PRELOAD`. So `libc::syscall(SYS_close, fd)` inside the
//! library is the program's `syscall(SYS_close, fd)` and, with the file lock numbers routed
//! (`syscall.rs`), would come back into the lock code. Every call the library makes to the
//! kernel with a number that `syscall.rs` routes goes through [`sys`] instead. (Numbers that
//! are never routed, getpid or fstat, may keep using `libc::syscall`, which passes them on.)
//!
//! The definition is looked up when the library is loaded ([`prepare`], from its
//! constructor), so that no lookup (`dlsym` locks and may allocate) happens later in a
//! forked or vforked child or a signal handler; a call before that looks it up then.
//!
//! Result: syscall(3)'s, the value or -1 with errno set (ENOSYS if the C library has no
//! `syscall`).
//!
//! The module is also the library's one `dlsym(RTLD_NEXT)` ([`next_symbol`]), through which
//! every module finds the C library's definitions of the functions it exports.

use libc::{c_int, c_long, c_void};
use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

type SyscallFn = unsafe extern "C" fn(c_long, ...) -> c_long;

/// The C library's `syscall` (0: not looked up yet).
static NEXT_SYSCALL: AtomicUsize = AtomicUsize::new(0);

/// The next definition of `name` (the C library's, not this library's export), 0 if none.
/// Every module finds the C library's functions through this or [`next_symbol_cached`].
pub(crate) fn next_symbol(name: &CStr) -> usize {
    // SAFETY: looks up the next definition of a NUL-terminated symbol name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// Declares `struct $name` with one `usize` per C library function, its address by
/// [`next_symbol`] (0 if the C library has none), and `fn $get` that looks them all up on its
/// first call. A field is named after its symbol unless `= "symbol"` names another. Callers
/// make that first call from the library's constructor, so that no lookup (`dlsym` locks and
/// may allocate) happens later in a forked child or a signal handler.
macro_rules! next_symbols {
    ($(#[$doc:meta])* struct $name:ident, fn $get:ident {
        $($field:ident $(= $symbol:literal)?),* $(,)?
    }) => {
        $(#[$doc])*
        struct $name {
            $($field: usize,)*
        }

        fn $get() -> &'static $name {
            static ONCE: std::sync::OnceLock<$name> = std::sync::OnceLock::new();
            ONCE.get_or_init(|| $name {
                $($field: $crate::kernel::next_symbol_named(
                    $crate::kernel::next_symbols!(@name $field $($symbol)?),
                ),)*
            })
        }
    };
    (@name $field:ident) => {
        concat!(stringify!($field), "\0")
    };
    (@name $field:ident $symbol:literal) => {
        concat!($symbol, "\0")
    };
}
pub(crate) use next_symbols;

/// [`next_symbol`] of a NUL-terminated name (0 if `name` is not one).
pub(crate) fn next_symbol_named(name: &str) -> usize {
    CStr::from_bytes_with_nul(name.as_bytes()).map_or(0, next_symbol)
}

/// [`next_symbol`], cached in `slot` (0: not looked up yet).
pub(crate) fn next_symbol_cached(slot: &AtomicUsize, name: &CStr) -> usize {
    let mut p = slot.load(Ordering::Relaxed);
    if p == 0 {
        p = next_symbol(name);
        slot.store(p, Ordering::Relaxed);
    }
    p
}

fn next_syscall() -> Option<SyscallFn> {
    let p = next_symbol_cached(&NEXT_SYSCALL, c"syscall");
    // SAFETY: a non-null result is the C library's `long syscall(long, ...)`.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, SyscallFn>(p) })
}

/// Looks up the C library's `syscall`; called when the library is loaded.
pub fn prepare() {
    let _ = next_syscall();
}

/// System call `nr` with six arguments (unused ones are ignored by the kernel), as the C
/// library makes it.
pub fn sys(nr: c_long, a: [c_long; 6]) -> c_long {
    match next_syscall() {
        // SAFETY: the C library's syscall with a number and six integer arguments; what the
        // arguments point to is the caller's obligation, as with syscall(2) itself.
        Some(f) => unsafe { f(nr, a[0], a[1], a[2], a[3], a[4], a[5]) },
        None => {
            // SAFETY: writes this thread's errno.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
    }
}

/// [`sys`] with up to six arguments, each converted with `as c_long` (the rest are 0).
macro_rules! kernel_sys {
    ($nr:expr $(, $arg:expr)* $(,)?) => {{
        let given = [$($arg as libc::c_long),*];
        let mut args = [0 as libc::c_long; 6];
        args[..given.len()].copy_from_slice(&given);
        $crate::kernel::sys($nr, args)
    }};
}
pub(crate) use kernel_sys;

/// The kernel's munmap, never this library's export (`unmap.rs`): 0, or -1 with errno set.
///
/// # Safety
/// Nothing uses the memory in `addr..addr + len` afterwards, as with munmap(2) itself.
pub unsafe fn kernel_munmap(addr: *mut c_void, len: usize) -> c_int {
    kernel_sys!(libc::SYS_munmap, addr, len) as c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers `syscall.rs` routes while the library itself may be making them.
    const ROUTED: [&str; 14] = [
        "SYS_fcntl",
        "SYS_flock",
        "SYS_close",
        "SYS_dup2",
        "SYS_dup3",
        "SYS_close_range",
        "SYS_execve",
        "SYS_execveat",
        "SYS_timer_create",
        "SYS_timer_settime",
        "SYS_timer_gettime",
        "SYS_timer_getoverrun",
        "SYS_timer_delete",
        "SYS_munmap",
    ];

    fn sources(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }

    #[test]
    fn the_library_never_makes_a_routed_number_through_libc_syscall() {
        let mut files = Vec::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        assert!(files.len() > 10, "the sources were not found");
        for (path, text) in files {
            // Code only (comments may name such calls); a call's first argument follows
            // `libc::syscall(` and whitespace.
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            // The C library's munmap is this library's export (`unmap.rs`); the name is
            // split so that this line does not match itself.
            assert!(
                !code.contains(concat!("libc::", "munmap(")),
                "{}: libc::munmap reaches our own export; use kernel::kernel_munmap",
                path.display()
            );
            for (at, _) in code.match_indices("libc::syscall(") {
                let rest = code[at + "libc::syscall(".len()..].trim_start();
                let number = rest.split([',', ')']).next().unwrap_or("").trim();
                let name = number.trim_start_matches("libc::");
                assert!(
                    !ROUTED.contains(&name),
                    "{}: libc::syscall({number}) reaches our own export; use kernel_sys!",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn sys_reaches_the_kernel_with_syscall3_results() {
        let me = kernel_sys!(libc::SYS_getpid);
        // SAFETY: plain getter.
        assert_eq!(me, c_long::from(unsafe { libc::getpid() }));
        // SAFETY: writes this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        assert_eq!(kernel_sys!(libc::SYS_close, -1), -1);
        // SAFETY: reads this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EBADF);
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: two descriptors into a live array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        assert_eq!(
            kernel_sys!(libc::SYS_fcntl, fds[0], libc::F_SETFD, libc::FD_CLOEXEC),
            0
        );
        assert_eq!(
            kernel_sys!(libc::SYS_fcntl, fds[0], libc::F_GETFD),
            c_long::from(libc::FD_CLOEXEC)
        );
        assert_eq!(kernel_sys!(libc::SYS_close, fds[0]), 0);
        assert_eq!(kernel_sys!(libc::SYS_close, fds[1]), 0);
    }
}
