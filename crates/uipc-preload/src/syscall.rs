//! syscall(2): the generic system call wrapper, so that a program calling
//! `syscall(SYS_semop, ...)` and friends reaches uipc as through the C library's functions.
//!
//! SysV IPC numbers (semget, semop, semtimedop, semctl, msgget, msgsnd, msgrcv, msgctl, shmget,
//! shmat, shmdt, shmctl) go to the same exports as the C calls when `$UIPC_SOCKET` is set; the
//! timer numbers go to the timer service with the kernel's ABI (an `int` id, SIGEV_THREAD as a
//! plain signal) when `$UIPC_TIMERS` is `1`, as do execve and execveat (which carry the timer
//! id counter to the new image, `exec.rs`); the file lock numbers (fcntl, flock, close, dup2,
//! dup3, close_range) go to the lock code (`locks/by_syscall.rs`) when `$UIPC_LOCKS` is `1`.
//! munmap, mremap and remap_file_pages go to the library's exports of those calls, which
//! follow shared-memory attachments (`unmap.rs`, `remap.rs`).
//! Each returns as syscall(3) does: the result, or -1 with errno. Every other number, and
//! these ones when not routed, goes to the C library's `syscall` with all six arguments
//! unchanged ([`crate::kernel`], which is also the library's own way to the kernel).
//!
//! The number is matched before anything else is looked at: Rust's own locks call
//! `syscall(SYS_futex, ...)`, and that path must take no lock and allocate nothing.
//!
//! ABI: `syscall` is variadic in C. On x86-64 and aarch64 variadic integer and pointer
//! arguments travel in the same registers as fixed ones (x86-64: rdi, rsi, rdx, rcx, r8, r9;
//! aarch64: x0-x7), so a function with seven fixed `long` parameters receives them, and reads
//! harmless register contents for the ones a caller did not pass. ABIs that pass variadic
//! arguments differently (on the stack, as Apple's arm64, or in pairs of registers for 64-bit
//! values, as 32-bit ARM and MIPS o32) would need a real variadic definition
//! (`c_variadic`, unstable) or an assembly trampoline.

use crate::kernel::sys as pass;
use crate::timer::{self, Abi};
use libc::{c_int, c_long, c_void};

fn is_ipc(nr: c_long) -> bool {
    matches!(
        nr,
        libc::SYS_semget
            | libc::SYS_semop
            | libc::SYS_semtimedop
            | libc::SYS_semctl
            | libc::SYS_msgget
            | libc::SYS_msgsnd
            | libc::SYS_msgrcv
            | libc::SYS_msgctl
            | libc::SYS_shmget
            | libc::SYS_shmat
            | libc::SYS_shmdt
            | libc::SYS_shmctl
    )
}

fn is_timer(nr: c_long) -> bool {
    matches!(
        nr,
        libc::SYS_timer_create
            | libc::SYS_timer_settime
            | libc::SYS_timer_gettime
            | libc::SYS_timer_getoverrun
            | libc::SYS_timer_delete
    )
}

/// SysV IPC through the C exports (the kernel's argument types are theirs on 64-bit Linux).
fn ipc(nr: c_long, a: [c_long; 6]) -> c_long {
    let (i, p) = (
        |k: usize| a[k] as c_int,
        |k: usize| a[k] as usize as *mut c_void,
    );
    match nr {
        libc::SYS_semget => crate::sem::semget(i(0), i(1), i(2)).into(),
        libc::SYS_semop => crate::sem::semop(i(0), p(1), a[2] as usize).into(),
        libc::SYS_semtimedop => crate::sem::semtimedop(i(0), p(1), a[2] as usize, p(3)).into(),
        libc::SYS_semctl => crate::sem::semctl(i(0), i(1), i(2), a[3] as usize).into(),
        libc::SYS_msgget => crate::msg::msgget(i(0), i(1)).into(),
        libc::SYS_msgsnd => crate::msg::msgsnd(i(0), p(1), a[2] as usize, i(3)).into(),
        libc::SYS_msgrcv => crate::msg::msgrcv(i(0), p(1), a[2] as usize, a[3], i(4)) as c_long,
        libc::SYS_msgctl => crate::msg::msgctl(i(0), i(1), p(2)).into(),
        libc::SYS_shmget => crate::shm::shmget(i(0), a[1] as usize, i(2)).into(),
        libc::SYS_shmat => crate::shm::shmat(i(0), p(1), i(2)) as c_long,
        libc::SYS_shmdt => crate::shm::shmdt(p(0)).into(),
        _ => crate::shm::shmctl(i(0), i(1), p(2)).into(),
    }
}

/// The timer system calls with the kernel's ABI.
fn timers(nr: c_long, a: [c_long; 6]) -> c_long {
    // The first argument: the clock for timer_create, the timer id for the others.
    let first = a[0] as c_int;
    let id = first;
    crate::guard::guard(|| match nr {
        libc::SYS_timer_create => timer::create(first, a[1] as usize, a[2] as usize, Abi::Kernel),
        libc::SYS_timer_settime => timer::settime(id, a[1] as c_int, a[2] as usize, a[3] as usize),
        libc::SYS_timer_gettime => timer::gettime(id, a[1] as usize),
        libc::SYS_timer_getoverrun => timer::getoverrun(id),
        _ => timer::delete(id),
    }) as c_long
}

/// syscall(2); see the module doc.
#[no_mangle]
pub extern "C-unwind" fn syscall(
    nr: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let args = [a1, a2, a3, a4, a5, a6];
    if is_ipc(nr) && crate::conn::enabled() {
        return ipc(nr, args);
    }
    if nr == libc::SYS_remap_file_pages {
        let p = |k: usize| args[k] as usize;
        return crate::remap::remap_file_pages(
            p(0) as *mut c_void,
            p(1),
            a3 as c_int,
            p(3),
            a5 as c_int,
        )
        .into();
    }
    if nr == libc::SYS_munmap {
        return crate::unmap::munmap(a1 as *mut c_void, a2 as usize).into();
    }
    if nr == libc::SYS_mremap {
        let p = |k: usize| args[k] as usize;
        return crate::remap::mremap(
            p(0) as *mut c_void,
            p(1),
            p(2),
            a4 as c_int,
            p(4) as *mut c_void,
        ) as c_long;
    }
    if is_timer(nr) && timer::routed() {
        return timers(nr, args);
    }
    if crate::exec::is_exec_number(nr) {
        return crate::exec::syscall_routed(nr, args);
    }
    if crate::locks::is_lock_number(nr) && nr != libc::SYS_fcntl && nr != libc::SYS_flock {
        crate::slots::descriptors_may_change();
    }
    if crate::locks::is_lock_number(nr) && crate::locks::routing() {
        return crate::locks::syscall_routed(nr, args);
    }
    if crate::vfork::is_child_number(nr) {
        crate::vfork::unseen_child_ahead();
    }
    if crate::ids::is_id_number(nr) {
        crate::ids::may_change();
        let r = pass(nr, args);
        crate::ids::may_change();
        return r;
    }
    pass(nr, args)
}
